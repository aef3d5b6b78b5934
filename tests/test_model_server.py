"""Checks the scripted model server (tests/model_server.py) with the real clients.

The gateway's tests (issue 33) trust this server to answer like OpenAI, Anthropic and vLLM.
The check here is the one that matters for that: the official ``openai`` and ``anthropic``
SDKs, sync and async, streamed and not, parse every reply without error, and the parsed
values equal the script; token ids equal an independent computation (one id per UTF-8 byte,
written out again below, not imported); errors reach the client as the SDKs' own exception
types; and what the server recorded is what the client sent and got.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from model_server import (
    DONE,
    ModelServer,
    ModelServerProcess,
    Script,
    call,
    call_tools,
    fail,
    load_script,
    logprob_at,
    say,
    token_ids,
)

FIXTURE = Path(__file__).parent / "fixtures" / "vllm" / "chat_completion_token_ids.json"
KEY = "sk-test-key"
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]


def byte_ids(text: str) -> list[int]:
    """The independent computation of the server's token ids: 1000 + each UTF-8 byte."""
    return [1000 + byte for byte in text.encode("utf-8")]


@pytest.fixture
def serve():
    """Starts servers on demand; stops them and checks they had no failure of their own."""
    servers: list[ModelServer] = []

    def start(script: Any = None, **options: Any) -> ModelServer:
        server = ModelServer(script, **options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
        assert server.errors == []


def openai_client(server: ModelServer, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0, **options)


def anthropic_client(server: ModelServer, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, **options)


def test_token_ids_are_bytes_and_concatenate() -> None:
    assert token_ids("Hi é") == byte_ids("Hi é") == [1072, 1105, 1032, 1195, 1169]
    assert token_ids("ab") + token_ids("cd") == token_ids("abcd")


def test_models_are_listed_for_both_clients(serve) -> None:
    server = serve({"agent-a": [], "agent-b": []}, models=["extra"])
    assert [m.id for m in openai_client(server).models.list()] == ["agent-a", "agent-b", "extra"]
    listed = anthropic_client(server).models.list()
    assert [m.id for m in listed.data] == ["agent-a", "agent-b", "extra"]
    assert openai_client(server).models.retrieve("agent-b").id == "agent-b"
    assert anthropic_client(server).models.retrieve("extra").id == "extra"
    counted = anthropic_client(server).messages.count_tokens(
        model="agent-a", messages=[{"role": "user", "content": "hi"}]
    )
    assert counted.input_tokens == len(byte_ids("hi"))
    assert server.remaining("agent-a") == 0 and all(e.turn is None for e in server.exchanges)


def test_chat_tool_call_then_answer_then_done(serve) -> None:
    weather = call("get_weather", {"city": "Paris"})
    clock = call("get_time", {"tz": "CET"}, id="call_custom")
    server = serve(
        {"agent": [call_tools(weather, clock, text="Checking."), say("Sunny at 14:00.")]}
    )
    client = openai_client(server)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]

    first = client.chat.completions.create(model="agent", messages=messages, tools=CHAT_TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    calls = choice.message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "CET"}),
    ]
    assert calls[0].id.startswith("call_") and calls[1].id == "call_custom"
    assert first.model == "agent" and first.usage.total_tokens > 0

    messages.append(choice.message.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": c.id, "content": "sunny" if i == 0 else "14:00"}
        for i, c in enumerate(calls)
    ]
    second = client.chat.completions.create(model="agent", messages=messages, tools=CHAT_TOOLS)
    assert second.choices[0].message.content == "Sunny at 14:00."
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls is None
    # The script is spent: the generic rule answers "done", so an agent loop ends.
    third = client.chat.completions.create(model="agent", messages=messages)
    assert (third.choices[0].message.content, third.choices[0].finish_reason) == ("done", "stop")

    requests = server.requests
    assert [r["path"] for r in requests] == ["/v1/chat/completions"] * 3
    assert requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert requests[1]["body"]["messages"] == messages
    assert server.responses[0] == json.loads(first.model_dump_json(exclude_unset=True))
    assert [e.turn_index for e in server.exchanges] == [0, 1, None]
    assert server.remaining("agent") == 0


