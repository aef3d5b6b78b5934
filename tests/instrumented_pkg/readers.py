"""A custom extractor, named by import path in a target (the one agenttrace-aware module)."""

from __future__ import annotations

from typing import Any

from agenttrace import StepResult


def read_score(result: Any) -> StepResult | None:
    """Reward and termination of ``shapes.step_request`` results, stored under other names."""
    if isinstance(result, dict) and "score" in result:
        return StepResult(
            observation=result["observation"],
            reward=result["score"],
            terminated=result["finished"],
            truncated=False,
        )
    return None
