"""Attributes of other tracing conventions, rewritten into agenttrace's (semconv).

A conventions rule (:mod:`agenttrace.trajectory.conventions`) says which role a foreign span
plays; when that role's data sits in a structured format of its own, one function here reads
it into the GenAI / ``rl.*`` attributes the assembler reads. One function per format and role:

* ``openinference`` (Arize OpenInference): ``llm.input_messages.{i}.message.*`` and
  ``llm.output_messages.*`` flattened messages, ``llm.tools.{i}.tool.json_schema``,
  ``llm.model_name``, ``llm.token_count.*``; tool spans' ``tool.name``, ``input.value``,
  ``output.value``;
* ``traceloop`` (OpenLLMetry): tool spans' ``traceloop.entity.name/input/output`` (its model
  calls already use GenAI keys, read by :mod:`agenttrace.trajectory.genai`);
* ``agentlightning`` (Agent Lightning's annotation spans): ``agentlightning.reward.{i}.name``
  and ``.value`` pairs, the first the primary reward; each pair becomes one score.

Each returns the attributes to add (never overwriting what the span already has in
agenttrace's keys) or, for scores, the score attributes; values it cannot read are left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from agenttrace import semconv as sc

Attributes = Mapping[str, Any]

_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# --- OpenInference ---------------------------------------------------------------------------

_OI_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_OI_TOOL_CALL = re.compile(r"^tool_calls\.(\d+)\.tool_call\.(.+)$")
_OI_TOOL_SCHEMA = re.compile(r"^llm\.tools\.(\d+)\.tool\.json_schema$")
#: At most this many messages, tool calls or tools are read from one span (indices beyond it
#: are ignored: nothing is allocated from a number a span claims).
_MAX_ITEMS = 4096


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _openinference_messages(attributes: Attributes) -> tuple[list[dict], list[dict]]:
    """The input and output messages of an OpenInference LLM span, OpenAI-style."""
    found: dict[str, dict[int, dict[str, Any]]] = {"input": {}, "output": {}}
    for key, value in attributes.items():
        match = _OI_MESSAGE.match(key)
        if match is None:
            continue
        side, index, field = match[1], int(match[2]), match[3]
        if index >= _MAX_ITEMS:
            continue
        message = found[side].setdefault(index, {})
        call = _OI_TOOL_CALL.match(field)
        if call is not None:
            call_index = int(call[1])
            if call_index >= _MAX_ITEMS:
                continue
            calls = message.setdefault("tool_calls", {})
            entry = calls.setdefault(call_index, {"type": "function", "function": {}})
            if call[2] == "id":
                entry["id"] = value
            elif call[2] == "function.name":
                entry["function"]["name"] = value
            elif call[2] == "function.arguments":
                entry["function"]["arguments"] = value
        elif field == "role":
            message["role"] = value
        elif field == "content":
            message["content"] = value
        elif field == "name":
            message["name"] = value
        elif field == "tool_call_id":
            message["tool_call_id"] = value
    sides = []
    for side in ("input", "output"):
        messages = []
        for _, message in sorted(found[side].items()):
            calls = message.pop("tool_calls", None)
            if calls:
                message["tool_calls"] = [call for _, call in sorted(calls.items())]
            messages.append(message)
        sides.append(messages)
    return sides[0], sides[1]


def openinference_llm(attributes: Attributes) -> dict[str, Any]:
    """An OpenInference LLM span's call, in GenAI keys."""
    out: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_CHAT}
    inputs, outputs = _openinference_messages(attributes)
    if inputs:
        out[sc.GEN_AI_INPUT_MESSAGES] = _compact(inputs)
    if outputs:
        out[sc.GEN_AI_OUTPUT_MESSAGES] = _compact(outputs)
    tools = sorted(
        (int(match[1]), _json_or_text(value))
        for key, value in attributes.items()
        if (match := _OI_TOOL_SCHEMA.match(key)) is not None and int(match[1]) < _MAX_ITEMS
    )
    if tools:
        out[sc.GEN_AI_TOOL_DEFINITIONS] = _compact([tool for _, tool in tools])
    model = attributes.get("llm.response.model_name") or attributes.get("llm.model_name")
    if isinstance(model, str) and model:
        out[sc.GEN_AI_RESPONSE_MODEL] = model
    requested = attributes.get("llm.request.model_name") or attributes.get("llm.model_name")
    if isinstance(requested, str) and requested:
        out[sc.GEN_AI_REQUEST_MODEL] = requested
    provider = attributes.get("llm.provider") or attributes.get("llm.system")
    if isinstance(provider, str) and provider:
        out[sc.GEN_AI_PROVIDER_NAME] = provider
    for key, ours in (
        ("llm.token_count.prompt", sc.GEN_AI_USAGE_INPUT_TOKENS),
        ("llm.token_count.completion", sc.GEN_AI_USAGE_OUTPUT_TOKENS),
    ):
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[ours] = value
    reason = attributes.get("llm.finish_reason")
    if isinstance(reason, str) and reason:
        out[sc.GEN_AI_RESPONSE_FINISH_REASONS] = (reason,)
    return out


