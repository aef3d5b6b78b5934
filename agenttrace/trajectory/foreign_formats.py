"""Attributes of other tracing conventions, rewritten into agenttrace's (semconv).

A conventions rule (:mod:`agenttrace.trajectory.conventions`) says which role a foreign span
plays; when that role's data sits in a structured format of its own, one function here reads
it into the GenAI / ``rl.*`` attributes the assembler reads. One function per format and role:

* ``openinference`` (Arize OpenInference): ``llm.input_messages.{i}.message.*`` and
  ``llm.output_messages.*`` flattened messages (text ``content`` or ``contents.{j}`` parts,
  ``tool_calls.{j}.tool_call.*``), ``llm.tools.{i}.tool.json_schema``, ``llm.model_name``
  (the response's model), ``llm.invocation_parameters`` (JSON: the request's model and
  parameters), ``llm.token_count.*``, ``llm.finish_reason``; tool spans' ``tool.name``,
  ``input.value``, ``output.value`` (plain text when ``*.mime_type`` is ``text/plain``);
* ``traceloop`` (OpenLLMetry): tool spans' ``traceloop.entity.name/input/output`` (its model
  calls already use GenAI keys, read by :mod:`agenttrace.trajectory.genai`);
* ``agentlightning`` (Agent Lightning's annotation spans): ``agentlightning.reward.{i}.name``
  and ``.value`` pairs, the first the primary reward; each pair becomes one score (spans of
  versions before 0.3: a plain ``reward`` attribute).

Each returns the attributes to add (never overwriting what the span already has in
agenttrace's keys) or, for scores, the score attributes; values it cannot read are left out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.codec import json_or_text

Attributes = Mapping[str, Any]

_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# --- OpenInference ---------------------------------------------------------------------------

_OI_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_OI_TOOL_CALL = re.compile(r"^tool_calls\.(\d+)\.tool_call\.(.+)$")
_OI_CONTENT_PART = re.compile(r"^contents\.(\d+)\.message_content\.(.+)$")
_OI_TOOL_SCHEMA = re.compile(r"^llm\.tools\.(\d+)\.tool\.json_schema$")
#: At most this many messages, tool calls or tools are read from one span (indices beyond it
#: are ignored: nothing is allocated from a number a span claims).
_MAX_ITEMS = 4096
_OI_TEXT = "text/plain"
#: ``llm.invocation_parameters`` entries -> the GenAI request attribute each becomes.
_OI_PARAMETERS = (
    ("temperature", sc.GEN_AI_REQUEST_PARAMETERS["temperature"]),
    ("top_p", sc.GEN_AI_REQUEST_PARAMETERS["top_p"]),
    ("max_tokens", sc.GEN_AI_REQUEST_PARAMETERS["max_tokens"]),
    ("max_completion_tokens", sc.GEN_AI_REQUEST_PARAMETERS["max_tokens"]),
    ("seed", sc.GEN_AI_REQUEST_PARAMETERS["seed"]),
)


def _openinference_messages(attributes: Attributes) -> tuple[list[dict], list[dict]]:
    """The input and output messages of an OpenInference LLM span, OpenAI-style (``role``,
    ``content``: text, a list of parts or None, ``tool_calls``, ``tool_call_id``, ``name``)."""
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
        part = _OI_CONTENT_PART.match(field) if call is None else None
        if call is not None:
            if int(call[1]) < _MAX_ITEMS:
                entry = message.setdefault("tool_calls", {}).setdefault(int(call[1]), {})
                entry[call[2]] = value
        elif part is not None:
            if int(part[1]) < _MAX_ITEMS:
                message.setdefault("contents", {}).setdefault(int(part[1]), {})[part[2]] = value
        elif field in ("role", "content", "name", "tool_call_id"):
            message[field] = value
        elif field in ("function_call_name", "function_call_arguments_json"):
            message.setdefault("function_call", {})[field] = value
    sides = []
    for side in ("input", "output"):
        sides.append([_oi_message(message) for _, message in sorted(found[side].items())])
    return sides[0], sides[1]


#: Roles instrumented frameworks record that the model is sent as another chat role:
#: LangChain's message types (``human``, ``ai``) and smolagents' tool turns, which its models
#: send as ``assistant`` and ``user`` messages (smolagents' ``tool_role_conversions``).
_OI_ROLES = {
    "human": "user",
    "ai": "assistant",
    "tool-call": "assistant",
    "tool-response": "user",
}


def _oi_message(found: dict[str, Any]) -> dict[str, Any]:
    """One flattened message as an OpenAI-style message (``content`` always present)."""
    role = found.get("role")
    message: dict[str, Any] = {"role": _OI_ROLES.get(role, role) if isinstance(role, str) else role}
    parts = found.get("contents")
    if "content" in found or not parts:
        message["content"] = found.get("content")
    else:
        message["content"] = [_oi_content_part(part) for _, part in sorted(parts.items())]
    calls = found.get("tool_calls")
    if calls:
        message["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": call.get("function.name"),
                    "arguments": call.get("function.arguments", _no_arguments(call)),
                },
            }
            for _, call in sorted(calls.items())
        ]
    function_call = found.get("function_call")
    if function_call:
        message["function_call"] = {
            "name": function_call.get("function_call_name"),
            "arguments": function_call.get("function_call_arguments_json"),
        }
    for key in ("tool_call_id", "name"):
        if key in found:
            message[key] = found[key]
    return message


def _no_arguments(call: dict[str, Any]) -> str | None:
    """The arguments of a named tool call that records none: ``{}`` (OpenInference's
    LangChain instrumentor leaves out empty arguments), else None."""
    return "{}" if call.get("function.name") else None


def _oi_content_part(part: dict[str, Any]) -> dict[str, Any]:
    """A ``message_content`` part as an OpenAI content part (other kinds keep their keys)."""
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": part.get("text")}
    if kind == "image" and "image.image.url" in part:
        return {"type": "image_url", "image_url": {"url": part["image.image.url"]}}
    return dict(part)


def openinference_llm(attributes: Attributes) -> dict[str, Any]:
    """An OpenInference LLM span's call, in GenAI keys."""
    out: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_CHAT}
    inputs, outputs = _openinference_messages(attributes)
    if inputs:
        out[sc.GEN_AI_INPUT_MESSAGES] = _compact(inputs)
    if outputs:
        out[sc.GEN_AI_OUTPUT_MESSAGES] = _compact(outputs)
    tools = sorted(
        (int(match[1]), json_or_text(value))
        for key, value in attributes.items()
        if (match := _OI_TOOL_SCHEMA.match(key)) is not None and int(match[1]) < _MAX_ITEMS
    )
    if tools:
        out[sc.GEN_AI_TOOL_DEFINITIONS] = _compact([tool for _, tool in tools])
    parameters = json_or_text(attributes.get("llm.invocation_parameters"))
    if not isinstance(parameters, dict):
        parameters = {}
    # llm.model_name is the model that answered (OpenInference's OpenAI instrumentation takes
    # it from the response); the model asked for is in the invocation parameters.
    model = attributes.get("llm.response.model_name") or attributes.get("llm.model_name")
    if isinstance(model, str) and model:
        out[sc.GEN_AI_RESPONSE_MODEL] = model
    requested = attributes.get("llm.request.model_name") or parameters.get("model")
    if isinstance(requested, str) and requested:
        out[sc.GEN_AI_REQUEST_MODEL] = requested
    for name, ours in _OI_PARAMETERS:
        value = parameters.get(name)
        if _is_number(value) and ours not in out:
            out[ours] = value
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
    """An OpenInference TOOL span's call, in GenAI keys.

    ``input.value`` and ``output.value`` are text unless their mime type says JSON (no mime
    type is text, OpenInference's default, but for a JSON object or array, which its
    LangChain instrumentor leaves unmarked); text is kept as a JSON string, so ``42`` stays
    text. A value that is not text (a number an instrumentor set as it was) is kept as that
    value. Arguments recorded through a generic ``(*args, **kwargs)`` wrapper are unwrapped
    (:func:`_unwrapped_arguments`). A result that is a LangChain ``ToolMessage``, as the
    LangChain instrumentor records it, is that message's content, and its ``tool_call_id``
    is the call id.
    """
    out: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_EXECUTE_TOOL}
    for theirs, ours in (
        ("tool.name", sc.GEN_AI_TOOL_NAME),
        ("tool.id", sc.GEN_AI_TOOL_CALL_ID),
        ("tool_call.id", sc.GEN_AI_TOOL_CALL_ID),
    ):
        value = attributes.get(theirs)
        if isinstance(value, str) and value and ours not in out:
            out[ours] = value
    found, given = _oi_io_value(attributes, "input")
    if found:
        out[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = _compact(_unwrapped_arguments(given))
    found, result = _oi_io_value(attributes, "output")
    if found:
        message = _langchain_tool_message(result)
        if message is not None:
            result = message.get("content")
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id:
                out.setdefault(sc.GEN_AI_TOOL_CALL_ID, call_id)
        out[sc.GEN_AI_TOOL_CALL_RESULT] = _compact(result)
    return out


_OI_JSON = "application/json"


def _oi_io_value(attributes: Attributes, side: str) -> tuple[bool, Any]:
    """``(found, value)`` of ``input.value`` or ``output.value``, decoded when JSON."""
    value = attributes.get(f"{side}.value")
    if value is None:
        return False, None
    if isinstance(value, tuple):
        return True, list(value)
    if not isinstance(value, str):
        return True, value  # (a number or flag, set as it was)
    mime = attributes.get(f"{side}.mime_type")
    if mime == _OI_TEXT:
        return True, value
    stripped = value.strip()
    if mime == _OI_JSON or (stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]")):
        try:
            return True, json.loads(value)
        except (ValueError, RecursionError):
            return True, value
    return True, value


def _unwrapped_arguments(given: Any) -> Any:
    """The arguments a tool was called with, from a record of a generic wrapper's bound
    arguments ``{"args": [...], "kwargs": {...}}`` (OpenInference's ``@tracer.tool`` on a
    ``(*args, **kwargs)`` function, its smolagents instrumentor on ``Tool.__call__``, which
    also records the wrapper's own ``sanitize_inputs_outputs``): the keyword arguments; with
    none, the one positional argument (an arguments object, or a bare value), or the list of
    them; with both, the keyword arguments and the positional ones under ``args``. The
    wrapper's other parameters are its own options, not the tool's arguments. Anything else
    is as recorded."""
    if not (
        isinstance(given, dict)
        and isinstance(given.get("args"), list)
        and isinstance(given.get("kwargs"), dict)
    ):
        return given
    positional, named = given["args"], given["kwargs"]
    if not positional:
        return named
    if not named:
        return positional[0] if len(positional) == 1 else positional
    return {**named, "args": positional} if "args" not in named else given


def _langchain_tool_message(value: Any) -> dict[str, Any] | None:
    """The fields of a LangChain ``ToolMessage`` as OpenInference serialises one (``{"type":
    "tool", "data": {"content", "tool_call_id", ...}}``), else None."""
    if not isinstance(value, dict) or value.get("type") != "tool":
        return None
    data = value.get("data")
    if isinstance(data, dict) and "content" in data and "tool_call_id" in data:
        return data
    return None


# --- OpenLLMetry / Traceloop -----------------------------------------------------------------


def traceloop_tool(attributes: Attributes) -> dict[str, Any]:
    """A Traceloop ``tool`` span's call (``@tool`` of the traceloop SDK), in GenAI keys."""
    out: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_EXECUTE_TOOL}
    name = attributes.get("traceloop.entity.name")
    if isinstance(name, str) and name:
        out[sc.GEN_AI_TOOL_NAME] = name
    given = json_or_text(attributes.get("traceloop.entity.input"))
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
    it); the others keep their names. A span of the older single-value form (a number in
    ``reward``, as Agent Lightning 0.2 wrote it, or in ``agentlightning.reward``) gives one
    ``reward`` score. A value that is not a finite number is left out (a primary reward so left
    out gives no ``reward`` score; the other pairs still count).
    """
    pairs: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _AGL_REWARD.match(key)
        if match is not None and int(match[1]) < _MAX_ITEMS:
            pairs.setdefault(int(match[1]), {})[match[2]] = value
    if not pairs:  # before 0.3: one value, in ``reward`` (or ``agentlightning.reward``)
        single = attributes.get("reward", attributes.get("agentlightning.reward"))
        if _is_number(single):
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
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --- content, for the content policy ----------------------------------------------------------

#: Attributes of these formats that hold message or tool content (text the user's program
#: sent or got), whole: agenttrace's content policy applies to them as to GenAI content.
CONTENT_ATTRIBUTES = frozenset(
    {
        "input.value",
        "output.value",
        "llm.prompts",
        "llm.invocation_parameters",  # (may hold the request's messages)
        "traceloop.entity.input",
        "traceloop.entity.output",
    }
)
#: Flattened content: a key with one of these prefixes and one of the leaves after it.
CONTENT_PREFIXES = ("llm.input_messages.", "llm.output_messages.", "llm.tools.", "llm.prompts.")
CONTENT_LEAVES = (
    ".message.content",
    ".message_content.text",
    ".message_content.image.image.url",
    ".tool_call.function.arguments",
    ".message.function_call_arguments_json",
    ".tool.json_schema",
)


def is_content_key(key: str) -> bool:
    """Whether ``key`` holds content in one of these formats."""
    if key in CONTENT_ATTRIBUTES:
        return True
    return key.startswith(CONTENT_PREFIXES) and key.endswith(CONTENT_LEAVES)


#: Format name -> (role it reads, reader). ``agentlightning`` gives a list of scores.
FORMATS: dict[str, tuple[str, Callable[[Attributes], Any]]] = {
    "openinference.llm": ("llm", openinference_llm),
    "openinference.tool": ("tool", openinference_tool),
    "traceloop.tool": ("tool", traceloop_tool),
    "agentlightning.reward": ("score", agentlightning_scores),
}
