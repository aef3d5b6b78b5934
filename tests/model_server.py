"""A local, scripted model server for tests: OpenAI-, Anthropic- and vLLM-compatible.

Why it exists: the capture gateway (issue 33) sits on the wire between an agent and its model
endpoint, so its tests need a real model endpoint that answers exactly what the test decided,
in the exact shapes the real APIs use, streamed and not, and that remembers what it received
and sent. No real model runs here, so this server plays one from a script.

What it answers (any path prefix before ``/v1/`` is accepted, so a client configured with
``http://host:port/anything/v1`` reaches it too):

- ``GET /v1/models`` (OpenAI's list; Anthropic's when the request has ``anthropic-version``);
- ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, ``/v1/messages``,
  each non-streamed or streamed (``"stream": true``) as Server-Sent Events in the real APIs'
  framing (``data: ...`` lines and ``data: [DONE]`` for Chat Completions and completions;
  ``event: <type>`` + ``data: ...`` for the Responses API and Anthropic Messages). Every body
  and every event is validated against the installed ``openai`` / ``anthropic`` SDKs' pydantic
  models before it is sent, so a shape mistake here fails loudly (``server.errors``, and a 500).

The script. A list of :class:`Turn` per *script key*; each model call takes the next turn of
its key. The key is the ``X-Script-Key`` request header when present, else the request's
``model`` when the script has that key, else ``"*"``. So one server serves several scripted
agents at once: give each its own model name (or header). A plain list is the script of ``"*"``.
When a key's turns run out, the server answers ``fallback`` (default: the text ``"done"``, finish
``stop``), so a generic agent loop ends; ``fallback=None`` answers 500 instead. With
``per_conversation=True`` each conversation (the key plus the text of the first user message;
for the Responses API, ``previous_response_id`` chains to its conversation) walks the key's
turns from the start, for many concurrent agents running the same script. Error turns and
delayed turns are consumed like any other turn: a client's retry gets the next turn.

Token ids (vLLM's extension): a chat or completions request with ``"return_token_ids": true``
gets ``prompt_token_ids`` and ``choices[i].token_ids``; ``"logprobs": true`` (+
``top_logprobs``) gets OpenAI's logprobs object, its tokens spelled ``token_id:N`` under
``return_tokens_as_token_ids``. The "tokenizer" is :func:`token_ids`, one id per UTF-8 byte
(``BYTE_ID_OFFSET + byte``), and the chat prompt is the text of a small template
(:func:`chat_prompt_text`): ``<|role|>body<|end|>`` per message, tool calls as
``<tool_call>name arguments</tool_call>``, ending ``<|assistant|>``. The completion is
``body<|end|>`` (:func:`completion_text`), so when a client resends the history, each prompt
extends the previous prompt and completion exactly, as a real chat template does. Logprob
values come from :func:`logprob_at` (the token's position in the completion).

Starting it::

    with ModelServer({"agent-a": [call_tools(call("get_weather", {"city": "Paris"})),
                                  say("Sunny")]}) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=0)
        ...
        server.requests   # what it received, in order (path, headers, JSON body)
        server.exchanges  # each request with the body / SSE events it answered

In another process: ``python tests/model_server.py --script FILE --port 0 [--record FILE]``
prints the port on its first line and serves until SIGTERM; :class:`ModelServerProcess` does
that and reads the records back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

#: The request header that picks the script key (before the model name).
SCRIPT_HEADER = "x-script-key"
#: The script key used when the request's model has no script of its own.
DEFAULT_KEY = "*"
#: Token id of byte b is BYTE_ID_OFFSET + b (so ids never collide with small "special" ids).
BYTE_ID_OFFSET = 1000
#: The chat template's end-of-message marker: the last tokens of every chat completion.
END = "<|end|>"

# Finish reasons: the script speaks OpenAI's words; Anthropic's are accepted and mapped.
_FROM_ANTHROPIC = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
_TO_ANTHROPIC = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


# ----------------------------------------------------------------------------------------
# The script


@dataclass
class ToolCall:
    """One function call a turn makes. ``arguments`` is the JSON text the model "wrote"
    (a mapping is dumped); ``id`` defaults to ``call_<n>_<j>`` / ``toolu_<n>_<j>``."""

    name: str
    arguments: str = "{}"
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.arguments, str):
            self.arguments = json.dumps(self.arguments)

    @property
    def input(self) -> Any:
        """The arguments as JSON (Anthropic's ``input`` must be an object)."""
        return json.loads(self.arguments) if self.arguments.strip() else {}


@dataclass
class ErrorReply:
    """An HTTP error a turn answers with. ``body=None`` builds the API's own error JSON
    (OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}`` on /v1/messages)."""

    status: int
    message: str = "scripted error"
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Turn:
    """One scripted model reply: text and/or tool calls, or an HTTP error.

    ``finish_reason`` defaults to ``tool_calls`` when there are tool calls, else ``stop``
    (Anthropic's ``end_turn``/``max_tokens``/``tool_use`` are accepted too). ``usage``
    (``prompt_tokens``, ``completion_tokens``; or ``input_tokens``, ``output_tokens``) overrides
    the counts, which default to the lengths of the :func:`token_ids` of prompt and completion.
    ``delay`` is seconds before answering; ``chunk_delay`` is seconds between streamed events.
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    error: ErrorReply | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0

    def __post_init__(self) -> None:
        self.tool_calls = [
            call if isinstance(call, ToolCall) else ToolCall(**call) for call in self.tool_calls
        ]
        if isinstance(self.error, Mapping):
            self.error = ErrorReply(**self.error)
        if self.finish_reason is not None:
            self.finish_reason = _FROM_ANTHROPIC.get(self.finish_reason, self.finish_reason)
        if self.usage is not None:
            usage = dict(self.usage)
            self.usage = {
                "prompt_tokens": usage.get("prompt_tokens", usage.get("input_tokens", 0)),
                "completion_tokens": usage.get("completion_tokens", usage.get("output_tokens", 0)),
            }

    @property
    def finish(self) -> str:
        """The OpenAI finish reason this turn ends with."""
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    def to_json(self) -> dict[str, Any]:
        """This turn as JSON, the form :meth:`from_json` and script files take."""
        return {key: value for key, value in asdict(self).items() if value not in (None, [])}

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any] | Turn) -> Turn:
        """A turn from a script file's entry: a string is a text turn."""
        if isinstance(data, Turn):
            return data
        if isinstance(data, str):
            return cls(text=data)
        return cls(**data)


def say(text: str, **options: Any) -> Turn:
    """A text answer (options: finish_reason, usage, delay, chunk_delay)."""
    return Turn(text=text, **options)


def call(
    name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str | None = None
) -> ToolCall:
    """A tool call for :func:`call_tools`; ``arguments`` a mapping or JSON text."""
    return ToolCall(name=name, arguments="{}" if arguments is None else arguments, id=id)


def call_tools(*calls: ToolCall, text: str | None = None, **options: Any) -> Turn:
    """A turn that calls tools (optionally after some text); finish ``tool_calls``."""
    return Turn(text=text, tool_calls=list(calls), **options)


def fail(
    status: int,
    message: str = "scripted error",
    *,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    delay: float = 0.0,
) -> Turn:
    """A turn answered with HTTP ``status`` (e.g. 429, 500) and an API-style error body."""
    return Turn(error=ErrorReply(status, message, body, dict(headers or {})), delay=delay)


#: What a key answers once its turns run out: a generic agent sees "done" and stops.
DONE = say("done")

ScriptLike = Mapping[str, Sequence[Any]] | Sequence[Any] | None


class Script:
    """Turns per script key and how far each key (or conversation) has got; thread-safe,
    since tests add turns from their thread while the server's loop takes them."""

    def __init__(self, turns: ScriptLike = None) -> None:
        self._lock = threading.Lock()
        self._turns: dict[str, list[Turn]] = {}
        self._next: dict[tuple[str, str], int] = {}
        if turns is None:
            return
        if isinstance(turns, Mapping):
            for key, value in turns.items():
                self.add(key, value)
        else:
            self.add(DEFAULT_KEY, turns)

    def add(self, key: str, turns: Iterable[Any]) -> None:
        """Append turns to ``key``'s script."""
        with self._lock:
            self._turns.setdefault(key, []).extend(Turn.from_json(turn) for turn in turns)

    def names(self) -> list[str]:
        """The script's keys."""
        with self._lock:
            return list(self._turns)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._turns

    def take(self, key: str, conversation: str = "") -> tuple[int, Turn] | None:
        """The next turn of ``key`` (in ``conversation``) and its index, or None when done."""
        with self._lock:
            turns = self._turns.get(key, [])
            index = self._next.get((key, conversation), 0)
            if index >= len(turns):
                return None
            self._next[(key, conversation)] = index + 1
            return index, turns[index]

    def remaining(self, key: str = DEFAULT_KEY, conversation: str = "") -> int:
        """How many of ``key``'s turns are still to be taken (in ``conversation``)."""
        with self._lock:
            return len(self._turns.get(key, [])) - self._next.get((key, conversation), 0)

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            return {key: [turn.to_json() for turn in turns] for key, turns in self._turns.items()}


def load_script(path: str | Path) -> Script:
    """A script file: JSON, either a list of turns (key ``"*"``) or ``{key: [turns]}``; a
    turn is a string (its text) or an object with :class:`Turn`'s fields."""
    return Script(json.loads(Path(path).read_text()))


# ----------------------------------------------------------------------------------------
# Tokens: a byte "tokenizer" and a small chat template with prefix continuity


def token_ids(text: str) -> list[int]:
    """The token ids of ``text``: one per UTF-8 byte, ``BYTE_ID_OFFSET + byte``. Byte ids
    concatenate (ids(a + b) == ids(a) + ids(b)), which is what makes prompts extend."""
    return [BYTE_ID_OFFSET + byte for byte in text.encode()]


def token_string(token_id: int, *, as_id: bool = False) -> str:
    """How a token is spelled in logprobs: its character, ``\\xNN`` for a byte of a
    multi-byte character, or ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``)."""
    if as_id:
        return f"token_id:{token_id}"
    byte = token_id - BYTE_ID_OFFSET
    return chr(byte) if byte < 0x80 else f"\\x{byte:02x}"


def logprob_at(position: int, rank: int = 0) -> float:
    """The logprob of the completion's ``position``-th token (rank 0), or of its ``rank``-th
    alternative in ``top_logprobs`` (whose first entry is the sampled token itself, the rest
    the next byte values): deterministic, so tests can compare exact values."""
    return -((position % 50) + 1) / 100 - rank


def _alternative(token_id: int, rank: int) -> int:
    """The ``rank``-th alternative of a token in ``top_logprobs`` (rank 0 is the token)."""
    return BYTE_ID_OFFSET + (token_id - BYTE_ID_OFFSET + rank) % 256


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or its parts' texts joined (Chat, Responses
    and Anthropic part shapes; tool uses and results as text, images as ``<image>``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, Mapping):
            continue
        elif "text" in part:
            texts.append(str(part["text"]))
        elif part.get("type") == "tool_use":
            texts.append(_tool_call_text(part.get("name", ""), json.dumps(part.get("input"))))
        elif part.get("type") == "tool_result":
            texts.append(content_text(part.get("content")))
        elif "image" in str(part.get("type", "")):
            texts.append("<image>")
    return "".join(texts)


