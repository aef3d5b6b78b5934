"""Ends of a process that skip atexit: SIGTERM, and multiprocessing workers (real signals, real
subprocesses). Whatever the program finished is written; the episode in progress comes out
``incomplete`` with the steps it had."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import clean_environ, exported, run_script

from agenttrace.sinks import load_trajectories

#: Plays episodes of five steps, noting each finished episode's id in its own record (flushed
#: line by line, so it survives the kill); after 20 it opens one more, plays two steps of it,
#: says "ready" and waits.
LOOP = textwrap.dedent(
    """
    import signal, sys, time
    import agenttrace as at

    def step(i, last):
        with at.timestep():
            with at.env_step() as s:
                s.record(action=i)
                s.record_result(({"i": i}, 1.0, last, False, {}))

    SETUP

    record = open("finished.txt", "w")
    for n in range(20):
        with at.episode(task_id=f"t{n}") as ep:
            for i in range(5):
                step(i, i == 4)
        record.write(ep.id + "\\n")
        record.flush()
    with at.episode(task_id="in-progress"):
        step(0, False)
        step(1, False)
        print("ready", flush=True)
        WAIT
    print("left the episode", flush=True)
    """
)


#: Waits in short sleeps, as a program's own loop would. CPython runs a Python signal handler
#: only between bytecodes: a SIGTERM that lands after ``print("ready")`` but before one long
#: ``time.sleep(60)`` starts its clock would be handled a minute later (seen once in 40 runs
#: under load), which says nothing about agenttrace.
WAIT_IN_SHORT_SLEEPS = "for _ in range(600):\n            time.sleep(0.1)"


def start(folder: Path, setup: str = "", wait: str = WAIT_IN_SHORT_SLEEPS, **env: str):
    script = LOOP.replace("SETUP", setup).replace("WAIT", wait)
    (folder / "loop.py").write_text(script)
    process = subprocess.Popen(
        [sys.executable, "loop.py"],
        cwd=folder,
        env=clean_environ(AGENTTRACE_OUT=str(folder / "runs"), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line == "ready\n", process.stderr.read() if process.stderr else line
    return process


def finished_ids(folder: Path) -> list[str]:
    return (folder / "finished.txt").read_text().split()


def test_sigterm_writes_every_finished_episode_and_the_open_one_as_incomplete(tmp_path):
    process = start(tmp_path)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    took = time.monotonic() - sent
    assert process.returncode == -signal.SIGTERM, err  # still ends as SIGTERM would
    assert took < 5.0 + 10  # the exit deadline (AGENTTRACE_EXIT_TIMEOUT, 5 s) and slack
    trajectories = load_trajectories(tmp_path / "runs")
    by_id = {t.episode_id: t for t in trajectories}
    assert len(by_id) == len(trajectories) == 21
    for episode_id in finished_ids(tmp_path):
        assert by_id[episode_id].status == "completed"
        assert [s.action for s in by_id[episode_id].steps] == [0, 1, 2, 3, 4]
    (open_one,) = [t for t in trajectories if t.task_id == "in-progress"]
    assert open_one.status == "incomplete"
    assert [s.action for s in open_one.steps] == [0, 1]
    assert "left the episode" not in out
    assert "agenttrace: 21 episodes ->" in err


def test_a_programs_own_sigterm_handler_is_chained_not_replaced(tmp_path):
    """The handler lets the program finish its episode; agenttrace flushes first."""
    setup = (
        "stop = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('own handler', flush=True), "
        "stop.append(1)))\n"
    )
    wait = "while not stop:\n            time.sleep(0.01)"
    process = start(tmp_path, setup, wait)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "own handler" in out and "left the episode" in out
    trajectories = load_trajectories(tmp_path / "runs")
    assert len(trajectories) == 21
    (last,) = [t for t in trajectories if t.task_id == "in-progress"]
    assert last.status != "incomplete" and len(last.steps) == 2


def test_an_ignored_sigterm_stays_ignored(tmp_path):
    code = textwrap.dedent(
        """
        import os, signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        import agenttrace as at
        with at.episode(task_id="x"):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        print("still here")
        """
    )
    done = run_script(tmp_path, code, AGENTTRACE_EXIT_REPORT="false")
    assert done.returncode == 0, done.stderr
    assert "still here" in done.stdout


WORKER = textwrap.dedent(
    """
    import multiprocessing, sys
    import agenttrace as at

    def play(count):
        for n in range(count):
            with at.episode(task_id=f"worker-{n}"):
                with at.env_step() as s:
                    s.record_result(({"n": n}, 1.0, True, False, {}))

    if __name__ == "__main__":
        if sys.argv[2] == "parent-traces-first":  # the workers inherit a running pipeline
            play(3)
        context = multiprocessing.get_context(sys.argv[1])
        workers = [context.Process(target=play, args=(25,)) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        print("exit codes", [w.exitcode for w in workers])
    """
)


@pytest.mark.parametrize(
    ("method", "parent"),
    [("fork", "quiet"), ("fork", "parent-traces-first"), ("spawn", "parent-traces-first")],
)
def test_multiprocessing_workers_write_every_episode_when_they_end(tmp_path, method, parent):
    """A worker ends with os._exit (fork) or a normal exit (spawn): its episodes are written.
    A forked worker does not write through its copy of the parent's pipeline (its threads and
    files are the parent's) but through its own, in a run folder named after the parent's."""
    done = run_script(
        tmp_path, WORKER, method, parent, AGENTTRACE_OUT=str(tmp_path / "runs"), timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert "exit codes [0, 0]" in done.stdout
    runs = sorted((tmp_path / "runs").iterdir())
    workers = [run for run in runs if len(load_trajectories(run)) == 25]
    assert len(workers) == 2
    for run in workers:
        trajectories = load_trajectories(run)
        assert sorted(t.task_id for t in trajectories) == sorted(f"worker-{n}" for n in range(25))
        assert all(t.status == "completed" for t in trajectories)
    if parent == "parent-traces-first":
        (own,) = [run for run in runs if run not in workers]
        assert [t.task_id for t in load_trajectories(own)] == [f"worker-{n}" for n in range(3)]
        if method == "fork":
            assert all(run.name.startswith(f"{own.name}-worker-") for run in workers)
    # Only the parent says where it wrote: workers are quiet at exit.
    assert done.stderr.count("episodes ->") == (1 if parent == "parent-traces-first" else 0)


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_after_sigkill_every_episode_finished_a_second_earlier_is_written(tmp_path, writer):
    """SIGKILL runs nothing: what is on disk is what the writer had written. Episodes that
    ended more than the hand-over interval (1 s) before the kill are all there."""
    process = start(tmp_path, AGENTTRACE_WRITER=writer)
    time.sleep(1.5)
    process.kill()
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    finished = set(finished_ids(tmp_path))
    written: set[str] = set()
    for _ in range(100):  # the helper process sees its input end, writes what it has, exits
        trajectories = load_trajectories(tmp_path / "runs", on_error=lambda error: None)
        written = {t.episode_id for t in trajectories if t.status == "completed"}
        if finished <= written:
            break
        time.sleep(0.1)
    assert finished <= written, sorted(finished - written)


@pytest.mark.parametrize(
    ("writer", "interval", "wait"),
    [("process", "1", 2.5), ("thread", "1", 2.5), ("auto", "0.2", 1.0)],
)
def test_after_sigkill_the_episode_in_progress_is_rebuilt_from_the_span_file(
    tmp_path, writer, interval, wait
):
    """An open episode's spans reach spans.jsonl within the flush interval of ending, so
    after a SIGKILL `agenttrace export` rebuilds it, incomplete, with the steps it had."""
    process = start(tmp_path, AGENTTRACE_WRITER=writer, AGENTTRACE_FLUSH_INTERVAL=interval)
    time.sleep(wait)  # past the tick (AGENTTRACE_FLUSH_INTERVAL) that streams open episodes
    process.kill()
    process.communicate(timeout=60)
    finished = set(finished_ids(tmp_path))
    (run,) = (tmp_path / "runs").iterdir()
    rebuilt: list = []
    for _ in range(100):  # the helper process finishes what it was handed, then exits
        rebuilt = exported(str(run / "spans*.jsonl"), tmp_path / f"rebuilt-{_}.jsonl")
        if {t.episode_id for t in rebuilt} >= finished and len(rebuilt) > len(finished):
            break
        time.sleep(0.1)
    (in_progress,) = [t for t in rebuilt if t.episode_id not in finished]
    assert in_progress.status == "incomplete"
    assert [s.action for s in in_progress.steps] == [0, 1]
    assert [s.observation for s in in_progress.steps][1:] == [{"i": 0}]


VECTOR_ENV = textwrap.dedent(
    """
    import sys
    import gymnasium as gym
    import numpy as np
    from agenttrace.instrument.wrappers import TracedEnv

    def make():
        return TracedEnv(gym.make("CartPole-v1"), task_id="vector")

    if __name__ == "__main__":
        envs = gym.vector.AsyncVectorEnv([make, make], context=sys.argv[1])
        envs.reset(seed=0)
        ended = steps = 0
        resetting = np.zeros(2, dtype=bool)  # next-step autoreset: this call resets those
        for _ in range(300):
            steps += int(np.sum(~resetting))
            _, _, terminated, truncated, _ = envs.step(np.ones(2, dtype=np.int64))
            resetting = terminated | truncated
            ended += int(np.sum(resetting))
        envs.close()
        print("ended", ended, "steps", steps)
    """
)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_vector_envs_workers_write_every_episode_when_it_closes(tmp_path, method):
    """AsyncVectorEnv's close() ends its workers: each writes the episodes its sub-env ended
    (as many as the parent saw end) and the one it was playing (ended by the close)."""
    done = run_script(
        tmp_path, VECTOR_ENV, method, AGENTTRACE_OUT=str(tmp_path / "runs"), timeout=180
    )
    assert done.returncode == 0, done.stderr
    _, ended, _, steps = done.stdout.split()
    ended, steps = int(ended), int(steps)
    trajectories = load_trajectories(tmp_path / "runs")
    statuses = Counter(t.status for t in trajectories)
    assert statuses["completed"] + statuses["truncated"] == ended > 0
    # (always pushing right, CartPole ends within a few dozen steps: many episodes per worker)
    assert statuses["aborted"] == 2, statuses  # the episode each sub-env was in at close
    assert sum(len(t.steps) for t in trajectories) == steps


POOL = textwrap.dedent(
    """
    import concurrent.futures, multiprocessing, sys
    import agenttrace as at

    def play(n):
        with at.episode(task_id=f"task-{n}"):
            with at.env_step() as s:
                s.record_result(({"n": n}, 1.0, True, False, {}))
        return n

    if __name__ == "__main__":
        context = multiprocessing.get_context(sys.argv[1])
        if sys.argv[2] == "pool":  # leaving the with block terminates the workers (SIGTERM)
            with context.Pool(2) as pool:
                done = pool.map(play, range(40))
        else:
            with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as executor:
                done = list(executor.map(play, range(40)))
        print("played", len(done))
    """
)


@pytest.mark.parametrize("pool", ["pool", "executor"])
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_process_pool_workers_write_every_episode_when_the_pool_ends(tmp_path, method, pool):
    done = run_script(
        tmp_path, POOL, method, pool, AGENTTRACE_OUT=str(tmp_path / "runs"), timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert "played 40" in done.stdout
    trajectories = load_trajectories(tmp_path / "runs")
    assert sorted(t.task_id for t in trajectories) == sorted(f"task-{n}" for n in range(40))
    assert all(t.status == "completed" for t in trajectories)
