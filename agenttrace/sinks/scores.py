"""Score records on disk: late scores, written beside the trajectories, and their names.

A score that arrives after its episode's trajectory was written (agenttrace.trajectory.scores)
is appended as one JSON line to ``scores.jsonl`` in the run folder (or a row of the Parquet
sinks' scores table); a trajectory file is never rewritten. The loaders merge them by episode
id (:mod:`agenttrace.reading.scores`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agenttrace.trajectory.scores import Score

SCORES_BASENAME = "scores"
SCORES_SUFFIX = ".scores.jsonl"


def is_score_file(path: Path) -> bool:
    """A scores file: ``scores*.jsonl``, ``scores-NNNNN.parquet`` (the Parquet sinks' scores
    table) or ``<name>.scores.jsonl``."""
    name = path.name
    return (
        name.startswith(SCORES_BASENAME) and name.endswith((".jsonl", ".parquet"))
    ) or name.endswith(SCORES_SUFFIX)


def score_schema() -> Any:
    """The scores table (Parquet): scores that came after their episode was written."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("type", pa.string()),
            pa.field("episode_id", pa.string()),
            pa.field("name", pa.string()),
            pa.field("value", pa.float64()),
            pa.field("step", pa.int64()),
            pa.field("comment", pa.string()),
            pa.field("time", pa.int64()),
        ]
    )


def score_batch(score: Score) -> Any:
    """One score as a row of the scores table."""
    import pyarrow as pa

    row, schema = score.to_dict(), score_schema()
    return pa.RecordBatch.from_arrays(
        [pa.array([row[field.name]], type=field.type) for field in schema], schema=schema
    )


class ScoreLog:
    """Appends score records to ``folder/scores.jsonl`` (or ``name``), made with the first."""

    def __init__(
        self, folder: str | os.PathLike, *, name: str = f"{SCORES_BASENAME}.jsonl"
    ) -> None:
        self.path = Path(folder) / name
        self._handle: Any = None
        self.written = 0

    def write(self, score: Score) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - close()
        line = json.dumps(score.to_dict(), ensure_ascii=False, allow_nan=False)
        self._handle.write(line + "\n")
        self.written += 1

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self.flush()
            self._handle.close()
            self._handle = None
