"""OTLP/JSON lines to span records: one export request a line, each problem reported at its
line.

Blank lines are skipped; a line that is not JSON costs only itself, and a last line without
its newline that is not JSON is reported as torn (its writer stopped mid-write). A
:class:`~agenttrace.storage.errors.ReadPosition`, when given, names the line of the records
handed out last. The span file reader (:mod:`agenttrace.storage.otlp_json_files`) and the
zstd streams of the Collector's compressed files (:mod:`agenttrace.storage.otlp_proto`) read
their lines here.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

from agenttrace.storage.errors import (
    TOO_DEEP,
    ErrorHandler,
    ReadPosition,
    SpanDecodeError,
    SpanFormatError,
    warn,
)
from agenttrace.storage.otlp_json_decode import decode_text
from agenttrace.storage.span_checks import check_values
from agenttrace.trajectory.records import SpanRecord

__all__ = ["iter_records", "line_lists", "line_records", "safe_lines"]

_NO_LINE = object()


def iter_records(
    lines: Iterable[str | bytes],
    *,
    source: str = "<lines>",
    on_error: ErrorHandler | None = None,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    """Records of OTLP/JSON lines, skipping what cannot be read instead of stopping.

    ``on_error`` gets one :class:`SpanFormatError` per unreadable line and per unreadable
    span (naming ``source``, the line number and the span index); by default each becomes a
    :class:`SpanFormatWarning`. A last line without its newline that is not valid JSON is
    reported as torn (its writer stopped mid-write). Blank lines are skipped. ``position``,
    when given, names the line of the records handed out last.
    """
    # Lines are decoded one at a time into lists that chain hands out at C speed: a generator
    # per record would cost more than a tenth of the reading.
    return chain.from_iterable(line_lists(lines, source, on_error or warn, position))


def line_lists(
    lines: Iterable[str | bytes],
    source: str,
    report: ErrorHandler,
    position: ReadPosition | None = None,
) -> Iterator[list[SpanRecord]]:
    """The records of each line (see :func:`iter_records`), a list per line."""
    number = 0
    pending: Any = _NO_LINE
    if position is not None:
        position.source = source
    for line in lines:
        if pending is not _NO_LINE:
            records = line_records(pending, number, source, report, last=False)
            if position is not None:
                position.line = number
            yield records
        pending = line
        number += 1
    if pending is not _NO_LINE:
        records = line_records(pending, number, source, report, last=True)
        if position is not None:
            position.line = number
        yield records


def line_records(
    line: str | bytes,
    number: int,
    source: str,
    report: ErrorHandler,
    *,
    last: bool,
) -> list[SpanRecord]:
    """The records of line ``number`` of ``source``; its problems reported there."""
    if not line or line.isspace():  # (not strip(): that copies a line of megabytes)
        return []

    def located(error: SpanFormatError) -> None:
        report(error.located(source, number))

    try:
        records = decode_text(line, located)
    except ValueError as error:
        newline = b"\n" if isinstance(line, bytes) else "\n"
        if last and not line.endswith(newline):  # type: ignore[arg-type]
            reason = "torn last line (no newline at the end and not valid JSON; the "
            reason += "writer probably stopped mid-write), skipped"
        else:
            reason = "invalid JSON, line skipped: %s" % error
        report(SpanFormatError(reason, source=source, line=number))
        return []
    except RecursionError:
        report(SpanDecodeError(TOO_DEEP, source=source, line=number))
        return []
    return check_values(records, report, source, number)


def safe_lines(
    stream: io.BufferedIOBase,
    name: str,
    report: ErrorHandler,
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error),
) -> Iterator[bytes]:
    """The lines of ``stream``; a truncated or corrupt compressed stream (one of ``errors``
    while reading) ends them with one report."""
    count = 0
    try:
        for line in stream:
            count += 1
            yield line
    except errors as error:
        report(
            SpanFormatError(
                "compressed data ends or breaks after line %d: %s" % (count, error), source=name
            )
        )
