"""The gateway as a server: its routes on the shared HTTP stack, its episodes, its address.

:class:`Gateway` serves :mod:`agenttrace.gateway.proxy` from a background thread
(:class:`~agenttrace.collect.http_server.BackgroundHttpServer`): ``agenttrace gateway`` runs
one in the foreground, ``agenttrace run`` one for its child, and ``agenttrace collect
--gateway`` mounts the same routes beside its own. Its spans go through the process's
agenttrace pipeline.
"""

from __future__ import annotations

from typing import Any

from agenttrace.collect.http_server import BackgroundHttpServer, is_loopback
from agenttrace.gateway.proxy import GatewaySettings, add_gateway_routes
from agenttrace.gateway.recorder import EpisodeBook

__all__ = ["Gateway", "check_exposure"]

DEFAULT_ADDRESS = "127.0.0.1:4000"


def check_exposure(host: str, settings: GatewaySettings, *, exposed: bool) -> None:
    """Listening beyond loopback needs the explicit flag and a key clients must send."""
    if is_loopback(host):
        return
    if not exposed:
        raise ValueError(
            f"the gateway listens on 127.0.0.1 unless told otherwise: {host} needs --expose "
            "(and --key, which clients must send)"
        )
    if not settings.key:
        raise ValueError(f"listening on {host} needs --key: clients must send it")


class Gateway:
    """A capture gateway on ``host:port`` (port 0: a free one)."""

    def __init__(
        self, settings: GatewaySettings, host: str = "127.0.0.1", port: int = 4000, *,
        exposed: bool = False,
    ) -> None:  # fmt: skip
        check_exposure(host, settings, exposed=exposed)
        self.settings = settings
        self.book = EpisodeBook(idle_timeout=settings.idle_timeout)
        self.server = BackgroundHttpServer(host, port, self.add_routes, name="agenttrace gateway")

    def add_routes(self, app: Any) -> None:
        add_gateway_routes(app, self.settings, self.book)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> Gateway:
        self.server.start()
        return self

    def stop(self) -> None:
        """Stop listening; open episodes end (their status as their steps say)."""
        self.server.stop()
        self.book.end_all()
