"""Running ``agenttrace collect``: the collector, its HTTP and gRPC receivers and its metrics,
until a signal (or the caller) stops it.

:class:`CollectService` starts everything on a thread of its own (an asyncio loop for aiohttp;
grpcio has its own threads), so tests and programs can run it in-process; the command line
runs it in the foreground (:func:`run_forever`). Its metrics go through the OpenTelemetry
metrics API (observable instruments on the meter provider given, else the global one):
spans received and rejected, open episodes, episodes written, requests refused while busy,
late spans.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agenttrace.collect.collector import Collector, CollectSettings
from agenttrace.collect.http_server import (
    BackgroundHttpServer,
    parse_address,
    serving_until_signalled,
)
from agenttrace.collect.receivers import add_trace_routes, start_grpc_server

__all__ = ["CollectService", "parse_address", "run_forever"]

DEFAULT_HTTP = "127.0.0.1:4318"
DEFAULT_GRPC = "127.0.0.1:4317"


class CollectService:
    """The collector and its receivers. ``http`` / ``grpc``: ``host:port`` to listen on (port
    0: a free one, see :attr:`http_port`), or None for none."""

    def __init__(
        self,
        settings: CollectSettings,
        *,
        http: str | None = DEFAULT_HTTP,
        grpc: str | None = DEFAULT_GRPC,
        meter_provider: Any = None,
        extra_routes: Any = None,
    ) -> None:
        if http is None and grpc is None:
            raise ValueError("collect needs at least one receiver (HTTP or gRPC)")
        self.settings = settings
        self.collector = Collector(settings)
        self._http = parse_address(http) if http is not None else None
        self._grpc = grpc
        if self._grpc is not None:
            parse_address(self._grpc)
        self._meter_provider = meter_provider
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._extra_routes = extra_routes  # (app) -> None: the gateway, mounted beside
        self._server: BackgroundHttpServer | None = None
        self._grpc_server: Any = None
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agenttrace-collect")
        self._instruments: list[Any] = []

    def start(self) -> CollectService:
        """Recover from the span log, then listen. Raises what stopped it from starting."""
        if self._http is not None:
            host, port = self._http
            self._server = BackgroundHttpServer(
                host, port, self._add_routes, name="agenttrace collect"
            )
        self.collector.start()
        try:
            if self._grpc is not None:
                self._grpc_server, self.grpc_port = start_grpc_server(self.collector, self._grpc)
            if self._server is not None:
                self.http_port = self._server.start().port
            self._observe()
        except BaseException:
            self.stop()
            raise
        return self

    def addresses(self) -> list[str]:
        """Where it listens, for people: the OTLP/HTTP URL and the gRPC address."""
        where = []
        if self._http is not None and self.http_port is not None:
            where.append(f"OTLP/HTTP http://{self._http[0]}:{self.http_port}/v1/traces")
        if self._grpc is not None and self.grpc_port is not None:
            where.append(f"OTLP/gRPC {self._grpc.rpartition(':')[0]}:{self.grpc_port}")
        return where

    def _add_routes(self, app: Any) -> None:
        add_trace_routes(app, self.collector, self._executor)
        if self._extra_routes is not None:
            self._extra_routes(app)

    def stop(self) -> None:
        """Stop listening, then stop the collector (what it holds is written or logged)."""
        if self._grpc_server is not None:
            self._grpc_server.stop(grace=2).wait(5)
            self._grpc_server = None
        if self._server is not None:
            self._server.stop()
        self._executor.shutdown(wait=True)
        self.collector.close()

    def _observe(self) -> None:
        """The service's metrics, read from the collector's counters when collected."""
        from opentelemetry import metrics

        meter = metrics.get_meter("agenttrace.collect", meter_provider=self._meter_provider)
        collector = self.collector

        def reading(key: str) -> Any:
            def callback(options: Any) -> list[Any]:
                value = collector.health()[key]
                if isinstance(value, dict):  # episodes written, by status
                    return [metrics.Observation(n, {"status": s}) for s, n in value.items()]
                return [metrics.Observation(value)]

            return callback

        counters = {
            "agenttrace.collect.spans.received": ("spans_received", "{span}"),
            "agenttrace.collect.spans.rejected": ("spans_rejected", "{span}"),
            "agenttrace.collect.spans.late": ("late_spans", "{span}"),
            "agenttrace.collect.requests.refused": ("requests_refused_busy", "{request}"),
            "agenttrace.collect.episodes.written": ("episodes_written", "{episode}"),
        }
        for name, (key, unit) in counters.items():
            self._instruments.append(
                meter.create_observable_counter(name, [reading(key)], unit=unit)
            )
        self._instruments.append(
            meter.create_observable_up_down_counter(
                "agenttrace.collect.episodes.open", [reading("open_episodes")], unit="{episode}"
            )
        )


def run_forever(
    service: CollectService,
    announce: Any = print,
    *,
    on_started: Any = None,
    on_stopping: Any = None,
) -> None:
    """Start ``service`` and serve until SIGINT or SIGTERM, then stop it cleanly.
    ``on_started(service)`` runs once it listens, ``on_stopping()`` before it stops (what is
    mounted beside it: the gateway's spans go to the service, so they must flush first)."""
    with serving_until_signalled() as wait_for_signal:
        try:
            service.start()
            if on_started is not None:
                on_started(service)
            announce(
                f"agenttrace collect: listening on {', '.join(service.addresses())}; writing to "
                f"{service.settings.out} (health: /health; Ctrl-C to stop)"
            )
            wait_for_signal()
            announce("agenttrace collect: stopping")
        finally:
            try:
                if on_stopping is not None:
                    on_stopping()
            finally:
                service.stop()
