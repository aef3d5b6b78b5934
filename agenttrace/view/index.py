"""The viewer's index of episodes: one small row per episode, the trajectory read again only
when it is opened.

:class:`EpisodeIndex` reads its sources through :mod:`agenttrace.reading` (the loaders behind
``inspect`` and ``export``) from a thread of its own, keeps for each episode a
:class:`EpisodeRow` (what the table, the counts and the plots need) and where the episode is
(file, and byte offset for JSON Lines), and drops the trajectory. Memory grows with the number
of episodes, not with their size. While following, it looks at the sizes of the files every
``poll`` seconds and reads only what was appended since (whole lines), new run folders and new
score files included; listeners hear of each batch of new rows.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace._threads import start_daemon
from agenttrace.reading.errors import TrajectoryLoadError
from agenttrace.reading.json_files import (
    LineCursor,
    read_json_file,
    read_jsonl_at,
    read_jsonl_lines,
)
from agenttrace.reading.parquet import read_parquet
from agenttrace.reading.scores import read_scores, score_files_for
from agenttrace.reading.sources import expand_source
from agenttrace.reading.step_tables import is_step_tables, step_table_trajectories
from agenttrace.semconv import GROUP_ID
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.scores import Score, apply_scores

__all__ = ["ColumnValues", "EpisodeIndex", "EpisodeRow"]

#: Problems kept to show (all are counted).
MAX_PROBLEMS = 20
#: Seconds at most between two batches of new rows while a large file is read.
PUBLISH_EVERY = 0.1
#: Rows published as soon as they are read, before batching: the page's first page.
FIRST_PAGE = 50


@dataclass(eq=False)
class EpisodeRow:
    """One episode as the table, the counts and the plots see it."""

    key: int
    episode_id: str
    run: str
    status: str
    return_: float | None
    length: int
    task_id: str | None
    group_id: str | None
    start_time: int | None
    duration_s: float | None
    error: str | None
    scores: dict[str, float]
    trace_id: str | None
    step_ms: float | None  # mean step duration
    llm_ms: float | None  # mean model call latency
    input_tokens: int
    output_tokens: int
    file: int  # into EpisodeIndex.files
    offset: int  # JSON Lines: the line's byte offset; other files: the record's ordinal

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "episode_id": self.episode_id,
            "run": self.run,
            "status": self.status,
            "return": self.return_,
            "length": self.length,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "start_time": self.start_time,
            "duration_s": self.duration_s,
            "error": self.error,
            "scores": self.scores,
            "trace_id": self.trace_id,
        }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _finite(value: Any) -> float | None:
    """A number JSON can carry (NaN and infinities are not), or None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def make_row(trajectory: Trajectory, key: int, run: str, file: int, offset: int) -> EpisodeRow:
    """The row of one trajectory (scores already applied)."""
    step_ms = [
        (step.end_time - step.start_time) / 1e6
        for step in trajectory.steps
        if step.start_time is not None and step.end_time is not None
    ]
    calls = [call for step in trajectory.steps for call in step.llm_calls]
    llm_ms = [
        (call.end_time - call.start_time) / 1e6
        for call in calls
        if call.start_time is not None and call.end_time is not None
    ]
    error = trajectory.error
    duration = None
    if trajectory.start_time is not None and trajectory.end_time is not None:
        duration = (trajectory.end_time - trajectory.start_time) / 1e9
    group = trajectory.attributes.get(GROUP_ID) if isinstance(trajectory.attributes, dict) else None
    return EpisodeRow(
        key=key,
        episode_id=trajectory.episode_id,
        run=run,
        status=sys.intern(str(trajectory.status)),
        return_=_finite(trajectory.return_),
        length=int(trajectory.length),
        task_id=None if trajectory.task_id is None else sys.intern(str(trajectory.task_id)),
        group_id=None if group is None else str(group),
        start_time=trajectory.start_time,
        duration_s=duration,
        error=None if error is None else f"{error.type}: {error.message}",
        scores={k: v for k, v in trajectory.scores.items() if _finite(v) is not None},
        trace_id=trajectory.trace_id,
        step_ms=_mean(step_ms),
        llm_ms=_mean(llm_ms),
        input_tokens=sum(call.input_tokens or 0 for call in calls),
        output_tokens=sum(call.output_tokens or 0 for call in calls),
        file=file,
        offset=offset,
    )


@dataclass
class ColumnValues:
    """The distinct runs, statuses, tasks, groups and score names seen so far (kept as rows
    come, so the page's filter choices cost nothing to list)."""

    runs: dict[str, None] = field(default_factory=dict)  # (in the order first seen)
    statuses: set[str] = field(default_factory=set)
    tasks: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    scores: set[str] = field(default_factory=set)

    def add(self, row: EpisodeRow) -> None:
        self.runs[row.run] = None
        self.statuses.add(row.status)
        if row.task_id is not None:
            self.tasks.add(row.task_id)
        if row.group_id is not None:
            self.groups.add(row.group_id)
        self.scores.update(row.scores)


