"""``agenttrace collect``: OTLP in over HTTP (protobuf, JSON) and gRPC from the real SDK
exporters, trajectories out, OTLP's answers for partial success, bad requests and a full
queue, and nothing acknowledged lost across a kill -9.

The producers are the OpenTelemetry SDK itself, with spans written by hand in agenttrace's
conventions, so every expected value (length, return, status, missing steps) is known before
the service runs; a traced gymnasium run checks the library's ``collect`` setting against the
run's own record. Every service listens on 127.0.0.1 and is stopped by its test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import clean_environ, run_script, wait_until
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from agenttrace.collect import CollectService, CollectSettings
from agenttrace.reading import load_trajectories

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def service(tmp_path):
    """A collect service on free ports; stopped by the test's end."""
    started: list[CollectService] = []

    def start(**settings) -> CollectService:
        settings.setdefault("grace_seconds", 0.3)
        svc = CollectService(
            CollectSettings(out=tmp_path / "out", **settings),
            http="127.0.0.1:0",
            grpc="127.0.0.1:0",
        ).start()
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


def produce(exporter, episode_id: str, rewards: list[float], *, skip: tuple[int, ...] = (),
            end_episode: bool = True) -> None:  # fmt: skip
    """One episode in agenttrace's conventions, through the SDK and ``exporter``: a step per
    reward (those in ``skip`` never sent), the last one terminating."""
    provider = TracerProvider(resource=Resource.create({"service.name": "producer"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agenttrace")
    episode = tracer.start_span("episode", attributes={"rl.episode.id": episode_id})
    from opentelemetry import trace

    with trace.use_span(episode):
        for index, reward in enumerate(rewards):
            if index in skip:
                continue
            last = index == len(rewards) - 1
            common = {"rl.episode.id": episode_id, "rl.timestep.index": index}
            with tracer.start_as_current_span("timestep", attributes=common):
                step = {**common, "rl.reward": reward, "rl.terminated": last, "rl.done": last}
                with tracer.start_as_current_span("env.step", attributes=step):
                    pass
    if end_episode:
        episode.set_attribute("rl.episode.length", len(rewards))
        episode.end()
    provider.shutdown()


#: An episode span alone (episode "e", no steps), in OTLP/JSON.
EPISODE_SPAN = {
    "traceId": "5b8efff798038103d269b633813fc60c",
    "spanId": "eee19b7ec3c1b174",
    "name": "episode",
    "startTimeUnixNano": "1",
    "endTimeUnixNano": "2",
    "attributes": [{"key": "rl.episode.id", "value": {"stringValue": "e"}}],
}


def trajectories(folder: Path) -> dict:
    files = sorted(folder.glob("trajectories*.jsonl"))
    return {t.episode_id: t for t in load_trajectories(files)} if files else {}


def post(url: str, body: bytes, content_type: str) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def health(svc: CollectService) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{svc.http_port}/health", timeout=10) as r:
        return json.loads(r.read())


def test_episodes_over_http_protobuf_gzip_grpc_and_json_are_rebuilt(service, tmp_path) -> None:
    svc = service()
    traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    produce(HttpExporter(endpoint=traces, compression=Compression.Gzip), "over-http",
            [1.0, 0.5, 2.0])  # fmt: skip
    produce(GrpcExporter(endpoint=f"127.0.0.1:{svc.grpc_port}", insecure=True), "over-grpc",
            [0.25] * 5)  # fmt: skip
    # OTLP/JSON as the spec writes it (hex ids, string nanos), by hand
    spans = [
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
         "name": "episode", "startTimeUnixNano": "1000", "endTimeUnixNano": "9000",
         "attributes": [{"key": "rl.episode.id", "value": {"stringValue": "over-json"}}]},
    ]  # fmt: skip
    for index in range(2):
        spans.append(
            {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": f"{index + 1:016x}",
             "parentSpanId": "eee19b7ec3c1b174", "name": "env.step",
             "startTimeUnixNano": str(2000 + index), "endTimeUnixNano": str(3000 + index),
             "attributes": [
                 {"key": "rl.episode.id", "value": {"stringValue": "over-json"}},
                 {"key": "rl.timestep.index", "value": {"intValue": str(index)}},
                 {"key": "rl.reward", "value": {"doubleValue": 3.0}},
                 {"key": "rl.terminated", "value": {"boolValue": index == 1}}]}
        )  # fmt: skip
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    status, _, answer = post(traces, body, "application/json")
    assert (status, json.loads(answer)) == (200, {})
    assert wait_until(lambda: len(trajectories(tmp_path / "out")) == 3, timeout=20)
    got = trajectories(tmp_path / "out")
    expected = {"over-http": (3, 3.5), "over-grpc": (5, 1.25), "over-json": (2, 6.0)}
    for episode_id, (length, total) in expected.items():
        trajectory = got[episode_id]
        assert trajectory.status == "completed", episode_id
        assert (trajectory.length, trajectory.return_) == (length, total)
        assert [s.index for s in trajectory.steps] == list(range(length))
    counts = health(svc)
    assert counts["spans_received"] == (1 + 2 * 3) + (1 + 2 * 5) + 3
    assert counts["episodes_written"] == {"completed": 3}
    assert counts["open_episodes"] == 0


def test_the_service_metrics_go_through_the_opentelemetry_metrics_api(tmp_path) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    settings = CollectSettings(out=tmp_path / "out", grace_seconds=0.2)
    svc = CollectService(settings, http="127.0.0.1:0", grpc=None, meter_provider=provider)
    svc.start()
    try:
        traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
        produce(HttpExporter(endpoint=traces), "measured", [1.0, 1.0])
        produce(HttpExporter(endpoint=traces), "open", [1.0], end_episode=False)
        assert wait_until(lambda: "measured" in trajectories(tmp_path / "out"), timeout=20)
        points = {}
        for resource in reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "agenttrace.collect"
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        points[(metric.name, tuple(point.attributes.items()))] = point.value
    finally:
        svc.stop()
        provider.shutdown()
    assert points[("agenttrace.collect.spans.received", ())] == (1 + 2 * 2) + 2
    assert points[("agenttrace.collect.episodes.written", (("status", "completed"),))] == 1
    assert points[("agenttrace.collect.episodes.open", ())] == 1
    assert points[("agenttrace.collect.spans.rejected", ())] == 0
    assert points[("agenttrace.collect.requests.refused", ())] == 0


def test_bad_spans_get_partial_success_and_bad_requests_400(service, tmp_path) -> None:
    svc = service()
    traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    good = EPISODE_SPAN
    bad = dict(good, spanId="not-an-id")
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [good, bad]}]}]}).encode()
    status, _, answer = post(traces, body, "application/json")
    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "spanId" in partial["errorMessage"]
    # a bad resource block costs all its spans, a bad scope block all of its own
    bad_resource = {"attributes": [{"key": "k", "value": {"oddValue": 1}}]}
    blocks = [
        {"resource": bad_resource, "scopeSpans": [{"spans": [good, good]}, {"spans": [good]}]},
        {"scopeSpans": [{"scope": "not an object", "spans": [good, good]}, {"spans": [bad, good]}]},
    ]
    body = json.dumps({"resourceSpans": blocks}).encode()
    status, _, answer = post(traces, body, "application/json")
    assert status == 200
    assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "6"
    # protobuf: the answer is an ExportTraceServiceResponse with the same count
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    status, _, answer = post(traces, b"\xff\xff not protobuf", "application/x-protobuf")
    assert status == 400 and b"no spans could be read" in answer
    assert post(traces, b"{}", "text/plain")[0] == 415
    status, _, answer = post(traces, b"{not json", "application/json")
    assert status == 400
    response = trace_service_pb2.ExportTraceServiceResponse()
    request = trace_service_pb2.ExportTraceServiceRequest()
    status, _, answer = post(traces, request.SerializeToString(), "application/x-protobuf")
    response.ParseFromString(answer)
    assert status == 200 and response.partial_success.rejected_spans == 0
    counts = health(svc)
    assert counts["spans_received"] == 2 and counts["spans_rejected"] == 7


