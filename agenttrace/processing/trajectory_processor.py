"""TrajectoryProcessor: rebuilds trajectories from live spans and hands them to sinks.

On the caller's thread (``on_start``/``on_end``) it only stamps the episode id on spans from
other instrumentations, turns finished spans into compact :class:`SpanRecord` s and appends
them to their episode's buffer. When an episode span ends, the buffer goes to a background
writer that runs the one assembler and the sinks. Nothing here raises into user code.

With a ``span_writer`` the same records are also written as OTLP/JSON lines (the run's
spans.jsonl): one conversion per span serves both products, and no span object outlives its
``on_end``. Spans outside episodes, late spans and spans over the per-episode limit still
reach the span file; only sampled spans do (RECORD_ONLY spans feed trajectories only).

Limits are explicit and every overflow is counted (``stats()``) and logged once:
``max_open_episodes`` (episodes beyond it are not tracked), ``max_spans_per_episode`` (later
spans of that episode are not kept; its trajectory comes out incomplete), spans that arrive
after their episode was written ("late"), and items the writer queue had to drop.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from agenttrace import semconv as sc
from agenttrace.processing._worker import BackgroundWorker
from agenttrace.sinks.base import Sink
from agenttrace.sinks.callback import CallbackSink
from agenttrace.storage.otlp_json import OtlpJsonLinesWriter
from agenttrace.trajectory.assembler import build_trajectory
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import SpanRecord, record_from_span

logger = logging.getLogger("agenttrace")

#: Attribute added to a trajectory whose episode lost spans to max_spans_per_episode.
DROPPED_SPANS_ATTRIBUTE = "agenttrace.dropped_spans"


class _Episode:
    __slots__ = (
        "dropped_spans",
        "quiet_since",
        "records",
        "root_span_id",
        "seen_count",
        "start_record",
    )

    def __init__(self, root_span_id: int) -> None:
        self.root_span_id = root_span_id  # 0 until the episode span itself is seen
        self.records: list[SpanRecord] = []
        # The episode span as it was at start: stands in for it if it never ends.
        self.start_record: SpanRecord | None = None
        self.dropped_spans = 0
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
        max_open_episodes: int = 10_000,
        max_spans_per_episode: int = 50_000,
        idle_timeout: float = 600.0,
        queue_size: int = 65_536,
        block_timeout: float = 30.0,
        check_interval: float = 1.0,
    ) -> None:
        self.sinks: list[Sink] = [_as_sink(sink) for sink in sinks]
        self.span_writer = span_writer
        self.spans_written = 0
        self._max_open = max_open_episodes
        self._max_spans = max_spans_per_episode
        self._idle_timeout = idle_timeout
        self._open: dict[str, _Episode] = {}
        self._written: OrderedDict[str, None] = OrderedDict()  # recent ids, to spot late spans
        self._rejected: OrderedDict[str, None] = OrderedDict()  # over the open-episode limit
        self._lock = threading.Lock()
        self._closed = False
        self._counts: Counter[str] = Counter()
        self._statuses: Counter[str] = Counter()
        self._sink_errors: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._worker = BackgroundWorker(
            "agenttrace-trajectory-writer",
            self._write_batch,
            max_queue=queue_size,
            max_batch=64,
            block_timeout=block_timeout,
            interval=check_interval,
            on_flush=self._flush_sinks,
            on_idle=self._expire_idle,
        )
        atexit.register(self._at_exit)

    # --- caller's thread --------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._closed:
            return
        try:
            episode_id = _attributes_of(span).get(sc.EPISODE_ID)
            if episode_id is None:
                parent = trace.get_current_span(parent_context)
                parent_attributes = getattr(parent, "attributes", None)
                if not parent_attributes:
                    return
                episode_id = parent_attributes.get(sc.EPISODE_ID)
                if episode_id is None:
                    return
                span.set_attribute(sc.EPISODE_ID, episode_id)
            if span.name == sc.EPISODE:
                episode = self._track(str(episode_id), span.context.span_id)
                if episode is not None and episode.start_record is None:
                    record = record_from_span(span)
                    episode.start_record = record._replace(attributes=dict(record.attributes))
        except Exception:
            self._internal_error("on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed:
            return
        try:
            episode_id = _attributes_of(span).get(sc.EPISODE_ID)
            if episode_id is None and self.span_writer is None:
                return
            record = record_from_span(span)
            if episode_id is None:
                self._put_spans([record])
                return
            if type(episode_id) is not str:
                episode_id = str(episode_id)
            is_root = record.name == sc.EPISODE
            episode = self._open.get(episode_id)
            if episode is None:
                episode = self._track(episode_id, record.span_id if is_root else 0)
                if episode is None:  # late, or over the open-episode limit
                    if self.span_writer is not None:
                        self._put_spans([record])
                    return
            if len(episode.records) >= self._max_spans and not is_root:
                episode.dropped_spans += 1
                self._count("spans_dropped_episode_limit")
                if self.span_writer is not None:
                    self._put_spans([record])
                return
            episode.records.append(record)
            if is_root and record.span_id in (episode.root_span_id, 0):
                self._finish(episode_id)
        except Exception:
            self._internal_error("on_end")

    def _put_spans(self, records: list[SpanRecord]) -> None:
        if not self._worker.put(records):
            self._count("spans_dropped_queue_full", len(records))

    def _track(self, episode_id: str, root_span_id: int) -> _Episode | None:
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
        if not self._worker.put((episode_id, episode)):
            self._count("episodes_dropped_queue_full")

    # --- writer thread ----------------------------------------------------------------------

    def _write_batch(self, batch: list[tuple[str, _Episode] | list[SpanRecord]]) -> None:
        for item in batch:
            if type(item) is list:
                self._write_spans(item)
                continue
            episode_id, episode = item
            self._write_spans(episode.records)
            records = episode.records
            if episode.start_record is not None and not any(
                r.span_id == episode.root_span_id for r in reversed(records)
            ):
                records = [episode.start_record, *records]  # the episode span never ended
            try:
                trajectory = build_trajectory(records, episode_id, trusted_scope=AGENTTRACE_SCOPE)
            except Exception:
                self._count("episodes_failed_assembly")
                logger.exception("agenttrace: could not rebuild episode %r", episode_id)
                continue
            if episode.dropped_spans:
                trajectory.attributes[DROPPED_SPANS_ATTRIBUTE] = episode.dropped_spans
                if trajectory.status != sc.STATUS_INCOMPLETE:
                    trajectory.attributes.setdefault(sc.EPISODE_STATUS, trajectory.status)
                    trajectory.status = sc.STATUS_INCOMPLETE
            with self._lock:
                self._statuses[trajectory.status] += 1
            for sink in self.sinks:
                try:
                    sink.write(trajectory)
                except Exception as exc:
                    self._sink_failed(sink, exc)

    def _write_spans(self, records: list[SpanRecord]) -> None:
        writer = self.span_writer
        if writer is None:
            return
        sampled = [record for record in records if record.sampled]
        if not sampled:
            return
        try:
            writer.write(sampled)
            self.spans_written += len(sampled)
        except Exception as exc:
            self._count("spans_failed_write", len(sampled))
            self._sink_failed(writer, exc)  # type: ignore[arg-type]

    def _sink_failed(self, sink: Sink, exc: Exception) -> None:
        name = type(sink).__name__
        with self._lock:
            self._sink_errors[name] += 1
            first = self._sink_errors[name] == 1
        if first:
            logger.error(
                "agenttrace: sink %s failed (%s: %s); its later errors are counted, "
                "other sinks go on",
                name,
                type(exc).__name__,
                exc,
            )

    def _flush_sinks(self) -> None:
        for sink in self._all_outputs():
            try:
                sink.flush()
            except Exception as exc:
                self._sink_failed(sink, exc)

    def _expire_idle(self) -> None:
        now = time.monotonic()
        idle = []
        with self._lock:
            for episode_id, episode in self._open.items():
                count = len(episode.records) + episode.dropped_spans
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
        with self._lock:
            still_open = list(self._open)
        for episode_id in still_open:
            self._finish(episode_id)
        if still_open:
            self._count("episodes_open_at_shutdown", len(still_open))
        self._closed = True
        self._worker.shutdown(timeout_millis / 1000)
        for sink in self._all_outputs():
            try:
                sink.close()
            except Exception as exc:
                self._sink_failed(sink, exc)
        problems = {k: v for k, v in self.stats().items() if k in _LOSS_COUNTERS and v}
        if problems:
            logger.warning("agenttrace: trajectory losses this run: %s", problems)
        atexit.unregister(self._at_exit)

    def _all_outputs(self) -> list[Any]:
        return [*self.sinks, self.span_writer] if self.span_writer is not None else self.sinks

    def _at_exit(self) -> None:
        self.shutdown(timeout_millis=10_000)

    # --- reporting --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for the run summary: statuses written and every kind of loss."""
        with self._lock:
            counts = dict(self._counts)
            statuses = dict(self._statuses)
            sink_errors = dict(self._sink_errors)
            open_now = len(self._open)
        stats: dict[str, Any] = {key: counts.get(key, 0) for key in _ALL_COUNTERS}
        stats["episodes_written"] = sum(statuses.values())
        stats["statuses"] = statuses
        stats["episodes_open"] = open_now
        stats["sink_errors"] = sink_errors
        stats["spans_written"] = self.spans_written
        stats["internal_errors"] = counts.get("internal_errors", 0) + self._worker.errors
        return stats

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


#: Instrumentation scope of agenttrace's own spans, whose content text its encoder wrote.
AGENTTRACE_SCOPE = "agenttrace"

_LOSS_COUNTERS = (
    "episodes_dropped_open_limit",
    "spans_dropped_episode_limit",
    "late_spans",
    "episodes_dropped_queue_full",
    "spans_dropped_queue_full",
    "spans_failed_write",
    "episodes_failed_assembly",
)
_ALL_COUNTERS = (*_LOSS_COUNTERS, "episodes_expired_idle", "episodes_open_at_shutdown")


def _attributes_of(span: Any) -> Any:
    """The span's attributes without building a read-only proxy (the SDK's, when it is one)."""
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    if type(inner) is dict:
        return inner
    return span.attributes or {}


def _as_sink(sink: Sink | Callable[[Trajectory], None]) -> Sink:
    if all(hasattr(sink, name) for name in ("write", "flush", "close")):
        return sink  # type: ignore[return-value]
    if callable(sink):
        return CallbackSink(sink)
    raise TypeError(f"not a sink: {sink!r} (needs write/flush/close, or be a callable)")
