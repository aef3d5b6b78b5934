"""Jaeger readers: upstream samples, and a real run served back through api_v3 and v1."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from backend_servers import BackendServer, jaeger_v1_route, jaeger_v3_route
from conftest import SERVICE, TOKEN, read_run

import agenttrace as at
from agenttrace.storage import SpanFormatError, decode_document, read_otlp_json
from agenttrace.storage.http import BackendError
from agenttrace.storage.jaeger import JaegerReader, decode_v1
from agenttrace.trajectory.records import LOSSY_TIMES

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream" / "jaeger"


def load(name: str) -> object:
    return json.loads((UPSTREAM / name).read_text())


# --- upstream samples ------------------------------------------------------------------------


def test_otlp_input_and_v1_output_of_jaegers_converter_give_the_same_records() -> None:
    from_otlp = decode_document(load("otlp2jaeger-in.json"))
    from_v1 = decode_v1(load("otlp2jaeger-out.json"))
    assert len(from_otlp) == 2
    assert [r._replace(lossy={}) for r in from_v1] == from_otlp
    assert all(LOSSY_TIMES in record.lossy for record in from_v1)  # v1 keeps microseconds


def test_api_v3_snapshot_and_ui_download() -> None:
    (span,) = decode_document(load("GetTrace.json")["result"])
    assert (span.trace_id, span.span_id, span.name) == (1, 2, "foobar")
    assert (span.kind, span.status_code) == ("SERVER", "ERROR")
    server, client = decode_v1(load("trace_success.json"))  # 16-hex trace ids, inline process
    assert server.trace_id == client.trace_id == 0x2BE38093EAD7A083
    assert client.parent_span_id == server.span_id
    assert (server.kind, client.kind, client.status_code) == ("SERVER", "CLIENT", "ERROR")
    assert client.resource == {"service.name": "3c220036602f839e"}
    assert client.end_time - client.start_time == 32_782_000


def test_a_bad_v1_span_is_reported_and_the_rest_kept() -> None:
    document = load("otlp2jaeger-out.json")
    document["data"][0]["spans"][0]["spanID"] = "not-hex!"
    errors: list[SpanFormatError] = []
    records = decode_v1(document, errors.append)
    assert len(records) == 1
    assert len(errors) == 1 and "spanID" in str(errors[0]) and "okey-dokey-0" in str(errors[0])


# --- a real run, served back -----------------------------------------------------------------


@pytest.fixture
def serve():
    servers: list[BackendServer] = []

    def start(route) -> BackendServer:
        servers.append(BackendServer(route))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_api_v3_search_rebuilds_the_live_trajectories(cartpole_run, serve) -> None:
    live, records = cartpole_run
    server = serve(jaeger_v3_route(records))
    reader = JaegerReader(
        server.url,
        service=SERVICE,
        start=datetime.now(timezone.utc) - timedelta(hours=1),
        token=TOKEN,
        limit=50,
    )
    assert at.assemble(reader.records()) == live
    assert reader.traces_found == 3
    (request,) = server.requests
    assert request["path"] == "/api/v3/traces"
    assert request["query"]["query.service_name"] == [SERVICE]
    assert request["query"]["query.search_depth"] == ["50"]
    assert request["headers"]["authorization"] == f"Bearer {TOKEN}"


def test_api_v3_by_trace_id_and_a_missing_trace(cartpole_run, serve) -> None:
    live, records = cartpole_run
    server = serve(jaeger_v3_route(records))
    trace_ids = [t.trace_id for t in live[:2]] + ["0" * 31 + "f"]
    got = at.assemble(JaegerReader(server.url, trace_ids=trace_ids).records())
    assert got == live[:2]


def test_v1_search_rebuilds_the_trajectories_to_the_microsecond(cartpole_run, serve) -> None:
    live, records = cartpole_run
    server = serve(jaeger_v1_route(records))
    reader = JaegerReader(server.url, api="v1", service=SERVICE, headers={"X-Org": "rl"})
    got = at.assemble(reader.records())
    assert [t.episode_id for t in got] == [t.episode_id for t in live]
    for rebuilt, original in zip(got, live, strict=True):
        expected = original.to_dict()
        actual = rebuilt.to_dict()
        assert actual.pop("lossy") == {"times": "Jaeger's v1 API keeps times to the microsecond"}
        expected.pop("lossy")
        assert _times_to_micros(actual) == _times_to_micros(expected)
    assert server.requests[0]["headers"]["x-org"] == "rl"
    assert server.requests[0]["query"]["service"] == [SERVICE]


def _times_to_micros(value):
    if isinstance(value, dict):
        return {
            k: (v // 1000 if k.endswith("_time") and isinstance(v, int) else _times_to_micros(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_times_to_micros(v) for v in value]
    return value


def test_backend_errors_name_the_url_and_status_but_never_the_token(serve) -> None:
    server = serve(lambda path, query: (500, {"error": "storage is down"}))
    reader = JaegerReader(server.url, service=SERVICE, token=TOKEN)
    with pytest.raises(BackendError) as caught:
        list(reader.records())
    message = str(caught.value)
    assert "500" in message and "/api/v3/traces" in message and "storage is down" in message
    assert TOKEN not in message
    closed = JaegerReader(f"http://127.0.0.1:{_free_port()}", service=SERVICE, timeout=2)
    with pytest.raises(BackendError, match="failed"):
        list(closed.records())


def test_no_traces_found_is_an_empty_answer_not_an_error(serve) -> None:
    server = serve(jaeger_v3_route([]))
    assert list(JaegerReader(server.url, service=SERVICE).records()) == []


def test_reader_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="service"):
        JaegerReader("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="v3"):
        JaegerReader("http://127.0.0.1:1", service="s", api="v2")
    with pytest.raises(ValueError, match="http"):
        JaegerReader("ftp://host", service="s")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_vector_env_run_read_back_from_jaegers_v1_api(tmp_path, serve) -> None:
    """Jaeger's v1 model has no array attributes (its converter writes JSON text) and keeps
    links as FOLLOWS_FROM references: the env.vector_step spans still split into each
    sub-environment's steps."""
    import gymnasium as gym
    import numpy as np

    from agenttrace.instrument.vector import TracedVectorEnv

    runtime = at.configure(
        out=str(tmp_path), run_name="vector", sinks=["jsonl"], spans=["file"], service_name=SERVICE
    )
    envs = TracedVectorEnv(
        gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=20)
    )
    observations, _ = envs.reset(seed=1)
    for _ in range(45):
        observations, *_ = envs.step((observations[:, 2] > 0).astype(np.int64))
    envs.close()
    result = read_run(runtime)
    at.shutdown()
    records = list(read_otlp_json(runtime.span_paths))
    assert any(r.name == "env.vector_step" for r in records)
    server = serve(jaeger_v1_route(records))
    reader = JaegerReader(server.url, api="v1", service=SERVICE, limit=1000)
    got = {t.episode_id: t for t in at.assemble(reader.records())}
    assert sorted(got) == sorted(t.episode_id for t in result.live)
    for original in result.live:
        rebuilt = got[original.episode_id]
        assert (rebuilt.status, rebuilt.length, rebuilt.return_) == (
            original.status,
            original.length,
            original.return_,
        )
        assert [s.action for s in rebuilt.steps] == [s.action for s in original.steps]
        for a, b in zip(rebuilt.steps, original.steps, strict=True):
            np.testing.assert_array_equal(a.observation, b.observation)
