"""TrajectoryProcessor: rebuilds trajectories from live spans and hands them to sinks.

On the caller's thread (``on_start``/``on_end``) it only stamps the episode id on spans from
other instrumentations, turns finished spans into compact :class:`SpanRecord` s and appends
them to their episode's buffer. When an episode span ends, the buffer goes through a bounded
queue to a background thread that hands it to the writer (:mod:`agenttrace.processing.writer`:
the one assembler and the sinks, in this process or in a helper process). Nothing here raises
into user code.

Records of an open episode go to the writer within ``flush_interval`` (or once 4,096 wait), so
this process never holds a long episode: the writer does, a stretch at a time
(:class:`~agenttrace.trajectory.assembler.EpisodeAssembly`, ``max_episode_bytes``).

With a span file the same records are also written as OTLP/JSON lines (the run's
spans.jsonl): one conversion per span serves both products, and no span object outlives its
``on_end``. Spans outside episodes and late spans still reach the span file; only sampled
spans do (RECORD_ONLY spans feed trajectories only).

Limits are explicit and every overflow is counted (``stats()``) and logged once:
``max_open_episodes`` (episodes beyond it are not tracked), spans that arrive after their
episode was written ("late"), and items the writer queue had to drop.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from agenttrace import semconv as sc
from agenttrace.processing._worker import BackgroundWorker
from agenttrace.processing.foreign_spans import ForeignSpanPolicy, UndecidedSpans
from agenttrace.processing.metrics import EpisodeMetrics
from agenttrace.processing.writer import (
    DEFAULT_MAX_EPISODE_BYTES,
    EXPORT_COUNTERS,
    EpisodeSpans,
    EpisodeWriter,
    FinishedEpisode,
    report_paths,
)
from agenttrace.processing.writer_process import RemoteWriter
from agenttrace.sinks.base import Sink
from agenttrace.sinks.callback import as_sink
from agenttrace.storage.otlp_json_writer import OtlpJsonLinesWriter
from agenttrace.trajectory.conventions import Conventions, derived_episode_id
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import (
    SpanRecord,
    is_vector_step,
    record_from_span,
    split_vector_step,
)

logger = logging.getLogger("agenttrace")


class _Episode:
    __slots__ = (
        "count",
        "pending",
        "quiet_since",
        "root_span_id",
        "seen_count",
        "start_record",
        "streamed",
    )

    def __init__(self, root_span_id: int) -> None:
        self.root_span_id = root_span_id  # 0 until the episode span itself is seen
        # Records appended on the callers' threads; they are taken from the left (both ends of
        # a deque are safe across threads without a lock) and handed to the writer while the
        # episode is open, so the span file holds them within a second and the writer, not
        # this process's memory, holds a long episode (see EpisodeAssembly).
        self.pending: deque[SpanRecord] = deque()
        self.streamed = 0  # records handed to the writer while the episode was open
        self.count = 0  # records seen, for idle detection
        # The episode span as it was at start: stands in for it if it never ends.
        self.start_record: SpanRecord | None = None
        # Idle detection without a clock call per span: the writer's periodic check notes
        # when the span count last changed.
        self.seen_count = 0
        self.quiet_since = time.monotonic()


class TrajectoryProcessor(SpanProcessor):
    """A SpanProcessor that writes one trajectory per finished episode to its sinks."""

    def __init__(
        self,
        sinks: Iterable[Sink | Callable[[Trajectory], None]] = (),
        *,
        span_writer: OtlpJsonLinesWriter | None = None,
        writer: EpisodeWriter | RemoteWriter | None = None,
        max_open_episodes: int = 10_000,
        max_episode_bytes: int = DEFAULT_MAX_EPISODE_BYTES,
        idle_timeout: float = 600.0,
        queue_size: int = 65_536,
        block_timeout: float = 30.0,
        check_interval: float = 1.0,
        flush_each_episode: bool = False,
        foreign_spans: ForeignSpanPolicy | None = None,
        conventions: Conventions | None = None,
        meter_provider: Any | None = None,
        shutdown_at_exit: bool = True,
    ) -> None:
        """``shutdown_at_exit=False``: the owner shuts it down at exit (the pipeline does, so
        that it can report after the final flush). ``conventions`` reads other tracers' spans
        as agenttrace's (agenttrace.trajectory.conventions); the span file gets them so
        translated, their own attributes kept."""
        if writer is None:
            metrics = EpisodeMetrics(meter_provider) if meter_provider is not None else None
            writer = EpisodeWriter(
                [as_sink(sink) for sink in sinks],
                span_writer,
                on_summary=metrics.record if metrics is not None else None,
                max_episode_bytes=max_episode_bytes,
            )
        elif sinks or span_writer is not None or meter_provider is not None:
            raise TypeError(
                "give either a writer, or sinks, a span_writer and a meter_provider; not both"
            )
        self.writer = writer
        # Spans of other instrumentations follow agenttrace's content policy (secrets, content).
        self._foreign = foreign_spans or ForeignSpanPolicy()
        self._conventions = conventions if conventions else None
        # Spans of other tracers held until their local root ends, when a tracer may say only
        # at a span's end that it is an episode (UndecidedSpans).
        self._undecided = (
            UndecidedSpans()
            if conventions and any(rule.role == "episode" for rule in conventions.spans)
            else None
        )
        # Wait for each finished episode to be written (Ray workers: Ray ends them without
        # running exit handlers, so what is still queued then would be lost).
        self._flush_each_episode = flush_each_episode
        self._block_timeout = block_timeout
        # Whether finished spans outside episodes are wanted (for the span file).
        self._keeps_all_spans = writer.writes_spans
        self._max_open = max_open_episodes
        self._idle_timeout = idle_timeout
        self._open: dict[str, _Episode] = {}
        self._written: OrderedDict[str, None] = OrderedDict()  # recent ids, to spot late spans
        self._rejected: OrderedDict[str, None] = OrderedDict()  # over the open-episode limit
        self._lock = threading.Lock()
        self._closed = False
        self._counts: Counter[str] = Counter()
        self._warned: set[str] = set()
        # Spans queued for the writer thread and not yet written (see _enqueue).
        self._room = threading.Condition(threading.Lock())
        self._in_flight = 0
        self._max_in_flight = queue_size
        self._closing = False
        self._worker = BackgroundWorker(
            "agenttrace-trajectory-writer",
            self._write_batch,
            max_queue=queue_size,
            max_batch=64,
            block_timeout=block_timeout,
            interval=check_interval,
            on_flush=self._on_flush,
            on_idle=self._on_tick,
            wake_weight=_WAKE_AFTER_SPANS,
        )
        if shutdown_at_exit:
            atexit.register(self._at_exit)

    # --- caller's thread --------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._closed:
            return
        try:
            attributes = _attributes_of(span)
            episode_id = attributes.get(sc.EPISODE_ID)
            is_episode = span.name == sc.EPISODE
            if episode_id is None:
                if span.name == sc.ENV_VECTOR_STEP:
                    return  # steps of several episodes (each entry names its own)
                if self._starts_foreign_episode(span, attributes):
                    # ... unless it runs inside an episode already (an episode target on the
                    # runner whose own episode span this is): one episode, seen twice
                    episode_id = _local_parent_episode_id(parent_context)
                    if episode_id is None:
                        self._open_foreign_episode(span)
                        return
                episode_id = episode_id or _inherited_episode_id(parent_context)
                if episode_id is None:
                    episode_id = self._parent_become_episode(parent_context)
                    if episode_id is None:
                        return
                span.set_attribute(sc.EPISODE_ID, episode_id)
            if is_episode:
                self._track_episode_span(str(episode_id), span)
        except Exception:
            self._internal_error("on_start")

    def _track_episode_span(self, episode_id: str, span: Span) -> None:
        episode = self._track(episode_id, span.context.span_id)
        if episode is not None and episode.start_record is None:
            record = record_from_span(span)
            record = record._replace(attributes=dict(record.attributes))
            if self._conventions is not None:
                record = self._conventions.translate(record)[0]
            episode.start_record = record  # (stands in for the span if it never ends)

    def _open_foreign_episode(self, span: Span) -> str:
        """Another tracer's episode span: its derived id stamped on it, and tracked."""
        context = span.context
        episode_id = derived_episode_id(context.trace_id, context.span_id)
        span.set_attribute(sc.EPISODE_ID, episode_id)
        self._track_episode_span(episode_id, span)
        return episode_id

    def _parent_become_episode(self, parent_context: Context | None) -> str | None:
        """The id of a parent span of another tracer that is an episode only by attributes
        set after it started (traceloop-sdk sets its span kind just after the start): it is
        opened now, when its first child starts, so the same spans make the episode live as
        offline."""
        if self._conventions is None:
            return None
        parent = trace.get_current_span(parent_context)
        if not isinstance(parent, Span) or parent.end_time is not None:
            return None
        attributes = _attributes_of(parent)
        if attributes.get(sc.EPISODE_ID) is not None:
            return None
        if not self._starts_foreign_episode(parent, attributes):
            return None
        return self._open_foreign_episode(parent)

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed:
            return
        try:
            episode_id = _attributes_of(span).get(sc.EPISODE_ID)
            if episode_id is None:
                if span.name == sc.ENV_VECTOR_STEP:
                    self._take_vector_step(record_from_span(span))
                    return
                if not self._keeps_all_spans and self._undecided is None:
                    return
            record = record_from_span(span)
            if record.scope_name != sc.INSTRUMENTATION_SCOPE:
                if self._conventions is not None:
                    self._take_translated(record, stamped=episode_id is not None)
                    return
                record = self._foreign.apply(record)
            if episode_id is None:
                if self._undecided is not None and _is_local_root(record):
                    self._give_up(self._undecided.claim(record.trace_id, record.span_id))
                if self._keeps_all_spans:
                    self._put_spans([record])
                return
            if type(episode_id) is not str:
                episode_id = str(episode_id)
            self._take(episode_id, record)
        except Exception:
            self._internal_error("on_end")

    def _starts_foreign_episode(self, span: Span, attributes: Any) -> bool:
        """Whether another tracer's span is an episode under the conventions mapping."""
        conventions = self._conventions
        if conventions is None:
            return False
        scope = span.instrumentation_scope
        if scope is not None and scope.name == sc.INSTRUMENTATION_SCOPE:
            return False
        parent = span.parent
        is_root = parent is None or parent.is_remote
        return conventions.starts_episode(span.name, attributes, is_root)

    def _take_translated(self, record: SpanRecord, *, stamped: bool) -> None:
        """Another tracer's span, in agenttrace's names (agenttrace.trajectory.conventions),
        then under the content policy (which so covers what the translation wrote too).

        A span that is an episode only by what it holds at its end (``stamped`` False: no id
        was stamped at its start) takes the spans below it that ended before it, unstamped
        (UndecidedSpans); a span in no episode yet waits for its local root."""
        undecided = self._undecided
        for part in self._conventions.translate(record):  # type: ignore[union-attr]
            part = self._foreign.apply(part)
            episode_id = part.attributes.get(sc.EPISODE_ID)
            if episode_id is None:
                if undecided is None:
                    if self._keeps_all_spans:
                        self._put_spans([part])
                elif _is_local_root(part):
                    self._give_up(undecided.claim(part.trace_id, part.span_id))
                    if self._keeps_all_spans:
                        self._put_spans([part])
                else:
                    self._give_up(undecided.hold(part), count=True)
                continue
            episode_id = str(episode_id)
            if not stamped and undecided is not None and part.name == sc.EPISODE:
                self._take_undecided(episode_id, part)
            self._take(episode_id, part)

    def _take_undecided(self, episode_id: str, episode_record: SpanRecord) -> None:
        """An episode span that became one at its end: the held spans below it join it,
        with the episode id they would have been stamped with at their start."""
        held = self._undecided.claim(  # type: ignore[union-attr]
            episode_record.trace_id, episode_record.span_id
        )
        if not held:
            return
        if self._track(episode_id, episode_record.span_id) is None:
            self._give_up(held)  # late, or over the open-episode limit: span file only
            return
        for record in held:
            attributes = dict(record.attributes)
            attributes[sc.EPISODE_ID] = episode_id
            self._take(episode_id, record._replace(attributes=attributes))

    def _give_up(self, records: list[SpanRecord], *, count: bool = False) -> None:
        """Held spans that join no episode: to the span file (counted when given up for
        room or time, as they might have joined one)."""
        if not records:
            return
        if count:
            self._count("spans_undecided_given_up", len(records))
        if self._keeps_all_spans:
            sampled = [record for record in records if record.sampled]
            if sampled:
                self._put_spans(sampled)

    def _take(self, episode_id: str, record: SpanRecord) -> None:
        """Add a record to its open episode (opened by an episode span), finishing it when
        the record is that span."""
        is_root = record.name == sc.EPISODE
        episode = self._open.get(episode_id)
        if episode is None:
            if record.name == sc.SCORE:  # of an episode written already, or rebuilt elsewhere:
                if record.sampled:  # the writer keeps it as a score record
                    self._put_spans([record])
                return
            episode = self._track(episode_id, record.span_id if is_root else 0)
            if episode is None:  # late, or over the open-episode limit
                if self._keeps_all_spans and record.sampled:
                    self._put_spans([record])
                return
        pending = episode.pending
        pending.append(record)
        episode.count += 1
        if is_root and record.span_id in (episode.root_span_id, 0):
            self._finish(episode_id)
        elif len(pending) >= _HAND_OVER_AFTER_SPANS:
            self._hand_over(episode_id, episode)

    def _take_vector_step(self, record: SpanRecord) -> None:
        """A vector env's step: the span goes to the span file as it is (outside any
        episode), and each sub-environment's env.step, split from it, to its own episode."""
        if self._keeps_all_spans:
            self._put_spans([record])
        if is_vector_step(record):
            for part in split_vector_step(record):
                self._take(part.attributes[sc.EPISODE_ID], part)

    def _hand_over(self, episode_id: str, episode: _Episode) -> None:
        """Queue an open episode's pending records for the writer (a long episode's spans
        must not pile up here between the writer thread's ticks)."""
        item = _open_spans(episode_id, episode)
        if item is not None and not self._enqueue(item, len(item.records)):
            self._count("spans_dropped_queue_full", len(item.records))

    def _put_spans(self, records: list[SpanRecord]) -> None:
        # (spans outside episodes, one by one: the worker's item limit bounds them)
        if not self._worker.put(records, len(records)):
            self._count("spans_dropped_queue_full", len(records))

    def _enqueue(self, item: Any, spans: int) -> bool:
        """Queue an item for the writer thread. While ``queue_size`` spans are on their way
        to the writer already, wait (up to ``block_timeout``) for it to catch up: a loop
        that outruns the writer is slowed down, not allowed to fill memory."""
        room = self._room
        with room:
            if (
                self._in_flight
                and self._in_flight + spans > self._max_in_flight
                and not self._closing
                and threading.current_thread() is not self._worker._thread
            ):
                self._count("waits_for_writer")
                room.wait_for(
                    lambda: self._in_flight + spans <= self._max_in_flight, self._block_timeout
                )
            self._in_flight += spans
        if self._worker.put(item, spans):
            return True
        self._done_with(spans)
        return False

    def _done_with(self, spans: int) -> None:
        with self._room:
            self._in_flight -= spans
            self._room.notify_all()

    def _track(self, episode_id: str, root_span_id: int) -> _Episode | None:
        """The open episode; a new one only for an episode span (``root_span_id`` given).

        An episode is rebuilt by the process where its episode span runs. Spans of an episode
        whose episode span is elsewhere (an env server reached over HTTP, say) go to the span
        file only, counted as ``spans_of_remote_episodes``.
        """
        with self._lock:
            episode = self._open.get(episode_id)
            if episode is not None:
                if root_span_id and not episode.root_span_id:
                    episode.root_span_id = root_span_id
                return episode
            if episode_id in self._written:
                self._count_locked("late_spans")
                return None
            if episode_id in self._rejected:
                return None
            if not root_span_id:
                self._count_locked("spans_of_remote_episodes")
                return None
            if len(self._open) >= self._max_open:
                # Rejected for good: taking it later would write it with spans missing.
                self._rejected[episode_id] = None
                if len(self._rejected) > 4 * self._max_open:
                    self._rejected.popitem(last=False)
                self._count_locked("episodes_dropped_open_limit")
                return None
            episode = self._open[episode_id] = _Episode(root_span_id)
            return episode

    def _finish(self, episode_id: str, *, expired: bool = False) -> None:
        with self._lock:
            episode = self._open.pop(episode_id, None)
            if episode is None:
                return
            self._written[episode_id] = None
            if len(self._written) > 4 * self._max_open:
                self._written.popitem(last=False)
        if expired:
            self._count("episodes_expired_idle")
        if not self._enqueue(_Ended(episode_id, episode), len(episode.pending)):
            self._count("episodes_dropped_queue_full")
        elif self._flush_each_episode and not expired:
            self._worker.flush(self._block_timeout)
        else:
            self._worker.wake()  # an ended episode is written now, not at the next tick

    # --- writer thread ---------------------------------------------------------------------

    def _write_batch(self, items: list[Any]) -> None:
        """Hand the items to the writer in parts of about ``_WRITE_AFTER_SPANS`` spans (a
        helper process gets each part as one message, which is built in memory)."""
        part: list[Any] = []
        spans = 0
        for item in items:
            part.append(item)
            spans += _spans_in(item)
            if spans >= _WRITE_AFTER_SPANS:
                self._write_part(part, spans)
                part, spans = [], 0
        if part:
            self._write_part(part, spans)

    def _write_part(self, items: list[Any], spans: int) -> None:
        try:
            self.writer.write([self._finished(i) if type(i) is _Ended else i for i in items])
        finally:
            self._done_with(spans)

    def _finished(self, ended: _Ended) -> FinishedEpisode:
        """An ended episode with the records it got since it was last handed over."""
        episode = ended.episode
        return FinishedEpisode(
            ended.episode_id,
            _take(episode.pending),
            episode.start_record,
            episode.root_span_id,
            streamed=episode.streamed,
        )

    def _stream_open_spans(self) -> None:
        """Hand open episodes' new records to the writer now: it writes their span lines (so
        after a crash the episode can still be rebuilt offline, as incomplete) and keeps
        them towards the trajectory."""
        with self._lock:
            episodes = list(self._open.items())
        items = [item for item in (_open_spans(*pair) for pair in episodes) if item is not None]
        if items:
            self.writer.write(items)

    def _on_tick(self) -> None:
        self._stream_open_spans()
        self._expire_idle()

    def _on_flush(self) -> None:
        self._stream_open_spans()
        self.writer.flush()

    def _expire_idle(self) -> None:
        if self._undecided is not None and len(self._undecided):
            self._give_up(self._undecided.expire(self._idle_timeout), count=True)
        now = time.monotonic()
        idle = []
        with self._lock:
            for episode_id, episode in self._open.items():
                count = episode.count
                if count != episode.seen_count:
                    episode.seen_count, episode.quiet_since = count, now
                elif now - episode.quiet_since >= self._idle_timeout:
                    idle.append(episode_id)
        for episode_id in idle:
            self._finish(episode_id, expired=True)
        if idle:
            logger.warning(
                "agenttrace: %d episode(s) saw no span for %.0f s and were written as incomplete",
                len(idle),
                self._idle_timeout,
            )

    # --- SpanProcessor lifecycle ------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._worker.flush(timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        if self._closed:
            return
        self._closing = True  # (the exit deadline bounds the wait for the writer from now)
        with self._lock:
            still_open = list(self._open)
        if self._undecided is not None:
            self._give_up(self._undecided.drain())
        for episode_id in still_open:
            self._finish(episode_id)
        if still_open:
            self._count("episodes_open_at_shutdown", len(still_open))
        self._closed = True
        deadline = time.monotonic() + timeout_millis / 1000
        self._worker.shutdown(timeout_millis / 1000)
        try:
            self.writer.close(max(0.0, deadline - time.monotonic()))
        except Exception:
            self._internal_error("close")
        losses = (*_LOSS_COUNTERS, *_WRITER_COUNTERS)
        problems = {k: v for k, v in self.stats().items() if k in losses and v}
        if problems:
            logger.warning("agenttrace: trajectory losses this run: %s", problems)
        atexit.unregister(self._at_exit)

    def stop_in_forked_child(self) -> None:
        """In a forked child: this processor's threads and open episodes are the parent's;
        it stops without writing (the child's pipeline has a processor of its own)."""
        self._closed = True
        with self._lock:
            self._open.clear()
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        self.shutdown(timeout_millis=10_000)

    # --- reporting --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for the run summary: statuses written and every kind of loss."""
        with self._lock:
            counts = dict(self._counts)
            open_now = len(self._open)
        report = self.writer.report()
        stats: dict[str, Any] = {key: counts.get(key, 0) for key in _ALL_COUNTERS}
        for key in _WRITER_COUNTERS:
            stats[key] = report.get(key, 0)
        stats["episodes_written"] = sum(report["statuses"].values())
        stats["statuses"] = report["statuses"]
        stats["episodes_open"] = open_now
        stats["sink_errors"] = report["sink_errors"]
        stats["spans_written"] = report["spans_written"]
        stats["episodes_failed_metrics"] = report.get("episodes_failed_metrics", 0)
        # Torn last lines an earlier crash left in files this run appended to (cut, not kept).
        stats["torn_lines_cut"] = report.get("torn_lines_cut", 0)
        stats["torn_bytes_cut"] = report.get("torn_bytes_cut", 0)
        # Scores of episodes not open here, kept as score records (agenttrace.sinks.scores).
        stats["scores_written"] = report.get("scores_written", 0)
        stats["scores_malformed"] = report.get("scores_malformed", 0)
        stats["internal_errors"] = counts.get("internal_errors", 0) + self._worker.errors
        for key in EXPORT_COUNTERS:  # the OTLP endpoint's, when the writer sends spans
            stats[key] = report.get(key, 0)
        stats["span_export_error"] = report.get("span_export_error", "")
        return stats

    @property
    def trajectory_paths(self) -> list[Path]:
        """Trajectory files written so far (complete after a flush)."""
        return report_paths(self.writer.report(), "trajectory_paths")

    @property
    def span_paths(self) -> list[Path]:
        return report_paths(self.writer.report(), "span_paths")

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._count_locked(key, n)

    def _count_locked(self, key: str, n: int = 1) -> None:
        self._counts[key] += n
        if key in _LOSS_COUNTERS and key not in self._warned:
            self._warned.add(key)
            logger.warning("agenttrace: %s (first occurrence; all are counted)", key)

    def _internal_error(self, where: str) -> None:
        self._count("internal_errors")
        if "internal:" + where not in self._warned:
            self._warned.add("internal:" + where)
            logger.exception("agenttrace: internal error in %s; your program goes on", where)


