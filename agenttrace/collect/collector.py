"""The heart of ``agenttrace collect``: export requests in, trajectories out, nothing
acknowledged ever lost.

A request's payload (OTLP protobuf or JSON, from the HTTP or the gRPC receiver) is decoded by
the storage readers, appended to the span log (:mod:`agenttrace.collect.span_log`) and synced,
and only then acknowledged. Its records wait in a bounded queue for the one worker thread,
which feeds them to the one streaming assembler
(:class:`~agenttrace.trajectory.stream.StreamingAssembler`, as ``agenttrace export`` does) and
writes each episode with the sinks as it completes. A full queue refuses new requests with a
retryable answer (:class:`Busy`); the SDK exporters retry them.

An episode is written when it is complete (its episode span ended, its steps present) and no
record joined it for ``grace_seconds`` (or ``grace_records`` more records came), and as
``incomplete`` when nothing joined it for ``idle_timeout`` seconds. Records of an episode
already written are counted as late.

The JSONL sink is the record of what was written: it is written last for each episode, and
on start the service reads the episode ids in its files, then replays the span log. Episodes
whose id is there are not written again; the others are rebuilt from their logged records.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from agenttrace._threads import start_daemon
from agenttrace.collect.span_log import DEFAULT_SEGMENT_BYTES, SpanLog
from agenttrace.processing.writer import SinkSpec, build_sink
from agenttrace.semconv import EPISODE_ID
from agenttrace.sinks.base import Sink
from agenttrace.sinks.jsonl import JsonlSink
from agenttrace.sinks.scores import ScoreLog
from agenttrace.storage.content import restore_content
from agenttrace.storage.errors import SpanFormatError
from agenttrace.storage.otlp_proto import decode_proto
from agenttrace.trajectory.conventions import Conventions
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import SpanRecord, is_vector_step, split_vector_step
from agenttrace.trajectory.scores import score_from_record
from agenttrace.trajectory.stream import StreamingAssembler

__all__ = ["Busy", "CollectSettings", "Collector", "Receipt", "Unreadable"]

logger = logging.getLogger("agenttrace")

#: Sinks ``collect`` can write; ``jsonl`` is always among them (the record of what was written).
SINK_KINDS = ("jsonl", "parquet", "steps", "jsondir")
_TICK_SECONDS = 0.25


class Busy(Exception):
    """Nothing taken now (the queue is full, the service is stopping, the span log cannot be
    written): answer with a retryable status, ``retry_after`` seconds."""

    def __init__(self, retry_after: int, why: str = "queue full") -> None:
        super().__init__(f"{why}; retry after {retry_after} s")
        self.retry_after = retry_after


class Unreadable(ValueError):
    """Nothing in the payload could be read as spans (a non-retryable bad request)."""


class Receipt(NamedTuple):
    """What a request gave: spans taken, spans refused (OTLP partial success) and why."""

    accepted: int
    rejected: int
    message: str


@dataclass
class CollectSettings:
    """How the service runs (``agenttrace collect --help`` says the same per flag)."""

    out: Path
    #: The span log and other state; default ``OUT/.collect``.
    state: Path | None = None
    sinks: tuple[str, ...] = ("jsonl",)
    grace_records: int = 1_000
    grace_seconds: float = 2.0
    idle_timeout: float = 300.0
    #: Spans decoded and waiting for the assembler; more are refused with a retryable answer.
    max_queued_spans: int = 100_000
    sync: bool = True
    max_segment_bytes: int = DEFAULT_SEGMENT_BYTES
    max_episode_bytes: int | None = None
    conventions: Conventions | None = None
    #: Write the open episodes (as incomplete) when the service stops, instead of keeping
    #: them in the span log for the next start.
    finish_on_exit: bool = False
    retry_after: int = 1

    def __post_init__(self) -> None:
        if "jsonl" not in self.sinks:
            raise ValueError(
                "agenttrace collect writes the jsonl sink always: it is the record of which "
                "episodes were written (add jsonl to --sinks)"
            )
        unknown = [kind for kind in self.sinks if kind not in SINK_KINDS]
        if unknown:
            raise ValueError(
                f"unknown sink {unknown[0]!r} for collect (choose from {', '.join(SINK_KINDS)})"
            )

    def state_folder(self) -> Path:
        return self.state if self.state is not None else self.out / ".collect"


@dataclass
class CollectCounts:
    """The service's counters (its metrics and its health answer)."""

    requests: int = 0
    spans_received: int = 0
    spans_rejected: int = 0
    requests_refused_busy: int = 0
    episodes_written: dict[str, int] = field(default_factory=dict)  # status -> count
    sink_errors: int = 0
    internal_errors: int = 0  # spans left out by a failure inside agenttrace (logged)
    replayed_spans: int = 0
    resumed_episodes: int = 0
    already_written: int = 0


