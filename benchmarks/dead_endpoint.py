"""Steps/s of a traced CartPole loop whose OTLP endpoint is dead, next to no endpoint at all.

Variants, each over the same number of steps with the same scripted policy and agenttrace's
full pipeline (tracing API, TrajectoryProcessor writing trajectories.jsonl and Parquet,
spans.jsonl; the writer where ``writer=auto`` puts it):

* ``no endpoint``: no ``OTEL_EXPORTER_OTLP_ENDPOINT``, so spans go to spans.jsonl only;
* ``dead endpoint``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` names a TCP server on 127.0.0.1 that
  accepts connections and never answers (a hung collector), so agenttrace also adds its
  OTLP span processor, whose every export hangs until the exporter's timeout.

In each round both variants run once (taking turns at going first) from ``configure()`` to
the end of the loop; the ratio of their steps/s is taken within the round and the median of
the rounds is shown (this host's speed drifts by 10-20 % within a minute). Then
``shutdown()`` with the exit deadline (``exit_timeout``, what the exit handler uses) is timed
on its own, and the span files are read back: they must hold every span. Rounds must be long
enough to fill the export queue (``queue_size``, 65,536 spans by default; a step makes three
spans): that is when a producer that waits for room would stall. Last, one real exit: a child
process plays a round with the dead endpoint and ends without calling shutdown; the time from
the end of its loop to the end of the process is shown with its exit line. Target: ratio
>= 0.9. Run::

    python benchmarks/dead_endpoint.py
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import gymnasium as gym
from traced_loop import count_spans, play_traced

# The test suite's black-hole server (tests/backend_servers.py), started here on 127.0.0.1.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from backend_servers import BlackHole

import agenttrace as at

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Messages(logging.Handler):
    """Keeps agenttrace's log lines (the loss summary) instead of printing them each round."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run(env, steps: int, out: Path, writer: str, endpoint: str | None, report: bool = False):
    """Configure, play ``steps``; (loop seconds, steps, episodes, runtime)."""
    for name in ENDPOINT_VARIABLES:
        os.environ.pop(name, None)
    if endpoint is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    runtime = at.configure(
        out=str(out),
        run_name=uuid.uuid4().hex,
        sinks=["jsonl", "parquet"],
        writer=writer,
        metrics="none",
        exit_report=report,
    )
    gc.collect()
    started = time.perf_counter()
    done_steps, episodes = play_traced(env, steps)
    seconds = time.perf_counter() - started
    return seconds, done_steps, episodes, runtime


def child(endpoint: str, steps: int, out: str, writer: str) -> None:
    """One round with ``endpoint``, then a plain return: the exit handler shuts down."""
    env = gym.make("CartPole-v1")
    run(env, steps, Path(out), writer, endpoint, report=True)
    print(f"loop-ended {time.time()!r}", flush=True)


def real_exit(endpoint: str, steps: int, out: str, writer: str) -> tuple[float, str]:
    """Seconds from the end of a child's loop to the end of the child; its exit line."""
    command = [sys.executable, __file__, "--child", endpoint, "--steps", str(steps)]
    done = subprocess.run(
        [*command, "--out", out, "--writer", writer],
        capture_output=True,
        text=True,
        timeout=600,
    )
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the child failed:\n{done.stderr}")
    marker = [line for line in done.stdout.splitlines() if line.startswith("loop-ended ")]
    lines = [line for line in done.stderr.splitlines() if line.startswith("agenttrace: ")]
    return ended - float(marker[0].split()[1]), lines[-1] if lines else "(no exit line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=90_000, help="steps per variant, in all")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
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
    messages = Messages()
    logging.getLogger("agenttrace").addHandler(messages)
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    hole = BlackHole()
    variants = {"no endpoint": None, "dead endpoint": hole.endpoint}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    exits: dict[str, list[float]] = {name: [] for name in variants}
    ratios: list[float] = []
    lost_in_files = 0
    not_exported: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for round_index in range(args.rounds):
                names = list(variants)[:: 1 if round_index % 2 == 0 else -1]
                for name in names:
                    seconds, steps, episodes, runtime = run(
                        env, round_steps, Path(tmp), args.writer, variants[name]
                    )
                    rates[name].append(steps / seconds)
                    processors = list(runtime.span_processors)
                    if (variants[name] is None) != (not processors):
                        raise SystemExit(f"{name}: {len(processors)} OTLP span processors")
                    started = time.perf_counter()
                    runtime.shutdown(timeout_millis=int(runtime.settings.exit_timeout * 1000))
                    exits[name].append(time.perf_counter() - started)
                    expected = 2 * episodes + 3 * steps  # episode + reset, 3 spans per step
                    lost_in_files += expected - count_spans(runtime.span_paths)
                    for processor in processors:
                        counts = processor.counts()
                        if counts["exported"] + counts["not_exported"] != expected:
                            raise SystemExit(f"counters do not add up to {expected}: {counts}")
                        for key, value in counts.items():
                            not_exported[key] = not_exported.get(key, 0) + value
                ratios.append(rates["dead endpoint"][-1] / rates["no endpoint"][-1])
            child_exit, exit_line = real_exit(hole.endpoint, round_steps, tmp, args.writer)
    finally:
        hole.stop()
        for name in ENDPOINT_VARIABLES:
            os.environ.pop(name, None)
    print(
        f"CartPole-v1, {round_steps * args.rounds} steps per variant in {args.rounds} rounds "
        f"of {round_steps}; writer {args.writer}"
    )
    print(f"{'variant':<14} {'steps/s':>9} {'exit s':>7}  (medians; exit: shutdown(exit deadline))")
    for name in variants:
        rate = statistics.median(rates[name])
        print(f"{name:<14} {rate:>9,.0f} {statistics.median(exits[name]):>7.2f}")
    print(
        f"ratio dead endpoint / no endpoint: {statistics.median(ratios):.2f} "
        f"(rounds {min(ratios):.2f}-{max(ratios):.2f})  target >= 0.90"
    )
    print(f"longest exit with the dead endpoint: {max(exits['dead endpoint']):.2f} s")
    print(f"real exit of a child process with the dead endpoint: {child_exit:.2f} s")
    print(f"its exit line: {exit_line}")
    print(f"spans missing from the span files: {lost_in_files}")
    print(
        "OTLP counters, all dead-endpoint rounds: "
        + ", ".join(f"{key}={value}" for key, value in not_exported.items())
    )
    summaries = [line for line in messages.lines if "spans not exported" in line]
    if summaries:
        print(f"loss line at shutdown (last round): {summaries[-1]}")


if __name__ == "__main__":
    main()