def test_a_full_queue_answers_retryably_and_the_sdk_exporters_retry(service, tmp_path) -> None:
    svc = service(max_queued_spans=1)
    collector = svc.collector
    traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    grpc_exporter = GrpcExporter(endpoint=f"127.0.0.1:{svc.grpc_port}", insecure=True)
    producers = [
        threading.Thread(target=produce, args=(grpc_exporter, "grpc", [2.0, 2.0])),
        threading.Thread(target=produce, args=(HttpExporter(endpoint=traces), "http", [3.0] * 3)),
    ]
    # the worker is held: one span fills the queue, the next requests are refused
    collector._assembler_lock.acquire()
    try:
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [EPISODE_SPAN]}]}]})
        assert post(traces, body.encode(), "application/json")[0] == 200
        status, headers, _ = post(traces, body.encode(), "application/json")
        assert status == 503 and headers["Retry-After"] == "1"
        for thread in producers:
            thread.start()
        assert wait_until(lambda: health(svc)["requests_refused_busy"] >= 3, timeout=20)
    finally:
        collector._assembler_lock.release()
    for thread in producers:
        thread.join(60)
    assert wait_until(lambda: len(trajectories(tmp_path / "out")) == 3, timeout=30)
    got = trajectories(tmp_path / "out")
    assert {k: (t.length, t.return_, t.status) for k, t in got.items()} == {
        "e": (0, 0.0, "completed"),
        "grpc": (2, 4.0, "completed"),
        "http": (3, 9.0, "completed"),
    }


