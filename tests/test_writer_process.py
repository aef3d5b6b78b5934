"""The writer in a helper process: chosen when it should be, same output, survives crashes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import agenttrace as at
from agenttrace.processing import writer_process
from agenttrace.processing.writer import EpisodeWriter
from agenttrace.processing.writer_process import RemoteWriter
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2,
    reason="the helper-process writer is the default on POSIX machines with 2+ CPUs",
)


def run_episodes(n: int, *, first: int = 0, steps: int = 3) -> None:
    for i in range(first, first + n):
        with at.episode(task_id=str(i)):
            for t in range(steps):
                with at.timestep():
                    with at.env_step() as step:
                        step.record(observation=[i, t], reward=float(t), terminated=t == steps - 1)


def helper_process() -> subprocess.Popen:
    helper = writer_process._helper
    assert helper is not None and helper.alive
    return helper.process


def writer_of(runtime: at.AgentTrace):
    assert runtime.trajectory_processor is not None
    return runtime.trajectory_processor.writer


def test_auto_uses_a_helper_process_for_built_in_sinks(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="auto", sinks=["jsonl", "parquet"])
    writer = writer_of(runtime)
    assert isinstance(writer, RemoteWriter) and writer.in_helper_process
    assert helper_process().pid != os.getpid()
    run_episodes(5)
    runtime.shutdown()
    jsonl = [p for p in runtime.trajectory_paths if p.suffix == ".jsonl"]
    parquet = [p for p in runtime.trajectory_paths if p.suffix == ".parquet"]
    assert sorted(t.task_id for t in load_trajectories(jsonl)) == [str(i) for i in range(5)]
    assert len(load_trajectories(parquet)) == 5
    assert runtime.stats()["spans_written"] == 5 * (1 + 3 * 2)
    assert runtime.stats()["statuses"] == {"completed": 5}


def test_your_own_sinks_keep_the_writer_in_this_process(tmp_path, caplog) -> None:
    seen: list[at.Trajectory] = []
    runtime = at.configure(out=str(tmp_path), run_name="cb", sinks=["jsonl", seen.append])
    assert isinstance(writer_of(runtime), EpisodeWriter)
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        runtime = at.configure(
            out=str(tmp_path), run_name="cb2", sinks=[seen.append], writer="process"
        )
    assert isinstance(writer_of(runtime), EpisodeWriter)
    assert "cannot run your own sink objects in another process" in caplog.text
    run_episodes(2)
    runtime.shutdown()
    assert [t.task_id for t in seen] == ["0", "1"]


def test_thread_and_process_writers_write_the_same_trajectories(tmp_path) -> None:
    results = {}
    for mode in ("thread", "process"):
        runtime = at.configure(out=str(tmp_path), run_name=mode, writer=mode)
        run_episodes(4, steps=5)
        runtime.shutdown()
        results[mode] = sorted(load_trajectories(runtime.trajectory_paths), key=lambda t: t.task_id)
    assert isinstance(results["thread"][0], at.Trajectory)
    for a, b in zip(results["thread"], results["process"], strict=True):
        assert (a.task_id, a.status, a.length, a.return_) == (
            b.task_id,
            b.status,
            b.length,
            b.return_,
        )
        assert [s.observation for s in a.steps] == [s.observation for s in b.steps]
        assert [s.reward for s in a.steps] == [s.reward for s in b.steps]


def test_reconfiguring_reuses_the_helper(tmp_path) -> None:
    at.configure(out=str(tmp_path), run_name="one")
    first = helper_process()
    at.configure(out=str(tmp_path), run_name="two")
    assert helper_process() is first


def kill_helper() -> None:
    process = helper_process()
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + 10
    while writer_process._helper is not None and writer_process._helper.alive:
        assert time.monotonic() < deadline, "the reply thread did not notice the helper died"
        time.sleep(0.01)


def test_a_helper_that_dies_after_a_flush_loses_nothing(tmp_path, caplog) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="crash", sinks=["jsonl"])
    run_episodes(10)
    assert runtime.force_flush()
    kill_helper()
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        run_episodes(10, first=10)
        runtime.shutdown()
    assert "the writer process exited unexpectedly" in caplog.text
    stats = runtime.stats()
    assert stats["episodes_lost_writer_crash"] == 0
    assert stats["episodes_written"] == 20
    written = load_trajectories(runtime.trajectory_paths)
    assert sorted(int(t.task_id) for t in written) == list(range(20))
    # The helper's span lines, then this process's own, in the same file.
    assert len(list(read_otlp_json(runtime.span_paths))) == 20 * 7


def run_with_the_helper_killed_mid_run(tmp_path, caplog) -> at.AgentTrace:
    """20 episodes to a stopped helper (it takes what fits in the pipe and writes nothing),
    the helper killed, 5 more episodes, shutdown; the pipeline, for its stats and files."""
    runtime = at.configure(out=str(tmp_path), run_name="midrun", sinks=["jsonl"])
    helper_process().send_signal(signal.SIGSTOP)
    try:
        run_episodes(20)
        assert not runtime.force_flush(timeout_millis=1500)  # cannot finish: it is stopped
    finally:
        kill_helper()
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        run_episodes(5, first=20)
        runtime.shutdown()
    return runtime


def test_a_helper_killed_mid_run_loses_nothing_it_was_sent(tmp_path, caplog) -> None:
    runtime = run_with_the_helper_killed_mid_run(tmp_path, caplog)
    stats = runtime.stats()
    written = sorted(int(t.task_id) for t in load_trajectories(runtime.trajectory_paths))
    assert written == list(range(25))  # what it was sent and never wrote is written here
    assert stats["episodes_lost_writer_crash"] == stats["spans_lost_writer_crash"] == 0
    assert stats["episodes_written"] == 25 and stats["spans_written"] == 25 * 7
    assert "were found in its files and" in caplog.text
    assert len(list(read_otlp_json(runtime.span_paths))) == 25 * 7


def test_a_helper_killed_mid_run_counts_what_it_did_not_confirm(
    tmp_path, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(writer_process, "MAX_RETAINED_SPANS", 0)  # keep no records to write
    runtime = run_with_the_helper_killed_mid_run(tmp_path, caplog)
    stats = runtime.stats()
    written = sorted(int(t.task_id) for t in load_trajectories(runtime.trajectory_paths))
    lost = stats["episodes_lost_writer_crash"]
    assert lost >= 1  # at least the first batch went into the pipe and was never confirmed
    assert lost + len(written) == 25  # every episode is either written or counted
    assert stats["episodes_written"] == len(written)
    assert written[-5:] == list(range(20, 25))
    assert stats["spans_lost_writer_crash"] == lost * 7
    assert f"{lost} episode(s) and {lost * 7} span(s) are counted as lost" in caplog.text


def test_a_sink_that_cannot_open_fails_configure_with_its_own_error(tmp_path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "episodes").write_text("a file where the sink wants a folder")
    with pytest.raises(FileExistsError):
        at.configure(out=str(tmp_path), run_name="bad", sinks=["jsondir"], writer="process")


def test_log_records_of_the_helper_reach_this_process(tmp_path, caplog) -> None:
    runtime = at.configure(
        out=str(tmp_path), run_name="logs", sinks=["jsondir", "jsonl"], writer="process"
    )
    assert writer_of(runtime).in_helper_process
    (tmp_path / "logs" / "episodes" / "taken.json").mkdir()  # this episode's file cannot be written
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        with at.episode(episode_id="taken"):
            pass
        run_episodes(2)
        runtime.shutdown()
    assert "sink JsonDirSink failed (IsADirectoryError" in caplog.text
    assert runtime.stats()["sink_errors"] == {"JsonDirSink": 1}
    jsonl = [p for p in runtime.trajectory_paths if p.suffix == ".jsonl"]
    assert len(load_trajectories(jsonl)) == 3  # the other sink, and the other episodes, go on
    assert len([p for p in runtime.trajectory_paths if p.suffix == ".json"]) == 2


def test_a_forked_child_gets_its_own_helper(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="fork", sinks=["jsonl"])
    run_episodes(2)
    parent_helper = helper_process().pid
    pid = os.fork()
    if pid == 0:  # child: must not write into the parent's pipe
        code = 1
        try:
            run_episodes(3, first=100)
            at.force_flush()
            helper = writer_process._helper
            ok = helper is not None and helper.process.pid != parent_helper
            ok = ok and at.get_default().stats()["episodes_written"] == 3
            at.shutdown()
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    run_episodes(2, first=2)
    runtime.shutdown()
    written = load_trajectories(tmp_path / "fork")
    assert sorted(int(t.task_id) for t in written) == [0, 1, 2, 3]
    assert runtime.stats()["episodes_written"] == 4
    # The child wrote its episodes to a run folder of its own.
    written = load_trajectories(tmp_path / f"fork-worker-{pid}")
    assert sorted(int(t.task_id) for t in written) == [100, 101, 102]


def test_ctrl_c_stops_the_program_but_the_helper_finishes_the_files(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        import agenttrace as at
        at.configure(out={str(tmp_path)!r}, run_name="sigint")
        for i in range(5):
            with at.episode(task_id=str(i)):
                with at.env_step() as step:
                    step.record(reward=1.0, terminated=True)
        print("ready", flush=True)
        for _ in range(600):  # short sleeps: see WAIT_IN_SHORT_SLEEPS in test_process_end
            time.sleep(0.1)
        """
    )
    program = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert program.stdout is not None
        assert program.stdout.readline().strip() == "ready"
        os.killpg(program.pid, signal.SIGINT)  # like Ctrl-C: the whole process group
        _, stderr = program.communicate(timeout=60)
    finally:
        if program.poll() is None:
            os.killpg(program.pid, signal.SIGKILL)
    assert "KeyboardInterrupt" in stderr
    written = load_trajectories(tmp_path / "sigint")
    assert sorted(t.task_id for t in written) == ["0", "1", "2", "3", "4"]


