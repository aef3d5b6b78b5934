"""Span export to a real OTLP/HTTP endpoint on 127.0.0.1: healthy, black-holed, failing then
back. The step loop never waits for the endpoint, shutdown keeps its deadline, and every span
ends up counted as exported or not exported (with a reason)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from backend_servers import BlackHole, OtlpReceiver
from conftest import wait_until
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import agenttrace as at


class FlakyReceiver(OtlpReceiver):
    """The OTLP receiver, answering 500 (not retried by the exporter) while ``failing``."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.refused = 0
        receiver = self
        healthy = self.server.RequestHandlerClass

        class Handler(healthy):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:
                if not receiver.failing:
                    super().do_POST()
                    return
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.refused += 1
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server.RequestHandlerClass = Handler


class Counting(SpanExporter):
    """Counts export calls, passes everything on."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.calls = 0

    def export(self, spans):
        self.calls += 1
        return self.exporter.export(spans)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    server = BlackHole()
    yield server
    server.stop()


@pytest.fixture
def flaky() -> Iterator[FlakyReceiver]:
    server = FlakyReceiver()
    yield server
    server.stop()


def exporter_to(endpoint: str, timeout: float = 5.0) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=timeout)


def traced(processor: at.LosslessSpanProcessor) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider.get_tracer("test")


def end_spans(tracer: Any, count: int, prefix: str = "s") -> float:
    """End ``count`` spans; the longest single ``end()`` (where processors' on_end run)."""
    longest = 0.0
    for i in range(count):
        span = tracer.start_span(f"{prefix}{i}")
        started = time.perf_counter()
        span.end()
        longest = max(longest, time.perf_counter() - started)
    return longest


def assert_adds_up(processor: at.LosslessSpanProcessor, ended: int) -> None:
    counts = processor.counts()
    reasons = sum(v for k, v in counts.items() if k.startswith("not_exported_"))
    assert counts["not_exported"] == reasons
    assert counts["pending"] == 0
    assert counts["exported"] + counts["not_exported"] == ended, counts


def test_a_healthy_receiver_gets_every_span_at_shutdown_without_a_flush(receiver) -> None:
    processor = at.LosslessSpanProcessor(exporter_to(receiver.endpoint))
    tracer = traced(processor)
    end_spans(tracer, 5_000)  # three batches, the last one partial
    processor.shutdown()  # no force_flush before: shutdown sends what is queued
    assert len(receiver.spans) == 5_000
    assert sorted(span.name for span in receiver.spans) == sorted(f"s{i}" for i in range(5_000))
    assert processor.exported == 5_000 and processor.not_exported == 0
    assert_adds_up(processor, 5_000)


def test_a_black_holed_endpoint_never_blocks_the_producer_and_shutdown_keeps_its_deadline(
    black_hole, caplog
) -> None:
    # Each export would hang for 3 s: any wait for the endpoint in on_end would show.
    exporter = Counting(exporter_to(black_hole.endpoint, timeout=3.0))
    processor = at.LosslessSpanProcessor(exporter, max_queue=1_000, max_batch=200)
    tracer = traced(processor)
    longest = end_spans(tracer, 20_000)
    assert processor.producer_waits == 0  # counted, not timed: on_end never waited for room
    assert processor.dropped > 0  # the queue filled while the first export hung
    assert longest < 1.0  # generous: a wait for the exporter would take 3 s
    assert wait_until(lambda: exporter.calls >= 1)  # an export is hanging now
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        processor.shutdown(timeout_millis=500)
    assert time.monotonic() - started < 0.5 + 1.5  # the deadline, plus slack for a slow host
    assert processor.exported == 0
    assert processor.abandoned > 0  # the hanging batch and what was still queued
    assert_adds_up(processor, 20_000)
    summary = [r.getMessage() for r in caplog.records if "spans not exported" in r.getMessage()]
    assert len(summary) == 1 and "20,000 of 20,000 spans not exported" in summary[0]


def test_force_flush_keeps_its_deadline_and_drops_nothing(black_hole) -> None:
    processor = at.LosslessSpanProcessor(exporter_to(black_hole.endpoint, timeout=3.0))
    tracer = traced(processor)
    end_spans(tracer, 3_000)
    started = time.monotonic()
    assert processor.force_flush(timeout_millis=300) is False
    assert time.monotonic() - started < 0.3 + 1.5
    assert processor.pending > 0 and processor.abandoned == 0  # still queued, not given up
    processor.shutdown(timeout_millis=200)
    assert_adds_up(processor, 3_000)


def test_an_endpoint_that_does_not_answer_holds_at_most_the_queue_then_counts_as_down(
    black_hole,
) -> None:
    # Not answering is not yet an error: the exporter's own timeout (0.5 s here) decides.
    exporter = Counting(exporter_to(black_hole.endpoint, timeout=0.5))
    processor = at.LosslessSpanProcessor(
        exporter,
        max_queue=1_000,
        max_batch=200,
        max_in_flight=2,
        schedule_delay=0.05,
        retry_interval=60,
    )
    tracer = traced(processor)
    end_spans(tracer, 5_000)
    # Held: the queue and the batches in flight, never more.
    assert processor.pending <= 1_000 + 2 * 200
    assert processor.dropped >= 5_000 - 1_000 - 2 * 200
    assert processor.failed == 0 and processor.skipped == 0  # not given up for slowness
    assert wait_until(lambda: processor.endpoint_down, timeout=10)  # two timeouts: down
    assert processor.failed >= 2 * 200
    started = time.monotonic()
    assert processor.force_flush(timeout_millis=5_000) is False  # does not wait while down
    assert time.monotonic() - started < 1.0
    end_spans(tracer, 100, prefix="later")  # not queued while down
    processor.shutdown(timeout_millis=200)
    assert processor.skipped >= 100
    assert processor.exported == 0
    assert_adds_up(processor, 5_100)


def test_a_slow_endpoint_that_answers_is_given_time() -> None:
    class Slow(SpanExporter):
        def __init__(self) -> None:
            self.names: list[str] = []

        def export(self, spans):
            time.sleep(0.15)
            self.names.extend(span.name for span in spans)
            return SpanExportResult.SUCCESS

    exporter = Slow()
    processor = at.LosslessSpanProcessor(exporter, max_batch=100, schedule_delay=0.02)
    tracer = traced(processor)
    end_spans(tracer, 100, prefix="first")
    assert wait_until(lambda: processor.exported == 100)
    for burst in range(50):
        end_spans(tracer, 20, prefix=f"b{burst}-")
        time.sleep(0.02)
    assert processor.force_flush(timeout_millis=10_000)
    processor.shutdown()
    assert processor.not_exported == 0 and processor.exported == 1_100
    assert len(exporter.names) == 1_100
    assert_adds_up(processor, 1_100)


def test_an_endpoint_that_is_down_is_left_alone_until_the_retry(black_hole, caplog) -> None:
    exporter = Counting(exporter_to(black_hole.endpoint, timeout=0.3))
    processor = at.LosslessSpanProcessor(
        exporter, max_batch=100, schedule_delay=0.05, down_after=2, retry_interval=60
    )
    tracer = traced(processor)
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        end_spans(tracer, 300)
        assert wait_until(lambda: processor.endpoint_down)
        assert wait_until(lambda: processor.pending == 0)
        calls = exporter.calls  # two failures (a third batch may have been in flight)
        assert 2 <= calls <= 3
        end_spans(tracer, 5_000, prefix="later")
        processor.force_flush(timeout_millis=5_000)  # while down: returns without waiting
        assert exporter.calls == calls  # no attempt until the retry is due
        assert processor.skipped > 0
        started = time.monotonic()
        processor.shutdown(timeout_millis=10_000)
        assert time.monotonic() - started < 2.0  # nothing to wait for on a dead endpoint
    assert processor.times_down == 1
    assert_adds_up(processor, 5_300)
    down = [r for r in caplog.records if "counts as down" in r.getMessage()]
    assert len(down) == 1  # logged once


def test_spans_reach_an_endpoint_again_once_it_recovers(flaky, caplog) -> None:
    processor = at.LosslessSpanProcessor(
        exporter_to(flaky.endpoint),
        max_batch=100,
        schedule_delay=0.05,
        down_after=2,
        retry_interval=0.2,
        max_retry_interval=0.4,
    )
    tracer = traced(processor)
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        flaky.failing = True
        end_spans(tracer, 1_000, prefix="during")
        assert wait_until(lambda: processor.endpoint_down)
        assert wait_until(lambda: processor.pending == 0)
        flaky.failing = False
        time.sleep(0.5)  # past the longest retry wait: the next batch probes
        end_spans(tracer, 1_000, prefix="after")
        assert processor.force_flush(timeout_millis=10_000)
        assert not processor.endpoint_down
        processor.shutdown()
    received = [span.name for span in flaky.spans]
    assert sorted(received) == sorted(f"after{i}" for i in range(1_000))
    assert flaky.refused >= 2
    assert processor.exported == 1_000
    assert processor.failed + processor.skipped == 1_000  # every span from before recovery
    assert_adds_up(processor, 2_000)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("counts as down" in m for m in messages) == 1
    assert sum("works again" in m for m in messages) == 1


def test_block_timeout_still_makes_the_producer_wait_when_asked_to() -> None:
    class Slow(SpanExporter):
        def export(self, spans):
            time.sleep(0.01)
            return SpanExportResult.SUCCESS

    processor = at.LosslessSpanProcessor(Slow(), max_queue=8, max_batch=4, block_timeout=30)
    tracer = traced(processor)
    end_spans(tracer, 100)
    processor.shutdown(timeout_millis=30_000)
    assert processor.producer_waits > 0 and processor.dropped == 0
    assert processor.exported == 100
    assert_adds_up(processor, 100)
