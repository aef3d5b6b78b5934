"""Finding the score records that go with a read, and reading them.

Late scores (:mod:`agenttrace.sinks.scores`) are merged by episode id: every ``scores*.jsonl``
and ``scores-NNNNN.parquet`` (and ``<name>.scores.jsonl`` beside a trajectory file
``<name>.jsonl``) found where the trajectories are read from, including run folders that hold
scores only (a scoring process's run).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agenttrace.reading.errors import TrajectoryLoadError, warn_load_error
from agenttrace.sinks.names import split_suffix
from agenttrace.sinks.scores import SCORES_BASENAME, SCORES_SUFFIX, is_score_file
from agenttrace.trajectory.scores import Score, score_from_dict


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
    :class:`~agenttrace.reading.errors.TrajectoryLoadError` to ``report``) and skipped."""
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
