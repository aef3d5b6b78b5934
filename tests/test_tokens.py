"""Token-level LLM data: the ids and log-probabilities an OpenAI-compatible server returns
(vLLM's shape, tests/fixtures/vllm), recorded with token capture on, and laid out by
``agenttrace export --format tokens`` with a loss mask over exactly the model's tokens.

The server is local (127.0.0.1) and answers with the real ``openai`` client's wire format plus
vLLM's fields. Its "tokenizer" is the bytes of a small chat template, so that each turn's
prompt extends the previous prompt and completion as a real template does. The truth is what
the server sent, recorded by the server itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from test_openai_genai import ChatServer, serving

import agenttrace as at
from agenttrace.cli.main import main
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory.tokens import token_rows

FIXTURE = Path(__file__).parent / "fixtures" / "vllm" / "chat_completion_token_ids.json"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def body(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content:
        return content
    return json.dumps(message.get("tool_calls"), sort_keys=True)


def turns(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<|{m['role']}|>{body(m)}<|end|>" for m in messages)


def ids(text: str) -> list[int]:
    return [1000 + b for b in text.encode()]


class VllmServer(ChatServer):
    """ChatServer's answers, with vLLM's ``prompt_token_ids``, ``token_ids`` and logprobs
    (``token_id:N`` tokens) when the request asks for them, in the fixture's shape."""

    def answer(self, request: dict) -> dict:
        response = super().answer(request)
        choice = response["choices"][0]
        message = choice["message"]
        completion = ids(body(message) + "<|end|>")
        prompt = ids(turns(request["messages"]) + "<|assistant|>")
        response.update(
            prompt_token_ids=prompt if request.get("return_token_ids") else None,
            prompt_logprobs=None,
            kv_transfer_params=None,
            service_tier=None,
        )
        choice.update(
            stop_reason=None,
            token_ids=completion if request.get("return_token_ids") else None,
            logprobs=None,
        )
        if request.get("logprobs"):
            as_ids = request.get("return_tokens_as_token_ids")
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{token}" if as_ids else chr(token - 1000),
                        "logprob": -(i + 1) / 100,
                        "bytes": [token - 1000],
                        "top_logprobs": [],
                    }
                    for i, token in enumerate(completion)
                ]
            }
        for key in ("refusal", "annotations", "audio", "function_call", "reasoning_content"):
            message.setdefault(key, None)
        message.setdefault("tool_calls", [])
        return response


@pytest.fixture
def server():
    yield from serving(VllmServer)


def test_the_served_responses_have_vllms_shape(server) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, extra_body=extra
    )
    fixture = json.loads(FIXTURE.read_text())
    served = server.exchanges[-1]["response"]
    assert served.keys() == fixture.keys()
    assert served["choices"][0].keys() == fixture["choices"][0].keys()
    assert served["choices"][0]["message"].keys() == fixture["choices"][0]["message"].keys()
    item = served["choices"][0]["logprobs"]["content"][0]
    assert item.keys() == fixture["choices"][0]["logprobs"]["content"][0].keys()
    assert item["token"].startswith("token_id:")


