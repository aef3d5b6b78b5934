"""Clients of the env server's actors, and the pool the Interactor's workers draw them from.

``EnvActor`` is a blocking HTTP client (``httpx.Client``), as env SDKs often are; the Interactor
calls it through a thread pool (``loop.run_in_executor``) so the event loop keeps running.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class EnvActor:
    """One env actor on the env server: reset, the prompt for the LLM, and steps."""

    def __init__(self, base_url: str, actor_id: str, timeout: float = 10.0) -> None:
        self.actor_id = actor_id
        self.http = httpx.Client(
            base_url=f"{base_url.rstrip('/')}/actors/{actor_id}/", timeout=timeout
        )
        self.session_id: str | None = None

    def reset(self, task: dict[str, Any]) -> str:
        """Start an episode of ``task``; returns the env's session id."""
        reply = self.http.post("reset", json={"task": task})
        reply.raise_for_status()
        self.session_id = reply.json()["session_id"]
        return self.session_id

    def get_task_prompt(self) -> list[dict[str, str]]:
        """The chat messages to send to the LLM for the current state."""
        reply = self.http.get("prompt")
        reply.raise_for_status()
        return reply.json()["messages"]

    def step(self, action: str) -> dict[str, Any]:
        """Send the LLM's answer; the env's observation, reward, terminated, truncated, info."""
        body = {"session_id": self.session_id, "action": action}
        reply = self.http.post("step", json=body)
        reply.raise_for_status()
        return reply.json()

    def close(self) -> None:
        self.http.close()


class EnvPool:
    """Env actors waiting for a worker; ``acquire`` waits until one is free."""

    def __init__(self, actors: list[EnvActor]) -> None:
        self._free: asyncio.Queue[EnvActor] = asyncio.Queue()
        self._actors = list(actors)
        for actor in actors:
            self._free.put_nowait(actor)

    async def acquire(self) -> EnvActor:
        return await self._free.get()

    def release(self, actor: EnvActor) -> None:
        self._free.put_nowait(actor)

    def close(self) -> None:
        for actor in self._actors:
            actor.close()
