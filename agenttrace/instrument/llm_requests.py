"""What a model call was asked, read from its arguments into the fields of its ``llm`` span.

An ``llm`` target records the request from the call's arguments. Chat Completions calls name
it ``messages=`` (or a runner's ``prompt=``), already OpenAI-style chat messages. The OpenAI
Responses API names it ``instructions=`` and ``input=``: text, or a list of *items* (messages
with ``input_text`` parts, the model's earlier ``function_call`` items, their
``function_call_output`` items, ``reasoning`` items, ...). Those are converted into the
OpenAI-style chat messages every trajectory holds, so one reader (a trainer's chat template,
``agenttrace export --format chat``) serves both APIs:

* ``instructions`` -> a leading ``{"role": "system", "content": ...}`` message;
* ``input`` text -> one user message;
* a message item -> ``{"role", "content"}`` (one text part as text; several parts as a list
  of chat content parts; ``developer`` and ``system`` roles kept);
* ``function_call`` items -> ``tool_calls`` of an assistant message; consecutive ones, and
  those right after the assistant's own message, join that one message (one model reply);
* ``function_call_output`` -> ``{"role": "tool", "tool_call_id": call_id, "content": output}``;
* ``reasoning`` items -> ``reasoning_content`` of the assistant message they precede (their
  summary and text; encrypted-only reasoning gives nothing);
* any other item (``item_reference``, hosted tool calls, ...) is kept as it was given.

Tool definitions of the Responses API shape (``{"type": "function", "name", "description",
"parameters"}``) become the Chat Completions shape (``{"type": "function", "function":
{...}}``), so ``gen_ai.tool.definitions`` has one shape whichever API offered the tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from agenttrace import semconv as sc
from agenttrace.instrument.extractors import _UNSET
from agenttrace.instrument.llm_anthropic import anthropic_messages
from agenttrace.instrument.llm_results import _get, _is_list, message_dict, reasoning_texts
from agenttrace.trajectory.genai import chat_tool_definition

#: Content parts that are text, in either direction.
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
#: Item types of the model's own tool calls and of their results.
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})


def read_request(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``LLMCallScope.record`` keywords for the request among a call's arguments (by name):
    ``input_messages`` and ``tool_definitions``, each only when the call gave it."""
    fields: dict[str, Any] = {}
    messages = given(arguments.get("messages", _UNSET))
    if _has_blocks(messages):  # the Anthropic Messages API's (its system prompt with it)
        system = given(arguments.get("system", _UNSET))
        messages = anthropic_messages(system if _present(system) else None, messages)
    if messages is _UNSET:
        instructions = given(arguments.get("instructions", _UNSET))
        items = given(arguments.get("input", _UNSET))
        if _present(instructions) or _present(items):
            messages = responses_messages(instructions, items)
        else:
            messages = given(arguments.get("prompt", _UNSET))
    if messages is not _UNSET:
        fields["input_messages"] = as_sent(messages)
    tools = given(arguments.get("tools", _UNSET))
    if _present(tools):
        fields["tool_definitions"] = chat_tools(tools)
    return fields


#: Other APIs' names of a request parameter: the Responses API's ``max_output_tokens`` and
#: Chat Completions' newer ``max_completion_tokens`` are ``max_tokens``.
_PARAMETER_ALIASES = {"max_tokens": ("max_output_tokens", "max_completion_tokens")}


