"""LLM calls recorded by opentelemetry-instrumentation-openai-v2 fold into the step's llm_calls.

The real ``openai`` client talks to an OpenAI-compatible server on 127.0.0.1 that this file
starts; the real OpenAIInstrumentor writes the spans into the agenttrace pipeline's provider.
Every expectation is taken from what the client sent and the server answered.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
import responses_api
from conftest import read_run
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.storage import read_otlp_json

API_KEY = "test-key"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SEMCONV_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


# --- an OpenAI-compatible server on loopback --------------------------------------------------


class ChatServer:
    """Answers /v1/chat/completions and /v1/responses; remembers every request and the body
    it answered."""

    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                request = json.loads(self.rfile.read(length))
                headers = {key.lower(): value for key, value in self.headers.items()}
                exchange = {"headers": headers, "request": request}
                with server._lock:
                    server.exchanges.append(exchange)
                if self.path not in ("/v1/chat/completions", "/v1/responses"):
                    self.send_error(404)
                    return
                if request["model"] == "broken-model":
                    self._send_json(500, {"error": {"message": "model is down", "type": "server"}})
                    return
                if self.path == "/v1/responses":  # the Responses API (tests/responses_api.py)
                    self._respond(exchange, request)
                    return
                if request.get("stream"):
                    exchange["chunks"] = server.stream(request)
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for chunk in exchange["chunks"]:
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                exchange["response"] = server.answer(request)
                self._send_json(200, exchange["response"])

            def _respond(self, exchange: dict, request: dict) -> None:
                exchange["response"] = server.respond(request)
                if not request.get("stream"):
                    self._send_json(200, exchange["response"])
                    return
                exchange["events"] = responses_api.events(exchange["response"])
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for event in exchange["events"]:
                    line = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                    self.wfile.write(line.encode())

            def _send_json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def answer(self, request: dict) -> dict:
        messages = request["messages"]
        n = len(self.exchanges)
        if request.get("tools") and messages[-1]["role"] == "user":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": f"answer {n} to {messages[-1]['content']}"}
            finish = "length" if request.get("max_tokens") == 1 else "stop"
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": request["model"] + "-2025-01-01",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": 10 + len(messages),
                "completion_tokens": 3 + n,
                "total_tokens": 13 + len(messages) + n,
            },
            "system_fingerprint": "fp_test",
        }

    def respond(self, request: dict) -> dict:
        """A Responses API answer (/v1/responses), by the rules of :meth:`answer`."""
        return responses_api.answer(request, len(self.exchanges))

    def stream(self, request: dict) -> list[dict]:
        n = len(self.exchanges)
        base = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": request["model"] + "-2025-01-01",
        }
        pieces = ["stre", "amed ", f"answer {n}"]
        chunks = [
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": piece}
                        if i == 0
                        else {"content": piece},
                        "finish_reason": None,
                    }
                ],
            }
            for i, piece in enumerate(pieces)
        ]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (request.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 20, "completion_tokens": len(pieces), "total_tokens": 23}
            chunks.append({**base, "choices": [], "usage": usage})
        return chunks


def serve_chat() -> Iterator[ChatServer]:
    """A ChatServer on 127.0.0.1 for the duration of a test (a fixture's body)."""
    yield from serving(ChatServer)


def serving(server_class: type[ChatServer]) -> Iterator[ChatServer]:
    """A server of ``server_class`` (ChatServer or a subclass) on 127.0.0.1 while the
    generator runs."""
    chat = server_class()
    chat.thread.start()
    try:
        yield chat
    finally:
        chat.httpd.shutdown()
        chat.httpd.server_close()
        chat.thread.join(timeout=10)


server = pytest.fixture(serve_chat, name="server")


@pytest.fixture
def instrument(
    pipeline: at.AgentTrace, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str | None], None]]:
    """Instrument openai into the pipeline's provider, with a content-capture mode (or none)."""
    instrumentor = OpenAIInstrumentor()

    def start(content_mode: str | None) -> None:
        monkeypatch.setenv(SEMCONV_ENV, "gen_ai_latest_experimental")
        if content_mode is None:
            monkeypatch.delenv(CONTENT_ENV, raising=False)
        else:
            monkeypatch.setenv(CONTENT_ENV, content_mode)
        instrumentor.instrument(tracer_provider=pipeline.provider)

    try:
        yield start
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def client_for(server: ChatServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=10)


