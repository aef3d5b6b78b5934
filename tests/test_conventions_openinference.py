"""OpenInference: a real agent traced by Arize's OpenInference packages, read as trajectories.

The agent is an OpenInference AGENT span (``OITracer.start_as_current_span(...,
openinference_span_kind="agent")``) around a loop of model calls made with the real ``openai``
client, traced by ``openinference-instrumentation-openai``, against an OpenAI-compatible server
on 127.0.0.1 that this file starts; the tool the model asks for runs under ``@tracer.tool``
(a TOOL span). The provider is the agent's own SDK TracerProvider with its own exporters;
agenttrace joins it with ``conventions="openinference"``. Every expectation comes from what the
server answered, what the client sent and what the tool computed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import exported
from openinference.instrumentation import OITracer, TraceConfig, using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_openai_genai import WEATHER_TOOL, ChatServer, client_for, reply_message, serving

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import OtlpJsonLinesWriter, read_otlp_json
from agenttrace.trajectory.conventions import (
    ORIGINAL_NAME,
    conventions_from_value,
    derived_episode_id,
)
from agenttrace.trajectory.records import SpanRecord, record_from_span
from agenttrace.trajectory.stream import assemble

OPENINFERENCE = conventions_from_value("openinference")
SYSTEM = "You answer weather questions; call get_weather once per city."
#: What the tool knows (the independent truth of every tool result).
WEATHER = {"Paris": "sunny, 21 C", "Lima": "fog, 16 C", "Oslo": "snow, -3 C"}
#: The questions the agent is given, with the cities the server asks the tool for, in order.
PLANS = {"Weather in Paris and Lima?": ["Paris", "Lima"], "Weather in Oslo?": ["Oslo"]}
AGENT = "weather-agent"


class AgentServer(ChatServer):
    """Asks for get_weather once per city of the question's plan, then answers in text."""

    def answer(self, request: dict) -> dict:
        messages = request["messages"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        done = sum(1 for m in messages if m["role"] == "tool")
        plan = PLANS[question]
        if done >= len(plan):
            return super().answer({**request, "tools": None})  # "answer {n} to {last}"
        n = len(self.exchanges)
        arguments = json.dumps({"city": plan[done]})
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        }
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": request["model"] + "-2025-01-01",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {
                "prompt_tokens": 20 + len(messages),
                "completion_tokens": 5 + n,
                "total_tokens": 25 + len(messages) + n,
            },
        }


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serving(AgentServer)


class RecordsExporter(SpanExporter):
    """The agent's own exporter: OTLP/JSON lines written by agenttrace's file writer."""

    def __init__(self, path: Path) -> None:
        self.writer = OtlpJsonLinesWriter(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.writer.write([record_from_span(span) for span in spans])
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.writer.close()


@dataclass
class Episode:
    """What the agent itself saw of one question: the independent truth."""

    question: str
    session: str
    answer: str
    sent: list[list[dict]]  # the messages of each model call, as the client sent them
    tool_calls: list[tuple[str, dict, str]]  # (call id, arguments, result) per tool run


def run_agent(provider: TracerProvider, server: ChatServer) -> list[Episode]:
    """The agent, one AGENT span per question; returns what it did."""
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        tracer = OITracer(provider.get_tracer("weather.agent"), config=TraceConfig())

        @tracer.tool
        def get_weather(city: str) -> str:
            """Weather in a city"""
            return WEATHER[city]

        client = client_for(server)
        episodes = []
        for number, question in enumerate(PLANS):
            session = f"session-{number}"
            sent: list[list[dict]] = []
            tools: list[tuple[str, dict, str]] = []
            with (
                using_session(session),
                tracer.start_as_current_span(AGENT, openinference_span_kind="agent") as span,
            ):
                span.set_input(question)
                messages: list[dict[str, Any]] = [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": question},
                ]
                for _ in range(4):
                    sent.append(json.loads(json.dumps(messages)))
                    response = client.chat.completions.create(
                        model="gpt-test", messages=messages, tools=[WEATHER_TOOL], temperature=0.2
                    )
                    message = response.choices[0].message
                    if not message.tool_calls:
                        break
                    calls = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                        for call in message.tool_calls
                    ]
                    messages.append({"role": "assistant", "content": None, "tool_calls": calls})
                    for call in message.tool_calls:
                        arguments = json.loads(call.function.arguments)
                        result = get_weather(**arguments)
                        tools.append((call.id, arguments, result))
                        reply = {"role": "tool", "tool_call_id": call.id, "content": result}
                        messages.append(reply)
                span.set_output(message.content)
            episodes.append(Episode(question, session, message.content, sent, tools))
        return episodes
    finally:
        instrumentor.uninstrument()


