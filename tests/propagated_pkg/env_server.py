"""An env server: ``CountEnv`` over HTTP (aiohttp), one env per session.

``python -m propagated_pkg.env_server`` binds 127.0.0.1 on a port the OS picks, prints
``PORT <port>`` and serves until SIGTERM, then exits normally.
"""

from __future__ import annotations

import asyncio
import signal
import socket

from aiohttp import web

from propagated_pkg.count_env import CountEnv


def make_app() -> web.Application:
    envs: dict[str, CountEnv] = {}

    async def reset(request: web.Request) -> web.Response:
        body = await request.json()
        env = envs[body["session"]] = CountEnv()
        return web.json_response(env.reset(body["seed"]))

    async def step(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(envs[body["session"]].step(body["action"]))

    async def headers(request: web.Request) -> web.Response:
        return web.json_response({k.lower(): v for k, v in request.headers.items()})

    app = web.Application()
    app.add_routes(
        [web.post("/reset", reset), web.post("/step", step), web.get("/headers", headers)]
    )
    return app


async def serve() -> None:
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("PORT", sock.getsockname()[1], flush=True)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve())
