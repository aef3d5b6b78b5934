"""A streamed model answer, put back together from its Server-Sent Events.

The gateway forwards each chunk to the client as it arrives and hands a copy to a
:class:`StreamCapture`, which rebuilds the answer the API would have sent unstreamed: a
``chat.completion`` from Chat Completions chunks (text and tool-call deltas by index), a
``text_completion`` from legacy completion chunks, the ``response`` of a Responses API stream's
``response.completed`` event (or its text deltas when the stream was cut), and an Anthropic
``message`` from ``message_start``, the content block events and ``message_delta``. The
result is read like any unstreamed answer (:func:`agenttrace.instrument.llm_results.read_result`).
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["StreamCapture"]


class StreamCapture:
    """Feed it the bytes of an SSE body as they pass; :meth:`result` is the whole answer."""

    def __init__(self, api: str) -> None:
        self.api = api  # chat | completions | responses | messages
        self.events = 0
        self.first_event_at: float | None = None  # perf_counter of the first event
        self._buffer = b""
        self._base: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None
        self._completed: Any = None  # Responses API: the final response object
        self._texts: list[str] = []
        self._blocks: dict[int, dict[str, Any]] = {}  # Anthropic content blocks by index
        self._partial_json: dict[int, list[str]] = {}

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while True:
            cut = _event_end(self._buffer)
            if cut is None:
                return
            raw, self._buffer = self._buffer[: cut[0]], self._buffer[cut[1] :]
            self._event(raw)

    def _event(self, raw: bytes) -> None:
        kind, lines = None, []
        for line in raw.decode("utf-8", "replace").splitlines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                lines.append(line[5:].lstrip(" "))
        if not lines:
            return
        data = "\n".join(lines)
        if data.strip() == "[DONE]":
            return
        try:
            payload = json.loads(data)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        if self.first_event_at is None:
            self.first_event_at = time.perf_counter()
        self.events += 1
        take = getattr(self, "_" + self.api, None)
        if take is not None:
            take(kind or payload.get("type"), payload)

    # --- OpenAI Chat Completions and legacy completions --------------------------------------

    def _chat(self, kind: Any, chunk: dict[str, Any]) -> None:
        self._remember(chunk, ("id", "model", "created", "system_fingerprint", "prompt_token_ids"))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            index = choice.get("index", 0)
            into = self._choices.setdefault(
                index, {"index": index, "message": {"role": "assistant", "content": None}}
            )
            delta = choice.get("delta") or {}
            message = into["message"]
            if delta.get("content"):
                message["content"] = (message["content"] or "") + delta["content"]
            for key in ("reasoning_content", "reasoning"):
                if delta.get(key):
                    message[key] = message.get(key, "") + delta[key]
            for call in delta.get("tool_calls") or ():
                calls = message.setdefault("tool_calls", [])
                position = call.get("index", len(calls))
                while len(calls) <= position:
                    empty = {"name": "", "arguments": ""}
                    calls.append({"id": None, "type": "function", "function": empty})
                held = calls[position]
                if call.get("id"):
                    held["id"] = call["id"]
                function = call.get("function") or {}
                if function.get("name"):
                    held["function"]["name"] += function["name"]
                if function.get("arguments"):
                    held["function"]["arguments"] += function["arguments"]
            if choice.get("finish_reason"):
                into["finish_reason"] = choice["finish_reason"]
            _merge_token_fields(into, choice)

    def _completions(self, kind: Any, chunk: dict[str, Any]) -> None:
        self._remember(chunk, ("id", "model", "created", "prompt_token_ids"))
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            index = choice.get("index", 0)
            into = self._choices.setdefault(index, {"index": index, "text": ""})
            into["text"] += choice.get("text") or ""
            if choice.get("finish_reason"):
                into["finish_reason"] = choice["finish_reason"]
            _merge_token_fields(into, choice)

    # --- OpenAI Responses API ------------------------------------------------------------

    def _responses(self, kind: Any, event: dict[str, Any]) -> None:
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self._completed = event.get("response")
        elif kind == "response.created" and isinstance(event.get("response"), dict):
            self._remember(event["response"], ("id", "model"))
        elif kind == "response.output_text.delta":
            self._texts.append(event.get("delta") or "")

    # --- Anthropic Messages --------------------------------------------------------------

    def _messages(self, kind: Any, event: dict[str, Any]) -> None:
        if kind == "message_start":
            message = event.get("message") or {}
            self._remember(message, ("id", "model", "role", "type"))
            self._usage = dict(message.get("usage") or {})
        elif kind == "content_block_start":
            self._blocks[event.get("index", len(self._blocks))] = dict(
                event.get("content_block") or {}
            )
        elif kind == "content_block_delta":
            index = event.get("index", 0)
            block = self._blocks.setdefault(index, {"type": "text", "text": ""})
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + (delta.get("text") or "")
            elif delta.get("type") == "input_json_delta":
                self._partial_json.setdefault(index, []).append(delta.get("partial_json") or "")
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if "stop_reason" in delta:
                self._base["stop_reason"] = delta["stop_reason"]
            usage = event.get("usage") or {}
            self._usage = {**(self._usage or {}), **usage}

    # --- the answer ----------------------------------------------------------------------

    def _remember(self, source: dict[str, Any], keys: tuple[str, ...]) -> None:
        for key in keys:
            if source.get(key) is not None and key not in self._base:
                self._base[key] = source[key]

    def result(self) -> dict[str, Any] | None:
        """The answer as the unstreamed API would have sent it (None: no event came)."""
        if self.api == "responses":
            if isinstance(self._completed, dict):
                return self._completed
            if not self._texts and not self._base:
                return None
            text = "".join(self._texts)
            return {**self._base, "object": "response", "status": "incomplete",
                    "output": [{"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": text}]}]}  # fmt: skip
        if self.api == "messages":
            if not self._base:
                return None
            content = []
            for index in sorted(self._blocks):
                block = dict(self._blocks[index])
                if block.get("type") == "tool_use" and index in self._partial_json:
                    text = "".join(self._partial_json[index])
                    try:
                        block["input"] = json.loads(text) if text else {}
                    except ValueError:
                        block["input"] = text
                content.append(block)
            return {**self._base, "type": "message", "content": content, "usage": self._usage}
        if not self._choices and not self._base:
            return None
        answer = {**self._base, "choices": [self._choices[i] for i in sorted(self._choices)]}
        answer["object"] = "chat.completion" if self.api == "chat" else "text_completion"
        if self._usage is not None:
            answer["usage"] = self._usage
        return answer


def _merge_token_fields(into: dict[str, Any], choice: dict[str, Any]) -> None:
    """vLLM's token ids and logprobs, which stream a chunk's share at a time."""
    token_ids = choice.get("token_ids")
    if isinstance(token_ids, list):
        into.setdefault("token_ids", []).extend(token_ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        held = into.setdefault("logprobs", {})
        for key, value in logprobs.items():
            if isinstance(value, list):
                held.setdefault(key, []).extend(value)
            else:
                held[key] = value


def _event_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first whole event of ``buffer`` ends: (its end, the next event's start)."""
    ends = [
        (position, position + len(marker))
        for marker in (b"\n\n", b"\r\n\r\n", b"\r\r")
        if (position := buffer.find(marker)) >= 0
    ]
    return min(ends) if ends else None
