"""Play the arithmetic tasks on two Runner actors of a local Ray and save what they returned.

    python -m ray_runner.driver --records runner_trajectories.json

The records file holds one entry per task: the task id and the runner's own ``Trajectory``
(timesteps with chats, reward, done and tool schemas; reset kwargs; error info; episode id).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import ray

from ray_runner.runner import Runner, Task


def _task(task_id: str, expression: str, seed: int, max_timesteps: int = 8, **more: object) -> Task:
    reset_kwargs = {"expression": expression, "seed": seed, "task_unique_id": task_id, **more}
    return Task(task_id, reset_kwargs, max_timesteps)


TASKS = [
    _task("sum", "3 + 4", 1, step_cost=-0.05),
    _task("product-of-sum", "(3 + 4) * 5", 2),  # operations not rated: reward None
    _task("mixed", "2 * (10 - 4) + 7", 3, step_cost=-0.05),
    _task("unparsable", "2 +* 3", 4),  # fails at reset
    _task("over-budget", "(1 + 2) * (3 + 4) - 5", 5, max_timesteps=3, step_cost=-0.05),
    _task("answer", "6 * 7", 6),
    _task("tool-server-down", "(2 + 3) * (4 + 5) - 1", 7, step_cost=-0.05, fail_at_step=2),
    _task("difference", "10 - 3", 8),
    _task("nested", "((1 + 1) * 3) + 4", 9, step_cost=-0.1),
    _task("not-supported", "7 / 2", 10),  # fails at reset: no division
    _task("short-budget", "1 + 2 + 3 + 4", 11, max_timesteps=2),
    _task("square", "9 * 9", 12, step_cost=-0.05),
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="runner_trajectories.json", type=Path)
    args = parser.parse_args(argv)

    ray.init(num_cpus=2, include_dashboard=False)
    try:
        runners = [Runner.remote() for _ in range(2)]
        futures = [runners[i % 2].play_episode.remote(task) for i, task in enumerate(TASKS)]
        trajectories = ray.get(futures)
        del runners
    finally:
        ray.shutdown()

    records = [
        {"task_id": task.task_id, **dataclasses.asdict(trajectory)}
        for task, trajectory in zip(TASKS, trajectories, strict=True)
    ]
    args.records.write_text(json.dumps(records, indent=1))
    for record in records:
        timesteps = record["timesteps"]
        outcome = record["error_info"]["message"] if record["error_info"] else "ok"
        total = sum(t["reward"] for t in timesteps if t["reward"] is not None)
        summary = f"{len(timesteps)} timesteps, return {total:+.2f}, {outcome}"
        print(f"{record['task_id']:>15}: {summary}")


if __name__ == "__main__":
    main()
