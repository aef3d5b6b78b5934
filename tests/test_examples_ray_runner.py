"""examples/ray_runner, run as its README says: agenttrace's trajectories equal the runner's own.

The example is a Ray ``Runner`` actor that never imports agenttrace, played on a real local
Ray with two actor processes. Its README shows two routes:

* ``targets``: the runner's own tracer off; ``agenttrace.toml`` names its functions as targets
  and ``opentelemetry-instrument`` does the rest;
* ``own_spans``: the runner's own tracer on (``RUNNER_TRACING=1``), no targets at all; the
  ``runner`` conventions preset reads its spans (``AGENTTRACE_CONVENTIONS=runner``).

The runner saves the trajectories it returned (its own records); each actor process writes
agenttrace's trajectories and spans to its own run folder. Every field the runner returned is
compared with agenttrace's rebuild (steps: chats, tool schemas, reward including None, done;
error; episode id; task id; reset kwargs), and the rebuild from the span files with the live
one. For ``own_spans``, the spans the runner's own exporter sent (to an OTLP receiver the test
runs) rebuild into the same trajectories too, as do those of a run without agenttrace at all.

Every route runs twice: in this interpreter (``here``), and exactly as the README prints it,
in a fresh venv where only its install command ran (``readme``, tests/fresh_venv.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backend_servers import OtlpReceiver
from conftest import assert_same_episodes, exported
from fresh_venv import run_readme

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory import SpanRecord

REPO = Path(__file__).parents[1]
EXAMPLES = REPO / "examples"
RUN_TIMEOUT = 120.0  # seconds; a normal run takes about 15
TARGETS, OWN_SPANS = "targets", "own_spans"
#: Where each route of the README writes: its agenttrace runs and the runner's records.
OUTPUTS = {
    TARGETS: ("agenttrace_runs", "runner_trajectories.json"),
    OWN_SPANS: ("agenttrace_runs_own_spans", "runner_trajectories_own_spans.json"),
}


def _strict(error: Exception) -> None:
    raise error


@dataclass
class Run:
    route: str
    records: list[dict[str, Any]]  # what the runner returned, as the driver saved it
    folders: list[Path]  # one agenttrace run folder per actor process
    stdout: str
    stored: Path | None = None  # the runner's own exported spans (own_spans, here)

    def live(self) -> list[at.Trajectory]:
        return [t for folder in self.folders for t in _live(folder)]


def _live(folder: Path) -> list[at.Trajectory]:
    return load_trajectories(str(folder / "trajectories*.jsonl"), on_error=_strict)


def _spans(folder: Path) -> list[SpanRecord]:
    return list(read_otlp_json(str(folder / "spans*.jsonl"), on_error=_strict))


def route_environment(route: str, out: Path, **more: str) -> dict[str, str]:
    """The variables examples/ray_runner/README.md exports for a route (AGENTTRACE_OUT under
    tmp)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.update(
        PYTHONPATH=str(EXAMPLES),
        AGENTTRACE_OUT=str(out),
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        RAY_USAGE_STATS_ENABLED="0",
        **more,
    )
    env.pop("RUNNER_TRACING", None)
    if route == TARGETS:
        env["AGENTTRACE_TARGETS_FILE"] = str(EXAMPLES / "ray_runner" / "agenttrace.toml")
    else:
        env.update(AGENTTRACE_CONVENTIONS="runner", RUNNER_TRACING="1")
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


def _drive(command: list[str], env: dict[str, str]) -> str:
    """Run the driver in its own process group (Ray's processes go with it on timeout)."""
    driver = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = driver.communicate(timeout=RUN_TIMEOUT)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
    assert driver.returncode == 0, stderr[-3000:]
    return stdout


_readme_roots: dict[str, tuple[Path, str]] = {}


@pytest.fixture(
    scope="module",
    params=[
        (TARGETS, "here"),
        (OWN_SPANS, "here"),
        pytest.param((TARGETS, "readme"), marks=[pytest.mark.slow, pytest.mark.timeout(900)]),
        pytest.param((OWN_SPANS, "readme"), marks=[pytest.mark.slow, pytest.mark.timeout(900)]),
    ],
    ids=lambda param: "-".join(param),
)
def run(request, tmp_path_factory) -> Run:
    route, where = request.param
    if where == "readme":
        return run_from_readme(route, tmp_path_factory)
    return run_here(route, tmp_path_factory)


def run_from_readme(route: str, tmp_path_factory) -> Run:
    """The README's commands (both routes, one shell), from the root of a copy of the
    repository, in a fresh venv; run once for both routes."""
    if not _readme_roots:
        root, done = run_readme("ray_runner", tmp_path_factory, timeout=2 * RUN_TIMEOUT)
        _readme_roots["root"] = (root, done.stdout)
    root, stdout = _readme_roots["root"]
    runs, records = OUTPUTS[route]
    return finished_run(route, root / runs, root / records, stdout)


