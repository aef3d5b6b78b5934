"""Loading finished trajectories from any source, late scores merged in.

:func:`iter_trajectories` reads what the trajectory sinks wrote (``*.jsonl``, ``*.jsonl.gz``,
``*.json``, ``*.parquet``) from the files a source names (:mod:`agenttrace.reading.sources`),
and applies the score records found beside them (:mod:`agenttrace.reading.scores`). One bad
record never costs the others: it becomes one :class:`TrajectoryLoadError` handed to
``on_error`` (by default a warning) and reading goes on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agenttrace.reading.errors import ErrorHandler, warn_load_error
from agenttrace.reading.json_files import read_json_file, read_jsonl
from agenttrace.reading.parquet import read_parquet
from agenttrace.reading.scores import read_scores, score_files_for
from agenttrace.reading.sources import Source, expand_source
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.scores import Score, apply_scores

#: Called before a read starts. The pipeline registers its flush here, so that loading right
#: after a traced loop in the same process sees every episode that loop finished (reading sits
#: below the pipeline, so it registers itself rather than being imported).
_before_reading: list[Callable[[], Any]] = []


def before_reading(hook: Callable[[], Any]) -> None:
    """Run ``hook`` before every :func:`iter_trajectories` (its failures are ignored)."""
    _before_reading.append(hook)


def _run_before_reading() -> None:
    for hook in _before_reading:
        # A flush that fails must not stop the user from reading what is there.
        with contextlib.suppress(Exception):
            hook()


def iter_trajectories(
    source: Source, *, on_error: ErrorHandler | None = None
) -> Iterator[Trajectory]:
    """Yield every trajectory in ``source``, skipping (and reporting) bad records.

    ``source`` is a file, a run folder (its ``trajectories*`` files in write order), a folder
    of runs such as ``agenttrace_runs/`` (every run folder under it, the run written last at
    the end), a glob pattern (of files or folders), or a list of those. A folder holding no
    ``trajectories*`` file is read for all its ``*.jsonl``, ``*.jsonl.gz``, ``*.json`` and
    ``*.parquet`` files; a run that wrote several formats is read from one (JSONL first).
    Each bad record gives one :class:`TrajectoryLoadError` to ``on_error`` (default: a
    warning); an ``on_error`` that raises stops the reading. A source naming no file raises
    FileNotFoundError at once.
    """
    report = on_error or warn_load_error
    _run_before_reading()
    if isinstance(source, (str, os.PathLike)):
        named = [Path(source)]
    elif isinstance(source, (list, tuple)):
        named = [Path(item) for item in source]
    else:  # (an iterator is used up by expand_source: its files still bring the scores beside them)
        named = []
    files = expand_source(source)  # before the first yield, so a bad source fails at the call
    score_files = score_files_for(named, files)
    scores = read_scores(score_files, report) if score_files else {}
    return _iter_files(files, report, scores)


def _iter_files(
    files: list[Path], report: ErrorHandler, scores: dict[str, list[Score]]
) -> Iterator[Trajectory]:
    """The trajectories of ``files``, with the late scores of each merged in."""
    for path in files:
        name = path.name
        if name.endswith(".parquet"):
            found = read_parquet(path, on_error=report)
        elif name.endswith(".json"):
            found = read_json_file(path, report)
        else:
            found = read_jsonl(path, report)
        if not scores:
            yield from found
            continue
        for trajectory in found:
            late = scores.get(trajectory.episode_id)
            if late:
                apply_scores(trajectory, late)
            yield trajectory


def load_trajectories(source: Source, *, on_error: ErrorHandler | None = None) -> list[Trajectory]:
    """All trajectories of ``source`` as a list; see :func:`iter_trajectories`."""
    return list(iter_trajectories(source, on_error=on_error))
