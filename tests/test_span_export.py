"""Spans reach a real OTLP/HTTP endpoint when OTEL_EXPORTER_OTLP_* says so, and none are lost."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from backend_servers import OtlpReceiver, refused_endpoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.storage import read_otlp_json


@pytest.fixture
def collector() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def test_otlp_endpoint_from_environment_receives_every_span(tmp_path, monkeypatch, collector):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    runtime = at.configure(out=str(tmp_path))
    for episode in range(20):
        with at.episode(task_id=str(episode)):
            for _ in range(10):
                with at.timestep(), at.env_step() as step:
                    step.record(reward=1.0)
    runtime.shutdown()
    in_file = list(read_otlp_json(runtime.span_paths))
    assert len(in_file) == 20 * (1 + 2 * 10)
    assert len(collector.spans) == len(in_file)
    names = {span.name for span in collector.spans}
    assert names == {sc.EPISODE, sc.TIMESTEP, sc.ENV_STEP}
    stats = runtime.stats()
    assert stats["spans_exported"] == len(in_file)
    assert stats["spans_dropped"] == 0 and stats["spans_export_failed"] == 0


def test_no_otlp_exporter_is_added_to_a_provider_agenttrace_does_not_own(
    tmp_path, monkeypatch, collector
):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    runtime = at.configure(out=str(tmp_path), tracer_provider=TracerProvider())
    with at.episode():
        pass
    runtime.shutdown()
    assert runtime.stats()["spans_exported"] == 0
    assert collector.spans == []


class _SlowExporter(SpanExporter):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.names: list[str] = []

    def export(self, spans):
        time.sleep(self.delay)
        self.names.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS


def test_lossless_processor_makes_the_producer_wait_instead_of_dropping() -> None:
    exporter = _SlowExporter(0.01)
    processor = at.LosslessSpanProcessor(exporter, max_queue=8, max_batch=4, block_timeout=30)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    for i in range(200):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    processor.shutdown()
    # (batches may be sent side by side, so in any order)
    assert sorted(exporter.names) == sorted(f"s{i}" for i in range(200))
    assert processor.dropped == 0 and processor.exported == 200


def test_lossless_processor_counts_what_it_finally_drops() -> None:
    release = threading.Event()

    class Stuck(SpanExporter):
        def export(self, spans):
            release.wait(10)
            return SpanExportResult.SUCCESS

    processor = at.LosslessSpanProcessor(Stuck(), max_queue=2, max_batch=1, block_timeout=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    for i in range(10):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    release.set()
    processor.shutdown()
    assert processor.dropped > 0
    assert processor.exported + processor.dropped == 10


def test_a_slow_collector_loses_nothing_however_slow(tmp_path, monkeypatch) -> None:
    """Each request takes 0.3 s to answer (well within the exporter's timeout) while the loop
    makes spans far faster than one batch per 0.3 s carries: batches go side by side and
    every span arrives; nothing is given up for slowness."""
    slow = OtlpReceiver(delay=0.3)
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", slow.endpoint)
        runtime = at.configure(out=str(tmp_path), queue_size=16_384)
        for _ in range(50):
            with at.episode():
                for _ in range(100):
                    with at.timestep(), at.env_step() as step:
                        step.record(reward=1.0)
        made = 50 * (1 + 2 * 100)
        assert runtime.force_flush(60_000)
        runtime.shutdown()
        stats = runtime.stats()
        assert stats["spans_not_exported"] == 0, stats
        assert stats["spans_exported"] == made == len(slow.spans)
        assert slow.most_in_flight >= 2  # batches went side by side once the queue backed up
    finally:
        slow.stop()


def test_the_exporters_retry_lines_stay_out_of_the_programs_log(tmp_path, monkeypatch, caplog):
    """With the writer in this process, the SDK exporter's lines made on agenttrace's export
    threads become agenttrace's reason; the program's log gets agenttrace's lines only."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", refused_endpoint())
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    with caplog.at_level(logging.INFO):
        runtime = at.configure(out=str(tmp_path), writer="thread", metrics="none")
        with at.episode(), at.timestep(), at.env_step() as step:
            step.record(reward=1.0)
        started = time.monotonic()
        runtime.shutdown()
        took = time.monotonic() - started
    assert took < 2.0  # the first refused attempt ended the wait (exit deadline: 5 s)
    stats = runtime.stats()
    assert stats["spans_not_exported"] == 3 and stats["spans_exported"] == 0
    assert stats["span_export_error"] == "Connection refused"
    assert all(r.name == "agenttrace" for r in caplog.records), [
        (r.name, r.getMessage()) for r in caplog.records
    ]
    assert "3 spans not sent to the OTLP endpoint (export failed: 3; Connection refused)" in (
        runtime.summary_line() or ""
    )


def test_the_writer_process_sends_to_the_endpoint_set_when_configure_ran(
    tmp_path, monkeypatch, collector
):
    """One helper process serves every pipeline of a process and keeps the environ it was
    started with; the span export is made with the OTEL_* variables configure() saw."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    first = at.configure(out=str(tmp_path), writer="process")
    with at.episode():
        pass
    first.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    runtime = at.configure(out=str(tmp_path), writer="process")
    assert runtime.trajectory_processor.writer.in_helper_process
    with at.episode(task_id="later"):
        pass
    runtime.shutdown()
    assert [span.name for span in collector.spans] == [sc.EPISODE]
    assert runtime.stats()["spans_exported"] == 1


class GrpcReceiver:
    """An OTLP/gRPC trace receiver on 127.0.0.1 (grpcio comes with the OTLP exporter);
    ``status``, when set, is the gRPC error every export gets."""

    def __init__(self, status=None) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as messages
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as service

        self.spans: list = []
        receiver = self

        class Servicer(service.TraceServiceServicer):
            def Export(self, request, context):
                if status is not None:
                    context.abort(status, "refused by the test")
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend(scope.spans)
                return messages.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service.add_TraceServiceServicer_to_server(Servicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(grace=None)


def test_grpc_export_from_the_writer_process(tmp_path, monkeypatch) -> None:
    import grpc

    receiver = GrpcReceiver()
    failing = GrpcReceiver(status=grpc.StatusCode.PERMISSION_DENIED)  # not retried
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        runtime = at.configure(out=str(tmp_path), writer="process", metrics="none")
        for _ in range(5):
            with at.episode(), at.timestep(), at.env_step() as step:
                step.record(reward=1.0)
        runtime.shutdown()
        assert len(receiver.spans) == 15 == runtime.stats()["spans_exported"]
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", failing.endpoint)
        runtime = at.configure(out=str(tmp_path), writer="process", metrics="none")
        with at.episode(), at.timestep(), at.env_step() as step:
            step.record(reward=1.0)
        runtime.shutdown()
        stats = runtime.stats()
        assert stats["spans_not_exported_export_failed"] == 3 and failing.spans == []
        assert stats["span_export_error"] == "PERMISSION_DENIED: refused by the test"
    finally:
        receiver.stop()
        failing.stop()
