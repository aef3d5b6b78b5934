"""examples/http_interactor: an unmodified Safactory-style Interactor traced by configuration.

The example runs as its README says (``./run.sh`` under ``opentelemetry-instrument``, with its
own scripted LLM server and aiohttp env server on 127.0.0.1), once for the whole module. Its
SQLite rows are the reference: every trajectory agenttrace wrote must carry the same per-step
fields. ``AGENTTRACE_PROPAGATE`` carries each episode through the thread pool and the HTTP hop,
so the env server's own spans (a second process, its own span file) join the episode and step;
the offline rebuild from both span files is the live trajectory plus the server's side.

Every check runs twice: on a run in this interpreter (``here``, with options), and on a run of
exactly the commands the README prints, in a fresh venv where only its install command ran
(``readme``, tests/fresh_venv.py), so a dependency the install command misses fails here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_episodes, exported
from fresh_venv import HERE_AND_README, run_readme

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.records import SpanRecord

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "http_interactor"
EPISODES = 8  # run.sh's default, and what the run here asks for
POLICY_VERSION = "ckpt-test-0042"  # the run here
DEFAULT_POLICY_VERSION = "ckpt-0007"  # the README's run (its Options: the default)
API_KEY = "sk-http-interactor-test-5e1f0c"


@dataclass
class ExampleRun:
    policy_version: str  # what the run was asked to serve
    stderr: str
    out: Path
    sessions: dict[str, dict[str, Any]]  # by task_id
    rows: dict[str, list[dict[str, Any]]]  # by task_id, in step order
    live: list[at.Trajectory]
    offline: list[at.Trajectory]
    client_spans: list[SpanRecord]  # the Interactor's span file
    server_spans: list[SpanRecord]  # the env server's (its own process and run folder)


def example_environment(out: Path) -> dict[str, str]:
    """The caller's environment without agenttrace/OpenTelemetry settings, plus the run's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    path = os.pathsep.join([str(Path(sys.executable).parent), str(Path(instrument).parent)])
    env.update(
        AGENTTRACE_OUT=str(out),
        PYTHON=sys.executable,
        OPENAI_API_KEY=API_KEY,
        PATH=path + os.pathsep + env.get("PATH", ""),
    )
    return env


