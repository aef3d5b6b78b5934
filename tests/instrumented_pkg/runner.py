"""An unmodified agent loop over a real gymnasium environment (no agenttrace import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

# FrozenLake 4x4, not slippery: the route from S to G; the agent follows it 80 % of the time.
_ROUTE = {0: 2, 1: 2, 2: 1, 6: 1, 10: 1, 14: 2}


@dataclass
class Task:
    name: str
    seed: int


@dataclass
class Played:
    """What the loop saw, kept by the loop itself (the reference the tests compare with)."""

    task: str
    observations: list[int] = field(default_factory=list)  # the one each action was chosen on
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    final_observation: int | None = None


class Agent:
    """A seeded epsilon-greedy policy along the route."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: Any) -> int:
        if int(observation) in _ROUTE and self.rng.random() < 0.8:
            return _ROUTE[int(observation)]
        return int(self.rng.integers(4))


def make_env(max_steps: int = 12) -> gym.Env:
    return gym.make("FrozenLake-v1", is_slippery=False, max_episode_steps=max_steps)


class Runner:
    def __init__(self, max_steps: int = 12) -> None:
        self.env = make_env(max_steps)

    def play_episode(self, task: Task) -> Played:
        played = Played(task.name)
        agent = Agent(task.seed)
        observation, _ = self.env.reset(seed=task.seed)
        done = False
        while not done:
            action = agent.act(observation)
            played.observations.append(int(observation))
            played.actions.append(action)
            observation, reward, terminated, truncated, _ = self.env.step(action)
            played.rewards.append(float(reward))
            played.terminated, played.truncated = bool(terminated), bool(truncated)
            done = terminated or truncated
        played.final_observation = int(observation)
        return played


def main() -> None:
    """Run as a script by tests (python -m instrumented_pkg.runner): play three episodes."""
    import json

    runner = Runner()
    results = [runner.play_episode(Task(f"task-{seed}", seed)).__dict__ for seed in range(3)]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
