"""Writing and reading training data: step tables vs Minari (HDF5) vs JSONL, side by side.

The same CartPole-v1 trajectories (random policy, ``--steps`` steps in all, built in memory
from a bare gymnasium loop so every writer starts from the same objects) are written by:

* ``steps``: agenttrace's step tables (StepTablesSink: Parquet, typed columns);
* ``minari``: agenttrace's MinariSink (Minari's own HDF5 storage, through its public API);
* ``jsonl``: agenttrace's default trajectory file (JsonlSink).

and read back: the step table with pandas and with polars (observations as one numpy array),
Minari with its episode iteration (every episode's observations, actions, rewards), JSONL with
``load_trajectories``. Each variant runs once per round, in turn; figures are medians of the
rounds. Targets (issue 16): writing step tables no slower than Minari, reading them at least
3x faster than Minari's episode iteration. Run::

    python benchmarks/training_formats.py --steps 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np

from agenttrace.sinks import JsonlSink, load_trajectories
from agenttrace.sinks.minari_dataset import MinariSink
from agenttrace.sinks.step_tables import StepTablesSink
from agenttrace.trajectory.model import Step, Trajectory


def cartpole_trajectories(steps: int, seed: int = 0) -> list[Trajectory]:
    """Whole episodes of a random policy until ``steps`` steps, as in-memory trajectories."""
    env = gym.make("CartPole-v1")
    env.action_space.seed(seed)
    trajectories: list[Trajectory] = []
    played = 0
    while played < steps:
        observation, _ = env.reset(seed=seed + len(trajectories))
        episode: list[Step] = []
        done = False
        while not done:
            action = env.action_space.sample()
            next_observation, reward, terminated, truncated, _ = env.step(action)
            episode.append(
                Step(
                    index=len(episode),
                    observation=observation,
                    action=action,
                    reward=float(reward),
                    terminated=terminated,
                    truncated=truncated,
                    info={},
                )
            )
            observation, done = next_observation, terminated or truncated
        played += len(episode)
        trajectories.append(
            Trajectory(
                episode_id=f"episode-{len(trajectories)}",
                steps=episode,
                length=len(episode),
                return_=float(len(episode)),
                final_observation=observation,
                status="completed" if episode[-1].terminated else "truncated",
                attributes={"rl.env.name": "CartPole-v1"},
            )
        )
    return trajectories


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write(kind: str, trajectories: list[Trajectory], folder: Path) -> float:
    start = time.perf_counter()
    if kind == "steps":
        sink = StepTablesSink(folder)
    elif kind == "minari":
        sink = MinariSink("bench/cartpole-v0", root=folder, episodes_per_write=256)
    else:
        sink = JsonlSink(folder)
    for trajectory in trajectories:
        sink.write(trajectory)
    sink.close()
    return time.perf_counter() - start


def read(kind: str, folder: Path) -> tuple[float, int]:
    """(seconds, steps read); every variant materialises observations, actions and rewards."""
    start = time.perf_counter()
    if kind == "steps (pandas)":
        import pandas as pd

        frame = pd.read_parquet(folder / "steps", columns=["observation", "action", "reward"])
        observations = np.stack(frame["observation"].to_numpy())
        count = len(observations) + 0 * int(frame["action"].sum()) + 0 * len(frame["reward"])
    elif kind == "steps (polars)":
        import polars as pl

        frame = pl.read_parquet(
            folder / "steps" / "*.parquet", columns=["observation", "action", "reward"]
        )
        observations = frame["observation"].to_numpy()
        count = len(observations) + 0 * int(frame["action"].sum())
    elif kind == "minari":
        import minari

        previous = os.environ.get("MINARI_DATASETS_PATH")
        os.environ["MINARI_DATASETS_PATH"] = str(folder)
        try:
            dataset = minari.load_dataset("bench/cartpole-v0")
            count = 0
            for episode in dataset.iterate_episodes():
                count += (
                    len(episode.actions) + 0 * len(episode.observations) + 0 * len(episode.rewards)
                )
        finally:
            if previous is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = previous
    else:
        count = 0
        for trajectory in load_trajectories(folder):
            for step in trajectory.steps:
                count += step.observation is not None and step.action is not None
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    trajectories = cartpole_trajectories(args.steps)
    steps = sum(len(t.steps) for t in trajectories)
    writes: dict[str, list[float]] = {"steps": [], "minari": [], "jsonl": []}
    sizes: dict[str, int] = {}
    reads: dict[str, list[float]] = {
        "steps (pandas)": [],
        "steps (polars)": [],
        "minari": [],
        "jsonl": [],
    }
    for _ in range(args.rounds):
        root = Path(tempfile.mkdtemp(prefix="agenttrace-formats-"))
        try:
            for kind in writes:
                folder = root / kind
                folder.mkdir()
                writes[kind].append(write(kind, trajectories, folder))
                sizes[kind] = folder_bytes(folder)
            for kind in reads:
                seconds, count = read(kind, root / kind.split(" ")[0])
                assert count == steps, f"{kind} read {count} of {steps} steps"
                reads[kind].append(seconds)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(
        f"CartPole-v1, {steps:,} steps in {len(trajectories):,} episodes; "
        f"medians of {args.rounds} rounds"
    )
    print(f"{'write':<16} {'s':>7} {'steps/s':>12} {'MiB/s':>8} {'MiB':>7}")
    for kind, values in writes.items():
        seconds = statistics.median(values)
        mib = sizes[kind] / 2**20
        print(
            f"{kind:<16} {seconds:>7.2f} {steps / seconds:>12,.0f} "
            f"{mib / seconds:>8.1f} {mib:>7.1f}"
        )
    print(f"{'read':<16} {'s':>7} {'steps/s':>12}")
    for kind, values in reads.items():
        seconds = statistics.median(values)
        print(f"{kind:<16} {seconds:>7.2f} {steps / seconds:>12,.0f}")
    write_ratio = statistics.median(writes["minari"]) / statistics.median(writes["steps"])
    minari_read = statistics.median(reads["minari"])
    print(f"step tables write speed / Minari's: {write_ratio:.2f}x (target >= 1)")
    for kind in ("steps (pandas)", "steps (polars)"):
        ratio = minari_read / statistics.median(reads[kind])
        print(f"{kind} read speed / Minari's episode iteration: {ratio:.1f}x (target >= 3)")


if __name__ == "__main__":
    main()
