"""The agent loop: play every task concurrently (one environment each), record what it saw.

    python -m ares_env --records ares_records.json   (runs main() below)

Each episode runs under a time budget. The records file holds, per task, the loop's own list
of steps (the observation acted on, the action, and the reward, discount and step type the
environment answered), the last observation and the outcome: ``finished``, or ``out of
time`` when the budget ran out (the step in flight then has an observation and an action
only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ares_env.agent import BisectionAgent
from ares_env.env import Environment, GuessNumberEnv

LOW, HIGH = 1, 100
TIME_BUDGET = 2.0  # seconds per episode; a normal one takes a few hundredths


@dataclass
class Task:
    name: str
    secret: int
    max_guesses: int = 10
    unresponsive_after: int | None = None


TASKS = [
    Task("find-42", 42),
    Task("find-7", 7),
    Task("find-77-in-3-guesses", 77, max_guesses=3),  # runs out of guesses: cut short
    Task("find-93", 93),
    Task("find-30-hanging-env", 30, unresponsive_after=2),  # stops answering: out of time
]


@dataclass
class EpisodeRecord:
    task: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    final_observation: Any = None
    outcome: str = "running"


def make_env(task: Task) -> Environment:
    return GuessNumberEnv(
        task.secret, LOW, HIGH, task.max_guesses, unresponsive_after=task.unresponsive_after
    )


async def play_episode(task: Task, record: EpisodeRecord) -> None:
    async with make_env(task) as env:
        timestep = await env.reset()
        agent = BisectionAgent(LOW, HIGH)
        while not timestep.last():
            observation = timestep.observation
            entry = {"observation": observation, "action": await agent.act(observation)}
            record.steps.append(entry)
            timestep = await env.step(entry["action"])
            entry.update(
                reward=timestep.reward,
                discount=timestep.discount,
                step_type=timestep.step_type.name,
            )
            record.final_observation = timestep.observation
    record.outcome = "finished"


async def play_with_budget(task: Task) -> EpisodeRecord:
    record = EpisodeRecord(task.name)
    try:
        await asyncio.wait_for(play_episode(task, record), TIME_BUDGET)
    except asyncio.TimeoutError:
        record.outcome = "out of time"
    return record


async def play_all(tasks: list[Task]) -> list[EpisodeRecord]:
    return list(await asyncio.gather(*(play_with_budget(task) for task in tasks)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="ares_records.json", type=Path)
    args = parser.parse_args(argv)
    records = asyncio.run(play_all(TASKS))
    args.records.write_text(json.dumps([asdict(record) for record in records], indent=1))
    for record in records:
        rewards = sum(step.get("reward") or 0.0 for step in record.steps)
        print(f"{record.task:>22}: {len(record.steps)} steps, return {rewards}, {record.outcome}")


if __name__ == "__main__":
    main()
