"""OtlpLogSink against a real OTLP/HTTP endpoint served on 127.0.0.1 by the test."""

from __future__ import annotations

import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import wait_until
from conftest_sinks_helpers import make_batch, make_trajectory
from opentelemetry._logs import get_logger_provider
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import TracerProvider

from agenttrace import semconv as sc
from agenttrace.sinks import OtlpLogSink, Sink
from agenttrace.trajectory.model import Trajectory

SECRET = "s3cret-token-value"
SINK_LOGGER = "agenttrace"  # (the export queue's lines)


class Collector:
    """A minimal OTLP/HTTP logs receiver: parses every POST /v1/logs it gets."""

    def __init__(self) -> None:
        self.requests: list[ExportLogsServiceRequest] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with collector.lock:
                    collector.paths.append(self.path)
                    collector.headers.append({k.lower(): v for k, v in self.headers.items()})
                    status = collector.status
                    if self.path == "/v1/logs" and status == 200:
                        request = ExportLogsServiceRequest()
                        request.ParseFromString(body)
                        collector.requests.append(request)
                payload = ExportLogsServiceResponse().SerializeToString() if status == 200 else b""
                self.send_response(status if self.path == "/v1/logs" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def logs_url(self) -> str:
        return self.base_url + "/v1/logs"

    def records(self) -> list:
        with self.lock:
            return [
                (resource_logs, scope_logs, record)
                for request in self.requests
                for resource_logs in request.resource_logs
                for scope_logs in resource_logs.scope_logs
                for record in scope_logs.log_records
            ]


@pytest.fixture
def collector(monkeypatch):
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_SERVICE_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    server = Collector()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(timeout=5)


def attributes_of(record) -> dict:
    values = {}
    for kv in record.attributes:
        value = kv.value
        values[kv.key] = getattr(value, value.WhichOneof("value"))
    return values


def test_every_trajectory_arrives_as_one_log_record(collector):
    batch = make_batch(5)
    sink = OtlpLogSink(
        endpoint=collector.logs_url,
        headers={"authorization": f"Bearer {SECRET}"},
        resource={"service.name": "agenttrace-test"},
        batch_size=2,
        timeout=5,
    )
    assert isinstance(sink, Sink)
    for trajectory in batch[:4]:
        sink.write(trajectory)
    # Sent from the sink's thread as soon as batch_size records were due.
    assert wait_until(lambda: len(collector.requests) == 2)
    sink.write(batch[4])
    time.sleep(0.2)
    assert len(collector.requests) == 2  # the fifth waits for its batch, a flush or close
    sink.close()
    assert len(collector.requests) == 3
    assert collector.paths == ["/v1/logs"] * 3
    assert all(h["authorization"] == f"Bearer {SECRET}" for h in collector.headers)
    assert (sink.sent, sink.failed) == (5, 0)

    received = collector.records()
    assert len(received) == 5
    # (batches may go side by side: matched by episode id)
    by_id = {attributes_of(r)[sc.EPISODE_ID]: (rl, sl, r) for rl, sl, r in received}
    in_order = [by_id[trajectory.episode_id] for trajectory in batch]
    for (resource_logs, scope_logs, record), trajectory in zip(in_order, batch, strict=True):
        assert Trajectory.from_json(record.body.string_value) == trajectory
        assert record.event_name == sc.TRAJECTORY_EVENT_NAME
        attributes = attributes_of(record)
        assert attributes[sc.EPISODE_ID] == trajectory.episode_id
        assert attributes[sc.EPISODE_STATUS] == trajectory.status
        assert attributes[sc.EPISODE_LENGTH] == trajectory.length
        returned = attributes[sc.EPISODE_RETURN]
        assert returned == trajectory.return_ or (
            returned != returned and trajectory.return_ != trajectory.return_
        )
        if trajectory.task_id is None:
            assert sc.TASK_ID not in attributes
        else:
            assert attributes[sc.TASK_ID] == trajectory.task_id
        if trajectory.trace_id is None:
            assert record.trace_id == b""
        else:
            assert record.trace_id == bytes.fromhex(trajectory.trace_id)
        if trajectory.end_time is None:
            assert record.time_unix_nano > 1_600_000_000 * 10**9
        else:
            assert record.time_unix_nano == trajectory.end_time
        resource = {kv.key: kv.value.string_value for kv in resource_logs.resource.attributes}
        assert resource["service.name"] == "agenttrace-test"
        assert scope_logs.scope.name == "agenttrace.sinks.otlp_logs"


def test_lone_surrogates_do_not_spoil_the_batch(collector):
    odd = make_trajectory(1, steps=1)
    odd.episode_id = "ep-\udcff"
    odd.steps[0].observation = "caf\udce9"
    normal = make_trajectory(2, steps=1)
    sink = OtlpLogSink(endpoint=collector.logs_url, timeout=5)
    sink.write(odd)
    sink.write(normal)
    sink.close()
    assert (sink.sent, sink.failed) == (2, 0)
    bodies = [Trajectory.from_json(r.body.string_value) for _, _, r in collector.records()]
    assert bodies == [odd, normal]
    assert attributes_of(collector.records()[0][2])[sc.EPISODE_ID] == "ep-\\udcff"


def test_bare_endpoint_and_env_endpoint_reach_v1_logs(collector, monkeypatch):
    sink = OtlpLogSink(endpoint=collector.base_url, timeout=5)
    sink.write(make_trajectory(0))
    sink.close()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base_url)
    from_env = OtlpLogSink(timeout=5)
    from_env.write(make_trajectory(1))
    from_env.flush()
    from_env.close()
    assert collector.paths == ["/v1/logs", "/v1/logs"]
    ids = [Trajectory.from_json(r.body.string_value).episode_id for _, _, r in collector.records()]
    assert ids == ["ep-0000", "ep-0001"]
    assert (from_env.sent, from_env.failed) == (1, 0)


