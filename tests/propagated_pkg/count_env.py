"""The env the env server hosts: count up to a goal.

A module of its own: ``python -m propagated_pkg.env_server`` runs the server module as
``__main__``, and targets must name a module that is imported, not run.
"""

from __future__ import annotations

import os
from typing import Any

GOAL = 5


class CountEnv:
    def __init__(self) -> None:
        self.total = 0

    def reset(self, seed: int) -> dict[str, Any]:
        self.total = seed % 2
        return {"observation": self.total}

    def step(self, action: int) -> dict[str, Any]:
        self.total += action
        terminated = self.total >= GOAL
        return {
            "observation": self.total,
            "reward": 1.0 if terminated else 0.0,
            "terminated": terminated,
            "truncated": False,
            "info": {"server_pid": os.getpid()},
        }