def test_chat_streamed_tool_calls_with_usage(serve) -> None:
    turn = call_tools(call("get_weather", {"city": "New York"}), text="Let me look that up.")
    server = serve([turn, turn])
    client = openai_client(server)
    messages = [{"role": "user", "content": "Weather?"}]
    stream = client.chat.completions.create(
        model="m",
        messages=messages,
        tools=CHAT_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, calls, finish, usage, chunks = "", {}, None, None, 0
    for chunk in stream:
        chunks += 1
        if not chunk.choices:
            usage = chunk.usage
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for part in delta.tool_calls or ():
            entry = calls.setdefault(part.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = part.id or entry["id"]
            entry["name"] += part.function.name or ""
            entry["arguments"] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert text == "Let me look that up."
    assert len(calls) == 1 and calls[0]["id"] == "call_0_0" and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "New York"}
    assert finish == "tool_calls"
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    events = server.responses[0]
    assert events[-1].data == "[DONE]" and len(events) == chunks + 1
    assert events[-2].data["choices"] == [] and events[-2].data["usage"]["total_tokens"] > 0

    # The SDK's own accumulator agrees.
    with client.chat.completions.stream(model="m", messages=messages, tools=CHAT_TOOLS) as live:
        final = live.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Let me look that up."
    assert message.tool_calls[0].function.arguments == '{"city": "New York"}'
    assert final.choices[0].finish_reason == "tool_calls"


async def test_async_openai_serves_several_scripted_agents_at_once(serve) -> None:
    server = serve(
        {
            "alice": [say("A1"), say("A2")],
            "bob": [call_tools(call("look", {"q": "b"})), say("B2")],
        }
    )
    client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0)

    async def ask(model: str, stream: bool) -> str:
        messages = [{"role": "user", "content": f"hi from {model}"}]
        if not stream:
            answer = await client.chat.completions.create(model=model, messages=messages)
            message = answer.choices[0].message
            return message.content or message.tool_calls[0].function.name
        parts = []
        async for chunk in await client.chat.completions.create(
            model=model, messages=messages, stream=True
        ):
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta and delta.content:
                parts.append(delta.content)
            if delta and delta.tool_calls and delta.tool_calls[0].function.name:
                parts.append(delta.tool_calls[0].function.name)
        return "".join(parts)

    first = await asyncio.gather(ask("alice", False), ask("bob", True))
    second = await asyncio.gather(ask("alice", True), ask("bob", False))
    assert first == ["A1", "look"] and second == ["A2", "B2"]
    assert sorted(e.key for e in server.exchanges) == ["alice", "alice", "bob", "bob"]
    await client.close()