def async_client_for(server: ChatServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=10)


def chat_completion(request: dict, n: int, message: dict, finish: str) -> dict:
    """A Chat Completions body answering ``request`` with ``message`` (the n-th exchange)."""
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


def asking_for(n: int, name: str, arguments: dict) -> dict:
    """An assistant message asking for one tool call (id ``call_<n>``)."""
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def reply_message(response: dict) -> dict:
    """The server's first choice message, as llm_calls hold it (content always present)."""
    message = dict(response["choices"][0]["message"])
    message.setdefault("content", None)
    return message


def parsed_arguments(messages: list[dict]) -> list[Any]:
    return [
        json.loads(call["function"]["arguments"])
        for message in messages
        for call in message.get("tool_calls") or ()
    ]


def without_arguments(messages: list[dict]) -> list[dict]:
    """Messages with tool-call arguments blanked (they are compared parsed, not as text)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": "…"}}
                for call in message["tool_calls"]
            ]
        out.append(message)
    return out


# --- the chat completion, field by field ------------------------------------------------------


@pytest.mark.parametrize("content_mode", ["span_only", "SPAN_AND_EVENT"])
def test_chat_completions_fold_into_their_steps(pipeline, server, instrument, content_mode):
    instrument(content_mode)
    client = client_for(server)
    sent = []
    with at.episode(task_id="capitals") as episode:
        for question in ("capital of France?", "capital of Peru?"):
            with at.timestep() as step:
                messages = [
                    {"role": "system", "content": "Answer in one word."},
                    {"role": "user", "content": question},
                ]
                sent.append(messages)
                response = client.chat.completions.create(
                    model="gpt-test", messages=messages, temperature=0.5
                )
                step.record(action=response.choices[0].message.content, reward=1.0)
    result = read_run(pipeline)
    (trajectory,) = result.live
    assert trajectory.episode_id == episode.id
    assert result.offline == result.live
    assert len(server.exchanges) == 2
    for step, messages, exchange in zip(trajectory.steps, sent, server.exchanges, strict=True):
        answered = exchange["response"]
        assert exchange["request"]["messages"] == messages
        (call,) = step.llm_calls
        assert call.name == "chat gpt-test"
        assert call.model == answered["model"]
        assert call.attributes[sc.GEN_AI_REQUEST_MODEL] == "gpt-test"
        assert call.attributes[sc.GEN_AI_RESPONSE_ID] == answered["id"]
        assert call.attributes["gen_ai.request.temperature"] == 0.5
        assert call.provider == "openai"
        assert call.input_messages == messages
        assert call.output_messages == [reply_message(answered)]
        assert call.finish_reasons == [answered["choices"][0]["finish_reason"]]
        assert call.input_tokens == answered["usage"]["prompt_tokens"]
        assert call.output_tokens == answered["usage"]["completion_tokens"]
        assert call.error is None
        assert step.start_time <= call.start_time <= call.end_time <= step.end_time
        assert step.action == answered["choices"][0]["message"]["content"]


def test_tool_calls_in_requests_and_responses(pipeline, server, instrument):
    instrument("span_only")
    client = client_for(server)
    question = [{"role": "user", "content": "Weather in Paris?"}]
    with at.episode():
        with at.timestep():
            first = client.chat.completions.create(
                model="gpt-test", messages=question, tools=[WEATHER_TOOL]
            )
            requested = first.choices[0].message.tool_calls[0]
            follow_up = [
                *question,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": requested.id,
                            "type": "function",
                            "function": {
                                "name": requested.function.name,
                                "arguments": requested.function.arguments,
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": requested.id, "content": "sunny, 21 C"},
            ]
            client.chat.completions.create(
                model="gpt-test", messages=follow_up, tools=[WEATHER_TOOL]
            )
    result = read_run(pipeline)
    assert result.offline == result.live
    asked, answered = (exchange["response"] for exchange in server.exchanges)
    ask_call, answer_call = result.live[0].steps[0].llm_calls
    # The model's tool call: name, id and arguments as the server sent them.
    assert ask_call.finish_reasons == ["tool_calls"]
    assert without_arguments(ask_call.output_messages) == without_arguments([reply_message(asked)])
    assert parsed_arguments(ask_call.output_messages) == parsed_arguments([reply_message(asked)])
    (tool_call,) = ask_call.output_messages[0]["tool_calls"]
    assert (tool_call["id"], tool_call["function"]["name"]) == (requested.id, "get_weather")
    # The follow-up request carries the call and the tool's answer, as the client sent them.
    assert without_arguments(answer_call.input_messages) == without_arguments(follow_up)
    assert parsed_arguments(answer_call.input_messages) == parsed_arguments(follow_up)
    assert answer_call.output_messages == [reply_message(answered)]
    assert answer_call.input_tokens == answered["usage"]["prompt_tokens"]


@pytest.mark.parametrize("content_mode", [None, "event_only", "true"])
def test_without_content_on_spans_model_and_tokens_remain(
    pipeline, server, instrument, content_mode
):
    instrument(content_mode)
    client = client_for(server)
    with at.episode(), at.timestep():
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "a private question"}]
        )
    result = read_run(pipeline)
    assert result.offline == result.live
    (call,) = result.live[0].steps[0].llm_calls
    answered = server.exchanges[0]["response"]
    assert call.input_messages is None and call.output_messages is None
    assert call.model == answered["model"]
    assert call.finish_reasons == ["stop"]
    assert (call.input_tokens, call.output_tokens) == (
        answered["usage"]["prompt_tokens"],
        answered["usage"]["completion_tokens"],
    )
    run_text = "".join(p.read_text() for p in Path(pipeline.run_dir).rglob("*") if p.is_file())
    assert "a private question" not in run_text
    assert answered["choices"][0]["message"]["content"] not in run_text


def test_api_key_is_never_recorded(pipeline, server, instrument):
    instrument("span_and_event")
    client = client_for(server)
    with at.episode(), at.timestep():
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hello"}]
        )
    read_run(pipeline)
    # The key really went over the wire ...
    assert server.exchanges[0]["headers"]["authorization"] == f"Bearer {API_KEY}"
    # ... and is in no span attribute or event, and in no file of the run.
    records = list(read_otlp_json(pipeline.span_paths))
    assert any(record.name == "chat gpt-test" for record in records)
    for record in records:
        texts = [json.dumps(list(record.attributes.values()), default=str)]
        texts += [json.dumps(list(e.attributes.values()), default=str) for e in record.events]
        assert not any(API_KEY in text for text in texts), record.name
    files = [p for p in Path(pipeline.run_dir).rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert API_KEY.encode() not in path.read_bytes(), path


def test_streamed_completion(pipeline, server, instrument):
    instrument("span_only")
    client = client_for(server)
    messages = [{"role": "user", "content": "stream please"}]
    with at.episode(), at.timestep():
        stream = client.chat.completions.create(
            model="gpt-test",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    result = read_run(pipeline)
    assert result.offline == result.live
    chunks = server.exchanges[0]["chunks"]
    (call,) = result.live[0].steps[0].llm_calls
    assert text == "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    assert call.input_messages == messages
    assert call.output_messages == [{"role": "assistant", "content": text}]
    # openai-v2 leaves gen_ai.response.finish_reasons off streamed spans; the output messages
    # still carry the reason.
    assert call.finish_reasons == [chunks[-2]["choices"][0]["finish_reason"]]
    assert call.model == chunks[0]["model"]
    assert (call.input_tokens, call.output_tokens) == (
        chunks[-1]["usage"]["prompt_tokens"],
        chunks[-1]["usage"]["completion_tokens"],
    )


def test_async_client_plain_and_streamed(pipeline, server, instrument):
    instrument("span_only")

    async def play() -> list[str]:
        client = async_client_for(server)
        answers = []
        async with at.episode():
            for index in range(2):
                async with at.timestep():
                    messages = [{"role": "user", "content": f"async question {index}"}]
                    if index == 0:
                        response = await client.chat.completions.create(
                            model="gpt-async", messages=messages
                        )
                        answers.append(response.choices[0].message.content)
                    else:
                        stream = await client.chat.completions.create(
                            model="gpt-async", messages=messages, stream=True
                        )
                        pieces = [c.choices[0].delta.content or "" async for c in stream]
                        answers.append("".join(pieces))
        await client.close()
        return answers

    answers = asyncio.run(play())
    result = read_run(pipeline)
    assert result.offline == result.live
    (trajectory,) = result.live
    sent = [exchange["request"]["messages"] for exchange in server.exchanges]
    for step, messages, answer in zip(trajectory.steps, sent, answers, strict=True):
        (call,) = step.llm_calls
        assert call.input_messages == messages
        assert call.output_messages == [{"role": "assistant", "content": answer}]
        assert call.model == "gpt-async-2025-01-01"
        assert call.finish_reasons == ["stop"]
    plain = server.exchanges[0]["response"]
    assert trajectory.steps[0].llm_calls[0].output_tokens == plain["usage"]["completion_tokens"]


def test_failed_request_is_recorded_and_the_error_reaches_the_caller(pipeline, server, instrument):
    instrument("span_only")
    client = client_for(server)
    with at.episode(), at.timestep():
        with pytest.raises(openai.InternalServerError) as raised:
            client.chat.completions.create(
                model="broken-model", messages=[{"role": "user", "content": "hi"}]
            )
    result = read_run(pipeline)
    assert result.offline == result.live
    (call,) = result.live[0].steps[0].llm_calls
    assert call.error is not None and "model is down" in call.error
    assert "model is down" in str(raised.value)
    assert call.input_messages == [{"role": "user", "content": "hi"}]
    assert call.output_messages is None and call.output_tokens is None


# --- where calls land -------------------------------------------------------------------------


def test_openai_span_inside_agenttrace_llm_call_counts_once(pipeline, server, instrument):
    instrument("span_only")
    client = client_for(server)
    mine = [{"role": "user", "content": "policy prompt"}]
    with at.episode(), at.timestep():
        with at.llm_call(model="policy-v3", provider="vllm") as llm:
            llm.record(input_messages=mine)
            client.chat.completions.create(model="gpt-test", messages=mine, max_tokens=1)
    result = read_run(pipeline)
    assert result.offline == result.live
    (call,) = result.live[0].steps[0].llm_calls
    answered = server.exchanges[0]["response"]
    # agenttrace's own span wins where it recorded something ...
    assert call.name == "chat policy-v3"
    assert (call.model, call.provider) == ("policy-v3", "vllm")
    assert call.input_messages == mine
    # ... and the openai span fills what it left out.
    assert call.output_messages == [reply_message(answered)]
    assert call.finish_reasons == ["length"]
    assert (call.input_tokens, call.output_tokens) == (
        answered["usage"]["prompt_tokens"],
        answered["usage"]["completion_tokens"],
    )
    assert call.attributes[sc.GEN_AI_RESPONSE_ID] == answered["id"]


def test_calls_outside_timesteps_join_the_next_step(pipeline, server, instrument):
    """Agents that wrap only env.step: the call that chose the action belongs to that step;
    a call after the last env step is an agent turn of its own (docs/tracing-api.md)."""
    instrument("span_only")
    client = client_for(server)

    def ask(text: str) -> str:
        reply = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": text}]
        )
        return reply.choices[0].message.content

    with at.episode():
        with at.env_reset() as reset:
            reset.record(observation=ask("make up a task"))
        for index in range(2):
            action = ask(f"act {index}")
            with at.env_step() as step:
                step.record(action=action, reward=float(index), terminated=index == 1)
        ask("summarise the episode")
    result = read_run(pipeline)
    assert result.offline == result.live
    steps = result.live[0].steps
    texts = [[c.input_messages[0]["content"] for c in s.llm_calls] for s in steps]
    assert texts == [["make up a task", "act 0"], ["act 1"], ["summarise the episode"]]
    answers = [e["response"]["choices"][0]["message"]["content"] for e in server.exchanges]
    assert [s.action for s in steps] == answers[1:]  # (the env steps recorded theirs)
    summary = steps[2]
    assert summary.observation == [{"role": "user", "content": "summarise the episode"}]
    assert (summary.reward, summary.terminated, summary.truncated) == (None, True, False)
    assert result.live[0].length == 3 and result.live[0].missing_steps == []


def test_an_inline_loop_of_llm_turns_with_the_openai_span_nested(pipeline, server, instrument):
    """An agent loop with no timestep: the decorated model-call function makes the turns, the
    openai-v2 span inside it is the same call, and the turn after the last env step (a reply
    cut at max_tokens) is a step of its own."""
    instrument("span_only")
    client = client_for(server)

    @at.llm_call(final_on="length", final_reward=0.0, final_terminated=True)
    def generate(messages: list[dict], max_tokens: int) -> Any:
        return client.chat.completions.create(
            model="gpt-test", messages=messages, max_tokens=max_tokens
        )

    prompts = [[{"role": "user", "content": f"turn {i}"}] for i in range(2)]
    with at.episode():
        reply = generate(prompts[0], max_tokens=64)
        with at.env_step() as step:
            step.record(action=reply.choices[0].message.content, reward=0.5)
        generate(prompts[1], max_tokens=1)
    result = read_run(pipeline)
    assert result.offline == result.live
    (trajectory,) = result.live
    first, last = trajectory.steps
    answers = [exchange["response"] for exchange in server.exchanges]
    assert [len(step.llm_calls) for step in trajectory.steps] == [1, 1]  # one call each
    for step, prompt, answered in zip(trajectory.steps, prompts, answers, strict=True):
        (call,) = step.llm_calls
        assert call.input_messages == prompt
        assert call.output_messages == [reply_message(answered)]
        assert call.output_tokens == answered["usage"]["completion_tokens"]
    assert answers[1]["choices"][0]["finish_reason"] == "length"
    assert (first.observation, first.reward, first.truncated) == (prompts[0], 0.5, False)
    cut = answers[1]["choices"][0]["message"]["content"]
    assert (last.observation, last.action) == (prompts[1], cut)
    assert (last.reward, last.terminated, last.truncated) == (0.0, True, True)
    assert trajectory.status == sc.STATUS_COMPLETED and trajectory.length == 2


# --- other GenAI formats, written with the real SDK -------------------------------------------


def fold_one_call(pipeline, attributes: dict, events: list[tuple[str, dict]] = ()) -> Any:
    """Write one foreign GenAI span inside a step; return its LLMCall (live == offline)."""
    tracer = pipeline.provider.get_tracer("some.other.instrumentation")
    with at.episode(), at.timestep():
        with tracer.start_as_current_span(attributes.pop("span.name", "chat m")) as span:
            span.set_attributes(attributes)
            for name, event_attributes in events:
                span.add_event(name, event_attributes)
    result = read_run(pipeline)
    assert result.offline == result.live
    (call,) = result.live[0].steps[0].llm_calls
    return call


def test_parts_format_with_system_instructions_and_tool_definitions(pipeline):
    tools = [{"type": "function", "name": "get_weather", "parameters": {"$ref": "#/defs/City"}}]
    call = fold_one_call(
        pipeline,
        {
            sc.GEN_AI_OPERATION_NAME: "generate_content",
            sc.GEN_AI_PROVIDER_NAME: "gcp.gemini",
            sc.GEN_AI_REQUEST_MODEL: "gemini-x",
            sc.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps([{"type": "text", "content": "Be brief."}]),
            sc.GEN_AI_INPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "user",
                        "parts": [
                            {"type": "text", "content": "What is this?"},
                            {"type": "uri", "modality": "image", "uri": "https://x/cat.png"},
                        ],
                    },
                    {
                        "role": "tool",
                        "parts": [
                            {"type": "tool_call_response", "id": "c1", "response": {"t": 21}},
                            {"type": "tool_call_response", "id": "c2", "response": "rain"},
                        ],
                    },
                ]
            ),
            sc.GEN_AI_OUTPUT_MESSAGES: json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "reasoning", "content": "It looks like a cat."},
                            {"type": "text", "content": "A cat."},
                        ],
                        "finish_reason": "stop",
                    }
                ]
            ),
            sc.GEN_AI_TOOL_DEFINITIONS: json.dumps(tools),
        },
    )
    assert (call.model, call.provider) == ("gemini-x", "gcp.gemini")
    assert call.input_messages == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "uri", "modality": "image", "uri": "https://x/cat.png"},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": {"t": 21}},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    assert call.output_messages == [
        {"role": "assistant", "content": "A cat.", "reasoning_content": "It looks like a cat."}
    ]
    assert call.finish_reasons == ["stop"]
    # the conventions' flat function tools, in the Chat Completions shape every call holds
    assert call.attributes[sc.GEN_AI_TOOL_DEFINITIONS] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"$ref": "#/defs/City"}},
        }
    ]


def test_prompt_and_completion_span_events_of_older_conventions(pipeline):
    prompt = [{"role": "user", "content": "hi"}]
    completion = [{"role": "assistant", "content": "hello"}]
    call = fold_one_call(
        pipeline,
        {
            sc.GEN_AI_SYSTEM: "az.ai.inference",
            sc.GEN_AI_REQUEST_MODEL: "m",
            sc.GEN_AI_USAGE_PROMPT_TOKENS: 4,
            sc.GEN_AI_USAGE_COMPLETION_TOKENS: 2,
        },
        [
            (sc.GEN_AI_CONTENT_PROMPT_EVENT, {sc.GEN_AI_PROMPT: json.dumps(prompt)}),
            (sc.GEN_AI_CONTENT_COMPLETION_EVENT, {sc.GEN_AI_COMPLETION: json.dumps(completion)}),
        ],
    )
    assert (call.model, call.provider) == ("m", "az.ai.inference")
    assert (call.input_messages, call.output_messages) == (prompt, completion)
    assert (call.input_tokens, call.output_tokens) == (4, 2)


def test_per_message_span_events(pipeline):
    tool_calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}]
    call = fold_one_call(
        pipeline,
        {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m"},
        [
            ("gen_ai.system.message", {sc.GEN_AI_EVENT_CONTENT: json.dumps({"content": "sys"})}),
            ("gen_ai.user.message", {sc.GEN_AI_EVENT_CONTENT: json.dumps({"content": "q"})}),
            ("gen_ai.tool.message", {sc.GEN_AI_EVENT_CONTENT: json.dumps({"id": "c0"})}),
            (
                sc.GEN_AI_CHOICE_EVENT,
                {
                    sc.GEN_AI_EVENT_CONTENT: json.dumps(
                        {
                            "index": 0,
                            "finish_reason": "tool_calls",
                            "message": {"content": None, "tool_calls": tool_calls},
                        }
                    )
                },
            ),
        ],
    )
    assert call.input_messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "tool", "content": None, "tool_call_id": "c0"},
    ]
    assert call.output_messages == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    ]
    assert call.finish_reasons == ["tool_calls"]


def test_openllmetry_flattened_attributes(pipeline):
    call = fold_one_call(
        pipeline,
        {
            "span.name": "openai.chat",
            sc.LLM_REQUEST_TYPE: "chat",
            sc.GEN_AI_SYSTEM: "openai",
            sc.GEN_AI_REQUEST_MODEL: "gpt-x",
            sc.GEN_AI_RESPONSE_MODEL: "gpt-x-1",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "weather?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "c1",
            "gen_ai.completion.0.tool_calls.0.name": "get_weather",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"city":"Paris"}',
            sc.GEN_AI_USAGE_PROMPT_TOKENS: 9,
        },
    )
    assert (call.name, call.model, call.provider) == ("openai.chat", "gpt-x-1", "openai")
    assert call.input_messages == [{"role": "user", "content": "weather?"}]
    assert call.output_messages == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        }
    ]
    assert call.finish_reasons == ["tool_calls"]
    assert call.input_tokens == 9
    assert not any(key.startswith("gen_ai.prompt") for key in call.attributes)


def test_spans_that_are_not_model_calls_are_not_folded(pipeline):
    tracer = pipeline.provider.get_tracer("some.other.instrumentation")
    with at.episode(), at.timestep():
        for operation in ("embeddings", "invoke_agent"):
            with tracer.start_as_current_span(f"{operation} m") as span:
                span.set_attributes({sc.GEN_AI_OPERATION_NAME: operation})
        with tracer.start_as_current_span("chat m") as span:
            span.set_attribute(sc.GEN_AI_REQUEST_MODEL, "m")
    result = read_run(pipeline)
    assert result.offline == result.live
    assert [call.model for call in result.live[0].steps[0].llm_calls] == ["m"]


def test_every_genai_name_in_semconv_is_documented():
    text = (Path(__file__).parent.parent / "docs" / "semantic-conventions.md").read_text()
    names = [
        value
        for key, value in vars(sc).items()
        if key.startswith(("GEN_AI_", "LLM_")) and isinstance(value, str)
    ]
    names += list(sc.GEN_AI_MESSAGE_EVENT_ROLES)
    assert names
    missing = [name for name in names if not re.search(rf"`{re.escape(name)}[`.]", text)]
    assert missing == []


def test_message_attributes_recorded_as_arrays_of_json_texts(pipeline):
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "one"}]},
        {"role": "user", "parts": [{"type": "text", "content": "two"}]},
    ]
    call = fold_one_call(
        pipeline,
        {
            sc.GEN_AI_OPERATION_NAME: "chat",
            sc.GEN_AI_INPUT_MESSAGES: [json.dumps(message) for message in messages],
            sc.GEN_AI_OUTPUT_MESSAGES: ["not json", "either"],
        },
    )
    assert call.input_messages == [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ]
    assert call.output_messages == ["not json", "either"]


# --- agenttrace's content policy on other instrumentations' spans ----------------------------


def run_text(runtime: at.AgentTrace) -> str:
    return "".join(p.read_text() for p in Path(runtime.run_dir).rglob("*") if p.is_file())


def ask_weather(runtime: at.AgentTrace, server: ChatServer, monkeypatch) -> None:
    """One openai-v2 traced call with a tool, content captured on the span."""
    monkeypatch.setenv(SEMCONV_ENV, "gen_ai_latest_experimental")
    monkeypatch.setenv(CONTENT_ENV, "span_only")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=runtime.provider)
    try:
        with at.episode(), at.timestep():
            client_for(server).chat.completions.create(
                model="gpt-test",
                messages=[{"role": "user", "content": "Weather in Paris, my secret city?"}],
                tools=[WEATHER_TOOL],
            )
    finally:
        instrumentor.uninstrument()


def test_content_none_drops_message_content_of_openai_v2_spans(tmp_path, server, monkeypatch):
    runtime = at.configure(out=str(tmp_path), run_name="none", sinks=["jsonl"], content="none")
    ask_weather(runtime, server, monkeypatch)
    result = read_run(runtime)
    assert result.offline == result.live
    (call,) = result.live[0].steps[0].llm_calls
    answered = server.exchanges[0]["response"]
    assert (call.input_messages, call.output_messages) == (None, None)
    assert call.model == answered["model"]
    assert call.finish_reasons == ["tool_calls"]
    assert call.input_tokens == answered["usage"]["prompt_tokens"]
    text = run_text(runtime)
    assert "secret city" not in text and "Paris" not in text
    (record,) = [r for r in read_otlp_json(runtime.span_paths) if r.name == "chat gpt-test"]
    assert not set(record.attributes) & sc.GEN_AI_CONTENT_ATTRIBUTES
    assert record.attributes[sc.GEN_AI_REQUEST_MODEL] == "gpt-test"  # the rest is kept


def test_redact_hook_sees_foreign_message_content_decoded(tmp_path, server, monkeypatch):
    seen: list[tuple[str, Any]] = []

    def redact(key: str, value: Any) -> Any:
        seen.append((key, value))
        return json.loads(json.dumps(value).replace("Paris", "[city]"))

    runtime = at.configure(out=str(tmp_path), run_name="redact", sinks=["jsonl"], redact=redact)
    ask_weather(runtime, server, monkeypatch)
    result = read_run(runtime)
    assert result.offline == result.live
    (call,) = result.live[0].steps[0].llm_calls
    assert call.input_messages == [
        {"role": "user", "content": "Weather in [city], my secret city?"}
    ]
    assert "[city]" in call.output_messages[0]["tool_calls"][0]["function"]["arguments"]
    assert {key for key, _ in seen} >= {sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES}
    assert all(isinstance(value, list) for key, value in seen if key == sc.GEN_AI_INPUT_MESSAGES)
    assert "Paris" not in run_text(runtime)


def test_content_none_keeps_roles_and_finish_reasons_of_flattened_attributes(tmp_path):
    runtime = at.configure(out=str(tmp_path), run_name="flat", sinks=["jsonl"], content="none")
    call = fold_one_call(
        runtime,
        {
            "span.name": "openai.chat",
            sc.LLM_REQUEST_TYPE: "chat",
            sc.GEN_AI_REQUEST_MODEL: "gpt-x",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "a private prompt",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.name": "get_weather",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"city":"Paris"}',
        },
        [(sc.GEN_AI_CONTENT_PROMPT_EVENT, {sc.GEN_AI_PROMPT: '[{"role":"user","content":"x"}]'})],
    )
    assert call.input_messages == [{"role": "user", "content": None}]
    assert call.finish_reasons == ["tool_calls"]
    assert call.output_messages[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    text = run_text(runtime)
    assert "a private prompt" not in text and "Paris" not in text
    assert sc.GEN_AI_PROMPT + '"' not in text  # the event lost its content attribute


def test_attributes_named_like_secrets_never_leave_foreign_spans(pipeline):
    tracer = pipeline.provider.get_tracer("some.http.instrumentation")
    with at.episode(), at.timestep():
        with tracer.start_as_current_span("GET /step") as span:
            span.set_attribute("http.request.header.authorization", "Bearer sk-live-123")
            span.set_attribute("db.password", "hunter2")
            span.set_attribute("http.request.method", "GET")
            span.add_event("retry", {"x-api-key": "sk-live-456", "attempt": 2})
    read_run(pipeline)
    (record,) = [r for r in read_otlp_json(pipeline.span_paths) if r.name == "GET /step"]
    assert set(record.attributes) == {"http.request.method", sc.EPISODE_ID}
    assert dict(record.events[0].attributes) == {"attempt": 2}
    text = run_text(pipeline)
    assert "sk-live" not in text and "hunter2" not in text
