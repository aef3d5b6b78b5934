"""Trajectories from JSON text files: JSON Lines (what :class:`~agenttrace.sinks.JsonlSink`
writes, gzipped or not) and ``.json`` files (one trajectory, or a list of them, as
:class:`~agenttrace.sinks.JsonDirSink` writes).

One bad line costs that line only. A line cut short by a writer that stopped mid-write is told
apart from one that was never valid JSON (``TrajectoryLoadError.torn``).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from agenttrace.reading.errors import (
    ErrorHandler,
    TrajectoryLoadError,
    describe_error,
    record_error,
)
from agenttrace.trajectory.model import Trajectory


def read_jsonl(path: Path, report: ErrorHandler) -> Iterator[Trajectory]:
    """The trajectories of one JSON Lines file (``.gz``: gzipped), one per line."""
    for _, trajectory in read_jsonl_lines(path, report):
        yield trajectory


class LineCursor:
    """Where a read of a growing JSON Lines file got to: the byte after its last whole line
    (bad and blank lines included), so the next read starts there."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset


def read_jsonl_lines(
    path: Path,
    report: ErrorHandler,
    *,
    start: int = 0,
    whole_lines_only: bool = False,
    cursor: LineCursor | None = None,
) -> Iterator[tuple[int, Trajectory]]:
    """(offset of its line, trajectory) for each line from byte ``start`` on.

    The offsets let a reader come back for one record (:func:`read_jsonl_at`) or, with a
    ``cursor``, go on from where it stopped while a writer appends (``whole_lines_only``: a
    last line without its newline is left for later instead of reported torn). Line numbers
    in errors count from ``start``. For a ``.gz`` file offsets count uncompressed bytes.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    line_no = 0
    offset = start
    try:
        with opener(path, "rb") as handle:
            if start:
                handle.seek(start)
            for raw in handle:
                line_no += 1
                at, offset = offset, offset + len(raw)
                ends_line = raw.endswith(b"\n")
                if whole_lines_only and not ends_line:
                    return
                if cursor is not None:
                    cursor.offset = offset
                trajectory = _decode_line(path, line_no, raw, report, last=not ends_line)
                if trajectory is not None:
                    yield at, trajectory
    except (OSError, EOFError, zlib.error) as exc:
        where = None if line_no == 0 else line_no + 1
        report(TrajectoryLoadError(path, where, f"cannot read file: {describe_error(exc)}"))


def read_jsonl_at(path: Path, offset: int, report: ErrorHandler) -> Trajectory | None:
    """The trajectory on the line at byte ``offset`` (from :func:`read_jsonl_lines`)."""
    for _, trajectory in read_jsonl_lines(path, report, start=offset):
        return trajectory
    return None


def _decode_line(
    path: Path, line_no: int, raw: bytes, report: ErrorHandler, *, last: bool
) -> Trajectory | None:
    """One line's trajectory, or None (blank, or bad: reported)."""
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        report(TrajectoryLoadError(path, line_no, f"not UTF-8 text: {exc}"))
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        report(_json_error(path, line_no, text, exc, last=last))
        return None
    except RecursionError as exc:  # this record only, not the rest of the file
        report(record_error(path, line_no, exc))
        return None
    try:
        return Trajectory.from_dict(data)
    except Exception as exc:  # one bad record never costs the others
        report(record_error(path, line_no, exc))
        return None


def _json_error(
    path: Path, line_no: int, text: str, exc: ValueError, *, last: bool
) -> TrajectoryLoadError:
    if last:
        return TrajectoryLoadError(
            path,
            line_no,
            "torn last line (no trailing newline, incomplete JSON; the writer probably "
            f"stopped mid-write), skipped: {exc}",
            torn=True,
        )
    if _looks_truncated(text, exc):
        return TrajectoryLoadError(
            path,
            line_no,
            f"torn record (JSON ends early, left by an interrupted write), skipped: {exc}",
            torn=True,
        )
    return TrajectoryLoadError(path, line_no, f"not valid JSON: {exc}")


_LITERALS = ("true", "false", "null")
_NUMBER_TAIL = re.compile(r"-|[.eE][-+]?")


def _looks_truncated(text: str, exc: ValueError) -> bool:
    """True when the JSON error is "input ended early", the mark of a torn write."""
    if str(exc).startswith("Unterminated string"):
        return True
    position = getattr(exc, "pos", None)
    if position is None:
        return False
    rest = text.rstrip()[position:]
    return (
        rest == ""
        or any(word.startswith(rest) for word in _LITERALS)
        or _NUMBER_TAIL.fullmatch(rest) is not None
    )


def read_json_file(path: Path, report: ErrorHandler) -> Iterator[Trajectory]:
    """A ``.json`` file holds one trajectory object, or a list of them."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        report(record_error(path, None, exc, prefix="cannot read JSON file: "))
        return
    if isinstance(data, list):
        for index, item in enumerate(data):
            try:
                yield Trajectory.from_dict(item)
            except Exception as exc:
                report(record_error(path, None, exc, prefix=f"item {index}: "))
        return
    try:
        yield Trajectory.from_dict(data)
    except Exception as exc:
        report(record_error(path, None, exc))
