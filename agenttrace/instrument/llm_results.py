"""What a model call returned, read into the fields of its ``llm`` span.

Functions that call a model return the answer in many shapes: the OpenAI SDK's
``ChatCompletion`` or ``Response`` object, either one's ``model_dump()`` dict (what vLLM and
other OpenAI-compatible servers send), an Anthropic ``Message`` (:mod:`agenttrace.instrument.
llm_anthropic`), a runner's own dict
(``{"content": ..., "finish_reason": ..., "usage": {...}}``), or just the text.
:func:`read_result` reads each of them into the keyword arguments of
:meth:`~agenttrace.instrument.calls.LLMCallScope.record`; a value it does not recognize gives
nothing (the span keeps what the call's arguments said).

Finish reasons use the Chat Completions words (``stop``, ``length``, ``tool_calls``,
``content_filter``): a Responses API answer cut by ``max_output_tokens`` reads as ``length``,
so one rule (``finish_reason == "length"``) covers both APIs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agenttrace.instrument.llm_anthropic import anthropic_result, is_anthropic_message

#: Keys of a plain dict that hold the reply's text, in the order they are tried.
_TEXT_KEYS = ("content", "text", "output_text", "completion", "response")
#: Responses API: why an answer is incomplete -> the Chat Completions finish reason.
_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


def read_result(result: Any) -> dict[str, Any]:
    """``LLMCallScope.record`` keywords for what a model call returned (``{}``: nothing)."""
    if result is None or _is_transport(result):
        return {}
    if isinstance(result, str):
        return {"output_messages": [{"role": "assistant", "content": result}]}
    choices = _get(result, "choices")
    if _is_list(choices):
        return _chat_completion(result, choices)
    if is_anthropic_message(result):
        return anthropic_result(result)
    output = _get(result, "output")
    if _is_list(output) and (_get(result, "object") == "response" or _get(result, "status")):
        return _response(result, output)
    if isinstance(result, Mapping) or _has_any(result, (*_TEXT_KEYS, "message")):
        return _plain(result)
    return {}


def _is_transport(result: Any) -> bool:
    """The OpenAI SDK's stream or raw-response wrapper (``stream=True``,
    ``with_streaming_response``): the answer comes after the call returns, so there is nothing
    to read yet (its ``text``/``response`` attributes are not the reply)."""
    module = type(result).__module__  # (Stream and AsyncStream say "openai")
    return module == "openai" or module.startswith(("openai._", "openai.lib.streaming"))


def _chat_completion(result: Any, choices: Sequence[Any]) -> dict[str, Any]:
    messages, reasons = [], []
    for choice in choices:
        message = _get(choice, "message")
        if message is not None:
            messages.append(message_dict(message))
        elif isinstance(_get(choice, "text"), str):  # a legacy completion's choice
            messages.append({"role": "assistant", "content": _get(choice, "text")})
        reason = _get(choice, "finish_reason")
        if reason is not None:
            reasons.append(_reason(reason))
    return {
        "output_messages": messages,
        "finish_reasons": reasons or None,
        **_part(_usage, _get(result, "usage")),
        **_part(_identity, result),
        **_part(_tokens, result, choices[0] if choices else None),
    }


def _part(read: Any, *args: Any) -> dict[str, Any]:
    """One part of a result (usage, identity, token ids): {} when reading it fails, so the
    rest of the answer is still recorded."""
    try:
        return read(*args)
    except Exception:
        return {}


def _reason(reason: Any) -> Any:
    """A finish reason as text; one whose ``str()`` raises as it is (record() says so)."""
    try:
        return str(reason)
    except Exception:
        return reason


_TOKEN_ID_PREFIX = "token_id:"


def _tokens(result: Any, choice: Any) -> dict[str, Any]:
    """Token ids and log-probabilities an OpenAI-compatible server sent with the answer:
    vLLM's ``prompt_token_ids`` (top level for chat, per choice for completions) and the
    choice's ``token_ids`` (``return_token_ids``), and the chosen tokens' ``logprobs``. Without
    ``token_ids``, ids spelled ``token_id:N`` in the logprobs (``return_tokens_as_token_ids``)
    are used. Only lists of the right types count (tests/fixtures/vllm has the shape)."""
    found: dict[str, Any] = {}
    prompt = _get(result, "prompt_token_ids")
    if prompt is None:
        prompt = _get(choice, "prompt_token_ids")
    if _int_list(prompt):
        found["prompt_token_ids"] = list(prompt)
    completion = _get(choice, "token_ids")
    content = _get(_get(choice, "logprobs"), "content")
    if _is_list(content) and content:
        logprobs = [_get(item, "logprob") for item in content]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in logprobs):
            found["completion_logprobs"] = [float(v) for v in logprobs]
        if completion is None:
            tokens = [_get(item, "token") for item in content]
            if all(isinstance(t, str) and t.startswith(_TOKEN_ID_PREFIX) for t in tokens):
                try:
                    completion = [int(t[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
                except ValueError:
                    completion = None
    if _int_list(completion):
        found["completion_token_ids"] = list(completion)
    return found


def _int_list(value: Any) -> bool:
    return _is_list(value) and all(type(v) is int for v in value)


def _response(result: Any, output: Sequence[Any]) -> dict[str, Any]:
    """An OpenAI Responses API answer: message items, function calls and reasoning."""
    texts, tool_calls, reasoning = [], [], []
    for item in output:
        kind = _get(item, "type")
        if kind == "reasoning":
            reasoning.extend(reasoning_texts(item))
        elif kind == "message":
            for part in _get(item, "content") or ():
                text = _get(part, "text")
                if isinstance(text, str):
                    texts.append(text)
        elif kind == "function_call":
            tool_calls.append(
                {
                    "id": _get(item, "call_id") or _get(item, "id"),
                    "type": "function",
                    "function": {"name": _get(item, "name"), "arguments": _get(item, "arguments")},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    status = _get(result, "status")
    if status == "incomplete":
        why = _get(_get(result, "incomplete_details"), "reason")
        reason = _INCOMPLETE_REASONS.get(str(why), str(why) if why else "incomplete")
    elif status == "completed":
        reason = "tool_calls" if tool_calls else "stop"
    else:
        reason = None
    return {
        "output_messages": [message],
        "finish_reasons": [reason] if reason else None,
        **_part(_usage, _get(result, "usage")),
        **_part(_identity, result),
    }


def reasoning_texts(item: Any) -> list[str]:
    """A Responses API reasoning item's readable text: its summary, else its reasoning text
    (encrypted-only reasoning has none)."""
    for key in ("summary", "content"):
        texts = [_get(part, "text") for part in _get(item, key) or ()]
        texts = [text for text in texts if isinstance(text, str) and text]
        if texts:
            return ["\n\n".join(texts)]
    return []


def _plain(result: Any) -> dict[str, Any]:
    """A runner's own record of the answer: its text (or message), why it stopped, usage."""
    message = _get(result, "message")
    if isinstance(message, str):
        message = {"role": "assistant", "content": message}
    elif message is not None:
        message = dict(message_dict(message))
        message.setdefault("role", "assistant")
    else:
        content = next(
            (_get(result, key) for key in _TEXT_KEYS if _get(result, key) is not None), None
        )
        tool_calls = _get(result, "tool_calls")
        if content is not None or tool_calls:
            message = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = [message_dict(call) for call in tool_calls]
    fields: dict[str, Any] = {}
    if message is not None:
        fields["output_messages"] = [message]
    reasons = _get(result, "finish_reasons")
    reason = _get(result, "finish_reason", _get(result, "stop_reason"))
    if _is_list(reasons):
        fields["finish_reasons"] = [_reason(r) for r in reasons]
    elif reason is not None:
        fields["finish_reasons"] = [_reason(reason)]
    usage = _get(result, "usage")
    fields.update(_part(_usage, usage if usage is not None else result))
    fields.update(_part(_identity, result))
    return fields


