"""Offline rebuild throughput: OTLP/JSON lines in, trajectories out, on one core.

Run ``python benchmarks/offline_rebuild.py`` (default 1,000,000 spans). It records a real
traced CartPole run (agenttrace's API over gymnasium, written by agenttrace's span file), then
makes a span file of the size asked for by repeating that run's lines with fresh trace and
episode ids: the same spans a long run would write, made in seconds. It then measures, each in
a fresh process so peak memory is the rebuild's own:

* ``agenttrace export`` of the file (read, stream-assemble, write trajectories.jsonl), and
* the same on a file a quarter of the size,

and prints spans/s and peak RSS for both. Peak memory that does not grow with file size is the
point of streaming: the two peaks should be close. Target: >= 200,000 spans/s.

It also measures the floor under any rebuild in Python on the large file, in a fresh process:
msgspec parsing each line into the decoder's structs and nothing else (no record, no
assembly, no output), and the decoder alone (lines to checked span records). An export can be
no faster than the first; the second is the share of the export that reading takes.

Side by side, in the same run and on the same files, it measures the code of ``--baseline``
(a git ref, default ``bd86b8c``: the code before the one-decoder redesign of issue 31),
checked out with ``git worktree`` into a temporary folder and imported from there, and prints
both figures and their ratio. Each export runs ``--rounds`` times, baseline and current in
turn, and the fastest of each counts (other load on the machine only ever slows a run down).
Besides wall-clock spans/s it prints spans per CPU second (the process's user + system time),
which another process on the same cores disturbs less. ``--baseline none`` measures the
current code alone.

``--engine ray`` measures ``agenttrace export --engine ray`` instead, on one file of ``--spans``
spans: with 1 worker, then 2, each in a fresh process that starts a local Ray of that many
CPUs and exports the file once, to let Ray start its worker processes, then ``--rounds``
times more, the fastest counting (the first export and Ray's start are printed apart: they
do not grow with the input), next to the local export of the same file. It prints spans/s for
each (and per CPU second of all the export's processes: the driver, Ray's own and the
workers), the speed-up, and, from the rate per core of the 2-worker run (every core busy, the
scheduling and the shards included), what 10^9 spans would take on 64 cores if the rate per
core held: the read and rebuild tasks share nothing but the shard files, so they scale out as
far as the filesystem that holds the shards keeps up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
#: The commit before issue 31's redesign (one OTLP/JSON decoder, storage split by job).
_BASELINE = "bd86b8c"

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


def measure(span_file: Path, out: Path, code_root: Path | None = None) -> dict:
    """``agenttrace export`` in a fresh process: seconds, CPU seconds and peak RSS (KiB).
    ``code_root``: import agenttrace from this checkout instead of the installed one."""
    code = (
        "import resource, sys, time\n"
        "import agenttrace\n"
        "from agenttrace.cli.main import main\n"
        "def cpu():\n"
        "    usage = resource.getrusage(resource.RUSAGE_SELF)\n"
        "    return usage.ru_utime + usage.ru_stime\n"
        "t, c = time.perf_counter(), cpu()\n"
        "status = main(['export', '--from', sys.argv[1], '--out', sys.argv[2], '--quiet'])\n"
        "seconds, cpu_seconds = time.perf_counter() - t, cpu() - c\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(agenttrace.__file__, seconds, cpu_seconds, peak, status)\n"
    )
    env = dict(os.environ)
    if code_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(code_root), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    out.unlink(missing_ok=True)
    result = subprocess.run(
        [sys.executable, "-c", code, str(span_file), str(out)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tempfile.gettempdir(),  # (not the repository: its agenttrace would come first)
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"export failed:\n{result.stdout}\n{result.stderr}")
    module, seconds, cpu, peak, status = result.stdout.split()[-5:]
    expected = (code_root or _REPO).resolve()
    if not Path(module).resolve().is_relative_to(expected):
        raise SystemExit(f"export imported agenttrace from {module}, not from {expected}")
    out.unlink(missing_ok=True)
    return {
        "seconds": float(seconds),
        "cpu_seconds": float(cpu),
        "peak_kib": int(peak),
        "status": int(status),
    }


def measure_ray(span_file: Path, out: Path, workers: int, rounds: int) -> dict:
    """``agenttrace export --engine ray --workers N`` in a fresh process that started a local
    Ray of N CPUs first: Ray's start, then a first export (cold: Ray starts its worker
    processes, which import agenttrace and Ray Data), then ``rounds`` more (warm), the fastest
    of them counting: seconds, and CPU seconds of every process of the export (the driver,
    Ray's own, the workers)."""
    code = (
        "import logging, shutil, sys, time\n"
        "import psutil, ray\n"
        "from agenttrace.cli.main import main\n"
        "def cpu():\n"
        "    total = 0.0\n"
        "    for p in [psutil.Process(), *psutil.Process().children(recursive=True)]:\n"
        "        try:\n"
        "            times = p.cpu_times()\n"
        "        except psutil.Error:\n"
        "            continue\n"
        "        total += times.user + times.system\n"
        "    return total\n"
        "span_file, out, workers, rounds = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])\n"
        "t = time.perf_counter()\n"
        "ray.init(num_cpus=workers, include_dashboard=False, logging_level=logging.ERROR)\n"
        "print('start', time.perf_counter() - t)\n"
        "for _ in range(rounds + 1):\n"
        "    shutil.rmtree(out, ignore_errors=True)\n"
        "    t, c = time.perf_counter(), cpu()\n"
        "    status = main(['export', '--engine', 'ray', '--workers', str(workers), '--from',\n"
        "                   span_file, '--out', out, '--quiet'])\n"
        "    print('export', time.perf_counter() - t, cpu() - c, status)\n"
        "shutil.rmtree(out, ignore_errors=True)\n"
        "ray.shutdown()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(span_file), str(out), str(workers), str(rounds)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    exports = [(float(s), float(c), int(status)) for _, s, c, status in lines[1:]]
    if result.returncode != 0 or len(exports) != rounds + 1 or any(e[2] for e in exports):
        raise SystemExit(f"export on Ray failed:\n{result.stdout}\n{result.stderr}")
    warm = min(exports[1:])
    return {
        "ray_start_seconds": float(lines[0][1]),
        "cold_seconds": exports[0][0],
        "seconds": warm[0],
        "cpu_seconds": warm[1],
    }


def ray_main(args: argparse.Namespace, folder: Path) -> None:
    """``--engine ray``: the export with 1 and 2 workers on one file (and the local export
    of it, for comparison), and what 10^9 spans would take on 64 cores at the measured rate
    per core."""
    seed_file = record_run(folder)
    span_file = folder / "spans-ray.jsonl"
    spans = grow(seed_file, span_file, args.spans)
    print(f"{spans:,} spans ({span_file.stat().st_size / 2**20:,.0f} MiB), one file")
    results: dict = {"spans": spans}
    local = best(
        [measure(span_file, folder / "local.jsonl") for _ in range(max(1, args.rounds))], spans
    )
    results["local"] = local
    print(line("local (1 core)", local))
    for workers in (1, 2):
        figures = measure_ray(span_file, folder / "ray.jsonl", workers, args.rounds)
        figures["spans_per_s"] = spans / figures["seconds"]
        figures["spans_per_cpu_s"] = spans / figures["cpu_seconds"]
        results[workers] = figures
        label = f"ray, {workers} worker{'s' if workers > 1 else ''}"
        print(
            f"{label:>18}: {figures['seconds']:6.1f} s = {figures['spans_per_s']:9,.0f} spans/s "
            f"({figures['spans_per_cpu_s']:9,.0f} per CPU s of all its processes); first "
            f"export {figures['cold_seconds']:.1f} s, "
            f"Ray's start {figures['ray_start_seconds']:.1f} s"
        )
    per_core = results[2]["spans_per_s"] / 2
    speedup = results[2]["spans_per_s"] / results[1]["spans_per_s"]
    hours = 1e9 / (per_core * 64) / 3600
    results.update(speedup=speedup, per_core=per_core, hours_1e9_on_64=hours)
    print(f"2 workers / 1 worker: x{speedup:.2f}; per core with 2 workers: {per_core:,.0f} spans/s")
    print(f"10^9 spans on 64 cores at {per_core:,.0f} spans/s a core: {hours:.1f} h")
    if not args.keep:
        span_file.unlink()
    print(json.dumps(results))


def measure_floor(span_file: Path) -> dict:
    """Seconds (fastest of three passes over the file's lines, already in memory) of msgspec's
    parse alone, and of the decoder to checked records, in a fresh process."""
    code = (
        "import gc, sys, time\n"
        "from agenttrace.storage.otlp_json_decode import decode_text\n"
        "from agenttrace.storage.otlp_json_structs import decode_request\n"
        "from agenttrace.storage.span_checks import check_values\n"
        "lines = open(sys.argv[1], 'rb').read().splitlines()\n"
        "gc.freeze()\n"
        "def timed(read):\n"
        "    best = None\n"
        "    for _ in range(3):\n"
        "        t = time.perf_counter()\n"
        "        for line in lines:\n"
        "            read(line)\n"
        "        took = time.perf_counter() - t\n"
        "        best = took if best is None else min(best, took)\n"
        "    return best\n"
        "ignore = lambda error: None\n"
        "parse = timed(decode_request)\n"
        "decode = timed(lambda line: check_values(decode_text(line, ignore), ignore))\n"
        "print(parse, decode)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(span_file)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"floor measurement failed:\n{result.stdout}\n{result.stderr}")
    parse, decode = result.stdout.split()[-2:]
    return {"parse_seconds": float(parse), "decode_seconds": float(decode)}


def checkout(ref: str, folder: Path) -> Path:
    """``ref`` of this repository, checked out (detached) into ``folder``."""
    subprocess.run(
        ["git", "-C", str(_REPO), "worktree", "add", "--detach", "--force", str(folder), ref],
        check=True,
        capture_output=True,
    )
    return folder


def remove_checkout(folder: Path) -> None:
    subprocess.run(
        ["git", "-C", str(_REPO), "worktree", "remove", "--force", str(folder)],
        check=False,
        capture_output=True,
    )
    shutil.rmtree(folder, ignore_errors=True)


def best(runs: list[dict], spans: int) -> dict:
    """The fastest of ``runs`` (wall clock and CPU each), with the rates."""
    figures = min(runs, key=lambda r: r["seconds"])
    figures = dict(figures, cpu_seconds=min(r["cpu_seconds"] for r in runs))
    figures["spans_per_s"] = spans / figures["seconds"]
    figures["spans_per_cpu_s"] = spans / figures["cpu_seconds"]
    return figures


def line(label: str, figures: dict) -> str:
    return (
        f"{label:>18}: {figures['seconds']:6.1f} s = {figures['spans_per_s']:9,.0f} spans/s "
        f"({figures['spans_per_cpu_s']:9,.0f} per CPU s), peak RSS "
        f"{figures['peak_kib'] / 1024:,.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans in the large file")
    parser.add_argument("--keep", metavar="DIR", help="keep the files in DIR")
    parser.add_argument(
        "--baseline",
        default=_BASELINE,
        metavar="GITREF",
        help="the code to compare with, measured in the same run (default %(default)s: before "
        "issue 31); 'none' to measure the current code alone",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="exports of each file by each code (the fastest counts)",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the parse-only and decode-only figures"
    )
    parser.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="ray: agenttrace export --engine ray with 1 and 2 workers instead (see above)",
    )
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="agenttrace-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.engine == "ray":
        ray_main(args, folder)
        return
    baseline_root = None
    if args.baseline.lower() != "none":
        baseline_root = checkout(args.baseline, Path(tempfile.mkdtemp(prefix="agenttrace-base-")))
    try:
        seed_file = record_run(folder)
        results: dict = {}
        for label, spans in (("quarter", args.spans // 4), ("full", args.spans)):
            span_file = folder / f"spans-{label}.jsonl"
            count = grow(seed_file, span_file, spans)
            out = folder / f"trajectories-{label}.jsonl"
            runs: dict[str, list[dict]] = {"current": [], "baseline": []}
            for _ in range(max(1, args.rounds)):
                if baseline_root is not None:
                    runs["baseline"].append(measure(span_file, out, baseline_root))
                runs["current"].append(measure(span_file, out))
            size = span_file.stat().st_size
            print(f"{label}: {count:,} spans ({size / 2**20:,.0f} MiB)")
            results[label] = {"spans": count, "bytes": size}
            for code, code_runs in runs.items():
                if code_runs:
                    figures = best(code_runs, count)
                    results[label][code] = figures
                    name = code if code == "current" else f"baseline {args.baseline}"
                    print(line(name, figures))
            if baseline_root is not None:
                now, then = results[label]["current"], results[label]["baseline"]
                ratio = now["spans_per_s"] / then["spans_per_s"]
                cpu_ratio = now["spans_per_cpu_s"] / then["spans_per_cpu_s"]
                results[label]["ratio"] = ratio
                results[label]["cpu_ratio"] = cpu_ratio
                print(f"{'current / baseline':>18}: x{ratio:.2f} (per CPU second x{cpu_ratio:.2f})")
            if label == "full" and not args.no_floor:
                floor = results[label]["floor"] = measure_floor(span_file)
                print(
                    f"{'msgspec parse only':>18}: {count / floor['parse_seconds']:9,.0f} spans/s "
                    "(the ceiling of any rebuild that reads the lines)"
                )
                print(
                    f"{'decoder to records':>18}: {count / floor['decode_seconds']:9,.0f} spans/s "
                    "(reading alone, no assembly, no output)"
                )
            if not args.keep:
                span_file.unlink()
        growth = results["full"]["current"]["peak_kib"] / results["quarter"]["current"]["peak_kib"]
        print(f"peak memory, 4x the spans: x{growth:.2f}")
        print(json.dumps(results))
    finally:
        if baseline_root is not None:
            remove_checkout(baseline_root)


if __name__ == "__main__":
    main()
