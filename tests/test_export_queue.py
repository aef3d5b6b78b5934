"""ExportQueue's rules, one by one, with export functions whose answers the test controls.

The queue is generic (any callable that sends a batch); the OTLP paths that use it are tested
against real servers in test_span_export*.py and test_exit_under_failures.py.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from agenttrace.processing.export_queue import (
    COUNTERS,
    EXPORTER_LOGGERS,
    ExportQueue,
    short_reason,
    watch_exporter_logs,
)


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class Endpoint:
    """Records each batch; answers ``ok`` (a bool, or a callable of the batch)."""

    def __init__(self, ok=True, delay: float = 0.0) -> None:
        self.ok = ok
        self.delay = delay
        self.batches: list[list[int]] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.stopped = 0

    def __call__(self, batch: list[int]) -> bool:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            self.batches.append(list(batch))
            ok = self.ok(batch) if callable(self.ok) else self.ok
            if isinstance(ok, Exception):
                raise ok
            return ok
        finally:
            with self.lock:
                self.in_flight -= 1

    def stop(self) -> None:
        self.stopped += 1

    @property
    def items(self) -> list[int]:
        return [item for batch in self.batches for item in batch]


def adds_up(queue: ExportQueue, put: int) -> dict[str, int]:
    counts = queue.counts()
    assert list(counts) == list(COUNTERS)
    reasons = sum(v for k, v in counts.items() if k.startswith("not_exported_"))
    assert counts["not_exported"] == reasons == queue.not_exported
    assert counts["exported"] + counts["not_exported"] + counts["pending"] == put, counts
    return counts


def test_batches_are_at_most_max_batch_and_every_item_arrives_once() -> None:
    endpoint = Endpoint()
    queue = ExportQueue(endpoint, describe="test", max_batch=10, schedule_delay=60)
    assert queue.put_many(range(95)) == 95
    assert wait_until(lambda: len(endpoint.items) == 90)  # nine full batches, not the rest
    time.sleep(0.1)
    assert len(endpoint.items) == 90 and queue.pending == 5  # the last 5 wait for the delay
    assert queue.flush(5.0)  # a flush sends what is left at once
    assert sorted(endpoint.items) == list(range(95))
    assert max(len(batch) for batch in endpoint.batches) == 10
    queue.close(1.0)
    assert adds_up(queue, 95)["exported"] == 95


def test_a_partial_batch_goes_after_the_schedule_delay() -> None:
    endpoint = Endpoint()
    queue = ExportQueue(endpoint, describe="test", max_batch=100, schedule_delay=0.2)
    started = time.monotonic()
    queue.put(1)
    assert wait_until(lambda: endpoint.items == [1], timeout=5)
    assert time.monotonic() - started >= 0.15
    queue.close(1.0)


def test_a_full_queue_refuses_at_once_and_counts() -> None:
    release = threading.Event()
    endpoint = Endpoint(ok=lambda batch: release.wait(10))
    queue = ExportQueue(endpoint, describe="test", max_queue=10, max_batch=5, max_in_flight=1)
    queue.put_many(range(5))  # one batch, held by the endpoint
    assert wait_until(lambda: len(endpoint.batches) == 1)
    started = time.monotonic()
    assert queue.put_many(range(100, 120)) == 10  # room for 10; 10 refused, no wait
    assert queue.put(999) is False
    assert time.monotonic() - started < 0.5
    assert queue.dropped == 11 and queue.waits == 0
    release.set()
    assert queue.flush(5.0)
    queue.close(1.0)
    assert adds_up(queue, 26) == {**adds_up(queue, 26), "exported": 15, "not_exported": 11}


def test_block_timeout_makes_the_producer_wait_for_room() -> None:
    endpoint = Endpoint(delay=0.01)
    queue = ExportQueue(
        endpoint, describe="test", max_queue=4, max_batch=2, block_timeout=30, max_in_flight=1
    )
    for item in range(50):
        assert queue.put(item)
    assert queue.flush(10.0)
    assert queue.waits > 0 and queue.dropped == 0
    assert sorted(endpoint.items) == list(range(50))
    queue.close(1.0)


def test_slowness_is_never_a_failure_and_batches_go_side_by_side() -> None:
    endpoint = Endpoint(delay=0.3)
    queue = ExportQueue(endpoint, describe="test", max_batch=10, max_in_flight=3)
    queue.put_many(range(200))
    assert queue.flush(30.0)
    assert sorted(endpoint.items) == list(range(200))
    assert endpoint.most_in_flight == 3  # never more than max_in_flight
    assert queue.failed == queue.skipped == queue.dropped == 0 and not queue.endpoint_down
    queue.close(1.0)


def test_one_batch_at_a_time_while_the_queue_does_not_back_up() -> None:
    endpoint = Endpoint(delay=0.05)
    queue = ExportQueue(endpoint, describe="test", max_batch=100, schedule_delay=0.01)
    for item in range(20):
        queue.put(item)
        time.sleep(0.02)
    assert queue.flush(5.0)
    assert endpoint.most_in_flight == 1
    queue.close(1.0)


def test_failures_in_a_row_make_the_endpoint_down_then_a_probe_brings_it_back(caplog) -> None:
    healthy = threading.Event()
    endpoint = Endpoint(ok=lambda batch: healthy.is_set())
    queue = ExportQueue(
        endpoint,
        describe="test endpoint",
        max_batch=5,
        max_in_flight=1,
        schedule_delay=0.01,
        down_after=3,
        retry_interval=0.3,
        max_retry_interval=0.5,
    )
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        for batch in range(3):
            queue.put_many(range(batch * 5, batch * 5 + 5))
            assert wait_until(lambda b=batch: len(endpoint.batches) == b + 1)
            assert queue.endpoint_down == (batch == 2)  # down at the third failure, not before
        assert queue.failed == 15 and queue.times_down == 1
        assert queue.put_many(range(100, 110)) == 0  # not queued while down
        assert queue.skipped == 10
        started = time.monotonic()
        assert queue.flush(5.0)  # nothing queued: true at once
        assert time.monotonic() - started < 0.2
        time.sleep(0.35)  # past the retry wait: the next batch probes, and fails
        queue.put_many(range(200, 205))
        assert wait_until(lambda: len(endpoint.batches) == 4)
        assert queue.endpoint_down and queue.failed == 20
        time.sleep(0.55)  # the wait doubled (0.6), capped at 0.5
        healthy.set()
        queue.put_many(range(300, 305))
        assert wait_until(lambda: not queue.endpoint_down)
        queue.put_many(range(400, 405))
        assert queue.flush(5.0)
    assert queue.exported == 10
    queue.close(1.0)
    adds_up(queue, 3 * 5 + 10 + 5 + 5 + 5)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed 3 times in a row" in m and "counts as down" in m for m in messages) == 1
    assert sum("test endpoint works again" in m for m in messages) == 1


def test_a_raising_export_is_a_failure_logged_once() -> None:
    endpoint = Endpoint(ok=lambda batch: RuntimeError("boom"))
    queue = ExportQueue(endpoint, describe="test", max_batch=1, down_after=100)
    queue.put_many(range(3))
    assert queue.flush(5.0)
    assert queue.failed == 3 and queue.last_error == "RuntimeError: boom"
    queue.close(1.0)


def test_flush_keeps_its_deadline_and_close_abandons_what_is_left() -> None:
    release = threading.Event()
    endpoint = Endpoint(ok=lambda batch: release.wait(10))
    queue = ExportQueue(endpoint, describe="test", max_batch=10, max_in_flight=1)
    queue.put_many(range(35))
    started = time.monotonic()
    assert queue.flush(0.3) is False
    assert 0.25 < time.monotonic() - started < 1.5
    started = time.monotonic()
    queue.close(0.3)
    assert time.monotonic() - started < 1.5
    assert queue.abandoned == 35 and queue.pending == 0  # the batch in flight and the queue
    release.set()
    time.sleep(0.1)  # the late answer of the abandoned batch changes nothing
    assert queue.exported == 0
    adds_up(queue, 35)
    assert queue.put(1) is False  # closed


def test_close_stops_the_exporter_once_even_when_its_lines_ask_again() -> None:
    stops = []

    def export(batch):
        logging.getLogger(EXPORTER_LOGGERS[0]).warning("Transient error Service Unavailable")
        return False

    queue = ExportQueue(export, describe="test", stop_exporter=lambda: stops.append(1))
    queue.put_many(range(3))
    queue.close(2.0)
    queue.close(2.0)
    assert stops == [1]
    assert queue.failed == 3 and queue.last_error == "Service Unavailable"


def test_at_close_the_first_failed_attempt_ends_the_wait() -> None:
    """The exporter retries for its whole timeout; its first line during close stops it."""
    stop = threading.Event()

    def export(batch):
        log = logging.getLogger(EXPORTER_LOGGERS[0])
        for _ in range(50):  # like the SDK: a line, then a wait that shutdown interrupts
            log.warning("Transient error Connection refused encountered while exporting")
            if stop.wait(0.2):
                return False
        return False

    queue = ExportQueue(export, describe="test", stop_exporter=stop.set, schedule_delay=60)
    queue.put_many(range(4))
    started = time.monotonic()
    queue.close(8.0)
    assert time.monotonic() - started < 2.0
    assert queue.failed == 4 and queue.last_error == "Connection refused"


def test_exporter_lines_go_to_the_watcher_only_on_the_watched_thread(caplog) -> None:
    log = logging.getLogger(EXPORTER_LOGGERS[-1])
    heard: list[str] = []
    with caplog.at_level(logging.WARNING), watch_exporter_logs(heard.append):
        log.warning("mine")
        other = threading.Thread(target=lambda: log.warning("someone else's"))
        other.start()
        other.join()
    log.warning("after")
    assert heard == ["mine"]
    assert [r.getMessage() for r in caplog.records] == ["someone else's", "after"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            "Transient error HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded "
            '(Caused by NewConnectionError("...: Failed to establish a new connection: [Errno '
            '111] Connection refused")) encountered while exporting spans batch, retrying in 1s.',
            "Connection refused",
        ),
        (
            "Transient error Service Unavailable encountered while exporting spans batch, "
            "retrying in 1.00s.",
            "Service Unavailable",
        ),
        (
            "Failed to export spans batch due to timeout, max retries or shutdown.",
            "timeout, max retries or shutdown",
        ),
        ("Failed to export span batch code: 400, reason: bad", "span batch code: 400, reason: bad"),
        ("x" * 300, "x" * 157 + "..."),
        (
            "Failed to export traces to 127.0.0.1:4317, error code: StatusCode.UNAVAILABLE, "
            "error details: failed to connect to all addresses",
            "UNAVAILABLE: failed to connect to all addresses",
        ),
    ],
)
def test_short_reasons(line: str, reason: str) -> None:
    assert short_reason(line) == reason
