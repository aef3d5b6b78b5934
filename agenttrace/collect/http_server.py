"""One aiohttp application served from a thread of its own: the HTTP stack that
``agenttrace collect``, the capture gateway and the viewer share.

:class:`BackgroundHttpServer` builds the application with the routes it is given, listens on
``host:port`` (port 0: a free one, see :attr:`port`), and runs the event loop until
:meth:`stop`. Tests and programs run it in-process; the commands run it and wait for a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agenttrace._threads import start_daemon
from agenttrace._version import install_hint

__all__ = [
    "BackgroundHttpServer",
    "aiohttp_web",
    "is_loopback",
    "new_event_loop",
    "parse_address",
    "serving_until_signalled",
]

#: Largest request body taken (the SDK batches 512 spans a request; model requests with long
#: conversations and images are larger).
MAX_REQUEST_BYTES = 64 * 1024 * 1024


def aiohttp_web(what: str) -> Any:
    """``aiohttp.web``, or an ImportError that names the ``serve`` extra."""
    try:
        from aiohttp import web
    except ImportError as exc:
        raise ImportError(
            f"{what} needs aiohttp: " + install_hint("serve"), name="aiohttp"
        ) from exc
    return web


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (the ``serve`` extra brings it on Linux and
    macOS: about 0.15 ms less per proxied call, see ``benchmarks/gateway.py``), asyncio's
    otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1, localhost): the servers on this
    stack listen there unless told otherwise, and need a key or token anywhere else."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def parse_address(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); a clear error otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"address {value!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


@contextlib.contextmanager
def serving_until_signalled() -> Iterator[Callable[[], None]]:
    """For the commands that serve until Ctrl-C or SIGTERM: yields ``wait()``, which returns
    once either comes, so the command stops its server cleanly instead of dying mid-write.
    The handlers there before are put back on leaving."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}

    def wait() -> None:
        # Short waits: Python runs a signal handler only between them.
        while not stop.wait(0.5):
            pass

    try:
        yield wait
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class BackgroundHttpServer:
    """An aiohttp application on ``host:port``, served from a daemon thread."""

    def __init__(
        self, host: str, port: int, add_routes: Callable[[Any], None], *, name: str
    ) -> None:
        self.host, self.port = host, port
        self._add_routes = add_routes
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Any = None
        self._started = threading.Event()
        self._failed: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> BackgroundHttpServer:
        """Listen; raises what stopped it (an address in use, aiohttp missing)."""
        aiohttp_web(self._name)
        self._thread = start_daemon(self._serve, name=self._name)
        self._started.wait()
        if self._failed is not None:
            raise self._failed
        return self

    def _serve(self) -> None:
        web = aiohttp_web(self._name)
        loop = self._loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            app = web.Application(client_max_size=MAX_REQUEST_BYTES)
            self._add_routes(app)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # (port 0: the one taken)
        except BaseException as exc:  # handed to start()
            self._failed = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> bool:
        """Run ``callback(*args)`` on the server's loop, from any thread; False when the
        server is not running (nothing is run)."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return False
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # closed in between
            return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