def test_responses_api_non_streamed_and_streamed(serve) -> None:
    script = [call_tools(call("get_weather", {"city": "Oslo"})), say("Cold in Oslo.")]
    server = serve(script + script)
    client = openai_client(server)

    first = client.responses.create(
        model="gpt-test", input="Weather in Oslo?", tools=RESPONSES_TOOLS, instructions="Brief."
    )
    (item,) = first.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == {"city": "Oslo"} and item.call_id.startswith("call_")
    assert first.status == "completed" and first.instructions == "Brief."
    follow_up = [
        {"role": "user", "content": "Weather in Oslo?"},
        item.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": item.call_id, "output": "-3 C"},
    ]
    second = client.responses.create(model="gpt-test", input=follow_up, tools=RESPONSES_TOOLS)
    assert second.output_text == "Cold in Oslo." and second.usage.input_tokens > 0

    with client.responses.stream(
        model="gpt-test", input="Weather in Oslo?", tools=RESPONSES_TOOLS
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output[0].type == "function_call"
    assert json.loads(final.output[0].arguments) == {"city": "Oslo"}
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-1] == "response.completed"

    deltas = []
    for event in client.responses.create(model="gpt-test", input=follow_up, stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        last = event
    assert "".join(deltas) == "Cold in Oslo." and last.response.output_text == "Cold in Oslo."
    recorded = server.responses[3]
    assert [e.event for e in recorded] == [e.data["type"] for e in recorded]
    assert [e.data["sequence_number"] for e in recorded] == list(range(len(recorded)))


def test_responses_length_finish_is_incomplete(serve) -> None:
    server = serve([say("cut sho", finish_reason="length")])
    answer = openai_client(server).responses.create(model="m", input="long story")
    assert answer.status == "incomplete" and answer.incomplete_details.reason == "max_output_tokens"


def test_legacy_completions_with_token_ids_and_logprobs(serve) -> None:
    server = serve([say(" world peace"), say(" world peace")])
    client = openai_client(server)
    extra = {"return_token_ids": True}
    answer = client.completions.create(model="m", prompt="Hello", logprobs=2, extra_body=extra)
    choice = answer.choices[0]
    assert choice.text == " world peace" and choice.finish_reason == "stop"
    assert choice.prompt_token_ids == byte_ids("Hello")
    assert choice.token_ids == byte_ids(" world peace")
    assert "".join(choice.logprobs.tokens) == " world peace"
    assert choice.logprobs.token_logprobs == [logprob_at(i) for i in range(12)]
    assert choice.logprobs.text_offset == list(range(12))
    assert answer.usage.prompt_tokens == 5 and answer.usage.completion_tokens == 12

    chunks = list(
        client.completions.create(model="m", prompt="Hello", stream=True, extra_body=extra)
    )
    assert "".join(c.choices[0].text for c in chunks) == " world peace"
    assert [i for c in chunks for i in c.choices[0].token_ids] == byte_ids(" world peace")
    assert chunks[0].choices[0].prompt_token_ids == byte_ids("Hello")
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_anthropic_messages_tool_use_non_streamed_and_streamed(serve) -> None:
    turns = [
        call_tools(call("get_weather", {"city": "Rome"}), text="One moment."),
        say("Warm in Rome."),
    ]
    server = serve({"claude-test": turns + turns})
    client = anthropic_client(server)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Rome?"}]

    first = client.messages.create(
        model="claude-test", max_tokens=100, messages=messages, tools=ANTHROPIC_TOOLS
    )
    assert first.stop_reason == "tool_use"
    text, tool = first.content
    assert text.type == "text" and text.text == "One moment."
    assert tool.type == "tool_use" and tool.name == "get_weather"
    assert tool.input == {"city": "Rome"} and tool.id.startswith("toolu_")
    messages += [
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "30 C"}],
        },
    ]
    second = client.messages.create(model="claude-test", max_tokens=100, messages=messages)
    assert second.content[0].text == "Warm in Rome." and second.stop_reason == "end_turn"
    assert server.requests[0]["headers"]["x-api-key"] == KEY
    assert server.requests[1]["body"]["messages"] == messages

    with client.messages.stream(
        model="claude-test", max_tokens=100, messages=messages[:1], tools=ANTHROPIC_TOOLS
    ) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[0].text == "One moment." and final.content[1].input == {"city": "Rome"}
    assert final.stop_reason == "tool_use" and final.usage.output_tokens > 1

    kinds = [
        e.type
        for e in client.messages.create(
            model="claude-test", max_tokens=100, messages=messages, stream=True
        )
    ]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:4] == ["content_block_start", "content_block_delta", "content_block_delta"]
    sent = [e.event for e in server.responses[2]]
    assert sent[:2] == ["message_start", "ping"]
    partial = [
        e.data["delta"]["partial_json"]
        for e in server.responses[2]
        if e.event == "content_block_delta" and e.data["delta"]["type"] == "input_json_delta"
    ]
    assert json.loads("".join(partial)) == {"city": "Rome"}