@dataclass
class Run:
    episodes: list[Episode]
    exchanges: list[dict]
    live: list[at.Trajectory]
    memory: list[SpanRecord]  # the provider's in-memory exporter
    own_file: Path  # the agent's own OTLP/JSON exporter
    runtime: at.AgentTrace


@pytest.fixture
def openinference_run(tmp_path, server) -> Iterator[Run]:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    own_file = tmp_path / "own" / "spans.jsonl"
    provider.add_span_processor(SimpleSpanProcessor(RecordsExporter(own_file)))
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path / "runs"),
        run_name="oi",
        sinks=["jsonl"],
        spans=["file"],
        conventions="openinference",
        exit_report=False,
    )
    try:
        episodes = run_agent(provider, server)
    finally:
        runtime.shutdown()
        provider.shutdown()
    live = load_trajectories(runtime.trajectory_paths)
    records = [record_from_span(span) for span in memory.get_finished_spans()]
    yield Run(episodes, list(server.exchanges), live, records, own_file, runtime)


def unstamped(records: Sequence[SpanRecord]) -> list[SpanRecord]:
    """The spans as an exporter on a provider without agenttrace stores them: agenttrace's
    only change to another tracer's live spans is the rl.episode.id it stamps at start."""
    out = []
    for record in records:
        assert not [
            k
            for k in record.attributes
            if k.startswith(("rl.", "agenttrace.")) and k != sc.EPISODE_ID
        ]
        attributes = {k: v for k, v in record.attributes.items() if k != sc.EPISODE_ID}
        out.append(record._replace(attributes=attributes))
    return out


def agent_spans(records: Sequence[SpanRecord]) -> list[SpanRecord]:
    return [r for r in records if r.attributes.get("openinference.span.kind") == "AGENT"]


# --- live ---------------------------------------------------------------------------------------


def test_one_episode_per_agent_span_with_derived_ids_and_sessions(openinference_run) -> None:
    run = openinference_run
    agents = agent_spans(run.memory)
    assert len(agents) == len(run.episodes) == len(run.live) == 2
    for trajectory, agent, episode in zip(run.live, agents, run.episodes, strict=True):
        assert trajectory.episode_id == derived_episode_id(agent.trace_id, agent.span_id)
        assert trajectory.trace_id == f"{agent.trace_id:032x}"
        assert trajectory.task_id == episode.session  # session.id
        assert trajectory.status == sc.STATUS_COMPLETED and trajectory.error is None
        assert trajectory.attributes[ORIGINAL_NAME] == AGENT
        assert trajectory.attributes["input.value"] == episode.question
        assert trajectory.attributes["output.value"] == episode.answer
        assert trajectory.return_ == 0.0 and trajectory.missing_steps == []


def test_each_model_call_is_a_turn_with_the_exact_call(openinference_run) -> None:
    run = openinference_run
    exchanges = iter(run.exchanges)
    for trajectory, episode in zip(run.live, run.episodes, strict=True):
        assert trajectory.length == len(episode.sent) == len(PLANS[episode.question]) + 1
        for step, sent in zip(trajectory.steps, episode.sent, strict=True):
            exchange = next(exchanges)
            answered = exchange["response"]
            assert exchange["request"]["messages"] == sent
            (call,) = step.llm_calls
            assert call.name == "ChatCompletion"
            assert call.input_messages == sent
            assert call.output_messages == [reply_message(answered)]
            assert call.model == answered["model"]
            assert call.attributes[sc.GEN_AI_REQUEST_MODEL] == exchange["request"]["model"]
            assert call.attributes["gen_ai.request.temperature"] == 0.2
            assert call.provider == "openai"
            assert call.finish_reasons == [answered["choices"][0]["finish_reason"]]
            assert call.input_tokens == answered["usage"]["prompt_tokens"]
            assert call.output_tokens == answered["usage"]["completion_tokens"]
            assert call.attributes[sc.GEN_AI_TOOL_DEFINITIONS] == exchange["request"]["tools"]
            assert call.attributes[sc.GEN_AI_TOOL_DEFINITIONS] == [WEATHER_TOOL]
            assert call.error is None
            # The turn: what the call was asked, what it answered.
            assert step.observation == sent
            reply = reply_message(answered)
            assert step.action == (reply["content"] if not reply.get("tool_calls") else reply)
            assert step.reward is None


