"""``agenttrace collect``: the service that rebuilds trajectories where the spans of many
processes meet (docs/collect.md). :mod:`agenttrace.collect` does the work."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from rich.console import Console

import agenttrace as at
from agenttrace.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, count
from agenttrace.cli.export_args import int_at_least
from agenttrace.collect.collector import SINK_KINDS, CollectSettings
from agenttrace.collect.http_server import parse_address
from agenttrace.collect.service import DEFAULT_GRPC, DEFAULT_HTTP, CollectService, run_forever
from agenttrace.gateway import Gateway, GatewaySettings
from agenttrace.trajectory.conventions import conventions_from_value

DESCRIPTION = (
    "Receive OTLP traces from any number of processes, in any language (OTLP/HTTP protobuf or "
    "JSON on /v1/traces, OTLP/gRPC), rebuild each episode as its spans arrive and write it "
    "with the sinks. Every request is in the service's span log before it is acknowledged: "
    "after a crash, a restart rebuilds the open episodes from it, and no episode is written "
    "twice. A full queue answers with OTLP's retryable statuses (HTTP 503 with Retry-After, "
    "gRPC UNAVAILABLE). Needs the serve extra (aiohttp) for HTTP."
)


EPILOG = (
    "Exit status: 0 stopped cleanly (SIGINT or SIGTERM); 1 it could not start (an address in "
    "use, an output folder it cannot write, aiohttp missing); 2 bad arguments."
)


def _seconds(value: str) -> float:
    seconds = float(value)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return seconds


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "collect",
        help="a service that receives OTLP spans from many processes and writes trajectories",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="where trajectories go")
    parser.add_argument(
        "--http",
        default=DEFAULT_HTTP,
        metavar="HOST:PORT",
        help="OTLP/HTTP address (default %(default)s); 'none' for no HTTP receiver",
    )
    parser.add_argument(
        "--grpc",
        default=DEFAULT_GRPC,
        metavar="HOST:PORT",
        help="OTLP/gRPC address (default %(default)s); 'none' for no gRPC receiver",
    )
    parser.add_argument(
        "--sinks",
        default="jsonl",
        help=f"comma-separated, from {', '.join(SINK_KINDS)}; jsonl is always written "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--state", metavar="DIR", help="the span log and state (default: OUT/.collect)"
    )
    parser.add_argument(
        "--grace",
        type=_seconds,
        default=2.0,
        metavar="SECONDS",
        help="a complete episode is written once no span joined it for this long "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="an episode no span joined for this long is written as incomplete "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--max-queued-spans",
        type=int_at_least(1, "at least 1"),
        default=100_000,
        metavar="N",
        help="spans waiting for the assembler before requests are refused (retryable; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--conventions",
        metavar="PRESETS",
        help="read other tracers' spans (e.g. openinference, runner); see docs/conventions.md",
    )
    parser.add_argument(
        "--no-sync",
        action="store_true",
        help="do not fsync the span log before answering (survives a crash of the service, "
        "not of the machine)",
    )
    parser.add_argument(
        "--gateway-upstream",
        metavar="URL",
        help="also serve the LLM capture gateway (docs/gateway.md) on the HTTP address, "
        "forwarding to this model server; its episodes are written by this service",
    )
    parser.add_argument(
        "--finish-on-exit",
        action="store_true",
        help="on stop, write open episodes as incomplete instead of keeping them for the "
        "next start",
    )
    return parser


def _loopback(host: str) -> str:
    """How this process reaches its own listening address."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::", "[::]") else host


def _gateway(args: argparse.Namespace) -> Gateway | None:
    """The gateway to mount beside collect's routes (its own server never starts)."""
    upstream = args.gateway_upstream
    if not upstream:
        return None
    if args.http == "none":
        raise ValueError("--gateway-upstream needs the HTTP receiver (it serves the gateway)")
    if parse_address(args.http)[1] == 0:
        raise ValueError("--gateway-upstream needs a fixed --http port (its spans go there)")
    if not upstream.startswith(("http://", "https://")):
        raise ValueError(f"--gateway-upstream {upstream!r} is not an http(s) URL")
    return Gateway(GatewaySettings(upstream=upstream))


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``agenttrace collect``; returns the exit code once stopped."""
    try:
        sinks = tuple(kind.strip() for kind in args.sinks.split(",") if kind.strip())
        if "jsonl" not in sinks:
            sinks = ("jsonl", *sinks)
        settings = CollectSettings(
            out=Path(args.out),
            state=Path(args.state) if args.state else None,
            sinks=sinks,
            grace_seconds=args.grace,
            idle_timeout=args.idle_timeout,
            max_queued_spans=args.max_queued_spans,
            sync=not args.no_sync,
            conventions=conventions_from_value(args.conventions) if args.conventions else None,
            finish_on_exit=args.finish_on_exit,
        )
        gateway = _gateway(args)
        service = CollectService(
            settings,
            http=None if args.http == "none" else args.http,
            grpc=None if args.grpc == "none" else args.grpc,
            extra_routes=gateway.add_routes if gateway is not None else None,
        )
    except ValueError as exc:
        err.print(f"agenttrace collect: error: {exc}")
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if gateway is not None:
        # The gateway's spans go to this very service: configured before it listens, so the
        # first call already records there.
        host, port = parse_address(args.http)
        at.configure(collect=f"http://{_loopback(host)}:{port}")

    def started(service: CollectService) -> None:
        if gateway is not None:
            err.print(
                f"agenttrace collect: LLM gateway on http://{args.http}/v1 -> "
                f"{gateway.settings.upstream}"
            )

    def stopping() -> None:
        if gateway is not None:
            gateway.book.end_all()
            at.shutdown()

    try:
        run_forever(
            service,
            announce=lambda text: err.print(text),
            on_started=started,
            on_stopping=stopping,
        )
    except OSError as exc:  # an address in use, a folder it cannot write
        err.print(f"agenttrace collect: error: cannot start: {exc}")
        return EXIT_FAILURE
    health = service.collector.health()
    written = sum(health["episodes_written"].values())
    err.print(
        f"agenttrace collect: {count(health['spans_received'], 'span')} received, "
        f"{count(written, 'episode')} written, {health['open_episodes']:,} open, "
        f"{health['spans_rejected']:,} rejected, {health['late_spans']:,} late"
    )
    return EXIT_OK
