"""An ``llm`` target records what the model returned, whatever shape the function returns it in:
an OpenAI ChatCompletion or Response object, their dicts, a runner's own dict, or text."""

from __future__ import annotations

import sys
import types

import openai
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from test_openai_genai import serve_chat

import agenttrace as at
from agenttrace.instrument.auto import AgentTraceInstrumentor
from agenttrace.instrument.llm_results import read_result
from agenttrace.instrument.targets import Target, TargetError
from agenttrace.sinks import load_trajectories

server = pytest.fixture(serve_chat, name="server")


def reply(content):
    return {"role": "assistant", "content": content}


CALL = {"id": "c", "type": "function"}

RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1_700_000_000,
    "model": "gpt-x",
    "status": "incomplete",
    "incomplete_details": {"reason": "max_output_tokens"},
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "incomplete",
            "content": [{"type": "output_text", "text": "The sum is", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_9",
            "name": "add",
            "arguments": '{"a": 1}',
        },
    ],
    "usage": {
        "input_tokens": 12,
        "output_tokens": 4,
        "total_tokens": 16,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    },
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def test_a_responses_api_answer_reads_like_a_chat_completion() -> None:
    for value in (Response.model_validate(RESPONSE), RESPONSE):
        fields = read_result(value)
        assert fields["output_messages"] == [
            {
                "role": "assistant",
                "content": "The sum is",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 1}'},
                    }
                ],
            }
        ]
        assert fields["finish_reasons"] == ["length"]  # cut by max_output_tokens
        assert (fields["input_tokens"], fields["output_tokens"]) == (12, 4)
        assert (fields["response_model"], fields["response_id"]) == ("gpt-x", "resp_1")
    done = dict(RESPONSE, status="completed", incomplete_details=None)
    assert read_result(done)["finish_reasons"] == ["tool_calls"]
    assert read_result(dict(done, output=done["output"][:1]))["finish_reasons"] == ["stop"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"content": "42", "finish_reason": "length", "usage": {"prompt_tokens": 5}},
            {
                "output_messages": [{"role": "assistant", "content": "42"}],
                "finish_reasons": ["length"],
                "input_tokens": 5,
            },
        ),
        (
            {"text": "hi", "stop_reason": "end_turn", "input_tokens": 3, "output_tokens": 1},
            {
                "output_messages": [{"role": "assistant", "content": "hi"}],
                "finish_reasons": ["end_turn"],
                "input_tokens": 3,
                "output_tokens": 1,
            },
        ),
        (
            {"message": {"role": "assistant", "content": "ok"}, "model": "m"},
            {"output_messages": [{"role": "assistant", "content": "ok"}], "response_model": "m"},
        ),
        (
            {"message": "plain", "finish_reasons": ["stop"]},
            {"output_messages": [reply("plain")], "finish_reasons": ["stop"]},
        ),
        (
            {"content": None, "tool_calls": [CALL]},
            {
                "output_messages": [dict(reply(None), tool_calls=[CALL])]
            },
        ),
        ("just text", {"output_messages": [{"role": "assistant", "content": "just text"}]}),
        ({"unrelated": 1}, {}),
        (None, {}),
        (42, {}),
        (types.SimpleNamespace(text="from an object"), {
            "output_messages": [{"role": "assistant", "content": "from an object"}]
        }),
    ],
)  # fmt: skip
def test_plain_values_are_read_by_their_usual_names(value, expected) -> None:
    assert read_result(value) == expected


def _llm_module(base_url: str) -> types.ModuleType:
    """A runner's module: three ways of handing back one chat completion."""
    module = types.ModuleType("runner_llm")
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=10)

    def as_dict(messages, max_tokens=16):
        completion = client.chat.completions.create(
            model="policy", messages=messages, max_tokens=max_tokens
        )
        choice = completion.choices[0]
        return {
            "content": choice.message.content,
            "finish_reason": choice.finish_reason,
            "usage": completion.usage.model_dump(),
        }

    def as_completion(messages):
        return client.chat.completions.create(model="policy", messages=messages)

    def as_pair(messages):  # read by the custom reader below
        completion = client.chat.completions.create(model="policy", messages=messages)
        return completion.choices[0].message.content, completion.choices[0].finish_reason

    def read_pair(pair):
        text, why = pair
        return {"content": text, "finish_reason": why}

    for function in (as_dict, as_completion, as_pair, read_pair):
        function.__module__ = module.__name__
        setattr(module, function.__name__, function)
    return module


def test_llm_targets_record_the_reply_from_each_return_shape(tmp_path, server) -> None:
    module = _llm_module(server.base_url)
    sys.modules[module.__name__] = module
    instrumentor = AgentTraceInstrumentor()
    runtime = at.configure(out=str(tmp_path), run_name="llm", exit_report=False)
    instrumentor.instrument(
        targets=[
            "runner_llm:as_dict=llm",
            "runner_llm:as_completion=llm",
            "runner_llm:as_pair=llm[extractor=runner_llm:read_pair]",
        ]
    )
    try:
        question = [{"role": "user", "content": "1+1?"}]
        with at.episode():
            with at.timestep():
                module.as_dict(question)
                module.as_dict(question, max_tokens=1)  # the server cuts it: length
                module.as_completion(question)
                module.as_pair(question)
        runtime.shutdown()
    finally:
        instrumentor.uninstrument()
        del sys.modules[module.__name__]
    (trajectory,) = load_trajectories(runtime.trajectory_paths)
    calls = trajectory.steps[0].llm_calls
    answered = [exchange["response"] for exchange in server.exchanges]
    assert len(calls) == len(answered) == 4
    for call, response in zip(calls, answered, strict=True):
        choice = response["choices"][0]
        assert call.input_messages == question
        assert call.output_messages == [choice["message"]]
        assert call.finish_reasons == [choice["finish_reason"]]
    assert [call.finish_reasons for call in calls] == [["stop"], ["length"], ["stop"], ["stop"]]
    for call, response in zip(calls[:3], answered, strict=False):  # (the pair has no usage)
        assert call.input_tokens == response["usage"]["prompt_tokens"]
        assert call.output_tokens == response["usage"]["completion_tokens"]
    assert calls[2].model == answered[2]["model"]  # (the ChatCompletion says which)


def test_an_llm_extractor_must_be_an_import_path() -> None:
    with pytest.raises(TargetError, match="an llm extractor is the import path"):
        Target("pkg.mod:ask", "llm", extractor="gymnasium")
    Target("pkg.mod:ask", "llm", extractor="pkg.readers:read_reply")  # accepted
    with pytest.raises(TargetError, match="takes no extractor"):
        Target("pkg.mod:act", "agent.act", extractor="pkg.readers:read")


def test_chat_completion_objects_and_their_dicts_read_the_same() -> None:
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    from_object = read_result(ChatCompletion.model_validate(body))
    assert from_object == read_result(body)
    assert from_object["output_messages"] == [{"role": "assistant", "content": "x"}]
