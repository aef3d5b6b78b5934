"""Score records: late scores on disk, and finding them again when trajectories are loaded.

A score that arrives after its episode's trajectory was written (agenttrace.trajectory.scores)
is appended as one JSON line to ``scores.jsonl`` in the run folder; a trajectory file is never
rewritten. Loaders merge the scores by episode id: every ``scores*.jsonl`` (and
``<name>.scores.jsonl`` beside a trajectory file ``<name>.jsonl``) found where the trajectories
are read from, including run folders that hold scores only (a scoring process's run).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agenttrace.sinks.names import split_suffix
from agenttrace.trajectory.scores import Score, score_from_dict

logger = logging.getLogger("agenttrace")

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


def score_files_for(sources: Iterable[Path], trajectory_files: Iterable[Path]) -> list[Path]:
    """The score files that go with a read: those under each folder named, and those beside
    each trajectory file read."""
    found: dict[Path, None] = {}
    for source in sources:
        if source.is_dir():
            for path in sorted(source.rglob(f"*{SCORES_BASENAME}*")):
                if is_score_file(path) and path.is_file():
                    found[path] = None
    for path in trajectory_files:
        folder = path.parent
        for candidate in sorted(folder.glob(f"*{SCORES_BASENAME}*")):
            if is_score_file(candidate) and (
                candidate.name.startswith(SCORES_BASENAME)
                or candidate.name == split_suffix(path.name)[0] + SCORES_SUFFIX
            ):
                found[candidate] = None
    return list(found)


def read_scores(paths: Iterable[Path], report: Any = None) -> dict[str, list[Score]]:
    """Every score record in ``paths`` by episode id; a bad line is reported (a
    :class:`~agenttrace.sinks.files.TrajectoryLoadError` to ``report``) and skipped."""
    from agenttrace.sinks.files import TrajectoryLoadError, warn_load_error

    report = report or warn_load_error
    scores: dict[str, list[Score]] = {}
    seen: set[Score] = set()  # (a score kept in two places, JSONL and Parquet, counts once)

    def add(score: Score) -> None:
        if score not in seen:
            seen.add(score)
            scores.setdefault(score.episode_id, []).append(score)

    for path in paths:
        if path.name.endswith(".parquet"):
            _read_parquet_scores(path, add, report)
            continue
        try:
            handle = open(path, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
        except OSError as exc:
            report(TrajectoryLoadError(path, None, f"cannot read score file: {exc}"))
            continue
        with handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    score = score_from_dict(json.loads(line))
                except (ValueError, RecursionError) as exc:
                    report(TrajectoryLoadError(path, number, f"not a score record: {exc}"))
                    continue
                add(score)
    return scores


def _read_parquet_scores(path: Path, add: Any, report: Any) -> None:
    from agenttrace.sinks.files import TrajectoryLoadError

    try:
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # (no pyarrow, or not a Parquet file: this file only)
        report(TrajectoryLoadError(path, None, f"cannot read scores table: {exc}"))
        return
    for number, row in enumerate(rows):
        try:
            add(score_from_dict({**row, "type": row.get("type") or "score"}))
        except ValueError as exc:
            report(TrajectoryLoadError(path, number, f"not a score record: {exc}"))
