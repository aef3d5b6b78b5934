"""The calls a gateway sees, written as ordinary agenttrace spans: an episode, a step per model
call, the model call itself, and the tool calls the agent made between two model calls.

Every call is a ``timestep`` of its episode with a GenAI ``chat`` span in it (the request's
messages and tools, the answer, usage, finish reason, latency, time to first token). The tool
calls in an answer are matched with the tool results in the next request of the same episode
(by call id); each pair becomes an ``execute_tool`` span of the earlier step, so the
trajectory reads as the agent's transcript. Tool calls whose result never came are written,
without a result, when the episode ends.

A call's spans open as its request arrives; its content (the request's messages and tools,
the answer) is read and recorded by :meth:`EpisodeBook.finish_call`, which the gateway calls
once the client has its answer, so recording adds nothing to the time the client waits.

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
#: Time to first token of a streamed answer: to its first event, in ms. (Not GenAI's metric
#: name, gen_ai.server.time_to_first_token: an attribute named like a token is withheld as a
#: secret.)
TIME_TO_FIRST_EVENT = "agenttrace.gateway.first_event_ms"
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


@dataclass(eq=False)
class _Episode:
    scope: Any
    started: float
    last_call: float
    open_calls: int = 0  # started, not yet finished
    ending: tuple[int | None, str] | None = None  # end() came while calls were open
    last_step: _Step | None = None
    conversation: list[Any] = field(default_factory=list)  # last input + output, _essence'd


@dataclass
class CallRecord:
    """One call on its way: its spans are open until :meth:`EpisodeBook.finish_call`, which
    also records the request (``body``) read as messages."""

    episode_id: str | None
    step: Any
    call: Any
    started: float
    api: str
    body: dict[str, Any]
    episode: _Episode | None = None
    previous: _Step | None = None  # the episode's step before this call (its tool calls)
    input_messages: list[Any] = field(default_factory=list)


class EpisodeBook:
    """The open episodes of a gateway and the spans of their calls (thread-safe)."""

    def __init__(self, *, idle_timeout: float = 300.0) -> None:
        self.idle_timeout = idle_timeout
        self._episodes: dict[str, _Episode] = {}
        self._ending: set[_Episode] = set()  # ended while calls were open: the last one closes
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
        ``reason`` saying why (the signal, the code). False when it was not open. A call of
        the episode still open (its client has the answer; its record is being written)
        ends first: the episode ends with it."""
        with self._lock:
            episode = self._episodes.pop(episode_id, None)
            if episode is not None and episode.open_calls:
                episode.ending = (exit_code, reason)
                self._ending.add(episode)
                return True
        if episode is None:
            return False
        self._close(episode, exit_code, reason)
        return True

    def _close(self, episode: _Episode, exit_code: int | None, reason: str) -> None:
        self._flush_tool_calls(episode)
        scope = episode.scope
        if exit_code not in (None, 0):
            scope.end_as(sc.STATUS_ERRORED, _AgentExit(reason or f"exit code {exit_code}"))
        else:
            scope.set_status(sc.STATUS_COMPLETED)
            scope.end()

    def end_idle(self, now: float | None = None) -> list[str]:
        """End the episodes no call came to for ``idle_timeout`` seconds and none is open
        in (their status as their steps say); returns their ids."""
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [
                episode_id
                for episode_id, episode in self._episodes.items()
                if now - episode.last_call >= self.idle_timeout and not episode.open_calls
            ]
            ended = [(episode_id, self._episodes.pop(episode_id)) for episode_id in idle]
        for _, episode in ended:
            self._flush_tool_calls(episode)
            episode.scope.end()
        return idle

    def end_all(self) -> None:
        """End every episode now, calls still open or not (the gateway stops)."""
        for episode_id in self.open_episodes():
            self.end(episode_id)
        with self._lock:
            ending, self._ending = list(self._ending), set()
        for episode in ending:
            self._close(episode, *(episode.ending or (None, "")))

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
        started: float | None = None,
    ) -> CallRecord:
        """Open the spans of a call as its request arrives (its content is recorded by
        :meth:`finish_call`). ``episode_id`` None with trace headers: the call joins its
        caller's episode and step (the caller is traced). ``started``: the perf_counter
        when the request arrived (default: now), which latencies count from."""
        previous = episode = None
        if episode_id is None:
            parent = extract(headers)  # a traced caller: its span, its episode's frame
            step = None
        else:
            episode = self._episode(episode_id, task_id, group_id)
            with self._lock:
                episode.open_calls += 1
                episode.last_call = time.monotonic()
                previous = episode.last_step
            step = at.timestep()
            step._parent = episode.scope._context
            step.start()
            parent = step._context
        call = at.llm_call(model=body.get("model") if isinstance(body.get("model"), str) else None)
        call._parent = parent
        call.start()
        started = time.perf_counter() if started is None else started
        return CallRecord(
            episode_id, step, call, started, api, body, episode=episode, previous=previous
        )

    def finish_call(
        self,
        record: CallRecord,
        *,
        answer: Any = None,
        error: BaseException | None = None,
        status: int | None = None,
        first_event_at: float | None = None,
        answered_at: float | None = None,
    ) -> None:
        """Record a call's request and answer (or the upstream's error) and close its spans.
        ``answered_at``: the perf_counter when the answer was whole (default: now)."""
        call = record.call
        fields: dict[str, Any] = {}
        self._record_request(record)
        try:
            if answer is not None:
                fields = read_result(answer)  # (vLLM's token ids and logprobs too)
                call.record(**fields)
            if answered_at is None:
                answered_at = time.perf_counter()
            call.set_attribute(LATENCY, round((answered_at - record.started) * 1000, 3))
            if first_event_at is not None:
                first = (first_event_at - record.started) * 1000
                call.set_attribute(TIME_TO_FIRST_EVENT, round(first, 3))
            if status is not None:
                call.set_attribute(UPSTREAM_STATUS, status)
        except Exception:
            logger.exception("agenttrace gateway: recording an answer")
        finally:
            call.end(error)
            if record.step is not None:
                record.step.end(error)
        episode = record.episode
        if episode is None or record.step is None:
            return
        closing = None
        with self._lock:
            episode.open_calls -= 1
            if episode.ending is not None and not episode.open_calls and episode in self._ending:
                self._ending.discard(episode)
                closing = episode.ending
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
        if closing is not None:
            self._close(episode, *closing)

    def _record_request(self, record: CallRecord) -> None:
        """The request's messages, tools and parameters on the call's span; its tool results
        joined to the tool calls of the episode's step before."""
        call, body = record.call, record.body
        try:
            # (one reading of the request: its messages and its tools)
            request = read_request(body if record.api != "messages" else _tools_only(body))
            messages = record.input_messages = input_messages(record.api, body, request)
            if record.previous is not None:
                self._tool_results(record.previous, messages)
            fields = {"input_messages": messages} if messages else {}
            tools = request.get("tool_definitions")
            if tools is not None:
                fields["tool_definitions"] = tools
            call.record(**fields)
            for key, value in request_parameters(body).items():
                call.set_attribute(key, value)
            call.set_attribute(STREAMED, bool(body.get("stream")))
        except Exception:
            logger.exception("agenttrace gateway: recording a request")

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


def input_messages(api: str, body: dict[str, Any], request: Any = None) -> list[Any]:
    """The request's messages as chat messages, whatever the API (``request``: the body's
    :func:`read_request`, when already read)."""
    if api == "messages":
        return anthropic_messages(body.get("system"), body.get("messages"))
    messages = (request if request is not None else read_request(body)).get("input_messages")
    if isinstance(messages, str):  # a legacy completion's prompt
        return [{"role": "user", "content": messages}]
    return list(messages) if isinstance(messages, list) else []


def _tools_only(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic request's tools, for :func:`read_request` (its messages are read apart)."""
    return {"tools": body["tools"]} if "tools" in body else {}


def new_episode_id() -> str:
    return uuid.uuid4().hex