def _usage(usage: Any) -> dict[str, Any]:
    found = {}
    for field, names in (
        ("input_tokens", ("prompt_tokens", "input_tokens")),
        ("output_tokens", ("completion_tokens", "output_tokens")),
    ):
        for name in names:
            value = _get(usage, name)
            if isinstance(value, int) and not isinstance(value, bool):
                found[field] = value
                break
    return found


def _identity(result: Any) -> dict[str, Any]:
    model, response_id = _get(result, "model"), _get(result, "id")
    found = {}
    if isinstance(model, str) and model:
        found["response_model"] = model
    if isinstance(response_id, str) and response_id:
        found["response_id"] = response_id
    return found


def message_dict(message: Any) -> dict[str, Any]:
    """A message (a dict, a pydantic model such as the SDK's, or any object) as a dict."""
    if isinstance(message, dict):
        return message
    dump = _get(message, "model_dump")
    if callable(dump):
        try:
            data = dump(exclude_none=True)
        except Exception:  # a model that cannot dump itself: its role and content
            data = None
        if isinstance(data, dict):
            return data
    return {"role": _get(message, "role"), "content": _get(message, "content")}


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    try:
        return getattr(obj, name, default)
    except Exception:  # a property that raises
        return default


def _has_any(obj: Any, names: Sequence[str]) -> bool:
    return any(_get(obj, name) is not None for name in names)


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))
