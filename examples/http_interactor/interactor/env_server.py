"""The environment server: a pool of env actors behind HTTP (aiohttp), one process.

Each env actor plays one episode at a time of a small text task ("What is a + b?"):

* ``POST /actors/{actor}/reset`` ``{"task": {...}}`` -> ``{"session_id", "observation"}``
* ``GET  /actors/{actor}/prompt`` -> ``{"messages": [...]}`` (the chat so far, for the LLM)
* ``POST /actors/{actor}/step`` ``{"session_id", "action"}`` -> ``{"observation", "reward",
  "terminated", "truncated", "info": {"env_state": {...}}}``

Reward 1 for the right sum (the episode terminates), -0.1 for a wrong one; after
``max_turns`` wrong answers the episode is truncated. Run it as
``python -m interactor.env_server --actors 3``: it binds 127.0.0.1 on a port the OS picks,
prints ``LISTENING <port>`` and serves until SIGTERM or SIGINT, then exits normally.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys

from aiohttp import web

from interactor.envs import SumEnv


def make_app(n_actors: int) -> web.Application:
    actors = {str(i): SumEnv() for i in range(n_actors)}
    routes = web.RouteTableDef()

    def actor_of(request: web.Request) -> SumEnv:
        actor = actors.get(request.match_info["actor"])
        if actor is None:
            raise web.HTTPNotFound(text=f"no env actor {request.match_info['actor']}")
        return actor

    @routes.post("/actors/{actor}/reset")
    async def reset(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(actor_of(request).reset(body["task"]))

    @routes.get("/actors/{actor}/prompt")
    async def prompt(request: web.Request) -> web.Response:
        return web.json_response({"messages": actor_of(request).prompt()})

    @routes.post("/actors/{actor}/step")
    async def step(request: web.Request) -> web.Response:
        body = await request.json()
        actor = actor_of(request)
        if body.get("session_id") != actor.session_id:
            raise web.HTTPConflict(text="stale session")
        try:
            return web.json_response(actor.step(body["action"]))
        except ValueError as exc:
            raise web.HTTPConflict(text=str(exc)) from None

    @routes.get("/health")
    async def health(request: web.Request) -> web.Response:
        return web.json_response({"actors": sorted(actors)})

    app = web.Application()
    app.add_routes(routes)
    return app


async def serve(n_actors: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    runner = web.AppRunner(make_app(n_actors), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=2, help="env actors to serve")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.actors))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
