"""The gateway's HTTP side: model API calls forwarded to the upstream and recorded on the way.

Requests are forwarded as they came (the client's auth header passes through and is never
recorded); answers come back unchanged: a streamed one chunk by chunk as the upstream sends
it, with a copy going to a :class:`~agenttrace.gateway.streams.StreamCapture` once the chunk
is on its way to the client. Recording stays off the client's wait: a request goes upstream
before its spans open (they open while the upstream works), and its content and answer are
recorded once the client has the whole answer (benchmarks/gateway.py measures what is left).
Upstream errors pass through with their status and body and end the call's step errored; an
upstream that does not answer in time gives 504. With ``tokens`` on, Chat Completions and
completion requests also ask a vLLM or SGLang upstream for token ids and logprobs, and what the
client did not ask for is taken out of the answer before it gets it.

Besides the model APIs (:mod:`agenttrace.gateway.routes`), an episode prefix takes
``POST .../score`` (a late score, as :func:`agenttrace.score` gives) and ``POST .../end``
(``{"exit_code": N, "reason": "..."}``: how the agent ended), and verl's
``POST /sessions/<id>/reward_info``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import agenttrace as at
from agenttrace.gateway.recorder import (
    EpisodeBook,
    UpstreamError,
    input_messages,
    new_episode_id,
)
from agenttrace.gateway.routes import DEFAULT_PREFIXES, Route, Router, episode_from_headers
from agenttrace.gateway.streams import StreamCapture

__all__ = ["GatewaySettings", "add_gateway_routes"]

logger = logging.getLogger("agenttrace")

#: Headers never forwarded either way (hop by hop, or recomputed by aiohttp).
_HOP_HEADERS = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
        "content-encoding",
    }
)  # fmt: skip
_TOKEN_FIELDS = ("prompt_token_ids", "token_ids")


@dataclass
class GatewaySettings:
    """How the gateway forwards and records (``agenttrace gateway --help`` per flag)."""

    upstream: str
    prefixes: tuple[str, ...] = DEFAULT_PREFIXES
    #: Ask the upstream for token ids and logprobs (vLLM, SGLang) and record them.
    tokens: bool = False
    timeout: float = 600.0
    idle_timeout: float = 300.0
    #: Clients must send this key (``Authorization: Bearer``, or ``x-api-key``); required to
    #: listen beyond loopback. The upstream then gets ``upstream_key`` instead.
    key: str | None = None
    upstream_key: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)


def add_gateway_routes(app: Any, settings: GatewaySettings, book: EpisodeBook) -> None:
    """The gateway's routes on an aiohttp application (standalone, or beside collect's)."""
    from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

    router = Router(settings.prefixes)
    upstream = settings.upstream.rstrip("/")
    if upstream.endswith("/v1"):
        upstream = upstream[:-3]
    sessions: list[Any] = []  # the one client session, made on the server's loop
    expiry: list[Any] = []  # the task ending idle episodes

    async def open_session(app: Any) -> None:
        # No limit on connections to the upstream (aiohttp's default is 100): every call an
        # agent makes goes upstream at once, as it would without the gateway, none queued.
        sessions.append(
            ClientSession(
                connector=TCPConnector(limit=0),
                timeout=ClientTimeout(total=None, sock_read=settings.timeout),
            )
        )

    async def close_session(app: Any) -> None:
        for session in sessions:
            await session.close()
        book.end_all()

    def refused(request: web.Request) -> web.Response | None:
        if settings.key is None:
            return None
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "")
        given = given.removeprefix("Bearer ").strip()
        if hmac.compare_digest(given.encode(), settings.key.encode()):
            return None
        return web.json_response(
            {"error": {"message": "agenttrace gateway: missing or wrong key"}}, status=401
        )

    async def handle(request: web.Request) -> web.StreamResponse:
        denied = refused(request)
        if denied is not None:
            return denied
        route = router.route(request.path)
        if route is None:
            return await episode_endpoint(request)
        body = await request.read()
        return await forward(request, route, body)

    async def episode_endpoint(request: web.Request) -> web.Response:
        found = router.episode_path(request.path)
        if found is None or request.method != "POST":
            return web.json_response({"error": {"message": "not found"}}, status=404)
        episode_id, rest = found
        try:
            payload = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "the body must be JSON"}}, status=400)
        if not isinstance(payload, dict):
            payload = {}
        if rest in ("/score", "/reward_info"):
            value = payload.get("value", payload.get("reward"))
            try:
                at.score(
                    episode_id,
                    value,
                    name=payload.get("name") or "reward",
                    step=payload.get("step"),
                    comment=payload.get("comment"),
                )
            except (TypeError, ValueError) as exc:
                return web.json_response({"error": {"message": str(exc)}}, status=400)
            return web.json_response({"episode_id": episode_id, "scored": True})
        if rest == "/end":
            ended = book.end(
                episode_id,
                exit_code=payload.get("exit_code"),
                reason=str(payload.get("reason") or ""),
            )
            return web.json_response({"episode_id": episode_id, "ended": ended})
        if rest == "/start":
            book.start(episode_id, task_id=payload.get("task_id"), group_id=payload.get("group_id"))
            return web.json_response({"episode_id": episode_id, "started": True})
        return web.json_response({"error": {"message": "not found"}}, status=404)

    async def forward(request: web.Request, route: Route, body: bytes) -> web.StreamResponse:
        arrived = time.perf_counter()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers = {k: v for k, v in headers.items() if not k.lower().startswith("x-agenttrace-")}
        if settings.key is not None:  # the client's key was the gateway's: not the upstream's
            headers = {
                k: v for k, v in headers.items() if k.lower() not in ("authorization", "x-api-key")
            }
            if settings.upstream_key:
                headers["Authorization"] = f"Bearer {settings.upstream_key}"
        headers.update(settings.extra_headers)
        payload: Any = None
        added: tuple[str, ...] = ()
        recorded = request.method == "POST" and bool(body) and route.api != "models"
        if recorded and settings.tokens and route.api in ("chat", "completions"):
            payload = _json_object(body)
            if payload is not None:
                payload, added = _ask_for_tokens(payload)
                body = json.dumps(payload).encode()
        url = upstream + route.upstream_path
        if request.query_string:
            url += "?" + request.query_string
        # The request goes upstream first; its record starts while the upstream works on it.
        sending = asyncio.ensure_future(
            sessions[0].request(request.method, url, data=body or None, headers=headers)
        )
        call = _Call()
        try:
            if recorded:
                for _ in range(2):  # the request's task, then (Python < 3.12) its body's
                    await asyncio.sleep(0)  # writer task, write the request out
                payload = payload if payload is not None else _json_object(body)
                if payload is not None:
                    call.record = start_recording(request, route, payload, arrived)
            try:
                upstream_answer = await sending
            except (asyncio.TimeoutError, OSError) as exc:
                text = f"agenttrace gateway: upstream {url} did not answer: {type(exc).__name__}"
                finish(call, error=UpstreamError(504, text.encode()), status=504)
                return web.json_response({"error": {"message": text}}, status=504)
            async with upstream_answer:
                return await pass_back(request, route, upstream_answer, added, call)
        except BaseException as exc:  # (the client gone, the server stopping, ...)
            sending.cancel()
            finish(call, error=exc if isinstance(exc, Exception) else _ended(exc))
            raise

    async def pass_back(
        request: web.Request,
        route: Route,
        upstream_answer: Any,
        added: tuple[str, ...],
        call: _Call,
    ) -> web.StreamResponse:
        """The upstream's answer to the client, then to the record."""
        out_headers = {
            k: v for k, v in upstream_answer.headers.items() if k.lower() not in _HOP_HEADERS
        }
        status = upstream_answer.status
        if upstream_answer.content_type != "text/event-stream":
            data = await upstream_answer.read()
            answered_at = time.perf_counter()
            shown = _stripped(data, added) if added and status < 400 else data
            response = web.Response(status=status, body=shown, headers=out_headers)

            def record_it() -> None:
                answer = None
                if status < 400 and call.record is not None:
                    answer = _json_object(data)
                error = UpstreamError(status, data) if status >= 400 else None
                finish(call, answer=answer, error=error, status=status, answered_at=answered_at)

            if _callers_own(call):  # its episode may end as soon as the caller has the answer
                record_it()
            try:  # the client's answer first; the record after
                await response.prepare(request)
                await response.write_eof()
            finally:
                record_it()
            return response
        response = web.StreamResponse(status=status, headers=out_headers)
        await response.prepare(request)
        capture = StreamCapture(route.api) if call.record is not None else None
        stripper = _EventStripper(added) if added else None
        error: BaseException | None = None
        answered_at = None
        try:
            try:
                async for chunk in upstream_answer.content.iter_any():
                    shown = stripper.feed(chunk) if stripper is not None else chunk
                    if shown:
                        await response.write(shown)
                    if capture is not None:  # the record's copy, once the client has it
                        capture.feed(chunk)
                if stripper is not None:
                    rest = stripper.flush()
                    if rest:
                        await response.write(rest)
            except (asyncio.TimeoutError, OSError, ConnectionError) as exc:
                error = exc
            answered_at = time.perf_counter()
            if _callers_own(call) and capture is not None:  # (see the unstreamed case)
                finish(call, answer=capture.result(), error=error, status=status,
                       first_event_at=capture.first_event_at, answered_at=answered_at)  # fmt: skip
            await response.write_eof()
        except BaseException as exc:
            if error is None:
                error = exc if isinstance(exc, Exception) else _ended(exc)
            raise
        finally:
            if capture is not None:
                if error is None and status >= 400:
                    error = UpstreamError(status, b"")
                finish(
                    call,
                    answer=capture.result(),
                    error=error,
                    status=status,
                    first_event_at=capture.first_event_at,
                    answered_at=answered_at,
                )
        return response

    def _callers_own(call: _Call) -> bool:
        """A traced caller's call: it joins the caller's episode, which the caller may end
        the moment it has the answer, so the record must be closed before it does."""
        return call.record is not None and call.record.episode_id is None

    def finish(call: _Call, **outcome: Any) -> None:
        """Close the call's record (once: the first outcome stands)."""
        record, call.record = call.record, None
        if record is not None:
            book.finish_call(record, **outcome)

    def start_recording(
        request: web.Request, route: Route, payload: dict[str, Any], arrived: float
    ) -> Any:
        episode_id, task_id, group_id = episode_from_headers(request.headers)
        episode_id = route.episode_id or episode_id
        headers = None
        try:
            if episode_id is None and "traceparent" in request.headers:
                headers = dict(request.headers)  # joins the traced caller's episode
            elif episode_id is None:
                episode_id = book.continued(input_messages(route.api, payload))
                episode_id = episode_id or new_episode_id()
            return book.start_call(
                route.api,
                payload,
                episode_id=episode_id,
                task_id=task_id,
                group_id=group_id,
                headers=headers,
                started=arrived,
            )
        except Exception:  # recording never stops a call
            logger.exception("agenttrace gateway: could not record a call")
            return None

    async def expire(app: Any) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(min(5.0, settings.idle_timeout / 4))
                book.end_idle(time.monotonic())

        expiry.append(asyncio.get_running_loop().create_task(loop()))

    async def stop_expiry(app: Any) -> None:
        for task in expiry:
            task.cancel()

    app.on_startup.append(open_session)
    app.on_startup.append(expire)
    app.on_cleanup.append(stop_expiry)
    app.on_cleanup.append(close_session)
    app.router.add_route("*", "/{tail:.*}", handle)


