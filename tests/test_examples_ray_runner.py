"""examples/ray_runner, run as its README says: agenttrace's trajectories equal the runner's own.

The example is a Ray ``Runner`` actor that never imports agenttrace; ``agenttrace.toml`` names
its functions as targets and ``opentelemetry-instrument`` does the rest, on a real local Ray
with two actor processes. The runner saves the trajectories it returned (its own records);
each actor process writes agenttrace's trajectories and spans to its own run folder. Every
field the runner recorded is compared with agenttrace's rebuild, and the rebuild from the span
files with the live one.

Every check runs twice: on a run in this interpreter (``here``), and on a run of exactly the
commands the README prints, in a fresh venv where only its install command ran (``readme``,
tests/fresh_venv.py), so a dependency the install command misses fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
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
from agenttrace.trajectory import SpanRecord

REPO = Path(__file__).parents[1]
EXAMPLES = REPO / "examples"
RUN_TIMEOUT = 120.0  # seconds; a normal run takes about 15


def _strict(error: Exception) -> None:
    raise error


@dataclass
class Run:
    records: list[dict[str, Any]]  # what the runner returned, as the driver saved it
    folders: list[Path]  # one agenttrace run folder per actor process
    stdout: str

    def live(self) -> list[at.Trajectory]:
        return [t for folder in self.folders for t in _live(folder)]


def _live(folder: Path) -> list[at.Trajectory]:
    return load_trajectories(str(folder / "trajectories*.jsonl"), on_error=_strict)


def _spans(folder: Path) -> list[SpanRecord]:
    return list(read_otlp_json(str(folder / "spans*.jsonl"), on_error=_strict))


def readme_environment(out: Path) -> dict[str, str]:
    """The variables examples/ray_runner/README.md exports (AGENTTRACE_OUT under tmp)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.update(
        PYTHONPATH=str(EXAMPLES),
        AGENTTRACE_TARGETS_FILE=str(EXAMPLES / "ray_runner" / "agenttrace.toml"),
        AGENTTRACE_OUT=str(out),
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        RAY_USAGE_STATS_ENABLED="0",
    )
    return env


def _wait_until_gone(pids: list[int], timeout: float) -> None:
    """Actor processes write their last spans and trajectories while they exit."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        if alive:
            time.sleep(0.05)
    assert not alive, f"actor processes {alive} still running after {timeout} s"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(
    scope="module",
    params=HERE_AND_README,
)
def run(request, tmp_path_factory) -> Run:
    if request.param == "readme":
        return run_from_readme(tmp_path_factory)
    return run_here(tmp_path_factory)


def run_from_readme(tmp_path_factory) -> Run:
    """The README's commands, from the root of a copy of the repository, in a fresh venv."""
    root, done = run_readme("ray_runner", tmp_path_factory, timeout=RUN_TIMEOUT)
    return finished_run(root / "agenttrace_runs", root / "runner_trajectories.json", done.stdout)


