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

TASKS = [
    Task("sum", {"expression": "3 + 4"}),
    Task("product-of-sum", {"expression": "(3 + 4) * 5"}),
    Task("mixed", {"expression": "2 * (10 - 4) + 7"}),
    Task("unparsable", {"expression": "2 +* 3"}),  # fails at reset
    Task("over-budget", {"expression": "(1 + 2) * (3 + 4) - 5"}, max_timesteps=3),
    Task("answer", {"expression": "6 * 7"}),
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
        total = sum(t["reward"] for t in timesteps)
        summary = f"{len(timesteps)} timesteps, return {total:+.2f}, {outcome}"
        print(f"{record['task_id']:>15}: {summary}")


if __name__ == "__main__":
    main()