def test_server_error_is_counted_logged_once_and_never_raised(collector, caplog):
    collector.status = 500
    sink = OtlpLogSink(
        endpoint=collector.logs_url,
        headers={"x-api-key": SECRET},
        batch_size=2,
        timeout=5,
        retry_interval=60,
    )
    caplog.set_level(logging.DEBUG)
    for trajectory in make_batch(6):
        sink.write(trajectory)  # failed exports, none raises
        sink.flush(5.0)
    sink.close()
    assert len(collector.paths) == 2  # two failures: down, the rest not sent
    assert (sink.sent, sink.failed) == (0, 6)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(SINK_LOGGER)]
    down = [m for m in ours if "counts as down" in m]
    assert len(down) == 1
    assert collector.logs_url in down[0] and "failed 2 times in a row" in down[0]
    [summary] = [m for m in ours if "not exported" in m]
    assert "6 of 6 trajectories not exported" in summary
    assert SECRET not in caplog.text


def test_recovery_is_logged_and_a_later_outage_is_logged_again(collector, caplog):
    sink = OtlpLogSink(endpoint=collector.logs_url, batch_size=1, timeout=5, retry_interval=0.2)
    caplog.set_level(logging.WARNING, logger=SINK_LOGGER)
    collector.status = 500
    for index in (0, 1):
        sink.write(make_trajectory(index))
        sink.flush(5.0)
    assert sink.queue.endpoint_down
    collector.status = 200
    time.sleep(0.3)  # past the retry wait: the next record probes
    sink.write(make_trajectory(2))
    sink.flush(5.0)
    collector.status = 500
    for index in (3, 4):
        sink.write(make_trajectory(index))
        sink.flush(5.0)
    sink.close()
    assert (sink.sent, sink.failed) == (1, 4)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(SINK_LOGGER)]
    kinds = ["down" if "counts as down" in m else "up" if "works again" in m else "summary"
             for m in ours]  # fmt: skip
    assert kinds == ["down", "up", "down", "summary"], ours
    assert "works again; 2 trajectories were not sent to it so far" in ours[1]