def test_a_span_log_that_cannot_be_written_takes_nothing_and_answers_retryably(
    service, tmp_path, monkeypatch
) -> None:
    """A full disk (injected: the log's append fails as the OS would): the request is not
    durable, so it is not taken, and the answer says retry; once the disk is back, the SDK
    exporter's retry is taken."""
    svc = service()
    log = svc.collector._log
    real_append = log.append
    failures = []

    def full_disk(payload):
        if len(failures) < 2:
            failures.append(payload)
            raise OSError(28, "No space left on device")
        return real_append(payload)

    monkeypatch.setattr(log, "append", full_disk)
    traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [EPISODE_SPAN]}]}]})
    status, headers, answer = post(traces, body.encode(), "application/json")
    assert (status, headers["Retry-After"]) == (503, "1")
    assert b"No space left on device" in answer
    assert health(svc)["queued_spans"] == 0 and health(svc)["spans_received"] == 0
    produce(HttpExporter(endpoint=traces), "after", [1.0, 1.0])  # its first try fails too
    assert len(failures) == 2
    assert wait_until(lambda: "after" in trajectories(tmp_path / "out"), timeout=20)
    assert trajectories(tmp_path / "out")["after"].length == 2


def test_an_episode_gone_quiet_is_written_incomplete_with_its_missing_steps(
    service, tmp_path
) -> None:
    svc = service(idle_timeout=1.0)
    traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    produce(HttpExporter(endpoint=traces), "gap", [1.0] * 6, skip=(2, 4))
    produce(HttpExporter(endpoint=traces), "never-ended", [1.0] * 3, end_episode=False)
    produce(HttpExporter(endpoint=traces), "whole", [1.0] * 4)
    assert wait_until(lambda: len(trajectories(tmp_path / "out")) == 3, timeout=20)
    got = trajectories(tmp_path / "out")
    assert got["whole"].status == "completed" and got["whole"].length == 4
    assert got["gap"].status == "incomplete"
    assert got["gap"].missing_steps == [2, 4]
    assert [s.index for s in got["gap"].steps] == [0, 1, 3, 5]
    assert got["never-ended"].status == "incomplete"
    assert [s.index for s in got["never-ended"].steps] == [0, 1, 2]
    # a span of an episode already written: counted as late, the trajectory unchanged
    produce(HttpExporter(endpoint=traces), "whole", [1.0] * 4, skip=(0, 1, 2))
    assert wait_until(lambda: health(svc)["late_spans"] == 3, timeout=20)  # step, timestep, ep
    assert len(trajectories(tmp_path / "out")) == 3


