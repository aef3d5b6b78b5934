"""Agents no one here instrumented, recorded through ``agenttrace run -- CMD`` (issue 33).

Each agent is a program of its own that knows nothing of agenttrace: it finds its model
endpoint in the variable its SDK reads by itself (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``,
which ``agenttrace run`` points at its gateway), runs a tool loop (an ``add`` function tool,
executed locally, its results sent back) until an answer without tool calls, and exits:

- a Node.js script on the official ``openai`` npm package (gateway_agents/openai_agent.mjs);
- a Node.js script on the official ``@anthropic-ai/sdk`` (gateway_agents/anthropic_agent.mjs);
- a Python script on the official ``anthropic`` SDK (gateway_agents/anthropic_agent.py);
- ``llm``, Simon Willison's CLI from PyPI, unmodified: its ``--functions`` tool loop on an
  OpenAI-compatible model declared in its own ``extra-openai-models.yaml`` (no ``api_base``:
  the ``openai`` client inside it reads ``OPENAI_BASE_URL``).

Each runs streamed and not, against the scripted model server (tests/model_server.py) on
127.0.0.1, each with its own script key (its model name). The server's record of what it
received and answered is the independent truth: every call it saw is one step, in order, with
the messages it received (Anthropic's read as chat messages), the answer and tool calls it
sent, and the results the agent sent back in its next request; the agent's own record (its
JSON line, or ``llm logs``) agrees. The episode's status follows the exit code.

The npm packages are installed with ``npm ci`` from the committed package-lock.json once per
lock file, as tests/test_collect_node.py does; the Node agents skip only when ``node`` or
``npm`` is missing, and fail instead under ``AGENTTRACE_REQUIRE_NODE=1`` (.ci/run).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_environ
from model_server import ModelServer, call, call_tools, fail, say
from node_packages import installed_node_modules
from test_gateway import check_against_the_server

from agenttrace.instrument.llm_anthropic import anthropic_messages
from agenttrace.reading import load_trajectories

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(300)

AGENTS = Path(__file__).parent / "gateway_agents"
SECRET = "sk-gateway-agents-5c2d"
QUESTION = "what are 1+2, 3+4 and 5+6?"
#: Every agent's script: two tool calls at once, one more after some text, then the answer.
SCRIPT = [
    call_tools(call("add", {"a": 1, "b": 2}), call("add", {"a": 3, "b": 4})),
    call_tools(call("add", {"a": 5, "b": 6}), text="one more"),
    say("3, 7 and 11"),
]
ANSWERS = ["", "one more", "3, 7 and 11"]
LLM_TOOL = 'def add(a: int, b: int) -> int:\n    "add two numbers"\n    return a + b\n'


@pytest.fixture(scope="session")
def node_modules(request, tmp_path_factory) -> Path:
    """The agents' node_modules (tests/node_packages.py)."""
    return installed_node_modules(request, tmp_path_factory, AGENTS, "the Node.js agents")


def agenttrace_run(tmp_path: Path, upstream: str, task: str, command: list[str], **env: str):
    """``agenttrace run --upstream ... --task ... -- command``; its output and the one
    trajectory it wrote."""
    out = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "agenttrace", "run", "--upstream", upstream, "--task", task,
         "--", *command],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=clean_environ(AGENTTRACE_OUT=str(out), OPENAI_API_KEY=SECRET,
                          ANTHROPIC_API_KEY=SECRET, **env),
    )  # fmt: skip
    files = sorted(out.glob("*/trajectories*.jsonl"))
    assert files, f"no trajectory written:\n{done.stderr[-3000:]}"
    assert not any(SECRET in path.read_text() for path in files)  # the key is never recorded
    (trajectory,) = load_trajectories(files)
    return done, trajectory


