"""When the collector fails: the README's first example and ``agenttrace demo`` against real
OTLP/HTTP servers on 127.0.0.1 that accept, answer slowly (up to the exporter's timeout),
refuse connections, never answer, or answer 503.

Each run is a real process. What is checked: the spans the server received (all of them, or
none and each one counted in the exit line), the time from the end of the loop to the end of
the process (within the exit deadline; fast when the endpoint fails outright), the exit
status, the one exit line, and that nothing else reaches stderr: no traceback, no exporter's
retry chatter.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backend_servers import BlackHole, OtlpReceiver, refused_endpoint
from conftest import clean_environ, run_script
from test_readme import README, fenced_blocks

from agenttrace.storage import read_otlp_json

EXIT_TIMEOUT = 4.0  # AGENTTRACE_EXIT_TIMEOUT for these runs
SLACK = 2.5  # a loaded CI machine: process teardown, interpreter exit
EXPORT_TIMEOUT = 2.0  # OTEL_EXPORTER_OTLP_TIMEOUT: the slow server answers within it
SLOW = 1.5  # seconds the slow server takes per request

KINDS = ("accepts", "slow", "refuses", "black hole", "503")


class Server:
    """One kind of endpoint; ``receiver`` is None for the ones that keep nothing."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.receiver: OtlpReceiver | None = None
        self.hole: BlackHole | None = None
        if kind == "accepts":
            self.receiver = OtlpReceiver()
        elif kind == "slow":
            self.receiver = OtlpReceiver(delay=SLOW)
        elif kind == "503":
            self.receiver = OtlpReceiver(status=503, retry_after=1)
        elif kind == "black hole":
            self.hole = BlackHole()
        if self.receiver is not None:
            self.endpoint = self.receiver.endpoint
        elif self.hole is not None:
            self.endpoint = self.hole.endpoint
        else:
            self.endpoint = refused_endpoint()

    @property
    def delivers(self) -> bool:
        return self.kind in ("accepts", "slow")

    @property
    def spans(self) -> int:
        return len(self.receiver.spans) if self.receiver is not None else 0

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.stop()
        if self.hole is not None:
            self.hole.stop()


@pytest.fixture(params=KINDS)
def server(request) -> Iterator[Server]:
    running = Server(request.param)
    yield running
    running.stop()


def environment(server: Server, out: Path) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": server.endpoint,
        "OTEL_EXPORTER_OTLP_TIMEOUT": str(EXPORT_TIMEOUT),
        "AGENTTRACE_EXIT_TIMEOUT": str(EXIT_TIMEOUT),
        "AGENTTRACE_OUT": str(out),
    }


def exit_bound(server: Server) -> float:
    """The longest the exit may take: the deadline, or a failure seen at once."""
    if server.kind in ("refuses", "503"):
        return 1.5 + SLACK  # the first failed attempt ends the wait
    if server.kind == "slow":
        return 2 * SLOW + SLACK  # spans, then metrics: delivered, not cut off
    return EXIT_TIMEOUT + SLACK


def assert_quiet(stderr: str, allowed: re.Pattern[str]) -> list[str]:
    """stderr holds only lines matching ``allowed``: no traceback, no exporter's chatter."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    strays = [line for line in lines if not allowed.match(line)]
    assert not strays, stderr
    return lines


def test_the_readmes_first_example(server, tmp_path) -> None:
    code = fenced_blocks(README.read_text(), "python")[0]
    code += '\nimport time\nprint("loop-ended", time.time(), flush=True)\n'
    result = run_script(tmp_path, code, timeout=120, **environment(server, tmp_path / "runs"))
    ended = time.time()
    assert result.returncode == 0, result.stderr
    [marker] = [line for line in result.stdout.splitlines() if line.startswith("loop-ended")]
    assert ended - float(marker.split()[1]) < exit_bound(server)
    [line] = assert_quiet(result.stderr, re.compile(r"agenttrace: "))
    [run] = (tmp_path / "runs").iterdir()
    assert line.startswith(f"agenttrace: 1 episode -> {run / 'trajectories.jsonl'}")
    in_file = list(read_otlp_json(run / "spans.jsonl"))
    assert len(in_file) > 2 and (len(in_file) - 2) % 3 == 0  # episode, reset, 3 per step
    if server.delivers:
        assert server.spans == len(in_file)
        assert sorted(s.span_id.hex() for s in server.receiver.spans) == sorted(
            format(r.span_id, "016x") for r in in_file
        )
        assert server.receiver.metrics  # the episode metrics went too
        assert line == f"agenttrace: 1 episode -> {run / 'trajectories.jsonl'}"
        return
    assert server.spans == 0
    reason = {
        "refuses": r"export failed: \d+; Connection refused",
        "503": r"export failed: \d+; Service Unavailable",
        # (cut off by the deadline, or by the exporter's own timeout first)
        "black hole": r"still queued at the exit deadline|export failed: \d+; timeout",
    }[server.kind]
    assert f"{len(in_file):,} spans not sent to the OTLP endpoint (" in line
    assert re.search(reason, line) and "(all in the span file)" in line
    assert "episode metrics not sent to the OTLP endpoint" in line


def test_agenttrace_demo(server, tmp_path) -> None:
    env = clean_environ(**environment(server, tmp_path / "runs"))
    result = subprocess.run(
        [sys.executable, "-m", "agenttrace", "demo", "-n", "8", "--out", str(tmp_path / "d")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    [run] = (tmp_path / "d").iterdir()
    in_file = list(read_otlp_json(run / "spans.jsonl"))
    trajectories = (run / "trajectories.jsonl").read_text().splitlines()
    assert len(trajectories) == 8 and all(json.loads(t)["episode_id"] for t in trajectories)
    if server.delivers:
        assert result.returncode == 0, result.stdout + result.stderr
        assert_quiet(result.stderr, re.compile(r"$^"))
        assert server.spans == len(in_file)
        assert f"exported:     {len(in_file)} spans over OTLP" in result.stdout
        assert "episode metrics sent over OTLP" in result.stdout
        assert "nothing lost" in result.stdout
    else:
        # Partial: every episode is written, the collector got nothing; one line says so.
        assert result.returncode == 3, result.stdout + result.stderr
        assert len(assert_quiet(result.stderr, re.compile(r"agenttrace demo: partial"))) == 1
        assert server.spans == 0
        assert "episode metrics NOT sent over OTLP" in result.stdout
        assert f"spans_not_exported = {len(in_file)}" in result.stdout
    # "Ran 8 episodes in R s ...; T s with writing the files": T - R is the shutdown.
    ran, total = re.search(r"in ([\d.]+) s .*; ([\d.]+) s with writing", result.stdout).groups()
    assert float(total) - float(ran) < exit_bound(server)
