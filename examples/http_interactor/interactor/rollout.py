"""The Interactor: async workers play episodes on pooled env actors and record every step.

Per episode a worker takes a free env actor from the pool, resets it, then loops
``get_task_prompt -> LLM -> POST step`` and calls ``DataManager.record_step`` after every
step. The env actors and the DataManager block, so they run in a thread pool
(``loop.run_in_executor``); the LLM is called with the async OpenAI client. A reply cut by
``max_tokens`` (``finish_reason == "length"``) ends the episode at once with reward 0,
terminated and truncated, and that step is not trainable.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai

from interactor.data_manager import DataManager
from interactor.env_client import EnvActor, EnvPool

T = TypeVar("T")


@dataclass(frozen=True)
class Task:
    task_id: str
    a: int
    b: int
    max_turns: int = 3

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "a": self.a, "b": self.b, "max_turns": self.max_turns}


@dataclass
class StepOutcome:
    """What one step earned; ``info`` holds the env state and whether to train on the step."""

    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeSummary:
    task_id: str
    session: str
    actor_id: str
    steps: int
    total_reward: float
    ended_by_length: bool


class Interactor:
    def __init__(
        self,
        *,
        pool: EnvPool,
        llm: openai.AsyncOpenAI,
        policy_version: str,
        data_manager: DataManager,
        executor: ThreadPoolExecutor,
        max_tokens: int = 8,
    ) -> None:
        self.pool = pool
        self.llm = llm
        self.policy_version = policy_version  # the served model is named after the weights
        self.data_manager = data_manager
        self.executor = executor
        self.max_tokens = max_tokens

    async def run(self, tasks: list[Task], n_workers: int) -> list[EpisodeSummary]:
        """Play every task once with ``n_workers`` concurrent workers."""
        pending: asyncio.Queue[Task] = asyncio.Queue()
        for task in tasks:
            pending.put_nowait(task)
        summaries: list[EpisodeSummary] = []

        async def worker() -> None:
            while not pending.empty():
                task = pending.get_nowait()
                actor = await self.pool.acquire()
                try:
                    summaries.append(await self.run_episode(actor, task))
                finally:
                    self.pool.release(actor)

        await asyncio.gather(*(worker() for _ in range(n_workers)))
        return summaries

    async def run_episode(self, actor: EnvActor, task: Task) -> EpisodeSummary:
        session = await self._blocking(actor.reset, task.to_json())
        await self._blocking(
            self.data_manager.open_session,
            session,
            task.task_id,
            actor.actor_id,
            self.policy_version,
        )
        total, step_id, ended_by_length = 0.0, 0, False
        while True:
            outcome = await self.play_step(actor, session, step_id)
            total += outcome.reward
            step_id += 1
            if outcome.terminated or outcome.truncated:
                ended_by_length = not outcome.info["is_trainable"]
                break
        return EpisodeSummary(
            task.task_id, session, actor.actor_id, step_id, total, ended_by_length
        )

    async def play_step(self, actor: EnvActor, session: str, step_id: int) -> StepOutcome:
        messages = await self._blocking(actor.get_task_prompt)
        generation = await self.generate(messages)
        response = generation["content"]
        if generation["finish_reason"] == "length":
            outcome = StepOutcome(0.0, True, True, {"env_state": None, "is_trainable": False})
        else:
            reply = await self._blocking(actor.step, response)
            outcome = StepOutcome(
                reply["reward"],
                reply["terminated"],
                reply["truncated"],
                {"env_state": reply["info"]["env_state"], "is_trainable": True},
            )
        await self._blocking(
            self.data_manager.record_step,
            session,
            step_id,
            messages,
            response,
            outcome.reward,
            outcome.info["env_state"],
            outcome.terminated,
            outcome.truncated,
            outcome.info["is_trainable"],
        )
        return outcome

    async def generate(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Ask the policy; its text and why it stopped."""
        completion = await self.llm.chat.completions.create(
            model=self.policy_version, messages=messages, max_tokens=self.max_tokens
        )
        choice = completion.choices[0]
        return {"content": choice.message.content or "", "finish_reason": choice.finish_reason}

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))
