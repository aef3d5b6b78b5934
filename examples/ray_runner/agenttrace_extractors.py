"""agenttrace configuration for this example: how to read the runner's ``TimeStep``.

Named by import path in ``agenttrace.toml`` (``extractor=ray_runner.agenttrace_extractors:
read_timestep``). The only module here that imports agenttrace; the example never imports it.
"""

from __future__ import annotations

from typing import Any

from agenttrace import StepResult


def read_timestep(result: Any) -> StepResult | None:
    """Reward and done of a ``TimeStep``, with the tool schemas that were on offer as info.

    ``done`` is the environment ending the task, so it is ``terminated``; a rollout that runs
    out of timesteps ends on a step that is not done, and agenttrace calls it ``truncated``.
    """
    if not all(hasattr(result, name) for name in ("reward", "done", "available_tool_schemas")):
        return None
    return StepResult(
        reward=result.reward,
        terminated=bool(result.done),
        truncated=False,
        info={"available_tool_schemas": result.available_tool_schemas},
    )