def run_agent(client: openai.OpenAI, extra: dict[str, Any]) -> str:
    """Two turns: the model calls a tool (the env step that runs it earns 0.25), then
    answers; a verifier's score of 1.0 goes to the last step. The episode id."""

    @at.llm_call(model="qwen")
    def chat(messages: list[dict[str, Any]]) -> Any:
        return client.chat.completions.create(
            model="qwen", messages=messages, tools=TOOLS, logprobs=True, extra_body=extra
        )

    with at.episode(task_id="weather") as episode:
        messages = [{"role": "user", "content": "weather in Paris?"}]
        reply = chat(messages).choices[0].message
        call = reply.tool_calls[0]
        assistant = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        }
        with at.env_step() as step:
            step.record(action=assistant["tool_calls"], reward=0.25)
        messages += [assistant, {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        chat(messages)
        at.score(episode.id, 1.0)
    return episode.id


@pytest.mark.parametrize("as_ids", [False, True], ids=["token_ids", "token_id-strings"])
def test_tokens_export_has_the_servers_ids_logprobs_and_an_exact_loss_mask(
    server, tmp_path, as_ids
) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="agent", tokens=True, spans=["file"])
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    # vLLM's two ways: token_ids fields, or only the "token_id:N" spelling in the logprobs.
    extra = {"return_tokens_as_token_ids": True} if as_ids else {"return_token_ids": True}
    episode_id = run_agent(client, extra)
    runtime.shutdown()

    sent = [exchange["response"] for exchange in server.exchanges]
    first, second = ({**r, "choice": r["choices"][0]} for r in sent)
    completion = [
        [
            int(item["token"].removeprefix("token_id:"))
            for item in r["choice"]["logprobs"]["content"]
        ]
        if as_ids
        else r["choice"]["token_ids"]
        for r in (first, second)
    ]
    logprobs = [
        [item["logprob"] for item in r["choice"]["logprobs"]["content"]] for r in (first, second)
    ]
    # The prompts as the server saw them (its template), for the truth of the env tokens.
    requests = [exchange["request"] for exchange in server.exchanges]
    prompts = [ids(turns(request["messages"]) + "<|assistant|>") for request in requests]
    environment = prompts[1][len(prompts[0]) + len(completion[0]) :]
    assert prompts[1][: len(prompts[0]) + len(completion[0])] == prompts[0] + completion[0]

    out = tmp_path / "tokens.jsonl"
    source = str(tmp_path / "agent" / "spans.jsonl")
    assert (
        main(["export", "--from", source, "--out", str(out), "--format", "tokens", "--quiet"]) == 0
    )
    found = [json.loads(line) for line in out.open()]
    if as_ids:  # (prompt ids come with return_token_ids only: each call is a row of its own)
        assert [r["segment"] for r in found] == [0, 1]
        assert [r["prompt_ids"] for r in found] == [[], []]
        assert [r["response_ids"] for r in found] == completion
        assert [r["response_logprobs"] for r in found] == logprobs
        assert [sum(r["loss_mask"]) for r in found] == [len(c) for c in completion]
        return
    (row,) = found
    assert row["episode_id"] == episode_id and row["segment"] == 0
    assert row["prompt_ids"] == prompts[0] == first["prompt_token_ids"]
    assert row["response_ids"] == completion[0] + environment + completion[1]
    n0, ne, n1 = len(completion[0]), len(environment), len(completion[1])
    assert row["loss_mask"] == [1] * n0 + [0] * ne + [1] * n1
    assert row["response_logprobs"] == logprobs[0] + [0.0] * ne + logprobs[1]
    assert row["turn_ends"] == [n0, n0 + ne + n1]
    expected_rewards = [0.0] * (n0 + ne + n1)
    expected_rewards[n0 - 1] = 0.25
    expected_rewards[-1] = 1.0  # the verifier's score, on the last step
    assert row["token_rewards"] == expected_rewards
    assert row["reward"] == 1.25

    per_call = tmp_path / "calls.parquet"
    options = ["--format", "tokens", "--tokens-per", "step", "--quiet"]
    assert main(["export", "--from", source, "--out", str(per_call), *options]) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(per_call)
    import pyarrow as pa

    assert table.schema.field("loss_mask").type.value_type == pa.int8()
    assert table.schema.field("response_logprobs").type.value_type == pa.float64()
    rows = table.to_pylist()
    assert [r["response_ids"] for r in rows] == completion
    assert [r["prompt_ids"] for r in rows] == prompts
    assert [r["loss_mask"] for r in rows] == [[1] * n0, [1] * n1]
    assert [r["response_logprobs"] for r in rows] == logprobs
    assert [r["reward"] for r in rows] == [0.25, 1.0]
    assert [r["step"] for r in rows] == [0, 1]
    assert [r["turn_ends"] for r in rows] == [[n0], [n1]]
    assert rows[0]["token_rewards"] == [0.0] * (n0 - 1) + [0.25]
    assert rows[1]["token_rewards"] == [0.0] * (n1 - 1) + [1.0]
    for r in [*rows, row]:
        assert (r["episode_id"], r["task_id"], r["group_id"]) == (episode_id, "weather", None)
        assert r["status"] == "completed"


def test_token_capture_is_off_by_default_and_bounded(server, tmp_path, monkeypatch) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    runtime = at.configure(out=str(tmp_path), run_name="off")
    run_agent(client, {"return_token_ids": True})
    runtime.shutdown()
    (trajectory,) = load_trajectories(runtime.trajectory_paths)
    calls = [call for step in trajectory.steps for call in step.llm_calls]
    assert calls and all(call.prompt_token_ids is None for call in calls)
    assert "prompt_token_ids" not in json.dumps([c.to_dict() for c in calls])
    assert token_rows(trajectory) == []

    runtime = at.configure(out=str(tmp_path), run_name="cut", tokens=True, tokens_max=5)
    run_agent(client, {"return_token_ids": True})
    runtime.shutdown()
    (trajectory,) = load_trajectories(runtime.trajectory_paths)
    calls = [call for step in trajectory.steps for call in step.llm_calls]
    assert all(len(call.prompt_token_ids) == 5 for call in calls)
    assert all(call.tokens_cut for call in calls)
    with pytest.raises(ValueError, match="per must be one of"):
        token_rows(trajectory, per="turn")
