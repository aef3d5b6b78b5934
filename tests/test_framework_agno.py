"""Agno, traced zero-code: an agent whose tool results come wrapped by the framework.

The agent program never imports agenttrace. It runs under ``opentelemetry-instrument`` with
three targets on public methods: ``Agent.run`` (episode), the OpenAI client's ``create``
(llm) and Agno's ``FunctionCall.execute`` (tool), against an OpenAI-compatible server on
127.0.0.1 that asks for ``get_weather`` once per city and then answers in text.
``FunctionCall.execute`` takes no arguments and returns Agno's ``FunctionExecutionResult``:
the tool target reads name, arguments and call id from the call object (``self.…``) and the
result from the return value (``result=return.result``). The truth is Agno's own run output
(its messages, tool executions and content), which the program prints. Telemetry is off
(``AGNO_TELEMETRY=false``): the run talks to loopback only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import compatibility
import pytest
from conftest import assert_never_recorded, exported, run_agent_program
from test_openai_genai import ChatServer, asking_for, chat_completion, serving

from agenttrace import semconv as sc

API_KEY = "sk-agno-test-93f0"
WEATHER = {"Paris": "sunny, 21 C", "Lima": "fog, 16 C"}
VERSION = __import__("importlib.metadata").metadata.version("agno")

AGENT = '''
"""An Agno agent with one tool."""
import json
import sys

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.tools.function import Function

WEATHER = json.loads(sys.argv[3])


def get_weather(city: str) -> str:
    """Weather in a city.

    Args:
        city: the city's name
    """
    return WEATHER[city]


model = OpenAIChat(id="gpt-test", base_url=sys.argv[1], api_key=sys.argv[2])
agent = Agent(model=model, tools=[get_weather], instructions="Answer about weather.",
              telemetry=False)
run = agent.run("Weather in Paris and Lima?")
roles = model.role_map or model.default_role_map  # the roles Agno sends each message as
print(json.dumps({
    "content": run.content,
    "status": str(run.status.value if hasattr(run.status, "value") else run.status),
    "messages": [
        {"role": roles[m.role], "content": m.content, "tool_calls": m.tool_calls,
         "tool_call_id": m.tool_call_id}
        for m in run.messages
    ],
    "tools": [Function.from_callable(get_weather, strict=False).to_dict()],
    "calls": [
        {"id": t.tool_call_id, "name": t.tool_name, "arguments": t.tool_args, "result": t.result}
        for t in run.tools
    ],
}))
'''
TARGETS = ";".join(
    [
        "agno.agent.agent:Agent.run=episode",
        "openai.resources.chat.completions:Completions.create=llm",
        "agno.tools.function:FunctionCall.execute=tool[name=self.function.name,"
        "arguments=self.arguments,call_id=self.call_id,result=return.result]",
    ]
)

COMPATIBILITY = [
    compatibility.equal_on(
        "Agent frameworks",
        f"Agno {VERSION}",
        "targets: `Agent.run=episode`, the OpenAI client's `create=llm`, "
        "`FunctionCall.execute=tool[…,result=return.result]`",
    )
]


class WeatherServer(ChatServer):
    """One get_weather call per city, then a text answer made of the tool results it was
    sent."""

    def answer(self, request: dict) -> dict:
        messages = request["messages"]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        n = len(self.exchanges)
        cities = list(WEATHER)
        if len(results) < len(cities):
            ask = asking_for(n, "get_weather", {"city": cities[len(results)]})
            return chat_completion(request, n, ask, "tool_calls")
        answer = {"role": "assistant", "content": " / ".join(results)}
        return chat_completion(request, n, answer, "stop")


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    yield from serving(WeatherServer)


@pytest.fixture(scope="module")
def agent_run(server: ChatServer, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return run_agent_program(
        tmp_path_factory.mktemp("agno"),
        AGENT,
        server.base_url,
        API_KEY,
        json.dumps(WEATHER),
        name="agno_agent.py",
        targets=TARGETS,
        AGNO_TELEMETRY="false",
    )


def truth_of(printed: dict) -> compatibility.FrameworkTruth:
    return compatibility.FrameworkTruth(
        messages=printed["messages"],
        tools=printed["tools"],
        tool_calls=printed["calls"],
        final_answer=printed["content"],
        status=sc.STATUS_COMPLETED if printed["status"].lower() == "completed" else "?",
    )


@pytest.mark.parametrize(
    ("entry", "field"), [(e, f) for e in COMPATIBILITY for f in e.equal_fields()]
)
def test_each_field_equals_agnos_own_record(agent_run, entry, field) -> None:
    printed, trajectory, _ = agent_run
    ours, theirs = compatibility.framework_fields(trajectory, truth_of(printed))[field]
    assert ours == theirs


def test_the_tool_results_are_read_out_of_agnos_wrapper(agent_run) -> None:
    _, trajectory, _ = agent_run
    calls = [call for step in trajectory.steps for call in step.tool_calls]
    # the tool's own return values (the independent truth), not FunctionExecutionResult
    assert [call.result for call in calls] == list(WEATHER.values())
    assert [call.arguments for call in calls] == [{"city": city} for city in WEATHER]


def test_rebuilt_from_the_span_file_the_run_is_the_same(agent_run, tmp_path) -> None:
    _, trajectory, runs = agent_run
    (rebuilt,) = exported(str(runs / "*" / "spans*.jsonl"), tmp_path / "out.jsonl")
    assert rebuilt == trajectory


def test_the_api_key_is_never_recorded(agent_run) -> None:
    assert_never_recorded(agent_run[2], API_KEY)
