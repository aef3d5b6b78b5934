"""One output file, written whole or not at all (``agenttrace export --out FILE``).

Rows go to ``.FILE.partial`` next to the target and the file is renamed into place by
:meth:`close`, so a file at the target path is always complete; an interrupted export leaves
only the ``.partial`` (removed by :meth:`discard`). ``.jsonl`` (``.jsonl.gz`` compressed)
takes JSON text lines; ``.parquet`` takes Arrow record batches of one schema.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO, Any

from agenttrace.sinks.jsonl import line_pieces
from agenttrace.sinks.names import split_suffix
from agenttrace.sinks.parquet import require_pyarrow
from agenttrace.sinks.scores import SCORES_SUFFIX, ScoreLog
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.scores import Score

SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")


def output_kind(path: str | os.PathLike) -> str:
    """``"jsonl"`` or ``"parquet"`` by the file's suffix; ValueError names the choices."""
    name = os.fspath(path).lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    raise ValueError(
        f"cannot tell the output format of {os.fspath(path)!r}: name it *.jsonl, "
        "*.jsonl.gz or *.parquet"
    )


class SingleFileWriter:
    """Lines or Arrow batches into one file, renamed into place when closed."""

    def __init__(self, path: str | os.PathLike, *, schema: Any = None) -> None:
        self.path = Path(path)
        self.kind = output_kind(self.path)
        self.partial = self.path.with_name(f".{self.path.name}.partial")
        # Late scores (of episodes written before their score came): a side file loaders
        # merge, <stem>.scores.jsonl, renamed into place with the output.
        self.scores_path = self.path.with_name(split_suffix(self.path.name)[0] + SCORES_SUFFIX)
        self._scores: ScoreLog | None = None
        self.rows = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._text: IO[bytes] | None = None
        self._parquet: Any = None
        if self.kind == "parquet":
            if schema is None:
                raise ValueError("a Parquet output needs its Arrow schema")
            _, pq = require_pyarrow()
            self._parquet = pq.ParquetWriter(self.partial, schema, compression="zstd")
        elif self.path.name.lower().endswith(".gz"):
            self._text = gzip.open(self.partial, "wb")  # type: ignore[assignment]  # noqa: SIM115
        else:
            self._text = open(self.partial, "wb")  # noqa: SIM115 - closed in close()

    def write_line(self, text: str) -> None:
        assert self._text is not None, "write_line is for .jsonl outputs"
        # backslashreplace turns a lone surrogate into its JSON escape (see files.utf8_safe).
        self._text.write(text.encode("utf-8", "backslashreplace") + b"\n")
        self.rows += 1

    def write_trajectory(self, trajectory: Trajectory) -> None:
        """A trajectory's line, written a piece at a time (a long episode is not held whole)."""
        assert self._text is not None, "write_trajectory is for .jsonl outputs"
        for piece in line_pieces(trajectory):
            self._text.write(piece)
        self.rows += 1

    def write_batch(self, batch: Any) -> None:
        assert self._parquet is not None, "write_batch is for .parquet outputs"
        self._parquet.write_batch(batch)
        self.rows += batch.num_rows

    def write_score(self, score: Score) -> None:
        if self._scores is None:
            self._scores = ScoreLog(self.partial.parent, name=f".{self.scores_path.name}.partial")
        self._scores.write(score)

    def close(self) -> Path:
        """Finish the file (and its scores) and move it into place; returns its path."""
        self._close_handles()
        os.replace(self.partial, self.path)
        if self._scores is not None:
            os.replace(self._scores.path, self.scores_path)
        return self.path

    def discard(self) -> None:
        """Stop without a result: the partial files are removed."""
        self._close_handles()
        self.partial.unlink(missing_ok=True)
        if self._scores is not None:
            self._scores.path.unlink(missing_ok=True)

    def _close_handles(self) -> None:
        if self._scores is not None:
            self._scores.close()
        if self._text is not None:
            self._text.close()
            self._text = None
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
