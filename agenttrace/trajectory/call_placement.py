"""Which step each model and tool call belongs to (part of the one assembler).

GenAI spans, from agenttrace or any other instrumentation, are folded into the step whose
span encloses them, else the step their own index names, else the next step to start; in an
episode without timesteps, calls after every step are agent turns of their own
(docs/llm-calls.md, docs/tracing-api.md "Agent turns").
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory import genai
from agenttrace.trajectory.codec import RawJSON, dumps
from agenttrace.trajectory.model import Step, raw_content
from agenttrace.trajectory.records import SpanRecord

_STEP_ROLES = sc.STEP_ROLES
_FLAG_KEYS = (sc.TERMINATED, sc.TRUNCATED, sc.DONE)


def step_index_of(record: SpanRecord, by_span_id: Mapping[int, SpanRecord]) -> int | None:
    """Index of the nearest ancestor (or self) that carries rl.timestep.index."""
    current: SpanRecord | None = record
    hops = 0
    while current is not None and hops < 256:
        index = current.attributes.get(sc.TIMESTEP_INDEX)
        if current.name in _STEP_ROLES and isinstance(index, int):
            return index
        if not current.parent_span_id:
            break
        current = by_span_id.get(current.parent_span_id)
        hops += 1
    index = record.attributes.get(sc.TIMESTEP_INDEX)
    return index if isinstance(index, int) else None


def _outermost_model_call(record: SpanRecord, by_span_id: Mapping[int, SpanRecord]) -> SpanRecord:
    """The outermost model-call span around ``record`` (itself when none encloses it)."""
    outer = record
    current = by_span_id.get(record.parent_span_id) if record.parent_span_id else None
    hops = 0
    while current is not None and hops < 256 and current.name not in _STEP_ROLES:
        if genai.call_kind(current) == genai.MODEL_CALL:
            outer = current
        current = by_span_id.get(current.parent_span_id) if current.parent_span_id else None
        hops += 1
    return outer


def attach_genai_calls(
    steps: list[Step],
    records: list[SpanRecord],
    by_span_id: Mapping[int, SpanRecord],
    trusted: str | None,
    *,
    turns: bool = False,
) -> dict[int, int]:
    """Fold GenAI spans into their steps (docs/llm-calls.md has the rules); returns the step
    index each span went to, by span id.

    * a call under a step span belongs to that step; a call under no step span to the step
      its own ``rl.timestep.index`` names (a turn of its own), else (before the first step,
      between steps, in env.reset) to the next step to start, else the last step;
      a call whose step span is known but missing is dropped with that step;
    * a model call nested in another model call (openai-v2's span under agenttrace's
      ``llm_call``) is not a second call: it fills what the outer one left empty;
    * with ``turns`` (an episode without timesteps), calls after every step are agent turns
      of their own: a model call starts a new step unless the turn before it is still open
      (no tool call consumed it), a tool call joins the open turn. Such steps are appended to
      ``steps``.
    """
    placed: dict[int, int] = {}
    if not records or not (steps or turns):
        return placed
    by_index = {step.index: step for step in steps}
    starts = sorted((step.start_time or 0, step.index) for step in steps)
    nested: dict[int, list[SpanRecord]] = {}
    calls: list[tuple[SpanRecord, str]] = []
    for record in sorted(records, key=lambda r: r.start_time):
        kind = genai.call_kind(record)
        if kind == genai.MODEL_CALL:
            outer = _outermost_model_call(record, by_span_id)
            if outer is not record:
                nested.setdefault(outer.span_id, []).append(record)
                continue
        calls.append((record, kind))  # type: ignore[arg-type]
    turn: Step | None = None  # the open turn made of calls after every step
    for record, kind in calls:
        index = step_index_of(record, by_span_id)
        if index is None:
            position = bisect.bisect_left(starts, (record.start_time, -1))
            if position < len(starts):
                index = starts[position][1]
            elif turns and (turn is not None or kind == genai.MODEL_CALL):
                if kind == genai.MODEL_CALL and (turn is None or turn.tool_calls):
                    last = steps[-1].index if steps else -1
                    turn = Step(index=last + 1, start_time=record.start_time)
                    steps.append(turn)
                    by_index[turn.index] = turn
                turn.end_time = max(turn.end_time or 0, record.end_time or 0) or None  # type: ignore[union-attr]
                index = turn.index  # type: ignore[union-attr]
            elif starts:
                index = starts[-1][1]
            else:
                continue  # no step at all to join
        placed[record.span_id] = index
        step = by_index.get(index)
        if step is None:
            continue
        if kind == genai.TOOL_CALL:
            step.tool_calls.append(genai.tool_call(record, trusted))
            continue
        call = genai.llm_call(record, trusted)
        inner = nested.get(record.span_id)
        if inner:
            placed.update((r.span_id, index) for r in inner)
            genai.merge_nested(call, [genai.llm_call(r, trusted) for r in inner])
        step.llm_calls.append(call)
    return placed


def complete_turns(steps: list[Step], parts: Mapping[int, Mapping[str, SpanRecord]]) -> None:
    """Fill what an agent turn's step spans left empty from its model calls.

    A turn is a step that no timestep or agent.act describes (an inline agent loop whose only
    targets are its model call and its env step): the observation is what the first call was
    asked, the action what the last one answered. Unless a span of the step set its flags or
    an env.step or tool consumed the answer, an answer cut at its length limit (finish reason
    ``length``) truncates the step and one that stopped by itself (``stop``) is a final
    answer: it terminates the step.
    """
    for step in steps:
        if not step.llm_calls:
            continue
        roles = parts.get(step.index, {})
        if sc.TIMESTEP in roles or sc.AGENT_ACT in roles:
            continue
        calls = step.llm_calls
        if raw_content(step, "observation") is None:
            step.observation = raw_content(calls[0], "input_messages")
        answered = [call for call in calls if raw_content(call, "output_messages") is not None]
        last = answered[-1] if answered else calls[-1]
        if raw_content(step, "action") is None:
            reply = _reply(last.output_messages)
            step.action = None if reply is None else RawJSON(dumps(reply))
        if sc.ENV_STEP in roles or step.tool_calls:
            continue  # the reply was consumed: the env or the tool says what came of it
        if any(key in r.attributes for r in roles.values() for key in _FLAG_KEYS):
            continue  # a span of the step set its flags
        reasons = last.finish_reasons or ()
        if "length" in reasons:
            step.truncated = True  # cut at its length limit
        elif list(reasons) == ["stop"]:
            step.terminated = True  # a final answer


def _reply(messages: Any) -> Any:
    """What a model answered: the first output message's text, else the message itself."""
    if not isinstance(messages, list) or not messages:
        return messages
    message = messages[0]
    if isinstance(message, dict):
        content = message.get("content")
        if content is not None and not message.get("tool_calls"):
            return content
    return message