_CARTPOLE = """
import json, sys
import gymnasium as gym
import agenttrace as at

at.configure()
env = gym.make("CartPole-v1")
own = []
for seed in range(int(sys.argv[1])):
    actions, rewards = [], []
    with at.episode(task_id="cartpole", env=env):
        with at.env_reset() as reset:
            obs, _ = reset.record_result(env.reset(seed=seed))
        done = False
        while not done:
            with at.timestep():
                with at.agent_act() as act:
                    action = int(obs[2] + obs[3] > 0)
                    act.record(observation=obs, action=action)
                with at.env_step() as step:
                    obs, reward, terminated, truncated, _ = step.record_result(env.step(action))
            actions.append(action)
            rewards.append(float(reward))
            done = terminated or truncated
            if len(sys.argv) > 2 and seed == int(sys.argv[2]) and len(actions) == 20:
                at.force_flush()
                print(json.dumps({"open": actions}), flush=True)
                import time
                time.sleep(600)  # killed here, 20 steps into an open episode
    own.append({"actions": actions, "rewards": rewards, "terminated": bool(terminated)})
    print(json.dumps(own[-1]), flush=True)
at.shutdown()
"""


def test_the_collect_setting_sends_a_traced_run_that_equals_its_own_record(
    service, tmp_path
) -> None:
    svc = service()
    done = run_script(
        tmp_path, _CARTPOLE, "3", AGENTTRACE_COLLECT=f"http://127.0.0.1:{svc.http_port}/"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    own = [json.loads(line) for line in done.stdout.splitlines()]
    assert wait_until(lambda: len(trajectories(tmp_path / "out")) == 3, timeout=30)
    got = sorted(trajectories(tmp_path / "out").values(), key=lambda t: t.start_time)
    for record, trajectory in zip(own, got, strict=True):
        assert [s.action for s in trajectory.steps] == record["actions"]
        assert [s.reward for s in trajectory.steps] == record["rewards"]
        assert trajectory.status == ("completed" if record["terminated"] else "truncated")
    assert not list(tmp_path.glob("agenttrace_runs*")), "no local files in collect mode"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        return json.loads(answer.read())


def _collect_process(out: Path, port: int, *extra: str) -> subprocess.Popen:
    # its stderr to a file: a pipe that no one reads fills up and blocks the service
    with (out.parent / f"collect-{port}.stderr").open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "agenttrace", "collect", "--out", str(out), "--grpc", "none",
             "--http", f"127.0.0.1:{port}", *extra],
            env=clean_environ(),
            stderr=stderr,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/health"

    def up() -> bool:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return True
        except OSError:
            return False

    assert wait_until(up, timeout=60), "collect did not start"
    return process


