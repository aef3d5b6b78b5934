"""TrajectoryProcessor: background writing, limits that are counted, never silent."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading

import pytest
from conftest import read_run
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json


def _episode(steps: int, *, task_id: str | None = None, terminal: bool = True) -> str:
    with at.episode(task_id=task_id) as episode:
        for i in range(steps):
            with at.timestep():
                with at.env_step() as step:
                    step.record(
                        action=i,
                        observation=i + 1,
                        reward=1.0,
                        terminated=terminal and i == steps - 1,
                    )
    return episode.id


def test_sinks_run_on_the_writer_thread_not_the_callers(tmp_path) -> None:
    threads = []
    runtime = at.configure(
        out=str(tmp_path), sinks=[lambda t: threads.append(threading.current_thread().name)]
    )
    for _ in range(3):
        _episode(2)
    runtime.force_flush()
    assert threads == ["agenttrace-trajectory-writer"] * 3


def test_force_flush_makes_trajectories_readable(pipeline) -> None:
    ids = [_episode(3, task_id=f"t{i}") for i in range(5)]
    assert pipeline.force_flush()
    written = load_trajectories(pipeline.trajectory_paths)
    assert [t.episode_id for t in written] == ids
    assert all(t.status == "completed" and t.return_ == 3.0 for t in written)


def test_open_episode_limit_is_counted_and_the_rest_is_kept(tmp_path, caplog) -> None:
    runtime = at.configure(out=str(tmp_path), max_open_episodes=3)
    scopes = [at.episode(task_id=str(i)).start() for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        for scope in scopes:
            scope.end()
    result = read_run(runtime)
    assert result.stats["episodes_dropped_open_limit"] == 2
    assert [t.task_id for t in result.live] == ["0", "1", "2"]
    assert "episodes_dropped_open_limit" in caplog.text


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_an_episode_over_the_byte_limit_is_rebuilt_whole_a_stretch_at_a_time(
    tmp_path, writer
) -> None:
    runtime = at.configure(out=str(tmp_path), max_episode_bytes=30_000, writer=writer)
    _episode(3_000)
    result = read_run(runtime)
    (trajectory,) = result.live
    assert trajectory.status == sc.STATUS_COMPLETED
    assert [s.index for s in trajectory.steps] == list(range(3_000))
    assert [s.observation for s in trajectory.steps] == [None, *range(1, 3_000)]
    assert trajectory.final_observation == 3_000
    assert trajectory.return_ == 3_000.0 and trajectory.missing_steps == []
    assert result.stats["spans_too_late_for_step"] == 0
    assert result.offline == result.live
    assert sum(1 for _ in read_otlp_json(runtime.span_paths)) == 1 + 2 * 3_000


def test_late_spans_are_counted_and_still_exported(pipeline) -> None:
    with at.episode() as episode:
        late = at.timestep().start()
    late.end()
    result = read_run(pipeline)
    assert result.stats["late_spans"] == 1
    names = [r.name for r in read_otlp_json(pipeline.span_paths)]
    assert sorted(names) == ["episode", "timestep"]
    assert result.live[0].episode_id == episode.id


def test_a_failing_sink_loses_only_its_own_copy(tmp_path, caplog) -> None:
    def broken(trajectory):
        raise OSError("disk on fire")

    good = []
    runtime = at.configure(out=str(tmp_path), sinks=["jsonl", broken, good.append])
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        ids = [_episode(2) for _ in range(4)]
        runtime.force_flush()
    assert [t.episode_id for t in good] == ids
    assert [t.episode_id for t in load_trajectories(runtime.trajectory_paths)] == ids
    assert runtime.stats()["sink_errors"] == {"CallbackSink": 4}
    assert caplog.text.count("disk on fire") == 1


def test_full_queue_makes_the_caller_wait_then_counts_drops(tmp_path) -> None:
    release = threading.Event()
    written = []

    def slow_sink(trajectory):
        release.wait(10)
        written.append(trajectory.episode_id)

    runtime = at.configure(
        out=str(tmp_path), sinks=[slow_sink], queue_size=2, block_timeout=0.2, spans=["none"]
    )
    ids = [_episode(1) for _ in range(6)]
    release.set()
    runtime.force_flush()
    stats = runtime.stats()
    assert stats["episodes_dropped_queue_full"] >= 1
    assert len(written) + stats["episodes_dropped_queue_full"] == len(ids)
    assert set(written) <= set(ids)


class _RecordOnly(Sampler):
    def should_sample(
        self,
        parent_context,
        trace_id,
        name,
        kind=None,
        attributes=None,
        links=None,
        trace_state=None,
    ):
        return SamplingResult(Decision.RECORD_ONLY, attributes)

    def get_description(self) -> str:
        return "record-only"


def test_record_only_spans_make_trajectories_but_are_not_exported(tmp_path) -> None:
    provider = TracerProvider(sampler=_RecordOnly())
    runtime = at.configure(out=str(tmp_path), tracer_provider=provider)
    _episode(3)
    result = read_run(runtime)
    assert len(result.live) == 1 and result.live[0].length == 3
    assert list(read_otlp_json(runtime.span_paths)) == [] if runtime.span_paths else True
    assert result.stats["spans_written"] == 0


def test_spans_of_other_instrumentations_are_stamped_and_folded_into_steps(pipeline) -> None:
    foreign = pipeline.provider.get_tracer("some.openai.instrumentation")
    with at.episode() as episode:
        with at.timestep():
            with at.agent_act():
                with foreign.start_as_current_span("chat gpt-x") as span:
                    span.set_attributes(
                        {
                            sc.GEN_AI_OPERATION_NAME: "chat",
                            sc.GEN_AI_REQUEST_MODEL: "gpt-x",
                            sc.GEN_AI_USAGE_INPUT_TOKENS: 7,
                            sc.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant"}]),
                        }
                    )
            with at.env_step() as step:
                step.record(reward=1.0, terminated=True)
    result = read_run(pipeline)
    stamped = [r for r in read_otlp_json(pipeline.span_paths) if r.name == "chat gpt-x"]
    assert stamped[0].attributes[sc.EPISODE_ID] == episode.id
    for trajectory in (result.live[0], result.offline[0]):
        (call,) = trajectory.steps[0].llm_calls
        assert (call.model, call.input_tokens) == ("gpt-x", 7)
        assert call.output_messages == [{"role": "assistant"}]
    assert result.live == result.offline


def test_episodes_are_written_at_interpreter_exit(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import agenttrace as at
        at.configure(out={str(tmp_path)!r}, run_name="exit")
        for i in range(3):
            with at.episode(task_id=str(i)):
                with at.env_step() as step:
                    step.record(reward=1.0, terminated=True)
        left_open = at.episode(task_id="open").start()
        with left_open:
            pass
        at.episode(task_id="never-closed").start()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    written = load_trajectories(tmp_path / "exit")
    by_task = {t.task_id: t.status for t in written}
    assert by_task == {
        "0": "completed",
        "1": "completed",
        "2": "completed",
        "open": "completed",
        "never-closed": "incomplete",
    }


def test_spans_of_an_episode_running_elsewhere_go_to_the_span_file_only(pipeline) -> None:
    """An env server's span joins a remote episode (W3C traceparent + baggage)."""
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    carrier = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "baggage": f"{sc.EPISODE_ID}=remote-episode-1",
    }
    tracer = pipeline.tracer
    with tracer.start_as_current_span("handle step", context=propagator.extract(carrier)):
        pass
    result = read_run(pipeline)
    assert result.live == []  # its trajectory is written where its episode span runs
    assert result.stats["spans_of_remote_episodes"] == 1
    assert result.stats["episodes_open"] == 0
    (record,) = list(read_otlp_json(pipeline.span_paths))
    assert record.attributes[sc.EPISODE_ID] == "remote-episode-1"
    assert record.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert record.parent_span_id == 0xB7AD6B7169203331 and record.parent_is_remote
