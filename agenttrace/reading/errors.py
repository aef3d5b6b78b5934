"""The report of a record that could not be loaded, and the default way of giving it.

Every reader in this package turns one bad record (or one unreadable file) into one
:class:`TrajectoryLoadError` handed to ``on_error``; :func:`warn_load_error`, the default,
makes it a warning and reading goes on.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

ErrorHandler = Callable[["TrajectoryLoadError"], Any]


class TrajectoryLoadError(ValueError):
    """One record (or a whole file) that could not be loaded; says which file and where.

    ``line`` is the 1-based line of a JSONL file, the 0-based row of a Parquet file, or None
    when the whole file failed. ``torn`` is True for a record cut short by a crash mid-write.
    ``field`` is the path of the field that broke the schema (``length``,
    ``steps[2].llm_calls[0].finish_reasons``; see docs/trajectory-format.md, "Validation"),
    None when the record as a whole is unreadable. The record was skipped.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        line: int | None,
        message: str,
        *,
        torn: bool = False,
        field: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        self.torn = torn
        self.field = field
        super().__init__(self._text())

    def _text(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.message}"
        if self.path.endswith(".parquet"):
            return f"{self.path}: row {self.line}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"

    def __reduce__(self) -> tuple:
        return (_rebuild_load_error, (self.path, self.line, self.message, self.torn, self.field))


def _rebuild_load_error(
    path: str, line: int | None, message: str, torn: bool, field: str | None = None
) -> TrajectoryLoadError:
    return TrajectoryLoadError(path, line, message, torn=torn, field=field)


def record_error(
    path: str | os.PathLike, line: int | None, exc: BaseException, *, prefix: str = ""
) -> TrajectoryLoadError:
    """The load error of one record that raised ``exc`` while it was read or rebuilt: a
    schema violation names its field, nesting past the recursion limit is said as such."""
    if isinstance(exc, RecursionError):
        message = "nested too deeply to read (over Python's recursion limit)"
    else:
        message = describe_error(exc)
    return TrajectoryLoadError(path, line, prefix + message, field=getattr(exc, "field", None))


def describe_error(exc: BaseException) -> str:
    """``exc`` as the message of a load error (a KeyError says which key is missing)."""
    text = str(exc)
    if isinstance(exc, KeyError):
        return f"missing key {text}"
    return text or type(exc).__name__


def warn_load_error(error: TrajectoryLoadError) -> None:
    """The default ``on_error``: a warning naming file and line, then reading goes on."""
    warnings.warn(str(error), UserWarning, stacklevel=3)
