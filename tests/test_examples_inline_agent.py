"""examples/inline_agent: an agent loop written inline, traced by its episode, model-call and
env-step methods only, its code put on sys.path by its own launcher after agenttrace started.

The example's SQLite rows are the reference: every step of every trajectory must carry its
row's action, reward, terminated, truncated, prompt messages and finish reason, including the
turn whose reply was cut (no env step; the runner records reward 0, terminated, truncated).
The run happens with each targets file: ``agenttrace.toml`` (targets only) and
``agenttrace-record.toml`` (plus ``step.record`` on the runner's record call); the first also
as the README prints it, in a fresh venv.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_episodes, exported
from fresh_venv import run_readme

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inline_agent"
EPISODES = 9  # run.sh's default


@dataclass
class ExampleRun:
    targets: str  # the targets file
    stdout: str
    stderr: str
    out: Path
    rows: dict[str, list[dict[str, Any]]]  # by task_id, in step order
    live: list[at.Trajectory]


def read_rows(db: Path) -> dict[str, list[dict[str, Any]]]:
    connection = sqlite3.connect(db)
    connection.row_factory = sqlite3.Row
    try:
        sessions = {
            r["session_id"]: r["task_id"] for r in connection.execute("SELECT * FROM sessions")
        }
        steps = [dict(r) for r in connection.execute("SELECT * FROM steps ORDER BY step_id")]
    finally:
        connection.close()
    rows: dict[str, list[dict[str, Any]]] = {task: [] for task in sessions.values()}
    for step in steps:
        rows[sessions[step["session_id"]]].append(step)
    return rows


def run_here(targets: str, tmp: Path) -> ExampleRun:
    """``TARGETS=<file> ./run.sh`` in this interpreter (AGENTTRACE_OUT under tmp)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.pop("PYTHONPATH", None)  # nothing but the launcher makes inline_agent importable
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    env.update(
        AGENTTRACE_OUT=str(tmp / "runs"),
        PYTHON=sys.executable,
        TARGETS=targets,
        PATH=os.pathsep.join([str(Path(instrument).parent), env.get("PATH", "")]),
    )
    done = subprocess.run(
        ["./run.sh", "--db", str(tmp / "rollouts.sqlite")],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return collect(targets, done, tmp / "runs", tmp / "rollouts.sqlite")


def collect(targets: str, done: subprocess.CompletedProcess, out: Path, db: Path) -> ExampleRun:
    assert f"{EPISODES} episodes" in done.stdout
    live = load_trajectories(sorted(out.glob("*/trajectories*.jsonl")))
    return ExampleRun(targets, done.stdout, done.stderr, out, read_rows(db), live)


@pytest.fixture(
    scope="module",
    params=[
        "agenttrace.toml",
        "agenttrace-record.toml",
        pytest.param("readme", marks=[pytest.mark.slow, pytest.mark.timeout(900)]),
    ],
)
def example_run(request, tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    if request.param == "readme":
        root, done = run_readme("inline_agent", tmp_path_factory, timeout=120)
        here = root / "examples" / "inline_agent"
        return collect("agenttrace.toml", done, here / "agenttrace_runs", here / "rollouts.sqlite")
    return run_here(request.param, tmp_path_factory.mktemp("inline_agent"))


def by_task(trajectories: list[at.Trajectory]) -> dict[str, at.Trajectory]:
    found = {t.task_id: t for t in trajectories}
    assert len(found) == len(trajectories), "one trajectory per task"
    return found


def test_the_code_is_importable_only_through_its_launcher() -> None:
    """So the targets resolve only when launch.py imports the module, after start-up."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", "import inline_agent"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "No module named 'inline_agent'" in done.stderr


def test_every_target_takes_effect_and_every_episode_is_recorded(example_run: ExampleRun) -> None:
    assert "never took effect" not in example_run.stderr
    assert "never called" not in example_run.stderr
    assert "Traceback" not in example_run.stderr
    assert len(example_run.rows) == EPISODES
    assert sorted(by_task(example_run.live)) == sorted(example_run.rows)
    # The run covers each way an episode ends (from the rows, whatever the script does).
    last_rows = [rows[-1] for rows in example_run.rows.values()]
    assert any(r["finish_reason"] == "length" for r in last_rows), "a reply cut by length"
    assert any(r["truncated"] and r["is_trainable"] for r in last_rows), "an env truncation"
    assert any(r["terminated"] and not r["truncated"] for r in last_rows), "a solved task"


def test_each_step_equals_its_row(example_run: ExampleRun) -> None:
    trajectories = by_task(example_run.live)
    record = example_run.targets == "agenttrace-record.toml"
    for task_id, rows in example_run.rows.items():
        trajectory = trajectories[task_id]
        assert trajectory.missing_steps == []
        assert [s.index for s in trajectory.steps] == [r["step_id"] - 1 for r in rows]
        assert trajectory.length == len(rows)
        assert trajectory.return_ == pytest.approx(sum(r["step_reward"] for r in rows))
        for step, row in zip(trajectory.steps, rows, strict=True):
            messages, response = json.loads(row["messages"]), row["response"]
            assert step.action == response
            assert step.reward == row["step_reward"]
            assert step.terminated is bool(row["terminated"])
            assert step.truncated is bool(row["truncated"])
            (call,) = step.llm_calls
            assert call.input_messages == messages
            assert call.output_messages == [{"role": "assistant", "content": response}]
            assert call.finish_reasons == [row["finish_reason"]]
            # The engine counts words as tokens; the usage of the returned dict is recorded.
            assert call.output_tokens == len(response.split())
            assert call.input_tokens == sum(len(m["content"].split()) for m in messages)
            if record or step.index == 0:
                assert step.observation == messages
            else:  # the env's last hint: the last message of this step's prompt
                assert step.observation == messages[-1]["content"]


def test_a_cut_reply_is_a_step_of_its_own_that_ends_the_episode(example_run: ExampleRun) -> None:
    trajectories = by_task(example_run.live)
    cut = [task for task, rows in example_run.rows.items() if rows[-1]["finish_reason"] == "length"]
    assert cut
    for task_id in cut:
        trajectory = trajectories[task_id]
        last = trajectory.steps[-1]
        assert (last.reward, last.terminated, last.truncated) == (0.0, True, True)
        assert trajectory.status == sc.STATUS_COMPLETED  # terminated wins
    for trajectory in trajectories.values():
        if not trajectory.steps[-1].terminated:
            assert trajectory.status == sc.STATUS_TRUNCATED


def test_export_of_the_span_file_equals_the_live_trajectories(
    example_run: ExampleRun, tmp_path: Path
) -> None:
    rebuilt = exported(str(example_run.out / "*" / "spans*.jsonl"), tmp_path / "exported.jsonl")
    assert_same_episodes(example_run.live, rebuilt)
