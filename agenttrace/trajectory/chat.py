"""Trajectories as chat rows for supervised fine-tuning (``agenttrace export --format chat``).

One row per model call: the OpenAI-style ``messages`` the model saw followed by what it
answered, the tools it was offered, and the reward columns a trainer filters or weights by
(the step's reward, the episode's return and status). LLM calls already hold OpenAI-style
messages (:mod:`agenttrace.trajectory.genai` converts every recorded format), so a row is a
re-arrangement, never a reinterpretation. Episodes without model calls give no rows.
"""

from __future__ import annotations

from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.model import LLMCall, Step, Trajectory

#: Column names of a chat row, in order (also the Parquet schema's order).
CHAT_COLUMNS = (
    "episode_id",
    "task_id",
    "step",
    "call",
    "model",
    "messages",
    "tools",
    "finish_reasons",
    "reward",
    "return",
    "terminated",
    "truncated",
    "status",
    "lossy",
)


def chat_rows(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The episode's model calls as chat rows, in step and call order."""
    rows = []
    for step in trajectory.steps:
        for number, call in enumerate(step.llm_calls):
            rows.append(_row(trajectory, step, number, call))
    return rows


def _row(trajectory: Trajectory, step: Step, number: int, call: LLMCall) -> dict[str, Any]:
    tools = call.attributes.get(sc.GEN_AI_TOOL_DEFINITIONS)
    return {
        "episode_id": trajectory.episode_id,
        "task_id": trajectory.task_id,
        "step": step.index,
        "call": number,
        "model": call.model,
        "messages": _messages(call.input_messages) + _messages(call.output_messages),
        "tools": tools if isinstance(tools, list) else None,
        "finish_reasons": call.finish_reasons,
        "reward": step.reward,
        "return": trajectory.return_,
        "terminated": step.terminated,
        "truncated": step.truncated,
        "status": trajectory.status,
        "lossy": bool(trajectory.lossy),
    }


def _messages(value: Any) -> list[dict[str, Any]]:
    """A message list as given; a lone message or plain text made into one."""
    if value is None:
        return []
    if isinstance(value, list):
        return [m if isinstance(m, dict) else {"role": "user", "content": m} for m in value]
    if isinstance(value, dict):
        return [value]
    return [{"role": "user", "content": value}]