def run_here(tmp_path_factory) -> Run:
    """The README's variables and command in this interpreter (AGENTTRACE_OUT under tmp)."""
    tmp = tmp_path_factory.mktemp("ray_runner")
    out, records = tmp / "runs", tmp / "runner_trajectories.json"
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    command = [instrument, sys.executable, "-m", "ray_runner.driver", "--records", str(records)]
    driver = subprocess.Popen(
        command,
        cwd=REPO,
        env=readme_environment(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: Ray's processes go with it on timeout
    )
    try:
        stdout, stderr = driver.communicate(timeout=RUN_TIMEOUT)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
    assert driver.returncode == 0, stderr[-3000:]
    return finished_run(out, records, stdout)


def finished_run(out: Path, records: Path, stdout: str) -> Run:
    """The run once the actor processes that wrote the run folders in ``out`` are gone."""
    folders = sorted(out.iterdir())
    # Run folders are named run-<UTC time>-<pid of the process that wrote them>.
    _wait_until_gone([int(folder.name.rsplit("-", 1)[1]) for folder in folders], timeout=60)
    return Run(json.loads(records.read_text()), folders, stdout)


def _by_task(trajectories: list[at.Trajectory]) -> dict[str, at.Trajectory]:
    found: dict[str, at.Trajectory] = {}
    for trajectory in trajectories:
        assert trajectory.task_id not in found, f"two trajectories for {trajectory.task_id}"
        found[trajectory.task_id] = trajectory
    return found


def test_each_actor_process_writes_the_episodes_it_played(run) -> None:
    assert len(run.folders) == 2, [f.name for f in run.folders]  # two actors, no driver folder
    per_folder = [_by_task(_live(folder)) for folder in run.folders]
    assert all(per_folder), "both actors played episodes"
    tasks = [task for found in per_folder for task in found]
    assert sorted(tasks) == sorted(record["task_id"] for record in run.records)
    episode_ids = [t.episode_id for t in run.live()]
    assert len(set(episode_ids)) == len(run.records)


def test_steps_carry_the_runners_chats_rewards_done_and_tool_schemas(run) -> None:
    """Mapping (examples/ray_runner/README.md): the model call of timestep i is
    steps[i].llm_calls[0], whose input + output messages are the timestep's chats; the tool
    call is the action, the tool's answer the next step's observation; the tool schemas on
    offer are steps[i].info["available_tool_schemas"]."""
    trajectories = _by_task(run.live())
    played = [r for r in run.records if r["error_info"] is None]
    assert played and any(not r["timesteps"][-1]["done"] for r in played)  # one ran out
    for record in played:
        trajectory = trajectories[record["task_id"]]
        timesteps = record["timesteps"]
        assert trajectory.status == (
            sc.STATUS_COMPLETED if timesteps[-1]["done"] else sc.STATUS_TRUNCATED
        )
        assert trajectory.error is None
        assert trajectory.length == len(trajectory.steps) == len(timesteps)
        assert trajectory.missing_steps == []
        assert trajectory.return_ == pytest.approx(sum(t["reward"] for t in timesteps))
        for index, (step, timestep) in enumerate(zip(trajectory.steps, timesteps, strict=True)):
            chats = timestep["chats"]
            assert step.index == index
            assert step.reward == timestep["reward"]
            assert step.terminated is timestep["done"]
            assert step.truncated is False
            assert step.info == {"available_tool_schemas": timestep["available_tool_schemas"]}
            (call,) = step.llm_calls
            assert call.input_messages + call.output_messages == chats
            assert step.action == chats[-1]["tool_calls"][0]
            # step 0 acts on the question (the user message), later steps on the tool's answer
            assert step.observation == (chats[1]["content"] if index == 0 else chats[-2])
        assert trajectory.final_observation["tool_call_id"] == trajectory.steps[-1].action["id"]


def test_a_failed_reset_is_an_errored_episode_with_the_runners_error(run) -> None:
    trajectories = _by_task(run.live())
    failed = [r for r in run.records if r["error_info"] is not None]
    assert failed
    for record in failed:
        assert record["timesteps"] == []
        trajectory = trajectories[record["task_id"]]
        assert trajectory.status == sc.STATUS_ERRORED
        assert trajectory.error.type == record["error_info"]["type"]
        assert trajectory.error.message == record["error_info"]["message"]
        assert "raise EnvResetError" in trajectory.error.stack
        assert trajectory.steps == [] and trajectory.length == 0 and trajectory.return_ == 0.0


def test_spans_have_the_reference_runners_shape(run) -> None:
    """episode(task id) > env.reset, timestep(index) > model call + env.step(reward, done)."""
    for folder in run.folders:
        spans = _spans(folder)
        by_id = {span.span_id: span for span in spans}
        episodes = [s for s in spans if s.name == sc.EPISODE]
        assert episodes and all(s.parent_span_id == 0 for s in episodes)
        for episode in episodes:
            children = [s for s in spans if s.parent_span_id == episode.span_id]
            names = [s.name for s in sorted(children, key=lambda s: s.start_time)]
            assert names[0] == sc.ENV_RESET and set(names[1:]) <= {sc.TIMESTEP}
            assert episode.attributes[sc.TASK_ID]
            timesteps = [s for s in children if s.name == sc.TIMESTEP]
            assert [s.attributes[sc.TIMESTEP_INDEX] for s in timesteps] == list(
                range(len(timesteps))
            )
        for step in (s for s in spans if s.name == sc.ENV_STEP):
            assert by_id[step.parent_span_id].name == sc.TIMESTEP
            assert isinstance(step.attributes[sc.REWARD], float)
            assert isinstance(step.attributes[sc.DONE], bool)
        calls = [s for s in spans if s.name.startswith("chat ")]
        assert calls and all(by_id[s.parent_span_id].name == sc.TIMESTEP for s in calls)


def test_rebuild_from_span_files_equals_the_live_trajectories(run, tmp_path) -> None:
    for number, folder in enumerate(run.folders):
        assert_same_episodes(_live(folder), at.assemble(_spans(folder)))
        exported_file = tmp_path / f"exported-{number}.jsonl"
        assert_same_episodes(_live(folder), exported(str(folder / "spans*.jsonl"), exported_file))
