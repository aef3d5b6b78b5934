"""An ARES-style async environment interface, and a guess-the-number environment.

``Environment`` is the interface: ``reset()`` and ``step(action)`` return a dm_env-style
``TimeStep(step_type, reward, discount, observation)``; ``close()`` releases the environment,
and ``async with`` closes it on exit. A ``LAST`` step with discount 0 ends the task (the
number was found); with discount 1 the episode was cut short (out of guesses): the value of
what follows is not zero, the task just stopped.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Any


class StepType(enum.IntEnum):
    FIRST = 0
    MID = 1
    LAST = 2


@dataclass(frozen=True)
class TimeStep:
    step_type: StepType
    reward: float | None
    discount: float | None
    observation: Any

    def last(self) -> bool:
        return self.step_type is StepType.LAST


class Environment:
    """What every environment of the suite implements (``reset`` and ``step`` at least)."""

    async def reset(self) -> TimeStep:
        raise NotImplementedError

    async def step(self, action: Any) -> TimeStep:
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the environment holds (a sandbox, a connection)."""

    async def __aenter__(self) -> Environment:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class GuessNumberEnv(Environment):
    """Find a secret integer in ``[low, high]`` within ``max_guesses``; reward 1 when found.

    Each answer takes ``latency`` seconds, like a remote environment. ``unresponsive_after``
    makes it stop answering after that many steps (a sandbox that hangs).
    """

    def __init__(
        self,
        secret: int,
        low: int = 1,
        high: int = 100,
        max_guesses: int = 10,
        latency: float = 0.005,
        unresponsive_after: int | None = None,
    ) -> None:
        self.secret, self.low, self.high = secret, low, high
        self.max_guesses = max_guesses
        self.latency = latency
        self.unresponsive_after = unresponsive_after
        self.guesses = 0
        self.closed = False

    async def reset(self) -> TimeStep:
        await asyncio.sleep(self.latency)
        self.guesses = 0
        observation = {
            "prompt": f"Guess the number between {self.low} and {self.high}.",
            "feedback": None,
            "guesses_left": self.max_guesses,
        }
        return TimeStep(StepType.FIRST, None, None, observation)

    async def step(self, action: int) -> TimeStep:
        if self.unresponsive_after is not None and self.guesses >= self.unresponsive_after:
            await asyncio.Event().wait()  # never answers; the caller's time budget ends it
        await asyncio.sleep(self.latency)
        self.guesses += 1
        left = self.max_guesses - self.guesses
        if action == self.secret:
            observation = {"prompt": "Found it.", "feedback": "correct", "guesses_left": left}
            return TimeStep(StepType.LAST, 1.0, 0.0, observation)
        feedback = "higher" if action < self.secret else "lower"
        observation = {"prompt": f"{action} is wrong.", "feedback": feedback, "guesses_left": left}
        if left == 0:
            return TimeStep(StepType.LAST, 0.0, 1.0, observation)  # cut short: truncated
        return TimeStep(StepType.MID, 0.0, 1.0, observation)

    async def close(self) -> None:
        self.closed = True
