"""Anthropic's Messages API, read as the chat messages every other model call records.

A Messages request has a ``system`` prompt beside ``messages`` whose content is a list of
blocks: ``text``, ``tool_use`` (the assistant asks for a tool) and ``tool_result`` (the user
turn answers it). The answer is a ``message`` with such blocks and a ``stop_reason``. Read as
chat messages, a ``tool_use`` block is an assistant tool call (``id``, ``function.name``,
``function.arguments`` as JSON text) and a ``tool_result`` block a ``tool`` message with its
``tool_call_id``, so the assembler joins them as it joins OpenAI's; stop reasons become the
Chat Completions words (``end_turn`` is ``stop``, ``max_tokens`` is ``length``, ``tool_use`` is
``tool_calls``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["anthropic_messages", "anthropic_result", "is_anthropic_message"]

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
}


def is_anthropic_message(result: Any) -> bool:
    """Whether ``result`` is a Messages API answer (dict or SDK object)."""
    return _get(result, "type") == "message" and isinstance(_get(result, "content"), list)


def anthropic_messages(system: Any, messages: Any) -> list[dict[str, Any]]:
    """A Messages request's ``system`` and ``messages`` as chat messages."""
    out: list[dict[str, Any]] = []
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    elif isinstance(system, list):
        text = "".join(_get(block, "text") or "" for block in system)
        if text:
            out.append({"role": "system", "content": text})
    for message in messages if isinstance(messages, list) else ():
        role = _get(message, "role")
        content = _get(message, "content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        texts, tool_calls = [], []
        for block in content if isinstance(content, list) else ():
            kind = _get(block, "type")
            if kind == "text":
                texts.append(_get(block, "text") or "")
            elif kind == "tool_use":
                tool_calls.append(_tool_call(block))
            elif kind == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": _get(block, "tool_use_id"),
                        "content": _result_text(_get(block, "content")),
                    }
                )
        if texts or tool_calls or not content:
            message_out: dict[str, Any] = {"role": role, "content": "".join(texts) or None}
            if tool_calls:
                message_out["tool_calls"] = tool_calls
            out.append(message_out)
    return out


def anthropic_result(result: Any) -> dict[str, Any]:
    """``LLMCallScope.record`` keywords for a Messages API answer."""
    texts, tool_calls = [], []
    for block in _get(result, "content") or ():
        kind = _get(block, "type")
        if kind == "text":
            texts.append(_get(block, "text") or "")
        elif kind == "tool_use":
            tool_calls.append(_tool_call(block))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    fields: dict[str, Any] = {"output_messages": [message]}
    stop = _get(result, "stop_reason")
    if isinstance(stop, str):
        fields["finish_reasons"] = [STOP_REASONS.get(stop, stop)]
    usage = _get(result, "usage")
    for name, key in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens")):
        value = _get(usage, key)
        if isinstance(value, int) and not isinstance(value, bool):
            fields[name] = value
    for name, key in (("response_model", "model"), ("response_id", "id")):
        value = _get(result, key)
        if isinstance(value, str) and value:
            fields[name] = value
    return fields


def _tool_call(block: Any) -> dict[str, Any]:
    arguments = _get(block, "input")
    return {
        "id": _get(block, "id"),
        "type": "function",
        "function": {
            "name": _get(block, "name"),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def _result_text(content: Any) -> Any:
    """A tool_result's content: its text, or the blocks as they are when not all text."""
    if isinstance(content, list):
        if all(_get(block, "type") == "text" for block in content):
            return "".join(_get(block, "text") or "" for block in content)
        return content
    return content


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)