async def test_async_anthropic_stream(serve) -> None:
    server = serve([say("Hello there, friend.")])
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key=KEY, max_retries=0)
    async with client.messages.stream(
        model="c", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        texts = [text async for text in stream.text_stream]
    assert "".join(texts) == "Hello there, friend." and len(texts) == 3
    await client.close()


def test_chat_token_ids_logprobs_and_prefix_continuity(serve) -> None:
    weather = call("get_weather", {"city": "Paris"})
    answer = "Grüße: 21 °C."
    server = serve({"a": [call_tools(weather), say(answer)], "b": [call_tools(weather)]})
    client = openai_client(server)
    extra = {"return_token_ids": True}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    options = {"tools": CHAT_TOOLS, "logprobs": True, "top_logprobs": 3, "extra_body": extra}
    first = client.chat.completions.create(model="a", messages=messages, **options)

    # The template, written out again: tools, then <|role|>body<|end|>, then <|assistant|>.
    tools = json.dumps(CHAT_TOOLS, sort_keys=True, separators=(",", ":"))
    prompt = (
        f"<|tools|>{tools}<|end|><|system|>Be brief.<|end|>"
        "<|user|>Weather in Paris?<|end|><|assistant|>"
    )
    completion = '<tool_call>get_weather {"city": "Paris"}</tool_call><|end|>'
    choice = first.choices[0]
    assert first.prompt_token_ids == byte_ids(prompt)
    assert choice.token_ids == byte_ids(completion)
    assert first.usage.prompt_tokens == len(byte_ids(prompt))
    assert first.usage.completion_tokens == len(byte_ids(completion))
    content = choice.logprobs.content
    assert "".join(item.token for item in content) == completion
    assert [item.logprob for item in content] == [logprob_at(i) for i in range(len(completion))]
    assert [len(item.top_logprobs) for item in content] == [3] * len(completion)
    assert content[0].top_logprobs[0].token == content[0].token
    assert [item.bytes for item in content] == [[byte] for byte in completion.encode()]

    messages.append(choice.message.model_dump(exclude_none=True))
    tool_id = choice.message.tool_calls[0].id
    messages.append({"role": "tool", "tool_call_id": tool_id, "content": "21 C"})
    second = client.chat.completions.create(model="a", messages=messages, **options)
    # Prefix continuity: the next prompt extends the previous prompt and completion.
    continued = first.prompt_token_ids + choice.token_ids
    assert second.prompt_token_ids[: len(continued)] == continued
    assert second.prompt_token_ids[len(continued) :] == byte_ids("<|tool|>21 C<|end|><|assistant|>")
    assert second.choices[0].message.content == answer
    assert second.choices[0].token_ids == byte_ids(answer + "<|end|>")
    assert len(second.choices[0].token_ids) == len(answer) + 3 + 7  # ü, ß and ° take 2 bytes

    # Streamed (model "b": the same turn): the chunks' ids and logprobs add up to the same.
    stream = client.chat.completions.create(
        model="b", messages=messages[:2], stream=True, **options
    )
    chunks = list(stream)
    assert chunks[0].prompt_token_ids == first.prompt_token_ids
    assert [i for c in chunks[1:] for i in c.choices[0].token_ids] == choice.token_ids
    streamed = [item for c in chunks[1:] for item in c.choices[0].logprobs.content]
    assert [item.model_dump() for item in streamed] == [item.model_dump() for item in content]

    # Not asked for: no vLLM fields at all; tokens spelled as ids on request.
    plain = client.chat.completions.create(model="c", messages=messages[:2])
    assert "prompt_token_ids" not in server.responses[-1]
    assert plain.choices[0].logprobs is None
    as_ids = client.chat.completions.create(
        model="c",
        messages=messages[:2],
        logprobs=True,
        extra_body={"return_tokens_as_token_ids": True},
    )
    assert as_ids.choices[0].logprobs.content[0].token == f"token_id:{byte_ids('d')[0]}"


def test_vllm_flavor_has_the_fixture_shape(serve) -> None:
    server = serve([say("Hi")], flavor="vllm")
    extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
    openai_client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, extra_body=extra
    )
    fixture = json.loads(FIXTURE.read_text())
    served = server.responses[0]
    assert served.keys() == fixture.keys()
    assert served["choices"][0].keys() == fixture["choices"][0].keys()
    assert served["choices"][0]["message"].keys() == fixture["choices"][0]["message"].keys()
    item = served["choices"][0]["logprobs"]["content"][0]
    assert item.keys() == fixture["choices"][0]["logprobs"]["content"][0].keys()
    assert item["token"] == "token_id:1072"
    assert served["usage"].keys() == fixture["usage"].keys()


def test_error_turns_pass_through_as_the_sdks_errors(serve) -> None:
    server = serve(
        [
            fail(429, "Rate limit reached", headers={"retry-after": "7"}),
            fail(500, "The server had an error"),
            fail(503, body={"detail": "custom body"}),
            say("recovered"),
            fail(429, "Anthropic is busy"),
        ]
    )
    client = openai_client(server)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=messages)
    assert limited.value.status_code == 429 and "Rate limit reached" in limited.value.message
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.body == server.responses[0]["error"]
    assert server.responses[0]["error"]["type"] == "rate_limit_error"
    with pytest.raises(openai.InternalServerError) as broken:
        client.chat.completions.create(model="m", messages=messages, stream=True)
    assert broken.value.status_code == 500
    with pytest.raises(openai.APIStatusError) as custom:
        client.responses.create(model="m", input="hi")
    assert custom.value.status_code == 503 and custom.value.response.json() == {
        "detail": "custom body"
    }
    assert client.chat.completions.create(model="m", messages=messages).choices[0].message.content
    with pytest.raises(anthropic.RateLimitError) as busy:
        anthropic_client(server).messages.create(model="m", max_tokens=5, messages=messages)
    assert busy.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Anthropic is busy"},
    }
    assert [e.status for e in server.exchanges] == [429, 500, 503, 200, 429]


