"""The OpenAI Agents SDK on the Responses API, traced zero-code, against its own result.

The agent programs below never import agenttrace. Each runs under ``opentelemetry-instrument``
with agenttrace targets: the SDK's runner (episode), the OpenAI client's
``AsyncResponses.create`` (llm) and the function tool's invocation (tool), against the
loopback ChatServer's /v1/responses. Two routes to the tool call are compared:

* ``decorated``: an unchanged ``@function_tool``, through the SDK's tool invoker, which is a
  private class (the SDK has no public method around one tool call);
* ``public``: the nearest public route, a ``tool`` target on the program's own tool function
  (taking the SDK's ``ToolContext`` for the call id), handed to ``function_tool(...)``.

The truth is the framework's own result object (``to_input_list()``, ``new_items``,
``final_output``) and the agent's tools, which each program prints. Both programs run at
the same time, once per module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import compatibility
import pytest
from conftest import clean_environ, exported
from test_openai_genai import ChatServer, serve_chat

from agenttrace.sinks import load_trajectories

VERSION = version("openai-agents")
API_KEY = "sk-openai-agents-test-51f0"
PROGRAM = '''
"""An OpenAI Agents SDK agent with one function tool, on the Responses API."""
import json
import sys

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK's own trace export (to OpenAI) stays off
client = AsyncOpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
{tool}

agent = Agent(
    name="weather",
    instructions="Answer about weather.",
    model=OpenAIResponsesModel(model="gpt-test", openai_client=client),
    tools=[weather_tool],
)
result = Runner.run_sync(agent, "Weather in Paris?")


def dumped(item):
    return item if isinstance(item, dict) else item.model_dump(exclude_none=True)


print(json.dumps({{
    "instructions": agent.instructions,
    "input_list": result.to_input_list(),
    "new_items": [
        {{"type": item.type, "raw": dumped(item.raw_item), "output": getattr(item, "output", None)}}
        for item in result.new_items
    ],
    "tools": [
        {{"name": t.name, "description": t.description, "parameters": t.params_json_schema}}
        for t in agent.tools
    ],
    "final_output": result.final_output,
}}))
'''
DECORATED_TOOL = '''

@function_tool
def get_weather(city: str) -> str:
    """Weather in a city."""
    return f"sunny, 21 C in {city}"


weather_tool = get_weather
'''
PUBLIC_TOOL = '''

def get_weather(ctx: ToolContext, city: str) -> str:
    """Weather in a city."""
    return f"sunny, 21 C in {city}"


weather_tool = function_tool(get_weather)
'''
RUN_TARGETS = [
    "agents.run:AgentRunner.run=episode",
    "openai.resources.responses:AsyncResponses.create=llm",
]
ROUTES = {
    "decorated": (
        DECORATED_TOOL,
        "agents.tool:_FailureHandlingFunctionToolInvoker.__call__="
        "tool[name=ctx.tool_name,arguments=input,call_id=ctx.tool_call_id]",
    ),
    "public": (PUBLIC_TOOL, "weather_agent:get_weather=tool[call_id=ctx.tool_call_id]"),
}
SHARED_ROUTE = (
    "`agents.run:AgentRunner.run=episode` (covers `Runner.run` and `run_sync`), "
    "`openai.resources.responses:AsyncResponses.create=llm`, "
)
COMPATIBILITY = [
    compatibility.equal_on(
        "Agent frameworks",
        f"OpenAI Agents SDK {VERSION} (Responses API)",
        SHARED_ROUTE + "`agents.tool:_FailureHandlingFunctionToolInvoker.__call__="
        "tool[name=ctx.tool_name,arguments=input,call_id=ctx.tool_call_id]` "
        "(private: the SDK has no public method around one tool call)",
    ),
    compatibility.equal_on(
        "Agent frameworks",
        f"OpenAI Agents SDK {VERSION} (Responses API, public route)",
        SHARED_ROUTE + "a `tool[call_id=ctx.tool_call_id]` target on your own tool function, "
        "taking the `ToolContext` and given to `function_tool(...)`",
    ),
]
ENTRIES = dict(zip(ROUTES, COMPATIBILITY, strict=True))


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    yield from serve_chat()


def start(folder: Path, route: str, base_url: str) -> subprocess.Popen:
    """The route's agent program under opentelemetry-instrument (as conftest.run_instrumented,
    but started without waiting, so both routes run at once)."""
    tool, tool_target = ROUTES[route]
    (folder / "weather_agent.py").write_text(PROGRAM.format(tool=tool))
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    environ = clean_environ(
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        AGENTTRACE_TARGETS=";".join([*RUN_TARGETS, tool_target]),
        AGENTTRACE_OUT=str(folder / "runs"),
    )
    return subprocess.Popen(
        [instrument, sys.executable, "weather_agent.py", base_url, API_KEY],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def runs(server: ChatServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Per route: (the program's printed truth, the live trajectory, the run folder)."""
    folders = {route: tmp_path_factory.mktemp(route) for route in ROUTES}
    started = {route: start(folders[route], route, server.base_url) for route in ROUTES}
    found = {}
    for route, process in started.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        assert "never" not in err and "not instrumented" not in err, err
        runs = folders[route] / "runs"
        (trajectory,) = load_trajectories(sorted(runs.glob("*/trajectories.jsonl")))
        found[route] = (json.loads(out), trajectory, runs)
    return found