def test_each_tool_run_joins_the_turn_that_asked_for_it(openinference_run) -> None:
    run = openinference_run
    for trajectory, episode in zip(run.live, run.episodes, strict=True):
        *asking, final = trajectory.steps
        assert len(asking) == len(episode.tool_calls)
        for step, (call_id, arguments, result) in zip(asking, episode.tool_calls, strict=True):
            (tool,) = step.tool_calls
            requested = step.llm_calls[0].output_messages[0]["tool_calls"][0]
            assert requested["id"] == call_id
            assert json.loads(requested["function"]["arguments"]) == arguments
            assert tool.name == "get_weather"
            assert tool.arguments == arguments  # input.value: the bound arguments, as JSON
            assert tool.result == WEATHER[arguments["city"]] == result
            # OpenInference's TOOL span does not record it: it is the id the turn's reply
            # asked for with that name and those arguments.
            assert tool.call_id == call_id
            assert tool.error is None
            assert step.llm_calls[0].end_time <= tool.start_time <= tool.end_time
            assert (step.terminated, step.truncated) == (False, False)  # the tool took it
        assert final.tool_calls == []
        assert final.action == episode.answer
        assert (final.terminated, final.truncated) == (True, False)  # finish reason "stop"


def test_the_run_span_file_holds_the_translated_spans_with_their_own_keys(
    openinference_run,
) -> None:
    run = openinference_run
    stored = list(read_otlp_json(run.runtime.span_paths))
    assert len(stored) == len(run.memory)
    episodes = [r for r in stored if r.name == sc.EPISODE]
    assert [r.attributes[ORIGINAL_NAME] for r in episodes] == [AGENT, AGENT]
    assert {r.attributes["openinference.span.kind"] for r in episodes} == {"AGENT"}
    llm = [r for r in stored if r.attributes.get("openinference.span.kind") == "LLM"]
    assert len(llm) == len(run.exchanges)
    for record in llm:  # GenAI keys added, OpenInference's kept
        assert record.attributes[sc.GEN_AI_OPERATION_NAME] == sc.GEN_AI_OPERATION_CHAT
        assert "llm.input_messages.0.message.content" in record.attributes
        assert record.name == "ChatCompletion"
    tools = [r for r in stored if r.attributes.get("openinference.span.kind") == "TOOL"]
    assert [r.attributes[sc.GEN_AI_TOOL_NAME] for r in tools] == ["get_weather"] * 3


# --- offline ------------------------------------------------------------------------------------


def test_rebuilt_from_the_run_span_file_equals_live(openinference_run, tmp_path) -> None:
    run = openinference_run
    assert assemble(read_otlp_json(run.runtime.span_paths), conventions=OPENINFERENCE) == run.live
    # The span file's records are already translated: they read the same without the preset.
    assert assemble(read_otlp_json(run.runtime.span_paths)) == run.live
    (span_file,) = run.runtime.span_paths
    out = tmp_path / "export.jsonl"
    assert exported(str(span_file), out, "--conventions", "openinference") == run.live


def test_rebuilt_from_the_agents_own_exporters_equals_live(openinference_run, tmp_path) -> None:
    run = openinference_run
    # The in-memory exporter on the same provider, and the agent's own OTLP/JSON file.
    assert assemble(run.memory, conventions=OPENINFERENCE) == run.live
    own = list(read_otlp_json(str(run.own_file)))
    assert sorted(own, key=lambda r: r.span_id) == sorted(run.memory, key=lambda r: r.span_id)
    options = ("--conventions", "openinference")
    assert exported(str(run.own_file), tmp_path / "own.jsonl", *options) == run.live
    # As stored by a provider with no agenttrace on it: no rl.episode.id anywhere.
    bare = unstamped(run.memory)
    assert assemble(bare, conventions=OPENINFERENCE) == run.live
    bare_file = tmp_path / "bare" / "spans.jsonl"
    with OtlpJsonLinesWriter(bare_file) as writer:
        writer.write(bare)
    assert exported(str(bare_file), tmp_path / "bare.jsonl", *options) == run.live
    # Without the mapping, those spans make no episode.
    assert assemble(bare) == []


# --- what OpenInference emits, read field by field ------------------------------------------------


