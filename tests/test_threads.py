"""agenttrace's threads leave SIGTERM and SIGINT to the main thread, from their first line.

A signal taken by another thread never wakes a main thread blocked in C (a pool worker
waiting on its task queue), so the process would hang instead of ending. Checked here on the
threads' real signal masks (``/proc/self/task/*/status``), for the helper that starts them and
for every thread a pipeline with span export and metrics starts.
"""

from __future__ import annotations

import signal
import textwrap
import threading
from pathlib import Path

import pytest

from agenttrace._threads import signals_blocked, start_daemon
from tests.conftest import run_script

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask") or not Path("/proc/self/task").is_dir(),
    reason="POSIX signal masks and /proc",
)

TERM_AND_INT = {signal.SIGTERM, signal.SIGINT}


def test_a_started_thread_blocks_the_signals_from_its_first_line():
    seen: list[set[int]] = []
    thread = start_daemon(lambda: seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, [])), "t")
    thread.join(10)
    assert thread.daemon and thread.name == "t"
    assert seen[0] >= TERM_AND_INT


def test_the_starting_thread_gets_its_own_mask_back():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    start_daemon(lambda: None, "t").join(10)
    with signals_blocked():
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) >= TERM_AND_INT
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
    assert not TERM_AND_INT & before  # (the test runner's main thread takes them itself)


def test_a_thread_started_plainly_would_take_them():
    """The check below can fail: a plain thread's mask is its starter's, SIGTERM unblocked."""
    seen: list[set[int]] = []
    thread = threading.Thread(target=lambda: seen.append(signal.pthread_sigmask(1, [])))
    thread.start()
    thread.join(10)
    assert not TERM_AND_INT & seen[0]


PIPELINE_THREADS = textwrap.dedent(
    """
    import json, os, threading
    import agenttrace as at

    at.configure(out="runs", spans="file,otlp", metrics="otlp")
    with at.episode(task_id="t"):
        with at.env_step() as step:
            step.record_result((1, 1.0, True, False, {}))
    at.force_flush(2000)

    def blocked(tid):
        with open(f"/proc/self/task/{tid}/status") as status:
            mask = next(l for l in status if l.startswith("SigBlk:")).split()[1]
        return [bool(int(mask, 16) >> (n - 1) & 1) for n in (15, 2)]  # SIGTERM, SIGINT

    print(json.dumps({t.name: blocked(t.native_id) for t in threading.enumerate()}))
    os._exit(0)
    """
)


def test_every_thread_a_pipeline_starts_leaves_the_signals_to_the_main_thread(tmp_path):
    done = run_script(
        tmp_path,
        PIPELINE_THREADS,
        timeout=120,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",  # refused at once: nothing listens
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_METRIC_EXPORT_INTERVAL="60000",
    )
    assert done.returncode == 0, done.stderr
    import json

    threads = json.loads(done.stdout.strip().splitlines()[-1])
    assert threads.pop("MainThread") == [False, False]
    assert len(threads) >= 3, threads  # the writer, the span sender, the metric reader
    assert {name: mask for name, mask in threads.items() if mask != [True, True]} == {}
