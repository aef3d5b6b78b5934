"""The helper-process writer killed at random points: every episode is written once or counted
lost, and the files it leaves behind read without a torn line."""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import threading
import time
from collections import Counter

import pytest

import agenttrace as at
from agenttrace.processing import writer_process
from agenttrace.processing.writer_process import RemoteWriter
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2,
    reason="the helper-process writer is the default on POSIX machines with 2+ CPUs",
)

EPISODES = 300
STEPS = 3
SPANS_PER_EPISODE = 1 + 2 * STEPS  # the episode, and a timestep and an env step per step
KILLS = 50

TAKEOVER = re.compile(
    r"Of (\d+) episode\(s\) and span batch\(es\) sent to it and not confirmed written, "
    r"(\d+) episode\(s\) were found in its files and (\d+) item\(s\) were written again here"
)


def run_episodes(n: int) -> None:
    for i in range(n):
        with at.episode(task_id=str(i)):
            for t in range(STEPS):
                with at.timestep():
                    with at.env_step() as step:
                        step.record(observation=[i, t], reward=float(t), terminated=t == STEPS - 1)


def kill_after_sent(writer: RemoteWriter, pid: int, item: int, delay: float) -> None:
    """SIGKILL the helper ``delay`` seconds after the writer has sent it item number ``item``
    (counting episodes from 1): a random point of its work, wherever the processor's thread
    happens to send (during the loop, or at shutdown)."""
    deadline = time.monotonic() + 30
    while writer._sent < item and time.monotonic() < deadline:
        time.sleep(0.0001)
    if delay:
        time.sleep(delay)
    os.kill(pid, signal.SIGKILL)


def wait_until_noticed() -> None:
    """The next configure() must start a new helper, not find this dead one."""
    deadline = time.monotonic() + 10
    while writer_process._helper is not None and writer_process._helper.alive:
        assert time.monotonic() < deadline, "the reply thread did not notice the helper died"
        time.sleep(0.005)


def test_killing_the_helper_anywhere_writes_each_episode_once_or_counts_it_lost(
    tmp_path, monkeypatch, caplog
) -> None:
    rng = random.Random(20261125)
    seen: Counter[str] = Counter()
    started = time.monotonic()
    for run in range(KILLS):
        keep_records = run % 2 == 0  # odd runs keep no records: what is not in the file is lost
        monkeypatch.setattr(writer_process, "MAX_RETAINED_SPANS", 100_000 if keep_records else 0)
        runtime = at.configure(out=str(tmp_path), run_name=f"kill{run}", sinks=["jsonl"])
        assert runtime.trajectory_processor is not None
        writer = runtime.trajectory_processor.writer
        assert isinstance(writer, RemoteWriter) and writer.in_helper_process
        helper = writer_process._helper
        assert helper is not None
        item = rng.randrange(1, EPISODES + 1)
        delay = 0.0 if rng.random() < 0.5 else rng.uniform(0, 0.001)
        killer = threading.Thread(
            target=kill_after_sent, args=(writer, helper.process.pid, item, delay)
        )
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="agenttrace"):
            killer.start()
            run_episodes(EPISODES)
            runtime.shutdown()
            killer.join()
        wait_until_noticed()

        stats = runtime.stats()
        problems: list[object] = []
        written = load_trajectories(runtime.trajectory_paths, on_error=problems.append)
        spans = list(read_otlp_json(runtime.span_paths, on_error=problems.append))
        assert problems == []  # no torn or broken line anywhere
        task_ids = [t.task_id for t in written]
        assert len(set(task_ids)) == len(task_ids), "an episode was written twice"
        span_keys = {(r.trace_id, r.span_id) for r in spans}
        assert len(span_keys) == len(spans), "a span was written twice"

        lost = stats["episodes_lost_writer_crash"]
        assert lost + len(written) == EPISODES, (run, lost, len(written))
        assert stats["episodes_written"] == len(written)
        assert stats["statuses"] == {"completed": len(written)}
        assert stats["spans_lost_writer_crash"] + len(spans) == EPISODES * SPANS_PER_EPISODE
        assert stats["spans_written"] == len(spans)
        if keep_records:
            assert lost == 0 and stats["spans_lost_writer_crash"] == 0

        seen["episodes lost"] += lost
        seen["torn lines cut"] += writer.report()["torn_lines_cut"]
        if writer.in_helper_process:
            seen["runs killed after the helper had finished"] += 1
        match = TAKEOVER.search(caplog.text)
        if match is not None:
            unconfirmed, found, again = map(int, match.groups())
            seen["runs with unconfirmed items"] += 1
            seen["unconfirmed items"] += unconfirmed
            seen["found written, not confirmed"] += found
            seen["written again"] += again
    elapsed = time.monotonic() - started
    print(f"\n{KILLS} kills in {elapsed:.1f} s: {dict(seen)}")
    # The kills landed while the helper had work in hand, not only between batches.
    assert seen["runs with unconfirmed items"] >= KILLS // 5
