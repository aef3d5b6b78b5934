"""The ``openai`` extra alone, in a fresh venv, gives LLM calls in trajectories.

The ``test`` extra installs httpx, which hides what the ``openai`` extra lacks on its own:
opentelemetry-instrumentation-openai-v2 2.4b0 imports ``httpx`` without requiring it, and
openai 3.x depends on ``httpx2`` instead, so with only the extra installed
``opentelemetry-instrument`` skipped the OpenAI instrumentation without a word and every
trajectory's ``llm_calls`` stayed empty. Here a new venv gets ``.[openai]`` and nothing else
(a regular install, as ``pip install 'otel-agenttrace[openai]'`` in docs/llm-calls.md), and a
script using the real ``openai`` client inside an agenttrace episode runs under
``opentelemetry-instrument`` against an OpenAI-compatible server on 127.0.0.1 that this file
starts and stops. The settings are the ones docs/llm-calls.md gives, and the variants it
warns about are run too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fresh_venv import Venv, venv_for
from test_openai_genai import ChatServer, serve_chat

import agenttrace as at
from agenttrace.sinks import load_trajectories

OPENAI_EXTRA = "python3 -m pip install '.[openai]'"
RUN_TIMEOUT = 120.0  # seconds; a run takes about 3

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = """\
import os

import openai

import agenttrace as at

client = openai.OpenAI(base_url=os.environ["CHAT_URL"], api_key="test-key", max_retries=0)
messages = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "What is 2 + 2?"},
]
with at.episode(task_id="openai-extra"):
    with at.timestep() as step:
        reply = client.chat.completions.create(model="gpt-test", messages=messages)
        step.record(action=reply.choices[0].message.content, reward=1.0, terminated=True)
"""

#: docs/llm-calls.md, "Setup" and "Under opentelemetry-instrument".
DOCUMENTED = {
    "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    "OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider",
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return venv_for(OPENAI_EXTRA, tmp_path_factory)


server = pytest.fixture(serve_chat, name="server")


def run_episode(
    venv: Venv, server: ChatServer, tmp_path: Path, **settings: str | None
) -> tuple[at.Trajectory, str]:
    """SCRIPT under ``opentelemetry-instrument`` in the venv, with the documented settings
    changed by ``settings`` (None: unset); its one trajectory and its stderr."""
    (tmp_path / "episode.py").write_text(SCRIPT)
    variables = {**DOCUMENTED, **settings}
    env = venv.environment(
        AGENTTRACE_OUT=str(tmp_path / "runs"),
        CHAT_URL=server.base_url,
        **{k: v for k, v in variables.items() if v is not None},
    )
    done = venv.run(
        "opentelemetry-instrument python episode.py", tmp_path, env=env, timeout=RUN_TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (trajectory,) = load_trajectories(sorted((tmp_path / "runs").glob("*/trajectories*.jsonl")))
    assert (trajectory.task_id, trajectory.status) == ("openai-extra", "completed")
    assert len(server.exchanges) == 1, "the client reached the server once"
    return trajectory, done.stderr


def test_the_extra_alone_has_what_openai_v2_imports(venv: Venv, tmp_path: Path) -> None:
    imports = "import httpx, openai, opentelemetry.instrumentation.openai_v2"
    done = venv.run(f"python -c '{imports}'\npython -m pip check", tmp_path, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_llm_calls_carry_the_request_and_response_messages(
    venv: Venv, server: ChatServer, tmp_path: Path
) -> None:
    trajectory, _ = run_episode(venv, server, tmp_path)
    (exchange,) = server.exchanges
    (step,) = trajectory.steps
    (call,) = step.llm_calls
    assert call.input_messages == exchange["request"]["messages"]
    assert call.output_messages == [exchange["response"]["choices"][0]["message"]]
    assert step.action == exchange["response"]["choices"][0]["message"]["content"]
    assert call.model == exchange["response"]["model"]
    assert call.attributes["gen_ai.request.model"] == exchange["request"]["model"] == "gpt-test"
    assert call.finish_reasons == ["stop"]
    usage = exchange["response"]["usage"]
    assert (call.input_tokens, call.output_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )


def test_the_old_boolean_content_setting_records_no_messages(
    venv: Venv, server: ChatServer, tmp_path: Path
) -> None:
    """docs/llm-calls.md: ``true`` is rejected with a warning and means ``no_content``."""
    trajectory, stderr = run_episode(
        venv, server, tmp_path, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"
    )
    assert "true is not a valid option" in stderr
    (call,) = trajectory.steps[0].llm_calls
    assert call.input_messages is None and call.output_messages is None
    assert call.finish_reasons == ["stop"] and call.output_tokens  # the rest is there


def test_without_an_sdk_tracer_provider_llm_calls_stay_empty(
    venv: Venv, server: ChatServer, tmp_path: Path
) -> None:
    """docs/llm-calls.md: without ``OTEL_PYTHON_TRACER_PROVIDER=sdk_tracer_provider`` (or a
    distro) openai-v2's spans go to the API's proxy provider and never reach agenttrace."""
    trajectory, _ = run_episode(venv, server, tmp_path, OTEL_PYTHON_TRACER_PROVIDER=None)
    assert trajectory.steps[0].llm_calls == []
