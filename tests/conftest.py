"""Shared fixtures: an isolated agenttrace pipeline per test, and reading a run back."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import pytest

import agenttrace as at
from agenttrace.cli.main import main
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No AGENTTRACE_* or OTLP endpoint settings leak in from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("AGENTTRACE_") or name.startswith("OTEL_EXPORTER_OTLP"):
            monkeypatch.delenv(name)
    yield
    at.shutdown()


def clean_environ(**extra: str) -> dict[str, str]:
    """This environment without AGENTTRACE_* and OTEL_* variables, plus ``extra``: what a
    program run by a test starts from."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTTRACE_", "OTEL_"))
    }
    environ.update(extra)
    return environ


def run_script(
    folder: Path, code: str, *args: str, name: str = "script.py", timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python3 <name> args...`` with ``code`` in it, run in ``folder`` from
    :func:`clean_environ` plus ``env``; output captured as text."""
    (folder / name).write_text(code)
    return subprocess.run(
        [sys.executable, name, *args],
        cwd=folder,
        env=clean_environ(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_instrumented(
    folder: Path, code: str, *args: str, name: str = "script.py", timeout: float = 180, **env: str
) -> subprocess.CompletedProcess[str]:
    """``opentelemetry-instrument python3 <name> args...``: :func:`run_script` with agenttrace
    loaded as the instrumentation (no OpenTelemetry exporters); it must exit 0."""
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
    (folder / name).write_text(code)
    done = subprocess.run(
        [instrument, sys.executable, name, *args],
        cwd=folder,
        env=clean_environ(
            OTEL_TRACES_EXPORTER="none",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
            **env,
        ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_agent_program(
    folder: Path, code: str, *args: str, name: str, targets: str, **env: str
) -> tuple[Any, at.Trajectory, Path]:
    """An agent program under ``opentelemetry-instrument`` with agenttrace ``targets``
    (:func:`run_instrumented`): the JSON it printed last (the framework's own record), its
    one trajectory, and the runs folder."""
    done = run_instrumented(
        folder,
        code,
        *args,
        name=name,
        AGENTTRACE_TARGETS=targets,
        AGENTTRACE_OUT=str(folder / "runs"),
        **env,
    )
    assert "never" not in done.stderr and "not instrumented" not in done.stderr, done.stderr
    (trajectory,) = load_trajectories(sorted((folder / "runs").glob("*/trajectories.jsonl")))
    return json.loads(done.stdout.strip().splitlines()[-1]), trajectory, folder / "runs"


def assert_never_recorded(folder: Path, secret: str) -> None:
    """No file under ``folder`` (and there are some) holds ``secret``."""
    files = [path for path in folder.rglob("*") if path.is_file()]
    assert files, f"nothing was written under {folder}"
    assert not any(secret in path.read_text(errors="replace") for path in files)


def exported(source: str, out: Path, *options: str) -> list[at.Trajectory]:
    """``agenttrace export --from source --out out`` run in-process; its trajectories."""
    code = main(["export", "--from", str(source), "--out", str(out), "--quiet", *options])
    assert code == 0, f"agenttrace export exited {code}"
    return load_trajectories(out) if out.suffix != ".parquet" else load_trajectories([out])


def assert_same_episodes(live: list[at.Trajectory], rebuilt: list[at.Trajectory]) -> None:
    """Every live episode rebuilt once and equal to it (order aside)."""
    by_id = {t.episode_id: t for t in rebuilt}
    assert len(by_id) == len(rebuilt), "an episode was rebuilt twice"
    assert {t.episode_id for t in live} == set(by_id)
    for trajectory in live:
        assert by_id[trajectory.episode_id] == trajectory, trajectory.episode_id


@dataclass
class RunResult:
    live: list[at.Trajectory]
    offline: list[at.Trajectory]
    stats: dict


@pytest.fixture
def pipeline(tmp_path) -> Iterator[at.AgentTrace]:
    """A fresh default pipeline writing trajectories.jsonl and spans.jsonl under tmp_path."""
    runtime = at.configure(out=str(tmp_path), run_name="test", sinks=["jsonl"], spans=["file"])
    yield runtime
    at.shutdown()


def read_run(runtime: at.AgentTrace) -> RunResult:
    """Shut the pipeline down, then read trajectories (live) and rebuild them from spans."""
    runtime.shutdown()
    live = load_trajectories(runtime.trajectory_paths) if runtime.trajectory_paths else []
    offline = at.assemble(read_otlp_json(runtime.span_paths)) if runtime.span_paths else []
    return RunResult(live=live, offline=offline, stats=runtime.stats())


# --- a real run for the storage readers' tests -------------------------------------------------

SERVICE = "cartpole-run"
TOKEN = "backend-test-token-123"


def play_cartpole(episodes: int, max_steps: int) -> None:
    """CartPole episodes (seeds 0, 1, ...) traced with the API by the default pipeline."""
    env = gym.make("CartPole-v1")
    for seed in range(episodes):
        with at.episode(env=env, seed=seed, task_id=f"task-{seed}"):
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset(seed=seed))
            for _ in range(max_steps):
                with at.timestep():
                    with at.agent_act() as act:
                        action = int(obs[2] > 0)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        step.record(action=action)
                        obs, _, terminated, truncated, _ = step.record_result(env.step(action))
                if terminated or truncated:
                    break


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory) -> tuple[list, list]:
    """Three CartPole episodes traced with the API: (live trajectories, span records)."""
    out = tmp_path_factory.mktemp("run")
    runtime = at.configure(
        out=str(out), run_name="storage", sinks=["jsonl"], spans=["file"], service_name=SERVICE
    )
    play_cartpole(episodes=3, max_steps=30)
    result = read_run(runtime)
    at.shutdown()
    assert len(result.live) == 3 and result.offline == result.live
    return result.live, list(read_otlp_json(runtime.span_paths))


def dashboard_generator() -> ModuleType:
    """dashboards/generate.py as a module (a script, not part of the package)."""
    script = Path(__file__).resolve().parent.parent / "dashboards" / "generate.py"
    spec = importlib.util.spec_from_file_location("agenttrace_dashboards_generate", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wait_until(condition, timeout: float = 10.0) -> bool:
    """Poll ``condition`` every 10 ms until it is true or ``timeout`` seconds pass; its last
    value (for an assert)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
