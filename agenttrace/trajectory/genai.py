"""GenAI spans -> :class:`LLMCall` / :class:`ToolCall`, whichever instrumentation wrote them.

The assembler folds every GenAI span inside an episode into its step; this module reads one
span into one call. Spans come in several formats (docs/llm-calls.md): agenttrace's own
``llm_call``, the current GenAI conventions (``gen_ai.input.messages`` in the "parts" message
format, as opentelemetry-instrumentation-openai-v2 writes it), and older ones still emitted by
other instrumentations (``gen_ai.content.prompt`` events, per-message events, OpenLLMetry's
flattened ``gen_ai.prompt.{i}.*`` attributes, ``gen_ai.system``, ``gen_ai.usage.prompt_tokens``).

Messages come out in one shape, OpenAI-style chat messages (``role``, ``content``,
``tool_calls``, ``tool_call_id``), so a training pipeline reads the same fields whoever
recorded the call. Messages that are not in a known format are kept exactly as recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.codec import (
    RawJSON,
    ValueDecodeError,
    as_raw_json,
    json_or_text,
    loads,
    parse_json,
)
from agenttrace.trajectory.model import LLMCall, ToolCall, decoded_content
from agenttrace.trajectory.records import SpanEvent, SpanRecord

MODEL_CALL = "model"
TOOL_CALL = "tool"

_PROMPT_PREFIX = sc.GEN_AI_PROMPT + "."
_COMPLETION_PREFIX = sc.GEN_AI_COMPLETION + "."
_MISSING = object()
_I64 = 2**63 - 1
_compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def call_kind(record: SpanRecord) -> str | None:
    """:data:`MODEL_CALL`, :data:`TOOL_CALL`, or None for spans that are neither.

    ``gen_ai.operation.name`` decides when present: chat, text_completion and
    generate_content are model calls, execute_tool is a tool call, anything else
    (embeddings, invoke_agent, ...) is not folded. Without it, OpenLLMetry's
    ``llm.request.type`` or the span name (``chat …`` / ``execute_tool …``) decide.
    """
    attrs = record.attributes
    operation = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if isinstance(operation, str):
        if operation in sc.GEN_AI_MODEL_OPERATIONS:
            return MODEL_CALL
        return TOOL_CALL if operation == sc.GEN_AI_OPERATION_EXECUTE_TOOL else None
    if attrs.get(sc.LLM_REQUEST_TYPE) in sc.LLM_REQUEST_TYPES_MODEL:
        return MODEL_CALL
    name = record.name
    if name.startswith(sc.GEN_AI_OPERATION_EXECUTE_TOOL + " "):
        return TOOL_CALL
    if name.startswith(sc.GEN_AI_OPERATION_CHAT + " "):
        return MODEL_CALL
    return None


# --- model calls ----------------------------------------------------------------------------

# Attributes that become LLMCall fields (or message content) rather than `attributes`.
_LLM_FIELDS = frozenset(
    {
        sc.GEN_AI_OPERATION_NAME,
        sc.GEN_AI_RESPONSE_MODEL,
        sc.GEN_AI_PROVIDER_NAME,
        sc.GEN_AI_SYSTEM,
        sc.GEN_AI_INPUT_MESSAGES,
        sc.GEN_AI_OUTPUT_MESSAGES,
        sc.GEN_AI_SYSTEM_INSTRUCTIONS,
        sc.GEN_AI_RESPONSE_FINISH_REASONS,
        sc.GEN_AI_USAGE_INPUT_TOKENS,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS,
        sc.GEN_AI_USAGE_PROMPT_TOKENS,
        sc.GEN_AI_USAGE_COMPLETION_TOKENS,
    }
)
# Filled from a nested model-call span when the outer one left them empty.
_FILLABLE = (
    "model",
    "provider",
    "input_messages",
    "output_messages",
    "finish_reasons",
    "input_tokens",
    "output_tokens",
    "prompt_token_ids",
    "completion_token_ids",
    "completion_logprobs",
)


def llm_call(record: SpanRecord, trusted: str | None) -> LLMCall:
    """One model-call span as an LLMCall (content decoded only where it must be converted)."""
    attrs = record.attributes
    own = trusted is not None and record.scope_name == trusted
    input_messages = _input_messages(record, own)
    output_messages, output_reasons = _output_messages(record, own)
    finish = attrs.get(sc.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(finish, (list, tuple)) and finish:
        finish_reasons: list[str] | None = [chat_finish_reason(reason) for reason in finish]
    else:
        finish_reasons = [chat_finish_reason(r) for r in output_reasons] or None
    model = attrs.get(sc.GEN_AI_RESPONSE_MODEL) or attrs.get(sc.GEN_AI_REQUEST_MODEL)
    provider = attrs.get(sc.GEN_AI_PROVIDER_NAME) or attrs.get(sc.GEN_AI_SYSTEM)
    return LLMCall(
        name=record.name,
        model=None if model is None else str(model),
        provider=None if provider is None else str(provider),
        input_messages=input_messages,
        output_messages=output_messages,
        finish_reasons=finish_reasons,
        input_tokens=_int(attrs, sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_PROMPT_TOKENS),
        output_tokens=_int(attrs, sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_COMPLETION_TOKENS),
        start_time=record.start_time,
        end_time=record.end_time,
        error=error_text(record),
        attributes=_other_attributes(attrs),
        prompt_token_ids=_numbers(attrs.get(sc.LLM_PROMPT_TOKEN_IDS), int),
        completion_token_ids=_numbers(attrs.get(sc.LLM_COMPLETION_TOKEN_IDS), int),
        completion_logprobs=_numbers(attrs.get(sc.LLM_COMPLETION_LOGPROBS), float),
        tokens_cut=attrs.get(sc.LLM_TOKENS_CUT) is True,
    )


#: GenAI semconv finish reasons whose Chat Completions word differs (the rest are alike:
#: stop, length, content_filter, error). One call seen by pydantic-ai ("tool_call") and by
#: the OpenAI client ("tool_calls") so reads the same.
_CHAT_FINISH_REASONS = {"tool_call": "tool_calls"}


def chat_finish_reason(reason: Any) -> str:
    """A finish reason in the Chat Completions words that trajectories use."""
    text = str(reason)
    return _CHAT_FINISH_REASONS.get(text, text)


def _numbers(value: Any, kind: type) -> list[Any] | None:
    """A list attribute of token ids (``int``) or logprobs (``float``); None when absent or
    not such a list (a store that turned it into JSON text is read back too)."""
    if isinstance(value, str) and value.startswith("["):
        try:
            value = parse_json(value)
        except ValueError:
            return None
    if not isinstance(value, (list, tuple)):
        return None
    if kind is int:  # (token ids: int64, as a trajectory holds them)
        return list(value) if all(type(v) is int and _I64 >= v >= -_I64 for v in value) else None
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        try:
            numbers = [float(v) for v in value]
        except OverflowError:  # an integer no float holds: not a logprob
            return None
        return numbers if all(math.isfinite(v) for v in numbers) else None
    return None


def merge_nested(outer: LLMCall, nested: Iterable[LLMCall]) -> LLMCall:
    """Fold records of the same model call into ``outer``: one call, counted once.

    Two instrumentations that see one call (agenttrace's target and a framework's own GenAI
    span, or two instrumentors of one client) nest their spans. The messages come from the
    fullest record (most messages, contents and tool calls; the outer one on a tie), since
    one instrumentation may leave out what the other kept; every other field is the outer
    call's, and each one it left empty is taken from the latest nested call that has it.
    Name, times and error stay the outer call's.
    """
    inners = sorted(nested, key=lambda call: call.start_time or 0, reverse=True)
    for name in ("input_messages", "output_messages"):
        fullest = max([outer, *inners], key=lambda call: _fullness(getattr(call, name)))
        if fullest is not outer:
            setattr(outer, name, getattr(fullest, name))
    for inner in inners:
        for name in _FILLABLE:
            if getattr(outer, name) is None:
                value = getattr(inner, name)
                if value is not None:
                    setattr(outer, name, value)
        for key, value in inner.attributes.items():
            outer.attributes.setdefault(key, value)
    return outer


def merge_tool_calls(outer: ToolCall, others: Iterable[ToolCall]) -> ToolCall:
    """Fold other records of the same tool call into ``outer``: each field it left empty
    (call id, arguments, result, error) is taken from the first other record that has it."""
    for other in others:
        for name in ("call_id", "arguments", "result", "error"):
            if getattr(outer, name) in (None, "") and getattr(other, name) not in (None, ""):
                setattr(outer, name, getattr(other, name))
    return outer


def _fullness(messages: Any) -> int:
    """How much a message list holds: messages, non-empty contents and tool calls."""
    messages = decoded_content(messages)
    if not isinstance(messages, list):
        return 0 if messages is None else 1
    score = 0
    for message in messages:
        score += 1
        if isinstance(message, dict):
            score += message.get("content") not in (None, "", [])
            calls = message.get("tool_calls")
            score += len(calls) if isinstance(calls, list) else 0
    return score


def _int(attrs: Mapping[str, Any], key: str, old_key: str) -> int | None:
    value = attrs.get(key, attrs.get(old_key))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    value = int(value)
    return value if -_I64 <= value <= _I64 else None  # (a trajectory's counts are int64)


def _other_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The span's other ``gen_ai.*`` attributes; tool definitions decoded from JSON."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if (
            not key.startswith("gen_ai.")
            or key in _LLM_FIELDS
            or key.startswith(_PROMPT_PREFIX)
            or key.startswith(_COMPLETION_PREFIX)
        ):
            continue
        if key == sc.GEN_AI_TOOL_DEFINITIONS:
            if isinstance(value, str):
                value = json_or_text(value)
            if isinstance(value, list):
                value = [chat_tool_definition(tool) for tool in value]
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def chat_tool_definition(tool: Any) -> Any:
    """A function tool in the Chat Completions shape (``{"type": "function", "function":
    {name, description, parameters}}``), whether it was given so or flat (the Responses API's
    and the GenAI conventions' shape, which pydantic-ai records); other tools as they are."""
    if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    return tool


# --- where messages are found -----------------------------------------------------------------


def _input_messages(record: SpanRecord, own: bool) -> Any:
    attrs = record.attributes
    messages = _content_value(attrs, sc.GEN_AI_INPUT_MESSAGES, own)
    if messages is _MISSING:
        messages = _details_event_value(record.events, sc.GEN_AI_INPUT_MESSAGES)
    if messages is _MISSING:
        messages = _event_value(record.events, sc.GEN_AI_CONTENT_PROMPT_EVENT, sc.GEN_AI_PROMPT)
    if messages is _MISSING:
        messages = _message_events(record.events) or _MISSING
    if messages is _MISSING:
        messages = _flattened(attrs, _PROMPT_PREFIX)[0] or _MISSING
    system = _content_value(attrs, sc.GEN_AI_SYSTEM_INSTRUCTIONS, own)
    if system is _MISSING:
        system = _details_event_value(record.events, sc.GEN_AI_SYSTEM_INSTRUCTIONS)
    if system is not _MISSING:
        messages = _with_system_instructions(messages, system)
    return None if messages is _MISSING else messages


def _output_messages(record: SpanRecord, own: bool) -> tuple[Any, list[str]]:
    """Output messages and the finish reasons found with them (for spans lacking the key)."""
    attrs = record.attributes
    value = _content_value(attrs, sc.GEN_AI_OUTPUT_MESSAGES, own, keep_reasons=True)
    if value is _MISSING:
        value = _details_event_value(record.events, sc.GEN_AI_OUTPUT_MESSAGES, keep_reasons=True)
    if value is _MISSING:
        value = _event_value(
            record.events, sc.GEN_AI_CONTENT_COMPLETION_EVENT, sc.GEN_AI_COMPLETION
        )
    if value is not _MISSING:
        if type(value) is _Converted:
            return value.messages, value.finish_reasons
        return value, []
    messages, reasons = _choice_events(record.events)
    if messages:
        return messages, reasons
    messages, reasons = _flattened(attrs, _COMPLETION_PREFIX, "assistant")
    return (messages or None), reasons


class _Converted:
    """Output messages converted from the parts format, with their finish reasons."""

    __slots__ = ("finish_reasons", "messages")

    def __init__(self, messages: list[dict], finish_reasons: list[str]) -> None:
        self.messages = messages
        self.finish_reasons = finish_reasons


def _content_value(
    attrs: Mapping[str, Any], key: str, own: bool, *, keep_reasons: bool = False
) -> Any:
    """A message attribute: raw JSON text kept lazy, parts-format messages converted."""
    value = attrs.get(key, _MISSING)
    if value is _MISSING:
        return value
    if isinstance(value, str):
        value = as_raw_json(value, trusted=own)
        if type(value) is not RawJSON or '"parts"' not in value:
            return value  # not the parts format: kept as recorded, decoded when read
        value = _decoded(value)
    elif isinstance(value, (tuple, list)):
        value = _json_items(value)
    return _converted(value, keep_reasons)


def _json_items(items: tuple | list) -> list:
    """An attribute array of JSON texts (one message each, as some SDKs record) as values."""
    if items and all(isinstance(item, str) for item in items):
        parsed = [json_or_text(item) for item in items]
        if all(isinstance(item, dict) for item in parsed):
            return parsed
    return list(items)


def _details_event_value(
    events: Iterable[SpanEvent], key: str, *, keep_reasons: bool = False
) -> Any:
    for event in events:
        if event.name == sc.GEN_AI_INFERENCE_DETAILS_EVENT and key in event.attributes:
            return _content_value(event.attributes, key, False, keep_reasons=keep_reasons)
    return _MISSING


def _event_value(events: Iterable[SpanEvent], name: str, key: str) -> Any:
    for event in events:
        if event.name == name and key in event.attributes:
            value = event.attributes[key]
            if isinstance(value, str):
                value = json_or_text(value)
            return _converted(value, False)
    return _MISSING


def _converted(value: Any, keep_reasons: bool) -> Any:
    if not is_parts_format(value):
        return value
    messages = openai_messages(value)
    if not keep_reasons:
        return messages
    reasons = [str(m["finish_reason"]) for m in value if m.get("finish_reason") is not None]
    return _Converted(messages, reasons)


def _decoded(text: RawJSON) -> Any:
    try:
        return loads(text)
    except ValueDecodeError:  # valid JSON whose "$..." keys are not agenttrace's tags
        return parse_json(text)


def _with_system_instructions(messages: Any, system: Any) -> Any:
    """``gen_ai.system_instructions`` (a list of parts) as a leading system message."""
    if type(system) is RawJSON:
        system = _decoded(system)
    if isinstance(system, list) and all(isinstance(part, dict) for part in system):
        content = _content_of(system)
    else:
        content = system
    head = [{"role": "system", "content": content}]
    if messages is _MISSING:
        return head
    if type(messages) is RawJSON:
        messages = _decoded(messages)
    return head + messages if isinstance(messages, list) else [*head, messages]


# --- the GenAI "parts" message format -> OpenAI-style chat messages ---------------------------


def is_parts_format(value: Any) -> bool:
    """Whether ``value`` is a list of GenAI messages (``{"role", "parts": [...]}``)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict) and isinstance(m.get("parts"), list) and "content" not in m
            for m in value
        )
    )


def openai_messages(messages: list[dict]) -> list[dict]:
    """GenAI parts-format messages as OpenAI-style chat messages, losing nothing.

    text parts -> ``content`` (a string for one part, else ``[{"type": "text", "text"}]``);
    tool_call parts -> ``tool_calls`` (``arguments`` as JSON text); each tool_call_response
    part -> a ``{"role": "tool", "tool_call_id", "content"}`` message; reasoning parts ->
    ``reasoning_content``. Other parts (blob, uri, file, ...) stay in the ``content`` list
    as recorded, and so do unknown message keys; ``finish_reason`` moves to the call's
    ``finish_reasons``.
    """
    out: list[dict] = []
    for message in messages:
        parts = message["parts"]
        body = [p for p in parts if not _is_part(p, "tool_call_response")]
        responses = [p for p in parts if _is_part(p, "tool_call_response")]
        if body or not responses:
            converted: dict[str, Any] = {"role": message.get("role")}
            converted["content"] = _content_of(
                [p for p in body if not _is_part(p, "tool_call") and not _is_part(p, "reasoning")]
            )
            calls = [_tool_call_request(p) for p in body if _is_part(p, "tool_call")]
            if calls:
                converted["tool_calls"] = calls
            reasoning = [str(p.get("content", "")) for p in body if _is_part(p, "reasoning")]
            if reasoning:
                converted["reasoning_content"] = "".join(reasoning)
            for key, value in message.items():
                if key not in ("role", "parts", "finish_reason") and key not in converted:
                    converted[key] = value
            out.append(converted)
        for part in responses:
            # (GenAI semconv names the result "response"; pydantic-ai writes "result")
            content = part.get("response", part.get("result"))
            out.append({"role": "tool", "tool_call_id": part.get("id"), "content": content})
    return out


def _is_part(part: Any, kind: str) -> bool:
    return isinstance(part, dict) and part.get("type") == kind


def _content_of(parts: list) -> Any:
    """Message content from non-tool parts: None, one string, or a list of content parts."""
    if not parts:
        return None
    if len(parts) == 1 and _is_part(parts[0], "text"):
        return parts[0].get("content")
    return [{"type": "text", "text": p.get("content")} if _is_part(p, "text") else p for p in parts]


def _tool_call_request(part: dict) -> dict:
    arguments = part.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        arguments = _compact_json(arguments)
    return {
        "id": part.get("id"),
        "type": "function",
        "function": {"name": part.get("name"), "arguments": arguments},
    }


# --- older formats ----------------------------------------------------------------------------


def _message_events(events: Iterable[SpanEvent]) -> list[dict]:
    """Semantic conventions 1.28-1.36 message events recorded as span events."""
    messages = []
    for event in events:
        role = sc.GEN_AI_MESSAGE_EVENT_ROLES.get(event.name)
        if role is not None:
            body = _event_body(event)
            messages.append(_chat_message(body, role))
    return messages


def _choice_events(events: Iterable[SpanEvent]) -> tuple[list[dict], list[str]]:
    choices = []
    for event in events:
        if event.name == sc.GEN_AI_CHOICE_EVENT:
            body = _event_body(event)
            message = body.get("message")
            message = dict(message) if isinstance(message, dict) else {}
            if "tool_calls" in body and "tool_calls" not in message:
                message["tool_calls"] = body["tool_calls"]
            index = body.get("index")
            choices.append(
                (
                    index if isinstance(index, int) else len(choices),
                    _chat_message(message, "assistant"),
                    body.get("finish_reason"),
                )
            )
    choices.sort(key=lambda choice: choice[0])
    reasons = [str(reason) for _, _, reason in choices if reason is not None]
    return [message for _, message, _ in choices], reasons


def _event_body(event: SpanEvent) -> dict:
    """The event's body: JSON in ``gen_ai.event.content``, else its non-gen_ai attributes."""
    content = event.attributes.get(sc.GEN_AI_EVENT_CONTENT)
    if isinstance(content, str):
        parsed = json_or_text(content)
        return parsed if isinstance(parsed, dict) else {"content": parsed}
    return {k: v for k, v in event.attributes.items() if not k.startswith("gen_ai.")}


def _chat_message(body: Mapping[str, Any], role: str) -> dict:
    message: dict[str, Any] = {"role": body.get("role") or role, "content": body.get("content")}
    calls = body.get("tool_calls")
    if isinstance(calls, (list, tuple)) and calls:
        message["tool_calls"] = [_chat_tool_call(call) for call in calls]
    if message["role"] == "tool" and body.get("id") is not None:
        message["tool_call_id"] = body["id"]
    return message


def _chat_tool_call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    if isinstance(function, dict):
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            function = {**function, "arguments": _compact_json(arguments)}
    return {"id": call.get("id"), "type": call.get("type") or "function", "function": function}


def _flattened(
    attrs: Mapping[str, Any], prefix: str, role: str | None = None
) -> tuple[list[dict], list[str]]:
    """OpenLLMetry's ``gen_ai.prompt.{i}.role`` / ``.content`` / ``.tool_calls.{j}.name`` ..."""
    messages: dict[int, dict[str, Any]] = {}
    calls: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, field = key[len(prefix) :].partition(".")
        if not index.isdigit() or not field:
            continue
        message = messages.setdefault(int(index), {})
        if field.startswith("tool_calls."):
            number, _, name = field[len("tool_calls.") :].partition(".")
            if number.isdigit() and name:
                calls.setdefault((int(index), int(number)), {})[name] = value
        else:
            message[field] = value
    for (index, _), call in sorted(calls.items()):
        messages[index].setdefault("tool_calls", []).append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("arguments")},
            }
        )
    out, reasons = [], []
    for index in sorted(messages):
        message = messages[index]
        reason = message.pop("finish_reason", None)
        if reason is not None:
            reasons.append(str(reason))
        if role is not None:
            message.setdefault("role", role)
        message.setdefault("content", None)
        out.append(message)
    return out, reasons


