"""ExportQueue's rules, one by one, with export functions whose answers the test controls.

The queue is generic (any callable that sends a batch); the OTLP paths that use it are tested
against real servers in test_span_export*.py and test_exit_under_failures.py.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from conftest import wait_until

from agenttrace.export_queue import (
    COUNTERS,
    EXPORTER_LOGGERS,
    ExportQueue,
    short_reason,
    watch_exporter_logs,
)


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


def one_at_a_time(endpoint: Endpoint, **options) -> ExportQueue:
    """A queue that sends each item alone, one export at a time, at once."""
    return ExportQueue(
        endpoint, describe="test", max_batch=1, max_in_flight=1, schedule_delay=0.01, **options
    )


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


def test_what_is_queued_when_the_endpoint_goes_down_is_given_up_and_counted() -> None:
    """Items queued behind the export that makes the endpoint down are not sent: counted as
    skipped, and a flush waiting for them returns."""
    release = threading.Event()
    endpoint = Endpoint(ok=lambda batch: not release.wait(10))
    queue = ExportQueue(
        endpoint, describe="test", max_batch=4, max_in_flight=1, down_after=1, retry_interval=60
    )
    queue.put_many(range(4))  # sent, and held by the endpoint
    assert wait_until(lambda: len(endpoint.batches) == 1)
    assert queue.put_many(range(10, 17)) == 7  # queued behind it
    release.set()  # the export fails: down, and what waited is given up at once
    assert wait_until(lambda: queue.pending == 0, timeout=5)
    assert queue.flush(5.0) is True  # nothing left to wait for
    assert endpoint.batches == [[0, 1, 2, 3]]
    assert (queue.failed, queue.skipped, queue.exported) == (4, 7, 0)
    assert queue.put_many(range(3)) == 0 and queue.put(3) is False  # and while down
    assert queue.skipped == 11
    queue.close(1.0)
    adds_up(queue, 15)


def test_batches_are_bounded_by_bytes_too() -> None:
    endpoint = Endpoint()
    queue = ExportQueue(
        endpoint,
        describe="test",
        max_batch=100,
        max_in_flight=1,
        schedule_delay=60,
        size_of=lambda item: item,
        max_batch_bytes=10,
    )
    queue.put_many([4, 4, 4])  # 12 bytes: a batch is ready by size, not count
    assert wait_until(lambda: len(endpoint.batches) == 1)
    assert endpoint.batches == [[4, 4]]  # 8; the third would pass 10
    queue.put_many([30, 1])  # too large alone: it still goes, alone
    assert queue.flush(5.0)
    assert endpoint.batches == [[4, 4], [4], [30], [1]]
    queue.put_many([3, 3])  # 6 bytes: not ready until the delay or a flush
    time.sleep(0.2)
    assert len(endpoint.batches) == 4
    queue.close(1.0)
    assert endpoint.batches[-1] == [3, 3]
    assert adds_up(queue, 7)["exported"] == 7


def test_one_success_resets_the_failures_in_a_row_and_each_outage_is_counted() -> None:
    answers = iter([False, True, False, True, False, False, True])
    endpoint = Endpoint(ok=lambda batch: next(answers))
    queue = one_at_a_time(endpoint, down_after=2, retry_interval=0.05)
    for item in range(4):  # fail, ok, fail, ok: never two in a row
        queue.put(item)
        assert queue.flush(5.0)
        assert not queue.endpoint_down
    for item in (4, 5):  # two in a row: down
        queue.put(item)
        assert queue.flush(5.0)
    assert queue.endpoint_down and queue.times_down == 1
    time.sleep(0.1)
    queue.put(6)  # the probe works: up
    assert queue.flush(5.0)
    assert not queue.endpoint_down
    assert (queue.exported, queue.failed) == (3, 4)
    queue.close(1.0)


def test_each_failed_probe_doubles_the_wait_up_to_the_limit() -> None:
    endpoint = Endpoint(ok=False)
    queue = one_at_a_time(endpoint, down_after=1, retry_interval=0.05, max_retry_interval=0.15)
    waits = []
    for item in range(4):
        if item:
            time.sleep(queue.retry_wait + 0.05)  # past the wait: the next put probes
        queue.put(item)
        assert queue.flush(5.0)
        assert queue.endpoint_down
        waits.append(queue.retry_wait)
    assert waits == [0.05, 0.1, 0.15, 0.15]
    assert queue.times_down == 1  # one outage, probed three times
    assert queue.failed == 4
    queue.close(1.0)


def test_a_short_block_timeout_waits_then_drops() -> None:
    release = threading.Event()
    endpoint = Endpoint(ok=lambda batch: release.wait(10))
    queue = ExportQueue(
        endpoint, describe="test", max_queue=2, max_batch=1, max_in_flight=1, block_timeout=0.3
    )
    queue.put(0)
    assert wait_until(lambda: len(endpoint.batches) == 1)  # held by the endpoint
    assert queue.put_many([1, 2]) == 2
    started = time.monotonic()
    assert queue.put(3) is False  # waited for room that did not come
    assert 0.25 < time.monotonic() - started < 2.0
    assert (queue.waits, queue.dropped) == (1, 1)
    release.set()
    queue.close(5.0)
    adds_up(queue, 4)


def test_the_loss_summary_names_every_reason_and_the_last_error() -> None:
    release = threading.Event()
    endpoint = Endpoint(ok=lambda batch: RuntimeError("boom") if batch[0] < 2 else release.wait(5))
    queue = ExportQueue(
        endpoint,
        describe="the endpoint",
        max_queue=3,
        max_batch=1,
        max_in_flight=1,
        down_after=10,
        unit="records",
    )
    for item in range(2):
        queue.put(item)
        assert queue.flush(5.0)
    queue.put(2)
    assert wait_until(lambda: len(endpoint.batches) == 3)  # in flight, held
    assert queue.put_many(range(3, 7)) == 3  # 3 queued, 1 refused
    queue.close(0.2)
    release.set()
    assert queue.loss_summary() == (
        "7 of 7 records not exported to the endpoint (1 queue full, 2 export failed, "
        "4 still queued at the shutdown deadline; last error: RuntimeError: boom)"
    )
    assert queue.loss_summary("spans").startswith("7 of 7 spans not exported")


def test_a_raising_export_is_logged_once(caplog) -> None:
    endpoint = Endpoint(ok=lambda batch: RuntimeError("boom"))
    queue = ExportQueue(endpoint, describe="the endpoint", max_batch=1, down_after=100)
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        queue.put_many(range(3))
        assert queue.flush(5.0)
    raised = [r for r in caplog.records if "raised while exporting" in r.getMessage()]
    assert len(raised) == 1 and "the endpoint" in raised[0].getMessage()
    assert raised[0].exc_info is not None
    queue.close(1.0)
