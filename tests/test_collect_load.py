"""``agenttrace collect`` under load: several producer processes at full speed for a minute.

Each producer is the OpenTelemetry SDK (BatchSpanProcessor, OTLP/HTTP exporter) writing
episodes of a known shape as fast as it can, and counting, per episode, the spans the service
acknowledged. Every episode whose spans were all acknowledged must be written whole (its length
and return are known), none twice, and the service's memory must stay flat while the load
goes on. The throughput is printed (``pytest -s``) and checked to be above zero only: figures
belong to ``benchmarks/collect_throughput.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import clean_environ, wait_until
from test_collect import _collect_process, _free_port, _health

from agenttrace.reading import load_trajectories

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(600)

PRODUCERS = 3
SECONDS = float(os.environ.get("AGENTTRACE_LOAD_SECONDS", "60"))
STEPS = 20  # per episode: an episode span and STEPS timesteps, each with an env.step

PRODUCER = """
import json, sys, threading, time
from collections import Counter
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

url, name, report = sys.argv[1], sys.argv[2], sys.argv[5]
seconds, steps = float(sys.argv[3]), int(sys.argv[4])
acknowledged = Counter()
lock = threading.Lock()

class Counting(OTLPSpanExporter):
    def export(self, spans):
        result = super().export(spans)
        if result == SpanExportResult.SUCCESS:
            with lock:
                acknowledged.update(s.attributes["rl.episode.id"] for s in spans)
        return result

provider = TracerProvider()
provider.add_span_processor(
    BatchSpanProcessor(Counting(endpoint=url, timeout=30), max_queue_size=200_000,
                       max_export_batch_size=512, schedule_delay_millis=100)
)
tracer = provider.get_tracer("agenttrace")
sent, deadline = 0, time.monotonic() + seconds
while time.monotonic() < deadline:
    episode_id = f"{name}-{sent}"
    with tracer.start_as_current_span("episode", attributes={"rl.episode.id": episode_id}) as ep:
        for index in range(steps):
            common = {"rl.episode.id": episode_id, "rl.timestep.index": index}
            with tracer.start_as_current_span("timestep", attributes=common):
                last = index == steps - 1
                with tracer.start_as_current_span(
                    "env.step",
                    attributes={**common, "rl.reward": 0.5, "rl.terminated": last,
                                "rl.done": last, "rl.observation": "[%d, 0.25]" % index},
                ):
                    pass
        ep.set_attribute("rl.episode.length", steps)
    sent += 1
provider.shutdown()
# to a file: a minute's report outgrows a pipe's buffer, and a blocked print never exits
with open(report, "w") as out:
    json.dump({"sent": sent, "acknowledged": dict(acknowledged)}, out)
"""


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_producers_at_full_speed_lose_nothing_acknowledged_in_bounded_memory(
    tmp_path: Path,
) -> None:
    port = _free_port()
    out = tmp_path / "out"
    collect = _collect_process(out, port, "--grace", "0.5", "--idle-timeout", "30")
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        started = time.monotonic()
        producers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    PRODUCER,
                    url,
                    f"p{n}",
                    str(SECONDS),
                    str(STEPS),
                    str(tmp_path / f"p{n}.json"),
                ],
                env=clean_environ(),
            )
            for n in range(PRODUCERS)
        ]
        memory = []  # (seconds since start, RSS KiB) of the service while the load lasts
        while any(p.poll() is None for p in producers):
            memory.append((time.monotonic() - started, _rss_kib(collect.pid)))
            time.sleep(1)
        reports = [json.loads((tmp_path / f"p{n}.json").read_text()) for n in range(PRODUCERS)]
        assert all(p.returncode == 0 for p in producers)
        ingest_seconds = time.monotonic() - started
        assert wait_until(lambda: _health(port)["open_episodes"] == 0, timeout=120)
        health = _health(port)
    finally:
        collect.send_signal(signal.SIGTERM)
        collect.wait(60)
    per_episode = 1 + 2 * STEPS
    whole = {
        episode_id
        for report in reports
        for episode_id, spans in report["acknowledged"].items()
        if spans == per_episode
    }
    sent = sum(report["sent"] for report in reports)
    written = load_trajectories(sorted(out.glob("trajectories*.jsonl")))
    ids = [t.episode_id for t in written]
    assert len(ids) == len(set(ids)), "an episode was written twice"
    by_id = {t.episode_id: t for t in written}
    missing = whole - set(by_id)
    assert not missing, f"{len(missing)} acknowledged episodes not written: {sorted(missing)[:5]}"
    for episode_id in whole:
        trajectory = by_id[episode_id]
        assert (trajectory.status, trajectory.length) == ("completed", STEPS), episode_id
        assert trajectory.return_ == 0.5 * STEPS
        # an env.step's observation is the next step's (the last one: the final observation)
        observed = [step.observation for step in trajectory.steps[1:]]
        assert observed == [[index, 0.25] for index in range(STEPS - 1)]
        assert trajectory.final_observation == [STEPS - 1, 0.25]
    spans = health["spans_received"]
    print(
        f"\n{PRODUCERS} producers, {SECONDS:.0f} s: {sent} episodes sent, {len(whole)} fully "
        f"acknowledged, {len(written)} written; {spans:,} spans received, "
        f"{spans / ingest_seconds:,.0f} spans/s; refused busy {health['requests_refused_busy']}"
        f"; service RSS {memory[0][1] // 1024} -> max {max(m for _, m in memory) // 1024} MiB"
    )
    assert len(whole) > 0.9 * sent, "most episodes should make it whole"
    # memory is flat: the second half of the run holds no more than the first, plus slack
    half = [m for t, m in memory if t >= SECONDS / 2]
    first = [m for t, m in memory if 5 <= t < SECONDS / 2]
    assert half and first
    assert max(half) <= 1.25 * max(first) + 32 * 1024, memory