def _tool_call_text(name: str, arguments: str) -> str:
    return f"<tool_call>{name} {arguments}</tool_call>"


def assistant_body(text: str | None, calls: Iterable[tuple[str, str]]) -> str:
    """How the template spells an assistant message: its text, then each call (name and
    arguments text) as ``<tool_call>name arguments</tool_call>``."""
    return (text or "") + "".join(_tool_call_text(name, arguments) for name, arguments in calls)


def _message_body(message: Mapping[str, Any]) -> str:
    if message.get("role") != "assistant":
        return content_text(message.get("content"))
    calls = [
        (call["function"]["name"], call["function"].get("arguments") or "")
        for call in message.get("tool_calls") or ()
    ]
    return assistant_body(content_text(message.get("content")), calls)


def chat_prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt text a Chat Completions request renders to (its ``prompt_token_ids`` are
    :func:`token_ids` of this): the tools, if any, as ``<|tools|>JSON<|end|>`` (keys sorted,
    compact), then ``<|role|>body<|end|>`` per message, then ``<|assistant|>``."""
    text = ""
    if body.get("tools"):
        text += f"<|tools|>{json.dumps(body['tools'], sort_keys=True, separators=(',', ':'))}{END}"
    for message in body.get("messages") or ():
        text += f"<|{message.get('role')}|>{_message_body(message)}{END}"
    return text + "<|assistant|>"


def completion_text(turn: Turn) -> str:
    """The text a chat completion's ``token_ids`` spell: the assistant body, then ``<|end|>``."""
    return assistant_body(turn.text, ((c.name, c.arguments) for c in turn.tool_calls)) + END


