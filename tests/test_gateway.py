"""The LLM capture gateway with real clients against a scripted model server.

The model server (tests/model_server.py) is the independent truth: it records every request it
received and every answer it sent. Agents talk to it through the gateway with the real
``openai`` and ``anthropic`` SDKs, streamed and not, with tool calls; each call the server saw
must be one step, in order, with the messages the server received (read as chat messages), the
answer it sent, and the tool calls joined with the results the agent sent back. ``agenttrace
run`` ends episodes with the child's exit code. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from conftest import clean_environ, wait_until
from model_server import ModelServer, call, call_tools, fail, say

import agenttrace as at
from agenttrace.gateway import Gateway, GatewaySettings
from agenttrace.instrument.llm_anthropic import anthropic_messages
from agenttrace.instrument.llm_requests import responses_messages
from agenttrace.reading import load_trajectories

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(300)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "add two numbers",
            "parameters": {"type": "object", "properties": {"a": {}, "b": {}}},
        },
    }
]
SECRET = "sk-gateway-test-9f3e21"


@pytest.fixture
def recorded(tmp_path):
    """A pipeline writing under tmp_path, and a function reading its trajectories back."""
    runtime = at.configure(out=str(tmp_path / "runs"), run_name="gw", tokens=True)

    def trajectories() -> dict[str, at.Trajectory]:
        at.shutdown()
        files = sorted((tmp_path / "runs" / "gw").glob("trajectories*.jsonl"))
        return {t.episode_id: t for t in load_trajectories(files)}

    yield trajectories
    runtime.shutdown()


def openai_agent(base_url: str, model: str, *, stream: bool) -> list[str]:
    """A tool loop on Chat Completions: call, run the tools asked for, call again until an
    answer without tool calls. Returns the answers' texts."""
    client = openai.OpenAI(base_url=base_url, api_key=SECRET, max_retries=0)
    messages = [{"role": "system", "content": "be exact"}, {"role": "user", "content": "1+2?"}]
    texts = []
    for _ in range(5):
        if stream:
            with client.chat.completions.stream(
                model=model, messages=messages, tools=TOOLS
            ) as events:
                for _event in events:
                    pass
                message = events.get_final_completion().choices[0].message
        else:
            reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            message = reply.choices[0].message
        texts.append(message.content or "")
        if not message.tool_calls:
            return texts
        messages.append(message.model_dump(exclude_none=True))
        for tool_call in message.tool_calls:
            arguments = json.loads(tool_call.function.arguments)
            result = str(arguments["a"] + arguments["b"])
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result})
    return texts


def anthropic_agent(base_url: str, model: str, *, stream: bool) -> list[str]:
    client = anthropic.Anthropic(base_url=base_url, api_key=SECRET, max_retries=0)
    tools = [{"name": "add", "input_schema": {"type": "object"}}]
    messages: list = [{"role": "user", "content": "1+2?"}]
    texts = []
    for _ in range(5):
        kwargs = {"model": model, "max_tokens": 100, "system": "be exact", "tools": tools}
        if stream:
            with client.messages.stream(messages=messages, **kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(messages=messages, **kwargs)
        texts.append("".join(b.text for b in reply.content if b.type == "text"))
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return texts
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": u.id,
                        "content": str(sum(u.input.values())),
                    }
                    for u in uses
                ],
            }
        )
    return texts


def responses_agent(base_url: str, model: str, *, stream: bool) -> list[str]:
    """The same loop on the Responses API: function_call items answered by
    function_call_output items in the next request's input."""
    client = openai.OpenAI(base_url=base_url, api_key=SECRET, max_retries=0)
    tools = [{"type": "function", "name": "add", "parameters": {"type": "object"}}]
    items: list = [{"role": "user", "content": "1+2?"}]
    texts = []
    for _ in range(5):
        kwargs = {"model": model, "instructions": "be exact", "input": items, "tools": tools}
        if stream:
            with client.responses.stream(**kwargs) as events:
                reply = events.get_final_response()
        else:
            reply = client.responses.create(**kwargs)
        texts.append(reply.output_text)
        calls = [item for item in reply.output if item.type == "function_call"]
        if not calls:
            return texts
        for item in reply.output:
            items.append(item.model_dump(exclude_none=True))
        for function_call in calls:
            arguments = json.loads(function_call.arguments)
            items.append(
                {"type": "function_call_output", "call_id": function_call.call_id,
                 "output": str(arguments["a"] + arguments["b"])}
            )  # fmt: skip
    return texts


