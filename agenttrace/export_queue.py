"""A bounded queue that sends batches to a remote endpoint and counts every item it does not.

Both ways agenttrace sends spans over OTLP use it: :class:`~agenttrace.processing.span_export.
LosslessSpanProcessor` (SDK spans, on any TracerProvider) and the writer's span export
(:mod:`agenttrace.processing.record_export`, span records, in the writer process). The rules:

* ``put`` never waits for the endpoint: a full queue refuses the item at once (counted,
  ``dropped``), unless ``block_timeout`` > 0 asks the producer to wait for room.
* **Slowness is not death.** An export that takes long is waited for, however long, up to
  the exporter's own timeout. While one batch is on its way, up to ``max_in_flight - 1``
  more are sent beside it when the queue backs up, so an endpoint with high latency gets
  batches as fast as the producer makes them instead of losing the excess.
* **Errors are.** After ``down_after`` failed exports in a row (refused, error statuses,
  the exporter's timeout) the endpoint counts as down: items are not sent to it (counted,
  ``skipped``) until ``retry_interval`` seconds have passed; then one batch probes it, each
  failed probe doubling the wait up to ``max_retry_interval``. One warning when it goes
  down, one when it is back.
* ``flush`` and ``close`` keep their deadline and do not wait for an endpoint that is down.
  At the close deadline, what is still queued or being sent is counted (``abandoned``), the
  exporter is told to stop (its retries end), and the senders, daemon threads, are left.

Every item ``put`` is in exactly one counter: ``exported``, or one of the reasons in
``not_exported`` (``pending`` while it is queued or being sent).

The SDK's OTLP exporters log each failed attempt ("Transient error ... retrying in 1.00s").
Made on agenttrace's sender threads, those lines are taken by :func:`watch_exporter_logs`:
the last one is the reason agenttrace's own single line gives, and once closing, the first
one ends the wait (the exporter is stopped, so a refused or failing endpoint does not hold
the exit for the exporter's whole retry window).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from agenttrace._threads import start_daemon

logger = logging.getLogger("agenttrace")

#: The names :meth:`ExportQueue.counts` gives, in its order.
COUNTERS = (
    "exported",
    "not_exported",
    "not_exported_queue_full",
    "not_exported_export_failed",
    "not_exported_endpoint_down",
    "not_exported_at_shutdown",
    "pending",
)


class ExportQueue:
    """Sends queued items to ``export_batch`` in batches from daemon threads.

    ``export_batch(items)`` returns True when the endpoint accepted them (it may raise: that
    counts as a failure). ``describe`` names the endpoint in log lines. ``stop_exporter``,
    called once at the close deadline, makes exports in progress return (the SDK exporters'
    ``shutdown`` ends their retry waits).
    """

    def __init__(
        self,
        export_batch: Callable[[list[Any]], bool],
        *,
        describe: str,
        stop_exporter: Callable[[], None] | None = None,
        name: str = "agenttrace-export",
        max_queue: int = 65_536,
        max_batch: int = 2_048,
        max_in_flight: int = 4,
        block_timeout: float = 0.0,
        schedule_delay: float = 1.0,
        down_after: int = 2,
        retry_interval: float = 2.0,
        max_retry_interval: float = 60.0,
        size_of: Callable[[Any], int] | None = None,
        max_batch_bytes: int = 0,
        unit: str = "items",
    ) -> None:
        """``size_of`` and ``max_batch_bytes`` (> 0) also bound a batch by the items' sizes
        (one larger item still goes alone); ``unit`` names the items in log lines."""
        self._export_batch = export_batch
        self.describe = describe
        self._stop_exporter = stop_exporter
        self._name = name
        self._max_queue = max(1, max_queue)
        self._max_batch = max(1, max_batch)
        self._max_in_flight = max(1, max_in_flight)
        self._block_timeout = block_timeout
        self._schedule_delay = schedule_delay
        self._down_after = max(1, down_after)
        self._retry_interval = retry_interval
        self._max_retry_interval = max(retry_interval, max_retry_interval)
        self._size_of = size_of if max_batch_bytes > 0 else None
        self._max_batch_bytes = max_batch_bytes
        self.unit = unit
        self.exported = 0
        self.failed = 0  # sent, and the export failed (or raised)
        self.dropped = 0  # not queued: the queue was full
        self.skipped = 0  # not sent: the endpoint was down
        self.abandoned = 0  # still queued or being sent at the close deadline
        self.waits = 0  # puts that waited for room (block_timeout > 0 only)
        self.times_down = 0
        self.last_error = ""  # why the last failed export failed
        self._stopped = False
        self._start()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    def _start(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # queue, flushes, in-flight batches
        self._queue: deque[Any] = deque()
        self._queued_bytes = 0  # (with size_of)
        self._in_flight: dict[int, int] = {}  # batch number -> size
        self._batches = 0
        self._taken = 0  # items taken off the queue so far (flushes wait for a number)
        self._done = 0  # items whose export ended (any outcome), or given up
        self._flush_targets: list[int] = []
        self._oldest_since: float | None = None
        self._failures_in_a_row = 0
        self._down = False
        self._retry_at = 0.0
        self._retry_wait = self._retry_interval
        self._raised_before = False
        self._closing = False
        self._closed = False
        self._senders: list[threading.Thread] = []  # started by the first put

    def _after_fork_in_child(self) -> None:
        # The parent's threads do not exist here; what they were sending is the parent's.
        self._start()

    def _add_sender(self) -> None:
        try:
            thread = start_daemon(self._send_loop, self._name)
        except RuntimeError:  # no new threads at interpreter shutdown
            return
        self._senders.append(thread)

    # --- producer side ------------------------------------------------------------------------

    def put(self, item: Any) -> bool:
        """Queue one item; False (counted) when the queue is full or closed."""
        return self.put_many((item,)) == 1

    def put_many(self, items: Any) -> int:
        """Queue items; how many were queued (the rest are counted as dropped)."""
        items = list(items)
        if not items:
            return 0
        with self._lock:
            if self._closed:
                return 0
            if self._down and time.monotonic() < self._retry_at:
                self.skipped += len(items)
                return 0
            room = self._max_queue - len(self._queue)
            if room < len(items) and self._block_timeout > 0 and not self._closing:
                room = self._wait_for_room(len(items))
            taken = items[: max(0, room)]
            self.dropped += len(items) - len(taken)
            if taken:
                was_empty = not self._queue
                if was_empty:
                    self._oldest_since = time.monotonic()
                self._queue.extend(taken)
                if self._size_of is not None:
                    self._queued_bytes += sum(self._size_of(item) for item in taken)
                if not self._senders:
                    self._add_sender()
                if was_empty or self._batch_ready():
                    self._wake_senders()
        return len(taken)

    def _wait_for_room(self, wanted: int) -> int:
        """Under the lock: wait up to ``block_timeout`` for room; the room there is then."""
        if any(thread is threading.current_thread() for thread in self._senders):
            return self._max_queue - len(self._queue)
        self.waits += 1
        deadline = time.monotonic() + self._block_timeout
        self._changed.notify_all()
        while len(self._queue) + wanted > self._max_queue:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing:
                break
            self._changed.wait(min(remaining, 0.05))
        return self._max_queue - len(self._queue)

    def _wake_senders(self) -> None:
        """Under the lock: the queue changed (room for producers that wait; a batch may be
        ready); another sender if a batch waits, all are busy and there is room for one."""
        busy = len(self._in_flight)
        senders = len(self._senders)
        backed_up = self._batch_ready()
        if backed_up and busy >= senders < self._max_in_flight and not self._is_down_now():
            self._add_sender()
        self._changed.notify_all()

    def _batch_ready(self) -> bool:
        """Under the lock: a full batch waits (by count, or by size)."""
        if len(self._queue) >= self._max_batch:
            return True
        return self._size_of is not None and self._queued_bytes >= self._max_batch_bytes

    # --- counters -----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue) + sum(self._in_flight.values())

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def endpoint_down(self) -> bool:
        return self._down

    @property
    def retry_wait(self) -> float:
        """Seconds between probes of an endpoint that is down (doubles per failed probe)."""
        return self._retry_wait

    @property
    def not_exported(self) -> int:
        return self.dropped + self.failed + self.skipped + self.abandoned

    def counts(self) -> dict[str, int]:
        """Every counter by name (:data:`COUNTERS`)."""
        return {
            "exported": self.exported,
            "not_exported": self.not_exported,
            "not_exported_queue_full": self.dropped,
            "not_exported_export_failed": self.failed,
            "not_exported_endpoint_down": self.skipped,
            "not_exported_at_shutdown": self.abandoned,
            "pending": self.pending,
        }

    def loss_summary(self, what: str | None = None) -> str:
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
        reason = f"; last error: {self.last_error}" if self.last_error else ""
        return (
            f"{self.not_exported:,} of {total:,} {what or self.unit} not exported to "
            f"{self.describe} "
            f"({', '.join(parts) or 'none'}{reason})"
        )

    # --- sender threads -----------------------------------------------------------------------

    def _send_loop(self) -> None:
        with contextlib.suppress(Exception):  # (no OpenTelemetry context: never mind)
            from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, set_value

            attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        while True:
            taken = self._next_batch()
            if taken is None:
                return
            number, batch = taken
            if batch:
                self._send(number, batch)

    def _next_batch(self) -> tuple[int, list[Any]] | None:
        """Wait for a batch worth sending; None when closed and nothing is left."""
        with self._lock:
            while True:
                if self._closed:
                    return None
                queue = self._queue
                if queue:
                    now = time.monotonic()
                    if self._down and now < self._retry_at:
                        self._give_up_queue_down()
                        continue
                    due = (
                        self._batch_ready()
                        or self._flush_targets
                        or self._closing
                        or (
                            self._oldest_since is not None
                            and now - self._oldest_since >= self._schedule_delay
                        )
                    )
                    if due:
                        batch = self._take_batch()
                        size = len(batch)
                        self._oldest_since = now if queue else None
                        self._taken += size
                        self._batches += 1
                        self._in_flight[self._batches] = size
                        self._wake_senders()  # another sender if more batches wait
                        return self._batches, batch
                    wait = self._schedule_delay - (now - (self._oldest_since or now))
                elif self._closing:
                    return None
                else:
                    wait = None
                self._changed.wait(None if wait is None else max(0.01, wait))

    def _take_batch(self) -> list[Any]:
        """Under the lock: the next batch off the queue, at most ``max_batch`` items and,
        with ``size_of``, ``max_batch_bytes`` (but at least one item)."""
        queue = self._queue
        size_of = self._size_of
        if size_of is None:
            return [queue.popleft() for _ in range(min(len(queue), self._max_batch))]
        batch: list[Any] = []
        total = 0
        while queue and len(batch) < self._max_batch:
            size = size_of(queue[0])
            if batch and total + size > self._max_batch_bytes:
                break
            batch.append(queue.popleft())
            total += size
        self._queued_bytes -= total
        return batch

    def _give_up_queue_down(self) -> None:
        """Under the lock, while the endpoint is down: what is queued is not sent (counted)."""
        count = len(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        self._oldest_since = None
        self.skipped += count
        self._taken += count
        self._done += count
        self._changed.notify_all()

    def _send(self, number: int, batch: list[Any]) -> None:
        ok = False
        reason = "the exporter returned FAILURE"
        said: list[str] = []
        try:
            with watch_exporter_logs(lambda message: self._exporter_said(message, said)):
                ok = bool(self._export_batch(batch))
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if not self._raised_before:
                self._raised_before = True
                logger.warning(
                    "agenttrace: %s raised while exporting; later errors are counted",
                    self.describe,
                    exc_info=True,
                )
        with self._lock:
            size = self._in_flight.pop(number, None)
            if size is None:  # given up at the close deadline meanwhile: counted there
                return
            self._done += size
            if ok:
                self.exported += size
            else:
                self.failed += size
                self.last_error = short_reason(said[0]) if said else reason
            change = self._note_outcome(ok)
            self._changed.notify_all()
            if self._closing:  # at the exit the exit line tells; no warnings while closing
                change = None
        if change == "down":
            logger.warning(
                "agenttrace: export to %s failed %d times in a row (%s); it counts as down: "
                "nothing is sent to it (and what is not sent is counted) until a retry in "
                "%g s succeeds",
                self.describe,
                self._failures_in_a_row,
                self.last_error or reason,
                self._retry_wait,
            )
        elif change == "up":
            logger.warning(
                "agenttrace: export to %s works again; %d %s were not sent to it so far",
                self.describe,
                self.not_exported,
                self.unit,
            )

    def _exporter_said(self, message: str, said: list[str]) -> None:
        """A log line of the exporter, made while it sends a batch of ours."""
        said.append(message)
        if self._closing:  # a failing endpoint at the exit: no more retries
            self._stop_exporter_once(0.5)

    def _stop_exporter_once(self, timeout: float) -> None:
        with self._lock:
            if self._stopped or self._stop_exporter is None:
                return
            self._stopped = True
        call_bounded(self._stop_exporter, timeout)

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

    # --- flush and close ----------------------------------------------------------------------

    def flush(self, timeout: float) -> bool:
        """Wait until what was queued before this call was sent (any outcome), at most
        ``timeout`` seconds and not at all while the endpoint is down; True when it was."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            target = self._taken + len(self._queue)
            if self._done >= target:
                return True
            self._flush_targets.append(target)
            self._changed.notify_all()
            try:
                while self._done < target:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._closed or self._is_down_now():
                        return False
                    self._changed.wait(min(remaining, 0.05))
                return True
            finally:
                self._flush_targets.remove(target)

    def _is_down_now(self) -> bool:
        return self._down and time.monotonic() < self._retry_at

    def close(self, timeout: float) -> None:
        """Send what is queued, until the deadline (not at all while down); then count what
        is left as abandoned and stop the exporter. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._changed.notify_all()
        deadline = time.monotonic() + max(0.0, timeout)
        self.flush(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._closed = True
            left = len(self._queue) + sum(self._in_flight.values())
            self.abandoned += left
            self._done += left
            self._queue.clear()
            self._queued_bytes = 0
            self._in_flight.clear()
            self._changed.notify_all()
        self._stop_exporter_once(max(0.05, deadline - time.monotonic()))


#: The loggers of the SDK's OTLP exporters (HTTP and gRPC; spans, metrics, logs).
EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "opentelemetry.exporter.otlp.common.http",
)

_watchers: dict[int, Callable[[str], None]] = {}  # thread ident -> who takes its lines
_filter_installed = False
_filter_lock = threading.Lock()


class _TakeExporterLines(logging.Filter):
    """Lines an exporter logs on a thread that :func:`watch_exporter_logs` watches go to the
    watcher instead of the program's log (agenttrace reports them in its own words)."""

    def filter(self, record: logging.LogRecord) -> bool:
        watcher = _watchers.get(threading.get_ident())
        if watcher is None:
            return True
        try:
            watcher(record.getMessage())
        except Exception:
            logger.debug("agenttrace: an exporter log watcher failed", exc_info=True)
        return False


