"""The genai, traceloop and agentlightning presets on spans shaped as those libraries emit them.

* genai: the real ``opentelemetry-instrumentation-openai-v2`` for the model calls, under an
  ``invoke_agent {name}`` span and with ``execute_tool {name}`` spans made by the real
  ``opentelemetry-util-genai`` TelemetryHandler (``invoke_local_agent``, ``tool``,
  ``workflow``), the library the GenAI instrumentations share;
* traceloop: ``traceloop-sdk`` is not installed here (it pulls in some 40 instrumentation
  packages), so :class:`Traceloop` below makes its ``@workflow`` / ``@tool`` spans the way its
  0.62 source does (decorators/base.py ``_setup_span``, ``_handle_span_input`` /
  ``_handle_span_output``; tracing.py's span processor ``on_start``), span name, kind, entity
  name, JSON input ``{"args": [...], "kwargs": {...}}`` and JSON output alike; model calls come
  from openai-v2 (OpenLLMetry's own openai instrumentation writes the same GenAI message keys);
* agentlightning: ``agentlightning`` is not installed (agentops, litellm); its 0.3
  ``emit_reward`` span is made by :func:`emit_reward` below with the names of its semconv
  (``agentlightning.annotation``, ``agentlightning.reward.{i}.name`` / ``.value``, the primary
  first; ``primary`` for a single value), inside a runner-style episode.

The model server is the OpenAI-compatible one on 127.0.0.1 of test_conventions_openinference;
every expectation comes from what it answered, what the client sent and what the tools
computed. Then: spans no rule matches, agenttrace's own spans, nested agent spans and hostile
attribute values.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import exported
from openinference.instrumentation import OITracer, TraceConfig
from openinference.instrumentation.openai import OpenAIInstrumentor as OIOpenAIInstrumentor
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.genai.handler import TelemetryHandler
from test_conventions_openinference import PLANS, WEATHER, AgentServer, unstamped
from test_openai_genai import (
    CONTENT_ENV,
    SEMCONV_ENV,
    WEATHER_TOOL,
    ChatServer,
    client_for,
    parsed_arguments,
    reply_message,
    serving,
    without_arguments,
)

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.conventions import (
    ORIGINAL_NAME,
    conventions_from_table,
    conventions_from_value,
    derived_episode_id,
)
from agenttrace.trajectory.records import SpanRecord, record_from_span
from agenttrace.trajectory.stream import assemble

SYSTEM = "You answer weather questions; call get_weather once per city."


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serving(AgentServer)


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    yield from serving(ChatServer)


@dataclass
class Run:
    live: list[at.Trajectory]
    memory: list[SpanRecord]  # as the provider's own exporter stored them
    runtime: at.AgentTrace


def traced(
    tmp_path: Path,
    conventions: Any,
    play: Callable[[TracerProvider], Any],
    processor: SpanProcessor | None = None,
) -> tuple:
    """``play`` on an SDK provider of its own (with an in-memory exporter, and ``processor``
    if given, both before agenttrace's), agenttrace joined with ``conventions``; returns
    (what play returned, Run)."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if processor is not None:
        provider.add_span_processor(processor)
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path / "runs"),
        run_name="frameworks",
        sinks=["jsonl"],
        spans=["file"],
        conventions=conventions,
        exit_report=False,
    )
    try:
        played = play(provider)
    finally:
        runtime.shutdown()
        provider.shutdown()
    live = load_trajectories(runtime.trajectory_paths) if runtime.trajectory_paths else []
    records = [record_from_span(span) for span in memory.get_finished_spans()]
    return played, Run(live, records, runtime)


def assert_offline_equals_live(run: Run, conventions: str, tmp_path: Path) -> None:
    """The run's span file, the provider's own exporter and those spans without agenttrace's
    stamping, rebuilt through the mapping (assemble and the CLI): each equal to live."""
    mapping = conventions_from_value(conventions)
    assert assemble(read_otlp_json(run.runtime.span_paths), conventions=mapping) == run.live
    (span_file,) = run.runtime.span_paths
    out = tmp_path / "export.jsonl"
    assert exported(str(span_file), out, "--conventions", conventions) == run.live
    assert assemble(run.memory, conventions=mapping) == run.live
    assert assemble(unstamped(run.memory), conventions=mapping) == run.live


