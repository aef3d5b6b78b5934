"""Reading OTLP/JSON span files: agenttrace's ``spans.jsonl`` and the Collector ``file``
exporter's ``format: json`` output, as a stream of span records.

A source is a file, a folder (its ``*.json``, ``*.jsonl``, ``*.ndjson`` files, gzipped too, in
rotation order), a glob or a list of these (:mod:`agenttrace.storage.span_paths` finds them).
Files are read line by line (:mod:`agenttrace.storage.otlp_json_lines`) in constant memory;
gzip is recognised by suffix or content, a file that is one pretty-printed document is read
whole, and one in the Collector's length-prefixed format is refused with a word on what reads
it (:func:`~agenttrace.storage.otlp_proto.read_otlp_proto`).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

from agenttrace.storage.errors import ErrorHandler, ReadPosition, SpanFormatError, warn
from agenttrace.storage.otlp_json_lines import line_lists, line_records, safe_lines
from agenttrace.storage.otlp_proto import decode_proto
from agenttrace.storage.span_paths import (
    ZSTD_MAGIC,
    Source,
    is_length_prefixed,
    resolve_span_paths,
    rotation_order,
)
from agenttrace.trajectory.records import SpanRecord

__all__ = ["read_otlp_json"]

_SPAN_FILE = re.compile(r"[^.].*\.(json|jsonl|ndjson)(\.gz)?", re.IGNORECASE)
_GZIP_MAGIC = b"\x1f\x8b"
#: Bytes looked at to tell a length-prefixed file from text lines (a whole first frame).
_SNIFF_BYTES = 1 << 16
_READ_BUFFER = 1 << 20  # lines are export batches of up to megabytes; 8 KiB reads cost time


def _directory_files(folder: Path) -> list[Path]:
    # (resolve_span_paths keeps those that hold spans: a run's trajectories.jsonl is left out)
    return sorted(
        (p for p in folder.iterdir() if _SPAN_FILE.fullmatch(p.name) and p.is_file()),
        key=rotation_order,
    )


def _resolve(source: Source) -> list[Path]:
    return resolve_span_paths(
        source,
        folder_files=_directory_files,
        order=rotation_order,
        kind="span files (*.json, *.jsonl, *.ndjson, optionally .gz)",
    )


def read_otlp_json(
    source: Source,
    *,
    on_error: ErrorHandler | None = None,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    """Stream the span records of OTLP/JSON files, as written by us or the Collector.

    ``source`` is a file, a directory (its ``*.json``, ``*.jsonl``, ``*.ndjson`` files, also
    gzipped, in rotation order), a glob, or a list of these. Files are read line by line in
    constant memory; gzip is recognised by suffix or content. Unreadable lines and spans go to
    ``on_error`` as in :func:`~agenttrace.storage.iter_records`. A file that is a single
    pretty-printed document (first line ``{``) is read whole. Raises FileNotFoundError at once
    if nothing matches. ``position`` as in :func:`~agenttrace.storage.iter_records`.
    """
    paths = _resolve(source)  # eagerly, so a wrong path fails here and not at first next()
    report = on_error or warn
    return chain.from_iterable(_read_paths(paths, report, position))  # see iter_records


def _read_paths(
    paths: list[Path],
    report: ErrorHandler,
    position: ReadPosition | None = None,
) -> Iterator[list[SpanRecord]]:
    for path in paths:
        yield from _read_file(path, report, position)


def _read_file(
    path: Path, report: ErrorHandler, position: ReadPosition | None = None
) -> Iterator[list[SpanRecord]]:
    """The records of one file, a list per line."""
    name = str(path)
    if position is not None:
        position.source, position.line = name, None
    with open(path, "rb", buffering=_READ_BUFFER) as raw:
        stream: io.BufferedIOBase = raw
        compressed = path.suffix.lower() == ".gz" or raw.peek(2)[:2] == _GZIP_MAGIC
        try:
            if compressed:
                stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
            head = stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(stream, "peek") else b""
        except (OSError, EOFError, zlib.error) as error:
            report(SpanFormatError("unreadable gzip file: %s" % error, source=name))
            return
        if _is_binary(head):
            report(
                SpanFormatError(
                    "not OTLP/JSON lines (starts with bytes %r): the Collector's length-prefixed "
                    "format (`format: proto` or compression) is read by read_otlp_proto" % head,
                    source=name,
                )
            )
            return
        lines = safe_lines(stream, name, report)
        first = next(lines, None)
        if first is None:
            return
        second = next(lines, None)
        if _starts_a_document(first, second):  # one pretty-printed document (an API answer)
            text = first + (second or b"") + b"".join(lines)
            records = line_records(text, 1, name, report, last=False)
            if position is not None:
                position.line = 1
            yield records
            return
        head = (first,) if second is None else (first, second)
        yield from line_lists(_chain(head, lines), name, report, position)


def _starts_a_document(first: bytes, second: bytes | None) -> bool:
    """Whether a file opens like pretty-printed JSON: ``{`` alone, then an indented line.

    A torn line that happens to be just ``{`` followed by ordinary lines is not one, so it
    costs only itself.
    """
    if first.strip() not in (b"{", b"["):
        return False
    return second is None or second[:1] in (b" ", b"\t", b'"', b"}", b"]", b"\r", b"\n")


def _is_binary(head: bytes) -> bool:
    """Whether a file's first bytes are binary (zstd, or the Collector's length-prefixed
    frames), not text lines.

    Only that is refused as a whole, and only when sure: a zstd stream, or a first frame whose
    length fits in ``head`` and whose payload decodes. Anything else is read line by line, so a
    damaged first line (even one starting with a zero byte) does not cost the rest of the file.
    """
    if head[:4] == ZSTD_MAGIC:
        return True
    length = int.from_bytes(head[:4], "big")
    if head[:1] != b"\x00" or length == 0 or len(head) < 4 + length:
        return False
    if not is_length_prefixed(head):
        return False
    problems: list[SpanFormatError] = []
    try:
        decode_proto(head[4 : 4 + length], on_error=problems.append)
    except ImportError:  # a zstd frame without the zstandard package: binary all the same
        return True
    return not problems


def _chain(head: tuple[bytes, ...], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from rest
