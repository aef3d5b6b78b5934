"""The OpenAI Responses API through an ``llm`` target on the client's ``create``.

The real ``openai`` client (sync and async) talks to the loopback ChatServer's /v1/responses,
which answers with the Responses API's own JSON (tests/responses_api.py). The request's
``instructions`` and ``input`` items become OpenAI-style chat messages (docs/llm-calls.md); the
expected messages are built here from what the test sent and what the server answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from test_openai_genai import (
    API_KEY,
    ChatServer,
    async_client_for,
    client_for,
    serve_chat,
    serving,
)

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument.auto import AgentTraceInstrumentor
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.chat import chat_rows

TARGETS = [
    "openai.resources.responses:Responses.create=llm",
    "openai.resources.responses:AsyncResponses.create=llm",
]
INSTRUCTIONS = "Answer about weather."
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
#: TOOL as Chat Completions offers it: the shape gen_ai.tool.definitions holds.
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}

server = pytest.fixture(serve_chat, name="server")


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[at.AgentTrace]:
    """A pipeline with llm targets on the sync and async ``Responses.create``."""
    runtime = at.configure(out=str(tmp_path), run_name="responses", exit_report=False)
    instrumentor = AgentTraceInstrumentor()
    instrumentor.instrument(targets=TARGETS)
    try:
        yield runtime
    finally:
        instrumentor.uninstrument()
        at.shutdown()


def calls_of(runtime: at.AgentTrace) -> list[Any]:
    """The run's one episode's LLM calls (live), after checking the span file rebuilds it."""
    runtime.shutdown()
    (trajectory,) = load_trajectories(runtime.trajectory_paths)
    assert at.assemble(read_otlp_json(runtime.span_paths)) == [trajectory]
    return [call for step in trajectory.steps for call in step.llm_calls]


def reply(response: dict) -> dict:
    """The server's answer as a chat message: its text, or its function calls."""
    calls = [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        for item in response["output"]
        if item["type"] == "function_call"
    ]
    texts = [
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def tool_loop(client: openai.OpenAI) -> tuple[list, str]:
    """The documented function-calling loop: ask, run the tool the model called, send back
    its output with the model's own output items; the items sent and the final text."""
    first = client.responses.create(
        model="gpt-test", instructions=INSTRUCTIONS, input="Weather in Paris?", tools=[TOOL]
    )
    items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}, *first.output]
    for call in first.output:
        city = json.loads(call.arguments)["city"]
        items.append(
            {"type": "function_call_output", "call_id": call.call_id, "output": f"sunny in {city}"}
        )
    second = client.responses.create(
        model="gpt-test", instructions=INSTRUCTIONS, input=items, tools=[TOOL]
    )
    return items, second.output_text


