"""LangGraph traced only by OpenInference's LangChain instrumentor, read through the preset.

A real LangGraph agent (``create_react_agent`` from ``langgraph.prebuilt``, and a
``StateGraph`` with a ``ToolNode``) calls a real ``ChatOpenAI`` pointed at an
OpenAI-compatible server on 127.0.0.1 that this file starts. The only tracing is
``openinference-instrumentation-langchain`` on the program's own SDK TracerProvider;
agenttrace joins that provider with ``conventions="openinference"`` and no targets.

The instrumentor says what each span is (``openinference.span.kind``) only when its run
ends, so the graph's root ``CHAIN`` span becomes an episode after all its model and tool
calls ended: live, they wait for it (``UndecidedSpans``), and the trajectories equal the
ones rebuilt offline from the same spans. The tool spans hold the tool's name, a
one-argument tool's argument without its name (``input.value`` ``Paris``), none for a tool
without arguments, and the ``ToolMessage`` (with its ``tool_call_id``) as ``output.value``.

The truth is LangGraph's own result: the final state's ``messages`` (the AIMessages' tool
calls with their ids, the ToolMessages' contents, the final AIMessage's text), converted to
OpenAI messages by langchain-core's ``convert_to_openai_messages``, and the tools as
``convert_to_openai_tool`` gives them to the model.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import compatibility
import pytest
from conftest import exported
from langchain_core.messages import AIMessage, ToolMessage, convert_to_openai_messages
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_conventions_openinference import RecordsExporter, unstamped
from test_openai_genai import ChatServer, serving

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory.conventions import conventions_from_value, derived_episode_id
from agenttrace.trajectory.records import SpanRecord, record_from_span
from agenttrace.trajectory.stream import assemble

OPENINFERENCE = conventions_from_value("openinference")
API_KEY = "sk-langgraph-test-7c21"
SYSTEM = "You answer with the tools; call each one the question needs."
WEATHER = {"Paris": "sunny, 21 C", "Lima": "fog, 16 C"}
WEEKDAY = "Saturday"
#: Per question, the tool calls the server asks for, one reply after the other; a reply with
#: several asks for them together (the graph runs them in parallel).
PLANS: dict[str, list[list[tuple[str, dict]]]] = {
    "Weather in Paris, 2 + 3, and what day is it?": [
        [("get_weather", {"city": "Paris"})],
        [("add", {"a": 2, "b": 3})],
        [("today", {})],
    ],
    "Weather in Lima and Paris?": [
        [("get_weather", {"city": "Lima"}), ("get_weather", {"city": "Paris"})],
        [("add", {"a": 40, "b": 2})],
    ],
}
VERSION = version("langgraph")
ROUTE = (
    '`conventions="openinference"`, no targets (openinference-instrumentation-langchain '
    f"{version('openinference-instrumentation-langchain')} on the program's provider)"
)

COMPATIBILITY = [
    compatibility.equal_on(
        "Agent frameworks",
        f"LangGraph {VERSION} (OpenInference LangChain instrumentor), live and offline",
        ROUTE,
    )
]


@tool
def get_weather(city: str) -> str:
    """Weather in a city"""
    return WEATHER[city]


@tool
def add(a: int, b: int) -> int:
    """Add two whole numbers"""
    return a + b


@tool
def today() -> str:
    """Today's weekday"""
    return WEEKDAY


TOOLS = [get_weather, add, today]