def chat_messages(items: list[dict]) -> list[dict]:
    """The SDK's input list as OpenAI chat messages: message items as role and text,
    consecutive function calls as one assistant message's tool calls, their outputs as tool
    messages (the Responses API's meaning of each item)."""
    out: list[dict] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            content = item["content"]
            if isinstance(content, list):
                content = "".join(part["text"] for part in content)
            out.append({"role": item["role"], "content": content})
        elif kind == "function_call":
            call = {"id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            raise AssertionError(f"an item this agent does not make: {item}")
    return out


def truth_of(printed: dict) -> compatibility.FrameworkTruth:
    """The framework's own record, normalised: the conversation the last model call saw
    (the agent's instructions, then the run's input list) with its answer, the agent's
    tools, each tool call with its output, the final output."""
    outputs = {
        item["raw"]["call_id"]: item["output"]
        for item in printed["new_items"]
        if item["type"] == "tool_call_output_item"
    }
    calls = [
        {
            "id": item["raw"]["call_id"],
            "name": item["raw"]["name"],
            "arguments": item["raw"]["arguments"],
            "result": outputs[item["raw"]["call_id"]],
        }
        for item in printed["new_items"]
        if item["type"] == "tool_call_item"
    ]
    system = {"role": "system", "content": printed["instructions"]}
    return compatibility.FrameworkTruth(
        messages=[system, *chat_messages(printed["input_list"])],
        tools=printed["tools"],
        tool_calls=calls,
        final_answer=printed["final_output"],
        status="completed",  # Runner.run_sync returned its result
    )


@pytest.fixture(scope="module")
def rebuilt(runs: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per route, the trajectory rebuilt offline from the run's span file."""
    found = {}
    for route, (_, _, folder) in runs.items():
        out = tmp_path_factory.mktemp(f"{route}-export") / "out.jsonl"
        (found[route],) = exported(str(folder / "*" / "spans*.jsonl"), out)
    return found


CASES = [
    pytest.param(route, name, id=f"{route}-{name.replace(' ', '-')}")
    for route, entry in ENTRIES.items()
    for name in entry.equal_fields()
]


@pytest.mark.parametrize(("route", "name"), CASES)
def test_each_equal_field_equals_the_frameworks_own_result(runs, rebuilt, route, name) -> None:
    printed, live, _ = runs[route]
    truth = truth_of(printed)
    for trajectory in (live, rebuilt[route]):
        ours, theirs = compatibility.framework_fields(trajectory, truth)[name]
        assert ours == theirs


def test_the_truth_has_what_is_compared(runs) -> None:
    """The run did what the comparison needs: a tool call with its output, then an answer."""
    for printed, _, _ in runs.values():
        truth = truth_of(printed)
        assert len(truth.tool_calls) == 1 and truth.tool_calls[0]["result"]
        assert truth.final_answer and truth.messages[-1]["content"] == truth.final_answer


def test_rebuilt_from_the_span_file_each_run_is_the_same(runs, rebuilt) -> None:
    for route, (_, live, _) in runs.items():
        assert rebuilt[route] == live


def test_the_api_key_is_never_recorded(runs) -> None:
    for _, _, folder in runs.values():
        files = [path for path in folder.rglob("*") if path.is_file()]
        assert files and not any(API_KEY in p.read_text(errors="replace") for p in files)