def test_model_calls_read_from_the_real_span_shapes(tmp_path) -> None:
    """Parts content, system messages, request parameters and a failed call, as
    openinference-instrumentation-openai records them."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path),
        run_name="shapes",
        sinks=["jsonl"],
        conventions="openinference",
        exit_report=False,
    )
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    chat = ChatServer()
    chat.thread.start()
    sent = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
            ],
        },
    ]
    try:
        tracer = OITracer(provider.get_tracer("shapes"), config=TraceConfig())
        client = client_for(chat)
        with tracer.start_as_current_span("looker", openinference_span_kind="chain"):
            client.chat.completions.create(
                model="gpt-test", messages=sent, temperature=0.5, top_p=0.9, max_tokens=50, seed=7
            )
            with pytest.raises(Exception, match="model is down"):
                client.chat.completions.create(
                    model="broken-model", messages=[{"role": "user", "content": "hi"}]
                )
    finally:
        instrumentor.uninstrument()
        chat.httpd.shutdown()
        chat.httpd.server_close()
        chat.thread.join(timeout=10)
        runtime.shutdown()
        provider.shutdown()
    live = load_trajectories(runtime.trajectory_paths)
    assert (
        assemble(
            unstamped([record_from_span(s) for s in memory.get_finished_spans()]),
            conventions=OPENINFERENCE,
        )
        == live
    )
    (trajectory,) = live  # a root CHAIN span is an episode too
    first, failed = (call for step in trajectory.steps for call in step.llm_calls)
    answered = chat.exchanges[0]["response"]
    assert first.input_messages == sent
    assert first.output_messages == [reply_message(answered)]
    assert first.model == answered["model"]
    assert {key: first.attributes[key] for key in sc.GEN_AI_REQUEST_PARAMETERS.values()} == {
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.seed": 7,
    }
    # The failed call: no response, so the model is the one asked for; the error is kept.
    assert failed.model == "broken-model"
    assert failed.input_messages == [{"role": "user", "content": "hi"}]
    assert failed.output_messages is None and failed.output_tokens is None
    assert failed.error is not None and "model is down" in failed.error
    assert trajectory.status == sc.STATUS_ERRORED  # a failed model call errors the episode


def test_content_none_keeps_openinference_message_text_out_of_the_run(tmp_path, server) -> None:
    """The content policy covers OpenInference's own content keys (messages, tool schemas,
    input.value/output.value) and what the translation made of them, in trajectories and in
    the span file; the calls themselves (model, tokens, tool names) stay."""
    provider = TracerProvider()
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path),
        run_name="private",
        sinks=["jsonl"],
        spans=["file"],
        conventions="openinference",
        content="none",
        exit_report=False,
    )
    try:
        run_agent(provider, server)
    finally:
        runtime.shutdown()
        provider.shutdown()
    text = "".join(p.read_text() for p in Path(runtime.run_dir).rglob("*") if p.is_file())
    assert "Weather in Oslo?" not in text and WEATHER["Oslo"] not in text
    trajectories = load_trajectories(str(Path(runtime.run_dir) / "trajectories*.jsonl"))
    calls = [c for t in trajectories for s in t.steps for c in s.llm_calls]
    tools = [c for t in trajectories for s in t.steps for c in s.tool_calls]
    assert calls and all(c.model and c.input_messages is None for c in calls)
    assert all(c.output_tokens for c in calls if c.error is None)
    assert tools and all(c.name and c.arguments is None and c.result is None for c in tools)


# --- OpenInference's tool spans and roles (issue 30, section 7) ---------------------------------


def traced_agent(tmp_path: Path, body, *, plan: bool = True) -> list[at.Trajectory]:
    """``body(tracer)`` inside an OpenInference AGENT span, after a model call (``plan``:
    the turn the tool calls join), with agenttrace on the provider; the live trajectories,
    checked equal to the ones rebuilt offline from the same spans."""
    from openinference.instrumentation import get_llm_attributes

    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path),
        run_name="shapes",
        sinks=["jsonl"],
        conventions="openinference",
        exit_report=False,
    )
    try:
        tracer = OITracer(provider.get_tracer("shapes"), config=TraceConfig())
        with tracer.start_as_current_span(AGENT, openinference_span_kind="agent"):
            if plan:
                with tracer.start_as_current_span("plan", openinference_span_kind="llm") as span:
                    reply = [{"role": "assistant", "content": "I will use the tools."}]
                    span.set_attributes(get_llm_attributes(output_messages=reply))
            body(tracer)
    finally:
        runtime.shutdown()
        provider.shutdown()
    live = load_trajectories(runtime.trajectory_paths)
    records = unstamped([record_from_span(s) for s in memory.get_finished_spans()])
    assert assemble(records, conventions=OPENINFERENCE) == live
    return live


def test_arguments_recorded_through_a_generic_wrapper_are_unwrapped(tmp_path) -> None:
    """``@tracer.tool`` on a ``(*args, **kwargs)`` function records ``{"args": [...],
    "kwargs": {...}}`` (and smolagents' instrumentor so records ``Tool.__call__``): the
    keyword arguments are the arguments; a lone positional one is that value."""

    def body(tracer: OITracer) -> None:
        @tracer.tool
        def lookup(*args: Any, **kwargs: Any) -> str:
            """Look a city up"""
            return f"{args} {kwargs}"

        for args, kwargs in (((), {"city": "Paris", "days": 2}), (("Lima",), {})):
            lookup(*args, **kwargs)

    (trajectory,) = traced_agent(tmp_path, body)
    tools = [tool for step in trajectory.steps for tool in step.tool_calls]
    assert [tool.arguments for tool in tools] == [{"city": "Paris", "days": 2}, "Lima"]
    assert [tool.result for tool in tools] == ["() {'city': 'Paris', 'days': 2}", "('Lima',) {}"]


def test_wrapper_shape_is_what_openinference_records(tmp_path) -> None:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = OITracer(provider.get_tracer("shapes"), config=TraceConfig())

    @tracer.tool
    def lookup(*args: Any, **kwargs: Any) -> int:
        """Look a city up"""
        return 42

    lookup("Lima", days=2)
    (span,) = memory.get_finished_spans()
    assert json.loads(span.attributes["input.value"]) == {"args": ["Lima"], "kwargs": {"days": 2}}
    (record,) = OPENINFERENCE.translate(record_from_span(span))
    arguments = json.loads(record.attributes[sc.GEN_AI_TOOL_CALL_ARGUMENTS])
    assert arguments == {"days": 2, "args": ["Lima"]}  # both: the named ones, and the others
    assert json.loads(record.attributes[sc.GEN_AI_TOOL_CALL_RESULT]) == "42"  # text/plain


def test_tool_results_that_are_not_text_are_kept(tmp_path) -> None:
    """A number set as ``output.value`` itself (as smolagents' instrumentor sets a tool's
    integer or number output), a JSON result, and text that reads like a number."""

    def body(tracer: OITracer) -> None:
        with tracer.start_as_current_span("add", openinference_span_kind="tool") as span:
            span.set_attributes({"tool.name": "add", "input.value": '{"a": 40, "b": 2}'})
            span.set_attributes({"input.mime_type": "application/json"})
            span.set_attributes({"output.value": 42, "output.mime_type": "text/plain"})

        @tracer.tool
        def forecast(city: str) -> dict:
            """Forecast for a city"""
            return {"city": city, "days": [21, 19.5]}

        @tracer.tool
        def code(city: str) -> str:
            """A city's code"""
            return "75"

        forecast("Paris")
        code("Paris")

    (trajectory,) = traced_agent(tmp_path, body)
    tools = [tool for step in trajectory.steps for tool in step.tool_calls]
    assert [(tool.name, tool.result) for tool in tools] == [
        ("add", 42),
        ("forecast", {"city": "Paris", "days": [21, 19.5]}),
        ("code", "75"),  # text stays text
    ]
    assert tools[0].arguments == {"a": 40, "b": 2}


def test_framework_roles_read_as_the_chat_roles_the_model_is_sent(tmp_path) -> None:
    """smolagents' ``tool-call`` / ``tool-response`` (its models send them as assistant and
    user: ``tool_role_conversions``) and LangChain's ``human`` / ``ai`` message types, as
    OpenInference's ``get_llm_attributes`` records them."""
    from openinference.instrumentation import get_llm_attributes

    sent = [
        ("system", "system", "Be brief."),
        ("human", "user", "Weather in Paris?"),
        ("tool-call", "assistant", "Calling tools: get_weather(city='Paris')"),
        ("tool-response", "user", "Observation: sunny"),
        ("ai", "assistant", "Sunny."),
        ("tool", "tool", "sunny"),
    ]

    def body(tracer: OITracer) -> None:
        with tracer.start_as_current_span("chat", openinference_span_kind="llm") as span:
            messages = [{"role": role, "content": text} for role, _, text in sent]
            span.set_attributes(
                get_llm_attributes(
                    input_messages=messages[:-1],
                    output_messages=[{"role": "ai", "content": "Done."}],
                )
            )

    (trajectory,) = traced_agent(tmp_path, body, plan=False)
    (call,) = trajectory.steps[0].llm_calls
    assert [m["role"] for m in call.input_messages] == [chat for _, chat, _ in sent[:-1]]
    assert [m["content"] for m in call.input_messages] == [text for *_, text in sent[:-1]]
    assert call.output_messages == [{"role": "assistant", "content": "Done."}]