class GraphServer(ChatServer):
    """Asks for the question's planned tool calls, reply by reply, then answers in text with
    the tool results it was sent."""

    def answer(self, request: dict) -> dict:
        messages = request["messages"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        replies = sum(1 for m in messages if m["role"] == "assistant")
        plan = PLANS[question]
        n = len(self.exchanges)
        usage = {"prompt_tokens": 10 + len(messages), "completion_tokens": 4, "total_tokens": 0}
        if replies < len(plan):
            calls = [
                {
                    "id": f"call_{n}_{k}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for k, (name, arguments) in enumerate(plan[replies])
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            finish = "tool_calls"
        else:
            results = [str(m["content"]) for m in messages if m["role"] == "tool"]
            message = {"role": "assistant", "content": "; ".join(results)}
            finish = "stop"
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": request["model"] + "-2025-01-01",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }


def react_agent(model: ChatOpenAI) -> Any:
    """langgraph.prebuilt's ReAct agent (deprecated for langchain.agents in LangGraph 1.x,
    still shipped: the route most LangGraph programs use)."""
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(model, TOOLS, prompt=SYSTEM)


def tool_node_graph(model: ChatOpenAI) -> Any:
    """A StateGraph of its own: a model node and a ToolNode (all of a reply's calls in one
    node), looping until the reply asks for no tool."""
    bound = model.bind_tools(TOOLS)

    def call_model(state: MessagesState) -> dict:
        return {"messages": [bound.invoke([("system", SYSTEM), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("call_model", call_model)
    graph.add_node("tools", ToolNode(TOOLS))
    graph.add_edge(START, "call_model")
    graph.add_conditional_edges("call_model", tools_condition)
    graph.add_edge("tools", "call_model")
    return graph.compile()


GRAPHS = {"react_agent": react_agent, "tool_node": tool_node_graph}


@dataclass
class Run:
    results: list[dict]  # the graph's final state, per question
    live: list[at.Trajectory]
    memory: list[SpanRecord]
    own_file: Path
    runtime: at.AgentTrace
    exchanges: list[dict]  # what the server was asked and answered, in order


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    yield from serving(GraphServer)


def run_graph(name: str, server: ChatServer, folder: Path) -> Run:
    """Each question through the graph, traced by the instrumentor alone."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    own_file = folder / "own" / "spans.jsonl"
    provider.add_span_processor(SimpleSpanProcessor(RecordsExporter(own_file)))
    runtime = at.configure(
        tracer_provider=provider,
        out=str(folder / "runs"),
        run_name=name,
        sinks=["jsonl"],
        spans=["file"],
        conventions="openinference",
        exit_report=False,
    )
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    first = len(server.exchanges)
    try:
        model = ChatOpenAI(
            model="gpt-test", base_url=server.base_url, api_key=API_KEY, temperature=0.2
        )
        graph = GRAPHS[name](model)
        results = [graph.invoke({"messages": [("user", question)]}) for question in PLANS]
    finally:
        instrumentor.uninstrument()
        runtime.shutdown()
        provider.shutdown()
    live = load_trajectories(runtime.trajectory_paths)
    records = [record_from_span(span) for span in memory.get_finished_spans()]
    exchanges = list(server.exchanges[first:])
    return Run(results, live, records, own_file, runtime, exchanges)


@pytest.fixture(scope="module", params=list(GRAPHS))
def graph_run(request, server, tmp_path_factory) -> Run:
    return run_graph(request.param, server, tmp_path_factory.mktemp(request.param))


def truth_of(result: dict) -> compatibility.FrameworkTruth:
    """LangGraph's final state, normalised: the conversation the last model call was sent
    (the system prompt, then the state's messages before the answer) and the answer; every
    AIMessage's tool calls with the content of the ToolMessage that answered each."""
    messages = result["messages"]
    answers = {m.tool_call_id: m.content for m in messages if isinstance(m, ToolMessage)}
    calls = [
        {"id": c["id"], "name": c["name"], "arguments": c["args"], "result": answers[c["id"]]}
        for m in messages
        if isinstance(m, AIMessage)
        for c in m.tool_calls
    ]
    final = messages[-1]
    assert isinstance(final, AIMessage) and not final.tool_calls
    return compatibility.FrameworkTruth(
        messages=[{"role": "system", "content": SYSTEM}, *convert_to_openai_messages(messages)],
        tools=[convert_to_openai_tool(t) for t in TOOLS],
        tool_calls=calls,
        final_answer=final.content,
    )


def in_start_order(fields: dict[str, tuple[Any, Any]], trajectory, truth) -> dict:
    """The tool-call fields with both sides in the order the tools started: calls a reply
    asked for together run in parallel, so ours (in start order) may list them otherwise
    than the reply did."""
    started = [c.call_id for step in trajectory.steps for c in step.tool_calls]
    position = {call_id: n for n, call_id in enumerate(started)}
    ordered = sorted(truth.tool_calls, key=lambda c: position.get(c["id"], len(position)))
    again = compatibility.framework_fields(trajectory, _with_calls(truth, ordered))
    return {**fields, **{k: v for k, v in again.items() if k.startswith("tool call")}}


def _with_calls(truth: compatibility.FrameworkTruth, calls: list[dict]):
    return compatibility.FrameworkTruth(
        truth.messages, truth.tools, calls, truth.final_answer, truth.status
    )


def compared(trajectory: at.Trajectory, result: dict) -> dict[str, tuple[Any, Any]]:
    truth = truth_of(result)
    fields = compatibility.framework_fields(trajectory, truth)
    return in_start_order(fields, trajectory, truth)


def offline_runs(run: Run, tmp: Path) -> dict[str, list[at.Trajectory]]:
    """The same spans rebuilt offline: as the provider's exporters stored them (no
    agenttrace on it: no rl.episode.id), the agent's own span file through the CLI, and the
    run's span file."""
    (span_file,) = run.runtime.span_paths
    return {
        "memory": assemble(unstamped(run.memory), conventions=OPENINFERENCE),
        "own file": exported(
            str(run.own_file), tmp / "own.jsonl", "--conventions", "openinference"
        ),
        "run span file": exported(str(span_file), tmp / "run.jsonl"),
    }


# --- field by field, live and offline ----------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "field"), [(e, f) for e in COMPATIBILITY for f in e.equal_fields()]
)
def test_each_field_equals_langgraphs_own_result_live(graph_run, entry, field) -> None:
    assert len(graph_run.live) == len(graph_run.results) == len(PLANS)
    for trajectory, result in zip(graph_run.live, graph_run.results, strict=True):
        ours, theirs = compared(trajectory, result)[field]
        assert ours == theirs


@pytest.mark.parametrize(
    ("entry", "field"), [(e, f) for e in COMPATIBILITY for f in e.equal_fields()]
)
def test_each_field_equals_langgraphs_own_result_offline(graph_run, entry, field, tmp_path) -> None:
    for source, rebuilt in offline_runs(graph_run, tmp_path).items():
        assert len(rebuilt) == len(graph_run.results), source
        for trajectory, result in zip(rebuilt, graph_run.results, strict=True):
            ours, theirs = compared(trajectory, result)[field]
            assert ours == theirs, source


def test_live_equals_offline(graph_run, tmp_path) -> None:
    for source, rebuilt in offline_runs(graph_run, tmp_path).items():
        assert rebuilt == graph_run.live, source


# --- what the instrumentor emits, and how it is read ----------------------------------------------


def test_one_episode_per_graph_run_with_every_model_call_as_a_turn(graph_run) -> None:
    roots = [r for r in graph_run.memory if not r.parent_span_id]
    assert [r.attributes["openinference.span.kind"] for r in roots] == ["CHAIN"] * len(PLANS)
    exchanges = iter(graph_run.exchanges)
    for trajectory, root, result in zip(graph_run.live, roots, graph_run.results, strict=True):
        assert trajectory.episode_id == derived_episode_id(root.trace_id, root.span_id)
        assert trajectory.status == sc.STATUS_COMPLETED and trajectory.error is None
        replies = [m for m in result["messages"] if isinstance(m, AIMessage)]
        assert len(trajectory.steps) == len(replies)  # one turn per model call
        for step, reply in zip(trajectory.steps, replies, strict=True):
            (call,) = step.llm_calls
            exchange = next(exchanges)
            answered = exchange["response"]
            assert call.model == answered["model"]
            assert call.input_tokens == answered["usage"]["prompt_tokens"]
            assert call.finish_reasons == [answered["choices"][0]["finish_reason"]]
            recorded = [_unnamed(m) for m in call.input_messages]
            assert recorded == _sent(exchange["request"]["messages"])
            asked = [c["id"] for c in reply.tool_calls]
            assert sorted(t.call_id for t in step.tool_calls) == sorted(asked)
        last = trajectory.steps[-1]
        assert (last.terminated, last.truncated) == (True, False)  # finish reason "stop"
        assert last.action == result["messages"][-1].content


def _unnamed(message: dict) -> dict:
    """A recorded message without the tool name the instrumentor adds to a tool reply (from
    the ToolMessage; ChatOpenAI does not send it)."""
    if message.get("role") != "tool":
        return message
    return {key: value for key, value in message.items() if key != "name"}


def _sent(messages: list[dict]) -> list[dict]:
    """The request's messages as the LLM span records them (an assistant message without
    text has content None)."""
    out = []
    for message in messages:
        message = dict(message)
        if message["role"] == "assistant" and not message.get("content"):
            message["content"] = None
        out.append(message)
    return out


def test_tool_spans_carry_the_call_id_and_a_nameless_argument(graph_run) -> None:
    """What the instrumentor records on a TOOL span, read as agenttrace reads it: the
    ToolMessage's tool_call_id is the call id (no recovery needed), the one text argument is
    bare and takes its name from the request with that id."""
    tools = [r for r in graph_run.memory if r.attributes.get("openinference.span.kind") == "TOOL"]
    weather = [r for r in tools if r.attributes["tool.name"] == "get_weather"]
    assert weather and all(r.attributes["input.value"] in WEATHER for r in weather)
    assert all("input.value" not in r.attributes for r in tools if r.name == "today")
    translated = [OPENINFERENCE.translate(r)[0].attributes for r in tools]
    ids = {c["id"] for result in graph_run.results for c in truth_of(result).tool_calls}
    assert {a[sc.GEN_AI_TOOL_CALL_ID] for a in translated} == ids


def test_the_api_key_is_never_recorded(graph_run) -> None:
    files = [p for p in Path(graph_run.runtime.run_dir).rglob("*") if p.is_file()]
    files.append(graph_run.own_file)
    assert files and not any(API_KEY in p.read_text(errors="replace") for p in files)
    assert not any(API_KEY in json.dumps(dict(r.attributes)) for r in graph_run.memory)