def test_delays_make_timeouts_and_slow_streams(serve) -> None:
    server = serve([say("too late", delay=1.0), say("a b c d e", chunk_delay=0.05)])
    with pytest.raises(openai.APITimeoutError):
        openai_client(server, timeout=0.2).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    start = time.monotonic()
    arrivals = []
    for chunk in openai_client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        arrivals.append(time.monotonic() - start)
        del chunk
    assert len(arrivals) == 7  # role, five words, finish
    assert arrivals[-1] - arrivals[0] >= 0.05 * 5

    # A client that drops a stream: the record shows what was sent before it went.
    server.add_turns("*", [say("one two three four five six", chunk_delay=0.1)])
    stream = openai_client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    next(iter(stream))
    stream.close()
    deadline = time.monotonic() + 5
    while server.exchanges[-1].finished_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
    dropped = server.exchanges[-1]
    assert dropped.disconnected and 1 <= len(dropped.events) < 9


async def test_per_conversation_scripts_and_concurrent_streams(serve) -> None:
    script = [call_tools(call("search", {"q": "x"})), say("found it")]
    server = serve(script, per_conversation=True)
    client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0)

    async def agent(task: int) -> list[str]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {task}"}]
        seen = []
        for _ in range(3):
            answer = await client.chat.completions.create(model="m", messages=messages)
            message = answer.choices[0].message
            seen.append(message.content or message.tool_calls[0].function.name)
            messages.append(message.model_dump(exclude_none=True))
            if message.tool_calls:
                tool_id = message.tool_calls[0].id
                messages.append({"role": "tool", "tool_call_id": tool_id, "content": "r"})
        return seen

    results = await asyncio.gather(*(agent(task) for task in range(20)))
    assert results == [["search", "found it", "done"]] * 20
    exchanges = server.exchanges
    assert [e.index for e in exchanges] == list(range(60))
    assert {e.conversation for e in exchanges} == {f"task {task}" for task in range(20)}

    # The Responses API chains a conversation through previous_response_id.
    first = await client.responses.create(model="m", input="chained")
    second = await client.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": first.output[0].call_id, "output": "r"}],
    )
    assert first.output[0].type == "function_call" and second.output_text == "found it"
    await client.close()


def test_header_picks_the_script(serve) -> None:
    server = serve({"scripted": [say("from the header")], "*": [say("by default")]})
    client = openai_client(server, default_headers={"X-Script-Key": "scripted"})
    answer = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "?"}]
    )
    assert answer.choices[0].message.content == "from the header"
    plain = openai_client(server).chat.completions.create(
        model="any", messages=[{"role": "user", "content": "?"}]
    )
    assert plain.choices[0].message.content == "by default"


def test_script_files_and_a_server_in_another_process(tmp_path) -> None:
    path = tmp_path / "script.json"
    turns = [
        {"tool_calls": [{"name": "ls", "arguments": {"path": "."}}]},
        "all listed",
        {"error": {"status": 429, "message": "slow"}},
    ]
    path.write_text(json.dumps({"agent": turns}))
    script = load_script(path)
    assert Script(script.to_json()).to_json() == script.to_json()
    with ModelServerProcess(script) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0)
        messages = [{"role": "user", "content": "list"}]
        first = client.chat.completions.create(model="agent", messages=messages)
        assert first.choices[0].message.tool_calls[0].function.arguments == '{"path": "."}'
        second = client.chat.completions.create(model="agent", messages=messages, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in second) == "all listed"
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="agent", messages=messages)
        assert (
            client.chat.completions.create(model="agent", messages=messages)
            .choices[0]
            .message.content
            == DONE.text
        )
        exchanges = server.exchanges
    assert [e.status for e in exchanges] == [200, 200, 429, 200]
    assert exchanges[0].headers["authorization"] == f"Bearer {KEY}"
    assert exchanges[1].events[-1].data == "[DONE]"
    assert exchanges[0].response["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "ls",
        "arguments": '{"path": "."}',
    }
