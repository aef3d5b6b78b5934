"""A real agent framework with a function tool, traced zero-code: pydantic-ai.

The agent program below never imports agenttrace. It runs under ``opentelemetry-instrument``
with three targets on public methods: the agent's ``run`` (episode), the OpenAI client's
``create`` (llm) and pydantic-ai's ``FunctionToolset.call_tool`` (tool), against an
OpenAI-compatible server this test starts on 127.0.0.1. It runs twice: as documented, and
with pydantic-ai's own instrumentation also on (``Agent.instrument_all()`` with an SDK global
provider, as Logfire users have it), so that every model and tool call is seen by two
instrumentations and must still be one call. The truth is the framework's own result object
(its messages: the tool calls and returns, the output) and its tool definitions, which the
program prints.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import compatibility
import pytest
from conftest import assert_never_recorded, exported, run_agent_program
from test_openai_genai import ChatServer, serve_chat

from agenttrace import semconv as sc
from agenttrace.cli.main import main

API_KEY = "sk-agent-framework-test-7c1d"
AGENT = '''
"""A pydantic-ai agent with one function tool."""
import json
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

provider = OpenAIProvider(base_url=sys.argv[1], api_key=sys.argv[2])
agent = Agent(OpenAIChatModel("gpt-test", provider=provider), system_prompt="Answer about weather.")


@agent.tool_plain
def get_weather(city: str) -> str:
    """Weather in a city."""
    return f"sunny, 21 C in {city}"


if sys.argv[3] == "instrumented":
    Agent.instrument_all()
result = agent.run_sync("Weather in Paris?")
parts = [part for message in result.all_messages() for part in message.parts]
print(json.dumps({
    "output": result.output,
    "messages": [
        {"kind": type(p).__name__, "content": getattr(p, "content", None),
         "id": getattr(p, "tool_call_id", None), "name": getattr(p, "tool_name", None),
         "args": p.args_as_dict() if isinstance(p, ToolCallPart) else None}
        for p in parts
    ],
    "tools": [
        {"name": t.tool_def.name, "description": t.tool_def.description,
         "parameters": t.tool_def.parameters_json_schema}
        for t in agent.toolsets[0].tools.values()
    ],
    "calls": [
        {"name": p.tool_name, "args": p.args_as_dict(), "id": p.tool_call_id}
        for p in parts if isinstance(p, ToolCallPart)
    ],
    "returns": [
        {"id": p.tool_call_id, "content": p.content} for p in parts if isinstance(p, ToolReturnPart)
    ],
}))
'''
TARGETS = ";".join(
    [
        "pydantic_ai.agent.abstract:AbstractAgent.run=episode",
        "openai.resources.chat.completions:AsyncCompletions.create=llm",
        "pydantic_ai.toolsets.function:FunctionToolset.call_tool="
        "tool[name=name,arguments=tool_args,call_id=ctx.tool_call_id]",
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    yield from serve_chat()


VERSION = __import__("importlib.metadata").metadata.version("pydantic-ai-slim")
ROUTE = (
    "targets: `AbstractAgent.run=episode`, the OpenAI client's `create=llm`, "
    "`FunctionToolset.call_tool=tool`"
)
COMPATIBILITY = [
    compatibility.equal_on("Agent frameworks", f"pydantic-ai {VERSION}", ROUTE),
    compatibility.equal_on(
        "Agent frameworks",
        f"pydantic-ai {VERSION}, its own instrumentation on too",
        ROUTE + " + `Agent.instrument_all()` (each call seen twice: one call)",
    ),
]
VARIANTS = {COMPATIBILITY[0].name: "documented", COMPATIBILITY[1].name: "instrumented"}


@pytest.fixture(scope="module", params=list(VARIANTS.values()))
def agent_run(
    request: pytest.FixtureRequest, server: ChatServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple:
    return run_agent(request.param, server, tmp_path_factory)


_RUNS: dict[str, tuple] = {}


def run_agent(variant: str, server: ChatServer, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The agent run as ``variant`` (once per module): (truth, trajectory, runs folder)."""
    if variant in _RUNS:
        return _RUNS[variant]
    own = {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"} if variant != "documented" else {}
    _RUNS[variant] = run_agent_program(
        tmp_path_factory.mktemp(variant),
        AGENT,
        server.base_url,
        API_KEY,
        variant,
        name="weather_agent.py",
        targets=TARGETS,
        **own,
    )
    return _RUNS[variant]


def truth_of(printed: dict) -> compatibility.FrameworkTruth:
    """pydantic-ai's own messages as the chat messages its OpenAI model sends: system and
    user prompts, the model's tool calls, tool returns, and the final text."""
    messages: list[dict] = []
    for part in printed["messages"]:
        kind = part["kind"]
        if kind == "SystemPromptPart":
            messages.append({"role": "system", "content": part["content"]})
        elif kind == "UserPromptPart":
            messages.append({"role": "user", "content": part["content"]})
        elif kind == "ToolCallPart":
            call = {"id": part["id"], "function": {"name": part["name"], "arguments": part["args"]}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "ToolReturnPart":
            messages.append(
                {"role": "tool", "tool_call_id": part["id"], "content": part["content"]}
            )
        elif kind == "TextPart":
            messages.append({"role": "assistant", "content": part["content"]})
    returns = {r["id"]: r["content"] for r in printed["returns"]}
    return compatibility.FrameworkTruth(
        messages=messages,
        tools=printed["tools"],
        tool_calls=[
            {"id": c["id"], "name": c["name"], "arguments": c["args"], "result": returns[c["id"]]}
            for c in printed["calls"]
        ],
        final_answer=printed["output"],
    )


@pytest.mark.parametrize(
    ("entry", "field"), [(e, f) for e in COMPATIBILITY for f in e.equal_fields()]
)
def test_each_field_equals_pydantic_ais_own_record(server, tmp_path_factory, entry, field) -> None:
    printed, trajectory, _ = run_agent(VARIANTS[entry.name], server, tmp_path_factory)
    ours, theirs = compatibility.framework_fields(trajectory, truth_of(printed))[field]
    assert ours == theirs


def test_the_run_is_an_episode_of_turns_ending_completed_with_the_final_answer(agent_run) -> None:
    truth, trajectory, _ = agent_run
    assert trajectory.status == sc.STATUS_COMPLETED
    ask, answer = trajectory.steps  # the turn that called the tool, the final answer
    assert [call.finish_reasons for call in ask.llm_calls] == [["tool_calls"]]
    assert (answer.action, answer.terminated, answer.truncated) == (truth["output"], True, False)
    assert answer.llm_calls[0].output_messages[0]["content"] == truth["output"]
    assert not (ask.terminated or ask.truncated)


def test_tool_calls_equal_the_frameworks_messages(agent_run) -> None:
    truth, trajectory, _ = agent_run
    calls = [call for step in trajectory.steps for call in step.tool_calls]
    assert [(c.name, c.call_id, c.arguments) for c in calls] == [
        (call["name"], call["id"], call["args"]) for call in truth["calls"]
    ]
    results = {r["id"]: r["content"] for r in truth["returns"]}
    assert [(c.call_id, c.result) for c in calls] == list(results.items())
    assert all(c.error is None for c in calls)
    # The tool ran for the turn whose reply asked for it, with that reply's call id.
    (asked,) = trajectory.steps[0].llm_calls[0].output_messages[0]["tool_calls"]
    assert asked["id"] == calls[0].call_id and trajectory.steps[0].tool_calls == calls


def test_tool_definitions_reach_the_calls_and_the_chat_export(agent_run, tmp_path) -> None:
    truth, trajectory, runs = agent_run
    for step in trajectory.steps:
        (call,) = step.llm_calls
        offered = call.attributes[sc.GEN_AI_TOOL_DEFINITIONS]
        # the one tool the program defines, with its docstring and its argument
        assert [(t["function"]["name"], t["function"]["description"]) for t in offered] == [
            ("get_weather", "Weather in a city.")
        ]
        assert offered[0]["function"]["parameters"]["properties"] == {"city": {"type": "string"}}
    out = tmp_path / "chat.jsonl"
    source = str(runs / "*" / "spans*.jsonl")
    assert main(["export", "--from", source, "--out", str(out), "--format", "chat", "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]
    assert all(
        row["tools"] == trajectory.steps[0].llm_calls[0].attributes[sc.GEN_AI_TOOL_DEFINITIONS]
        for row in rows
    )
    assert rows[-1]["messages"][-1] == {"role": "assistant", "content": truth["output"]}
    assert rows[-1]["status"] == sc.STATUS_COMPLETED


def test_rebuilt_from_the_span_file_the_run_is_the_same(agent_run, tmp_path) -> None:
    _, trajectory, runs = agent_run
    (rebuilt,) = exported(str(runs / "*" / "spans*.jsonl"), tmp_path / "out.jsonl")
    assert rebuilt == trajectory


def test_the_api_key_is_never_recorded(agent_run) -> None:
    assert_never_recorded(agent_run[2], API_KEY)
