"""The calls a gateway sees, written as ordinary agenttrace spans: an episode, a step per model
call, the model call itself, and the tool calls the agent made between two model calls.

Every call is a ``timestep`` of its episode with a GenAI ``chat`` span in it (the request's
messages and tools, the answer, usage, finish reason, latency, time to first token). The tool
calls in an answer are matched with the tool results in the next request of the same episode
(by call id); each pair becomes an ``execute_tool`` span of the earlier step, so the
trajectory reads as the agent's transcript. Tool calls whose result never came are written,
without a result, when the episode ends.

The spans go through the process's agenttrace pipeline (``agenttrace.configure`` settings:
local files, or ``AGENTTRACE_COLLECT`` to a collect service), so step tables, the tokens
export, scores and the viewer work for them unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument.llm_anthropic import anthropic_messages
from agenttrace.instrument.llm_requests import read_request, request_parameters
from agenttrace.instrument.llm_results import read_result
from agenttrace.instrument.propagation import extract

__all__ = ["CallRecord", "EpisodeBook", "UpstreamError", "input_messages", "new_episode_id"]

logger = logging.getLogger("agenttrace")

#: Attributes of a gateway call's span (besides the GenAI ones).
LATENCY = "agenttrace.gateway.latency_ms"
TIME_TO_FIRST_TOKEN = "gen_ai.server.time_to_first_token"  # seconds, as the GenAI metric
STREAMED = "agenttrace.gateway.streamed"
UPSTREAM_STATUS = "http.response.status_code"


class UpstreamError(Exception):
    """The upstream answered with an error status (passed to the client unchanged)."""

    def __init__(self, status: int, body: bytes) -> None:
        text = body[:500].decode("utf-8", "replace")
        super().__init__(f"upstream answered {status}: {text}")
        self.status = status


@dataclass
class _Step:
    context: otel_context.Context
    tool_calls: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (name, args)


@dataclass
class _Episode:
    scope: Any
    started: float
    last_call: float
    calls: int = 0
    last_step: _Step | None = None
    conversation: list[Any] = field(default_factory=list)  # last input + output, _essence'd


@dataclass
class CallRecord:
    """One call on its way: its spans are open until :meth:`EpisodeBook.finish_call`."""

    episode_id: str | None
    step: Any
    call: Any
    started: float
    api: str
    input_messages: list[Any]


class EpisodeBook:
    """The open episodes of a gateway and the spans of their calls (thread-safe)."""

    def __init__(self, *, idle_timeout: float = 300.0) -> None:
        self.idle_timeout = idle_timeout
        self._episodes: dict[str, _Episode] = {}
        self._lock = threading.Lock()

    # --- episodes --------------------------------------------------------------------------

    def _episode(
        self, episode_id: str, task_id: str | None = None, group_id: str | None = None
    ) -> _Episode:
        with self._lock:
            episode = self._episodes.get(episode_id)
            if episode is None:
                scope = at.episode(episode_id=episode_id, task_id=task_id, group_id=group_id)
                token = otel_context.attach(otel_context.Context())  # a trace of its own
                try:
                    scope.start()
                finally:
                    otel_context.detach(token)
                now = time.monotonic()
                episode = self._episodes[episode_id] = _Episode(scope, now, now)
            return episode

    def open_episodes(self) -> list[str]:
        with self._lock:
            return list(self._episodes)

    def start(
        self,
        episode_id: str,
        *,
        task_id: str | None = None,
        group_id: str | None = None,
    ) -> None:
        """Open an episode now (``agenttrace run`` does, before its child's first call)."""
        self._episode(episode_id, task_id, group_id)

    def end(self, episode_id: str, *, exit_code: int | None = None, reason: str = "") -> bool:
        """End an episode: exit code 0 (or None) completes it; any other ends it errored,
        ``reason`` saying why (the signal, the code). False when it was not open."""
        with self._lock:
            episode = self._episodes.pop(episode_id, None)
        if episode is None:
            return False
        self._flush_tool_calls(episode)
        scope = episode.scope
        if exit_code not in (None, 0):
            scope.end_as(sc.STATUS_ERRORED, _AgentExit(reason or f"exit code {exit_code}"))
        else:
            scope.set_status(sc.STATUS_COMPLETED)
            scope.end()
        return True

    def end_idle(self, now: float | None = None) -> list[str]:
        """End the episodes no call came to for ``idle_timeout`` seconds (their status as
        their steps say); returns their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [
                episode_id
                for episode_id, episode in self._episodes.items()
                if now - episode.last_call >= self.idle_timeout
            ]
            ended = [(episode_id, self._episodes.pop(episode_id)) for episode_id in idle]
        for _, episode in ended:
            self._flush_tool_calls(episode)
            episode.scope.end()
        return idle

    def end_all(self) -> None:
        for episode_id in self.open_episodes():
            self.end(episode_id)

    def continued(self, messages: list[Any]) -> str | None:
        """The open episode whose last call's messages and answer this call's messages
        continue (the rule for clients that name no episode; docs/gateway.md)."""
        asked = [_essence(message) for message in messages]
        with self._lock:
            best, best_length = None, 0
            for episode_id, episode in self._episodes.items():
                held = episode.conversation
                if held and len(held) > best_length and asked[: len(held)] == held:
                    best, best_length = episode_id, len(held)
            return best

    # --- calls -----------------------------------------------------------------------------

    def start_call(
        self,
        api: str,
        body: dict[str, Any],
        *,
        episode_id: str | None,
        task_id: str | None = None,
        group_id: str | None = None,
        headers: Any = None,
    ) -> CallRecord:
        """Open the spans of a call as its request arrives. ``episode_id`` None with trace
        headers: the call joins its caller's episode and step (the caller is traced)."""
        messages = input_messages(api, body)
        if episode_id is None:
            parent = extract(headers)  # a traced caller: its span, its episode's frame
            step = None
        else:
            episode = self._episode(episode_id, task_id, group_id)
            with self._lock:
                episode.calls += 1
                episode.last_call = time.monotonic()
                previous = episode.last_step
            if previous is not None:
                self._tool_results(previous, messages)
            step = at.timestep()
            step._parent = episode.scope._context
            step.start()
            parent = step._context
        call = at.llm_call(model=body.get("model") if isinstance(body.get("model"), str) else None)
        call._parent = parent
        call.start()
        try:
            fields = {"input_messages": messages} if messages else {}
            tools = read_request(body).get("tool_definitions")
            if tools is not None:
                fields["tool_definitions"] = tools
            call.record(**fields)
            for key, value in request_parameters(body).items():
                call.set_attribute(key, value)
            call.set_attribute(STREAMED, bool(body.get("stream")))
        except Exception:
            logger.exception("agenttrace gateway: recording a request")
        return CallRecord(episode_id, step, call, time.perf_counter(), api, messages)

    def finish_call(
        self,
        record: CallRecord,
        *,
        answer: Any = None,
        error: BaseException | None = None,
        status: int | None = None,
        first_event_at: float | None = None,
    ) -> None:
        """Close a call's spans with its answer (or the upstream's error)."""
        call = record.call
        fields: dict[str, Any] = {}
        try:
            if answer is not None:
                fields = read_result(answer)  # (vLLM's token ids and logprobs too)
                call.record(**fields)
            latency = (time.perf_counter() - record.started) * 1000
            call.set_attribute(LATENCY, round(latency, 3))
            if first_event_at is not None:
                call.set_attribute(TIME_TO_FIRST_TOKEN, first_event_at - record.started)
            if status is not None:
                call.set_attribute(UPSTREAM_STATUS, status)
        except Exception:
            logger.exception("agenttrace gateway: recording an answer")
        finally:
            call.end(error)
            if record.step is not None:
                record.step.end(error)
        if record.episode_id is None or record.step is None:
            return
        with self._lock:
            episode = self._episodes.get(record.episode_id)
            if episode is None:
                return
            outputs = fields.get("output_messages") or []
            step = _Step(record.step._context)
            for message in outputs:
                for tool_call in (message or {}).get("tool_calls") or ():
                    function = tool_call.get("function") or {}
                    if tool_call.get("id"):
                        step.tool_calls[str(tool_call["id"])] = (
                            function.get("name") or "",
                            function.get("arguments") or "",
                        )
            episode.last_step = step
            episode.conversation = [_essence(m) for m in (*record.input_messages, *outputs)]
            episode.last_call = time.monotonic()

    # --- tool calls --------------------------------------------------------------------------

    def _tool_results(self, step: _Step, messages: list[Any]) -> None:
        """Tool results in a request, for the tool calls the previous answer asked for."""
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "tool":
                continue
            call_id = str(message.get("tool_call_id") or "")
            asked = step.tool_calls.pop(call_id, None)
            if asked is not None:
                _tool_span(step, call_id, *asked, result=message.get("content"))

    def _flush_tool_calls(self, episode: _Episode) -> None:
        step = episode.last_step
        if step is not None:
            for call_id, asked in list(step.tool_calls.items()):
                _tool_span(step, call_id, *asked)
            step.tool_calls.clear()


class _AgentExit(Exception):
    """How the agent's process ended, for an errored episode."""


def _tool_span(step: _Step, call_id: str, name: str, arguments: str, result: Any = None) -> None:
    tool = at.tool_call(name or None)
    tool._parent = step.context
    tool.start()
    try:
        fields: dict[str, Any] = {"call_id": call_id, "arguments": arguments}
        if result is not None:
            fields["result"] = result
        tool.record(**fields)
    finally:
        tool.end()


def _essence(message: Any) -> tuple[Any, ...]:
    """What identifies a message in a conversation the client resends: its role, its text
    and its tool calls' ids (clients drop or add empty fields: ``refusal``, ``annotations``)."""
    if not isinstance(message, dict):
        return (message,)
    content = message.get("content")
    if isinstance(content, list):  # content parts: their texts
        content = "".join(
            part.get("text") or "" if isinstance(part, dict) else str(part) for part in content
        )
    calls = tuple(
        call.get("id") for call in message.get("tool_calls") or () if isinstance(call, dict)
    )
    return (message.get("role"), content or None, calls, message.get("tool_call_id"))


def input_messages(api: str, body: dict[str, Any]) -> list[Any]:
    """The request's messages as chat messages, whatever the API."""
    if api == "messages":
        return anthropic_messages(body.get("system"), body.get("messages"))
    messages = read_request(body).get("input_messages")
    if isinstance(messages, str):  # a legacy completion's prompt
        return [{"role": "user", "content": messages}]
    return list(messages) if isinstance(messages, list) else []


def new_episode_id() -> str:
    return uuid.uuid4().hex