def run_example(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``./run.sh ARGS`` in the example folder; its whole process group is killed at the end."""
    process = subprocess.Popen(
        ["./run.sh", *args],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the env server too, if anything hung
        if process.poll() is None:
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def read_rows(db: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    connection = sqlite3.connect(db)
    connection.row_factory = sqlite3.Row
    try:
        sessions = [dict(r) for r in connection.execute("SELECT * FROM sessions")]
        steps = [dict(r) for r in connection.execute("SELECT * FROM steps ORDER BY step_id")]
    finally:
        connection.close()
    task_of = {s["session_id"]: s["task_id"] for s in sessions}
    rows: dict[str, list[dict[str, Any]]] = {s["task_id"]: [] for s in sessions}
    for step in steps:
        rows[task_of[step["session_id"]]].append(step)
    return {s["task_id"]: s for s in sessions}, rows


@pytest.fixture(
    scope="module",
    params=HERE_AND_README,
)
def example_run(request, tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    if request.param == "readme":
        return run_from_readme(tmp_path_factory)
    return run_here(tmp_path_factory)


def run_from_readme(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    """The README's commands, from the root of a copy of the repository, in a fresh venv
    (with an API key in the environment, to look for it in the files)."""
    root, done = run_readme(
        "http_interactor", tmp_path_factory, timeout=120, kill_group=True, OPENAI_API_KEY=API_KEY
    )
    here = root / "examples" / "http_interactor"
    return collect(DEFAULT_POLICY_VERSION, done, here / "agenttrace_runs", here / "rollouts.sqlite")


def run_here(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    """``./run.sh`` with options in this interpreter (AGENTTRACE_OUT under tmp)."""
    tmp = tmp_path_factory.mktemp("http_interactor")
    out, db = tmp / "runs", tmp / "rollouts.sqlite"
    args = ["--episodes", str(EPISODES), "--policy-version", POLICY_VERSION, "--db", str(db)]
    done = run_example(args, example_environment(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return collect(POLICY_VERSION, done, out, db)


def collect(
    policy_version: str, done: subprocess.CompletedProcess, out: Path, db: Path
) -> ExampleRun:
    """What a finished run left: SQLite rows, trajectories and both processes' spans."""
    assert f"{EPISODES} episodes" in done.stdout
    sessions, rows = read_rows(db)
    live = load_trajectories(sorted(out.glob("*/trajectories*.jsonl")))
    offline = at.assemble(read_otlp_json(sorted(out.glob("*/spans*.jsonl"))))
    per_process = [list(read_otlp_json(sorted(d.glob("spans*.jsonl")))) for d in out.iterdir()]
    assert len(per_process) == 2, "one run folder per process: the Interactor, the env server"
    (client,) = [r for r in per_process if any(s.name == sc.EPISODE for s in r)]
    (server,) = [r for r in per_process if r is not client]
    return ExampleRun(
        policy_version, done.stderr, out, sessions, rows, live, offline, client, server
    )


def by_task(trajectories: list[at.Trajectory]) -> dict[str, at.Trajectory]:
    found = {t.task_id: t for t in trajectories}
    assert len(found) == len(trajectories), "one trajectory per task"
    return found


def test_every_target_resolves_and_every_episode_is_recorded(example_run: ExampleRun) -> None:
    assert "not instrumented" not in example_run.stderr  # a target failed to resolve
    assert "Traceback" not in example_run.stderr
    assert len(example_run.sessions) == EPISODES
    versions = {s["policy_version"] for s in example_run.sessions.values()}
    assert versions == {example_run.policy_version}
    assert sorted(by_task(example_run.live)) == sorted(example_run.sessions)
    # The run covers each way an episode ends (from the rows, whatever the script does).
    last_rows = [rows[-1] for rows in example_run.rows.values()]
    assert any(not r["is_trainable"] for r in last_rows), "an episode ended by length"
    assert any(r["truncated"] and r["is_trainable"] for r in last_rows), "an env truncation"
    assert any(r["terminated"] and not r["truncated"] for r in last_rows), "a solved task"


def test_each_step_carries_its_sqlite_row(example_run: ExampleRun) -> None:
    trajectories = by_task(example_run.live)
    for task_id, rows in example_run.rows.items():
        trajectory = trajectories[task_id]
        session = example_run.sessions[task_id]
        assert trajectory.missing_steps == []
        assert [s.index for s in trajectory.steps] == [r["step_id"] for r in rows]
        assert trajectory.length == len(rows)
        assert trajectory.return_ == pytest.approx(sum(r["step_reward"] for r in rows))
        for step, row in zip(trajectory.steps, rows, strict=True):
            messages, response = json.loads(row["messages"]), row["response"]
            env_state = None if row["env_state"] is None else json.loads(row["env_state"])
            assert step.observation == messages
            assert step.action["content"] == response
            assert step.reward == row["step_reward"]
            assert step.terminated is bool(row["terminated"])
            assert step.truncated is bool(row["truncated"])
            assert step.info == {"env_state": env_state, "is_trainable": bool(row["is_trainable"])}
            (call,) = step.llm_calls
            assert call.input_messages == messages
            assert call.output_messages == [{"role": "assistant", "content": response}]
            assert call.model == session["policy_version"]
            assert call.attributes[sc.GEN_AI_REQUEST_MODEL] == session["policy_version"]
            assert (call.finish_reasons == ["length"]) is not bool(row["is_trainable"])


def test_length_ends_the_episode_with_reward_zero_terminated_and_truncated(
    example_run: ExampleRun,
) -> None:
    trajectories = by_task(example_run.live)
    for task_id, rows in example_run.rows.items():
        trajectory = trajectories[task_id]
        reasons = [step.llm_calls[0].finish_reasons for step in trajectory.steps]
        assert ["length"] not in reasons[:-1], "a cut reply is always the episode's last step"
        last = trajectory.steps[-1]
        if reasons[-1] == ["length"]:
            assert (last.reward, last.terminated, last.truncated) == (0.0, True, True)
            assert (rows[-1]["step_reward"], rows[-1]["terminated"], rows[-1]["truncated"]) == (
                0.0,
                1,
                1,
            )
            assert trajectory.status == sc.STATUS_COMPLETED  # terminated wins
        elif last.terminated:
            assert trajectory.status == sc.STATUS_COMPLETED
        else:
            assert last.truncated
            assert trajectory.status == sc.STATUS_TRUNCATED


def test_policy_version_lands_in_the_trajectory_attributes(example_run: ExampleRun) -> None:
    for trajectory in [*example_run.live, *example_run.offline]:
        session = example_run.sessions[trajectory.task_id]
        assert trajectory.attributes[sc.POLICY_VERSION] == session["policy_version"]
        assert session["policy_version"] == example_run.policy_version


def test_env_server_spans_carry_the_episode_and_step(example_run: ExampleRun) -> None:
    """The env actor's request leaves the episode's task for a pool thread, then the process;
    the env server's env.reset and env.step spans still carry the episode id and step index,
    and hang under the Interactor's timestep in the episode's trace."""
    trajectories = by_task(example_run.live)
    server = example_run.server_spans
    assert {r.name for r in server} == {sc.ENV_RESET, sc.ENV_STEP}  # no episode runs there
    timesteps = {
        (r.attributes[sc.EPISODE_ID], r.attributes[sc.TIMESTEP_INDEX]): r
        for r in example_run.client_spans
        if r.name == sc.TIMESTEP
    }
    for task_id, rows in example_run.rows.items():
        trajectory = trajectories[task_id]
        trace_id = int(trajectory.trace_id, 16)
        mine = [r for r in server if r.attributes.get(sc.EPISODE_ID) == trajectory.episode_id]
        (reset,) = [r for r in mine if r.name == sc.ENV_RESET]
        assert reset.trace_id == trace_id and sc.TIMESTEP_INDEX not in reset.attributes
        steps = sorted(
            (r for r in mine if r.name == sc.ENV_STEP),
            key=lambda r: r.attributes[sc.TIMESTEP_INDEX],
        )
        stepped = [row for row in rows if row["is_trainable"]]  # a cut reply never reaches it
        assert [r.attributes[sc.TIMESTEP_INDEX] for r in steps] == [r["step_id"] for r in stepped]
        for record, row in zip(steps, stepped, strict=True):
            timestep = timesteps[(trajectory.episode_id, row["step_id"])]
            assert (record.trace_id, record.parent_span_id) == (trace_id, timestep.span_id)
            assert record.parent_is_remote
            assert json.loads(record.attributes[sc.ACTION]) == row["response"]
            assert record.attributes[sc.REWARD] == row["step_reward"]
            info = json.loads(record.attributes[sc.INFO])
            assert info == {"env_state": json.loads(row["env_state"])}
            following = row["step_id"] + 1
            if following < len(rows):  # the env's reply is the last message of the next prompt
                feedback = json.loads(rows[following]["messages"])[-1]
                assert feedback == {"role": "user", "content": env_observation(record)}
    joined = {r.attributes.get(sc.EPISODE_ID) for r in server}
    assert joined == {t.episode_id for t in example_run.live}  # every server span joined one


def env_observation(record: SpanRecord) -> Any:
    return json.loads(record.attributes[sc.OBSERVATION])


def test_offline_rebuild_from_all_span_files_is_live_plus_the_server_side(
    example_run: ExampleRun,
) -> None:
    """Live, the Interactor writes what its own process saw. Rebuilt from both span files, a
    step the env played also has the env.step span: its action (the reply text the env
    received) wins over agent.act's ``{"content", "finish_reason"}``, and the final
    observation is the env's last reply. Everything else is the same."""
    live = {t.episode_id: t for t in example_run.live}
    server_steps = {
        (r.attributes[sc.EPISODE_ID], r.attributes[sc.TIMESTEP_INDEX]): r
        for r in example_run.server_spans
        if r.name == sc.ENV_STEP
    }
    assert sorted(t.episode_id for t in example_run.offline) == sorted(live)
    for rebuilt in example_run.offline:
        trajectory = live[rebuilt.episode_id]
        rows = example_run.rows[trajectory.task_id]
        steps = [
            dataclasses.replace(step, action=row["response"]) if row["is_trainable"] else step
            for step, row in zip(trajectory.steps, rows, strict=True)
        ]
        last = server_steps.get((trajectory.episode_id, trajectory.steps[-1].index))
        final = None if last is None else env_observation(last)
        assert (last is None) is (not rows[-1]["is_trainable"])
        assert rebuilt == dataclasses.replace(trajectory, steps=steps, final_observation=final)
        assert rebuilt.status != sc.STATUS_INCOMPLETE and not rebuilt.missing_steps


def test_the_api_key_is_never_recorded(example_run: ExampleRun) -> None:
    files = [p for p in example_run.out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert API_KEY not in path.read_text(errors="replace"), path


def test_export_of_both_processes_span_files_equals_the_offline_rebuild(
    example_run: ExampleRun, tmp_path: Path
) -> None:
    """The files are read one process after the other, so the server's spans of an episode
    come long after the episode ended: ``--grace all`` holds episodes until the end."""
    source = str(example_run.out / "*" / "spans*.jsonl")
    rebuilt = exported(source, tmp_path / "exported.jsonl", "--grace", "all")
    assert_same_episodes(example_run.offline, rebuilt)
