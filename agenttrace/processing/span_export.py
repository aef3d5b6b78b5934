"""Span export to a remote endpoint that never slows the step loop down.

:class:`LosslessSpanProcessor` queues finished spans for any SpanExporter and sends them in
batches from daemon threads, by the rules of :class:`~agenttrace.export_queue.
ExportQueue`: the producer never waits for the endpoint (a full queue refuses a span at once,
counted); a slow endpoint is waited for, however slow, up to the exporter's own timeout, with
more batches in flight when the queue backs up; only failed exports (refused, error statuses,
the exporter's timeout) make an endpoint count as down; ``force_flush`` and ``shutdown`` keep
their deadline. Every span it was given ends up in one counter: ``exported``, or a reason in
``not_exported``.

agenttrace's own pipeline does not add this processor: its writer sends the span records it
already makes (:mod:`agenttrace.processing.record_export`), in the writer process when there
is one. Use this one to send spans of a TracerProvider of your own without losing the step
loop's time.

The name is historical: it used to make the producer wait for room instead of dropping.
``block_timeout`` > 0 still does that, for exporters where a slower loop is better than a
missing span.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenttrace.export_queue import COUNTERS, ExportQueue

__all__ = ["COUNTERS", "LosslessSpanProcessor", "describe_exporter"]

logger = logging.getLogger("agenttrace")


class LosslessSpanProcessor(SpanProcessor):
    """Sends sampled spans to ``exporter`` in batches from background threads; never makes
    the caller wait for it (see the module docstring). Counters: :meth:`counts`."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue: int = 65_536,
        max_batch: int = 2_048,
        max_in_flight: int = 4,
        block_timeout: float = 0.0,
        schedule_delay: float = 1.0,
        shutdown_timeout: float = 5.0,
        down_after: int = 2,
        retry_interval: float = 2.0,
        max_retry_interval: float = 60.0,
        log_losses: bool = True,
    ) -> None:
        """
        Args:
            max_queue: spans waiting to be sent, at most; more are counted (``dropped``).
            max_batch: spans per export call.
            max_in_flight: export calls at once, at most, while the queue backs up.
            block_timeout: seconds ``on_end`` may wait for room in a full queue; 0 (the
                default) never waits.
            schedule_delay: seconds a span may wait for a batch to fill before it is sent.
            shutdown_timeout: the deadline of :meth:`shutdown` called without one (the
                SDK's TracerProvider does that).
            down_after: failed exports in a row after which the endpoint counts as down.
            retry_interval: seconds before the first probe of an endpoint that is down;
                doubled after each failed probe, up to ``max_retry_interval``.
            log_losses: log one warning at shutdown when spans were not exported (off when
                the caller reports the counters itself).
        """
        self.exporter = exporter
        self._shutdown_timeout = shutdown_timeout
        self._log_losses = log_losses
        self._closed = False
        self._queue = ExportQueue(
            self._export,
            describe=describe_exporter(exporter),
            stop_exporter=exporter.shutdown,
            name=f"agenttrace-span-export-{type(exporter).__name__}",
            max_queue=max_queue,
            max_batch=max_batch,
            max_in_flight=max_in_flight,
            block_timeout=block_timeout,
            schedule_delay=schedule_delay,
            down_after=down_after,
            retry_interval=retry_interval,
            max_retry_interval=max_retry_interval,
            unit="spans",
        )

    def _export(self, batch: list[ReadableSpan]) -> bool:
        return self.exporter.export(batch) == SpanExportResult.SUCCESS

    # --- caller's thread ------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed or not span.context.trace_flags.sampled:
            return
        self._queue.put(span)

    # --- counters ---------------------------------------------------------------------------

    @property
    def exported(self) -> int:
        return self._queue.exported

    @property
    def failed(self) -> int:
        """Spans sent whose export failed (or raised)."""
        return self._queue.failed

    @property
    def skipped(self) -> int:
        """Spans not sent because the endpoint was down."""
        return self._queue.skipped

    @property
    def abandoned(self) -> int:
        """Spans still queued or being sent at the shutdown deadline."""
        return self._queue.abandoned

    @property
    def dropped(self) -> int:
        """Spans not queued because the queue was full."""
        return self._queue.dropped

    @property
    def times_down(self) -> int:
        """How often the endpoint went down."""
        return self._queue.times_down

    @property
    def not_exported(self) -> int:
        """Spans that did not reach the exporter's endpoint, for any reason."""
        return self._queue.not_exported

    @property
    def pending(self) -> int:
        """Spans still queued or being sent (0 after shutdown)."""
        return self._queue.pending

    @property
    def endpoint_down(self) -> bool:
        """Whether the endpoint counts as down now (batches are not being sent)."""
        return self._queue.endpoint_down

    @property
    def producer_waits(self) -> int:
        """How often ``on_end`` waited for room (only with ``block_timeout`` > 0)."""
        return self._queue.waits

    def counts(self) -> dict[str, int]:
        """Every counter by name: ``exported``, ``not_exported`` (the sum of the four
        ``not_exported_*`` reasons) and ``pending``."""
        return self._queue.counts()

    def loss_summary(self) -> str:
        """``7,000 of 9,000 spans not exported to ... (reasons)``: one line."""
        return self._queue.loss_summary()

    # --- SpanProcessor lifecycle ------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until the spans ended so far are sent, at most ``timeout_millis``; True when
        they were. Does not wait while the endpoint is down."""
        if self._closed:
            return True
        return self._queue.flush(timeout_millis / 1000)

    def shutdown(self, timeout_millis: int | None = None) -> None:
        """Send what is queued, at most until the deadline (``timeout_millis``, else
        ``shutdown_timeout``) and not at all while the endpoint is down; count the rest as
        ``abandoned``, stop the exporter and return. Idempotent."""
        if self._closed:
            return
        self._closed = True
        timeout = self._shutdown_timeout if timeout_millis is None else timeout_millis / 1000
        self._queue.close(max(0.0, timeout))
        if self._log_losses and self.not_exported:
            logger.warning("agenttrace: %s", self.loss_summary())


def describe_exporter(exporter: Any) -> str:
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