class _Ended(NamedTuple):
    """An episode span ended (or the episode was given up on): rebuilt on the writer thread,
    which alone takes records from the episode once it is queued."""

    episode_id: str
    episode: _Episode


def _spans_in(item: Any) -> int:
    """The spans an item was queued with through ``_enqueue`` (spans outside episodes were
    not: 0)."""
    if type(item) is _Ended:
        return len(item.episode.pending)
    return len(item.records) if type(item) is EpisodeSpans else 0


def _open_spans(episode_id: str, episode: _Episode) -> EpisodeSpans | None:
    """An open episode's pending records, taken for the writer (None: there were none)."""
    taken = _take(episode.pending)
    if not taken:
        return None
    episode.streamed += len(taken)
    return EpisodeSpans(episode_id, taken)


def _take(pending: deque[SpanRecord]) -> list[SpanRecord]:
    """The records in ``pending`` now, taken from the left (callers may append meanwhile)."""
    return [pending.popleft() for _ in range(len(pending))]


#: The writer thread starts on the queue once this many spans wait, so the writer keeps pace
#: with the loop and a flush finds little left to do.
_WAKE_AFTER_SPANS = 256
#: An open episode's pending records are queued for the writer once this many wait.
_HAND_OVER_AFTER_SPANS = 4096
#: The writer thread hands the writer at most about this many spans at a time.
_WRITE_AFTER_SPANS = 8192

