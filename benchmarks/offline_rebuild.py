"""Offline rebuild throughput: OTLP/JSON lines in, trajectories out, on one core.

Run ``python benchmarks/offline_rebuild.py`` (default 1,000,000 spans). It records a real
traced CartPole run (agenttrace's API over gymnasium, written by agenttrace's span file), then
makes a span file of the size asked for by repeating that run's lines with fresh trace and
episode ids: the same spans a long run would write, made in seconds. It then measures, each in
a fresh process so peak memory is the rebuild's own:

* ``agenttrace export`` of the file (read, stream-assemble, write trajectories.jsonl), and
* the same on a file a quarter of the size,

and prints spans/s and peak RSS for both. Peak memory that does not grow with file size is the
point of streaming: the two peaks should be close. Target: >= 100,000 spans/s.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_EPISODES_PER_RUN = 8
_TRACE_ID = re.compile(rb'"traceId":"([0-9a-f]{32})"')
_EPISODE_ID = re.compile(rb'"rl\.episode\.id","value":\{"stringValue":"([^"]+)"\}')


def record_run(folder: Path) -> Path:
    """A real traced CartPole run of a few episodes; returns its span file."""
    import gymnasium as gym

    import agenttrace as at

    pipeline = at.configure(out=str(folder), run_name="seed-run", sinks=(), exit_report=False)
    env = gym.make("CartPole-v1")
    for seed in range(_EPISODES_PER_RUN):
        with at.episode(task_id="cartpole", env=env):
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset(seed=seed))
            done = False
            while not done:
                with at.timestep():
                    with at.agent_act() as act:
                        action = int(obs[2] + obs[3] > 0)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        obs, _r, terminated, truncated, _i = step.record_result(env.step(action))
                done = terminated or truncated
    at.shutdown()
    return pipeline.span_paths[0]


def grow(seed_file: Path, target: Path, spans: int) -> int:
    """Write ``target`` with the seed file's lines repeated under fresh ids; returns spans."""
    lines = seed_file.read_bytes().splitlines(keepends=True)
    per_copy = sum(line.count(b'"spanId"') for line in lines)
    written = copy = 0
    with open(target, "wb") as out:
        while written < spans:
            copy += 1
            for line in lines:
                line = _TRACE_ID.sub(
                    lambda m, c=copy: b'"traceId":"%032x"' % (int(m[1], 16) ^ c), line
                )
                line = _EPISODE_ID.sub(
                    lambda m, c=copy: m[0].replace(m[1], m[1] + b"-%d" % c), line
                )
                out.write(line)
            written += per_copy
    return written


def measure(span_file: Path, out: Path) -> dict:
    """``agenttrace export`` in a fresh process: seconds and peak RSS (KiB)."""
    code = (
        "import resource, sys, time\n"
        "from agenttrace.cli.main import main\n"
        "t = time.perf_counter()\n"
        "status = main(['export', '--from', sys.argv[1], '--out', sys.argv[2], '--quiet'])\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(span_file), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"export failed:\n{result.stdout}\n{result.stderr}")
    seconds, peak, status = result.stdout.split()[-3:]
    return {"seconds": float(seconds), "peak_kib": int(peak), "status": int(status)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans in the large file")
    parser.add_argument("--keep", metavar="DIR", help="keep the files in DIR")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="agenttrace-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    seed_file = record_run(folder)
    results = {}
    for label, spans in (("quarter", args.spans // 4), ("full", args.spans)):
        span_file = folder / f"spans-{label}.jsonl"
        count = grow(seed_file, span_file, spans)
        figures = measure(span_file, folder / f"trajectories-{label}.jsonl")
        figures["spans"] = count
        figures["bytes"] = span_file.stat().st_size
        figures["spans_per_s"] = count / figures["seconds"]
        results[label] = figures
        print(
            f"{label:>7}: {count:,} spans ({figures['bytes'] / 2**20:,.0f} MiB) in "
            f"{figures['seconds']:.1f} s = {figures['spans_per_s']:,.0f} spans/s, "
            f"peak RSS {figures['peak_kib'] / 1024:,.0f} MiB"
        )
        if not args.keep:
            span_file.unlink()
    growth = results["full"]["peak_kib"] / results["quarter"]["peak_kib"]
    print(f"peak memory, 4x the spans: x{growth:.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