class _EpisodeIds(msgspec.Struct):
    episode_id: str = ""


_read_episode_id = msgspec.json.Decoder(_EpisodeIds).decode


class Collector:
    """Receive, log, rebuild and write (see the module doc). Thread-safe :meth:`receive`."""

    def __init__(
        self, settings: CollectSettings, *, on_written: Callable[[Trajectory], None] | None = None
    ) -> None:
        self.settings = settings
        self.counts = CollectCounts()
        self._on_written = on_written
        self._lock = threading.Lock()  # log order == queue order
        self._queue: queue.Queue[tuple[int, list[SpanRecord]] | None] = queue.Queue()
        self._queued_spans = 0
        self._assembler = self._new_assembler()
        self._log = SpanLog(
            settings.state_folder() / "spans",
            max_segment_bytes=settings.max_segment_bytes,
            sync=settings.sync,
        )
        self._sinks: list[Sink] = []
        self._commit: JsonlSink | None = None
        self._scores = ScoreLog(settings.out)
        # Which log segments may be deleted: the record number of each one's last record,
        # the open episodes with records in each, and the segments of each open episode.
        self._segment_ends: dict[int, int] = {}
        self._segment_episodes: dict[int, set[str]] = {}
        self._episode_segments: dict[str, set[int]] = {}
        # (monotonic time, sequence) about every tick: the clock in record numbers
        self._clock: deque[tuple[float, int]] = deque()
        self._worker: threading.Thread | None = None
        self._closed = threading.Event()
        self._assembler_lock = threading.Lock()  # worker vs. health()

    # --- life -----------------------------------------------------------------------------

    def start(self) -> None:
        """Open the sinks, rebuild the open episodes from the span log, start the worker."""
        settings = self.settings
        settings.out.mkdir(parents=True, exist_ok=True)
        for kind in settings.sinks:
            folder = settings.out / "episodes" if kind == "jsondir" else settings.out
            sink = build_sink(SinkSpec(kind, {"folder": folder}))
            self._sinks.append(sink)
            if isinstance(sink, JsonlSink):
                self._commit = sink
        # the commit sink goes last: an episode in its file went to every sink
        self._sinks.sort(key=lambda sink: sink is self._commit)
        assert self._commit is not None
        self._commit.resume()  # a torn last line of a killed run is cut now
        self._recover()
        self._worker = start_daemon(self._work, name="agenttrace-collect")

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop: everything received is fed and written or kept in the span log."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout)
        with self._assembler_lock:
            if self.settings.finish_on_exit:
                for trajectory in self._assembler.finish():
                    self._write(trajectory)
            self._write_late_scores()
        for sink in self._sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("agenttrace collect: closing sink %r failed", sink)
        self._scores.close()
        self._log.close()
        open_episodes = self._assembler.open_episodes
        if open_episodes and not self.settings.finish_on_exit:
            logger.info(
                "agenttrace collect: %d open episode(s) kept in the span log; they resume at "
                "the next start",
                open_episodes,
            )

    # --- receiving ------------------------------------------------------------------------

    def receive(self, payload: bytes) -> Receipt:
        """Take one export request (OTLP protobuf or JSON, uncompressed). Returns once it is
        durable; raises :class:`Busy` (retry later) or :class:`Unreadable` (bad request)."""
        if self._closed.is_set():
            raise Busy(self.settings.retry_after, "stopping")
        if self._queued_spans >= self.settings.max_queued_spans:
            with self._lock:
                self.counts.requests_refused_busy += 1
            raise Busy(self.settings.retry_after)
        problems: list[SpanFormatError] = []
        records = decode_proto(payload, problems.append)
        rejected = _rejected_spans(problems)
        message = "; ".join(str(problem) for problem in problems[:3])
        if not records and problems:
            with self._lock:
                self.counts.requests += 1
                self.counts.spans_rejected += rejected
            raise Unreadable(message or "no spans could be read")
        if records:
            try:
                with self._lock:
                    position = self._log.append(payload)
                    self._queued_spans += len(records)
                    self._queue.put((position.segment, records))
                self._log.sync(position)
            except OSError as exc:  # a full or failing disk: not durable, so not taken
                logger.error("agenttrace collect: cannot write the span log: %s", exc)
                raise Busy(self.settings.retry_after, f"span log unwritable ({exc})") from exc
        with self._lock:
            self.counts.requests += 1
            self.counts.spans_received += len(records)
            self.counts.spans_rejected += rejected
        return Receipt(len(records), rejected, message)

    # --- the worker -----------------------------------------------------------------------

    def _work(self) -> None:
        next_tick = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, next_tick - time.monotonic()))
            except queue.Empty:
                item = ()  # type: ignore[assignment]
            if item is None:
                return
            with self._assembler_lock:
                try:
                    if item:
                        segment, records = item
                        try:
                            self._feed(records, segment)
                        finally:
                            with self._lock:
                                self._queued_spans -= len(records)
                    now = time.monotonic()
                    if now >= next_tick:
                        self._tick(now)
                        next_tick = now + _TICK_SECONDS
                except Exception:  # the service goes on; what failed is logged
                    logger.exception("agenttrace collect: internal error in the worker")

    def _feed(self, records: Iterable[SpanRecord], segment: int) -> None:
        assembler = self._assembler
        add = assembler.add
        needed_by: set[str] = set()  # open episodes with records in this batch
        for record in restore_content(records):
            try:
                done = add(record)
            except Exception:  # one record the assembler chokes on costs only itself
                self.counts.internal_errors += 1
                logger.exception("agenttrace collect: span %s left out", record.name)
                continue
            if done:
                for trajectory in done:
                    self._write(trajectory)
            episode_id = record.attributes.get(EPISODE_ID) or assembler.episode_of(record)
            if episode_id is not None:
                needed_by.add(str(episode_id))
            elif is_vector_step(record):
                needed_by.update(p.attributes[EPISODE_ID] for p in split_vector_step(record))
        self._segment_ends[segment] = assembler.counts.records
        for episode_id in needed_by:
            if assembler.is_open(episode_id):
                self._segment_episodes.setdefault(segment, set()).add(episode_id)
                self._episode_segments.setdefault(episode_id, set()).add(segment)

    def _tick(self, now: float) -> None:
        """Once in a while: write quiet episodes, late scores, forget old log segments."""
        settings = self.settings
        sequence = self._assembler.counts.records
        clock = self._clock
        clock.append((now, sequence))
        keep = max(settings.grace_seconds, settings.idle_timeout)
        while len(clock) > 1 and clock[1][0] <= now - keep:
            clock.popleft()
        complete_since = _sequence_at(clock, now - settings.grace_seconds)
        any_since = _sequence_at(clock, now - settings.idle_timeout)
        for trajectory in self._assembler.write_quiet(complete_since, any_since):
            self._write(trajectory)
        self._write_late_scores()
        self._forget_segments()

    def _forget_segments(self) -> None:
        """Delete the closed log segments no open episode has records in (and no record
        waiting for its parent came from)."""
        if self._assembler.holds_scores:
            return
        waiting = self._assembler.oldest_waiting()
        current = self._log.current_segment
        for segment, last in list(self._segment_ends.items()):
            if (
                segment < current
                and not self._segment_episodes.get(segment)
                and (waiting is None or last < waiting)
            ):
                self._log.delete(segment)
                del self._segment_ends[segment]
                self._segment_episodes.pop(segment, None)

    def _write(self, trajectory: Trajectory) -> None:
        for segment in self._episode_segments.pop(trajectory.episode_id, ()):
            self._segment_episodes.get(segment, set()).discard(trajectory.episode_id)
        for sink in self._sinks:
            try:
                sink.write(trajectory)
            except Exception as exc:
                self.counts.sink_errors += 1
                logger.error(
                    "agenttrace collect: sink %r failed on episode %s: %s: %s",
                    sink,
                    trajectory.episode_id,
                    type(exc).__name__,
                    exc,
                )
        written = self.counts.episodes_written
        written[trajectory.status] = written.get(trajectory.status, 0) + 1
        if self._on_written is not None:
            self._on_written(trajectory)

    def _write_late_scores(self) -> None:
        late = self._assembler.late_scores
        if not late:
            return
        for record in late:
            try:
                self._scores.write(score_from_record(record))
            except ValueError as exc:
                logger.warning("agenttrace collect: a score span could not be read: %s", exc)
        late.clear()
        self._scores.flush()

    # --- start after a stop or a crash ----------------------------------------------------

    def _recover(self) -> None:
        written = self._written_episode_ids()
        self._assembler.mark_written(written)
        replayed = 0
        for segment, payload in self._log.replay():
            records = decode_proto(payload, lambda error: None)
            replayed += len(records)
            self._feed(records, segment)
        counts = self.counts
        counts.replayed_spans = replayed
        counts.resumed_episodes = self._assembler.open_episodes
        counts.already_written = self._assembler.counts.late
        self._assembler.counts.late = 0  # records of written episodes: not late, replayed
        if replayed:
            logger.info(
                "agenttrace collect: replayed %d span(s) from the span log; %d episode(s) "
                "resumed, %d written before",
                replayed,
                counts.resumed_episodes,
                len(written),
            )

    def _written_episode_ids(self) -> list[str]:
        """The episodes in the JSONL sink's files (the commit record)."""
        commit = self._commit
        assert commit is not None
        ids = []
        index = 0
        while True:
            path = commit.path_for(index)
            if not path.exists():
                if index > 0:
                    break
                index += 1
                continue
            with open(path, "rb") as handle:
                for line in handle:
                    if line.endswith(b"\n"):
                        with contextlib.suppress(msgspec.DecodeError):
                            ids.append(_read_episode_id(line).episode_id)
            index += 1
        return ids

    # --- looking in -----------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The counters, for the health endpoint and the metrics."""
        counts = self.counts
        assembly = self._assembler.counts
        return {
            "status": "stopping" if self._closed.is_set() else "ok",
            "requests": counts.requests,
            "spans_received": counts.spans_received,
            "spans_rejected": counts.spans_rejected,
            "requests_refused_busy": counts.requests_refused_busy,
            "queued_spans": self._queued_spans,
            "open_episodes": self._assembler.open_episodes,
            "episodes_written": dict(counts.episodes_written),
            "late_spans": assembly.late,
            "duplicate_spans": assembly.duplicates,
            "unrelated_spans": assembly.unrelated,
            "sink_errors": counts.sink_errors,
            "internal_errors": counts.internal_errors,
            "replayed_spans": counts.replayed_spans,
            "resumed_episodes": counts.resumed_episodes,
            "log_segments": len(self._log.segments()),
        }

    def _new_assembler(self) -> StreamingAssembler:
        settings = self.settings
        return StreamingAssembler(
            grace=settings.grace_records,
            max_episode_bytes=settings.max_episode_bytes,
            conventions=settings.conventions,
        )


def _sequence_at(clock: deque[tuple[float, int]], moment: float) -> int:
    """The record count at ``moment`` (0 before the clock's memory)."""
    reached = 0
    for when, sequence in clock:
        if when > moment:
            break
        reached = sequence
    return reached


def _rejected_spans(problems: list[SpanFormatError]) -> int:
    """Spans the problems cost (OTLP partial success's ``rejectedSpans``)."""
    return sum(problem.spans_lost for problem in problems)
