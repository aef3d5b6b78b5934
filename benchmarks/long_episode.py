"""One long episode, live and rebuilt offline: is it whole, and what does it cost in memory?

For each length (``--steps 1000 100000``) a fresh process plays one episode of that many steps
of a tiny environment with agenttrace's default pipeline (three spans per step), then rebuilds
it from the run's span files with ``agenttrace export``. Printed per length: the live
trajectory's status and steps, the offline one's, whether the two are equal, the loss counters,
and peak RSS (``ru_maxrss``) of the traced process, of its writer helper process, and of the
export.

    python benchmarks/long_episode.py --steps 1000 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PLAY = """
import atexit, json, resource, sys
import agenttrace as at

def report():  # registered first, so it runs last: after the writer helper has exited
    whose = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    peaks = [resource.getrusage(who).ru_maxrss for who in whose]
    print(json.dumps(stats))
    print(*peaks)

atexit.register(report)
steps = int(sys.argv[1])
runtime = at.configure(out=sys.argv[2], run_name="long", exit_report=False)
with at.episode(task_id="long"):
    with at.env_reset() as reset:
        reset.record_result(({"t": 0}, {}))
    for t in range(steps):
        with at.timestep():
            with at.agent_act() as act:
                act.record(observation={"t": t}, action=t % 3)
            with at.env_step() as step:
                step.record_result(({"t": t + 1}, 1.0, t == steps - 1, False, {}))
runtime.shutdown()
stats = {k: v for k, v in runtime.stats().items() if isinstance(v, int) and v}
"""

EXPORT = """
import resource, sys
from agenttrace.cli.main import main
code = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(code)
"""


def run(code: str, *args: str) -> list[str]:
    """``python -c code args``: its output lines (it exits the benchmark if it fails)."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return done.stdout.strip().splitlines()


def measure(steps: int, folder: Path) -> dict:
    *_, stats_line, peaks = run(PLAY, str(steps), str(folder))
    play_kib, helper_kib = (int(value) for value in peaks.split())
    run_folder = folder / "long"
    rebuilt = folder / "rebuilt.jsonl"
    spans = str(run_folder / "spans*.jsonl")
    *_, export_kib = run(EXPORT, "export", "--from", spans, "--out", str(rebuilt), "--quiet")
    (live,) = (run_folder / "trajectories.jsonl").read_bytes().splitlines()
    (offline,) = rebuilt.read_bytes().splitlines()
    return {
        "steps": steps,
        "live": outline(live),
        "offline": outline(offline),
        # Byte for byte: the same trajectory (a million-step line is not loaded to compare).
        "equal": live == offline,
        "peaks": (play_kib / 1024, helper_kib / 1024, int(export_kib) / 1024),
        "stats": json.loads(stats_line),
    }


def outline(line: bytes) -> str:
    """``status steps`` of a trajectory line, checked against what PLAY played: every step
    there, in order, each with reward 1.0 (without building a million Step objects)."""
    head, _, rest = line.partition(b',"steps":[')
    steps, _, _tail = rest.rpartition(b'],"final_observation":')
    fields = json.loads(head + b"}")
    indices = [int(part.split(b",", 1)[0]) for part in steps.split(b'{"index":')[1:]]
    whole = indices == list(range(fields["length"])) and fields["return"] == len(indices)
    return f"{fields['status']} {len(indices)}{'' if whole else ' (NOT what was played)'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print("steps      live                offline             equal  peak RSS MiB")
    for steps in sorted(args.steps):
        with tempfile.TemporaryDirectory() as folder:
            row = measure(steps, Path(folder))
        play, helper, export = row["peaks"]
        print(
            f"{row['steps']:<10,} {row['live']:<19} {row['offline']:<19} {row['equal']!s:<6} "
            f"traced process {play:.0f}, writer helper {helper:.0f}, export {export:.0f}"
        )
        print(f"           counters: {row['stats']}")


if __name__ == "__main__":
    main()
