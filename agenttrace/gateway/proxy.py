"""The gateway's HTTP side: model API calls forwarded to the upstream and recorded on the way.

Requests are forwarded as they came (the client's auth header passes through and is never
recorded); answers come back unchanged: a streamed one chunk by chunk as the upstream sends
it, with a copy going to a :class:`~agenttrace.gateway.streams.StreamCapture`. Upstream errors
pass through with their status and body and end the call's step errored; an upstream that
does not answer in time gives 504. With ``tokens`` on, Chat Completions and completion
requests also ask a vLLM or SGLang upstream for token ids and logprobs, and what the client
did not ask for is taken out of the answer before it gets it.

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
    from aiohttp import ClientSession, ClientTimeout, web

    router = Router(settings.prefixes)
    upstream = settings.upstream.rstrip("/")
    if upstream.endswith("/v1"):
        upstream = upstream[:-3]
    sessions: list[Any] = []  # the one client session, made on the server's loop
    expiry: list[Any] = []  # the task ending idle episodes

    async def open_session(app: Any) -> None:
        sessions.append(
            ClientSession(timeout=ClientTimeout(total=None, sock_read=settings.timeout))
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
        if request.method == "POST" and body:
            try:
                payload = json.loads(body)
            except ValueError:
                payload = None
        record = None
        added: tuple[str, ...] = ()
        if isinstance(payload, dict) and route.api != "models":
            if settings.tokens and route.api in ("chat", "completions"):
                payload, added = _ask_for_tokens(payload)
                body = json.dumps(payload).encode()
            record = start_recording(request, route, payload)
        url = upstream + route.upstream_path
        if request.query_string:
            url += "?" + request.query_string
        session = sessions[0]
        try:
            upstream_answer = await session.request(
                request.method, url, data=body or None, headers=headers
            )
        except (asyncio.TimeoutError, OSError) as exc:
            text = f"agenttrace gateway: upstream {url} did not answer: {type(exc).__name__}"
            if record is not None:
                book.finish_call(record, error=UpstreamError(504, text.encode()), status=504)
            return web.json_response({"error": {"message": text}}, status=504)
        async with upstream_answer:
            out_headers = {
                k: v for k, v in upstream_answer.headers.items() if k.lower() not in _HOP_HEADERS
            }
            streamed = upstream_answer.content_type == "text/event-stream"
            if not streamed:
                data = await upstream_answer.read()
                data = finish_whole(record, upstream_answer.status, data, added)
                return web.Response(status=upstream_answer.status, body=data, headers=out_headers)
            response = web.StreamResponse(status=upstream_answer.status, headers=out_headers)
            await response.prepare(request)
            capture = StreamCapture(route.api) if record is not None else None
            stripper = _EventStripper(added) if added else None
            error: BaseException | None = None
            try:
                async for chunk in upstream_answer.content.iter_any():
                    if capture is not None:
                        capture.feed(chunk)
                    if stripper is not None:
                        chunk = stripper.feed(chunk)
                    if chunk:
                        await response.write(chunk)
                if stripper is not None:
                    rest = stripper.flush()
                    if rest:
                        await response.write(rest)
            except (asyncio.TimeoutError, OSError, ConnectionError) as exc:
                error = exc
            finally:
                if record is not None and capture is not None:
                    status = upstream_answer.status
                    if error is None and status >= 400:
                        error = UpstreamError(status, b"")
                    book.finish_call(
                        record,
                        answer=capture.result(),
                        error=error,
                        status=status,
                        first_event_at=capture.first_event_at,
                    )
            await response.write_eof()
            return response

    def start_recording(request: web.Request, route: Route, payload: dict[str, Any]) -> Any:
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
            )
        except Exception:  # recording never stops a call
            logger.exception("agenttrace gateway: could not record a call")
            return None

    def finish_whole(record: Any, status: int, data: bytes, added: tuple[str, ...]) -> bytes:
        answer = None
        if status < 400:
            try:
                answer = json.loads(data)
            except ValueError:
                answer = None
        if record is not None:
            error = UpstreamError(status, data) if status >= 400 else None
            book.finish_call(record, answer=answer, error=error, status=status)
        if added and isinstance(answer, dict):
            _strip(answer, added)
            data = json.dumps(answer).encode()
        return data

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
