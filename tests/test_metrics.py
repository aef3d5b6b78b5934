"""Episode metrics: every figure matches the trajectories written, in both writer modes, on
the user's MeterProvider, the global one, or over OTLP; failures never reach the program."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_servers import OtlpReceiver
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.cli.demo import run_episodes
from agenttrace.config import ConfigError
from agenttrace.processing import metrics as m
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory import LLMCall, Step, Trajectory


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Data points of agenttrace's metrics, by metric name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != sc.INSTRUMENTATION_SCOPE:
                continue
            for metric in scope_metrics.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def demo_run(tmp_path: Path, writer: str, **options: Any) -> tuple[list[Trajectory], Any]:
    runtime = at.configure(out=str(tmp_path), writer=writer, **options)
    asyncio.run(run_episodes(24, 4, seed=11))
    runtime.shutdown()
    trajectories = list(load_trajectories(runtime.trajectory_paths))
    return trajectories, runtime


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_metrics_agree_with_the_trajectories_written(tmp_path, writer):
    reader = InMemoryMetricReader()
    trajectories, runtime = demo_run(
        tmp_path, writer, meter_provider=MeterProvider(metric_readers=[reader])
    )
    assert len(trajectories) == 24
    found = points(reader)

    statuses = Counter(t.status for t in trajectories)
    assert len(statuses) >= 2  # the demo has errored episodes as well as finished ones
    by_status = {p.attributes[sc.EPISODE_STATUS]: p.value for p in found[m.EPISODES]}
    assert by_status == dict(statuses)
    assert all(p.attributes[sc.ENV_NAME] for p in found[m.EPISODES])

    for point in found[m.EPISODE_RETURNS]:  # cumulative buckets, as histogram_quantile reads
        status = point.attributes[sc.EPISODE_STATUS]
        bound = float(point.attributes[m.BUCKET_BOUND])
        expected = sum(1 for t in trajectories if t.status == status and t.return_ <= bound)
        assert point.value == expected, (status, bound)
    bounds = Counter(p.attributes[m.BUCKET_BOUND] for p in found[m.EPISODE_RETURNS])
    assert len(bounds) == len(m.RETURN_BUCKETS) + 1  # every bucket, empty ones too
    assert set(bounds.values()) == {len(statuses)}  # for each status
    sums = {p.attributes[sc.EPISODE_STATUS]: p.value for p in found[m.EPISODE_RETURN_SUM]}
    for status in statuses:
        expected_sum = sum(t.return_ for t in trajectories if t.status == status)
        assert sums[status] == pytest.approx(expected_sum)
    assert any(t.return_ < 0 for t in trajectories)  # negative returns are counted too

    lengths = {p.attributes[sc.EPISODE_STATUS]: p.sum for p in found[m.EPISODE_LENGTH]}
    assert lengths == {s: sum(t.length for t in trajectories if t.status == s) for s in statuses}
    assert sum(p.count for p in found[m.EPISODE_DURATION]) == len(trajectories)

    steps = [s for t in trajectories for s in t.steps]
    assert sum(p.count for p in found[m.STEP_DURATION]) == len(steps)
    step_seconds = sum((s.end_time - s.start_time) / 1e9 for s in steps)
    assert sum(p.sum for p in found[m.STEP_DURATION]) == pytest.approx(step_seconds)

    calls = [c for s in steps for c in s.llm_calls]
    assert calls
    assert sum(p.count for p in found[m.GEN_AI_OPERATION_DURATION]) == len(calls)
    tokens = Counter()
    for point in found[m.GEN_AI_TOKEN_USAGE]:
        tokens[point.attributes[m.GEN_AI_TOKEN_TYPE]] += point.sum
        assert point.attributes[sc.GEN_AI_REQUEST_MODEL] == calls[0].model
    assert tokens == {
        "input": sum(c.input_tokens for c in calls),
        "output": sum(c.output_tokens for c in calls),
    }
    assert runtime.stats()["metrics_failures"] == 0


def test_the_writer_mode_the_metrics_came_through(tmp_path):
    """The process case above really ran in the helper process (summaries crossed the pipe)."""
    runtime = at.configure(
        out=str(tmp_path), writer="process", meter_provider=MeterProvider(metric_readers=[])
    )
    try:
        assert runtime.trajectory_processor.writer.in_helper_process
    finally:
        runtime.shutdown()


def test_no_meter_provider_means_no_metrics_and_no_exporter(tmp_path, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    runtime = at.configure(out=str(tmp_path), writer="thread")
    try:
        assert runtime.metrics is None and runtime.owned_meter_provider is None
    finally:
        runtime.shutdown()


def test_metrics_none_wins_over_a_given_meter_provider(tmp_path):
    reader = InMemoryMetricReader()
    _, runtime = demo_run(
        tmp_path, "thread", metrics="none", meter_provider=MeterProvider(metric_readers=[reader])
    )
    assert runtime.metrics is None
    assert points(reader) == {}


def test_a_meter_provider_that_is_not_one_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="meter_provider must be an OpenTelemetry MeterProvider"):
        at.configure(out=str(tmp_path), meter_provider="prometheus")


def test_a_failing_meter_costs_the_program_nothing(tmp_path, caplog):
    class BrokenInstrument:
        def add(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("meter backend down")

        record = add

    class BrokenMeter:
        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: BrokenInstrument()

    class BrokenProvider:
        def get_meter(self, *args: Any, **kwargs: Any) -> BrokenMeter:
            return BrokenMeter()

    trajectories, runtime = demo_run(tmp_path, "thread", meter_provider=BrokenProvider())
    assert len(trajectories) == 24  # every trajectory still written
    assert runtime.stats()["metrics_failures"] == 24
    assert sum("could not record episode metrics" in r.message for r in caplog.records) == 1


def test_summary_of_a_failed_llm_call_names_a_low_cardinality_error_type():
    call = LLMCall(name="chat", model="m", start_time=0, end_time=2_000_000_000)
    failed = LLMCall(name="chat", start_time=0, end_time=10**9, error="openai.APIError: boom")
    odd = LLMCall(name="chat", error="rate limited, retry in 3 s")
    trajectory = Trajectory(
        episode_id="e",
        status="completed",
        return_=-1.5,
        length=1,
        start_time=0,
        end_time=3 * 10**9,
        steps=[Step(index=0, start_time=5, end_time=4, llm_calls=[call, failed, odd])],
    )
    status, env, return_, length, duration, step_durations, calls = m.summarize(trajectory)
    assert (status, env, return_, length, duration) == ("completed", None, -1.5, 1, 3.0)
    assert step_durations == []  # a step whose clock went backwards gives no duration
    assert [c[0] for c in calls] == [2.0, 1.0, None]
    assert [c[-1] for c in calls] == [None, "openai.APIError", "_OTHER"]
    assert calls[0][1:4] == ("chat", None, "m")


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.stop()


def test_demo_sends_its_metrics_over_otlp_when_an_endpoint_is_set(tmp_path, receiver):
    """The documented path to the compose stack: spans and metrics to the collector."""
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "5",
        "OTEL_SERVICE_NAME": "metrics-test",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenttrace",
            "demo",
            "-n",
            "12",
            "--seed",
            "3",
            "--out",
            str(tmp_path),
            "--run-name",
            "otlp",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"episode metrics sent over OTLP to {receiver.endpoint}" in result.stdout
    assert "spans over OTLP to" in result.stdout
    expected = {
        m.EPISODES,
        m.EPISODE_RETURNS,
        m.EPISODE_RETURN_SUM,
        m.EPISODE_LENGTH,
        m.EPISODE_DURATION,
        m.STEP_DURATION,
        m.GEN_AI_OPERATION_DURATION,
        m.GEN_AI_TOKEN_USAGE,
    }
    assert expected <= set(receiver.metrics)
    assert {"service.name": "metrics-test"}.items() <= receiver.resources[-1].items()
    last_episodes = receiver.metrics[m.EPISODES][-1]
    assert sum(p.as_int for p in last_episodes.sum.data_points) == 12
    lines = (tmp_path / "otlp" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 12 and all(json.loads(line)["episode_id"] for line in lines)


def test_otlp_metrics_never_replace_the_global_meter_provider(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.endpoint + "/v1/metrics")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
    before = otel_metrics.get_meter_provider()
    runtime = at.configure(out=str(tmp_path), writer="thread", spans=("file",))
    try:
        assert runtime.owned_meter_provider is not None
        assert otel_metrics.get_meter_provider() is before
        with at.episode(task_id="one"):
            with at.timestep(), at.env_step() as step:
                step.record(reward=1.0, terminated=True)
    finally:
        runtime.shutdown()
    assert len(receiver.metrics[m.EPISODES]) >= 1


_GLOBAL_PROVIDER_SCRIPT = """
import agenttrace as at
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
runtime = at.configure(out={out!r}, writer="process")
for index in range(3):
    with at.episode(task_id=str(index)):
        with at.timestep(), at.env_step() as step:
            step.record(reward=-2.0, terminated=True)
runtime.shutdown()
for rm in reader.get_metrics_data().resource_metrics:
    for sm in rm.scope_metrics:
        for metric in sm.metrics:
            if metric.name == "rl.episodes":
                print(sum(p.value for p in metric.data.data_points))
"""


def test_the_global_sdk_meter_provider_is_used_when_there_is_one(tmp_path):
    """In a fresh process: the global MeterProvider can be set once per process."""
    script = _GLOBAL_PROVIDER_SCRIPT.format(out=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3"]
