"""Token-level training rows from trajectories (``agenttrace export --format tokens``).

RL trainers for LLM agents (verl, SkyRL, OpenRLHF, TRL) train on token ids: the prompt, then
the response, with log-probabilities from the sampling policy and a loss mask that is 1 on the
model's own tokens and 0 on what the environment or a tool put in between. A trajectory holds
these per model call when token capture was on (``AGENTTRACE_TOKENS``; the ids the server
returned, never re-tokenised). This module lays them out:

* ``per="episode"``: one row per episode. ``prompt_ids`` is the first call's prompt. Each
  call's completion goes into ``response_ids`` with mask 1; between two calls, what the next
  prompt adds after the previous prompt and completion (the tool result or observation, as the
  chat template rendered it) goes in with mask 0. When a prompt does not extend the previous
  one (the history was cut or rewritten) the tokens cannot be joined exactly: the row ends and
  a new one (``segment`` + 1) starts from that prompt.
* ``per="step"``: one row per model call, its prompt and its completion.

``token_rewards`` has one entry per response token: the step's reward at the last token of the
step's last model call, 0.0 elsewhere. ``reward`` is the episode's return (``per="episode"``) or
the step's reward (``per="step"``). ``turn_ends`` gives, per model call, the end (exclusive) of
its tokens in ``response_ids``: the chat template's turn boundaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.model import LLMCall, Step, Trajectory

PER_CHOICES = ("episode", "step")


def _calls(trajectory: Trajectory) -> Iterator[tuple[Step, LLMCall, bool]]:
    """(step, call, whether it is the step's last call) for calls with completion token ids
    (a call without prompt ids starts a row of its own: its context is unknown), in order."""
    for step in trajectory.steps:
        calls = [c for c in step.llm_calls if c.completion_token_ids]
        calls.sort(key=lambda call: call.start_time or 0)
        for number, call in enumerate(calls):
            yield step, call, number == len(calls) - 1


def token_rows(trajectory: Trajectory, per: str = "episode") -> list[dict[str, Any]]:
    """The token rows of one trajectory (none when no model call has token ids)."""
    if per not in PER_CHOICES:
        raise ValueError(f"per must be one of {', '.join(PER_CHOICES)}, got {per!r}")
    calls = list(_calls(trajectory))
    if not calls:
        return []
    if per == "step":
        return [_step_row(trajectory, step, call, last) for step, call, last in calls]
    rows: list[dict[str, Any]] = []
    row: dict[str, Any] | None = None
    context: list[int] = []  # the prompt and response so far: what the next prompt extends
    for step, call, last in calls:
        prompt = list(call.prompt_token_ids or ())
        if row is not None and prompt and prompt[: len(context)] == context:
            added = prompt[len(context) :]  # the environment's or tool's tokens
            _extend(row, added, mask=0)
        else:
            row = _new_row(trajectory, prompt, segment=len(rows))
            rows.append(row)
        _extend(row, call.completion_token_ids or (), mask=1, logprobs=call.completion_logprobs)
        row["turn_ends"].append(len(row["response_ids"]))
        if last and step.reward is not None and row["token_rewards"]:
            row["token_rewards"][-1] += float(step.reward)
        context = row["prompt_ids"] + row["response_ids"]
    for row in rows:
        if row.pop("_logprobs_missing"):
            row["response_logprobs"] = None
    return rows


def _new_row(trajectory: Trajectory, prompt: list[int], segment: int) -> dict[str, Any]:
    return {
        **_identity(trajectory),
        "segment": segment,
        "prompt_ids": prompt,
        "response_ids": [],
        "response_logprobs": [],
        "loss_mask": [],
        "token_rewards": [],
        "turn_ends": [],
        "reward": float(trajectory.return_),
        "_logprobs_missing": False,
    }


def _extend(
    row: dict[str, Any], ids: Any, *, mask: int, logprobs: list[float] | None = None
) -> None:
    ids = list(ids)
    row["response_ids"].extend(ids)
    row["loss_mask"].extend([mask] * len(ids))
    row["token_rewards"].extend([0.0] * len(ids))
    if mask and (logprobs is None or len(logprobs) != len(ids)):
        row["_logprobs_missing"] = True
        logprobs = None
    row["response_logprobs"].extend(logprobs if logprobs is not None else [0.0] * len(ids))


def _step_row(trajectory: Trajectory, step: Step, call: LLMCall, last: bool) -> dict[str, Any]:
    completion = list(call.completion_token_ids or ())
    logprobs = call.completion_logprobs
    rewards = [0.0] * len(completion)
    reward = float(step.reward) if step.reward is not None else 0.0
    if last and rewards:
        rewards[-1] = reward
    return {
        **_identity(trajectory),
        "step": step.index,
        "prompt_ids": list(call.prompt_token_ids or ()),
        "response_ids": completion,
        "response_logprobs": list(logprobs)
        if logprobs and len(logprobs) == len(completion)
        else None,
        "loss_mask": [1] * len(completion),
        "token_rewards": rewards,
        "turn_ends": [len(completion)],
        "reward": reward if last else 0.0,
    }


def _identity(trajectory: Trajectory) -> dict[str, Any]:
    group = trajectory.attributes.get(sc.GROUP_ID)
    return {
        "episode_id": trajectory.episode_id,
        "task_id": trajectory.task_id,
        "group_id": None if group is None else str(group),
        "status": trajectory.status,
    }


def tokens_arrow_schema(per: str = "episode") -> Any:
    """The Parquet schema of token rows (``per`` chooses ``segment`` or ``step``)."""
    import pyarrow as pa

    position = ("segment", pa.int64()) if per == "episode" else ("step", pa.int64())
    return pa.schema(
        [
            ("episode_id", pa.string()),
            ("task_id", pa.string()),
            ("group_id", pa.string()),
            ("status", pa.string()),
            position,
            ("prompt_ids", pa.list_(pa.int64())),
            ("response_ids", pa.list_(pa.int64())),
            ("response_logprobs", pa.list_(pa.float64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("token_rewards", pa.list_(pa.float64())),
            ("turn_ends", pa.list_(pa.int64())),
            ("reward", pa.float64()),
        ]
    )


def token_rows_to_batch(rows: list[dict[str, Any]], schema: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [pa.array([row.get(field.name) for row in rows], type=field.type) for field in schema],
        schema=schema,
    )


__all__ = ["PER_CHOICES", "token_rows", "token_rows_to_batch", "tokens_arrow_schema"]