def _ended(exc: BaseException) -> Exception:
    """What a call's record says when it was cut by a cancellation (the server stopping)."""
    return ConnectionAbortedError(f"the call was cut: {type(exc).__name__}")


class _Call:
    """A call's record on its way through :func:`add_gateway_routes`' handlers (None: not
    recorded, or already finished)."""

    __slots__ = ("record",)

    def __init__(self) -> None:
        self.record: Any = None


def _ask_for_tokens(payload: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The request asking also for token ids and logprobs; which of them the client did not
    ask for (to take out of the answer)."""
    asked = dict(payload)
    added = []
    if not payload.get("return_token_ids"):
        asked["return_token_ids"] = True
        added.append("token_ids")
    if not payload.get("logprobs"):
        asked["logprobs"] = True
        added.append("logprobs")
    return asked, tuple(added)


def _json_object(body: bytes) -> dict[str, Any] | None:
    """A request body's JSON object (None: not one)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _stripped(data: bytes, added: tuple[str, ...]) -> bytes:
    """A whole answer without what the gateway asked for, not the client (as it came when it
    is no JSON object)."""
    try:
        answer = json.loads(data)
    except ValueError:
        return data
    if not isinstance(answer, dict):
        return data
    _strip(answer, added)
    return json.dumps(answer).encode()


def _strip(answer: dict[str, Any], added: tuple[str, ...]) -> None:
    """Take out of an answer (or a stream chunk) what the gateway asked for, not the client."""
    if "token_ids" in added:
        answer.pop("prompt_token_ids", None)
    for choice in answer.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if "token_ids" in added:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
        if "logprobs" in added and "logprobs" in choice:
            choice["logprobs"] = None


class _EventStripper:
    """Rewrites a stream's events without the fields the gateway added (whole events only)."""

    def __init__(self, added: tuple[str, ...]) -> None:
        self.added = added
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = b""
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            out += self._rewrite(event) + b"\n\n"
        return out

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return self._rewrite(rest) if rest else b""

    def _rewrite(self, event: bytes) -> bytes:
        lines = event.split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b"data:") and line[5:].strip() not in (b"", b"[DONE]"):
                try:
                    chunk = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(chunk, dict):
                    _strip(chunk, self.added)
                    lines[i] = b"data: " + json.dumps(chunk).encode()
        return b"\n".join(lines)