@dataclass
class Played:
    """What the agent saw of one question: the independent truth."""

    question: str
    answer: str
    sent: list[list[dict]]
    tools: list[tuple[str, Any, str]]  # (call id, what the tool was called with, result)


def weather_loop(client: Any, question: str, run_tool: Callable[[Any], tuple[Any, str]]) -> Played:
    """The agent loop: ask, run each tool the model asks for, ask again, until it answers.
    ``run_tool(call)`` runs one tool call and returns (what it was called with, result)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    sent, tools = [], []
    for _ in range(4):
        sent.append(json.loads(json.dumps(messages)))
        response = client.chat.completions.create(
            model="gpt-test", messages=messages, tools=[WEATHER_TOOL]
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return Played(question, message.content, sent, tools)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            given, result = run_tool(call)
            tools.append((call.id, given, result))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError("the server never answered in text")


def assert_turns(trajectory: at.Trajectory, played: Played, exchanges: Iterator[dict]) -> None:
    """One step per model call (the GenAI message format re-serialises tool-call arguments:
    they are compared parsed); each tool run in the step of the call that asked for it."""
    assert trajectory.length == len(played.sent) == len(played.tools) + 1
    for index, (step, sent) in enumerate(zip(trajectory.steps, played.sent, strict=True)):
        exchange = next(exchanges)
        answered = exchange["response"]
        assert exchange["request"]["messages"] == sent
        (call,) = step.llm_calls
        assert without_arguments(call.input_messages) == without_arguments(sent)
        assert parsed_arguments(call.input_messages) == parsed_arguments(sent)
        reply = reply_message(answered)
        assert without_arguments(call.output_messages) == without_arguments([reply])
        assert parsed_arguments(call.output_messages) == parsed_arguments([reply])
        assert call.model == answered["model"]
        assert call.attributes[sc.GEN_AI_REQUEST_MODEL] == exchange["request"]["model"]
        assert call.provider == "openai"
        assert call.finish_reasons == [answered["choices"][0]["finish_reason"]]
        assert call.input_tokens == answered["usage"]["prompt_tokens"]
        assert call.output_tokens == answered["usage"]["completion_tokens"]
        assert step.reward is None
        if index < len(played.tools):
            call_id, _, result = played.tools[index]
            (tool,) = step.tool_calls
            requested = call.output_messages[0]["tool_calls"][0]
            assert requested["id"] == call_id
            city = json.loads(requested["function"]["arguments"])["city"]
            assert tool.name == "get_weather"
            assert tool.result == WEATHER[city] == result
            assert (step.terminated, step.truncated) == (False, False)
        else:
            assert step.tool_calls == [] and step.action == played.answer
            assert (step.terminated, step.truncated) == (True, False)


# --- genai: openai-v2 under invoke_agent, with execute_tool spans ------------------------------


@pytest.fixture
def genai_content(monkeypatch: pytest.MonkeyPatch) -> None:
    """openai-v2 and opentelemetry-util-genai record message content and tool arguments."""
    monkeypatch.setenv(SEMCONV_ENV, "gen_ai_latest_experimental")
    monkeypatch.setenv(CONTENT_ENV, "span_only")


def play_genai(provider: TracerProvider, server: ChatServer) -> list[Played]:
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    handler = TelemetryHandler(tracer_provider=provider)
    client = client_for(server)

    def get_weather(call: Any) -> tuple[Any, str]:
        arguments = json.loads(call.function.arguments)
        with handler.tool("get_weather", tool_call_id=call.id, tool_type="function") as tool:
            result = WEATHER[arguments["city"]]
            tool.arguments = arguments
            tool.tool_result = result
        return arguments, result

    try:
        played = []
        for number, question in enumerate(PLANS):
            agent_span = handler.invoke_local_agent(agent_name="weather", request_model="gpt-test")
            with agent_span as agent:
                agent.conversation_id = f"conversation-{number}"
                played.append(weather_loop(client, question, get_weather))
        return played
    finally:
        instrumentor.uninstrument()


def test_genai_agent_spans_live_and_offline(tmp_path, server, genai_content) -> None:
    played, run = traced(tmp_path, "genai", lambda provider: play_genai(provider, server))
    agents = [r for r in run.memory if r.name == "invoke_agent weather"]
    assert len(agents) == len(run.live) == len(played) == 2
    exchanges = iter(server.exchanges)
    for number, (trajectory, agent, truth) in enumerate(zip(run.live, agents, played, strict=True)):
        # gen_ai.conversation.id is the episode's id; the derived one joins its spans.
        assert trajectory.episode_id == f"conversation-{number}"
        assert trajectory.trace_id == f"{agent.trace_id:032x}"
        derived = derived_episode_id(agent.trace_id, agent.span_id)
        spans = [r for r in run.memory if r.trace_id == agent.trace_id]
        assert {r.attributes[sc.EPISODE_ID] for r in spans} == {derived}
        assert trajectory.status == sc.STATUS_COMPLETED
        assert trajectory.attributes[ORIGINAL_NAME] == "invoke_agent weather"
        assert trajectory.attributes["gen_ai.agent.name"] == "weather"
        assert_turns(trajectory, truth, exchanges)
        for step, (call_id, arguments, _) in zip(trajectory.steps, truth.tools, strict=False):
            (tool,) = step.tool_calls
            assert (tool.call_id, tool.arguments) == (call_id, arguments)
    assert_offline_equals_live(run, "genai", tmp_path)


def test_genai_workflow_is_one_episode_with_its_agents(tmp_path, server, genai_content) -> None:
    """opentelemetry-util-genai's workflow() around two agents: the root invoke_workflow
    span is the episode; the nested invoke_agent spans are not episodes of their own."""

    def play(provider: TracerProvider) -> list[Played]:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        handler = TelemetryHandler(tracer_provider=provider)
        client = client_for(server)

        def get_weather(call: Any) -> tuple[Any, str]:
            arguments = json.loads(call.function.arguments)
            with handler.tool("get_weather", tool_call_id=call.id) as tool:
                tool.arguments = arguments
                tool.tool_result = WEATHER[arguments["city"]]
            return arguments, tool.tool_result

        try:
            played = []
            with handler.workflow("forecast"):
                for question in PLANS:
                    with handler.invoke_local_agent(agent_name="weather"):
                        played.append(weather_loop(client, question, get_weather))
            return played
        finally:
            instrumentor.uninstrument()

    played, run = traced(tmp_path, "genai", play)
    (trajectory,) = run.live
    (workflow,) = [r for r in run.memory if r.name == "invoke_workflow forecast"]
    assert trajectory.episode_id == derived_episode_id(workflow.trace_id, workflow.span_id)
    assert trajectory.status == sc.STATUS_COMPLETED
    agents = [r for r in run.memory if r.name == "invoke_agent weather"]
    assert [r.parent_span_id for r in agents] == [workflow.span_id] * 2
    # Every model and tool call of both agents, in order, in the one episode.
    calls = [call for step in trajectory.steps for call in step.llm_calls]
    assert [call.input_messages[1]["content"] for call in calls] == [
        p.question for p in played for _ in p.sent
    ]
    assert [call.input_tokens for call in calls] == [
        e["response"]["usage"]["prompt_tokens"] for e in server.exchanges
    ]
    tools = [tool for step in trajectory.steps for tool in step.tool_calls]
    assert [(t.call_id, t.arguments, t.result) for t in tools] == [
        tool for p in played for tool in p.tools
    ]
    assert trajectory.steps[-1].action == played[-1].answer
    assert_offline_equals_live(run, "genai", tmp_path)


def test_genai_agent_span_named_only_is_an_episode(tmp_path, chat, genai_content) -> None:
    """A hand-made invoke_agent span whose operation name is set after it started: its name
    says what it is (the GenAI span name is ``invoke_agent {gen_ai.agent.name}``)."""

    def play(provider: TracerProvider) -> str:
        tracer = provider.get_tracer("my.agent.framework")
        with tracer.start_as_current_span("invoke_agent helper") as span:
            span.set_attribute(sc.GEN_AI_OPERATION_NAME, "invoke_agent")
            reply = client_for(chat).chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "go"}]
            )
            with tracer.start_as_current_span("execute_tool lookup") as tool:
                tool.set_attributes(
                    {
                        sc.GEN_AI_OPERATION_NAME: "execute_tool",
                        sc.GEN_AI_TOOL_NAME: "lookup",
                        sc.GEN_AI_TOOL_CALL_ID: "c-1",
                        sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"q": "x"}',
                        sc.GEN_AI_TOOL_CALL_RESULT: '{"hits": 3}',
                    }
                )
        return reply.choices[0].message.content

    def play_instrumented(provider: TracerProvider) -> str:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            return play(provider)
        finally:
            instrumentor.uninstrument()

    answer, run = traced(tmp_path, "genai", play_instrumented)
    (trajectory,) = run.live
    (step,) = trajectory.steps  # the model call's turn, and the tool it led to
    (tool,) = step.tool_calls
    assert (tool.name, tool.call_id, tool.arguments, tool.result) == (
        "lookup",
        "c-1",
        {"q": "x"},
        {"hits": 3},
    )
    assert (
        step.action == answer == chat.exchanges[0]["response"]["choices"][0]["message"]["content"]
    )
    assert_offline_equals_live(run, "genai", tmp_path)


# --- traceloop: @workflow / @tool as traceloop-sdk 0.62 makes them ------------------------------


class TraceloopProcessor(SpanProcessor):
    """traceloop-sdk's span processor on_start (tracing.py ``default_span_processor_on_start``):
    the workflow name and association properties in the context go on every span."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        workflow = context_api.get_value("workflow_name")
        if workflow is not None:
            span.set_attribute("traceloop.workflow.name", str(workflow))
        properties = context_api.get_value("association_properties")
        if isinstance(properties, dict):
            for key, value in properties.items():
                span.set_attribute(f"traceloop.association.properties.{key}", value)