def check_against_the_server(trajectory: at.Trajectory, exchanges: list, api: str) -> None:
    """Each call the server saw is one step, in order: the messages it received, the answer
    it sent, and the tool calls with the results the next request carried."""
    assert [step.index for step in trajectory.steps] == list(range(len(exchanges)))
    for step, exchange in zip(trajectory.steps, exchanges, strict=True):
        (llm,) = step.llm_calls
        body = exchange.body
        if api == "messages":
            sent = anthropic_messages(body.get("system"), body["messages"])
        elif api == "responses":
            sent = responses_messages(body.get("instructions"), body["input"])
        else:
            sent = body["messages"]
        assert llm.input_messages == sent
        turn = exchange.turn
        (output,) = llm.output_messages
        assert (output.get("content") or "") == (turn.text or "")
        asked = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in
                 output.get("tool_calls") or []]  # fmt: skip
        assert asked == [(c.name, json.loads(c.arguments) if isinstance(c.arguments, str)
                          else c.arguments) for c in turn.tool_calls]  # fmt: skip
        assert llm.finish_reasons == ["tool_calls" if turn.tool_calls else "stop"]
        ids = [c["id"] for c in output.get("tool_calls") or []]
        assert [t.call_id for t in step.tool_calls] == ids
        for tool in step.tool_calls:
            assert tool.name == "add"
            arguments = json.loads(tool.arguments)
            assert tool.result == str(arguments["a"] + arguments["b"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_each_call_is_a_step_with_what_the_server_saw(recorded, api, stream) -> None:
    script = {
        "m": [
            call_tools(call("add", {"a": 1, "b": 2}), call("add", {"a": 3, "b": 4})),
            call_tools(call("add", {"a": 5, "b": 6}), text="one more"),
            say("1+2 is 3"),
        ]
    }
    with ModelServer(script) as server:
        gateway = Gateway(GatewaySettings(upstream=server.url), "127.0.0.1", 0).start()
        try:
            if api == "chat":
                texts = openai_agent(f"{gateway.url}/e/ep/v1", "m", stream=stream)
            elif api == "responses":
                texts = responses_agent(f"{gateway.url}/e/ep/v1", "m", stream=stream)
            else:
                texts = anthropic_agent(f"{gateway.url}/e/ep", "m", stream=stream)
            gateway.book.end("ep", exit_code=0)
        finally:
            gateway.stop()
        exchanges = server.exchanges
    assert texts == ["", "one more", "1+2 is 3"]
    trajectory = recorded()["ep"]
    assert trajectory.status == "completed"
    check_against_the_server(trajectory, exchanges, api)
    # the client's key reached the server and nowhere else
    assert all(SECRET in json.dumps(e.headers) for e in exchanges)
    assert SECRET not in json.dumps(trajectory.to_dict())


def test_upstream_errors_pass_through_and_end_the_step_errored(recorded) -> None:
    with ModelServer({"m": [fail(429, "slow down"), say("ok")]}) as server:
        gateway = Gateway(GatewaySettings(upstream=server.url), "127.0.0.1", 0).start()
        try:
            client = openai.OpenAI(base_url=f"{gateway.url}/e/err/v1", api_key="k", max_retries=0)
            question = [{"role": "user", "content": "x"}]
            with pytest.raises(openai.RateLimitError) as raised:
                client.chat.completions.create(model="m", messages=question)
            assert "slow down" in str(raised.value)
            direct = server.exchanges[0]
            assert raised.value.status_code == 429
            assert raised.value.body == json.loads(json.dumps(direct.response))["error"]
            client.chat.completions.create(model="m", messages=question)
            gateway.book.end("err", exit_code=0)
        finally:
            gateway.stop()
        answered = server.exchanges[1].response["choices"][0]["message"]
    trajectory = recorded()["err"]
    first, second = trajectory.steps
    assert "upstream answered 429" in first.llm_calls[0].error
    assert "slow down" in first.llm_calls[0].error
    assert second.llm_calls[0].output_messages == [answered]  # as the server sent it


def test_token_ids_are_recorded_and_the_client_gets_what_it_asked_for(recorded) -> None:
    from model_server import token_ids

    with ModelServer({"m": [say("hello there")]}, flavor="vllm") as server:
        settings = GatewaySettings(upstream=server.url, tokens=True)
        gateway = Gateway(settings, "127.0.0.1", 0).start()
        try:
            client = openai.OpenAI(base_url=f"{gateway.url}/e/tok/v1", api_key="k", max_retries=0)
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            gateway.book.end("tok", exit_code=0)
        finally:
            gateway.stop()
        (exchange,) = server.exchanges
    assert exchange.body["return_token_ids"] is True and exchange.body["logprobs"] is True
    sent = exchange.response
    extra = reply.model_extra or {}
    assert extra.get("prompt_token_ids") is None
    assert (reply.choices[0].model_extra or {}).get("token_ids") is None
    assert reply.choices[0].logprobs is None
    (step,) = recorded()["tok"].steps
    (llm,) = step.llm_calls
    assert llm.prompt_token_ids == sent["prompt_token_ids"]
    assert llm.completion_token_ids == sent["choices"][0]["token_ids"]
    assert llm.completion_token_ids == token_ids("hello there<|end|>")
    logprobs = [item["logprob"] for item in sent["choices"][0]["logprobs"]["content"]]
    assert llm.completion_logprobs == logprobs


def test_episodes_from_headers_prefixes_and_continuity(recorded) -> None:
    with ModelServer(fallback=say("fine")) as server:
        gateway = Gateway(GatewaySettings(upstream=server.url), "127.0.0.1", 0).start()
        try:

            def ask(base: str, messages: list, **headers: str) -> None:
                client = openai.OpenAI(base_url=base, api_key="k", max_retries=0,
                                       default_headers=headers)  # fmt: skip
                client.chat.completions.create(model="m", messages=messages)

            hello = [{"role": "user", "content": "hello"}]
            ask(f"{gateway.url}/v1", hello, **{"X-Agenttrace-Episode": "by-header",
                                               "X-Agenttrace-Task": "t7"})  # fmt: skip
            ask(f"{gateway.url}/rollout/r1/attempt/a2/v1", hello)
            ask(f"{gateway.url}/sessions/s9/v1", hello)
            # no marker: a conversation that continues is one episode, another is new
            ask(f"{gateway.url}/v1", [{"role": "user", "content": "first"}])
            ask(f"{gateway.url}/v1", [{"role": "user", "content": "first"},
                                      {"role": "assistant", "content": "fine"},
                                      {"role": "user", "content": "second"}])  # fmt: skip
            ask(f"{gateway.url}/v1", [{"role": "user", "content": "other"}])
            request = urllib.request.Request(
                f"{gateway.url}/sessions/s9/reward_info",
                data=json.dumps({"reward": 0.75}).encode(),
                headers={"Content-Type": "application/json"},
            )
            assert json.loads(urllib.request.urlopen(request, timeout=10).read())["scored"]
        finally:
            gateway.stop()
    found = recorded()
    assert found["by-header"].task_id == "t7"
    assert "r1-a2" in found and "s9" in found
    assert found["s9"].return_ == 0.75
    unnamed = [t for k, t in found.items() if k not in ("by-header", "r1-a2", "s9")]
    assert sorted(len(t.steps) for t in unnamed) == [1, 2]


AGENT = textwrap.dedent(
    """
    import os, sys
    import openai
    client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from agenttrace run
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    print(reply.choices[0].message.content, os.environ["AGENTTRACE_EPISODE_ID"], flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), 9)
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.mark.parametrize(
    ("how", "code", "status"),
    [("0", 0, "completed"), ("3", 3, "errored"), ("kill", 128 + 9, "errored")],
)
def test_agenttrace_run_ends_the_episode_with_the_childs_exit(tmp_path, how, code, status) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    with ModelServer(fallback=say("going")) as server:
        done = subprocess.run(
            [sys.executable, "-m", "agenttrace", "run", "--upstream", server.url, "--task", "t1",
             "--", sys.executable, str(tmp_path / "agent.py"), how],
            env=clean_environ(AGENTTRACE_OUT=str(tmp_path / "runs"), OPENAI_API_KEY="k"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        seen = len(server.exchanges)
    assert done.returncode == code, done.stderr
    text, episode_id = done.stdout.split()
    assert text == "going" and seen == 1
    (trajectory,) = load_trajectories(sorted((tmp_path / "runs").glob("*/trajectories*.jsonl")))
    assert (trajectory.episode_id, trajectory.task_id) == (episode_id, "t1")
    assert trajectory.status == status
    assert len(trajectory.steps) == 1
    if status == "errored":
        reason = "killed by signal SIGKILL" if how == "kill" else "exit code 3"
        assert reason in trajectory.error.message


def test_a_gateway_beyond_loopback_needs_expose_and_a_key() -> None:
    settings = GatewaySettings(upstream="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="--expose"):
        Gateway(settings, "0.0.0.0", 0)
    with pytest.raises(ValueError, match="--key"):
        Gateway(settings, "0.0.0.0", 0, exposed=True)
    Gateway(GatewaySettings(upstream="http://127.0.0.1:1", key="k"), "0.0.0.0", 0, exposed=True)


def test_documented_paths(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "gateway.md").read_text()
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/e/<episode-id>/v1"):
        assert path in doc


def test_the_tokens_export_of_a_gateway_episode_joins_calls_whose_prompts_continue(
    recorded, tmp_path, capsys
) -> None:
    """Two calls of a conversation (the second prompt extends the first prompt and answer)
    make one token row, the tokens between them masked out; a third call whose history was
    rewritten starts a second row. Every id and logprob is the server's, and the summary says
    how many rows the episode became."""
    from agenttrace.cli.main import main

    with ModelServer({"m": [say("one"), say("two"), say("three")]}, flavor="vllm") as server:
        gateway = Gateway(GatewaySettings(upstream=server.url, tokens=True), "127.0.0.1", 0)
        gateway.start()
        try:
            client = openai.OpenAI(base_url=f"{gateway.url}/e/tk/v1", api_key="k", max_retries=0)
            history = [{"role": "user", "content": "count"}]
            for _ in range(2):
                reply = client.chat.completions.create(model="m", messages=history)
                history += [{"role": "assistant", "content": reply.choices[0].message.content},
                            {"role": "user", "content": "more"}]  # fmt: skip
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            gateway.book.end("tk", exit_code=0)
        finally:
            gateway.stop()
        sent = [exchange.response for exchange in server.exchanges]
    recorded()
    out = tmp_path / "tokens.jsonl"
    source = str(tmp_path / "runs" / "gw" / "spans.jsonl")
    assert main(["export", "--from", source, "--out", str(out), "--format", "tokens"]) == 0
    assert "token rows per episode: 1 episode in 2 rows" in capsys.readouterr().out
    first, second = [json.loads(line) for line in out.read_text().splitlines()]
    prompts = [answer["prompt_token_ids"] for answer in sent]
    completions = [answer["choices"][0]["token_ids"] for answer in sent]
    logprobs = [[c["logprob"] for c in a["choices"][0]["logprobs"]["content"]] for a in sent]
    gap = prompts[1][len(prompts[0]) + len(completions[0]) :]
    assert prompts[1][: len(prompts[0]) + len(completions[0])] == prompts[0] + completions[0]
    assert (first["segment"], first["prompt_ids"]) == (0, prompts[0])
    assert first["response_ids"] == completions[0] + gap + completions[1]
    assert first["loss_mask"] == [1] * len(completions[0]) + [0] * len(gap) + [1] * len(
        completions[1]
    )
    pairs = zip(first["response_logprobs"], first["loss_mask"], strict=True)
    masked = [logprob for logprob, mask in pairs if mask]
    assert masked == logprobs[0] + logprobs[1]
    assert (second["segment"], second["prompt_ids"]) == (1, prompts[2])
    assert second["response_ids"] == completions[2]


def test_an_upstream_that_does_not_answer_in_time_gives_504(recorded) -> None:
    with ModelServer({"m": [say("late", delay=3.0)]}) as server:
        settings = GatewaySettings(upstream=server.url, timeout=0.5)
        gateway = Gateway(settings, "127.0.0.1", 0).start()
        try:
            client = openai.OpenAI(base_url=f"{gateway.url}/e/slow/v1", api_key="k", max_retries=0)
            with pytest.raises(openai.APIStatusError) as raised:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
            assert raised.value.status_code == 504
            gateway.book.end("slow", exit_code=0)
        finally:
            gateway.stop()
    (step,) = recorded()["slow"].steps
    assert "did not answer" in step.llm_calls[0].error


def test_a_keyed_gateway_refuses_other_keys_and_sends_its_own_upstream(recorded) -> None:
    with ModelServer(fallback=say("ok")) as server:
        settings = GatewaySettings(upstream=server.url, key="gw-key", upstream_key="up-key")
        gateway = Gateway(settings, "127.0.0.1", 0).start()
        try:
            base = f"{gateway.url}/e/keyed/v1"
            question = [{"role": "user", "content": "x"}]
            wrong = openai.OpenAI(base_url=base, api_key="nope", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                wrong.chat.completions.create(model="m", messages=question)
            right = openai.OpenAI(base_url=base, api_key="gw-key", max_retries=0)
            assert right.chat.completions.create(model="m", messages=question).choices
        finally:
            gateway.stop()
        (exchange,) = server.exchanges
    assert exchange.headers["authorization"] == "Bearer up-key"
    assert len(recorded()["keyed"].steps) == 1


def test_a_traced_caller_s_call_joins_its_own_episode_and_step(recorded) -> None:
    from agenttrace.instrument.propagation import inject

    with ModelServer(fallback=say("joined")) as server:
        gateway = Gateway(GatewaySettings(upstream=server.url), "127.0.0.1", 0).start()
        try:
            client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="k", max_retries=0)
            with at.episode(episode_id="caller", task_id="traced"):
                for index in range(2):
                    with at.timestep():
                        headers: dict[str, str] = {}
                        inject(headers)
                        client.chat.completions.create(
                            model="m",
                            messages=[{"role": "user", "content": f"step {index}"}],
                            extra_headers=headers,
                        )
        finally:
            gateway.stop()
    found = recorded()
    assert list(found) == ["caller"]  # no episode of the gateway's own
    steps = found["caller"].steps
    assert [s.llm_calls[0].input_messages[0]["content"] for s in steps] == ["step 0", "step 1"]


def test_agenttrace_run_runs_a_batch_of_tasks(tmp_path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "tasks.txt").write_text("0\n3\n0\n")
    with ModelServer(fallback=say("going")) as server:
        done = subprocess.run(
            [sys.executable, "-m", "agenttrace", "run", "--upstream", server.url, "--tasks",
             str(tmp_path / "tasks.txt"), "--concurrency", "2", "--", sys.executable,
             str(tmp_path / "agent.py"), "{task}"],
            env=clean_environ(AGENTTRACE_OUT=str(tmp_path / "runs"), OPENAI_API_KEY="k"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        seen = len(server.exchanges)
    assert done.returncode == 1, done.stderr  # one task failed
    assert "3 episodes, 1 failed" in done.stderr
    assert seen == 3
    found = load_trajectories(sorted((tmp_path / "runs").glob("*/trajectories*.jsonl")))
    assert sorted((t.task_id, t.status) for t in found) == [
        ("0", "completed"), ("0", "completed"), ("3", "errored")
    ]  # fmt: skip


def test_the_gateway_mounted_in_collect_writes_its_episodes_there(tmp_path) -> None:
    import signal

    from test_collect import _collect_process, _free_port, _health

    port = _free_port()
    out = tmp_path / "collected"
    with ModelServer({"m": [call_tools(call("add", {"a": 2, "b": 2})), say("4")]}) as server:
        collect = _collect_process(out, port, "--gateway-upstream", server.url, "--grace", "0.3")
        try:
            texts = openai_agent(f"http://127.0.0.1:{port}/e/mounted/v1", "m", stream=True)
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/e/mounted/end",
                data=b'{"exit_code": 0}',
                headers={"Content-Type": "application/json"},
            )
            assert json.loads(urllib.request.urlopen(request, timeout=10).read())["ended"]
            assert wait_until(lambda: _health(port)["episodes_written"], timeout=30)
        finally:
            collect.send_signal(signal.SIGTERM)
            collect.wait(30)
        exchanges = server.exchanges
    assert texts == ["", "4"]
    (trajectory,) = load_trajectories(sorted(out.glob("trajectories*.jsonl")))
    assert (trajectory.episode_id, trajectory.status) == ("mounted", "completed")
    check_against_the_server(trajectory, exchanges, "chat")


def test_models_a_custom_prefix_streamed_tokens_and_time_to_first_token(recorded, tmp_path) -> None:
    """GET /v1/models passes through; a --prefix template names the episode; a streamed
    answer with tokens on reaches the client without the ids it did not ask for, and its span
    has the time to first token."""
    from agenttrace.storage import read_otlp_json

    with ModelServer({"m": [say("streamed words here")]}, flavor="vllm", models=["m"]) as server:
        settings = GatewaySettings(
            upstream=server.url, tokens=True, prefixes=("/runs/{run}/{episode}",)
        )
        gateway = Gateway(settings, "127.0.0.1", 0).start()
        try:
            client = openai.OpenAI(base_url=f"{gateway.url}/runs/r7/e3/v1", api_key="k",
                                   max_retries=0)  # fmt: skip
            assert "m" in [model.id for model in client.models.list()]
            chunks = list(
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "go"}], stream=True
                )
            )
            gateway.book.end("r7-e3", exit_code=0)
        finally:
            gateway.stop()
        streamed = [e for e in server.exchanges if e.path.endswith("/chat/completions")]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "streamed words here"
    )
    for chunk in chunks:
        assert (chunk.model_extra or {}).get("prompt_token_ids") is None
        for choice in chunk.choices:
            assert (choice.model_extra or {}).get("token_ids") is None
            assert choice.logprobs is None
    assert streamed[0].body["return_token_ids"] is True
    (step,) = recorded()["r7-e3"].steps
    assert step.llm_calls[0].completion_token_ids  # recorded all the same
    spans = list(read_otlp_json(sorted((tmp_path / "runs" / "gw").glob("spans*.jsonl"))))
    (chat,) = [s for s in spans if s.name.startswith("chat")]
    first_event, latency = (chat.attributes[f"agenttrace.gateway.{key}"]
                            for key in ("first_event_ms", "latency_ms"))  # fmt: skip
    assert 0 < first_event <= latency < 10_000
    assert chat.attributes["agenttrace.gateway.streamed"] is True


def test_agenttrace_run_uses_a_running_gateway(tmp_path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    with ModelServer(fallback=say("going")) as server:
        gateway_process = subprocess.Popen(
            [sys.executable, "-m", "agenttrace", "gateway", "--upstream", server.url,
             "--listen", "127.0.0.1:0"],
            env=clean_environ(AGENTTRACE_OUT=str(tmp_path / "gateway-runs")),
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            line = gateway_process.stderr.readline()
            url = line.split()[2]  # "agenttrace gateway: http://127.0.0.1:PORT -> ..."
            done = subprocess.run(
                [sys.executable, "-m", "agenttrace", "run", "--gateway", url, "--task", "t2",
                 "--", sys.executable, str(tmp_path / "agent.py"), "0"],
                env=clean_environ(AGENTTRACE_OUT=str(tmp_path / "run-runs"), OPENAI_API_KEY="k"),
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        finally:
            gateway_process.send_signal(subprocess.signal.SIGTERM)
            gateway_process.wait(60)
    assert done.returncode == 0, done.stderr
    (trajectory,) = load_trajectories(
        sorted((tmp_path / "gateway-runs").glob("*/trajectories*.jsonl"))
    )
    assert (trajectory.task_id, trajectory.status, len(trajectory.steps)) == ("t2", "completed", 1)
    assert not list((tmp_path / "run-runs").glob("*/trajectories*.jsonl"))  # the gateway's
