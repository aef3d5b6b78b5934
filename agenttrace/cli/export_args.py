"""The arguments of ``agenttrace export``: its parser (``--help`` with every form ``--from``
takes), the argument types, and the parsing of ``--episode`` and ``--status`` values (shared
with ``inspect``). :mod:`agenttrace.cli.export` runs the export.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
from collections.abc import Callable
from typing import Any

from agenttrace import semconv as sc
from agenttrace.processing.writer import DEFAULT_MAX_EPISODE_BYTES
from agenttrace.sinks.names import FILE_SUFFIXES
from agenttrace.storage.span_chunks import CHUNK_BYTES
from agenttrace.trajectory.tokens import PER_CHOICES

FORMATS = ("trajectory", "chat", "tokens", "steps", "minari")
ENGINES = ("local", "ray")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


#: ``agenttrace export --help``: every form ``--from`` takes, with an example each. Written
#: out by hand (RawDescriptionHelpFormatter) so the examples stay whole lines; under 80 columns.
SOURCE_HELP = """\
SOURCE (--from) is one of:

  a span file, a folder (its span files) or a glob (quote it)
      OTLP/JSON lines (agenttrace's spans.jsonl, the Collector's file exporter;
      gzip too) or the Collector's length-prefixed protobuf (zstd too), told
      apart by their first bytes. A folder (a run folder) gives its span files
      only, never the trajectories, tables or scores beside them; a file that
      holds trajectories is refused (agenttrace inspect reads it). Files are
      read whole; --service, --since and --until then keep the matching
      episodes.
        --from agenttrace_runs/demo-seed7/spans.jsonl
        --from agenttrace_runs/demo-seed7
        --from 'collector-out/*.jsonl*'

  jaeger+http://HOST:16686
      Jaeger's query API v3 (add ?api=v1 for the v1 API). Needs --service:
      Jaeger searches traces by service.name; --since/--until are the search
      window (default: all time).
        --from jaeger+http://localhost:16686 --service my-trainer --since 6h

  tempo+http://HOST:3200
      Tempo: a TraceQL search for traces with an episode span (of --service
      when given; --query TRACEQL searches with your own), then each trace.
      --since/--until are the search window (default: up to now, as far back
      as Tempo searches by default).
        --from tempo+http://localhost:3200 --service my-trainer --since 2d

  phoenix+http://HOST:6006/PROJECT
      The spans of Phoenix project PROJECT, page by page; --since/--until
      bound the spans' start times. Phoenix has no service search: --service
      keeps the matching episodes after reading.
        --from phoenix+http://localhost:6006/my-project

  Every backend also takes +https (tempo+https://HOST). Authenticate with
  --header KEY=VALUE, AGENTTRACE_EXPORT_HEADERS or AGENTTRACE_EXPORT_TOKEN
  (never printed). Whatever the source, --service keeps the episodes whose
  episode span has that service.name, and --since/--until the episodes that
  start in the window.

Exit status: 0 done (also when the filters left no episode); 1 failed: the
source could not be read, holds no spans or no episode, a package is missing,
or nothing could be rebuilt; 2 usage: bad arguments; 3 partial: written, but
lines, values or episodes that could not be decoded or stored were left out,
each named on stderr; 130 interrupted. A failed export leaves no output
behind (docs/cli.md).
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "export",
        help="rebuild trajectories from stored spans (files, Jaeger, Tempo, Phoenix)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read spans from span files or a trace backend, rebuild each episode with\n"
        "the same assembler the live pipeline uses, and write one .jsonl or .parquet\n"
        "file. "
        "Episodes are written as soon as they are complete; those that never\n"
        "complete are written at the end with status 'incomplete'.",
        epilog=SOURCE_HELP,
    )
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="SOURCE",
        help="where the spans are: span file, folder or glob; jaeger+http://HOST:16686; "
        "tempo+http://HOST:3200; phoenix+http://HOST:6006/PROJECT (see SOURCE below)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="output file: *.jsonl, *.jsonl.gz, *.parquet; a folder for --format steps; for "
        "--format minari, Minari's datasets folder (default: MINARI_DATASETS_PATH, else "
        "~/.minari/datasets)",
    )
    parser.add_argument(
        "--format",
        type=_format,
        choices=FORMATS,
        default="trajectory",
        help="what a row is (the suffix of --out chooses JSON lines or Parquet): "
        "trajectory: one agenttrace trajectory per line/row (default); chat: one row per "
        "model call, OpenAI-style messages with reward columns, for fine-tuning; tokens: "
        "token ids, logprobs and loss masks for RL trainers (docs/tokens.md); steps: typed "
        "step and episode tables (Parquet) in the folder --out names (docs/step-tables.md); "
        "minari: a Minari dataset (--dataset-id, docs/minari.md)",
    )
    parser.add_argument(
        "--tokens-per",
        choices=PER_CHOICES,
        default="episode",
        help="--format tokens: one row per episode (default; model and environment tokens "
        "joined, with a loss mask) or per model call",
    )
    minari = parser.add_argument_group("--format minari")
    minari.add_argument(
        "--dataset-id", metavar="NS/NAME-v0", help="id of the Minari dataset to write"
    )
    minari.add_argument(
        "--env",
        metavar="ID",
        help="gymnasium id whose spaces and spec the dataset records; PACKAGE:ID imports the "
        "package that registers it, as gymnasium.make does (default: the episodes' recorded "
        "rl.env.name when this process can find it, else spaces inferred from values)",
    )
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    narrow = parser.add_argument_group("which episodes")
    narrow.add_argument("--service", metavar="NAME", help="service.name of the episode span")
    narrow.add_argument(
        "--since",
        type=_moment,
        metavar="TIME",
        help="episodes starting at or after TIME: ISO 8601 (2026-11-21T10:00:00Z) or an age "
        "such as 90m, 6h, 2d",
    )
    narrow.add_argument("--until", type=_moment, metavar="TIME", help="episodes starting before")
    narrow.add_argument(
        "--episode",
        action="append",
        default=[],
        metavar="ID",
        help="only this episode id (repeat the option, or @FILE with one id per line)",
    )
    narrow.add_argument(
        "--status",
        action="append",
        default=[],
        metavar="STATUS",
        help="only episodes with this status (repeatable, or comma-separated): "
        + ", ".join(sc.EPISODE_STATUSES),
    )
    narrow.add_argument("--min-return", type=float, metavar="X", help="return >= X")
    narrow.add_argument("--max-return", type=float, metavar="X", help="return <= X")
    dataset = parser.add_argument_group("datasets (docs/cli.md, Datasets)")
    dataset.add_argument(
        "--group-complete",
        action="store_true",
        help="only whole rollout groups (rl.group.id): all rl.group.size episodes of a group "
        "passed the other filters; episodes of no group pass",
    )
    dataset.add_argument(
        "--dedupe",
        action="store_true",
        help="keep the first of the episodes with the same task and the same actions",
    )
    dataset.add_argument(
        "--split",
        metavar="NAME=F,...",
        help="write parts, e.g. train=0.9,test=0.1, to FILE with .NAME before its suffix "
        "(a Minari dataset: NAME-NAME-v0); reproducible with --seed",
    )
    dataset.add_argument(
        "--split-by",
        choices=("episode", "group"),
        default="episode",
        help="split by episode (default) or by rollout group (a group stays in one part)",
    )
    dataset.add_argument("--seed", type=int, default=0, help="seed of --split (default: 0)")
    backend = parser.add_argument_group("backends")
    backend.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="HTTP header for the backend (repeatable); never printed",
    )
    backend.add_argument("--query", metavar="TRACEQL", help="Tempo: search with this TraceQL")
    backend.add_argument(
        "--limit",
        type=int,
        default=1000,
        metavar="N",
        help="traces per backend search (default: 1000)",
    )
    backend.add_argument(
        "--timeout", type=float, default=30.0, metavar="S", help="seconds per request"
    )
    parser.add_argument(
        "--blob-store",
        metavar="URL",
        default=os.environ.get("AGENTTRACE_BLOB_STORE"),
        help="where content replaced by references was put (default: $AGENTTRACE_BLOB_STORE)",
    )
    parser.add_argument(
        "--grace",
        type=_grace,
        default=1000,
        metavar="N",
        help="spans to read after an episode looks complete before writing it, so spans "
        "other processes stored a little later still join it (default: 1000); 'all' writes "
        "every episode at the end (for per-process span files read one after the other; "
        "memory then grows with the input)",
    )
    parser.add_argument(
        "--max-episode-bytes",
        type=int_at_least(1, "at least 1"),
        default=DEFAULT_MAX_EPISODE_BYTES,
        metavar="BYTES",
        help="memory one episode's spans may hold; a longer episode is rebuilt a stretch of "
        "steps at a time, its finished steps kept in a temporary file, as in a live run "
        f"(default: {DEFAULT_MAX_EPISODE_BYTES}, the max_episode_bytes setting's default)",
    )
    parser.add_argument(
        "--conventions",
        metavar="PRESETS|FILE",
        default=os.environ.get("AGENTTRACE_CONVENTIONS"),
        help="read spans other tracers wrote as agenttrace's: presets (runner, genai, "
        "openinference, traceloop, agentlightning) and mapping files, comma-separated "
        "(default: $AGENTTRACE_CONVENTIONS; docs/conventions.md)",
    )
    engine = parser.add_argument_group("engine (docs/cli.md, On Ray)")
    engine.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: this process, one core (default); ray: Ray Data, the input read and "
        "rebuilt in parallel, --out then a folder of parts (part-00000.jsonl, ...) named "
        "like the file would be",
    )
    engine.add_argument(
        "--workers",
        type=int_at_least(1, "at least 1"),
        metavar="N",
        help="--engine ray: tasks at a time, and the CPUs of the Ray it starts (default: "
        "this machine's cores, or the cluster's CPUs with --ray-address)",
    )
    engine.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="--engine ray: the Ray cluster to run on (ray.init's address, e.g. auto or "
        "ray://HOST:10001); default: a local Ray started for the export and stopped after. "
        "Every worker must reach --from and --out",
    )
    engine.add_argument(
        "--partitions",
        type=int_at_least(1, "at least 1"),
        metavar="N",
        help="--engine ray: buckets of traces, each rebuilt by one task into one part of "
        "the output (default: 4 per worker)",
    )
    engine.add_argument(
        "--chunk-bytes",
        type=int_at_least(1, "at least 1"),
        default=CHUNK_BYTES,
        metavar="BYTES",
        help="--engine ray: bytes of a span file one read task takes (OTLP/JSON lines "
        f"files; compressed ones are read whole; default: {CHUNK_BYTES})",
    )
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress, no summary (what was skipped or left out is still said on stderr)",
    )
    return parser


