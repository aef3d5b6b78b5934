"""Loading trajectories right after a traced loop, in the same process, gives every episode."""

from __future__ import annotations

import os
import textwrap

import pytest
from conftest import run_script

import agenttrace as at
from agenttrace.sinks import load_trajectories

LOOP_THEN_LOAD = textwrap.dedent(
    """
    import agenttrace as at
    from agenttrace.processing.writer_process import RemoteWriter
    from agenttrace.sinks import load_trajectories

    for seed in range(200):
        with at.episode(task_id=f"t{seed}"):
            for action in range(3):
                with at.timestep():
                    with at.env_step() as step:
                        step.record_result(({"a": action}, 1.0, action == 2, False, {}))
    runtime = at.get_default()
    loaded = load_trajectories("agenttrace_runs/")  # as the README does it
    writer = runtime.trajectory_processor.writer
    helper = isinstance(writer, RemoteWriter) and writer.in_helper_process
    print(len(loaded), sorted({len(t.steps) for t in loaded}), "helper" if helper else "here")
    """
)


@pytest.mark.parametrize("writer", [None, "process", "thread"])
def test_load_right_after_the_loop_sees_every_episode(tmp_path, writer):
    """The default settings (no configure(); writer=auto: a helper process on 2+ CPUs)."""
    env = {"AGENTTRACE_EXIT_REPORT": "false"}
    if writer is not None:
        env["AGENTTRACE_WRITER"] = writer
    done = run_script(tmp_path, LOOP_THEN_LOAD, name="loop.py", **env)
    assert done.returncode == 0, done.stderr
    count, _, where = done.stdout.strip().rpartition(" ")
    assert count == "200 [3]", done.stdout
    expected = {"process": "helper", "thread": "here"}.get(writer or "")
    if writer is None:
        expected = "helper" if len(os.sched_getaffinity(0)) >= 2 else "here"
    assert where == expected
    assert done.stderr == ""


def test_load_in_process_after_the_loop(tmp_path):
    runtime = at.configure(out=str(tmp_path), run_name="r", exit_report=False)
    for seed in range(50):
        with at.episode(task_id=f"t{seed}"):
            with at.env_step() as step:
                step.record_result((0, 1.0, True, False, {}))
    assert runtime.run_dir is not None
    assert len(load_trajectories(runtime.run_dir / "trajectories.jsonl")) == 50


def test_no_flush_once_shut_down_or_switched_off(tmp_path, monkeypatch):
    from agenttrace import pipeline

    runtime = at.configure(out=str(tmp_path), run_name="r", exit_report=False)
    with at.episode():
        pass
    runtime.shutdown()
    calls = []
    monkeypatch.setattr(runtime, "force_flush", lambda *a: calls.append(a) or True)
    pipeline._flush_before_reading()
    assert calls == []
    off = at.configure(enabled=False)
    monkeypatch.setattr(off, "force_flush", lambda *a: calls.append(a) or True)
    pipeline._flush_before_reading()
    assert calls == []
