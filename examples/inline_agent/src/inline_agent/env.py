"""A number-guessing chat: the env says "Higher." or "Lower." until the guess is right."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

MAX_NUMBER = 32


@dataclass(frozen=True)
class Task:
    task_id: str
    secret: int
    persona: str  # how the scripted model plays: careful, stubborn or chatty
    max_turns: int = 6


class GuessEnv:
    """Reward 1 and terminated for the right number, -0.1 for a wrong one, -0.5 for an answer
    that is not a number; truncated after ``max_turns`` guesses."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.turn = 0
        self.messages = [
            {
                "role": "system",
                "content": f"You are a {task.persona} player. Guess the secret number between "
                f"1 and {MAX_NUMBER}. Answer with the number only.",
            },
            {"role": "user", "content": "Your guess?"},
        ]

    async def task_prompt(self) -> list[dict[str, str]]:
        await asyncio.sleep(0)  # (a real env answers over the network)
        return [dict(message) for message in self.messages]

    async def step(self, action: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.turn += 1
        text = action.strip()
        secret = self.task.secret
        if not text.isdigit():
            feedback, reward = "Answer with a number.", -0.5
        elif int(text) == secret:
            feedback, reward = "Correct!", 1.0
        else:
            feedback = "Higher." if int(text) < secret else "Lower."
            reward = -0.1
        terminated = reward == 1.0
        truncated = not terminated and self.turn >= self.task.max_turns
        self.messages += [
            {"role": "assistant", "content": action},
            {"role": "user", "content": feedback},
        ]
        return {
            "observation": feedback,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "info": {"turn": self.turn},
        }
