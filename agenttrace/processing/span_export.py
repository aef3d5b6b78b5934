"""Span export to a remote endpoint that never slows the step loop down.

:class:`LosslessSpanProcessor` queues finished spans for any SpanExporter (agenttrace uses it
for the OTLP endpoint) and sends them in batches from a daemon thread. The step loop never
waits for the endpoint:

* ``on_end`` appends to a bounded queue; when the queue is full the span is not queued and is
  counted (``dropped``). It is not lost: the run folder's spans.jsonl, written by the
  TrajectoryProcessor from the records it already makes, holds every span.
* An endpoint that does not answer is not waited for, and spans are not held for it: once an
  export call has been going on for ``stall_after`` seconds (or four times as long as recent
  successful ones took, if that is longer), what is queued is given up and new spans are not
  queued until the call returns (both counted, ``skipped``). Holding tens of thousands of
  spans for a hung endpoint would cost the loop more than the export itself: every span kept
  alive makes Python's garbage collector work harder.
* After ``down_after`` failed exports in a row (a hung call fails at the exporter's timeout)
  the endpoint counts as down: spans are not queued for it (counted, ``skipped``) until
  ``retry_interval`` seconds have passed, then one batch probes it; each failed probe doubles
  the wait, up to ``max_retry_interval``. One warning when it goes down, one when it is back.
* ``force_flush`` and ``shutdown`` wait at most until their deadline, and not at all for an
  endpoint that is down. At shutdown whatever is still queued or being sent
  then is counted (``abandoned``) and left behind: the worker is a daemon thread, and an
  export call in progress cannot be interrupted (each OTLP export is bounded by the
  exporter's own timeout, ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default).

Every span the processor was given ends up in exactly one counter: ``exported``, or one of
the reasons in ``not_exported`` (``pending`` while it is still queued or being sent).

The name is historical: it used to make the producer wait for room instead of dropping.
``block_timeout`` > 0 still does that, for exporters where a slower loop is better than a
missing span; agenttrace's pipeline does not use it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenttrace.processing._worker import BackgroundWorker, leave_signals_to_the_main_thread

logger = logging.getLogger("agenttrace")


class _Batch:
    """The batch being sent: shutdown counts it as abandoned and the late result is ignored."""

    __slots__ = ("size", "stalled", "started")

    def __init__(self, size: int) -> None:
        self.size = size
        self.started = time.monotonic()
        self.stalled = False  # seen going on for longer than stall_after (the queue given up)


class LosslessSpanProcessor(SpanProcessor):
    """Sends sampled spans to ``exporter`` in batches from a background thread; never makes
    the caller wait for it (see the module docstring). Counters: :meth:`counts`."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue: int = 65_536,
        max_batch: int = 2_048,
        block_timeout: float = 0.0,
        schedule_delay: float = 1.0,
        shutdown_timeout: float = 5.0,
        stall_after: float = 0.5,
        down_after: int = 2,
        retry_interval: float = 2.0,
        max_retry_interval: float = 60.0,
        log_losses: bool = True,
    ) -> None:
        """
        Args:
            max_queue: spans waiting to be sent, at most; more are counted (``dropped``).
            max_batch: spans per export call.
            block_timeout: seconds ``on_end`` may wait for room in a full queue; 0 (the
                default) never waits.
            schedule_delay: seconds between sends when fewer than a batch are waiting.
            shutdown_timeout: the deadline of :meth:`shutdown` called without one (the
                SDK's TracerProvider does that).
            stall_after: seconds after which an export call that has not returned means the
                endpoint is not answering; at least four times the recent successful ones.
            down_after: failed exports in a row after which the endpoint counts as down.
            retry_interval: seconds before the first probe of an endpoint that is down;
                doubled after each failed probe, up to ``max_retry_interval``.
            log_losses: log one warning at shutdown when spans were not exported (off when
                the caller reports the counters itself).
        """
        self.exporter = exporter
        self.exported = 0
        self.failed = 0  # sent, and the exporter failed (or raised)
        self.skipped = 0  # not queued or not sent: the endpoint was down or not answering
        self.abandoned = 0  # still queued or being sent at the shutdown deadline
        self._shutdown_timeout = shutdown_timeout
        self._stall_floor = stall_after
        self._stall_after = stall_after
        self._typical_export: float | None = None  # seconds, recent successful exports
        self._down_after = max(1, down_after)
        self._retry_interval = retry_interval
        self._max_retry_interval = max(retry_interval, max_retry_interval)
        self._log_losses = log_losses
        self._closed = False
        self._abandoning = False
        self._in_flight: _Batch | None = None
        self._failures_in_a_row = 0
        self._down = False
        self._retry_at = 0.0
        self._retry_wait = retry_interval
        self._raised_before = False
        self.times_down = 0  # how often the endpoint went down
        self._lock = threading.Lock()
        self._worker = BackgroundWorker(
            f"agenttrace-span-export-{type(exporter).__name__}",
            self._export,
            max_queue=max_queue,
            max_batch=max_batch,
            block_timeout=block_timeout,
            interval=schedule_delay,
        )
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    def _after_fork_in_child(self) -> None:
        # The parent's worker thread does not exist here; what it was sending is the parent's.
        self._lock = threading.Lock()
        self._in_flight = None

    # --- caller's thread ------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed or not span.context.trace_flags.sampled:
            return
        if (self._down or self._in_flight is not None) and self._not_answering():
            with self._lock:
                self.skipped += 1
            return
        self._worker.put(span)  # a full queue refuses (and counts) it at once

    def _not_answering(self, give_up_queue: bool = True) -> bool:
        """Down and not due for a retry, or the export in progress has stalled. On the first
        sight of a stall, what is queued is given up (and counted) unless told otherwise."""
        now = time.monotonic()
        if self._down and now < self._retry_at:
            return True
        batch = self._in_flight
        if batch is None or now - batch.started <= self._stall_after:
            return False
        if give_up_queue and not batch.stalled:
            batch.stalled = True
            given_up = self._worker.discard()
            with self._lock:
                self.skipped += given_up
        return True

    # --- counters ---------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        """Spans not queued because the queue was full."""
        return self._worker.dropped

    @property
    def not_exported(self) -> int:
        """Spans that did not reach the exporter's endpoint, for any reason."""
        return self.dropped + self.failed + self.skipped + self.abandoned

    @property
    def pending(self) -> int:
        """Spans still queued or being sent (0 after shutdown)."""
        if self._abandoning:
            return 0
        in_flight = self._in_flight
        return self._worker.queued + (in_flight.size if in_flight is not None else 0)

    @property
    def endpoint_down(self) -> bool:
        """Whether the endpoint counts as down now (batches are not being sent)."""
        return self._down

    @property
    def producer_waits(self) -> int:
        """How often ``on_end`` waited for room (only with ``block_timeout`` > 0)."""
        return self._worker.waits

    def counts(self) -> dict[str, int]:
        """Every counter by name: ``exported``, ``not_exported`` (the sum of the four
        ``not_exported_*`` reasons) and ``pending``."""
        return {
            "exported": self.exported,
            "not_exported": self.not_exported,
            "not_exported_queue_full": self.dropped,
            "not_exported_export_failed": self.failed,
            "not_exported_endpoint_down": self.skipped,
            "not_exported_at_shutdown": self.abandoned,
            "pending": self.pending,
        }

    # --- worker thread ----------------------------------------------------------------------

    def _export(self, batch: list[ReadableSpan]) -> None:
        size = len(batch)
        with self._lock:
            if self._abandoning:
                self.abandoned += size
                return
            if self._down and time.monotonic() < self._retry_at:
                self.skipped += size
                return
            token = self._in_flight = _Batch(size)
        ok = False
        reason = "the exporter returned FAILURE"
        try:
            ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
            if ok:
                self._note_duration(time.monotonic() - token.started)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if not self._raised_before:
                self._raised_before = True
                logger.warning(
                    "agenttrace: %s raised while exporting spans; later errors are counted",
                    _describe(self.exporter),
                    exc_info=True,
                )
        with self._lock:
            if self._in_flight is not token:  # abandoned by shutdown meanwhile: counted there
                return
            self._in_flight = None
            if ok:
                self.exported += size
            else:
                self.failed += size
            change = self._note_outcome(ok)
        if change == "down":
            logger.warning(
                "agenttrace: span export to %s failed %d times in a row (%s); it counts as "
                "down: spans are not sent to it (and are counted) until a retry in %g s "
                "succeeds",
                _describe(self.exporter),
                self._failures_in_a_row,
                reason,
                self._retry_wait,
            )
        elif change == "up":
            logger.warning(
                "agenttrace: span export to %s works again; %d spans were not sent to it so far",
                _describe(self.exporter),
                self.not_exported,
            )

    def _note_duration(self, seconds: float) -> None:
        typical = self._typical_export
        typical = seconds if typical is None else 0.8 * typical + 0.2 * seconds
        self._typical_export = typical
        self._stall_after = min(max(self._stall_floor, 4 * typical), 60.0)

    def _note_outcome(self, ok: bool) -> str | None:
        """The breaker: "down" or "up" when the endpoint's state changed. Under the lock."""
        if ok:
            self._failures_in_a_row = 0
            if self._down:
                self._down = False
                self._retry_wait = self._retry_interval
                return "up"
            return None
        self._failures_in_a_row += 1
        if self._down:  # a failed probe: wait longer
            self._retry_wait = min(self._retry_wait * 2, self._max_retry_interval)
            self._retry_at = time.monotonic() + self._retry_wait
            return None
        if self._failures_in_a_row >= self._down_after:
            self._down = True
            self.times_down += 1
            self._retry_wait = self._retry_interval
            self._retry_at = time.monotonic() + self._retry_wait
            return "down"
        return None

    # --- SpanProcessor lifecycle ------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until the spans ended so far are sent, at most ``timeout_millis``; True when
        they were. Does not wait while the endpoint is down or not answering (an export
        call going on for longer than ``stall_after``): the caller may be the step loop."""
        if self._closed:
            return True
        deadline = time.monotonic() + timeout_millis / 1000
        flushed = self._worker.flush(
            timeout_millis / 1000, stop_waiting=lambda: self._not_answering(give_up_queue=False)
        )
        remaining = deadline - time.monotonic()
        if flushed and remaining > 0:
            try:
                flushed = self.exporter.force_flush(int(remaining * 1000)) is not False
            except Exception:
                logger.debug("agenttrace: exporter force_flush failed", exc_info=True)
        return flushed

    def shutdown(self, timeout_millis: int | None = None) -> None:
        """Send what is queued, at most until the deadline (``timeout_millis``, else
        ``shutdown_timeout``) and not at all while the endpoint is down; count the rest as
        ``abandoned`` and return. Idempotent."""
        if self._closed:
            return
        self._closed = True
        timeout = self._shutdown_timeout if timeout_millis is None else timeout_millis / 1000
        deadline = time.monotonic() + max(0.0, timeout)
        self._worker.flush(max(0.0, timeout), stop_waiting=self._is_down)
        with self._lock:
            self._abandoning = True
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None:
                self.abandoned += in_flight.size
            self.abandoned += self._worker.discard()
        self._worker.stop(max(0.0, deadline - time.monotonic()))
        _call_bounded(self.exporter.shutdown, max(0.0, deadline - time.monotonic()))
        if self._log_losses and self.not_exported:
            logger.warning("agenttrace: %s", self.loss_summary())

    def loss_summary(self) -> str:
        """``7,000 of 9,000 spans not exported to ... (reasons)``: one line."""
        parts = [
            f"{count:,} {label}"
            for count, label in (
                (self.dropped, "queue full"),
                (self.failed, "export failed"),
                (self.skipped, "endpoint down"),
                (self.abandoned, "still queued at the shutdown deadline"),
            )
            if count
        ]
        total = self.exported + self.not_exported
        return (
            f"{self.not_exported:,} of {total:,} spans not exported to "
            f"{_describe(self.exporter)} ({', '.join(parts) or 'none'})"
        )

    def _is_down(self) -> bool:
        return self._down


#: The names :meth:`LosslessSpanProcessor.counts` gives, in its order.
COUNTERS = (
    "exported",
    "not_exported",
    "not_exported_queue_full",
    "not_exported_export_failed",
    "not_exported_endpoint_down",
    "not_exported_at_shutdown",
    "pending",
)


def export_counts(processors: Iterable[LosslessSpanProcessor]) -> dict[str, int]:
    """:meth:`LosslessSpanProcessor.counts` summed over ``processors``; every name is there,
    0 without processors."""
    total = dict.fromkeys(COUNTERS, 0)
    for processor in processors:
        for name, value in processor.counts().items():
            total[name] += value
    return total


def _describe(exporter: Any) -> str:
    """``OTLPSpanExporter (http://host:4318/v1/traces)``; through wrappers that keep the real
    exporter as ``.exporter`` (the export content policy)."""
    inner = exporter
    for _ in range(5):
        nested = getattr(inner, "exporter", None)
        if nested is None:
            break
        inner = nested
    name = type(inner).__name__
    endpoint = getattr(inner, "_endpoint", None)
    return f"{name} ({endpoint})" if isinstance(endpoint, str) and endpoint else name


def _call_bounded(fn: Callable[[], Any], timeout: float) -> None:
    """Call ``fn``, waiting for it at most ``timeout`` seconds (it goes on in a daemon thread)."""

    def call() -> None:
        leave_signals_to_the_main_thread()
        try:
            fn()
        except Exception:
            logger.debug("agenttrace: exporter shutdown failed", exc_info=True)

    thread = threading.Thread(target=call, name="agenttrace-exporter-shutdown", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new threads at interpreter shutdown (3.12+): call it here
        call()
        return
    thread.join(timeout)