class Traceloop:
    """``@workflow`` and ``@tool`` of traceloop-sdk 0.62 (decorators/base.py), span for span:
    span ``{name}.{kind}``; ``traceloop.span.kind``, ``traceloop.entity.name`` (and, for
    tools, ``gen_ai.tool.name``); ``traceloop.entity.input`` = JSON ``{"args", "kwargs"}``;
    ``traceloop.entity.output`` = the result as JSON; an exception fails the span."""

    def __init__(self, provider: TracerProvider) -> None:
        self.tracer = provider.get_tracer("traceloop.tracer")

    def workflow(self, fn: Callable) -> Callable:
        return self._entity(fn, "workflow")

    def tool(self, fn: Callable) -> Callable:
        return self._entity(fn, "tool")

    @staticmethod
    def set_association_properties(properties: dict) -> None:
        context_api.attach(context_api.set_value("association_properties", properties))
        span = trace.get_current_span()
        if context_api.get_value("workflow_name") is not None:
            for key, value in properties.items():
                span.set_attribute(f"traceloop.association.properties.{key}", value)

    def _entity(self, fn: Callable, kind: str) -> Callable:
        name = fn.__name__

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            name_token = None
            if kind == "workflow":
                name_token = context_api.attach(context_api.set_value("workflow_name", name))
            span = self.tracer.start_span(f"{name}.{kind}")
            span_token = context_api.attach(trace.set_span_in_context(span))
            span.set_attribute("traceloop.span.kind", kind)
            span.set_attribute("traceloop.entity.name", name)
            if kind == "tool":
                span.set_attribute(sc.GEN_AI_TOOL_NAME, name)
            span.set_attribute(
                "traceloop.entity.input", json.dumps({"args": args, "kwargs": kwargs})
            )
            try:
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    span.record_exception(exc)
                    raise
                span.set_attribute("traceloop.entity.output", json.dumps(result))
                return result
            finally:
                span.end()
                context_api.detach(span_token)
                if name_token is not None:
                    context_api.detach(name_token)

        return run