# --- arguments --------------------------------------------------------------------------------


def _moment(text: str) -> _dt.datetime:
    """ISO 8601 (UTC unless it says otherwise) or an age before now (``90m``, ``2d``)."""
    match = _DURATION.fullmatch(text.strip())
    if match:
        seconds = float(match[1]) * _SECONDS[match[2]]
        return _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=seconds)
    try:
        moment = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO 8601 time nor an age like 90m, 6h, 2d"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)


def _format(text: str) -> str:
    """``--format``: a file format given for a row format says where the file format comes
    from (the suffix of ``--out``)."""
    if text in FORMATS:
        return text
    suffix = "." + text.lower().lstrip(".")
    if suffix in FILE_SUFFIXES or suffix == ".gz":
        raise argparse.ArgumentTypeError(
            f"{text!r} is a file format: the suffix of --out chooses it (--out "
            f"trajectories{suffix if suffix != '.gz' else '.jsonl.gz'}); --format chooses what a "
            f"row is: {', '.join(FORMATS)}"
        )
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(FORMATS)})")


def int_at_least(minimum: int, wording: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {wording}, got {value}")
        return value

    return parse


def _grace(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of spans or 'all', got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def parse_episode_ids(values: list[str]) -> set[str]:
    """``--episode`` values: ids, or ``@FILE`` with one id per line (OSError if unreadable)."""
    ids: set[str] = set()
    for value in values:
        if value.startswith("@"):
            with open(value[1:], encoding="utf-8") as handle:
                ids.update(line.strip() for line in handle if line.strip())
        else:
            ids.add(value)
    return ids


def parse_statuses(values: list[str]) -> set[str]:
    """``--status`` values, repeated or comma-separated; ValueError names an unknown one."""
    statuses = {s.strip() for value in values for s in value.split(",") if s.strip()}
    unknown = statuses - set(sc.EPISODE_STATUSES)
    if unknown:
        raise ValueError(
            f"unknown status {', '.join(sorted(unknown))}: choose from "
            + ", ".join(sc.EPISODE_STATUSES)
        )
    return statuses


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def nanos(moment: _dt.datetime | None) -> int | None:
    """Unix nanoseconds, exactly (a float timestamp would round at this magnitude)."""
    if moment is None:
        return None
    return (moment - _EPOCH) // _dt.timedelta(microseconds=1) * 1000
