"""The environment the env server hosts: a chat about one sum ("What is a + b?").

Reward 1 for the right sum (the episode terminates), -0.1 for a wrong one; after
``max_turns`` wrong answers the episode is truncated.
"""

from __future__ import annotations

import uuid
from typing import Any

SYSTEM_PROMPT = "You add numbers. Answer with the number only."


class SumEnv:
    """One env actor's environment: a chat about one sum."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.task: dict[str, Any] = {}
        self.messages: list[dict[str, str]] = []
        self.turn = 0
        self.done = False

    def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        self.session_id = uuid.uuid4().hex
        self.task = dict(task)
        question = f"What is {task['a']} + {task['b']}?"
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ]
        self.turn = 0
        self.done = False
        return {"session_id": self.session_id, "observation": question}

    def prompt(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages]

    def step(self, action: str) -> dict[str, Any]:
        if self.done:
            raise ValueError("the episode is over; reset first")
        self.turn += 1
        expected = self.task["a"] + self.task["b"]
        correct = action.strip() == str(expected)
        terminated = correct
        truncated = not correct and self.turn >= self.task["max_turns"]
        self.done = terminated or truncated
        feedback = "Correct." if correct else "No, try again."
        self.messages += [
            {"role": "assistant", "content": action},
            {"role": "user", "content": feedback},
        ]
        return {
            "observation": feedback,
            "reward": 1.0 if correct else -0.1,
            "terminated": terminated,
            "truncated": truncated,
            "info": {"env_state": {"turn": self.turn, "solved": correct, "expected": expected}},
        }