def play_traceloop(provider: TracerProvider, server: ChatServer) -> list[Played]:
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    traceloop = Traceloop(provider)
    client = client_for(server)

    @traceloop.tool
    def get_weather(city: str) -> str:
        return WEATHER[city]

    def run_tool(call: Any) -> tuple[Any, str]:
        city = json.loads(call.function.arguments)["city"]
        if city == "Lima":  # called positionally: the SDK records {"args": ["Lima"], ...}
            return {"args": [city], "kwargs": {}}, get_weather(city)
        return {"city": city}, get_weather(city=city)

    @traceloop.workflow
    def forecast(question: str, number: int) -> str:
        Traceloop.set_association_properties({"task_id": f"task-{number}"})
        played.append(weather_loop(client, question, run_tool))
        return played[-1].answer

    played: list[Played] = []
    try:
        for number, question in enumerate(PLANS):
            forecast(question, number)
        return played
    finally:
        instrumentor.uninstrument()


def test_traceloop_workflow_and_tools_live_and_offline(tmp_path, server, genai_content) -> None:
    # Traceloop.init() adds the SDK's span processor to the provider before agenttrace joins.
    played, run = traced(
        tmp_path,
        "traceloop",
        lambda provider: play_traceloop(provider, server),
        processor=TraceloopProcessor(),
    )
    workflows = [r for r in run.memory if r.name == "forecast.workflow"]
    assert len(workflows) == len(run.live) == len(played) == 2
    exchanges = iter(server.exchanges)
    for number, (trajectory, workflow, truth) in enumerate(
        zip(run.live, workflows, played, strict=True)
    ):
        assert trajectory.episode_id == derived_episode_id(workflow.trace_id, workflow.span_id)
        assert trajectory.task_id == f"task-{number}"  # an association property
        assert trajectory.status == sc.STATUS_COMPLETED
        assert trajectory.attributes["traceloop.entity.name"] == "forecast"
        assert json.loads(trajectory.attributes["traceloop.entity.output"]) == truth.answer
        assert_turns(trajectory, truth, exchanges)
        for step, (call_id, given, _) in zip(trajectory.steps, truth.tools, strict=False):
            (tool,) = step.tool_calls
            assert tool.arguments == given  # keyword arguments; positional ones as recorded
            # the SDK's tool span does not record the id: it is the one the reply asked for
            # with that name and those arguments
            assert tool.call_id == call_id
    tool_spans = [r for r in run.memory if r.name == "get_weather.tool"]
    assert [r.attributes["traceloop.workflow.name"] for r in tool_spans] == ["forecast"] * 3
    assert_offline_equals_live(run, "traceloop", tmp_path)