@dataclass
class _File:
    path: Path
    run: str
    read_to: int = 0  # JSON Lines: bytes read; other formats: 1 once read
    size: int = -1


@dataclass
class _Scores:
    """Late scores found beside the trajectories, re-read when their files change."""

    by_episode: dict[str, list[Score]] = field(default_factory=dict)
    stamps: dict[Path, tuple[int, int]] = field(default_factory=dict)


def _run_name(path: Path) -> str:
    """The run a trajectory file belongs to: its folder's name (a run folder, or the
    ``episodes/`` folder of one)."""
    if path.is_dir():  # step tables: the folder itself
        return sys.intern(path.name)
    folder = path.parent
    if folder.name == "episodes" and folder.parent.name:
        folder = folder.parent
    return sys.intern(folder.name or str(folder))


class EpisodeIndex:
    """Rows of every episode in ``sources``, read from a background thread (:meth:`start`)."""

    def __init__(
        self, sources: Sequence[str | Path], *, follow: bool = True, poll: float = 0.5
    ) -> None:
        self.sources = [Path(source) for source in sources]
        self.follow = follow
        self.poll = poll
        self.rows: list[EpisodeRow] = []
        self._values = ColumnValues()
        self.files: list[_File] = []
        self.problems: list[str] = []
        self.problem_count = 0
        self._by_path: dict[Path, int] = {}
        self._keys_by_episode: dict[str, list[int]] = {}
        self._scores = _Scores()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._listeners: list[Callable[[int], None]] = []
        self._busy = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # step tables (a folder the steps sink wrote) are read apart: they name no file the
        # trajectory loaders read
        self._tables = [source for source in self.sources if is_step_tables(source)]
        self._files_sources = [source for source in self.sources if source not in self._tables]
        if self._files_sources:
            expand_source(self._files_sources)  # a source naming no file fails here, at once

    # --- the reading thread --------------------------------------------------------------

    def start(self) -> EpisodeIndex:
        self._thread = start_daemon(self._run, name="agenttrace-view-index")
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def listen(self, listener: Callable[[int], None]) -> None:
        """``listener(added)`` after each batch of new rows (from the reading thread)."""
        self._listeners.append(listener)

    @property
    def indexing(self) -> bool:
        return self._busy

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once a whole pass found nothing more to read (everything present is indexed)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                added = self._one_pass()
            except Exception as exc:  # a source gone or unreadable: say it, go on
                self._problem(f"reading stopped for a moment: {type(exc).__name__}: {exc}")
                added = 0
            with self._changed:
                self._busy = added > 0
                self._changed.notify_all()
            if added:
                continue  # more may be waiting: read on before sleeping
            if not self.follow:
                return  # (everything read: _busy is False)
            self._stop.wait(self.poll)

    def _one_pass(self) -> int:
        """Read what is new in every file; returns how many rows were added."""
        try:
            paths = expand_source(self._files_sources) if self._files_sources else []
        except FileNotFoundError:
            paths = []
        paths += self._tables
        for path in paths:
            if path not in self._by_path:
                self._by_path[path] = len(self.files)
                self.files.append(_File(path, _run_name(path)))
        self._refresh_scores(paths)
        added = 0
        for number, entry in enumerate(self.files):
            if self._stop.is_set():
                break
            added += self._read_file(number, entry)
        return added

    def _read_file(self, number: int, entry: _File) -> int:
        try:
            size = entry.path.stat().st_size
        except OSError:
            return 0
        if size == entry.size:
            return 0  # nothing appended: not read again
        entry.size = size
        name = entry.path.name
        cursor = LineCursor(entry.read_to)
        if name.endswith(".jsonl"):
            found = read_jsonl_lines(
                entry.path,
                self._report,
                start=entry.read_to,
                whole_lines_only=self.follow,
                cursor=cursor,
            )
        elif entry.read_to:
            return 0  # gzipped, JSON, Parquet files and step tables are read once, whole
        elif entry.path.is_dir():
            found = enumerate(self._step_tables(entry.path))
        elif name.endswith(".jsonl.gz"):
            found = read_jsonl_lines(entry.path, self._report)
        elif name.endswith(".parquet"):
            found = enumerate(read_parquet(entry.path, on_error=self._report))
        else:
            found = enumerate(read_json_file(entry.path, self._report))
        batch: list[EpisodeRow] = []
        added = 0
        published = time.monotonic()
        for offset, trajectory in found:
            batch.append(self._row(trajectory, number, offset))
            # let the server's thread in between records: a reading thread that keeps the
            # GIL for its whole switch interval (5 ms) makes each request wait that long at
            # every socket call
            time.sleep(0)
            # rows go out every tenth of a second, or every 500; the first 50 at once (the
            # first page of a large run is there before the rest is read)
            if (
                len(batch) >= 500
                or time.monotonic() - published >= PUBLISH_EVERY
                or (len(batch) >= FIRST_PAGE and len(self.rows) < FIRST_PAGE)
            ):
                added += self._publish(batch)
                batch = []
                published = time.monotonic()
        added += self._publish(batch)
        if name.endswith(".jsonl"):
            entry.read_to = cursor.offset
            if cursor.offset != size:
                entry.size = -1  # grown since, or a line still being written: look again
        else:
            entry.read_to = 1
        return added

    def _step_tables(self, folder: Path) -> Iterator[Trajectory]:
        try:
            yield from step_table_trajectories(folder)
        except (OSError, ValueError) as exc:  # (what was read before it is kept)
            self._problem(f"{folder}: {type(exc).__name__}: {exc}")

    def _row(self, trajectory: Trajectory, file: int, offset: int) -> EpisodeRow:
        self._apply_late_scores(trajectory)
        return make_row(trajectory, -1, self.files[file].run, file, offset)

    def _apply_late_scores(self, trajectory: Trajectory) -> None:
        late = self._scores.by_episode.get(trajectory.episode_id)
        if late:
            apply_scores(trajectory, late)

    def _publish(self, batch: list[EpisodeRow]) -> int:
        if not batch:
            return 0
        with self._lock:
            for row in batch:
                row.key = len(self.rows)
                self.rows.append(row)
                self._keys_by_episode.setdefault(row.episode_id, []).append(row.key)
                self._values.add(row)
        self._notify(len(batch))
        return len(batch)

    def _notify(self, added: int) -> None:
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):  # a listener never stops the reading
                listener(added)

    def _refresh_scores(self, paths: list[Path]) -> None:
        """Re-read the score files when one appeared or changed; rows they touch are redone."""
        files = score_files_for(self.sources, paths)
        stamps = {}
        for path in files:
            try:
                stat = path.stat()
            except OSError:
                continue
            stamps[path] = (stat.st_size, stat.st_mtime_ns)
        if stamps == self._scores.stamps:
            return
        by_episode = read_scores(list(stamps), self._report)
        before = self._scores.by_episode
        touched = {
            episode_id
            for episode_id in {*by_episode, *before}  # (a score file gone takes its scores)
            if by_episode.get(episode_id) != before.get(episode_id)
        }
        self._scores = _Scores(by_episode, stamps)
        for episode_id in touched:
            for key in list(self._keys_by_episode.get(episode_id, ())):
                old = self.rows[key]
                trajectory = self._read(old)
                if trajectory is not None:
                    row = make_row(trajectory, key, old.run, old.file, old.offset)
                    with self._lock:
                        self.rows[key] = row
                        self._values.add(row)
        if touched:
            self._notify(0)  # (rows changed, none added)

    def _report(self, error: TrajectoryLoadError) -> None:
        self._problem(str(error))

    def _problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    # --- reading one episode back ----------------------------------------------------------

    def row(self, key: int) -> EpisodeRow | None:
        with self._lock:
            return self.rows[key] if 0 <= key < len(self.rows) else None

    def column_values(self) -> tuple[ColumnValues, int]:
        """A copy of the distinct values seen, and the number of rows."""
        with self._lock:
            values = self._values
            copy = ColumnValues(
                dict(values.runs),
                set(values.statuses),
                set(values.tasks),
                set(values.groups),
                set(values.scores),
            )
            return copy, len(self.rows)

    def snapshot(self) -> list[EpisodeRow]:
        """The rows so far (a copy of the list: the reading thread appends to the original)."""
        with self._lock:
            return list(self.rows)

    def trajectory(self, key: int) -> Trajectory | None:
        """The whole trajectory of a row, read again from its file, late scores applied."""
        row = self.row(key)
        return None if row is None else self._read(row)

    def _read(self, row: EpisodeRow) -> Trajectory | None:
        path = self.files[row.file].path
        errors: list[TrajectoryLoadError] = []
        if path.is_dir():
            chosen = step_table_trajectories(path, episode_ids=[row.episode_id])
            trajectory = next(iter(chosen), None)
        elif path.name.endswith((".jsonl", ".jsonl.gz")):
            trajectory = read_jsonl_at(path, row.offset, errors.append)
        else:
            reader = (
                read_parquet(path, on_error=errors.append)
                if path.name.endswith(".parquet")
                else read_json_file(path, errors.append)
            )
            trajectory = next(
                (t for n, t in enumerate(reader) if n == row.offset), None
            )  # (records are counted as the index counted them: the good ones)
        if trajectory is not None:
            self._apply_late_scores(trajectory)
        return trajectory

    def source_of(self, row: EpisodeRow) -> str:
        return str(self.files[row.file].path)