def results_sent(exchange, api: str) -> dict[str, str]:
    """The tool results a request carried, by call id, as the server received them."""
    body = exchange.body
    if api == "chat":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    return {
        block["tool_use_id"]: block["content"]
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


def check_run(trajectory, exchanges, api: str, record: dict, *, streamed: bool) -> None:
    """The server's record against the trajectory, and the agent's own record against both."""
    assert all(e.stream is streamed and e.status == 200 for e in exchanges)
    assert [e.turn for e in exchanges] == SCRIPT  # the whole script, nothing after it
    check_against_the_server(trajectory, exchanges, api)
    assert record["answers"] == ANSWERS
    # each tool call as the server sent it, with the result the next request carried
    joined = []
    for step, exchange, following in zip(
        trajectory.steps, exchanges, [*exchanges[1:], None], strict=True
    ):
        sent = results_sent(following, api) if following is not None else {}
        asked = [(c.name, json.loads(c.arguments)) for c in exchange.turn.tool_calls]
        assert [(t.name, json.loads(t.arguments)) for t in step.tool_calls] == asked
        for tool in step.tool_calls:
            assert tool.result == sent[tool.call_id]
            joined.append((tool.call_id, tool.name, json.loads(tool.arguments), tool.result))
    assert len(joined) == 3
    mine = [(c["id"], c["name"], json.loads(c["arguments"]), c["result"])
            for c in record["tool_calls"]]  # fmt: skip
    assert mine == joined


def check_exit(done, trajectory, code: int, task: str) -> None:
    assert done.returncode == code, done.stderr[-3000:]
    assert trajectory.task_id == task
    if code == 0:
        assert (trajectory.status, trajectory.error) == ("completed", None)
    else:
        assert trajectory.status == "errored"
        assert f"exit code {code}" in trajectory.error.message


def run_script_agent(tmp_path, command: list[str], model: str, mode: str, code: int):
    """One script agent through ``agenttrace run``: its trajectory, the server's exchanges
    and the agent's own record."""
    with ModelServer({model: list(SCRIPT)}, fallback=None) as server:
        done, trajectory = agenttrace_run(
            tmp_path, server.url, f"task-{model}",
            [*command, model, mode, str(code), QUESTION],
        )  # fmt: skip
        exchanges, errors = server.exchanges, server.errors
    assert errors == []
    assert all(e.key == model for e in exchanges)
    assert all(SECRET in json.dumps(e.headers) for e in exchanges)  # passed through
    check_exit(done, trajectory, code, f"task-{model}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["episode"] == trajectory.episode_id
    return trajectory, exchanges, record


def node_agent(tmp_path: Path, node_modules: Path, script: str) -> list[str]:
    # the script next to the installed SDK (ES modules find packages only by folder)
    shutil.copy(AGENTS / script, tmp_path)
    (tmp_path / "node_modules").symlink_to(node_modules, target_is_directory=True)
    return ["node", str(tmp_path / script)]


MODES = [("whole", 0), ("streamed", 3)]


@pytest.mark.parametrize(("mode", "code"), MODES)
def test_node_openai_agent(tmp_path, node_modules, mode, code) -> None:
    command = node_agent(tmp_path, node_modules, "openai_agent.mjs")
    found = run_script_agent(tmp_path, command, "node-openai", mode, code)
    trajectory, exchanges, record = found
    assert all(e.route == "chat/completions" for e in exchanges)
    check_run(trajectory, exchanges, "chat", record, streamed=mode == "streamed")


@pytest.mark.parametrize(("mode", "code"), MODES)
def test_node_anthropic_agent(tmp_path, node_modules, mode, code) -> None:
    command = node_agent(tmp_path, node_modules, "anthropic_agent.mjs")
    trajectory, exchanges, record = run_script_agent(
        tmp_path, command, "node-anthropic", mode, code
    )
    assert all(e.route == "messages" for e in exchanges)
    check_run(trajectory, exchanges, "messages", record, streamed=mode == "streamed")


@pytest.mark.parametrize(("mode", "code"), [("streamed", 0), ("whole", 4)])
def test_python_anthropic_agent(tmp_path, mode, code) -> None:
    pytest.importorskip("anthropic")
    command = [sys.executable, str(AGENTS / "anthropic_agent.py")]
    trajectory, exchanges, record = run_script_agent(tmp_path, command, "py-anthropic", mode, code)
    assert all(e.route == "messages" for e in exchanges)
    check_run(trajectory, exchanges, "messages", record, streamed=mode == "streamed")
    # the Anthropic request, read as chat messages, is what the step holds
    first = exchanges[0].body
    assert trajectory.steps[0].llm_calls[0].input_messages == anthropic_messages(
        first["system"], first["messages"]
    )


def llm_command(tmp_path: Path, model: str, *options: str) -> tuple[list[str], dict[str, str]]:
    """``llm`` with an OpenAI-compatible model of its own configuration: no ``api_base``, so
    its ``openai`` client reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``."""
    home = tmp_path / "llm"
    home.mkdir()
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: gateway-agent\n  model_name: {model}\n  supports_tools: true\n"
    )
    command = [sys.executable, "-m", "llm", "prompt", "-m", "gateway-agent", "-s", "be exact",
               "--functions", LLM_TOOL, *options, QUESTION]  # fmt: skip
    return command, {"LLM_USER_PATH": str(home)}


def llm_record(env: dict[str, str]) -> dict:
    """What ``llm`` logged of its own run (``llm logs --json``), in the scripts' record form."""
    done = subprocess.run(
        [sys.executable, "-m", "llm", "logs", "list", "--json", "-n", "0"],
        env=clean_environ(**env), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    responses = json.loads(done.stdout)
    results = {r["tool_call_id"]: r["output"] for x in responses for r in x["tool_results"]}
    return {
        "answers": [x["response"] for x in responses],
        "tool_calls": [
            {"id": c["tool_call_id"], "name": c["name"], "arguments": json.dumps(c["arguments"]),
             "result": results.get(c["tool_call_id"])}
            for x in responses for c in x["tool_calls"]
        ],
    }  # fmt: skip


def test_llm_cli_agent(tmp_path) -> None:
    pytest.importorskip("llm")
    command, env = llm_command(tmp_path, "llm-cli")
    with ModelServer({"llm-cli": list(SCRIPT)}, fallback=None) as server:
        done, trajectory = agenttrace_run(tmp_path, server.url, "task-llm", command, **env)
        exchanges, errors = server.exchanges, server.errors
    assert errors == []
    check_exit(done, trajectory, 0, "task-llm")
    assert " ".join(done.stdout.split()) == "one more 3, 7 and 11"  # the texts it printed
    assert all(e.key == "llm-cli" and e.route == "chat/completions" for e in exchanges)
    check_run(trajectory, exchanges, "chat", llm_record(env), streamed=True)


def test_llm_cli_agent_ending_on_an_upstream_error(tmp_path) -> None:
    """Not streamed; the model server refuses its second call (400, which the openai client
    does not retry): llm exits 1, its episode errored with the code, the call's step errored
    and the first step's tool calls joined with the results that refused request carried."""
    pytest.importorskip("llm")
    command, env = llm_command(tmp_path, "llm-cli", "--no-stream")
    script = [SCRIPT[0], fail(400, "the context is too long")]
    with ModelServer({"llm-cli": script}, fallback=None) as server:
        done, trajectory = agenttrace_run(tmp_path, server.url, "task-llm", command, **env)
        exchanges, errors = server.exchanges, server.errors
    assert errors == []
    check_exit(done, trajectory, 1, "task-llm")
    assert "the context is too long" in done.stderr
    assert [(e.stream, e.status) for e in exchanges] == [(False, 200), (False, 400)]
    first, refused = exchanges
    answered = dataclasses.replace(trajectory, steps=trajectory.steps[:1])
    check_against_the_server(answered, [first], "chat")
    assert [(t.call_id, t.result) for t in trajectory.steps[0].tool_calls] == list(
        results_sent(refused, "chat").items()
    )
    last = trajectory.steps[1]
    (llm,) = last.llm_calls
    assert llm.input_messages == refused.body["messages"]
    assert "upstream answered 400" in llm.error and "the context is too long" in llm.error
    assert last.tool_calls == []