def completions_prompt_ids(prompt: Any) -> list[int]:
    """A legacy completions prompt's ids: the text's, or the ids themselves when the prompt
    is a list of token ids (only the first prompt of a list is answered)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        prompt = prompt[0]
    if isinstance(prompt, list) and all(isinstance(item, int) for item in prompt):
        return list(prompt)
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt else ""
    return token_ids(str(prompt or ""))


def _request_text(body: Mapping[str, Any]) -> str:
    """The text of a Responses or Messages request, for its prompt token count."""
    parts = [content_text(body.get("instructions")), content_text(body.get("system"))]
    items = body.get("input", body.get("messages"))
    if isinstance(items, str):
        parts.append(items)
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function_call":
            parts.append(_tool_call_text(item.get("name", ""), item.get("arguments", "")))
        elif item.get("type") == "function_call_output":
            parts.append(content_text(item.get("output")))
        else:
            parts.append(content_text(item.get("content")))
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], sort_keys=True))
    return "".join(parts)


def pieces(text: str) -> list[str]:
    """How a text is cut into streamed deltas: words with their trailing whitespace."""
    return re.findall(r"\S+\s*|\s+", text)


# ----------------------------------------------------------------------------------------
# Validation against the SDKs' models


def _event_models(union: Any) -> dict[str, Any]:
    """The SDK's stream-event union as {event type: model}."""
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    found = {}
    for model in typing.get_args(union):
        (kind,) = typing.get_args(model.model_fields["type"].annotation)
        found[kind] = model
    return found


@functools.cache
def _sdk_models() -> dict[str, Any]:
    """{kind: SDK model, or {event type: model}}. Imported on first use: the two SDKs take
    seconds to import, which a server started with ``validate=False`` need not pay."""
    import anthropic.types as anthropic_types
    import openai.types as openai_types
    import openai.types.chat as openai_chat
    import openai.types.responses as openai_responses

    return {
        "chat": openai_chat.ChatCompletion,
        "chat.chunk": openai_chat.ChatCompletionChunk,
        # The SDK parses legacy completion chunks as Completion too.
        "completion": openai_types.Completion,
        "completion.chunk": openai_types.Completion,
        "response": openai_responses.Response,
        "response.event": _event_models(openai_responses.ResponseStreamEvent),
        "message": anthropic_types.Message,
        "message.event": _event_models(anthropic_types.RawMessageStreamEvent),
        "models": openai_types.Model,
        "anthropic.models": anthropic_types.ModelInfo,
    }


def validate(kind: str, payload: Any) -> None:
    """Check ``payload`` against the SDK model for ``kind`` (``chat``, ``chat.chunk``,
    ``completion``, ``completion.chunk``, ``response``, ``response.event``, ``message``,
    ``message.event``, ``models``, ``anthropic.models``); raise if it does not fit."""
    model = _sdk_models()[kind]
    if kind == "completion.chunk":
        # Completion types finish_reason non-null, though every chunk but the last has null
        # there (as the real stream does).
        choices = [{**choice, "finish_reason": "stop"} for choice in payload["choices"]]
        payload = {**payload, "choices": choices}
    if kind.endswith(".event"):
        if payload["type"] == "ping":  # Anthropic's keep-alive: no model, nothing in it
            return
        model = model[payload["type"]]
    if kind.endswith("models"):
        for entry in payload["data"]:
            model.model_validate(entry)
        return
    model.model_validate(payload)


# ----------------------------------------------------------------------------------------
# Answers: one builder per API, each giving the JSON body or the SSE events


@dataclass
class SseEvent:
    """One Server-Sent Event as sent: ``event`` is the ``event:`` line (None when the API
    sends ``data:`` lines only) and ``data`` the JSON payload, or ``"[DONE]"``."""

    event: str | None
    data: Any

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else _dumps(self.data)
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {data}\n\n".encode()


def _dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


@dataclass
class _Call:
    """What a builder needs: the exchange number (for ids), the request and its turn."""

    n: int
    body: dict[str, Any]
    turn: Turn
    flavor: str
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "scripted-model")

    def call_id(self, j: int, prefix: str = "call") -> str:
        return self.turn.tool_calls[j].id or f"{prefix}_{self.n}_{j}"

    def usage(self, prompt: int, completion: int) -> tuple[int, int]:
        if self.turn.usage is not None:
            return self.turn.usage["prompt_tokens"], self.turn.usage["completion_tokens"]
        return prompt, completion