# --- tool calls and errors --------------------------------------------------------------------


def tool_call(record: SpanRecord, trusted: str | None) -> ToolCall:
    """One ``execute_tool`` span as a ToolCall."""
    attrs = record.attributes
    own = trusted is not None and record.scope_name == trusted
    name = attrs.get(sc.GEN_AI_TOOL_NAME) or record.name.partition(" ")[2] or record.name
    return ToolCall(
        name=str(name),
        call_id=attrs.get(sc.GEN_AI_TOOL_CALL_ID),
        arguments=_raw_or_none(attrs, sc.GEN_AI_TOOL_CALL_ARGUMENTS, own),
        result=_raw_or_none(attrs, sc.GEN_AI_TOOL_CALL_RESULT, own),
        start_time=record.start_time,
        end_time=record.end_time,
        error=error_text(record),
    )


def _raw_or_none(attrs: Mapping[str, Any], key: str, own: bool) -> Any:
    value = attrs.get(key)
    if isinstance(value, str):
        return as_raw_json(value, trusted=own)
    return list(value) if isinstance(value, tuple) else value


def error_text(record: SpanRecord) -> str | None:
    """``"Type: message"`` of a failed span (from its exception event), else None."""
    if record.status_code != "ERROR":
        return None
    for event in record.events:
        if event.name == sc.EXCEPTION_EVENT:
            kind = event.attributes.get(sc.EXCEPTION_TYPE)
            message = event.attributes.get(sc.EXCEPTION_MESSAGE)
            return f"{kind}: {message}" if kind else str(message)
    return record.status_message or "error"
