"""``agenttrace view``: a local web page over runs, trajectory files or span files
(docs/view.md).

It indexes what the sources hold (through the same loaders as ``inspect`` and ``export``),
serves the page on 127.0.0.1 at a free port, prints the link, and follows the files while a
run writes them. Span files are rebuilt into trajectories first, in a temporary folder, as
``agenttrace export`` would.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

from rich.console import Console

from agenttrace.cli import export as export_command
from agenttrace.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from agenttrace.collect.http_server import parse_address
from agenttrace.storage import span_paths

EPILOG = (
    "Exit status: 0 stopped cleanly (Ctrl-C or SIGTERM); 1 it could not start (no such source, "
    "an address in use, aiohttp missing) or a span file could not be rebuilt; 2 bad arguments "
    "(an address beyond loopback without --expose)."
)


def add_parser(commands: Any) -> None:
    view = commands.add_parser(
        "view",
        help="look at runs and episodes in your browser (a local page, no servers to set up)",
        description="A local web page over runs folders, run folders, trajectory files "
        "(.jsonl, .jsonl.gz, .json, .parquet) or span files: episodes table, one episode's "
        "steps and transcript, plots, two runs or two episodes compared (docs/view.md).",
        epilog=EPILOG,
    )
    view.add_argument(
        "sources",
        nargs="*",
        default=["agenttrace_runs"],
        metavar="PATH",
        help="runs folder, run folder, trajectory file or span file (default: agenttrace_runs)",
    )
    view.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1 at a free port)",
    )
    view.add_argument(
        "--expose",
        action="store_true",
        help="allow an address beyond loopback; every request then needs the token",
    )
    view.add_argument(
        "--token",
        metavar="TOKEN",
        help="the token requests must carry with --expose (default: a random one, printed)",
    )
    view.add_argument(
        "--trace-url",
        metavar="TEMPLATE",
        help="link each episode to its trace: a URL with {trace_id}, e.g. "
        "http://localhost:16686/trace/{trace_id} (Jaeger)",
    )
    view.add_argument(
        "--no-follow",
        dest="follow",
        action="store_false",
        help="index what is there once; do not follow files being written",
    )


def _span_sources(sources: list[str]) -> list[str]:
    """The sources that are span files (to rebuild first)."""
    found = []
    for source in sources:
        path = Path(source)
        if path.is_file() and span_paths.sniff(str(path)).is_spans:
            found.append(source)
    return found


def _rebuild(span_files: list[str], folder: Path, err: Console) -> Path | None:
    """Trajectories rebuilt from span files into ``folder``, as ``agenttrace export`` does."""
    parser = argparse.ArgumentParser(prog="agenttrace")
    export_command.add_parser(parser.add_subparsers(dest="command"))
    out = folder / "rebuilt" / "trajectories.jsonl"
    out.parent.mkdir(parents=True)
    argv = ["export", "--quiet", "--out", str(out)]
    for path in span_files:
        argv += ["--from", path]
    args = parser.parse_args(argv)
    quiet = Console(stderr=True, quiet=True)
    code = export_command.run(args, quiet, err)
    return out if code == EXIT_OK and out.exists() else None


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from agenttrace.view.server import ViewServer

    sources = list(args.sources)
    try:
        host, port = parse_address(args.listen)
    except ValueError as exc:
        err.print(f"agenttrace view: error: {exc}")
        return EXIT_USAGE
    token = args.token or (secrets.token_urlsafe(16) if args.expose else None)
    with tempfile.TemporaryDirectory(prefix="agenttrace-view-") as scratch:
        spans = _span_sources(sources)
        if spans:
            err.print(f"agenttrace view: rebuilding trajectories from {len(spans)} span file(s)")
            rebuilt = _rebuild(spans, Path(scratch), err)
            if rebuilt is None:
                err.print("agenttrace view: error: the span files could not be rebuilt")
                return EXIT_FAILURE
            sources = [s for s in sources if s not in spans] + [str(rebuilt)]
        try:
            server = ViewServer(
                sources,
                host,
                port,
                follow=args.follow,
                trace_url=args.trace_url,
                token=token,
                exposed=args.expose,
            )
        except ValueError as exc:
            err.print(f"agenttrace view: error: {exc}")
            return EXIT_USAGE
        except FileNotFoundError as exc:
            err.print(f"agenttrace view: error: {exc}")
            return EXIT_FAILURE
        return _serve(server, token, out, err)


def _serve(server: Any, token: str | None, out: Console, err: Console) -> int:
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server.start()
        except OSError as exc:
            err.print(f"agenttrace view: error: cannot start: {exc}")
            return EXIT_FAILURE
        link = server.url + (f"?token={token}" if token else "")
        out.print(f"agenttrace view: {link}", soft_wrap=True)
        following = "following the files as they grow; " if server.index.follow else ""
        err.print(f"agenttrace view: {following}Ctrl-C to stop")
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