def _openai_usage(prompt: int, completion: int, flavor: str) -> dict[str, Any]:
    if flavor == "vllm":
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        }
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class _Tokens:
    """A completion's token ids and logprob entries, handed out in order as the stream's
    pieces consume them, so that the chunks' ids and logprobs concatenate to the whole."""

    def __init__(self, text: str, body: Mapping[str, Any]) -> None:
        self.ids = token_ids(text)
        self.position = 0
        self.as_ids = bool(body.get("return_tokens_as_token_ids"))

    def take(self, text: str) -> tuple[list[int], int]:
        ids = token_ids(text)
        start = self.position
        assert self.ids[start : start + len(ids)] == ids, "pieces must follow the completion"
        self.position += len(ids)
        return ids, start

    def chat_logprobs(self, ids: list[int], start: int, top: int) -> list[dict[str, Any]]:
        """OpenAI's ``logprobs.content`` entries for ``ids`` starting at ``start``."""

        def entry(token: int, position: int, rank: int) -> dict[str, Any]:
            token = _alternative(token, rank)
            return {
                "token": token_string(token, as_id=self.as_ids),
                "logprob": logprob_at(position, rank),
                "bytes": [token - BYTE_ID_OFFSET],
            }

        return [
            {
                **entry(token, start + i, 0),
                "top_logprobs": [entry(token, start + i, rank) for rank in range(top)],
            }
            for i, token in enumerate(ids)
        ]

    def completion_logprobs(self, ids: list[int], start: int, top: int, offset: int) -> dict:
        """The legacy completions ``logprobs`` object for ``ids`` starting at ``start``;
        ``offset`` is the text offset of the first token. Each ``top_logprobs`` dict has
        ``max(logprobs, 1)`` entries, the sampled token first."""
        tokens = [token_string(token, as_id=self.as_ids) for token in ids]
        offsets = []
        char = offset - 1
        for token in ids:
            if not 0x80 <= token - BYTE_ID_OFFSET < 0xC0:  # a character's first byte
                char += 1
            offsets.append(max(char, offset))
        return {
            "tokens": tokens,
            "token_logprobs": [logprob_at(start + i) for i in range(len(ids))],
            "top_logprobs": [
                {
                    token_string(_alternative(token, r), as_id=self.as_ids): logprob_at(
                        start + i, r
                    )
                    for r in range(max(top, 1))
                }
                for i, token in enumerate(ids)
            ],
            "text_offset": offsets,
        }


class _Chat:
    """Chat Completions, with vLLM's token ids and logprobs on request."""

    kind = "chat"

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.body = call.body
        self.turn = call.turn
        self.want_ids = bool(self.body.get("return_token_ids"))
        self.want_logprobs = bool(self.body.get("logprobs"))
        self.top = int(self.body.get("top_logprobs") or 0)
        self.prompt_ids = token_ids(chat_prompt_text(self.body))
        self.tokens = _Tokens(completion_text(self.turn), self.body)
        self.usage = _openai_usage(
            *call.usage(len(self.prompt_ids), len(self.tokens.ids)), call.flavor
        )

    def _tool_calls(self) -> list[dict[str, Any]]:
        return [
            {
                "id": self.call.call_id(j),
                "type": "function",
                "function": {"name": tool.name, "arguments": tool.arguments},
            }
            for j, tool in enumerate(self.turn.tool_calls)
        ]

    def body_json(self) -> dict[str, Any]:
        vllm = self.call.flavor == "vllm"
        message: dict[str, Any] = {
            "role": "assistant",
            "content": (self.turn.text or "")
            if not self.turn.tool_calls
            else self.turn.text or None,
            "refusal": None,
        }
        if vllm:
            message.update(annotations=None, audio=None, function_call=None)
            message["tool_calls"] = self._tool_calls()
            message["reasoning_content"] = None
        else:
            message["annotations"] = []
            if self.turn.tool_calls:
                message["tool_calls"] = self._tool_calls()
        ids, start = self.tokens.take(completion_text(self.turn))
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": self._logprobs(ids, start),
            "finish_reason": self.turn.finish,
        }
        if vllm:
            choice["stop_reason"] = None
        if vllm or self.want_ids:
            choice["token_ids"] = ids if self.want_ids else None
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{self.call.n}",
            "object": "chat.completion",
            "created": self.call.created,
            "model": self.call.model,
            "choices": [choice],
            "service_tier": None if vllm else "default",
            "system_fingerprint": None,
            "usage": self.usage,
        }
        if vllm:
            answer["prompt_logprobs"] = None
        if vllm or self.want_ids:
            answer["prompt_token_ids"] = self.prompt_ids if self.want_ids else None
        if vllm:
            answer["kv_transfer_params"] = None
        return answer

    def _logprobs(self, ids: list[int], start: int) -> dict[str, Any] | None:
        if not self.want_logprobs:
            return None
        return {"content": self.tokens.chat_logprobs(ids, start, self.top), "refusal": None}

    def events(self) -> list[SseEvent]:
        include_usage = bool((self.body.get("stream_options") or {}).get("include_usage"))
        base = {
            "id": f"chatcmpl-{self.call.n}",
            "object": "chat.completion.chunk",
            "created": self.call.created,
            "model": self.call.model,
            "service_tier": "default",
            "system_fingerprint": None,
        }
        if self.call.flavor == "vllm":
            base = {key: base[key] for key in ("id", "object", "created", "model")}
        chunks: list[dict[str, Any]] = []

        def chunk(delta: dict[str, Any], text: str | None, finish: str | None = None) -> None:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
            choice["finish_reason"] = finish
            if text is not None:
                ids, start = self.tokens.take(text)
                choice["logprobs"] = self._logprobs(ids, start)
                if self.want_ids:
                    choice["token_ids"] = ids
            if finish is not None and self.call.flavor == "vllm":
                choice["stop_reason"] = None
            payload = {**base, "choices": [choice]}
            if include_usage:
                payload["usage"] = None
            chunks.append(payload)

        chunk({"role": "assistant", "content": "", "refusal": None}, None)
        if self.want_ids:
            chunks[0]["prompt_token_ids"] = self.prompt_ids
        for piece in pieces(self.turn.text or ""):
            chunk({"content": piece}, piece)
        for j, tool in enumerate(self.turn.tool_calls):
            head = {
                "index": j,
                "id": self.call.call_id(j),
                "type": "function",
                "function": {"name": tool.name, "arguments": ""},
            }
            chunk({"tool_calls": [head]}, f"<tool_call>{tool.name} ")
            parts = pieces(tool.arguments) or [""]
            for k, part in enumerate(parts):
                tail = "</tool_call>" if k == len(parts) - 1 else ""
                chunk({"tool_calls": [{"index": j, "function": {"arguments": part}}]}, part + tail)
        chunk({}, END, self.turn.finish)
        if include_usage:
            chunks.append({**base, "choices": [], "usage": self.usage})
        return [SseEvent(None, payload) for payload in chunks] + [SseEvent(None, "[DONE]")]


