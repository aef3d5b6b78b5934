"""One daemon thread draining a bounded queue in batches (after the SDK's BatchProcessor).

Unlike the SDK's batch processor, a full queue makes the producer *wait* (up to
``block_timeout``) instead of evicting the oldest item, so an RL loop that outruns the writer
is slowed down rather than losing data; only after the wait is an item dropped, and every drop
is counted. ``block_timeout=0`` never waits: a full queue refuses the item at once (counted),
for consumers that must never slow the producer (span export to a remote endpoint). ``put``
takes no lock on the fast path: ``deque.append`` is atomic in CPython.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

from agenttrace._threads import start_daemon

logger = logging.getLogger("agenttrace")


class _FlushRequest:
    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = True  # False when the queue was discarded instead of handled


class BackgroundWorker:
    """Feeds items to ``handle_batch`` on a named daemon thread.

    ``on_idle`` runs on the worker thread about every ``interval`` seconds (used to expire
    idle episodes); ``on_flush`` runs on the worker thread after the queue is drained by a
    flush, so sinks only ever see one thread.
    """

    def __init__(
        self,
        name: str,
        handle_batch: Callable[[list[Any]], None],
        *,
        max_queue: int,
        max_batch: int = 512,
        block_timeout: float = 30.0,
        interval: float = 1.0,
        on_flush: Callable[[], None] | None = None,
        on_idle: Callable[[], None] | None = None,
        wake_weight: int | None = None,
    ) -> None:
        self.name = name
        self._handle_batch = handle_batch
        self._max_queue = max_queue
        self._max_batch = max_batch
        # The thread wakes once the weight queued since it last ran reaches this (items count
        # 1 unless the producer says otherwise, e.g. spans per episode); else every interval.
        self._wake_at = wake_weight or max(1, min(max_batch, max_queue // 4))
        self._queued_weight = 0
        self._block_timeout = block_timeout
        self._interval = interval
        self._on_flush = on_flush
        self._on_idle = on_idle
        self.dropped = 0
        self.waits = 0  # puts that found the queue full and waited for room
        self.handled = 0
        self.errors = 0
        self._start()
        if hasattr(os, "register_at_fork"):
            ref = weakref.WeakMethod(self._start)
            os.register_at_fork(after_in_child=lambda: (m := ref()) and m())

    def _start(self) -> None:
        self._lock = threading.Lock()  # anew after a fork: another thread may have held it
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._space = threading.Condition(threading.Lock())
        self._stopping = False
        self._pid = os.getpid()
        self._thread = start_daemon(self._run, self.name)

    # --- producer side --------------------------------------------------------------------

    def put(self, item: Any, weight: int = 1) -> bool:
        """Queue an item; wait for room when full; False (and counted) when it had to drop."""
        queue = self._queue
        if len(queue) >= self._max_queue and not self._wait_for_room():
            with self._lock:
                self.dropped += 1
            return False
        queue.append(item)
        self._queued_weight += weight  # unlocked: only decides when to wake, roughly is fine
        if self._queued_weight >= self._wake_at and not self._wake.is_set():
            self._wake.set()
        return True

    def wake(self) -> None:
        """Have the thread handle what is queued now instead of at its next tick."""
        if not self._wake.is_set():
            self._wake.set()

    def _wait_for_room(self) -> bool:
        if self._block_timeout <= 0 or self._stopping:
            return False
        if threading.current_thread() is self._thread:
            return False
        with self._lock:
            self.waits += 1
        deadline = time.monotonic() + self._block_timeout
        self._wake.set()
        with self._space:
            while len(self._queue) >= self._max_queue:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._space.wait(min(remaining, 0.05))
        return True

    def flush(
        self, timeout: float | None = 30.0, stop_waiting: Callable[[], bool] | None = None
    ) -> bool:
        """Wait until everything queued before this call is handled; True when it was.

        ``stop_waiting``, when given, is asked every 50 ms; once it says True the wait ends
        early (False), e.g. when what the handler sends to is known to be down.
        """
        if not self._thread.is_alive():
            return not self._queue
        if threading.current_thread() is self._thread:
            self._drain()
            return True
        request = _FlushRequest()
        self._queue.append(request)
        self._wake.set()
        if stop_waiting is None:
            return request.done.wait(timeout) and request.ok
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if request.done.wait(max(0.0, remaining)):
                return request.ok
            if stop_waiting() or (deadline is not None and time.monotonic() >= deadline):
                return False

    def shutdown(self, timeout: float | None = 30.0) -> bool:
        """Flush, then stop the thread; ``timeout`` bounds both together."""
        deadline = None if timeout is None else time.monotonic() + timeout
        flushed = self.flush(timeout)
        self.stop(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return flushed

    def stop(self, timeout: float | None = None) -> bool:
        """Let the thread end once the queue is empty; wait at most ``timeout`` for it.

        True when it ended. A thread still busy then (a handler that does not return) is a
        daemon: it is left behind, never waited on longer.
        """
        self._stopping = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def discard(self) -> int:
        """Take every item still queued off the queue unhandled; the number of them.

        An item the thread has already taken (its current batch) is not among them. Flushes
        waiting on the discarded items return False.
        """
        queue = self._queue
        count = 0
        while True:
            try:
                item = queue.popleft()  # atomic: the thread never gets the same item
            except IndexError:
                break
            if type(item) is _FlushRequest:
                item.ok = False
                item.done.set()
            else:
                count += 1
        with self._space:
            self._space.notify_all()
        return count

    @property
    def queued(self) -> int:
        return len(self._queue)

    # --- worker side ----------------------------------------------------------------------

    def _run(self) -> None:
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            next_idle = time.monotonic() + self._interval
            while True:
                self._wake.wait(self._interval)
                self._wake.clear()
                self._drain()
                now = time.monotonic()
                if self._on_idle is not None and now >= next_idle:
                    next_idle = now + self._interval
                    self._guarded(self._on_idle, "idle check")
                if self._stopping and not self._queue:
                    return
        finally:
            detach(token)

    def _drain(self) -> None:
        queue = self._queue
        self._queued_weight = 0
        while queue:
            batch = []
            flushes = []
            while queue and len(batch) < self._max_batch:
                item = queue.popleft()
                if type(item) is _FlushRequest:
                    flushes.append(item)
                    break
                batch.append(item)
            if batch:
                self._guarded(lambda b=batch: self._handle_batch(b), "batch")
                self.handled += len(batch)
            with self._space:
                self._space.notify_all()
            if flushes:
                if self._on_flush is not None:
                    self._guarded(self._on_flush, "flush")
                for request in flushes:
                    request.done.set()

    def _guarded(self, fn: Callable[[], None], what: str) -> None:
        try:
            fn()
        except Exception:
            with self._lock:
                self.errors += 1
                first = self.errors == 1
            if first:
                logger.exception("agenttrace: %s %s failed; the program goes on", self.name, what)
            else:
                logger.debug("agenttrace: %s %s failed again", self.name, what, exc_info=True)