# --- agentlightning: reward annotations in a runner-style episode -------------------------------


def emit_reward(
    tracer: Any, reward: float | dict[str, float], primary_key: str | None = None
) -> None:
    """Agent Lightning 0.3's ``emit_reward`` (emitter/reward.py): reward dimensions, the
    primary first (``primary`` for a single value), flattened into an annotation span."""
    if isinstance(reward, dict):
        assert primary_key in reward
        dimensions = [(primary_key, reward[primary_key])]
        dimensions += [(k, v) for k, v in reward.items() if k != primary_key]
    else:
        dimensions = [("primary", float(reward))]
    attributes: dict[str, Any] = {}
    for index, (name, value) in enumerate(dimensions):
        attributes[f"agentlightning.reward.{index}.name"] = name
        attributes[f"agentlightning.reward.{index}.value"] = value
    annotate(tracer, attributes)


def annotate(tracer: Any, attributes: dict[str, Any], name: str = "agentlightning.annotation"):
    span = tracer.start_span(name, attributes=attributes)
    span.set_status(Status(StatusCode.OK))
    span.end()


@dataclass
class Rollout:
    task_id: str
    rewards: list[float | None]  # the environment's, per step
    annotate: Callable[[Any], None]  # what the agent emits after its last step
    scores: dict[str, float]  # what that should give
    bonus: float  # what the primary reward adds to the last step


ROLLOUTS = [
    Rollout("single", [0.0, 0.5], lambda t: emit_reward(t, 1.0), {"reward": 1.0}, 1.0),
    Rollout(
        "dimensions",
        [None],
        lambda t: emit_reward(
            t, {"efficiency": 0.75, "task_completion": 1.0}, primary_key="task_completion"
        ),
        {"reward": 1.0, "efficiency": 0.75},
        1.0,
    ),
    Rollout(  # Agent Lightning before 0.3: a span agentlightning.reward with reward=...
        "legacy",
        [0.25],
        lambda t: annotate(t, {"reward": 0.5}, name="agentlightning.reward"),
        {"reward": 0.5},
        0.5,
    ),
    Rollout(  # hostile values: each left out, the rest counted
        "hostile",
        [1.0, 1.0],
        lambda t: (
            annotate(
                t,
                {
                    "agentlightning.reward.0.name": "primary",
                    "agentlightning.reward.0.value": "lots",
                    "agentlightning.reward.1.name": "speed",
                    "agentlightning.reward.1.value": math.nan,
                    "agentlightning.reward.2.name": "style",
                    "agentlightning.reward.2.value": 0.25,
                },
            ),
            annotate(t, {"agentlightning.tag.0": "fast"}),  # no reward: not a score
        ),
        {"style": 0.25},
        0.0,
    ),
]


