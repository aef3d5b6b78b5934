"""The viewer's HTTP side: the page, its JSON API and the live events, on the shared aiohttp
stack (:class:`~agenttrace.collect.http_server.BackgroundHttpServer`).

Read only: every route is a GET. It listens on 127.0.0.1 unless told otherwise; another
interface needs ``exposed=True`` and a token, which each request must carry (``?token=``, an
``Authorization: Bearer`` header, or the cookie the page gets when opened with ``?token=``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agenttrace._version import __version__
from agenttrace.collect.http_server import BackgroundHttpServer, aiohttp_web, is_loopback
from agenttrace.view import queries
from agenttrace.view.index import EpisodeIndex

__all__ = ["STATIC", "ViewServer", "check_exposure", "trace_link"]

STATIC = Path(__file__).parent / "static"
COOKIE = "agenttrace_view_token"
#: Seconds between the comments that keep an idle event stream open through proxies.
KEEPALIVE = 15.0
#: Seconds at least between two events to one page (the batches between are one event).
EVENT_GAP = 0.5


def check_exposure(host: str, token: str | None, *, exposed: bool) -> None:
    """Listening beyond loopback needs the explicit flag and a token."""
    if is_loopback(host):
        return
    if not exposed:
        raise ValueError(
            f"the viewer listens on 127.0.0.1 unless told otherwise: {host} needs --expose "
            "(and a token, which every request must carry)"
        )
    if not token:
        raise ValueError(f"listening on {host} needs a token")


def trace_link(template: str | None, trace_id: str | None, episode_id: str) -> str | None:
    """The trace's page in Jaeger, Tempo or Phoenix: ``template`` with ``{trace_id}`` (and
    ``{episode_id}``) filled in."""
    if not template or not trace_id:
        return None
    return template.replace("{trace_id}", quote(trace_id, safe="")).replace(
        "{episode_id}", quote(episode_id, safe="")
    )


def _clean(value: Any) -> Any:
    """JSON without NaN or infinities (the page's JSON.parse refuses them): as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    return value


def _json_response(web: Any, data: Any, status: int = 200) -> Any:
    body = json.dumps(_clean(data), allow_nan=False, separators=(",", ":"))
    return web.Response(text=body, status=status, content_type="application/json")


class ViewServer:
    """``agenttrace view``'s server over ``sources``; :meth:`start` indexes and listens."""

    def __init__(
        self,
        sources: list[str | Path],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        follow: bool = True,
        trace_url: str | None = None,
        token: str | None = None,
        exposed: bool = False,
        poll: float = 0.5,
    ) -> None:
        check_exposure(host, token, exposed=exposed)
        self.index = EpisodeIndex(sources, follow=follow, poll=poll)
        self.trace_url = trace_url
        self.token = token
        self.server = BackgroundHttpServer(host, port, self._add_routes, name="agenttrace view")
        self._streams: set[asyncio.Queue] = set()

    @property
    def url(self) -> str:
        return self.server.url + "/"

    def start(self) -> ViewServer:
        self.server.start()  # (first: the index's reading thread would slow its start down)
        self.index.listen(self._indexed)
        self.index.start()
        return self

    def stop(self) -> None:
        self.index.stop()
        for stream in list(self._streams):  # end the event streams: stop waits for them
            self.server.call_soon(stream.put_nowait, None)
        self.server.stop()

    # --- events -------------------------------------------------------------------------

    def _event(self, added: int) -> dict[str, Any]:
        return {"episodes": len(self.index.rows), "indexing": self.index.indexing, "added": added}

    def _indexed(self, added: int) -> None:
        if not self._streams:
            return
        event = self._event(added)
        for stream in list(self._streams):
            self.server.call_soon(stream.put_nowait, event)

    # --- routes -------------------------------------------------------------------------

    def _add_routes(self, app: Any) -> None:
        web = aiohttp_web("agenttrace view")

        @web.middleware
        async def guard(request: Any, handler: Any) -> Any:
            if request.method not in ("GET", "HEAD"):
                return _json_response(web, {"error": "the viewer is read only"}, 405)
            if self.token is not None and not self._allowed(request):
                return _json_response(web, {"error": "missing or wrong token"}, 401)
            try:
                response = await handler(request)
            except ValueError as exc:  # a bad query parameter
                return _json_response(web, {"error": str(exc)}, 400)
            given = request.query.get("token")
            if self.token is not None and given:
                response.set_cookie(COOKIE, given, httponly=True, samesite="Strict")
            return response

        app.middlewares.append(guard)
        router = app.router
        router.add_get("/", self._page)
        router.add_static("/static/", STATIC, follow_symlinks=False)
        router.add_get("/api/info", self._info)
        router.add_get("/api/episodes", self._episodes)
        router.add_get("/api/summary", self._summary)
        router.add_get("/api/plots", self._plots)
        router.add_get("/api/episode/{key}", self._episode)
        router.add_get("/api/compare/runs", self._compare_runs)
        router.add_get("/api/compare/episodes", self._compare_episodes)
        router.add_get("/events", self._events)

    def _allowed(self, request: Any) -> bool:
        assert self.token is not None
        header = request.headers.get("Authorization", "")
        given = (
            request.query.get("token")
            or (header[len("Bearer ") :] if header.startswith("Bearer ") else "")
            or request.cookies.get(COOKIE, "")
        )
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def _page(self, request: Any) -> Any:
        web = aiohttp_web("agenttrace view")
        return web.FileResponse(STATIC / "index.html")

    async def _info(self, request: Any) -> Any:
        index = self.index
        values, episodes = index.column_values()
        info = {
            "sources": [str(source) for source in index.sources],
            "runs": list(values.runs),
            "episodes": episodes,
            "indexing": index.indexing,
            "following": index.follow,
            "trace_url": self.trace_url,
            "statuses": sorted(values.statuses),
            "tasks": sorted(values.tasks)[:1000],
            "groups": len(values.groups),
            "scores": sorted(values.scores),
            "problems": index.problem_count,
            "first_problems": index.problems,
            "version": __version__,
        }
        return _json_response(aiohttp_web("agenttrace view"), info)

    async def _episodes(self, request: Any) -> Any:
        query = request.query
        filters = queries.Filters.from_query(query)
        sort = query.get("sort") or "key"
        result = queries.page(
            self.index.snapshot(),
            filters,
            sort=sort,
            descending=query.get("order") == "desc",
            offset=_integer(query.get("offset"), "offset", 0),
            limit=_integer(query.get("limit"), "limit", 50),
        )
        return _json_response(aiohttp_web("agenttrace view"), result)

    async def _summary(self, request: Any) -> Any:
        filters = queries.Filters.from_query(request.query)
        result = queries.summary(self.index.snapshot(), filters)
        return _json_response(aiohttp_web("agenttrace view"), result)

    async def _plots(self, request: Any) -> Any:
        filters = queries.Filters.from_query(request.query)
        result = queries.plots(self.index.snapshot(), filters)
        return _json_response(aiohttp_web("agenttrace view"), result)

    def _episode_json(self, key: int) -> dict[str, Any] | None:
        row = self.index.row(key)
        trajectory = self.index.trajectory(key) if row is not None else None
        if row is None or trajectory is None:
            return None
        return {
            "key": key,
            "run": row.run,
            "source": self.index.source_of(row),
            "trace_link": trace_link(self.trace_url, trajectory.trace_id, row.episode_id),
            "trajectory": trajectory.to_dict(),
        }

    async def _episode(self, request: Any) -> Any:
        web = aiohttp_web("agenttrace view")
        key = _integer(request.match_info["key"], "episode key", -1)
        found = await asyncio.get_running_loop().run_in_executor(None, self._episode_json, key)
        if found is None:
            return _json_response(web, {"error": f"no episode {key}"}, 404)
        return _json_response(web, found)

    async def _compare_runs(self, request: Any) -> Any:
        web = aiohttp_web("agenttrace view")
        run_a, run_b = request.query.get("a"), request.query.get("b")
        if not run_a or not run_b:
            raise ValueError("give two runs: ?a=RUN&b=RUN")
        rows = self.index.snapshot()
        runs = self.index.column_values()[0].runs
        unknown = [run for run in (run_a, run_b) if run not in runs]
        if unknown:
            known = ", ".join(list(runs)[:20]) or "none yet"
            return _json_response(web, {"error": f"no run {unknown[0]!r} (runs: {known})"}, 404)
        return _json_response(web, queries.compare_runs(rows, run_a, run_b))

    async def _compare_episodes(self, request: Any) -> Any:
        web = aiohttp_web("agenttrace view")
        key_a = _integer(request.query.get("a"), "a", -1)
        key_b = _integer(request.query.get("b"), "b", -1)

        def both() -> dict[str, Any] | None:
            a, b = self.index.trajectory(key_a), self.index.trajectory(key_b)
            if a is None or b is None:
                return None
            return {
                "a": self._episode_json(key_a),
                "b": self._episode_json(key_b),
                **queries.compare_episodes(a, b),
            }

        found = await asyncio.get_running_loop().run_in_executor(None, both)
        if found is None:
            return _json_response(web, {"error": f"no episode {key_a} or {key_b}"}, 404)
        return _json_response(web, found)

    async def _events(self, request: Any) -> Any:
        """Server-sent events: ``indexed`` at connect and after each batch of new rows."""
        web = aiohttp_web("agenttrace view")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        stream: asyncio.Queue = asyncio.Queue()
        self._streams.add(stream)
        try:
            await response.write(_sse("indexed", self._event(0)))
            closing = False
            while not closing:
                try:
                    event = await asyncio.wait_for(stream.get(), KEEPALIVE)
                except asyncio.TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if event is None:
                    break
                while not stream.empty():  # a burst of batches is one event
                    newer = stream.get_nowait()
                    if newer is None:
                        closing = True
                        break
                    event = {**newer, "added": event["added"] + newer["added"]}
                await response.write(_sse("indexed", event))
                # at most one event per EVENT_GAP: a page refreshes on each, and a large run
                # being indexed adds rows ten times a second
                await asyncio.sleep(EVENT_GAP)
        except ConnectionResetError:  # the page went away
            pass
        finally:
            self._streams.discard(stream)
        return response


def _sse(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _integer(value: str | None, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {value!r}") from None
