"""Phoenix reader: a real Phoenix server on loopback, and local servers for the failure cases.

The real-server tests start Phoenix once for the module (``phoenix_server.PhoenixServer``), send
it a real agenttrace run over OTLP/HTTP protobuf (the demo plus an episode that fails) and read
it back through the REST API: the trajectories must equal the ones the run wrote, with times
cut to the microsecond the way Phoenix cuts them.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from backend_servers import BackendServer
from conftest import TOKEN
from phoenix_server import PhoenixError, PhoenixServer, phoenix_time_ns, send_run

import agenttrace as at
from agenttrace.cli.main import main
from agenttrace.sinks import load_trajectories
from agenttrace.storage import SpanFormatError, SpanFormatWarning, read_otlp_json
from agenttrace.storage.http import BackendError
from agenttrace.storage.phoenix import PhoenixReader, decode_span
from agenttrace.trajectory.records import (
    LOSSY_CONTEXT,
    LOSSY_TIMES,
    SpanEvent,
    SpanRecord,
)

DEMO_PROJECT = "agenttrace-demo"
EDGE_PROJECT = "edges"
INGEST_TIMEOUT = 60.0  # Phoenix ingests ~175 spans/s here; the run has ~55


# --- the real server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    if importlib.util.find_spec("phoenix") is None:
        pytest.skip(
            "arize-phoenix is not installed (it is in the test extra: pip install -e '.[test]')"
        )
    try:
        server = PhoenixServer(tmp_path_factory.mktemp("phoenix"))
    except PhoenixError as error:
        pytest.fail(f"Phoenix is installed but did not start: {error}", pytrace=False)
    yield server
    server.stop()


def wait_for_spans(url: str, project: str, count: int, timeout: float = INGEST_TIMEOUT) -> None:
    """Poll until Phoenix has ``count`` spans in ``project`` (it ingests asynchronously)."""
    deadline = time.monotonic() + timeout
    found = 0
    while True:
        try:
            found = sum(1 for _ in PhoenixReader(url, project).records())
        except BackendError as error:
            if error.status != 404:  # 404: the project is made with its first span
                raise
        if found >= count:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Phoenix had {found} of {count} spans of {project!r} after {timeout} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def demo_run(phoenix, tmp_path_factory):
    """(live trajectories, span records the run wrote to spans.jsonl), all sent to Phoenix."""
    run_dir = send_run(phoenix, DEMO_PROJECT, tmp_path_factory.mktemp("demo"))
    live = load_trajectories([run_dir / "trajectories.jsonl"])
    sent = list(read_otlp_json(run_dir / "spans.jsonl"))
    assert len(live) == 4 and len(sent) > 40
    wait_for_spans(phoenix.url, DEMO_PROJECT, len(sent))
    return live, sent


def to_phoenix_precision(value: Any) -> Any:
    """A trajectory's dict with every ``*_time`` as Phoenix keeps it."""
    if isinstance(value, dict):
        return {
            k: phoenix_time_ns(v)
            if k.endswith("_time") and isinstance(v, int)
            else to_phoenix_precision(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [to_phoenix_precision(v) for v in value]
    return value


def as_phoenix_keeps_it(record: SpanRecord) -> SpanRecord:
    """What Phoenix keeps of a sent span: microsecond times; no kind, resource, scope, links."""
    return record._replace(
        start_time=phoenix_time_ns(record.start_time),
        end_time=phoenix_time_ns(record.end_time),
        events=tuple(e._replace(time=phoenix_time_ns(e.time)) for e in record.events),
        kind="INTERNAL",
        resource={},
        scope_name="",
        scope_version=None,
        links=(),
        parent_is_remote=False,
        lossy={},
    )


def test_phoenix_rebuilds_the_live_trajectories(phoenix, demo_run) -> None:
    live, _ = demo_run
    got = at.assemble(PhoenixReader(phoenix.url, DEMO_PROJECT).records())
    by_id = {t.episode_id: t for t in got}
    assert sorted(by_id) == sorted(t.episode_id for t in live)
    for original in live:
        assert_equal_as_phoenix_keeps_it(by_id[original.episode_id], original)
    (errored,) = [t for t in got if t.status == "errored"]  # exception event, ERROR status
    assert errored.error.message == "the env server went away" and errored.error.stack


def assert_equal_as_phoenix_keeps_it(rebuilt: at.Trajectory, original: at.Trajectory) -> None:
    """Equal with times as Phoenix keeps them; flagged lossy for exactly that, and for the
    attributes Phoenix may have derived (it adds ``session.id`` next to
    ``gen_ai.conversation.id``; an original value could not be told apart)."""
    actual, expected = rebuilt.to_dict(), original.to_dict()
    lossy = actual.pop("lossy")
    assert expected.pop("lossy") == {}
    assert lossy.pop("times").startswith("Phoenix keeps times to the microsecond")
    assert all(key.startswith("attributes.") and "derives" in why for key, why in lossy.items())
    assert actual == to_phoenix_precision(expected)


def test_agenttrace_export_from_phoenix_equals_the_live_run(phoenix, demo_run, tmp_path) -> None:
    live, _ = demo_run
    source = phoenix.url.replace("http://", "phoenix+http://") + "/" + DEMO_PROJECT
    out = tmp_path / "exported.jsonl"
    assert main(["export", "--from", source, "--out", str(out), "--quiet"]) == 0
    by_id = {t.episode_id: t for t in load_trajectories(out)}
    assert sorted(by_id) == sorted(t.episode_id for t in live)
    for original in live:
        assert_equal_as_phoenix_keeps_it(by_id[original.episode_id], original)


def test_a_vector_env_run_rebuilt_from_phoenix(phoenix, tmp_path) -> None:
    """Phoenix keeps no links: each sub-environment's step, split from an env.vector_step
    span, is placed by the episode id in its entry alone."""
    run_dir = send_run(phoenix, "vector-run", tmp_path, episodes=30, seed=2, play="vector")
    live = load_trajectories([run_dir / "trajectories.jsonl"])
    sent = list(read_otlp_json(run_dir / "spans.jsonl"))
    assert sum(r.name == "env.vector_step" for r in sent) >= 25 and len(live) >= 6
    wait_for_spans(phoenix.url, "vector-run", len(sent))
    got = {t.episode_id: t for t in at.assemble(PhoenixReader(phoenix.url, "vector-run").records())}
    assert sorted(got) == sorted(t.episode_id for t in live)
    for original in live:
        assert_equal_as_phoenix_keeps_it(got[original.episode_id], original)


def test_records_are_the_sent_spans_less_what_phoenix_does_not_keep(phoenix, demo_run) -> None:
    _, sent = demo_run
    reader = PhoenixReader(phoenix.url, DEMO_PROJECT)
    records = list(reader.records())
    assert reader.spans_read == len(records) == len(sent) and reader.pages_read == 1
    expected = {(r.trace_id, r.span_id): as_phoenix_keeps_it(r) for r in sent}
    for record in records:
        assert record._replace(lossy={}) == expected[(record.trace_id, record.span_id)]
        assert LOSSY_TIMES in record.lossy and "kind" in record.lossy[LOSSY_CONTEXT]
    # Phoenix adds OpenInference attributes to GenAI spans; dropped, and said so
    chat = next(r for r in records if r.name.startswith("chat "))
    assert {"llm.model_name", "openinference.span.kind", "output.value"} <= chat.lossy.keys()
    episode = next(r for r in records if r.name == "episode" and r.events)
    assert episode.status_code == "ERROR" and episode.events[0].name == "exception"
    assert "exception.type" in episode.lossy[LOSSY_CONTEXT]
    kept = PhoenixReader(phoenix.url, DEMO_PROJECT, keep_derived=True)
    chat_kept = next(r for r in kept.records() if r.span_id == chat.span_id)
    assert chat_kept.attributes["llm.model_name"] == chat.attributes["gen_ai.request.model"]
    assert chat_kept.attributes["openinference.span.kind"] == "LLM"


def test_small_pages_give_the_same_records(phoenix, demo_run) -> None:
    _, sent = demo_run
    whole = list(PhoenixReader(phoenix.url, DEMO_PROJECT).records())
    reader = PhoenixReader(phoenix.url, DEMO_PROJECT, page_size=7)
    assert list(reader.records()) == whole
    assert reader.pages_read == math.ceil(len(sent) / 7)
    assert sorted(r.span_id for r in whole) == sorted(r.span_id for r in sent)


def test_start_and_end_bound_the_spans_start_times(phoenix, demo_run) -> None:
    _, sent = demo_run
    first = min(r.start_time for r in sent)
    last = max(r.start_time for r in sent)
    at_ns = lambda ns: datetime.fromtimestamp(ns / 1e9, timezone.utc)  # noqa: E731
    after = PhoenixReader(phoenix.url, DEMO_PROJECT, start=at_ns(last) + timedelta(seconds=1))
    assert list(after.records()) == []
    before = PhoenixReader(phoenix.url, DEMO_PROJECT, end=at_ns(first) - timedelta(seconds=1))
    assert list(before.records()) == []
    around = PhoenixReader(
        phoenix.url,
        DEMO_PROJECT,
        start=at_ns(first) - timedelta(seconds=1),
        end=at_ns(last) + timedelta(seconds=1),
    )
    assert len(list(around.records())) == len(sent)


def test_a_project_phoenix_does_not_have_is_an_error_naming_it(phoenix, demo_run) -> None:
    with pytest.raises(BackendError, match="no project 'no-such-project'") as caught:
        list(PhoenixReader(phoenix.url, "no-such-project").records())
    assert caught.value.status == 404


def test_attribute_types_and_what_phoenix_changes(phoenix) -> None:
    sent = _send_edge_spans(phoenix)
    wait_for_spans(phoenix.url, EDGE_PROJECT, len(sent))
    records = {r.name: r for r in PhoenixReader(phoenix.url, EDGE_PROJECT).records()}
    originals = {r.name: r for r in sent}
    assert records.keys() == originals.keys()

    root, original = records["edges"], dict(originals["edges"].attributes)
    # kept exactly: types (whole floats stay floats, 64-bit ints, arrays as tuples), text that
    # looks like a number or JSON, a key that is also a prefix, openinference.span.kind
    for key in ("f.whole", "f.tiny", "i.big", "i.neg", "b", "s.empty", "s.number", "s.json",
                "arr.int", "arr.float", "arr.str", "arr.bool", "arr.empty", "x", "x.y",
                "dense.0.k", "dense.1.k", "rl.observation", "openinference.span.kind"):  # fmt: skip
        assert root.attributes[key] == original[key], key
        assert type(root.attributes[key]) is type(original[key]), key
    # JSON in *metadata attributes: objects re-encoded, other values re-typed; both flagged
    assert root.attributes["user.metadata"] == original["user.metadata"]
    assert root.attributes["rl.metadata"] == 7 and original["rl.metadata"] == "7"
    assert {"user.metadata", "rl.metadata"} <= root.lossy.keys()
    # Phoenix's key normalisation and NaN, which no reader can undo
    assert root.attributes["sparse.0.k"] == original["sparse.2.k"]
    assert root.attributes["a.b"] == original["a..b"]
    assert "f.nan" not in root.attributes and "sparse.2.k" not in root.attributes
    assert root.events == (
        SpanEvent(
            "evt", phoenix_time_ns(originals["edges"].events[0].time), {"k": 1, "arr": (1, 2)}
        ),
    )
    assert originals["edges"].kind == "SERVER" and root.kind == "INTERNAL"

    child = records["child"]
    assert (child.status_code, child.status_message) == ("ERROR", "bad thing")
    assert child.parent_span_id == root.span_id
    (exception,) = child.events
    assert exception.name == "exception" and "extra" not in exception.attributes
    assert exception.attributes["exception.message"] == "boom"
    assert "exception.type" in child.lossy[LOSSY_CONTEXT]
    assert records["ok"].status_code == "OK" and records["ok"].status_message is None

    # A GenAI span: every OpenInference attribute Phoenix derives is dropped again
    chat = records["chat m"]
    assert chat.attributes == originals["chat m"].attributes
    assert {
        "llm.input_messages.0.message.role",
        "llm.tools.0.tool.json_schema",
    } <= chat.lossy.keys()


def _send_edge_spans(phoenix: PhoenixServer) -> list[SpanRecord]:
    """Spans with tricky attributes, exported to Phoenix by the SDK; their records as sent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from agenttrace.trajectory.records import record_from_span

    sent: list[SpanRecord] = []

    class Keep(SpanProcessor):
        def on_end(self, span: Any) -> None:
            sent.append(record_from_span(span))

    provider = TracerProvider(
        resource=Resource.create({"openinference.project.name": EDGE_PROJECT})
    )
    provider.add_span_processor(Keep())
    exporter = OTLPSpanExporter(endpoint=phoenix.otlp_traces_endpoint, timeout=20)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("edge-scope", "1.0")
    try:
        with tracer.start_as_current_span("edges", kind=SpanKind.SERVER) as root:
            root.set_attributes(
                {
                    "f.whole": 2.0,
                    "f.tiny": -1e-300,
                    "f.nan": float("nan"),
                    "i.big": 2**63 - 1,
                    "i.neg": -5,
                    "b": True,
                    "s.empty": "",
                    "s.number": "12",
                    "s.json": '{"a": 1}',
                    "arr.int": (1, 2, 3),
                    "arr.float": (1.0, 2.5),
                    "arr.str": ("a", "b"),
                    "arr.bool": (True, False),
                    "arr.empty": (),
                    "x": 1,
                    "x.y": 2,
                    "dense.0.k": "a",
                    "dense.1.k": "b",
                    "sparse.2.k": "v",
                    "a..b": "double dot",
                    "rl.observation": json.dumps({"pos": [0.1, -0.2], "ok": True}),
                    "openinference.span.kind": "CHAIN",
                    "user.metadata": '{"tier":"gold","n":3}',
                    "rl.metadata": "7",
                }
            )
            root.add_event("evt", {"k": 1, "arr": (1, 2)})
            with tracer.start_as_current_span("child", kind=SpanKind.CLIENT) as child:
                child.record_exception(ValueError("boom"), attributes={"extra": "x"})
                child.set_status(Status(StatusCode.ERROR, "bad thing"))
            with tracer.start_as_current_span("ok") as ok:
                ok.set_status(Status(StatusCode.OK))
            with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT) as chat:
                chat.set_attributes(_GEN_AI_ATTRIBUTES)
    finally:
        provider.shutdown()
    return sent


_GEN_AI_ATTRIBUTES = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "m",
    "gen_ai.response.model": "m-2",
    "gen_ai.provider.name": "openai",
    "gen_ai.conversation.id": "conversation-1",
    "gen_ai.request.temperature": 0.5,
    "gen_ai.request.max_tokens": 10,
    "gen_ai.usage.input_tokens": 5,
    "gen_ai.usage.output_tokens": 6,
    "gen_ai.usage.cache_read.input_tokens": 1,
    "gen_ai.response.finish_reasons": ("stop",),
    "gen_ai.input.messages": json.dumps(
        [
            {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        ]
    ),
    "gen_ai.output.messages": json.dumps(
        [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "ok"}],
                "finish_reason": "stop",
            }
        ]
    ),
    "gen_ai.tool.definitions": json.dumps(
        [{"type": "function", "name": "calc", "description": "adds", "parameters": {}}]
    ),
}


# --- local servers answering like Phoenix ----------------------------------------------------


def _iso(ns: int) -> str:
    moment = datetime.fromtimestamp(0, timezone.utc) + timedelta(microseconds=ns // 1000)
    return moment.isoformat()


def phoenix_span(record: SpanRecord, rowid: int) -> dict:
    """One record as Phoenix's span list shows it (span_kind out of the attributes)."""
    attributes = {k: list(v) if isinstance(v, tuple) else v for k, v in record.attributes.items()}
    return {
        "id": base64.b64encode(f"Span:{rowid}".encode()).decode(),
        "name": record.name,
        "context": {
            "trace_id": format(record.trace_id, "032x"),
            "span_id": format(record.span_id, "016x"),
        },
        "span_kind": attributes.pop("openinference.span.kind", "UNKNOWN"),
        "parent_id": format(record.parent_span_id, "016x") if record.parent_span_id else None,
        "start_time": _iso(record.start_time),
        "end_time": _iso(record.end_time or record.start_time),
        "status_code": record.status_code,
        "status_message": record.status_message or "",
        "attributes": attributes,
        "events": [
            {"name": e.name, "timestamp": _iso(e.time), "attributes": dict(e.attributes)}
            for e in record.events
        ],
    }


def phoenix_route(project: str, spans: list[dict], *, repeat_cursor: bool = False):
    """Phoenix's project and span-list routes over ``spans`` (cursor = index of the next)."""

    def route(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path == f"/v1/projects/{project}":
            return 200, {"data": {"name": project, "id": "UHJvamVjdDox"}}
        if path != f"/v1/projects/{project}/spans":
            return 404, {"detail": "Not Found"}
        limit = int(query["limit"][0])
        start = int(query.get("cursor", ["0"])[0])
        more = start + limit < len(spans)
        cursor = str(start if repeat_cursor else start + limit) if more else None
        return 200, {"data": spans[start : start + limit], "next_cursor": cursor}

    return route


@pytest.fixture
def serve():
    servers: list[BackendServer] = []

    def start(route) -> BackendServer:
        servers.append(BackendServer(route))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def _records(count: int = 5) -> list[SpanRecord]:
    base = 1_795_000_000_000_000_000
    return [
        SpanRecord(
            0xABC,
            index + 1,
            0 if index == 0 else 1,
            f"span-{index}",
            base + index * 1000,
            base + index * 1000 + 500_000,
            {"rl.timestep.index": index, "arr": (1.5, 2.0), "openinference.span.kind": "TOOL"},
            (SpanEvent("note", base + 7000, {"k": "v"}),),
        )
        for index in range(count)
    ]


def test_pages_are_followed_and_auth_headers_sent(serve, monkeypatch) -> None:
    records = _records(5)
    server = serve(phoenix_route("p", [phoenix_span(r, i) for i, r in enumerate(records)]))
    monkeypatch.setenv("AGENTTRACE_EXPORT_HEADERS", "X-Org=rl%20team,api_key=k1")
    monkeypatch.setenv("AGENTTRACE_EXPORT_TOKEN", TOKEN)
    reader = PhoenixReader(server.url, "p", page_size=2)
    got = list(reader.records())
    assert [r._replace(lossy={}) for r in got] == records
    assert reader.pages_read == 3 and [
        len(q["query"].get("cursor", [])) for q in server.requests
    ] == [0, 1, 1]
    for request in server.requests:
        assert request["path"] == "/v1/projects/p/spans"
        assert request["query"]["limit"] == ["2"] and request["query"]["order"] == ["asc"]
        assert request["headers"]["authorization"] == f"Bearer {TOKEN}"
        assert request["headers"]["x-org"] == "rl team" and request["headers"]["api_key"] == "k1"
    server.requests.clear()
    list(PhoenixReader(server.url, "p", token="other", headers={"X-Org": "mine"}).records())
    assert server.requests[0]["headers"]["authorization"] == "Bearer other"
    assert server.requests[0]["headers"]["x-org"] == "mine"


def test_a_bad_span_is_reported_and_the_others_kept(serve) -> None:
    spans = [phoenix_span(r, i) for i, r in enumerate(_records(4))]
    spans[1]["context"]["trace_id"] = "not-hex!"
    spans[2]["start_time"] = "yesterday"
    server = serve(phoenix_route("p", spans))
    errors: list[SpanFormatError] = []
    got = list(PhoenixReader(server.url, "p", page_size=3, on_error=errors.append).records())
    assert [r.name for r in got] == ["span-0", "span-3"]
    assert len(errors) == 2
    assert "trace_id" in str(errors[0]) and "'span-1'" in str(errors[0]) and errors[0].span == 1
    assert "start_time" in str(errors[1]) and "'span-2'" in str(errors[1])
    with pytest.warns(SpanFormatWarning) as warned:
        assert len(list(PhoenixReader(server.url, "p").records())) == 2
    assert ["span-1" in str(w.message) for w in warned] == [True, False]


def test_a_repeated_cursor_or_a_page_that_is_not_a_page_ends_the_walk(serve) -> None:
    spans = [phoenix_span(r, i) for i, r in enumerate(_records(5))]
    server = serve(phoenix_route("p", spans, repeat_cursor=True))
    errors: list[SpanFormatError] = []
    got = list(PhoenixReader(server.url, "p", page_size=2, on_error=errors.append).records())
    assert len(got) == 4 and len(errors) == 1 and "repeated" in str(errors[0])
    odd = serve(lambda path, query: (200, {"spans": []}))
    errors.clear()
    assert list(PhoenixReader(odd.url, "p", on_error=errors.append).records()) == []
    assert len(errors) == 1 and "data" in str(errors[0])


def test_errors_name_the_url_and_status_but_never_the_token(serve) -> None:
    server = serve(lambda path, query: (401, {"detail": "Invalid token"}))
    with pytest.raises(BackendError) as caught:
        list(PhoenixReader(server.url, "p", token=TOKEN).records())
    message = str(caught.value)
    assert "401" in message and "/v1/projects/p/spans" in message and TOKEN not in message
    server = serve(  # the project exists, its span list does not (wrong URL, old Phoenix)
        lambda path, query: (
            (200, {"data": {"name": "p"}})
            if path == "/v1/projects/p"
            else (404, {"detail": "Not Found"})
        )
    )
    with pytest.raises(BackendError, match="no span list API"):
        list(PhoenixReader(server.url, "p").records())


def test_reader_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="project"):
        PhoenixReader("http://127.0.0.1:1", "")
    for size in (0, 1001):
        with pytest.raises(ValueError, match="page_size"):
            PhoenixReader("http://127.0.0.1:1", "p", page_size=size)
    with pytest.raises(ValueError, match="http"):
        PhoenixReader("ftp://host", "p")


def test_time_formats_and_precision() -> None:
    span = phoenix_span(_records(1)[0], 0)
    span["start_time"] = "2026-01-02T03:04:05.123456789Z"
    span["end_time"] = "2026-01-02T05:04:06.5+02:00"
    span["events"] = []
    record = decode_span(span)
    start = int(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()) * 10**9
    assert record.start_time == start + 123_456_789
    assert record.end_time == start + 1_500_000_000
    assert LOSSY_TIMES not in record.lossy and LOSSY_CONTEXT in record.lossy  # ns kept
    span["start_time"] = "2026-01-02T03:04:05.123456"
    assert decode_span(span).lossy[LOSSY_TIMES].startswith("Phoenix keeps times")
    span["end_time"] = None  # an open span
    assert decode_span(span).end_time is None and LOSSY_TIMES in decode_span(span).lossy


def test_nested_attributes_are_flattened_back() -> None:
    span = phoenix_span(_records(1)[0], 0)
    span["attributes"] = {
        "rl": {"timestep": {"index": 3}, "info": '{"a": 1}'},
        "retrieval": {"documents": [{"document": {"id": "d1"}}, {"document": {"id": "d2"}}]},
        "odd": [[1, 2], None],
        "gone": None,
    }
    record = decode_span(span)
    assert record.attributes == {
        "rl.timestep.index": 3,
        "rl.info": '{"a": 1}',
        "retrieval.documents.0.document.id": "d1",
        "retrieval.documents.1.document.id": "d2",
        "odd": "[[1,2],null]",
        "openinference.span.kind": "TOOL",
    }
    assert {"odd", "gone"} <= record.lossy.keys()


def test_an_openinference_agents_own_traces_in_phoenix_become_trajectories(
    phoenix, tmp_path
) -> None:
    """Traces an OpenInference-instrumented agent sent to Phoenix before agenttrace was
    installed (its own exporter, no agenttrace in the process): ``agenttrace export --from
    phoenix --conventions openinference`` rebuilds every episode, checked against what the
    agent and the local model server did."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_conventions_openinference import WEATHER, AgentServer, run_agent
    from test_openai_genai import serving

    project = "openinference-agent"
    resource = Resource.create({"openinference.project.name": project})
    provider = TracerProvider(resource=resource)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = OTLPSpanExporter(endpoint=phoenix.otlp_traces_endpoint, timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server_run = serving(AgentServer)
    server = next(server_run)
    try:
        episodes = run_agent(provider, server)
    finally:
        provider.shutdown()
        server_run.close()
    sent = memory.get_finished_spans()
    assert not any(k.startswith("rl.") for span in sent for k in span.attributes)
    wait_for_spans(phoenix.url, project, len(sent))

    out = tmp_path / "agent.jsonl"
    source = f"phoenix+{phoenix.url}/{project}"
    code = main(["export", "--from", source, "--out", str(out), "--quiet",
                 "--conventions", "openinference"])  # fmt: skip
    assert code == 0
    rebuilt = sorted(load_trajectories(out), key=lambda t: t.task_id)
    assert [t.task_id for t in rebuilt] == [e.session for e in episodes]
    for trajectory, episode in zip(rebuilt, episodes, strict=True):
        assert trajectory.status == "completed"
        assert [step.llm_calls[0].input_messages for step in trajectory.steps] == episode.sent
        tools = [(c.arguments, c.result) for s in trajectory.steps for c in s.tool_calls]
        assert tools == [(arguments, result) for _, arguments, result in episode.tool_calls]
        assert all(result == WEATHER[arguments["city"]] for arguments, result in tools)
        assert trajectory.steps[-1].action == episode.answer
