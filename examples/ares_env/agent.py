"""A bisection agent: guesses the middle of the range it has not ruled out yet."""

from __future__ import annotations

import asyncio
from typing import Any


class BisectionAgent:
    def __init__(self, low: int, high: int, think_time: float = 0.002) -> None:
        self.low, self.high = low, high
        self.think_time = think_time
        self.last_guess: int | None = None

    async def act(self, observation: dict[str, Any]) -> int:
        """The next guess, after the feedback on the previous one."""
        await asyncio.sleep(self.think_time)  # a model call would sit here
        feedback = observation["feedback"]
        if feedback == "higher":
            self.low = self.last_guess + 1
        elif feedback == "lower":
            self.high = self.last_guess - 1
        self.last_guess = (self.low + self.high) // 2
        return self.last_guess
