"""The rollout worker: ``run_episode`` holds the whole agent loop inline."""

from __future__ import annotations

import asyncio
from typing import Any

from inline_agent.engine import ScriptedEngine
from inline_agent.env import GuessEnv, Task
from inline_agent.store import RolloutStore


class Runner:
    def __init__(self, engine: ScriptedEngine, store: RolloutStore, max_new_tokens: int = 8):
        self.engine = engine
        self.store = store
        self.max_new_tokens = max_new_tokens

    async def run(self, tasks: list[Task], workers: int) -> list[tuple[str, int, float]]:
        """Play every task once, ``workers`` episodes at a time; (task, steps, return) each."""
        queue: asyncio.Queue[Task] = asyncio.Queue()
        for task in tasks:
            queue.put_nowait(task)
        played: list[tuple[str, int, float]] = []

        async def worker() -> None:
            while not queue.empty():
                task = queue.get_nowait()
                played.append(await self.run_episode(task))

        await asyncio.gather(*(worker() for _ in range(workers)))
        return played

    async def run_episode(self, task: Task) -> tuple[str, int, float]:
        env = GuessEnv(task)
        session = self.store.open_session(task.task_id)
        total, steps = 0.0, 0
        for step_i in range(1, task.max_turns + 1):
            prompt = await self._env_get_task_prompt(env)
            result = await self._llm_generate(self.engine, prompt)
            steps = step_i
            if result["finish_reason"] == "length":
                # A cut reply ends the episode: reward 0, terminated and truncated, not trained on.
                self.store.record_step(
                    session, step_i, prompt, result["content"], "length", 0.0, True, True, False
                )
                break
            out = await self._env_step(env, action=result["content"])
            total += out["reward"]
            self.store.record_step(
                session,
                step_i,
                prompt,
                result["content"],
                result["finish_reason"],
                out["reward"],
                out["terminated"],
                out["truncated"],
                True,
            )
            if out["terminated"] or out["truncated"]:
                break
        return task.task_id, steps, total

    async def _env_get_task_prompt(self, env: GuessEnv) -> list[dict[str, str]]:
        return await env.task_prompt()

    async def _llm_generate(self, llm: ScriptedEngine, prompt: list[dict[str, str]]) -> dict:
        out = await llm.generate(prompt, {"max_new_tokens": self.max_new_tokens})
        meta: dict[str, Any] = out["meta_info"]
        return {
            "content": out["text"],
            "finish_reason": meta["finish_reason"]["type"],
            "usage": {
                "prompt_tokens": meta["prompt_tokens"],
                "completion_tokens": meta["completion_tokens"],
            },
        }

    async def _env_step(self, env: GuessEnv, action: str) -> dict[str, Any]:
        return await env.step(action)
