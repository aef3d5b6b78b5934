"""examples/ares_env, run as its README says: agenttrace's trajectories equal the loop's records.

The example is an asyncio agent loop over ARES-style async environments (dm_env-style
``TimeStep``s), several episodes at once, one of them cut short (discount 1) and one cancelled
by its time budget. It never imports agenttrace: ``agenttrace.toml`` names its functions as
targets and ``opentelemetry-instrument`` runs it. The loop saves its own per-episode records;
every field is compared with agenttrace's trajectories, and the rebuild from the span file
with the live one.

Every check runs twice: on a run in this interpreter (``here``), and on a run of exactly the
commands the README prints, in a fresh venv where only its install command ran (``readme``,
tests/fresh_venv.py), so a dependency the install command misses fails here.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
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
from agenttrace.trajectory import SpanRecord

REPO = Path(__file__).parents[1]
EXAMPLES = REPO / "examples"
RUN_TIMEOUT = 60.0  # seconds; a normal run takes about 4


def _strict(error: Exception) -> None:
    raise error


@dataclass
class Run:
    records: list[dict[str, Any]]  # the loop's own records, as it saved them
    folder: Path  # agenttrace's run folder
    stdout: str

    def live(self) -> list[at.Trajectory]:
        return load_trajectories(str(self.folder / "trajectories*.jsonl"), on_error=_strict)

    def spans(self) -> list[SpanRecord]:
        return list(read_otlp_json(str(self.folder / "spans*.jsonl"), on_error=_strict))


def readme_environment(out: Path) -> dict[str, str]:
    """The variables examples/ares_env/README.md exports (AGENTTRACE_OUT under tmp)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.update(
        PYTHONPATH=str(EXAMPLES),
        AGENTTRACE_TARGETS_FILE=str(EXAMPLES / "ares_env" / "agenttrace.toml"),
        AGENTTRACE_OUT=str(out),
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    return env


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
    root, done = run_readme("ares_env", tmp_path_factory, timeout=RUN_TIMEOUT)
    (folder,) = (root / "agenttrace_runs").iterdir()
    return Run(json.loads((root / "ares_records.json").read_text()), folder, done.stdout)


def run_here(tmp_path_factory) -> Run:
    """The README's variables and command in this interpreter (AGENTTRACE_OUT under tmp)."""
    tmp = tmp_path_factory.mktemp("ares_env")
    out, records = tmp / "runs", tmp / "ares_records.json"
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    command = [instrument, sys.executable, "-m", "ares_env", "--records", str(records)]
    loop = subprocess.Popen(
        command,
        cwd=REPO,
        env=readme_environment(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = loop.communicate(timeout=RUN_TIMEOUT)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.communicate()
    assert loop.returncode == 0, stderr[-3000:]
    (folder,) = out.iterdir()
    return Run(json.loads(records.read_text()), folder, stdout)


def _expected_status(record: dict[str, Any]) -> str:
    """The end the loop saw, in agenttrace's words."""
    if record["outcome"] == "out of time":
        return sc.STATUS_CANCELLED
    last = record["steps"][-1]
    assert last["step_type"] == "LAST"
    return sc.STATUS_COMPLETED if last["discount"] == 0.0 else sc.STATUS_TRUNCATED


def test_the_example_shows_every_kind_of_end(run) -> None:
    """The comparisons below cover completed, truncated (discount 1) and cancelled ends."""
    assert {_expected_status(r) for r in run.records} == {
        sc.STATUS_COMPLETED,
        sc.STATUS_TRUNCATED,
        sc.STATUS_CANCELLED,
    }


def test_trajectories_equal_the_loops_records_field_by_field(run) -> None:
    trajectories = {t.task_id: t for t in run.live()}
    assert sorted(trajectories) == sorted(r["task"] for r in run.records)
    for record in run.records:
        trajectory = trajectories[record["task"]]
        assert trajectory.status == _expected_status(record), record["task"]
        assert trajectory.error is None
        assert trajectory.missing_steps == []
        assert trajectory.length == len(trajectory.steps) == len(record["steps"])
        rewards = [entry.get("reward") for entry in record["steps"]]
        assert trajectory.rewards == rewards
        assert trajectory.return_ == sum(r for r in rewards if r is not None)
        for step, entry in zip(trajectory.steps, record["steps"], strict=True):
            last = entry.get("step_type") == "LAST"
            assert step.observation == entry["observation"]
            assert step.action == entry["action"]
            assert step.discount == entry.get("discount")
            assert step.terminated is (last and entry["discount"] == 0.0)
            assert step.truncated is (last and entry["discount"] != 0.0)
        if record["outcome"] == "finished":
            assert trajectory.final_observation == record["final_observation"]
        else:  # the step in flight when the budget ran out: its action, no outcome
            in_flight = trajectory.steps[-1]
            assert "reward" not in record["steps"][-1]
            assert in_flight.reward is None and in_flight.discount is None


def test_episodes_ran_concurrently_each_in_its_own_trace(run) -> None:
    episodes = sorted((s for s in run.spans() if s.name == sc.EPISODE), key=lambda s: s.start_time)
    assert len(episodes) == len(run.records)
    assert len({s.trace_id for s in episodes}) == len(episodes)
    overlapping = [b.start_time < a.end_time for a, b in itertools.pairwise(episodes)]
    assert any(overlapping), "an episode started before the one before it ended"


def test_rebuild_from_the_span_file_equals_the_live_trajectories(run, tmp_path) -> None:
    assert_same_episodes(run.live(), at.assemble(run.spans()))
    source = str(run.folder / "spans*.jsonl")
    assert_same_episodes(run.live(), exported(source, tmp_path / "exported.jsonl"))