class _Completions:
    """Legacy completions (``prompt`` in, ``text`` out), with vLLM's per-choice token ids.
    The completion's ids are those of its text alone (no end marker), so that a client which
    appends the text to its prompt gets the next prompt as prompt + completion."""

    kind = "completion"

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.body = call.body
        self.turn = call.turn
        self.text = assistant_body(
            call.turn.text, ((c.name, c.arguments) for c in call.turn.tool_calls)
        )
        self.want_ids = bool(self.body.get("return_token_ids"))
        self.top = self.body.get("logprobs")
        self.prompt_ids = completions_prompt_ids(self.body.get("prompt"))
        self.tokens = _Tokens(self.text, self.body)
        self.finish = "length" if call.turn.finish == "length" else "stop"
        self.usage = _openai_usage(
            *call.usage(len(self.prompt_ids), len(self.tokens.ids)), call.flavor
        )
        self.usage.pop("prompt_tokens_details", None)
        self.usage.pop("completion_tokens_details", None)

    def _choice(self, text: str, finish: str | None, first: bool, offset: int) -> dict:
        ids, start = self.tokens.take(text)
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish
        if self.top is not None and self.top is not False:
            choice["logprobs"] = self.tokens.completion_logprobs(ids, start, int(self.top), offset)
        if self.call.flavor == "vllm":
            choice["stop_reason"] = None
        if self.want_ids:
            choice["prompt_token_ids"] = self.prompt_ids if first else None
            choice["token_ids"] = ids
        return choice

    def _base(self) -> dict[str, Any]:
        return {
            "id": f"cmpl-{self.call.n}",
            "object": "text_completion",
            "created": self.call.created,
            "model": self.call.model,
            "system_fingerprint": None,
        }

    def body_json(self) -> dict[str, Any]:
        choice = self._choice(self.text, self.finish, True, 0)
        return {**self._base(), "choices": [choice], "usage": self.usage}

    def events(self) -> list[SseEvent]:
        include_usage = bool((self.body.get("stream_options") or {}).get("include_usage"))
        parts = pieces(self.text) or [""]
        chunks = []
        offset = 0
        for k, part in enumerate(parts):
            finish = self.finish if k == len(parts) - 1 else None
            chunks.append({**self._base(), "choices": [self._choice(part, finish, k == 0, offset)]})
            offset += len(part)
        if include_usage:
            for payload in chunks:
                payload["usage"] = None
            chunks.append({**self._base(), "choices": [], "usage": self.usage})
        return [SseEvent(None, payload) for payload in chunks] + [SseEvent(None, "[DONE]")]


class _Responses:
    """OpenAI's Responses API: a ``message`` output item for the text, a ``function_call``
    item per tool call; ``finish_reason="length"`` makes the response ``incomplete``."""

    kind = "response"

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.body = call.body
        self.turn = call.turn
        prompt = len(token_ids(_request_text(self.body)))
        completion = len(token_ids(completion_text(self.turn)))
        self.prompt_tokens, self.completion_tokens = call.usage(prompt, completion)
        self.incomplete = self.turn.finish in ("length", "content_filter")

    def _output(self) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        if self.turn.text is not None:
            output.append(
                {
                    "id": f"msg_{self.call.n}",
                    "type": "message",
                    "status": "incomplete" if self.incomplete else "completed",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "output_text",
                            "text": self.turn.text,
                            "annotations": [],
                            "logprobs": [],
                        }
                    ],
                }
            )
        for j, tool in enumerate(self.turn.tool_calls):
            output.append(
                {
                    "id": f"fc_{self.call.n}_{j}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": self.call.call_id(j),
                    "name": tool.name,
                    "arguments": tool.arguments,
                }
            )
        return output

    def body_json(self) -> dict[str, Any]:
        body = self.body
        tools = []
        for tool in body.get("tools") or ():
            tool = dict(tool)
            if tool.get("type") == "function":
                tool.setdefault("description", None)
                tool.setdefault("parameters", None)
                tool.setdefault("strict", True)
            tools.append(tool)
        reason = "max_output_tokens" if self.turn.finish == "length" else "content_filter"
        return {
            "id": f"resp_{self.call.n}",
            "object": "response",
            "created_at": self.call.created,
            "status": "incomplete" if self.incomplete else "completed",
            "background": False,
            "error": None,
            "incomplete_details": {"reason": reason} if self.incomplete else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": self.call.model,
            "output": self._output(),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": tools,
            "top_logprobs": 0,
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": {
                "input_tokens": self.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": self.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            },
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    def events(self) -> list[SseEvent]:
        final = self.body_json()
        found: list[dict[str, Any]] = []

        def emit(kind: str, **fields: Any) -> None:
            found.append({"type": kind, "sequence_number": len(found), **fields})

        started = {**final, "status": "in_progress", "output": [], "usage": None}
        started["incomplete_details"] = None
        emit("response.created", response=started)
        emit("response.in_progress", response=started)
        for index, item in enumerate(final["output"]):
            where = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                added = {**item, "status": "in_progress", "content": []}
                emit("response.output_item.added", output_index=index, item=added)
                part = item["content"][0]
                empty = {**part, "text": ""}
                emit("response.content_part.added", **where, content_index=0, part=empty)
                for piece in pieces(part["text"]):
                    emit(
                        "response.output_text.delta",
                        **where,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                text = part["text"]
                emit("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
                emit("response.content_part.done", **where, content_index=0, part=part)
            else:
                added = {**item, "status": "in_progress", "arguments": ""}
                emit("response.output_item.added", output_index=index, item=added)
                for piece in pieces(item["arguments"]):
                    emit("response.function_call_arguments.delta", **where, delta=piece)
                arguments = item["arguments"]
                emit("response.function_call_arguments.done", **where, arguments=arguments)
            emit("response.output_item.done", output_index=index, item=item)
        emit("response.incomplete" if self.incomplete else "response.completed", response=final)
        return [SseEvent(event["type"], event) for event in found]


class _Messages:
    """Anthropic's Messages API: a ``text`` block, then a ``tool_use`` block per tool call;
    streamed as message_start, ping, content blocks, message_delta, message_stop."""

    kind = "message"

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.body = call.body
        self.turn = call.turn
        prompt = len(token_ids(_request_text(self.body)))
        completion = len(token_ids(completion_text(self.turn)))
        self.prompt_tokens, self.completion_tokens = call.usage(prompt, completion)
        self.stop_reason = _TO_ANTHROPIC.get(self.turn.finish, self.turn.finish)

    def _blocks(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if self.turn.text is not None and (self.turn.text or not self.turn.tool_calls):
            blocks.append({"type": "text", "text": self.turn.text})
        for j, tool in enumerate(self.turn.tool_calls):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": self.call.call_id(j, "toolu"),
                    "name": tool.name,
                    "input": tool.input,
                }
            )
        return blocks

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self.prompt_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        }

    def body_json(self) -> dict[str, Any]:
        return {
            "id": f"msg_{self.call.n}",
            "type": "message",
            "role": "assistant",
            "model": self.call.model,
            "content": self._blocks(),
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "usage": self._usage(self.completion_tokens),
        }

    def events(self) -> list[SseEvent]:
        start = {**self.body_json(), "content": [], "stop_reason": None, "usage": self._usage(1)}
        found: list[dict[str, Any]] = [
            {"type": "message_start", "message": start},
            {"type": "ping"},
        ]
        blocks = self._blocks()
        calls = iter(self.turn.tool_calls)
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                empty, key, kind = {**block, "text": ""}, "text", "text_delta"
                parts = pieces(block["text"])
            else:
                # The arguments as the script wrote them: they parse back to ``input``.
                empty, key, kind = {**block, "input": {}}, "partial_json", "input_json_delta"
                parts = pieces(next(calls).arguments.strip() or "{}")
            found.append({"type": "content_block_start", "index": index, "content_block": empty})
            for part in parts:
                delta = {"type": kind, key: part}
                found.append({"type": "content_block_delta", "index": index, "delta": delta})
            found.append({"type": "content_block_stop", "index": index})
        found.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
                "usage": self._usage(self.completion_tokens),
            }
        )
        found.append({"type": "message_stop"})
        return [SseEvent(event["type"], event) for event in found]