def test_a_producer_killed_mid_episode_leaves_it_incomplete_and_the_others_whole(
    tmp_path,
) -> None:
    port = _free_port()
    out = tmp_path / "out"
    collect = _collect_process(out, port, "--idle-timeout", "2", "--grace", "0.3")
    try:
        producer = subprocess.Popen(
            [sys.executable, "-c", _CARTPOLE, "5", "2"],
            env=clean_environ(
                AGENTTRACE_COLLECT=f"http://127.0.0.1:{port}", AGENTTRACE_FLUSH_INTERVAL="0.05"
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        own = []
        for line in producer.stdout:
            own.append(json.loads(line))
            if "open" in own[-1]:
                break
        # 20 steps into episode 2: once its spans reached the service, kill the producer
        assert wait_until(lambda: _health(port)["open_episodes"] == 1, timeout=30)
        producer.send_signal(signal.SIGKILL)
        producer.wait(30)
        assert wait_until(lambda: len(trajectories(out)) == 2, timeout=30)
        assert wait_until(lambda: len(trajectories(out)) == 3, timeout=30)
    finally:
        collect.send_signal(signal.SIGTERM)
        collect.wait(30)
    got = sorted(trajectories(out).values(), key=lambda t: t.start_time or 0)
    for record, trajectory in zip(own[:2], got[:2], strict=True):
        assert trajectory.status in ("completed", "truncated")
        assert [s.action for s in trajectory.steps] == record["actions"]
    killed = got[2]
    assert killed.status == "incomplete"
    assert [s.action for s in killed.steps] == own[2]["open"]
    assert [s.index for s in killed.steps] == list(range(20))


def test_kill_9_under_load_then_restart_writes_every_acknowledged_episode_once(
    tmp_path,
) -> None:
    """Episodes are sent a request per span in many threads; the service is killed -9 while
    they flow, and started again. Every episode all of whose requests were acknowledged is
    written, exactly once."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    port = _free_port()
    out = tmp_path / "out"
    collect = _collect_process(out, port, "--grace", "0.5")
    acknowledged: dict[str, bool] = {}
    lock = threading.Lock()
    stop = threading.Event()

    class Recording(HttpExporter):
        """The SDK's exporter, noting whether each episode's every export succeeded."""

        def export(self, spans):
            result = super().export(spans)
            with lock:
                for span in spans:
                    episode_id = span.attributes["rl.episode.id"]
                    ok = result == SpanExportResult.SUCCESS
                    acknowledged[episode_id] = acknowledged.get(episode_id, True) and ok
            return result

    def producer(number: int) -> None:
        episode = 0
        while not stop.is_set():
            exporter = Recording(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=2)
            produce(exporter, f"p{number}-e{episode}", [1.0] * 4)
            episode += 1

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        assert wait_until(lambda: len(trajectories(out)) >= 5, timeout=60)
        time.sleep(0.3)  # (some episodes acknowledged and not yet written)
        collect.send_signal(signal.SIGKILL)
        collect.wait(30)
        stop.set()
        for thread in threads:
            thread.join(120)
        collect = _collect_process(out, port, "--grace", "0.5")
        assert _health(port)["replayed_spans"] > 0
        with lock:
            whole = sorted(episode for episode, ok in acknowledged.items() if ok)
        assert wait_until(lambda: set(whole) <= set(trajectories(out)), timeout=60), sorted(
            set(whole) - set(trajectories(out))
        )
    finally:
        collect.send_signal(signal.SIGTERM)
        collect.wait(30)
    files = sorted(out.glob("trajectories*.jsonl"))
    ids = [t.episode_id for t in load_trajectories(files)]
    assert len(ids) == len(set(ids)), "an episode was written twice"
    got = trajectories(out)
    for episode_id in whole:
        assert got[episode_id].status == "completed"
        assert got[episode_id].return_ == 4.0


def test_the_span_log_keeps_only_segments_that_open_episodes_need(service, tmp_path) -> None:
    """Small segments: those of written episodes go; the one holding an open episode stays,
    and a restart rebuilds that episode from it."""
    svc = service(max_segment_bytes=300, idle_timeout=600)
    traces = f"http://127.0.0.1:{svc.http_port}/v1/traces"
    produce(HttpExporter(endpoint=traces), "open", [1.0] * 2, end_episode=False)
    for n in range(6):
        produce(HttpExporter(endpoint=traces), f"done-{n}", [1.0] * 2)
    assert wait_until(lambda: len(trajectories(tmp_path / "out")) == 6, timeout=20)
    log = svc.collector._log
    assert log.current_segment > 10  # (each request or two filled a segment)

    def only_needed_left() -> bool:
        needed = svc.collector._episode_segments["open"] | {log.current_segment}
        return set(log.segments()) <= needed

    assert wait_until(only_needed_left, timeout=10)
    assert 1 in log.segments()  # the open episode's first spans went first
    svc.stop()
    again = service(max_segment_bytes=300, idle_timeout=600)
    assert again.collector.health()["resumed_episodes"] == 1
    produce(HttpExporter(endpoint=f"http://127.0.0.1:{again.http_port}/v1/traces"), "open",
            [1.0] * 3, skip=(0, 1))  # fmt: skip
    assert wait_until(lambda: "open" in trajectories(tmp_path / "out"), timeout=20)
    trajectory = trajectories(tmp_path / "out")["open"]
    assert (trajectory.status, trajectory.length) == ("completed", 3)
    assert len(trajectories(tmp_path / "out")) == 7


def test_collect_refuses_settings_it_cannot_honour(tmp_path) -> None:
    from agenttrace.cli.main import main

    assert main(["collect", "--out", str(tmp_path), "--http", "nowhere"]) == 2
    assert main(["collect", "--out", str(tmp_path), "--sinks", "minari"]) == 2
    with socket.socket() as taken:  # an address in use: it cannot start, and says so
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ["collect", "--out", str(tmp_path), "--grpc", "none"]
        assert main([*command, "--http", f"127.0.0.1:{port}"]) == 1
    assert not os.environ.get("AGENTTRACE_COLLECT")
