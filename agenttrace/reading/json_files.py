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
    opener = gzip.open if path.name.endswith(".gz") else open
    line_no = 0
    try:
        with opener(path, "rb") as handle:
            for raw in handle:
                line_no += 1
                ends_line = raw.endswith(b"\n")
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    report(TrajectoryLoadError(path, line_no, f"not UTF-8 text: {exc}"))
                    continue
                try:
                    data = json.loads(text)
                except ValueError as exc:
                    report(_json_error(path, line_no, text, exc, last=not ends_line))
                    continue
                except RecursionError as exc:  # this record only, not the rest of the file
                    report(record_error(path, line_no, exc))
                    continue
                try:
                    trajectory = Trajectory.from_dict(data)
                except Exception as exc:  # one bad record never costs the others
                    report(record_error(path, line_no, exc))
                    continue
                yield trajectory
    except (OSError, EOFError, zlib.error) as exc:
        where = None if line_no == 0 else line_no + 1
        report(TrajectoryLoadError(path, where, f"cannot read file: {describe_error(exc)}"))


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