def run_here(route: str, tmp_path_factory) -> Run:
    """The README's variables and command in this interpreter (AGENTTRACE_OUT under tmp); for
    own_spans the runner's own exporter also sends its spans to an OTLP receiver."""
    tmp = tmp_path_factory.mktemp(f"ray_runner_{route}")
    out, records = tmp / "runs", tmp / "runner_trajectories.json"
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    command = [instrument, sys.executable, "-m", "ray_runner.driver", "--records", str(records)]
    if route == TARGETS:
        stdout = _drive(command, route_environment(route, out))
        return finished_run(route, out, records, stdout)
    receiver = OtlpReceiver()
    try:
        env = route_environment(route, out, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
        stdout = _drive(command, env)
        run = finished_run(route, out, records, stdout)  # (the actors flushed as they exited)
        run.stored = _collector_file(receiver.trace_bodies, tmp / "collector" / "spans.binpb")
    finally:
        receiver.stop()
    return run


def _collector_file(bodies: list[bytes], path: Path) -> Path:
    """The requests as an OpenTelemetry Collector ``file`` exporter (format proto) stores them:
    each a 4-byte big-endian length, then the ExportTraceServiceRequest bytes."""
    assert bodies, "the runner's own exporter sent its spans"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(struct.pack(">I", len(body)) + body for body in bodies))
    return path


def finished_run(route: str, out: Path, records: Path, stdout: str) -> Run:
    """The run once the actor processes that wrote the run folders in ``out`` are gone."""
    folders = sorted(out.iterdir())
    # Run folders are named run-<UTC time>-<pid of the process that wrote them>.
    _wait_until_gone([int(folder.name.rsplit("-", 1)[1]) for folder in folders], timeout=60)
    return Run(route, json.loads(records.read_text()), folders, stdout)


def _by_episode(trajectories: list[at.Trajectory]) -> dict[str, at.Trajectory]:
    found: dict[str, at.Trajectory] = {}
    for trajectory in trajectories:
        assert trajectory.episode_id not in found, f"two trajectories of {trajectory.episode_id}"
        found[trajectory.episode_id] = trajectory
    return found


def assert_every_returned_field(
    trajectories: list[at.Trajectory], records: list[dict[str, Any]]
) -> None:
    """Each trajectory against the Trajectory the runner returned, field by field: episode
    id, task id, reset kwargs, error, and per timestep its chats, tool schemas, reward
    (None included) and done (examples/ray_runner/README.md, the mapping table)."""
    by_episode = _by_episode(trajectories)
    assert sorted(by_episode) == sorted(record["episode_id"] for record in records)
    for record in records:
        trajectory = by_episode[record["episode_id"]]
        assert trajectory.task_id == record["task_id"]
        assert json.loads(trajectory.attributes["reset_kwargs"]) == record["reset_kwargs"]
        error = record["error_info"]
        timesteps = record["timesteps"]
        played = [step for step in trajectory.steps if step.error is None]
        assert len(played) == len(timesteps)
        for step, timestep in zip(played, timesteps, strict=True):
            (call,) = step.llm_calls
            assert call.input_messages + call.output_messages == timestep["chats"]
            assert call.attributes[sc.GEN_AI_TOOL_DEFINITIONS] == timestep["available_tool_schemas"]
            assert step.reward == timestep["reward"]  # None included
            assert step.terminated is timestep["done"]
        rated = [t["reward"] for t in timesteps if t["reward"] is not None]
        assert trajectory.return_ == pytest.approx(sum(rated))
        if error is None:
            assert trajectory.error is None
            assert trajectory.status == (
                sc.STATUS_COMPLETED if timesteps[-1]["done"] else sc.STATUS_TRUNCATED
            )
            assert len(trajectory.steps) == len(timesteps)
        else:
            assert trajectory.status == sc.STATUS_ERRORED
            assert (trajectory.error.type, trajectory.error.message) == (
                error["type"],
                error["message"],
            )


def test_each_actor_process_writes_the_episodes_it_played(run) -> None:
    assert len(run.folders) == 2, [f.name for f in run.folders]  # two actors, no driver folder
    per_folder = [_by_episode(_live(folder)) for folder in run.folders]
    assert all(per_folder), "both actors played episodes"
    assert len(run.records) == 12
    assert sorted(e for found in per_folder for e in found) == sorted(
        record["episode_id"] for record in run.records
    )


def test_every_field_the_runner_returned_is_rebuilt(run) -> None:
    records = run.records
    # the runs cover what the issue saw: unrated steps, a failed reset, a caught step failure
    assert any(t["reward"] is None for r in records for t in r["timesteps"])
    assert any(r["error_info"] and not r["timesteps"] for r in records)
    assert any(r["error_info"] and r["timesteps"] for r in records)
    assert any(r["timesteps"] and not r["timesteps"][-1]["done"] for r in records)
    assert_every_returned_field(run.live(), records)