def play_rollouts(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("rollout.runner")
    for rollout in ROLLOUTS:
        with tracer.start_as_current_span("episode", attributes={"task_id": rollout.task_id}):
            for index, reward in enumerate(rollout.rewards):
                with tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
                    with tracer.start_as_current_span("env.step") as step:
                        if reward is not None:
                            step.set_attribute("reward", reward)
                        step.set_attribute("done", index == len(rollout.rewards) - 1)
            rollout.annotate(tracer)


def test_agentlightning_rewards_become_scores_live_and_offline(tmp_path) -> None:
    _, run = traced(tmp_path, "runner,agentlightning", play_rollouts)
    by_task = {t.task_id: t for t in run.live}
    assert sorted(by_task) == sorted(r.task_id for r in ROLLOUTS)
    for rollout in ROLLOUTS:
        trajectory = by_task[rollout.task_id]
        assert trajectory.status == sc.STATUS_COMPLETED
        assert trajectory.scores == rollout.scores
        expected = list(rollout.rewards)
        if rollout.bonus:
            expected[-1] = (expected[-1] or 0.0) + rollout.bonus
        assert [step.reward for step in trajectory.steps] == expected
        env_return = sum(r for r in rollout.rewards if r is not None)
        assert trajectory.return_ == pytest.approx(env_return + rollout.bonus)
        assert [step.terminated for step in trajectory.steps][-1] is True
    assert_offline_equals_live(run, "runner,agentlightning", tmp_path)
    # The tag-only annotation is no score: it stays as it was in the span file.
    (tags,) = [
        r for r in read_otlp_json(run.runtime.span_paths) if "agentlightning.tag.0" in r.attributes
    ]
    assert tags.name == "agentlightning.annotation" and ORIGINAL_NAME not in tags.attributes


def test_without_the_agentlightning_preset_its_spans_are_no_scores(tmp_path) -> None:
    _, run = traced(tmp_path, "runner", play_rollouts)
    assert all(t.scores == {} for t in run.live)
    assert {t.task_id: t.return_ for t in run.live} == pytest.approx(
        {r.task_id: sum(x for x in r.rewards if x is not None) for r in ROLLOUTS}
    )


# --- what the mapping leaves alone ---------------------------------------------------------------


def test_unmatched_spans_pass_untouched_and_hostile_values_are_left_out(tmp_path) -> None:
    """Runner-style spans with a bad reward ("lots", NaN) and bad step indices (-1, "x"):
    those values are left out (kept as the span had them), every other step counts; a span
    no rule matches keeps its name and attributes, runner-like keys included."""
    steps: list[tuple[Any, Any]] = [
        (0, 1.0),
        (1, "lots"),
        (-1, 2.0),
        ("x", 3.0),
        (2, math.nan),
        (3, 0.5),
    ]
    other = {"reward": 9.0, "done": True, "timestep_idx": 7, "http.method": "GET"}

    def play(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("runner")
        with tracer.start_as_current_span("episode", attributes={"task_id": "hostile"}):
            for index, reward in steps:
                with tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
                    with tracer.start_as_current_span("get_tool_schemas", attributes=other):
                        pass
                    with tracer.start_as_current_span("env.step") as step:
                        step.set_attribute("reward", reward)
                        step.set_attribute("done", index == 3)

    _, run = traced(tmp_path, "runner", play)
    (trajectory,) = run.live
    assert trajectory.status == sc.STATUS_COMPLETED and trajectory.missing_steps == []
    assert [(s.index, s.reward, s.terminated) for s in trajectory.steps] == [
        (0, 1.0, False),
        (1, None, False),
        (2, None, False),
        (3, 0.5, True),
    ]
    assert trajectory.return_ == 1.5
    stored = list(read_otlp_json(run.runtime.span_paths))
    env_steps = [r for r in stored if r.name == sc.ENV_STEP]
    assert [r.attributes.get(sc.REWARD) for r in env_steps] == [1.0, None, 2.0, 3.0, None, 0.5]
    assert env_steps[1].attributes["reward"] == "lots"  # left as the span had it
    assert math.isnan(env_steps[4].attributes["reward"])
    bad_steps = [r for r in stored if r.attributes.get("timestep_idx") in (-1, "x")]
    assert len(bad_steps) == 2 and all(sc.TIMESTEP_INDEX not in r.attributes for r in bad_steps)
    unmatched = [r for r in stored if r.name == "get_tool_schemas"]
    assert len(unmatched) == len(steps)
    for record in unmatched:
        assert dict(record.attributes) == {**other, sc.EPISODE_ID: trajectory.episode_id}
    assert_offline_equals_live(run, "runner", tmp_path)


def test_agenttraces_own_spans_are_never_translated(tmp_path) -> None:
    """A mapping whose rule matches every span named rl.*: agenttrace's own episode, timestep
    and env.step spans still read as themselves; another tracer's rl.* span is translated."""
    greedy = conventions_from_table(
        {"spans": [{"role": "env.step", "name_prefix": "rl."}], "fields": {"reward": "r"}}
    )

    def play(provider: TracerProvider) -> None:
        with at.episode(task_id="own"):
            for index in range(2):
                with at.timestep(), at.env_step() as step:
                    step.record(action=index, reward=float(index + 1), terminated=index == 1)
        with provider.get_tracer("other").start_as_current_span("rl.lookalike") as span:
            span.set_attribute("r", 4.0)

    _, run = traced(tmp_path, greedy, play)
    (trajectory,) = run.live
    assert trajectory.task_id == "own" and trajectory.status == sc.STATUS_COMPLETED
    assert [(s.action, s.reward, s.terminated) for s in trajectory.steps] == [
        (0, 1.0, False),
        (1, 2.0, True),
    ]
    stored = list(read_otlp_json(run.runtime.span_paths))
    own = [r for r in stored if r.scope_name == sc.INSTRUMENTATION_SCOPE]
    assert {r.name for r in own} == {sc.EPISODE, sc.TIMESTEP, sc.ENV_STEP}
    assert not [r for r in own if ORIGINAL_NAME in r.attributes]
    (lookalike,) = [r for r in stored if r.scope_name == "other"]
    assert lookalike.name == sc.ENV_STEP and lookalike.attributes[ORIGINAL_NAME] == "rl.lookalike"
    assert lookalike.attributes[sc.REWARD] == 4.0 and "r" not in lookalike.attributes
    assert assemble(read_otlp_json(run.runtime.span_paths), conventions=greedy) == run.live


def test_a_nested_openinference_agent_is_part_of_its_outer_episode(tmp_path, chat) -> None:
    """An AGENT span (``@tracer.agent``) called by another agent is no second episode: its
    model call is a turn of the outer agent's episode."""

    def play(provider: TracerProvider) -> list[str]:
        instrumentor = OIOpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        tracer = OITracer(provider.get_tracer("agents"), config=TraceConfig())
        client = client_for(chat)

        def ask(text: str) -> str:
            reply = client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": text}]
            )
            return reply.choices[0].message.content

        @tracer.agent
        def summarizer(text: str) -> str:
            return ask(f"summarize: {text}")

        @tracer.agent
        def planner(goal: str) -> list[str]:
            draft = ask(goal)
            return [draft, summarizer(draft)]

        try:
            return planner("plan a trip")
        finally:
            instrumentor.uninstrument()

    answers, run = traced(tmp_path, "openinference", play)
    (trajectory,) = run.live
    (outer,) = [r for r in run.memory if r.name == "planner"]
    (inner,) = [r for r in run.memory if r.name == "summarizer"]
    assert inner.parent_span_id == outer.span_id
    assert trajectory.episode_id == derived_episode_id(outer.trace_id, outer.span_id)
    assert inner.attributes[sc.EPISODE_ID] == trajectory.episode_id
    # Both agents' model calls, in order, in the one episode (two model calls with no tool
    # call between them are one agent turn).
    calls = [call for step in trajectory.steps for call in step.llm_calls]
    assert [call.input_messages for call in calls] == [
        e["request"]["messages"] for e in chat.exchanges
    ]
    assert [call.output_messages[0]["content"] for call in calls] == answers
    assert trajectory.status == sc.STATUS_COMPLETED
    stored = list(read_otlp_json(run.runtime.span_paths))
    (inner_stored,) = [r for r in stored if r.span_id == inner.span_id]
    assert inner_stored.name == "summarizer" and ORIGINAL_NAME not in inner_stored.attributes
    assert_offline_equals_live(run, "openinference", tmp_path)
