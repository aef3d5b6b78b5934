"""benchmarks/dead_endpoint.py runs, and its accounting adds up (no timings checked here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "dead_endpoint.py"


def test_dead_endpoint_benchmark_counts_every_span() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_"))}
    env["AGENTTRACE_EXIT_TIMEOUT"] = "0.5"  # the exit deadline: keeps the run short
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "2000", "--rounds", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    # The script exits non-zero when exported + not exported != spans ended, or when a
    # variant has the wrong number of OTLP span processors.
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"ratio dead endpoint / no endpoint: \d+\.\d\d \(rounds [\d.]+-[\d.]+\)", out)
    assert "spans missing from the span files: 0" in out
    assert re.search(r"OTLP counters, all dead-endpoint rounds: exported=0, not_exported=\d+", out)
    assert re.search(r"real exit of a child process with the dead endpoint: [\d.]+ s", out)
    assert "its exit line: agenttrace: " in out