def play_vector_env(vector_steps: int, *, kill_after: int | None = None) -> None:
    """Three CartPole sub-envs stepped by a TracedVectorEnv (seeded, same actions each run);
    the helper is killed after ``kill_after`` steps, with every sub-env mid-episode."""
    import gymnasium as gym
    import numpy as np

    from agenttrace.instrument.vector import TracedVectorEnv

    envs = TracedVectorEnv(
        gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=25)
    )
    observations, _ = envs.reset(seed=3)
    for t in range(vector_steps):
        if t == kill_after:
            assert at.force_flush()  # the vector spans so far are in the helper's span file
            kill_helper()
        observations, *_ = envs.step((observations[:, 2] > 0).astype(np.int64))
    envs.close()


def test_a_helper_killed_mid_vector_episode_loses_none_of_its_steps(tmp_path, caplog) -> None:
    """The episodes open when the helper died are taken over from the span file, where each
    step is inside an env.vector_step span: split again, the same trajectories."""
    results = {}
    for name, kill_after in (("calm", None), ("killed", 40)):
        runtime = at.configure(out=str(tmp_path), run_name=name, sinks=["jsonl"], spans=["file"])
        with caplog.at_level(logging.WARNING, logger="agenttrace"):
            play_vector_env(70, kill_after=kill_after)
            runtime.shutdown()
        results[name] = sorted(
            load_trajectories(runtime.trajectory_paths),
            key=lambda t: (t.attributes["rl.env.index"], t.start_time),
        )
        assert runtime.stats()["spans_lost_writer_crash"] == 0
    assert "the writer process exited unexpectedly" in caplog.text
    calm, killed = results["calm"], results["killed"]
    assert len(calm) == len(killed) >= 6
    for a, b in zip(calm, killed, strict=True):
        assert (a.status, a.length, a.return_) == (b.status, b.length, b.return_)
        assert [s.action for s in a.steps] == [s.action for s in b.steps]
        assert all(
            (x.observation == y.observation).all() for x, y in zip(a.steps, b.steps, strict=True)
        )