def test_closed_port_fails_within_the_timeout(caplog):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:{SECRET}@127.0.0.1:{port}/v1/logs?token={SECRET}"
    sink = OtlpLogSink(endpoint=url, timeout=1.5)
    caplog.set_level(logging.WARNING, logger=SINK_LOGGER)
    started = time.monotonic()
    sink.write(make_trajectory(0))
    sink.write(make_trajectory(1))
    sink.flush()
    sink.close()
    assert time.monotonic() - started < 15
    assert (sink.sent, sink.failed) == (0, 2)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(SINK_LOGGER)]
    assert len(ours) == 1 and "2 of 2 trajectories not exported" in ours[0]
    assert f"127.0.0.1:{port}/v1/logs" in ours[0] and "Connection refused" in ours[0]
    assert SECRET not in caplog.text


def test_trace_id_comes_from_the_trajectory_not_the_current_span():
    exporter = InMemoryLogRecordExporter()
    sink = OtlpLogSink(exporter=exporter, batch_size=10)
    tracer = TracerProvider().get_tracer("test")  # private provider, not the global one
    with tracer.start_as_current_span("unrelated") as span:
        assert span.get_span_context().trace_id != 0
        sink.write(make_trajectory(4))  # no trace id of its own
        sink.write(make_trajectory(0))
    sink.flush()
    first, second = exporter.get_finished_logs()
    assert first.log_record.trace_id == 0
    assert first.log_record.span_id == 0
    assert second.log_record.trace_id == int(make_trajectory(0).trace_id, 16)
    assert second.log_record.event_name == sc.TRAJECTORY_EVENT_NAME
    sink.close()
    # close() shut the exporter down: a stopped in-memory exporter refuses further batches.
    assert exporter.export([]) == LogRecordExportResult.FAILURE
    assert not isinstance(get_logger_provider(), LoggerProvider)  # global state untouched


def test_protocol_selection(monkeypatch):
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
        OTLPLogExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (
        OTLPLogExporter as HttpExporter,
    )

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", raising=False)
    sinks = [OtlpLogSink(endpoint="http://127.0.0.1:9/v1/logs")]
    sinks.append(OtlpLogSink(protocol="grpc", endpoint="127.0.0.1:9"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    sinks.append(OtlpLogSink(endpoint="127.0.0.1:9"))
    assert [type(s.exporter) for s in sinks] == [HttpExporter, GrpcExporter, GrpcExporter]
    for sink in sinks:
        sink.close()  # nothing buffered: no connection attempted
        assert (sink.sent, sink.failed) == (0, 0)
    with pytest.raises(ValueError, match="http/json"):
        OtlpLogSink(protocol="http/json")


def test_write_after_close_raises():
    sink = OtlpLogSink(exporter=InMemoryLogRecordExporter())
    sink.close()
    sink.close()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(make_trajectory(0))


def test_a_black_holed_logs_endpoint_never_holds_up_the_files(tmp_path, monkeypatch):
    """The pipeline's OTLP logs sink against an endpoint that never answers: every episode
    reaches trajectories.jsonl as it ends, the exit keeps its deadline, and the exit line
    counts the trajectories the endpoint did not get."""
    from backend_servers import BlackHole

    import agenttrace as at
    from agenttrace.sinks import load_trajectories

    hole = BlackHole()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hole.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
        runtime = at.configure(
            out=str(tmp_path), sinks=["jsonl", "otlp"], spans=["file"], exit_timeout=1.0
        )
        for index in range(300):  # a few batches of 64 for the endpoint
            with at.episode(task_id=str(index)), at.timestep(), at.env_step() as step:
                step.record(reward=1.0)
        started = time.monotonic()
        loaded = load_trajectories(runtime.run_dir)  # reading waits for the files only
        assert time.monotonic() - started < 5
        assert sorted(int(t.task_id) for t in loaded) == list(range(300))
        assert runtime.force_flush(30_000) is False  # the logs endpoint has not answered
        started = time.monotonic()
        runtime.shutdown()
        assert time.monotonic() - started < 1.0 + 2.5
        stats = runtime.stats()
        assert stats["trajectories_exported"] == 0
        assert stats["trajectories_not_exported"] == 300
        assert "300 trajectories not sent to the OTLP logs endpoint" in runtime.summary_line()
    finally:
        hole.stop()
