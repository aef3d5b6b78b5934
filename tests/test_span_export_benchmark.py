"""benchmarks/collector_export.py runs, and its accounting adds up (no timings checked here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "collector_export.py"


def test_collector_benchmark_loses_nothing_to_live_and_slow_collectors() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_"))}
    env["AGENTTRACE_EXIT_TIMEOUT"] = "0.5"  # the exit deadline: keeps the black hole short
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "2000", "--rounds", "2", "--episodes", "20"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    # The script exits non-zero when exported + not exported != spans made.
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for variant in ("no endpoint", "agenttrace + collector", "agenttrace + slow collector"):
        assert re.search(rf"^{re.escape(variant)} +[\d,]+ +[\d.]+ +[\d.]+ ms +0$", out, re.M)
    assert re.search(r"^agenttrace \+ black hole +[\d,]+ +[\d.]+ +[\d.]+ ms +0$", out, re.M)
    assert re.search(r"agenttrace / raw SDK, to the collector: \d+\.\d\d \(rounds", out)
    assert re.search(r"black hole / no endpoint: \d+\.\d\d \(rounds", out)
    assert re.search(r"real exit of a child process against the black hole: [\d.]+ s", out)
    assert re.search(r"its exit line: agenttrace: \d+ episodes? -> .* spans not sent", out)
    for way in ("woken at episode end", r"tick only \(before\)"):
        assert re.search(rf"episode end -> disk, {way}: p50 [\d.]+ ms, p99 [\d.]+ ms", out)
        assert re.search(rf"{way}: .* over 20 episodes", out)


def test_exit_times_benchmark_exits_each_kind_with_its_line() -> None:
    script = SCRIPT.parent / "exit_times.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_"))}
    env["AGENTTRACE_EXIT_TIMEOUT"] = "1"  # the black hole's share of the run
    done = subprocess.run(
        [sys.executable, str(script), "--runs", "1", "--slow", "0.2"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split("  ")[0].strip(): line for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {"accepts", "slow", "refuses", "503", "black hole"}
    for kind in ("accepts", "slow"):
        assert rows[kind].endswith("0  agenttrace: 1 episode -> ..."), rows[kind]
    assert "export failed: " in rows["refuses"] and "Connection refused" in rows["refuses"]
    assert "Service Unavailable" in rows["503"]
    assert "still queued at the exit deadline" in rows["black hole"]
