"""``agenttrace view`` on a large run: how soon the first page is there, how long the whole
index takes, and the server's memory (issue 34's target: the first page of a 100,000-episode
run in under 1 s on this machine).

Run ``python benchmarks/viewer.py`` (default 100,000 episodes of 10 steps, each step with a
small observation and every episode with one model call). It writes the run once into a
temporary folder (``--keep DIR`` to keep or reuse it), then starts ``agenttrace view`` on it
as a user would and times, from the command's start:

* the link printed;
* the first page (the median of ``--starts`` starts, 5 by default): ``/``, ``/api/info``,
  ``/api/summary`` and ``/api/episodes?limit=50``, as the page asks for them when it opens,
  all answered, with rows;
* a page of rows while the rest is being read (the median of 5);
* the whole run indexed (``/api/info`` says every episode, not indexing);

then, on the whole index, a page sorted by return, a page filtered by status, the summary, the
plots and one episode opened, each the best of 5; and the server's RSS (its peak, VmHWM, and
at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def write_run(folder: Path, episodes: int, steps: int) -> Path:
    """A run folder of ``episodes`` trajectories, written as the JSONL sink writes them."""
    from agenttrace.trajectory.model import EpisodeError, LLMCall, Step, Trajectory

    run = folder / "bench-run"
    run.mkdir(parents=True, exist_ok=True)
    path = run / "trajectories.jsonl"
    if path.exists():
        return run
    rng = random.Random(34)
    start = 1_790_000_000_000_000_000
    with path.open("w") as handle:
        for n in range(episodes):
            status = rng.choices(["completed", "truncated", "errored"], [80, 17, 3])[0]
            t0 = start + n * 50_000_000
            rewards = [round(rng.gauss(0.1, 1.0), 3) for _ in range(steps)]
            call = LLMCall(
                name="chat bench",
                model="bench-1",
                input_messages=[{"role": "user", "content": f"task {n % 500}: pick a move"}],
                output_messages=[{"role": "assistant", "content": "move +1"}],
                finish_reasons=["stop"],
                input_tokens=120,
                output_tokens=8,
                start_time=t0,
                end_time=t0 + 3_000_000,
            )
            trajectory = Trajectory(
                episode_id=f"episode-{n:06d}",
                task_id=f"task-{n % 500}",
                status=status,
                error=EpisodeError(type="ToolFailure", message="timed out")
                if status == "errored"
                else None,
                start_time=t0,
                end_time=t0 + 40_000_000,
                return_=sum(rewards),
                length=steps,
                attributes={"rl.group.id": f"group-{n // 8}"},
                steps=[
                    Step(
                        index=i,
                        observation=[i, round(rng.random(), 4), round(rng.random(), 4)],
                        action=rng.randrange(4),
                        reward=reward,
                        terminated=i == steps - 1 and status == "completed",
                        truncated=i == steps - 1 and status == "truncated",
                        start_time=t0 + i * 4_000_000,
                        end_time=t0 + i * 4_000_000 + 3_500_000,
                        llm_calls=[call] if i == 0 else [],
                    )
                    for i, reward in enumerate(rewards)
                ],
            )
            handle.write(trajectory.to_json() + "\n")
    return run


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return answer.read()


def _rss_kib(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            found[line.split(":")[0]] = int(line.split()[1])
    return found


def _best_of(url: str, times: int = 5) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        _get(url)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--keep", metavar="DIR", help="write the run here and keep it (reused)")
    parser.add_argument("--starts", type=int, default=5, help="starts timed to the first page")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="agenttrace-view-"))
    print(f"command: python benchmarks/viewer.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start")
    try:
        started = time.perf_counter()
        run = write_run(folder, args.episodes, args.steps)
        size = (run / "trajectories.jsonl").stat().st_size
        print(f"run: {args.episodes:,} episodes of {args.steps} steps, "
              f"{size / 2**20:,.0f} MiB of JSON lines (written in "
              f"{time.perf_counter() - started:.0f} s)")  # fmt: skip
        measure(run, args.episodes, max(1, args.starts))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def start_viewer(run: Path) -> tuple[subprocess.Popen, str, float, float]:
    """``agenttrace view`` on ``run``: (process, its URL, seconds to the link, seconds to the
    first page), both from the command's start."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "agenttrace", "view", str(run), "--no-follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    url = line.split()[-1]
    linked = time.perf_counter() - started
    while True:
        rows = json.loads(_get(url + "api/episodes?limit=50"))["rows"]
        if rows:
            break
        time.sleep(0.01)
    _get(url)
    _get(url + "api/info")
    _get(url + "api/summary")
    return process, url, linked, time.perf_counter() - started


def measure(run: Path, episodes: int, starts: int) -> None:
    firsts = []  # (link, first page) of each start but the last, stopped at once
    for _ in range(starts - 1):
        process, _url, linked, first_page = start_viewer(run)
        process.terminate()
        process.wait(30)
        firsts.append((linked, first_page))
    process, url, linked, first_page = start_viewer(run)
    firsts.append((linked, first_page))
    started = time.perf_counter() - first_page  # (the last start's)
    try:
        during = []  # a page of 50 rows while the rest of the run is being read
        for _ in range(5):
            begun = time.perf_counter()
            _get(url + "api/episodes?limit=50&offset=0")
            during.append((time.perf_counter() - begun) * 1000)
        memory = []
        while True:
            info = json.loads(_get(url + "api/info"))
            memory.append(_rss_kib(process.pid)["VmRSS"])
            if info["episodes"] == episodes and not info["indexing"]:
                break
            time.sleep(0.5)
        indexed = time.perf_counter() - started
        figures = {
            "sorted_page_ms": _best_of(url + "api/episodes?sort=return&order=desc&limit=50"),
            "filtered_page_ms": _best_of(url + "api/episodes?status=errored&limit=50"),
            "summary_ms": _best_of(url + "api/summary"),
            "plots_ms": _best_of(url + "api/plots"),
            "episode_ms": _best_of(url + f"api/episode/{episodes // 2}"),
        }
        rss = _rss_kib(process.pid)
    finally:
        process.terminate()
        process.wait(30)
    linked = statistics.median(link for link, _ in firsts)
    first_page = statistics.median(page for _, page in firsts)
    each = ", ".join(f"{page:.2f}" for _, page in firsts)
    print(f"\nfrom the command's start, median of {len(firsts)} starts: link printed "
          f"{linked:.2f} s; first page (/, info, summary, 50 rows) {first_page:.2f} s "
          f"(target < 1 s; each: {each} s)")  # fmt: skip
    print(f"whole run indexed {indexed:.1f} s ({episodes / indexed:,.0f} episodes/s)")
    print(f"while indexing: a page of 50 rows in {sorted(during)[2]:.0f} ms (median of 5)")
    print("on the whole index, best of 5: " + ", ".join(
        f"{name[:-3].replace('_', ' ')} {value:.0f} ms" for name, value in figures.items()
    ))  # fmt: skip
    print(f"server memory: RSS {rss['VmRSS'] / 1024:.0f} MiB at the end, peak "
          f"{rss['VmHWM'] / 1024:.0f} MiB")  # fmt: skip
    summary = {
        "episodes": episodes,
        "link_s": round(linked, 3),
        "first_page_s": round(first_page, 3),
        "indexed_s": round(indexed, 2),
        "page_while_indexing_ms": round(sorted(during)[2], 1),
        **{name: round(value, 1) for name, value in figures.items()},
        "rss_mib": round(rss["VmRSS"] / 1024),
        "peak_mib": round(rss["VmHWM"] / 1024),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
