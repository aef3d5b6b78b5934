"""Every shape of callable a target can name: functions, methods of each kind, overrides."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

LIMIT = 3  # a constant, not callable
RAISED: list[BaseException] = []  # what Env.fail raised, to check the same object arrives


def outcome(action: Any) -> tuple[Any, float, bool, bool, dict]:
    """A gymnasium-style step result that depends on the action."""
    return {"echo": action}, float(action) / 2, action >= LIMIT, False, {"seen": action}


def step(action: Any) -> tuple[Any, float, bool, bool, dict]:
    return outcome(action)


def play(task_id: str, n: int) -> list:
    """An episode as a plain function: n steps through the module-level ``step``."""
    return [step(i) for i in range(n)]


class Env:
    def step(self, action: Any) -> tuple:
        return outcome(action)

    @staticmethod
    def static_step(action: Any) -> tuple:
        return outcome(action)

    @classmethod
    def class_step(cls, action: Any) -> tuple:
        return outcome(action)

    async def async_step(self, action: Any) -> tuple:
        await asyncio.sleep(0)
        return outcome(action)

    def odd_step(this, action: Any) -> tuple:  # a receiver not named self
        return outcome(action)

    def fail(self, action: Any) -> tuple:
        error = ValueError(f"bad action {action}")
        RAISED.append(error)
        raise error


class Overrides(Env):
    """Overrides step and calls the base: still one env.step span per call."""

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + 10, terminated, truncated, info


class Replaces(Env):
    """Overrides step without calling the base."""

    def step(self, action: Any) -> tuple:
        return {"replaced": action}, 100.0, True, False, {}


class Inherits(Env):
    pass


class Wrapper(Env):
    """Wraps another env, like gymnasium wrappers: its step calls the inner env's step."""

    def __init__(self, inner: Env) -> None:
        self.inner = inner

    def step(self, action: Any) -> tuple:
        return self.inner.step(action)


class Agent:
    def act(self, observation: Any) -> int:
        return len(str(observation))

    def stream(self, prompt: str) -> Iterator[str]:
        """A generator, e.g. a streamed LLM answer."""
        yield from prompt.split()
        return

    async def astream(self, prompt: str) -> AsyncIterator[str]:
        for word in prompt.split():
            await asyncio.sleep(0)
            yield word


@dataclass
class Request:
    action: int
    token: str = "not-for-traces"


def step_request(request: Request) -> dict:
    """An env whose step takes a request object and returns a dict."""
    return {"observation": request.action * 2, "score": request.action, "finished": True}