def test_the_step_that_raised_is_kept_and_marked(run) -> None:
    by_episode = _by_episode(run.live())
    (record,) = [r for r in run.records if r["error_info"] and r["timesteps"]]
    trajectory = by_episode[record["episode_id"]]
    failed = trajectory.steps[-1]
    assert failed.index == len(record["timesteps"])
    assert failed.error == "ray_runner.env.ToolServerError: " + record["error_info"]["message"]
    assert failed.reward is None and not failed.terminated
    assert len(failed.llm_calls) == 1  # the model call of the failed turn is kept
    for record in (r for r in run.records if r["error_info"] and not r["timesteps"]):
        assert by_episode[record["episode_id"]].steps == []  # a failed reset: no steps


def test_targets_also_give_actions_observations_and_schemas_as_info(run) -> None:
    """What route (a) gives beyond the runner's record (README: what each route gives)."""
    if run.route != TARGETS:
        pytest.skip("the runner's own spans hold no actions or observations")
    by_episode = _by_episode(run.live())
    for record in run.records:
        trajectory = by_episode[record["episode_id"]]
        for index, (step, timestep) in enumerate(
            zip(trajectory.steps, record["timesteps"], strict=False)
        ):
            chats = timestep["chats"]
            assert step.info == {"available_tool_schemas": timestep["available_tool_schemas"]}
            assert step.action == chats[-1]["tool_calls"][0]
            assert step.observation == (chats[1]["content"] if index == 0 else chats[-2])


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
            assert names[0] == sc.ENV_RESET
            assert set(names[1:]) <= {sc.TIMESTEP, "agent.init_after_reset"}
            assert episode.attributes[sc.TASK_ID]
            timesteps = [s for s in children if s.name == sc.TIMESTEP]
            assert [s.attributes[sc.TIMESTEP_INDEX] for s in timesteps] == list(
                range(len(timesteps))
            )
        for step in (s for s in spans if s.name == sc.ENV_STEP and s.status_code != "ERROR"):
            assert by_id[step.parent_span_id].name == sc.TIMESTEP
            assert isinstance(step.attributes[sc.DONE], bool)
            assert step.attributes.get(sc.REWARD) is None or isinstance(
                step.attributes[sc.REWARD], float
            )
        calls = [s for s in spans if s.name.startswith("chat ")]
        assert calls and all(by_id[s.parent_span_id].name == sc.TIMESTEP for s in calls)
        if run.route == OWN_SPANS:  # the runner's own spans, as the mapping translated them
            assert {s.scope_name for s in episodes} == {"ray_runner"}
            assert any(s.name == "get_tool_schemas" for s in spans)


def test_rebuild_from_span_files_equals_the_live_trajectories(run, tmp_path) -> None:
    for number, folder in enumerate(run.folders):
        assert_same_episodes(_live(folder), at.assemble(_spans(folder)))
        exported_file = tmp_path / f"exported-{number}.jsonl"
        assert_same_episodes(_live(folder), exported(str(folder / "spans*.jsonl"), exported_file))


def test_the_runners_own_exported_spans_rebuild_the_same(run, tmp_path) -> None:
    """Route (b), offline: the spans the runner's own exporter sent, stored as a collector
    stores them, exported with the preset."""
    if run.stored is None:
        pytest.skip("the runner's exporter sends its spans only in the 'here' own_spans run")
    rebuilt = exported(str(run.stored), tmp_path / "out.jsonl", "--conventions", "runner")
    assert_same_episodes(run.live(), rebuilt)


def test_spans_recorded_before_agenttrace_was_installed_become_trajectories(
    tmp_path,
) -> None:
    """The runner traced by its own tracer alone (no agenttrace in the process): what its
    exporter stored, exported with the runner preset, is every episode it returned."""
    receiver = OtlpReceiver()
    try:
        env = route_environment(OWN_SPANS, tmp_path / "unused")
        for key in ("AGENTTRACE_CONVENTIONS", "AGENTTRACE_OUT"):
            env.pop(key)
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        records = tmp_path / "runner_trajectories.json"
        command = [sys.executable, "-m", "ray_runner.driver", "--records", str(records)]
        _drive(command, env)
        deadline = time.monotonic() + 30  # the actors' exporters flush as they exit
        while time.monotonic() < deadline and not _all_episodes_sent(receiver, records):
            time.sleep(0.2)
        stored = _collector_file(receiver.trace_bodies, tmp_path / "collector" / "spans.binpb")
    finally:
        receiver.stop()
    assert not (tmp_path / "unused").exists()
    rebuilt = exported(str(stored), tmp_path / "out.jsonl", "--conventions", "runner")
    assert_every_returned_field(rebuilt, json.loads(records.read_text()))


def _all_episodes_sent(receiver: OtlpReceiver, records: Path) -> bool:
    return sum(span.name == "episode" for span in receiver.spans) >= len(
        json.loads(records.read_text())
    )
