"""smolagents, traced zero-code: a run that ends with a ``final_answer`` tool call.

The agent program never imports agenttrace. It runs under ``opentelemetry-instrument`` with
three targets on public methods: the agent's ``run`` (episode), the OpenAI client's
``create`` (llm) and ``ToolCallingAgent.execute_tool_call`` (tool), against an
OpenAI-compatible server on 127.0.0.1 that asks for one ``get_weather`` call per city and
then answers with smolagents' ``final_answer`` tool. ``execute_tool_call`` never receives the
call id: agenttrace recovers it from the model reply that asked for the call. The truth is
smolagents' own record, which the program prints: its memory steps (the messages each model
call was sent, converted by smolagents' own public functions; tool calls with their ids and
observations) and the run's output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import compatibility
import pytest
from conftest import assert_never_recorded, exported, run_agent_program
from test_openai_genai import ChatServer, asking_for, chat_completion, serving

from agenttrace import semconv as sc

API_KEY = "sk-smolagents-test-41aa"
WEATHER = {"Paris": "sunny, 21 C", "Lima": "fog, 16 C"}
QUESTION = "Weather in Paris and Lima?"
VERSION = __import__("importlib.metadata").metadata.version("smolagents")

AGENT = '''
"""A smolagents ToolCallingAgent with one tool."""
import json
import sys

from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.memory import ActionStep
from smolagents.models import get_clean_message_list, get_tool_json_schema, tool_role_conversions

WEATHER = json.loads(sys.argv[3])


@tool
def get_weather(city: str) -> str:
    """Weather in a city.

    Args:
        city: the city's name
    """
    return WEATHER[city]


model = OpenAIServerModel("gpt-test", api_base=sys.argv[1], api_key=sys.argv[2])
agent = ToolCallingAgent(tools=[get_weather], model=model, verbosity_level=0)
output = agent.run(sys.argv[4])
steps = [step for step in agent.memory.steps if isinstance(step, ActionStep)]
last = steps[-1]
sent = get_clean_message_list(
    last.model_input_messages,
    role_conversions=tool_role_conversions,
    flatten_messages_as_text=False,
)
answer = last.model_output_message
print(json.dumps({
    "output": output,
    "sent": sent,
    "answer": {
        "role": "assistant",
        "content": answer.content,
        "tool_calls": [
            {"id": c.id, "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in answer.tool_calls or ()
        ],
    },
    "tools": [get_tool_json_schema(t) for t in agent.tools.values()],
    "calls": [
        {"id": c.id, "name": c.name, "arguments": c.arguments, "observation": step.observations}
        for step in steps for c in step.tool_calls or ()
    ],
}, default=str))
'''
TARGETS = ";".join(
    [
        "smolagents.agents:MultiStepAgent.run=episode",
        "openai.resources.chat.completions:Completions.create=llm",
        "smolagents.agents:ToolCallingAgent.execute_tool_call="
        "tool[name=tool_name,arguments=arguments]",
    ]
)

COMPATIBILITY = [
    compatibility.equal_on(
        "Agent frameworks",
        f"smolagents {VERSION} (ToolCallingAgent, ends with `final_answer`)",
        "targets: `MultiStepAgent.run=episode`, the OpenAI client's `create=llm`, "
        "`ToolCallingAgent.execute_tool_call=tool` (no call id: recovered from the reply)",
    )
]


class FinalAnswerServer(ChatServer):
    """One get_weather call per city of the question, then smolagents' final_answer tool
    with the observations it was sent (smolagents sends them back as user messages)."""

    def answer(self, request: dict) -> dict:
        messages = request["messages"]
        asked = sum(1 for m in messages if m["role"] == "assistant")
        cities = list(WEATHER)
        n = len(self.exchanges)
        if asked < len(cities):
            ask = asking_for(n, "get_weather", {"city": cities[asked]})
        else:
            seen = [w for w in WEATHER.values() if any(w in json.dumps(m) for m in messages)]
            ask = asking_for(n, "final_answer", {"answer": " / ".join(seen)})
        return chat_completion(request, n, ask, "tool_calls")


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    yield from serving(FinalAnswerServer)


@pytest.fixture(scope="module")
def agent_run(server: ChatServer, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return run_agent_program(
        tmp_path_factory.mktemp("smolagents"),
        AGENT,
        server.base_url,
        API_KEY,
        json.dumps(WEATHER),
        QUESTION,
        name="smol_agent.py",
        targets=TARGETS,
    )


def truth_of(printed: dict) -> compatibility.FrameworkTruth:
    """smolagents' own record, normalised (its tool schemas are OpenAI function tools)."""
    return compatibility.FrameworkTruth(
        messages=[*printed["sent"], printed["answer"]],
        tools=printed["tools"],
        tool_calls=[
            {
                "id": c["id"],
                "name": c["name"],
                "arguments": c["arguments"],
                "result": c["observation"],
            }
            for c in printed["calls"]
        ],
        final_answer=printed["output"],
    )


@pytest.mark.parametrize(
    ("entry", "field"), [(e, f) for e in COMPATIBILITY for f in e.equal_fields()]
)
def test_each_field_equals_smolagents_own_record(agent_run, entry, field) -> None:
    printed, trajectory, _ = agent_run
    ours, theirs = compatibility.framework_fields(trajectory, truth_of(printed))[field]
    assert ours == theirs


def test_the_final_answer_tool_ends_the_run_completed_with_the_answer(agent_run) -> None:
    printed, trajectory, _ = agent_run
    *asks, last = trajectory.steps
    assert trajectory.status == sc.STATUS_COMPLETED
    assert last.llm_calls[0].finish_reasons == ["tool_calls"]
    assert (last.action, last.terminated, last.truncated) == (printed["output"], True, False)
    # the answer is what the server built from the tool results it was sent
    assert printed["output"] == " / ".join(WEATHER.values())
    assert not any(step.terminated or step.truncated for step in asks)


def test_recovered_ids_are_the_ones_each_reply_asked_for(agent_run) -> None:
    _, trajectory, _ = agent_run
    for step in trajectory.steps:
        (call,) = step.llm_calls
        asked = [(c["id"], c["function"]["name"]) for c in call.output_messages[0]["tool_calls"]]
        assert [(t.call_id, t.name) for t in step.tool_calls] == asked


def test_rebuilt_from_the_span_file_the_run_is_the_same(agent_run, tmp_path) -> None:
    printed, trajectory, runs = agent_run
    (rebuilt,) = exported(str(runs / "*" / "spans*.jsonl"), tmp_path / "out.jsonl")
    assert rebuilt == trajectory
    fields = compatibility.framework_fields(rebuilt, truth_of(printed))
    assert all(ours == theirs for ours, theirs in fields.values())


def test_the_api_key_is_never_recorded(agent_run) -> None:
    assert_never_recorded(agent_run[2], API_KEY)
