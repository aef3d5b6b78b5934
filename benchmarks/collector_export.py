"""A traced CartPole loop sending its spans to collectors that work, crawl or never answer.

Variants, each over the same steps with the same scripted policy and agenttrace's full
pipeline (tracing API, trajectories.jsonl and Parquet, spans.jsonl; the writer where
``--writer`` puts it, a helper process on 2+ CPUs by default):

* ``no endpoint``: spans go to spans.jsonl only;
* ``agenttrace + collector``: also to a live OTLP/HTTP collector on 127.0.0.1 (its own
  process, benchmarks/otlp_collector.py, which counts what it receives);
* ``raw SDK + collector``: the raw OpenTelemetry SDK, spans of the same shape and attributes
  (benchmarks/overhead.py's loop) through a ``BatchSpanProcessor`` and the SDK's OTLP/HTTP
  exporter to the same collector; what it did not deliver is counted;
* ``agenttrace + slow collector``: a collector that takes ``--latency`` seconds (0.3) to
  answer each request: healthy, only slow;
* ``agenttrace + black hole``: a TCP server that accepts connections and never answers.

Each round runs every variant once (the order alternates) and ratios are taken within the
round; medians are shown (this host's speed drifts by 10-20 % within a minute). The collector
variants are timed up to the end of delivery (``force_flush`` / the SDK's ``shutdown``), the
others over the loop (their spans cannot be delivered); CPU is this process's, per step.
The longest single step of each variant is shown. Then:

* a real exit: a child process plays a round against the black hole and returns; the time
  from the end of its loop to the end of the process, and its exit line;
* episode end -> its line on disk: with the default outputs (trajectories.jsonl and the
  span file) and CartPole cut at 50 steps (``--episodes`` of them), a separate process tails
  trajectories.jsonl while the loop runs, and each line's arrival is compared with the time
  its episode span ended; with the writer woken at each episode end (agenttrace's way) and,
  side by side, only at its periodic tick (how it was before), with the loop's CPU per step
  of each.

Targets (issue 29): agenttrace + collector / raw SDK + collector <= 1.0 with 0 lost; black
hole / no endpoint >= 0.9 and no step over 100 ms; slow collector 0 lost; episode end -> disk
p99 < 50 ms. Run::

    python benchmarks/collector_export.py
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from overhead import play_raw_sdk
from traced_loop import count_spans, play_traced

# The test suite's black-hole server (tests/backend_servers.py), started here on 127.0.0.1.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from backend_servers import BlackHole

import agenttrace as at

HERE = Path(__file__).resolve().parent
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Collector:
    """benchmarks/otlp_collector.py in a process of its own (it must not share our GIL)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "otlp_collector.py"), "--delay", str(delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.endpoint = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def spans(self) -> int:
        with urllib.request.urlopen(f"{self.endpoint}/count", timeout=10) as answer:
            return int(json.load(answer)["spans"])

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


def set_endpoint(endpoint: str | None) -> None:
    for name in ENDPOINT_VARIABLES:
        os.environ.pop(name, None)
    if endpoint is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint


def configure(
    out: Path,
    writer: str,
    endpoint: str | None,
    report: bool = False,
    sinks: tuple = ("jsonl", "parquet"),
) -> Any:
    set_endpoint(endpoint)
    return at.configure(
        out=str(out),
        run_name=uuid.uuid4().hex,
        sinks=list(sinks),
        spans=["file", "otlp"] if endpoint else ["file"],
        writer=writer,
        metrics="none",
        exit_report=report,
    )


class Result:
    def __init__(self) -> None:
        self.seconds: list[float] = []  # per step
        self.cpu: list[float] = []  # per step
        self.longest: list[float] = []
        self.lost = 0
        self.steps = 0


def run_agenttrace(env: Any, steps: int, out: Path, writer: str, endpoint: str | None,
                   deliver: bool, result: Result) -> at.AgentTrace:  # fmt: skip
    runtime = configure(out, writer, endpoint)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    done, episodes = play_traced(env, steps, longest=result.longest)
    if deliver:
        runtime.force_flush(120_000)
    result.seconds.append((time.perf_counter() - wall) / done)
    result.cpu.append((time.process_time() - cpu) / done)
    result.steps += done
    runtime.shutdown()
    made = 2 * episodes + 3 * done
    result.lost += made - count_spans(runtime.span_paths)  # the span file holds them all
    stats = runtime.stats()
    if endpoint is not None and stats["spans_exported"] + stats["spans_not_exported"] != made:
        raise SystemExit(f"the export counters do not add up to the {made} spans made: {stats}")
    if endpoint is not None and deliver:
        result.lost += runtime.stats()["spans_not_exported"]
    return runtime


def run_raw_sdk(env: Any, steps: int, endpoint: str, result: Result) -> int:
    """The raw SDK to the collector; returns the spans it made."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
    done, episodes = play_raw_sdk(env, steps, BatchSpanProcessor(exporter), result.longest)
    result.seconds.append((time.perf_counter() - wall) / done)
    result.cpu.append((time.process_time() - cpu) / done)
    result.steps += done
    return 2 * episodes + 3 * done


def child(endpoint: str, steps: int, out: str, writer: str) -> None:
    """One round against ``endpoint``, then a plain return: the exit handler shuts down."""
    configure(Path(out), writer, endpoint, report=True)
    play_traced(gym.make("CartPole-v1"), steps)
    print(f"loop-ended {time.time()!r}", flush=True)


def real_exit(endpoint: str, steps: int, out: str, writer: str) -> tuple[float, str]:
    """Seconds from the end of a child's loop to the end of the child; its exit line."""
    command = [sys.executable, __file__, "--child", endpoint, "--steps", str(steps)]
    done = subprocess.run(
        [*command, "--out", out, "--writer", writer], capture_output=True, text=True, timeout=600
    )
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the child failed:\n{done.stderr}")
    marker = [line for line in done.stdout.splitlines() if line.startswith("loop-ended ")]
    lines = [line for line in done.stderr.splitlines() if line.startswith("agenttrace: ")]
    return ended - float(marker[0].split()[1]), lines[-1] if lines else "(no exit line)"


TAILER = """
import json, os, sys, time
path, seen = sys.argv[1], {}
offset, rest = 0, b""
while not os.path.exists(path):
    time.sleep(0.001)
with open(path, "rb") as handle:
    while True:
        chunk = handle.read()
        now = time.time()
        if chunk:
            lines = (rest + chunk).split(b"\\n")
            rest = lines.pop()
            for line in lines:
                seen[json.loads(line)["episode_id"]] = now
        elif os.path.exists(path + ".stop"):
            break
        else:
            time.sleep(0.001)
print(json.dumps(seen))
"""


def episode_to_disk(episodes: int, out: Path, writer: str, wake: bool) -> tuple[list, float]:
    """Latencies (s) from episode end to its line in trajectories.jsonl; CPU s per step."""
    env = gym.make("CartPole-v1", max_episode_steps=50)  # (the policy keeps it up: 50 steps)
    runtime = configure(out, writer, None, sinks=("jsonl",))
    path = runtime.run_dir / "trajectories.jsonl"
    tail = subprocess.Popen([sys.executable, "-c", TAILER, str(path)], stdout=subprocess.PIPE)
    if not wake:  # how it was: the writer thread runs at its tick or once 256 spans wait
        runtime.trajectory_processor._worker.wake = lambda: None
    ends: dict[str, float] = {}
    gc.collect()
    cpu = time.process_time()
    done, _episodes = play_traced(env, 50 * episodes, ends=ends)
    cpu = (time.process_time() - cpu) / done
    runtime.shutdown()
    Path(f"{path}.stop").touch()
    seen = json.loads(tail.communicate(timeout=60)[0])
    return [seen[episode] - ended for episode, ended in ends.items() if episode in seen], cpu


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60_000, help="steps per variant, in all")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    parser.add_argument("--latency", type=float, default=0.3, help="the slow collector's")
    parser.add_argument("--episodes", type=int, default=400, help="for episode end -> disk")
    parser.add_argument("--writer", choices=("auto", "process", "thread"), default="auto")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    if args.child:
        child(args.child, args.steps, args.out, args.writer)
        return
    round_steps = -(-args.steps // args.rounds)
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    collector, slow, hole = Collector(), Collector(args.latency), BlackHole()
    names = [
        "no endpoint",
        "agenttrace + collector",
        "raw SDK + collector",
        "agenttrace + slow collector",
        "agenttrace + black hole",
    ]
    results = {name: Result() for name in names}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            for round_index in range(args.rounds):
                for name in names[:: 1 if round_index % 2 == 0 else -1]:
                    result = results[name]
                    if name == "raw SDK + collector":
                        set_endpoint(None)
                        before = collector.spans()
                        made = run_raw_sdk(env, round_steps, collector.endpoint, result)
                        result.lost += made - (collector.spans() - before)
                        continue
                    endpoint = {
                        "no endpoint": None,
                        "agenttrace + collector": collector.endpoint,
                        "agenttrace + slow collector": slow.endpoint,
                        "agenttrace + black hole": hole.endpoint,
                    }[name]
                    deliver = name != "agenttrace + black hole" and endpoint is not None
                    server = slow if "slow" in name else collector
                    before = server.spans()
                    runtime = run_agenttrace(
                        env, round_steps, out, args.writer, endpoint, deliver, result
                    )
                    if deliver:  # what the collector counted, against what was made
                        exported = runtime.stats()["spans_exported"]
                        result.lost += exported - (server.spans() - before)
            child_exit, exit_line = real_exit(hole.endpoint, round_steps, tmp, args.writer)
            latencies = {
                label: episode_to_disk(args.episodes, out, args.writer, wake)
                for label, wake in (("woken at episode end", True), ("tick only (before)", False))
            }
    finally:
        collector.stop()
        slow.stop()
        hole.stop()
        set_endpoint(None)
    print(
        f"CartPole-v1, {round_steps * args.rounds} steps per variant in {args.rounds} rounds "
        f"of {round_steps}; writer {args.writer}; slow collector: {args.latency} s per request"
    )
    print(f"{'variant':<28} {'steps/s':>8} {'CPU us/step':>12} {'longest step':>13} {'lost':>7}")
    for name, result in results.items():
        print(
            f"{name:<28} {1 / statistics.median(result.seconds):>8,.0f} "
            f"{statistics.median(result.cpu) * 1e6:>12.1f} "
            f"{max(result.longest) * 1000:>10.1f} ms {result.lost:>7,}"
        )

    def ratio(a: str, b: str) -> str:
        pairs = [x / y for x, y in zip(results[a].seconds, results[b].seconds, strict=True)]
        return f"{statistics.median(pairs):.2f} (rounds {min(pairs):.2f}-{max(pairs):.2f})"

    print(f"time per step, agenttrace / raw SDK, to the collector: "
          f"{ratio('agenttrace + collector', 'raw SDK + collector')}  target <= 1.0")  # fmt: skip
    print(f"steps/s, black hole / no endpoint: "
          f"{ratio('no endpoint', 'agenttrace + black hole')}  target >= 0.9")  # fmt: skip
    print(f"real exit of a child process against the black hole: {child_exit:.2f} s")
    print(f"its exit line: {exit_line}")
    for label, (values, cpu) in latencies.items():
        print(
            f"episode end -> disk, {label}: p50 {percentile(values, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(values, 0.99) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms "
            f"over {len(values)} episodes; loop CPU {cpu * 1e6:.1f} us/step"
        )


if __name__ == "__main__":
    main()
