"""Shared fixtures: an isolated agenttrace pipeline per test, and reading a run back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import agenttrace as at
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