_LOSS_COUNTERS = (
    "episodes_dropped_open_limit",
    "late_spans",
    "episodes_dropped_queue_full",
    "spans_dropped_queue_full",
    "spans_undecided_given_up",
)
#: Losses the writer counts (and logs itself).
_WRITER_COUNTERS = (
    "spans_failed_write",
    "episodes_failed_assembly",
    "spans_too_late_for_step",
    "episodes_lost_writer_crash",
    "spans_lost_writer_crash",
)
_ALL_COUNTERS = (
    *_LOSS_COUNTERS,
    "waits_for_writer",
    "episodes_expired_idle",
    "episodes_open_at_shutdown",
    "spans_of_remote_episodes",
)


def _is_local_root(record: SpanRecord) -> bool:
    """Whether the span has no parent in this process (a root, or a remote parent)."""
    return not record.parent_span_id or record.parent_is_remote


def _inherited_episode_id(parent_context: Context | None) -> Any:
    """The episode id of the parent span, else the one in W3C baggage (a remote parent)."""
    episode_id = _local_parent_episode_id(parent_context)
    if episode_id is not None:
        return episode_id
    return baggage.get_baggage(sc.EPISODE_ID, parent_context)


def _local_parent_episode_id(parent_context: Context | None) -> Any:
    """The episode id of the parent span in this process, if it has one."""
    parent = trace.get_current_span(parent_context)
    parent_attributes = getattr(parent, "attributes", None)
    return parent_attributes.get(sc.EPISODE_ID) if parent_attributes else None


def _attributes_of(span: Any) -> Any:
    """The span's attributes without building a read-only proxy (the SDK's, when it is one)."""
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    if type(inner) is dict:
        return inner
    return span.attributes or {}