def openinference_tool(attributes: Attributes) -> dict[str, Any]:
    """An OpenInference TOOL span's call, in GenAI keys."""
    out: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_EXECUTE_TOOL}
    for theirs, ours in (
        ("tool.name", sc.GEN_AI_TOOL_NAME),
        ("tool.id", sc.GEN_AI_TOOL_CALL_ID),
        ("tool_call.id", sc.GEN_AI_TOOL_CALL_ID),
        ("input.value", sc.GEN_AI_TOOL_CALL_ARGUMENTS),
        ("output.value", sc.GEN_AI_TOOL_CALL_RESULT),
    ):
        value = attributes.get(theirs)
        if isinstance(value, str) and ours not in out:
            out[ours] = value
    return out


# --- OpenLLMetry / Traceloop -----------------------------------------------------------------


def traceloop_tool(attributes: Attributes) -> dict[str, Any]:
    """A Traceloop ``tool`` span's call (``@tool`` of the traceloop SDK), in GenAI keys."""
    out: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_EXECUTE_TOOL}
    name = attributes.get("traceloop.entity.name")
    if isinstance(name, str) and name:
        out[sc.GEN_AI_TOOL_NAME] = name
    given = _json_or_text(attributes.get("traceloop.entity.input"))
    if isinstance(given, dict) and isinstance(given.get("kwargs"), dict) and not given.get("args"):
        given = given["kwargs"]  # the SDK records {"args": [...], "kwargs": {...}}
    if given is not None:
        out[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = given if isinstance(given, str) else _compact(given)
    result = attributes.get("traceloop.entity.output")
    if isinstance(result, str):
        out[sc.GEN_AI_TOOL_CALL_RESULT] = result
    return out


# --- Agent Lightning ---------------------------------------------------------------------------

_AGL_REWARD = re.compile(r"^agentlightning\.reward\.(\d+)\.(name|value)$")


def agentlightning_scores(attributes: Attributes) -> list[dict[str, Any]]:
    """The named rewards of an Agent Lightning annotation span, as score attributes.

    The first pair is the primary reward: it becomes the score ``reward`` (added to the
    reward of the episode's last step, as Agent Lightning's own ``find_final_reward`` reads
    it); the others keep their names. A span of the older single-value form
    (``agentlightning.reward`` = a number) gives one ``reward`` score.
    """
    pairs: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _AGL_REWARD.match(key)
        if match is not None and int(match[1]) < _MAX_ITEMS:
            pairs.setdefault(int(match[1]), {})[match[2]] = value
    single = attributes.get("agentlightning.reward")
    if not pairs and _is_number(single):
        pairs[0] = {"name": "primary", "value": single}
    scores = []
    for position, (_, pair) in enumerate(sorted(pairs.items())):
        value = pair.get("value")
        if not _is_number(value):
            continue
        name = "reward" if position == 0 else str(pair.get("name") or f"reward.{position}")
        scores.append({sc.SCORE_NAME: name, sc.SCORE_VALUE: float(value)})
        if position == 0 and pair.get("name") not in (None, "", "primary"):
            scores[-1][sc.SCORE_COMMENT] = str(pair["name"])
    return scores


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Format name -> (role it reads, reader). ``agentlightning`` gives a list of scores.
FORMATS: dict[str, tuple[str, Callable[[Attributes], Any]]] = {
    "openinference.llm": ("llm", openinference_llm),
    "openinference.tool": ("tool", openinference_tool),
    "traceloop.tool": ("tool", traceloop_tool),
    "agentlightning.reward": ("score", agentlightning_scores),
}