def expected_loop(server: ChatServer, items: list) -> list[list[dict]]:
    """Per call, the chat messages the model saw: instructions, the question, then (second
    call) the model's tool call as the server sent it and the tool's output."""
    first, _ = (exchange["response"] for exchange in server.exchanges)
    system = {"role": "system", "content": INSTRUCTIONS}
    user = {"role": "user", "content": "Weather in Paris?"}
    outputs = [
        {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    return [[system, user], [system, user, reply(first), *outputs]]


def check_loop(server: ChatServer, calls: list, items: list, final_text: str) -> None:
    answered = [exchange["response"] for exchange in server.exchanges]
    assert len(calls) == len(answered) == 2
    assert [call.input_messages for call in calls] == expected_loop(server, items)
    assert [call.output_messages for call in calls] == [[reply(r)] for r in answered]
    assert calls[-1].output_messages[0]["content"] == final_text
    assert [call.finish_reasons for call in calls] == [["tool_calls"], ["stop"]]
    for call, response in zip(calls, answered, strict=True):
        assert call.attributes[sc.GEN_AI_TOOL_DEFINITIONS] == [CHAT_TOOL]
        assert (call.input_tokens, call.output_tokens) == (
            response["usage"]["input_tokens"],
            response["usage"]["output_tokens"],
        )
        assert call.model == response["model"]
        assert call.attributes[sc.GEN_AI_RESPONSE_ID] == response["id"]


def test_a_sync_tool_loop_reads_instructions_input_items_and_tools(traced, server) -> None:
    with at.episode(task_id="weather"), at.timestep():
        items, final_text = tool_loop(client_for(server))
    check_loop(server, calls_of(traced), items, final_text)


def test_an_async_tool_loop_reads_the_same(traced, server) -> None:
    client = async_client_for(server)

    async def play() -> tuple[list, str]:
        first = await client.responses.create(
            model="gpt-test", instructions=INSTRUCTIONS, input="Weather in Paris?", tools=[TOOL]
        )
        (call,) = first.output
        items = [
            {"role": "user", "content": "Weather in Paris?"},
            call.model_dump(),  # (as a dict this time)
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny in Paris"},
        ]
        second = await client.responses.create(
            model="gpt-test", instructions=INSTRUCTIONS, input=items, tools=[TOOL]
        )
        return items, second.output_text

    with at.episode(task_id="weather"), at.timestep():
        items, final_text = asyncio.run(play())
    check_loop(server, calls_of(traced), items, final_text)


def test_the_chat_export_has_the_messages_and_the_tools(traced, server) -> None:
    with at.episode(task_id="weather"), at.timestep():
        items, final_text = tool_loop(client_for(server))
    runtime = traced
    runtime.shutdown()
    (trajectory,) = load_trajectories(runtime.trajectory_paths)
    rows = chat_rows(trajectory)
    last = server.exchanges[-1]["response"]
    assert rows[-1]["messages"] == expected_loop(server, items)[-1] + [reply(last)]
    assert rows[-1]["messages"][-1]["content"] == final_text
    assert all(row["tools"] == [CHAT_TOOL] for row in rows)


def test_every_input_item_kind_becomes_chat_messages(traced, server) -> None:
    """Message items with content parts, developer and system roles, reasoning, the
    assistant's text with its calls (one reply), consecutive calls, outputs as parts."""
    image = "https://example.invalid/cloud.png"
    items = [
        {"type": "message", "role": "developer", "content": "Use metric units."},
        {"role": "system", "content": [{"type": "input_text", "text": "Be brief."}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather here and in Rome?"},
                {"type": "input_image", "image_url": image, "detail": "low"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Two cities: two calls."}],
            "encrypted_content": "opaque",
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "rain"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "sun"}, {"type": "input_text", "text": "!"}],
        },
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "opaque"},
        {"type": "item_reference", "id": "msg_0"},
    ]
    with at.episode(), at.timestep():
        client_for(server).responses.create(model="gpt-test", input=items)
    (call,) = calls_of(traced)

    def call_of(item: dict) -> dict:
        function = {"name": item["name"], "arguments": item["arguments"]}
        return {"id": item["call_id"], "type": "function", "function": function}

    assert call.input_messages == [
        {"role": "developer", "content": "Use metric units."},
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here and in Rome?"},
                {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": items[3]["summary"][0]["text"],
            "tool_calls": [call_of(items[5]), call_of(items[6])],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": [{"type": "text", "text": "sun"}, {"type": "text", "text": "!"}],
        },
        items[-1],  # (encrypted-only reasoning gives nothing; other items stay as given)
    ]


class ReasoningServer(ChatServer):
    """Answers with a reasoning item (its summary) before the message, as reasoning models
    do."""

    def respond(self, request: dict) -> dict:
        response = super().respond(request)
        summary = [{"type": "summary_text", "text": f"thinking about {request['input']}"}]
        reasoning = {"type": "reasoning", "id": "rs_1", "summary": summary}
        response["output"].insert(0, reasoning)
        return response


def test_the_reasoning_of_an_answer_is_its_reasoning_content(traced) -> None:
    for reasoning_server in serving(ReasoningServer):
        with at.episode(), at.timestep():
            client_for(reasoning_server).responses.create(model="gpt-test", input="why?")
        (call,) = calls_of(traced)
        answered = reasoning_server.exchanges[-1]["response"]
        (summary,) = answered["output"][0]["summary"]
        assert call.output_messages == [{**reply(answered), "reasoning_content": summary["text"]}]


def test_sdk_placeholders_for_options_not_given_are_not_recorded(traced, server) -> None:
    """Clients such as the Agents SDK pass ``omit`` for every option they leave out."""
    with at.episode(), at.timestep():
        client_for(server).responses.create(
            model="gpt-test",
            input="hi",
            instructions=openai.omit,
            tools=openai.omit,
            prompt=openai.omit,
        )
    (call,) = calls_of(traced)
    assert call.input_messages == [{"role": "user", "content": "hi"}]
    assert sc.GEN_AI_TOOL_DEFINITIONS not in call.attributes


def test_an_answer_cut_at_max_output_tokens_finishes_length(traced, server) -> None:
    with at.episode(), at.timestep():
        client_for(server).responses.create(model="gpt-test", input="Tell me", max_output_tokens=16)
    (call,) = calls_of(traced)
    assert server.exchanges[-1]["response"]["status"] == "incomplete"
    assert call.finish_reasons == ["length"]
    assert call.attributes[sc.GEN_AI_REQUEST_PARAMETERS["max_tokens"]] == 16


def test_a_streamed_call_records_its_request_and_reaches_the_caller_whole(traced, server) -> None:
    """The answer of ``stream=True`` arrives after ``create`` returns: the target records the
    request only (never the stream object for an answer), and the caller gets every event."""
    with at.episode(), at.timestep():
        stream = client_for(server).responses.create(
            model="gpt-test", instructions=INSTRUCTIONS, input="Weather?", stream=True
        )
        received = [event.to_dict() for event in stream]
    (call,) = calls_of(traced)
    assert received == server.exchanges[-1]["events"]
    assert received[-1]["response"]["output"][0]["content"][0]["text"]
    assert call.input_messages == [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": "Weather?"},
    ]
    assert call.output_messages is None and call.finish_reasons is None


def test_the_api_key_is_never_recorded(traced, server, tmp_path) -> None:
    with at.episode(), at.timestep():
        tool_loop(client_for(server))
    traced.shutdown()
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert files and not any(API_KEY in path.read_text(errors="replace") for path in files)
