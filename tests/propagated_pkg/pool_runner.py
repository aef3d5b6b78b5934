"""A loop whose agent acts in a thread pool, handed over in each of the usual ways."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

HANDOFFS = ("submit", "map", "run_in_executor", "default_executor")


def act(observation: int) -> int:
    return 2 * observation + 1


class PoolRunner:
    def __init__(self, executor: ThreadPoolExecutor, policy_version: str) -> None:
        self.executor = executor
        self.policy_version = policy_version

    def play(self, run_id: str, steps: int, handoff: str) -> list[int]:
        return [self.turn(observation, handoff) for observation in range(steps)]

    def turn(self, observation: int, handoff: str) -> int:
        if handoff == "submit":
            return self.executor.submit(act, observation).result()
        if handoff == "map":
            return next(self.executor.map(act, [observation]))
        executor = self.executor if handoff == "run_in_executor" else None
        return asyncio.run(self._in_executor(executor, observation))

    async def _in_executor(self, executor: ThreadPoolExecutor | None, observation: int) -> int:
        return await asyncio.get_running_loop().run_in_executor(executor, act, observation)