def request_parameters(arguments: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric request parameters among a call's arguments, by attribute
    (``gen_ai.request.temperature``, ``...max_tokens``, ...)."""
    found: dict[str, int | float] = {}
    for name, key in sc.GEN_AI_REQUEST_PARAMETERS.items():
        for alias in (name, *_PARAMETER_ALIASES.get(name, ())):
            value = arguments.get(alias)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[key] = value
                break
    return found


def _has_blocks(messages: Any) -> bool:
    """Whether messages carry Anthropic's tool blocks (``tool_use``, ``tool_result``), which
    only the Messages API sends."""
    if not _is_list(messages):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result")
            for block in content
        ):
            return True
    return False


def _present(value: Any) -> bool:
    return value is not _UNSET and value is not None


def as_sent(value: Any) -> Any:
    """Messages as the client sends them: enum members that are text or numbers (a
    framework's ``MessageRole.USER``, a ``str`` enum) as their plain values, since that is
    what JSON makes of them on the wire; everything else as given."""
    if isinstance(value, Enum) and isinstance(value, (str, int)):
        return value.value
    if isinstance(value, dict):
        if not any(isinstance(v, (Enum, dict, list)) for v in value.values()):
            return value
        return {key: as_sent(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_sent(item) for item in value]
    return value


def given(value: Any) -> Any:
    """``value``, or ``_UNSET`` for the OpenAI SDK's "not given" markers (``omit``,
    ``NOT_GIVEN``), which clients such as the Agents SDK pass for every unused option."""
    kind = type(value)
    if kind.__name__ in ("Omit", "NotGiven") and kind.__module__.startswith("openai"):
        return _UNSET
    return value


def responses_messages(instructions: Any, items: Any) -> Any:
    """A Responses API request's ``instructions`` and ``input`` as chat messages."""
    out: list[Any] = []
    if isinstance(instructions, str):
        out.append({"role": "system", "content": instructions})
    elif _is_list(instructions):  # a Response's own instructions may be a list of items
        out.extend(_items(instructions))
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
    elif _is_list(items):
        out.extend(_items(items))
    elif _present(items):  # not the Responses API's: kept as given (as prompt= is)
        return [*out, items] if out else items
    return out


def _items(items: Any) -> list[Any]:
    out: list[Any] = []
    joinable = False  # the last message is the assistant's reply that tool calls may join
    reasoning: list[str] = []  # reasoning waiting for the assistant message it precedes
    for item in items:
        kind, role = _get(item, "type"), _get(item, "role")
        if kind in (None, "message") and isinstance(role, str):
            message: dict[str, Any] = {"role": role, "content": _content(_get(item, "content"))}
            out.append(message)
            joinable = role == "assistant"
            if joinable:
                _add_reasoning(message, reasoning)
        elif kind in _CALL_ITEMS:
            if not joinable:
                out.append({"role": "assistant", "content": None})
                joinable = True
            out[-1].setdefault("tool_calls", []).append(_tool_call(item, kind))
            _add_reasoning(out[-1], reasoning)
        elif kind in _OUTPUT_ITEMS:
            output = _content(_get(item, "output"))
            out.append({"role": "tool", "tool_call_id": _get(item, "call_id"), "content": output})
            joinable = False
        elif kind == "reasoning":
            reasoning.extend(reasoning_texts(item))
        else:
            out.append(_plain(item))
            joinable = False
    if reasoning:
        out.append({"role": "assistant", "content": None, "reasoning_content": "".join(reasoning)})
    return out


def _tool_call(item: Any, kind: str) -> dict[str, Any]:
    call_id = _get(item, "call_id") or _get(item, "id")
    if kind == "custom_tool_call":
        custom = {"name": _get(item, "name"), "input": _get(item, "input")}
        return {"id": call_id, "type": "custom", "custom": custom}
    function = {"name": _get(item, "name"), "arguments": _get(item, "arguments")}
    return {"id": call_id, "type": "function", "function": function}


def _add_reasoning(message: dict[str, Any], reasoning: list[str]) -> None:
    if reasoning:
        message["reasoning_content"] = message.get("reasoning_content", "") + "".join(reasoning)
        reasoning.clear()


def _content(content: Any) -> Any:
    """Message (or tool output) content: text as it is, one text part as its text, several
    parts as chat content parts (text, image_url, file; others as they were given)."""
    if not _is_list(content):
        return content
    parts = [_part(part) for part in content]
    if len(parts) == 1 and isinstance(parts[0], dict) and parts[0].get("type") == "text":
        return parts[0].get("text")
    return parts


def _part(part: Any) -> Any:
    kind = _get(part, "type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": _get(part, "text")}
    if kind == "input_image" and _get(part, "image_url"):
        image = {"url": _get(part, "image_url")}
        if _get(part, "detail"):
            image["detail"] = _get(part, "detail")
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        names = ("file_id", "file_data", "filename")
        file = {name: _get(part, name) for name in names if _get(part, name) is not None}
        if file:
            return {"type": "file", "file": file}
    return _plain(part)


def _plain(value: Any) -> Any:
    """An item or part of another kind as given; the SDK's own objects as their dicts."""
    if not isinstance(value, dict) and callable(getattr(value, "model_dump", None)):
        return message_dict(value)
    return value


def chat_tools(tools: Any) -> Any:
    """Tool definitions with Responses API function tools in the Chat Completions shape;
    other tools (hosted ones, and those already in that shape) as they were given."""
    if not _is_list(tools):
        return tools
    return [chat_tool_definition(_plain(tool)) for tool in tools]
