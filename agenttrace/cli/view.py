"""``agenttrace view``: a local web page over runs, trajectory files, step tables, span
files or trace backends (docs/view.md).

It indexes what the sources hold (through the same loaders as ``inspect`` and ``export``),
serves the page on 127.0.0.1 at a free port, prints the link, and follows the files while a
run writes them. Span files and trace backends are rebuilt into trajectories first, one run
folder each in a temporary folder, by ``agenttrace export``'s own rebuild.
"""

from __future__ import annotations

import argparse
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from agenttrace.cli import export as export_command
from agenttrace.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from agenttrace.collect.http_server import parse_address, serving_until_signalled
from agenttrace.sinks.files import safe_filename
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
        help="runs folder, run folder, trajectory file, step-tables folder, span file, or a "
        "trace backend as for agenttrace export --from (jaeger+http://HOST:16686, "
        "tempo+http://HOST:3200, phoenix+http://HOST:6006/PROJECT); default: agenttrace_runs",
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
        "--service",
        metavar="NAME",
        help="with a trace backend (jaeger+http://..., tempo+..., phoenix+...): the service "
        "whose episodes to rebuild, as for agenttrace export",
    )
    view.add_argument(
        "--since",
        metavar="TIME",
        help="with a trace backend or span file: episodes starting at or after TIME (ISO 8601 "
        "or an age such as 6h), as for agenttrace export",
    )
    view.add_argument(
        "--no-follow",
        dest="follow",
        action="store_false",
        help="index what is there once; do not follow files being written",
    )


#: Sources read from trace storage (``agenttrace export --from`` takes the same).
TRACE_BACKENDS = ("jaeger+", "tempo+", "phoenix+")


def _rebuilt_first(source: str) -> bool:
    """A span file or a trace backend: trajectories are rebuilt from it before viewing."""
    if source.startswith(TRACE_BACKENDS):
        return True
    path = Path(source)
    return path.is_file() and span_paths.sniff(str(path)).is_spans


def _run_name(source: str) -> str:
    """The run a rebuilt source is shown as: a span file's run folder, a backend's address."""
    if source.startswith(TRACE_BACKENDS):
        parts = urlsplit(source.split("+", 1)[1])
        words = f"{source.split('+', 1)[0]}-{parts.netloc}{parts.path}"
        return safe_filename(re.sub(r"[^A-Za-z0-9._-]+", "-", words).strip("-"))
    path = Path(source).resolve()
    return safe_filename(path.parent.name or path.stem)


def _rebuild(source: str, folder: Path, args: argparse.Namespace, err: Console) -> Path | None:
    """Trajectories rebuilt from one source into ``folder``, as ``agenttrace export`` does
    (``--service``, ``--since`` passed on); None when the export failed (it said why)."""
    parser = argparse.ArgumentParser(prog="agenttrace")
    export_command.add_parser(parser.add_subparsers(dest="command"))
    name, number = _run_name(source), 1
    while (folder / name).exists():  # two sources of one name stay two runs
        number += 1
        name = f"{_run_name(source)}-{number}"
    out = folder / name / "trajectories.jsonl"
    out.parent.mkdir(parents=True)
    argv = ["export", "--quiet", "--from", source, "--out", str(out)]
    if args.service:
        argv += ["--service", args.service]
    if args.since:
        argv += ["--since", args.since]
    code = export_command.run(parser.parse_args(argv), Console(stderr=True, quiet=True), err)
    return out.parent if code == EXIT_OK and out.exists() else None


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
        viewed = []
        for source in sources:
            if not _rebuilt_first(source):
                viewed.append(source)
                continue
            err.print(f"agenttrace view: rebuilding trajectories from {source}")
            rebuilt = _rebuild(source, Path(scratch), args, err)
            if rebuilt is None:
                err.print(f"agenttrace view: error: no trajectories could be rebuilt from {source}")
                return EXIT_FAILURE
            viewed.append(str(rebuilt))
        sources = viewed
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
    with serving_until_signalled() as wait_for_signal:
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
            wait_for_signal()
        finally:
            server.stop()
    return EXIT_OK