@contextlib.contextmanager
def watch_exporter_logs(watcher: Callable[[str], None]) -> Any:
    """While in the block, what the SDK's OTLP exporters log on this thread goes to
    ``watcher`` (the text of each line), not to the program's log."""
    global _filter_installed
    if not _filter_installed:
        with _filter_lock:
            if not _filter_installed:
                take = _TakeExporterLines()
                for name in EXPORTER_LOGGERS:
                    logging.getLogger(name).addFilter(take)
                _filter_installed = True
    ident = threading.get_ident()
    _watchers[ident] = watcher
    try:
        yield
    finally:
        _watchers.pop(ident, None)


def short_reason(message: str) -> str:
    """An exporter's log line as a short reason: ``Connection refused``, ``Service
    Unavailable``, at most 160 characters."""
    text = message.strip()
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno:
        return errno.group(1).strip()
    grpc = re.search(r"error code: StatusCode\.(\w+)(?:, error details: (.*))?", text)
    if grpc:  # the gRPC exporter's "Failed to export traces to HOST, error code: ..."
        text = grpc.group(1) + (f": {grpc.group(2).strip()}" if grpc.group(2) else "")
        return text if len(text) <= 160 else text[:157] + "..."
    for prefix in ("Transient error ", "Failed to export "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    text = re.split(r" encountered while exporting| retrying in ", text)[0].rstrip(" ,.")
    text = re.sub(r"^\w+ batch due to ", "", text)  # "... batch due to timeout, max retries"
    return text if len(text) <= 160 else text[:157] + "..."


def call_bounded(fn: Callable[[], Any], timeout: float) -> None:
    """Call ``fn``, waiting for it at most ``timeout`` seconds (it goes on in a daemon thread)."""

    def call() -> None:
        try:
            fn()
        except Exception:
            logger.debug("agenttrace: stopping an exporter failed", exc_info=True)

    try:
        thread = start_daemon(call, "agenttrace-exporter-shutdown")
    except RuntimeError:  # no new threads at interpreter shutdown (3.12+): call it here
        call()
        return
    thread.join(timeout)
