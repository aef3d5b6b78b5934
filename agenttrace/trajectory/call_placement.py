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
from agenttrace.trajectory.codec import RawJSON, dumps, json_or_text
from agenttrace.trajectory.model import Step, ToolCall, decoded_content, raw_content
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


def _outermost_same_call(
    record: SpanRecord, kind: str | None, by_span_id: Mapping[int, SpanRecord]
) -> SpanRecord:
    """The outermost span around ``record`` that records the same call (itself when none
    does): any enclosing model call for a model call; for a tool call, an enclosing tool
    call of the same tool (a tool that runs another tool is two calls)."""
    outer = record
    current = by_span_id.get(record.parent_span_id) if record.parent_span_id else None
    hops = 0
    while current is not None and hops < 256 and current.name not in _STEP_ROLES:
        if genai.call_kind(current) == kind and (
            kind == genai.MODEL_CALL or _tool_name(current) == _tool_name(record)
        ):
            outer = current
        current = by_span_id.get(current.parent_span_id) if current.parent_span_id else None
        hops += 1
    return outer


def _tool_name(record: SpanRecord) -> str:
    name = record.attributes.get(sc.GEN_AI_TOOL_NAME)
    return str(name) if name else record.name.partition(" ")[2]


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
    * one call seen by two instrumentations is one call (:func:`merge_same_calls`): a model
      call nested in another model call (openai-v2's span under agenttrace's ``llm_call``,
      agenttrace's target under pydantic-ai's ``chat`` span), and a tool call nested in a
      call of the same tool, fill what the outer one left empty;
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
        outer = _outermost_same_call(record, kind, by_span_id)
        if outer is not record:
            nested.setdefault(outer.span_id, []).append(record)
            continue
        calls.append((record, kind))  # type: ignore[arg-type]
    turn: Step | None = None  # the open turn made of calls after every step
    for record, kind in calls:
        index = step_index_of(record, by_span_id)
        for inner in nested.get(record.span_id, ()) if index is None else ():
            index = step_index_of(inner, by_span_id)  # (the inner record knew its step)
            if index is not None:
                break
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
        inner = nested.get(record.span_id, ())
        placed.update((r.span_id, index) for r in inner)
        step = by_index.get(index)
        if step is None:
            continue
        if kind == genai.TOOL_CALL:
            tool = genai.tool_call(record, trusted)
            genai.merge_tool_calls(tool, [genai.tool_call(r, trusted) for r in inner])
            step.tool_calls.append(tool)
            continue
        call = genai.llm_call(record, trusted)
        if inner:
            genai.merge_nested(call, [genai.llm_call(r, trusted) for r in inner])
        step.llm_calls.append(call)
    for step in steps:
        if step.tool_calls:
            merge_same_calls(step)
            recover_tool_call_ids(step)
            recover_tool_arguments(step)
    return placed


def merge_same_calls(step: Step) -> None:
    """Tool calls of one step with the same call id and name are one call seen twice (two
    instrumentations whose spans do not nest): the first keeps its place, filled from the
    others."""
    first: dict[tuple[str, str], ToolCall] = {}
    kept: list[ToolCall] = []
    for tool in step.tool_calls:
        key = (tool.call_id, tool.name)
        if tool.call_id and key in first:
            genai.merge_tool_calls(first[key], [tool])
            continue
        if tool.call_id:
            first[key] = tool
        kept.append(tool)
    step.tool_calls[:] = kept


def recover_tool_call_ids(step: Step) -> None:
    """A tool call recorded without its id (the traced tool method never got it) takes the
    id of the tool call the step's model reply asked for with the same name and arguments
    (by name alone when its arguments were not recorded or were recorded in another shape),
    if exactly one such request is not claimed by another tool call."""
    missing = [tool for tool in step.tool_calls if not tool.call_id]
    if not missing:
        return
    claimed = {tool.call_id for tool in step.tool_calls if tool.call_id}
    requests = [r for r in _requested_calls(step) if r[0] not in claimed]
    for tool in missing:
        arguments = _decoded_arguments(raw_content(tool, "arguments"))
        named = [r for r in requests if r[1] == tool.name]
        matches = [r for r in named if arguments is _UNKNOWN or r[2] == arguments]
        if not matches:  # arguments recorded another way (positional ones, say)
            matches = named
        if len(matches) == 1:
            tool.call_id = matches[0][0]
            requests.remove(matches[0])


def recover_tool_arguments(step: Step) -> None:
    """A tool call whose arguments were recorded without their names takes them from the
    request with its call id: OpenInference's LangChain instrumentor records a one-argument
    tool's text argument as that bare text, and a tool without arguments with none. So a
    bare value that is the one value of the requested arguments, or no arguments where the
    request has none, become the requested arguments object."""
    requests = {r[0]: r for r in _requested_calls(step)}
    for tool in step.tool_calls:
        request = requests.get(tool.call_id) if tool.call_id else None
        if request is None or request[1] != tool.name or not isinstance(request[2], dict):
            continue
        wanted = request[2]
        arguments = _decoded_arguments(raw_content(tool, "arguments"))
        if arguments is _UNKNOWN:
            nameless = not wanted  # (no arguments asked for, none recorded)
        else:
            nameless = not isinstance(arguments, (dict, list)) and [arguments] == [*wanted.values()]
        if nameless:
            tool.arguments = RawJSON(dumps(wanted))


_UNKNOWN = object()


def _requested_calls(step: Step) -> list[tuple[str, str, Any]]:
    """(id, name, decoded arguments) of every tool call the step's model replies asked for."""
    found = []
    for call in step.llm_calls:
        messages = call.output_messages
        if not isinstance(messages, list):
            continue
        for message in messages:
            requests = message.get("tool_calls") if isinstance(message, dict) else None
            for request in requests if isinstance(requests, list) else ():
                if not isinstance(request, dict) or not request.get("id"):
                    continue
                function = request.get("function")
                function = function if isinstance(function, dict) else request
                found.append(
                    (
                        str(request["id"]),
                        str(function.get("name")),
                        _decoded_arguments(function.get("arguments")),
                    )
                )
    return found


def _decoded_arguments(value: Any) -> Any:
    """Tool arguments as data (JSON text decoded), or _UNKNOWN when not recorded."""
    value = decoded_content(value)
    return _UNKNOWN if value is None else json_or_text(value)


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
        final, answer = final_answer_request(last.output_messages)
        if final and not any(key in r.attributes for r in roles.values() for key in _FLAG_KEYS):
            if raw_content(step, "action") is None:
                step.action = RawJSON(dumps(answer))  # (JSON as every content field)
            step.terminated = True  # a final answer given as a tool call
            continue
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


def final_answer_request(messages: Any) -> tuple[bool, Any]:
    """``(True, answer)`` for a reply whose only tool call is a final-answer tool
    (:func:`agenttrace.semconv.is_final_answer_tool`): its ``answer`` argument, else all its
    arguments; ``(False, None)`` for any other reply."""
    if not isinstance(messages, list) or len(messages) != 1 or not isinstance(messages[0], dict):
        return False, None
    requests = messages[0].get("tool_calls")
    if not isinstance(requests, list) or len(requests) != 1 or not isinstance(requests[0], dict):
        return False, None
    function = requests[0].get("function")
    function = function if isinstance(function, dict) else requests[0]
    if not sc.is_final_answer_tool(function.get("name")):
        return False, None
    arguments = _decoded_arguments(function.get("arguments"))
    if arguments is _UNKNOWN:
        return True, None
    if isinstance(arguments, dict) and "answer" in arguments:
        return True, arguments["answer"]
    return True, arguments


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
