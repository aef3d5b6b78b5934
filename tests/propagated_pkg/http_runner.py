"""The agent side of the env server: asyncio episodes, a blocking httpx client in a pool."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Run:
    run_id: str  # the runner's own episode id
    seed: int


@dataclass
class Played:
    run_id: str
    actions: list[int] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)


def choose(observation: int) -> int:
    return 1 + observation % 2


class HttpRunner:
    def __init__(self, base_url: str, policy_version: str, executor: ThreadPoolExecutor) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30)
        self.policy_version = policy_version
        self.executor = executor

    async def play(self, run: Run) -> Played:
        played = Played(run.run_id)
        reply = await self._blocking("/reset", {"session": run.run_id, "seed": run.seed})
        observation, done = reply["observation"], False
        while not done:
            action = choose(observation)
            reply = await self.turn(run.run_id, action)
            played.actions.append(action)
            played.replies.append(reply)
            observation, done = reply["observation"], reply["terminated"] or reply["truncated"]
        return played

    async def turn(self, session: str, action: int) -> dict[str, Any]:
        return await self._blocking("/step", {"session": session, "action": action})

    async def _blocking(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.post, path, body)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.http.post(path, json=body)
        reply.raise_for_status()
        return reply.json()

    def close(self) -> None:
        self.http.close()
