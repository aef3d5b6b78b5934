"""The benchmark scripts run, and the overhead benchmark's loss accounting adds up.

Only behaviour is checked here (no timings: those live in the benchmarks themselves).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_overhead_benchmark_loses_nothing_with_either_writer() -> None:
    for writer, metrics in (("auto", "--metrics"), ("thread", None)):
        extra = [metrics] if metrics else []
        out = run("overhead.py", "--steps", "4000", "--rounds", "2", "--writer", writer, *extra)
        assert f"episode metrics: {bool(metrics)}" in out
        assert re.search(r"spans lost: 0  trajectories lost: 0  over \d{4,} agenttrace steps", out)
        ratio = r"ratio agenttrace / raw SDK: \d+\.\d\d \(rounds \d+\.\d\d-\d+\.\d\d\)"
        assert re.search(ratio, out)
        assert "spans_dropped=0, episodes_dropped_queue_full=0" in out


def test_auto_overhead_benchmark_traces_like_the_hand_written_loop() -> None:
    """Auto-instrumented (functions and gymnasium methods) and hand-written loops: same
    trajectories and spans, nothing lost (the script exits non-zero when they differ)."""
    out = run("auto_overhead.py", "--steps", "4000", "--rounds", "2")
    assert re.search(r"spans lost: 0  trajectories lost: 0  over \d{4,} traced steps", out)
    assert "dropped by agenttrace: 0" in out
    for variant in ("auto functions", "auto methods"):
        assert f"{variant}: same trajectories and same spans as hand-written" in out
        assert re.search(
            rf"ratio {variant} / hand-written: \d+\.\d\d \(CPU \d+\.\d\d; rounds "
            rf"\d+\.\d\d-\d+\.\d\d\)",
            out,
        )


def test_long_episode_benchmark_compares_live_and_offline() -> None:
    out = run("long_episode.py", "--steps", "50", "200")
    for steps in ("50", "200"):
        assert re.search(
            rf"^{steps} +completed {steps} +completed {steps} +True +traced process \d+, "
            r"writer helper \d+, export \d+$",
            out,
            re.M,
        ), out


def test_gateway_benchmark_records_every_call_it_times() -> None:
    out = run("gateway.py", "--calls", "60", "--streams", "2", "--chunks", "5", "--warmup", "5")
    assert "p50" in out and "p99" in out, out


def test_collect_throughput_benchmark_compares_collect_with_export() -> None:
    out = run("collect_throughput.py", "--spans", "3000", "--producers", "2")
    assert re.search(r"agenttrace collect: .* spans/s", out), out
    assert re.search(r"agenttrace export: .* spans/s", out), out
    assert "collect / export: x" in out


def test_viewer_benchmark_indexes_the_whole_run_it_writes() -> None:
    out = run("viewer.py", "--episodes", "300", "--steps", "3", "--starts", "2")
    assert "run: 300 episodes of 3 steps" in out, out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["episodes"] == 300 and figures["first_page_s"] <= figures["indexed_s"]
    assert figures["rss_mib"] > 0