_APIS: dict[str, type[_Chat | _Completions | _Responses | _Messages]] = {
    "chat/completions": _Chat,
    "completions": _Completions,
    "responses": _Responses,
    "messages": _Messages,
}


def _error_type(status: int, anthropic_style: bool) -> str:
    types = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }
    if status in types:
        return types[status]
    return "api_error" if anthropic_style else "server_error"


def error_body(status: int, message: str, *, anthropic_style: bool = False) -> dict[str, Any]:
    """The JSON body an API sends with an error status: Anthropic's or OpenAI's shape."""
    kind = _error_type(status, anthropic_style)
    if anthropic_style:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def conversation_of(route: str, body: Mapping[str, Any]) -> str:
    """Which conversation a request continues, for ``per_conversation`` scripts: the text of
    its first user message (legacy completions: none, they share the key's turns)."""
    if route == "responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        for item in items or ():
            if isinstance(item, Mapping) and item.get("role") == "user":
                return content_text(item.get("content"))
        return ""
    for message in body.get("messages") or ():
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


# ----------------------------------------------------------------------------------------
# Records


@dataclass
class Exchange:
    """One request the server received and what it answered. ``headers`` are lowercased and
    complete (``authorization``/``x-api-key`` kept, so a test can check what the client sent);
    ``response`` is the JSON body sent, ``events`` the SSE events sent (as written, so a
    stream the client dropped shows how far it got); ``turn`` is the script turn used."""

    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float
    key: str | None = None
    conversation: str | None = None
    turn_index: int | None = None
    turn: Turn | None = None
    status: int | None = None
    response: Any = None
    events: list[SseEvent] | None = None
    stream: bool = False
    disconnected: bool = False
    finished_at: float | None = None

    @property
    def route(self) -> str:
        """The API route: the path after its last ``/v1/`` (``chat/completions``, ...)."""
        return self.path.rpartition("/v1/")[2]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["turn"] = self.turn.to_json() if self.turn else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Exchange:
        data = dict(data)
        if data.get("turn") is not None:
            data["turn"] = Turn.from_json(data["turn"])
        if data.get("events") is not None:
            data["events"] = [SseEvent(**event) for event in data["events"]]
        return cls(**data)


class _Records:
    """The exchanges, appended and updated under a lock (the server writes from its loop's
    thread while a test reads from its own), and mirrored to a JSON-lines file if asked."""

    def __init__(self, path: Path | None) -> None:
        self.lock = threading.Lock()
        self.exchanges: list[Exchange] = []
        self.errors: list[str] = []
        self.path = path

    def finish(self, exchange: Exchange) -> None:
        with self.lock:
            exchange.finished_at = time.time()
            if self.path is not None:
                with self.path.open("a") as out:
                    out.write(json.dumps(exchange.to_json()) + "\n")


# ----------------------------------------------------------------------------------------
# The server


class ModelServer:
    """The scripted model server, on 127.0.0.1 in a background thread (its own event loop).

    ``script``: a list of turns, ``{key: [turns]}`` or a :class:`Script`. ``fallback``: the
    turn once a key's script is spent (None: answer 500). ``flavor="vllm"`` adds vLLM's extra
    fields (null when not asked for) to every chat completion, as a real vLLM does; the
    default adds them only when asked. ``models``: extra names for ``GET /v1/models`` (the
    script's keys are listed too). ``record_path``: also append each finished exchange to this
    JSON-lines file. ``validate``: check every answer against the SDKs' models.
    """

    def __init__(
        self,
        script: ScriptLike | Script = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        fallback: Turn | None = DONE,
        per_conversation: bool = False,
        flavor: str = "openai",
        models: Sequence[str] = (),
        record_path: str | Path | None = None,
        validate: bool = True,
    ) -> None:
        if flavor not in ("openai", "vllm"):
            raise ValueError(f"flavor must be 'openai' or 'vllm', not {flavor!r}")
        self.script = script if isinstance(script, Script) else Script(script)
        self.host = host
        self.requested_port = port
        self.fallback = fallback
        self.per_conversation = per_conversation
        self.flavor = flavor
        self.models = list(models)
        self.validate = validate
        self._records = _Records(Path(record_path) if record_path else None)
        self._conversations: dict[str, str] = {}  # response id -> conversation
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # -- what tests read --------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the Anthropic SDK's ``base_url``."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the OpenAI SDK's ``base_url``."""
        return self.url + "/v1"

    anthropic_base_url = url

    @property
    def exchanges(self) -> list[Exchange]:
        """Every exchange so far, in the order the requests arrived (a snapshot)."""
        with self._records.lock:
            return list(self._records.exchanges)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far, in order: ``{"method", "path", "headers", "body"}``."""
        return [
            {"method": e.method, "path": e.path, "headers": e.headers, "body": e.body}
            for e in self.exchanges
        ]

    @property
    def responses(self) -> list[Any]:
        """What each request was answered, in order: the JSON body, or the list of SSE events
        (``SseEvent``) for a stream."""
        return [e.events if e.stream else e.response for e in self.exchanges]

    @property
    def errors(self) -> list[str]:
        """The server's own failures (e.g. an answer the SDK models rejected): empty when all
        is well; a test fixture can assert so."""
        with self._records.lock:
            return list(self._records.errors)

    def add_turns(self, key: str, turns: Iterable[Any]) -> None:
        """Append turns to a key's script while the server runs."""
        self.script.add(key, turns)

    def remaining(self, key: str = DEFAULT_KEY) -> int:
        """How many turns ``key`` has left (per-key cursors)."""
        return self.script.remaining(key)

    # -- lifecycle ---------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application, for a test that runs it on its own loop."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def start(self, timeout: float = 10.0) -> ModelServer:
        """Bind 127.0.0.1 (a free port unless one was given) and serve in a daemon thread."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.requested_port))
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self._runner = web.AppRunner(
                    self.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
                )
                loop.run_until_complete(self._runner.setup())
                site = web.SockSite(self._runner, sock)
                loop.run_until_complete(site.start())
            except BaseException as exc:
                failure.append(exc)
                sock.close()
                loop.close()
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"model-server:{self.port}")
        self._thread.daemon = True
        self._thread.start()
        if not ready.wait(timeout) or failure:
            raise RuntimeError(f"model server did not start: {failure}")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (open streams are cut)."""
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- serving -----------------------------------------------------------------------

    def _turn_for(self, exchange: Exchange, route: str, body: Mapping[str, Any]) -> Turn | None:
        header = exchange.headers.get(SCRIPT_HEADER)
        model = str(body.get("model") or "")
        key = header or (model if model in self.script else DEFAULT_KEY)
        conversation = ""
        if self.per_conversation:
            previous = body.get("previous_response_id")
            with self._records.lock:
                known = self._conversations.get(previous) if previous else None
            conversation = known if known is not None else conversation_of(route, body)
        exchange.key, exchange.conversation = key, conversation
        taken = self.script.take(key, conversation)
        if taken is None:
            return self.fallback
        exchange.turn_index, turn = taken
        return turn

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body, bad_json = raw.decode("utf-8", "replace"), True
        with self._records.lock:
            exchange = Exchange(
                index=len(self._records.exchanges),
                method=request.method,
                path=request.path,
                headers={key.lower(): value for key, value in request.headers.items()},
                body=body,
                received_at=time.time(),
            )
            self._records.exchanges.append(exchange)
        try:
            return await self._answer(request, exchange, body, bad_json)
        except Exception as exc:  # a bug here: tell the client and the test
            message = f"model server failed on {request.path}: {type(exc).__name__}: {exc}"
            with self._records.lock:
                self._records.errors.append(message)
            if exchange.status is not None:  # a stream already begun: cut it
                raise
            return await self._send_json(exchange, 500, error_body(500, message))
        finally:
            self._records.finish(exchange)

    async def _answer(
        self, request: web.Request, exchange: Exchange, body: Any, bad_json: bool
    ) -> web.StreamResponse:
        route = exchange.route if "/v1/" in exchange.path else ""
        anthropic_style = route == "messages"
        if request.method == "GET" and route == "models":
            return await self._send_json(exchange, 200, self._models(exchange))
        if request.method == "GET" and route.startswith("models/"):
            name = route.partition("/")[2]
            listed = self._models(exchange, [name])["data"][0]
            return await self._send_json(exchange, 200, listed)
        if request.method == "POST" and route == "messages/count_tokens" and body:
            # Anthropic's token count (some agents ask before each call): no turn taken.
            count = len(token_ids(_request_text(body)))
            return await self._send_json(exchange, 200, {"input_tokens": count})
        if request.method != "POST" or route not in _APIS:
            message = f"no route {request.method} {request.path}"
            return await self._send_json(exchange, 404, error_body(404, message))
        if bad_json or not isinstance(body, dict):
            message = "the request body must be a JSON object"
            return await self._send_json(
                exchange, 400, error_body(400, message, anthropic_style=anthropic_style)
            )
        turn = self._turn_for(exchange, route, body)
        if turn is None:
            message = f"the script for {exchange.key!r} is spent"
            return await self._send_json(exchange, 500, error_body(500, message))
        exchange.turn = turn
        if turn.delay:
            await asyncio.sleep(turn.delay)
        if turn.error is not None:
            error = turn.error
            payload = error.body
            if payload is None:
                payload = error_body(error.status, error.message, anthropic_style=anthropic_style)
            return await self._send_json(exchange, error.status, payload, error.headers)
        builder = _APIS[route](_Call(exchange.index, body, turn, self.flavor))
        if route == "responses" and self.per_conversation:
            with self._records.lock:
                self._conversations[f"resp_{exchange.index}"] = exchange.conversation or ""
        if body.get("stream"):
            events = builder.events()
            if self.validate:
                kind = {"chat": "chat.chunk", "completion": "completion.chunk"}.get(
                    builder.kind, builder.kind + ".event"
                )
                for event in events:
                    if event.data != "[DONE]":
                        validate(kind, event.data)
            return await self._send_events(request, exchange, events, turn.chunk_delay)
        payload = builder.body_json()
        if self.validate:
            validate(builder.kind, payload)
        return await self._send_json(exchange, 200, payload)

    def _models(self, exchange: Exchange, names: list[str] | None = None) -> dict[str, Any]:
        """``GET /v1/models``: the script's keys and ``models``, in OpenAI's list shape, or
        in Anthropic's when the client is Anthropic's (it sends ``anthropic-version``)."""
        if names is None:
            names = [key for key in self.script.names() if key != DEFAULT_KEY]
            names += [name for name in self.models if name not in names]
            names = names or ["scripted-model"]
        if "anthropic-version" in exchange.headers:
            data = [
                {
                    "type": "model",
                    "id": name,
                    "display_name": name,
                    "created_at": "2025-01-01T00:00:00Z",
                    "lifecycle": "active",
                }
                for name in names
            ]
            payload = {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
            kind = "anthropic.models"
        else:
            data = [
                {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "scripted"}
                for name in names
            ]
            payload, kind = {"object": "list", "data": data}, "models"
        if self.validate:
            validate(kind, payload)
        return payload

    async def _send_json(
        self,
        exchange: Exchange,
        status: int,
        payload: Any,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        exchange.status, exchange.response = status, payload
        all_headers = {
            "x-request-id": f"req_{exchange.index}",
            "request-id": f"req_{exchange.index}",
        }
        all_headers.update(headers or {})
        text = payload if isinstance(payload, str) else _dumps(payload)
        return web.Response(
            status=status, text=text, content_type="application/json", headers=all_headers
        )

    async def _send_events(
        self,
        request: web.Request,
        exchange: Exchange,
        events: list[SseEvent],
        chunk_delay: float,
    ) -> web.StreamResponse:
        exchange.status, exchange.stream, exchange.events = 200, True, []
        response = web.StreamResponse(
            status=200,
            headers={
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
                "x-request-id": f"req_{exchange.index}",
                "request-id": f"req_{exchange.index}",
            },
        )
        try:
            await response.prepare(request)
            for i, event in enumerate(events):
                if i and chunk_delay:
                    await asyncio.sleep(chunk_delay)
                await response.write(event.encode())
                exchange.events.append(event)
            await response.write_eof()
        except ConnectionError:  # the client went away: the record shows how far it got
            exchange.disconnected = True
        except asyncio.CancelledError:
            exchange.disconnected = True
            raise
        return response


# ----------------------------------------------------------------------------------------
# In another process


class ModelServerProcess:
    """The same server in a subprocess (``python tests/model_server.py``), for tests that
    need it outside the test's process. Its records are read back from a JSON-lines file in
    ``workdir`` (a temporary folder by default, removed with this object): an exchange appears
    there once it is answered. ``validate=False`` skips importing the SDKs (seconds saved at
    start); the shapes are the same code's as in-process, where the tests validate them."""

    def __init__(
        self,
        script: ScriptLike | Script = None,
        *,
        fallback: str | None = "done",
        per_conversation: bool = False,
        flavor: str = "openai",
        validate: bool = True,
        workdir: str | Path | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self.script = script if isinstance(script, Script) else Script(script)
        self.fallback = fallback
        self.per_conversation = per_conversation
        self.flavor = flavor
        self.validate = validate
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="model-server-")
            weakref.finalize(self, shutil.rmtree, workdir, True)
        self.workdir = Path(workdir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    anthropic_base_url = url

    @property
    def record_path(self) -> Path:
        return self.workdir / "exchanges.jsonl"

    @property
    def exchanges(self) -> list[Exchange]:
        """The answered exchanges so far, in the order their requests arrived."""
        if not self.record_path.exists():
            return []
        lines = self.record_path.read_text().splitlines()
        found = [Exchange.from_json(json.loads(line)) for line in lines if line.strip()]
        return sorted(found, key=lambda exchange: exchange.index)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [
            {"method": e.method, "path": e.path, "headers": e.headers, "body": e.body}
            for e in self.exchanges
        ]

    @property
    def responses(self) -> list[Any]:
        return [e.events if e.stream else e.response for e in self.exchanges]

    def command(self, script_path: Path) -> list[str]:
        """The command line that runs the server on ``script_path``."""
        command = [sys.executable, str(Path(__file__).resolve()), "--script", str(script_path)]
        command += ["--port", "0", "--record", str(self.record_path), "--flavor", self.flavor]
        command += ["--no-fallback"] if self.fallback is None else ["--fallback", self.fallback]
        command += [] if self.validate else ["--no-validate"]
        return command + (["--per-conversation"] if self.per_conversation else [])

    def start(self) -> ModelServerProcess:
        """Start the subprocess and wait for the port it prints."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        script_path = self.workdir / "script.json"
        script_path.write_text(json.dumps(self.script.to_json()))
        log_path = self.workdir / "stderr.log"
        with log_path.open("w") as log:
            self.process = subprocess.Popen(
                self.command(script_path), stdout=subprocess.PIPE, stderr=log, text=True
            )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], self.startup_timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(
                f"model server process did not start: {line!r}\n{log_path.read_text()[-4000:]}"
            )
        self.port = int(line)
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s; the records stay readable after."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ModelServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a script file until SIGTERM/SIGINT, printing the port on the first line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, help="JSON: [turns] or {key: [turns]}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--record", type=Path, help="append each exchange here (JSON lines)")
    parser.add_argument("--fallback", default="done", help="the text once a script is spent")
    parser.add_argument("--no-fallback", action="store_true", help="answer 500 once spent")
    parser.add_argument("--per-conversation", action="store_true")
    parser.add_argument("--flavor", choices=("openai", "vllm"), default="openai")
    parser.add_argument("--no-validate", action="store_true", help="skip the SDK model checks")
    args = parser.parse_args(argv)
    server = ModelServer(
        load_script(args.script) if args.script else None,
        host=args.host,
        port=args.port,
        fallback=None if args.no_fallback else say(args.fallback),
        per_conversation=args.per_conversation,
        flavor=args.flavor,
        record_path=args.record,
        validate=not args.no_validate,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    print(server.port, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
