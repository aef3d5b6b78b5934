"""``agenttrace export``: trajectories (or chat rows) rebuilt from stored spans, into one file.

The pipeline, each stage streaming:

    source (files or a backend, storage.sources)
      -> span records (one bad span or line is reported and skipped)
      -> content restored (blob references resolved; cut content flagged lossy)
      -> StreamingAssembler (an episode comes out as soon as it is complete)
      -> filters (service, time window, episode ids, status, return range)
      -> rows (trajectory or chat) -> SingleFileWriter (renamed into place at the end)

Memory is bounded by the episodes open at one time, not by the size of the input.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from agenttrace import semconv as sc
from agenttrace.cli.export_outputs import (
    ExportReport,
    emitter,
    open_output,
    write_late_scores,
)
from agenttrace.cli.selection import (
    Deduplicator,
    GroupGate,
    Selection,
    Splitter,
    part_outputs,
)
from agenttrace.processing.writer import DEFAULT_MAX_EPISODE_BYTES
from agenttrace.sinks.minari_dataset import check_minari_arguments
from agenttrace.sinks.single_file import output_kind
from agenttrace.sinks.step_tables import check_target
from agenttrace.storage.errors import ReadPosition, SpanDecodeError
from agenttrace.storage.http import BackendError, parse_headers
from agenttrace.storage.sources import SourceError, SourceOptions, open_source
from agenttrace.trajectory.conventions import conventions_from_value
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import SpanRecord
from agenttrace.trajectory.stream import StreamingAssembler
from agenttrace.trajectory.tokens import (
    PER_CHOICES,
)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
FORMATS = ("trajectory", "chat", "tokens", "steps", "minari")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


#: ``agenttrace export --help``: every form ``--from`` takes, with an example each. Written
#: out by hand (RawDescriptionHelpFormatter) so the examples stay whole lines; under 80 columns.
SOURCE_HELP = """\
SOURCE (--from) is one of:

  a span file, a folder (its span files) or a glob (quote it)
      OTLP/JSON lines (agenttrace's spans.jsonl, the Collector's file exporter;
      gzip too) or the Collector's length-prefixed protobuf (zstd too), told
      apart by their first bytes. Files are read whole; --service, --since and
      --until then keep the matching episodes.
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

Exit status: 0 done (also when the filters left no episode); 1 the source
could not be read, holds no spans or no episode, or nothing could be rebuilt
from it; 2 bad arguments; 3 partial: written, but lines or values that could
not be decoded (nested too deeply, an rl.* value of the wrong type or out of
range, compressed data without its package) were left out, each named on
stderr; 130 interrupted. A failed export leaves no output file behind
(docs/cli.md).
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
        choices=FORMATS,
        default="trajectory",
        help="trajectory: one agenttrace trajectory per line/row (default); chat: one row per "
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
        help="registered gymnasium id whose spaces and spec the dataset records (default: "
        "the episodes' rl.env.name when gymnasium knows it, else spaces inferred from values)",
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


def _nanos(moment: _dt.datetime | None) -> int | None:
    """Unix nanoseconds, exactly (a float timestamp would round at this magnitude)."""
    if moment is None:
        return None
    return (moment - _EPOCH) // _dt.timedelta(microseconds=1) * 1000


# --- which episodes ---------------------------------------------------------------------------


@dataclass
class EpisodeFilter:
    """The episode-level filters; :meth:`reason` says why one is left out (None: kept)."""

    service: str | None = None
    since: int | None = None  # ns
    until: int | None = None
    episode_ids: set[str] = field(default_factory=set)
    statuses: set[str] = field(default_factory=set)
    min_return: float | None = None
    max_return: float | None = None

    def reason(self, trajectory: Trajectory, service: str | None) -> str | None:
        if self.episode_ids and trajectory.episode_id not in self.episode_ids:
            return "episode id"
        if self.service is not None and service != self.service:
            return "service"
        start = trajectory.start_time
        if self.since is not None and (start is None or start < self.since):
            return "time window"
        if self.until is not None and (start is None or start >= self.until):
            return "time window"
        if self.statuses and trajectory.status not in self.statuses:
            return "status"
        if self.min_return is not None and not trajectory.return_ >= self.min_return:
            return "return"
        if self.max_return is not None and not trajectory.return_ <= self.max_return:
            return "return"
        return None


class _EpisodeServices:
    """Remembers the service.name of each episode span passing by (episode-level filter),
    and where it was read (file and line), to name it in the errors about its episode."""

    def __init__(self, position: ReadPosition | None = None) -> None:
        self.services: dict[str, str | None] = {}
        self.places: dict[str, tuple[str | None, int | None]] = {}
        self._position = position

    def note(self, record: SpanRecord) -> None:
        """Called with each episode span."""
        episode_id = record.attributes.get(sc.EPISODE_ID)
        if episode_id is not None:
            service = record.resource.get(SERVICE_NAME)
            self.services[str(episode_id)] = None if service is None else str(service)
            if self._position is not None:
                self.places[str(episode_id)] = (self._position.source, self._position.line)

    def pop(self, episode_id: str) -> str | None:
        self.places.pop(episode_id, None)
        return self.services.pop(episode_id, None)

    def error(self, episode_id: str, field: str, reason: str) -> SpanDecodeError:
        """What the assembler left out or cut of an episode, located at its episode span."""
        source, line = self.places.get(episode_id, (None, None))
        return SpanDecodeError(
            f"episode span of {episode_id}: {field}: {reason}", source=source, line=line
        )


# --- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``agenttrace export``; returns the exit code."""
    try:
        if args.format == "minari":
            kind = "minari"
            check_minari_arguments(args.dataset_id)
        elif args.out is None:
            raise ValueError("--out is required (the output file or folder)")
        elif args.format == "steps":
            kind = "steps"
            check_target(args.out)
        else:
            kind = output_kind(args.out)
        episode_filter = EpisodeFilter(
            service=args.service,
            since=_nanos(args.since),
            until=_nanos(args.until),
            episode_ids=parse_episode_ids(args.episode),
            statuses=parse_statuses(args.status),
            min_return=args.min_return,
            max_return=args.max_return,
        )
        headers: dict[str, str] = {}
        for header in args.header:
            headers.update(parse_headers(header))
        conventions = conventions_from_value(args.conventions)
    except (ValueError, OSError) as exc:
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_USAGE
    if args.limit < 1 or args.timeout <= 0:
        err.print("agenttrace export: error: --limit must be >= 1 and --timeout > 0")
        return EXIT_USAGE
    try:
        splitter = (
            Splitter.parse(args.split, by=args.split_by, seed=args.seed) if args.split else None
        )
    except ValueError as exc:
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_USAGE
    target = Path(args.out) if args.out is not None else Path.cwd()
    parts = part_outputs(target, args.dataset_id, splitter)
    for _, part_target, _ in parts:
        if kind != "minari" and part_target.exists() and not args.force:
            err.print(f"agenttrace export: error: {part_target} exists; use --force to replace it")
            return EXIT_USAGE

    report = ExportReport()
    position = ReadPosition()
    options = SourceOptions(
        service=args.service,
        start=args.since,
        end=args.until,
        headers=headers,
        limit=args.limit,
        timeout=args.timeout,
        query=args.query,
        on_error=report.bad,
        position=position,
    )
    try:
        source = open_source(args.source, options)
        restore = _content_restorer(args.blob_store)
    except (SourceError, ValueError) as exc:
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_USAGE
    except FileNotFoundError as exc:
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_FAILURE
    except ImportError as exc:
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_FAILURE
    report.source = source.description

    # Every way out but success removes what this run created: the partial file and any
    # folder made for it. A file that was at the target before (--force) is never touched:
    # the output goes to a partial file renamed into place only at the very end.
    created = _missing_folders(target.parent) if args.out is not None else []
    writers: dict[str | None, Any] = {}
    written = False
    started = time.perf_counter()
    try:
        try:
            for name, part_target, dataset_id in parts:
                writers[name] = open_output(args, kind, part_target, dataset_id)
        except ValueError as exc:  # (an output that may not be written: nothing was read)
            err.print(f"agenttrace export: error: {exc}")
            return EXIT_USAGE
        selection = Selection(
            {
                name: emitter(args.format, kind, w, report, args.tokens_per)
                for name, w in writers.items()
            },
            filtered=report.filtered,
            parts=report.parts,
            gate=GroupGate() if args.group_complete else None,
            deduplicator=Deduplicator() if args.dedupe else None,
            splitter=splitter,
        )
        services = _EpisodeServices(position)
        assembler = StreamingAssembler(
            grace=args.grace,
            max_episode_bytes=args.max_episode_bytes,
            conventions=conventions,
            on_problem=lambda episode_id, field, reason: report.bad(
                services.error(episode_id, field, reason)
            ),
        )
        _rebuild(
            services,
            source,
            restore,
            assembler,
            episode_filter,
            selection.emit,
            report,
            _progress(err, disabled=args.quiet),
        )
        selection.finish()
        write_late_scores(assembler.late_scores, writers.values(), report)
        if sum(report.written.values()) == 0 and not report.filtered:
            print_problems(report, err, written=False)
            err.print(f"agenttrace export: error: {_why_nothing(report)}; no output written")
            return EXIT_FAILURE
        paths = [w.close() for w in writers.values()]
        path = paths[0] if len(paths) == 1 else ", ".join(str(p) for p in paths)
        written = True
    except KeyboardInterrupt:
        err.print("agenttrace export: interrupted; no output file written")
        return EXIT_INTERRUPTED
    except (BackendError, SourceError, ImportError, OSError) as exc:
        # A backend that fails, a missing optional package (zstd), a file that cannot be
        # read or written: the run stops, and says why.
        err.print(f"agenttrace export: error: {exc}; no output written")
        return EXIT_FAILURE
    finally:
        if not written:
            for writer in writers.values():
                writer.discard()
            _remove_folders(created)
    report.seconds = time.perf_counter() - started
    if not args.quiet:
        _print_summary(report, path, args.format, out, err)
    print_problems(report, err)
    return EXIT_PARTIAL if report.undecodable else EXIT_OK


def _rebuild(
    services: _EpisodeServices,
    source: Any,
    restore: Any,
    assembler: StreamingAssembler,
    episode_filter: EpisodeFilter,
    emit: Any,
    report: ExportReport,
    progress: Progress,
) -> None:
    """Read every span of ``source``, emit each rebuilt episode the filters keep."""
    report.counts = assembler.counts
    task = progress.add_task("reading", total=None)
    with progress, _fewer_collections():

        def tick() -> None:
            progress.update(task, description=_progress_text(report, assembler))

        def handle(trajectory: Trajectory) -> None:
            reason = episode_filter.reason(trajectory, services.pop(trajectory.episode_id))
            if reason is not None:
                report.filtered[reason] += 1
            else:
                emit(trajectory)

        # One loop per span, no generator between reader and assembler: at a million
        # spans each layer would cost about 1 % of the export.
        add, episode_span, count = assembler.add, sc.EPISODE, 0
        try:
            for record in restore(source.records()):
                count += 1
                if not count & 0xFFF:
                    report.spans = count
                    tick()
                if record.name == episode_span:
                    services.note(record)
                done = add(record)
                if done:
                    for trajectory in done:
                        handle(trajectory)
            for trajectory in assembler.finish():
                handle(trajectory)
        finally:
            report.spans = count
        tick()  # the progress line shows spans every 4096, and the final count here


def _missing_folders(folder: Path) -> list[Path]:
    """The folders on the way to ``folder`` that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_folders(folders: list[Path]) -> None:
    """Remove the folders a failed run created (deepest first), if they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (someone else wrote there), or already gone
            return


def _why_nothing(report: ExportReport) -> str:
    """Why an export rebuilt no episode at all (filters that left nothing are no failure)."""
    if report.spans == 0:
        if report.bad_records or report.undecodable:
            return f"nothing could be read from {report.source}: every record was unreadable"
        return f"no spans in {report.source}"
    if report.without_llm_calls:
        return (
            f"none of the {report.without_llm_calls:,} episodes rebuilt has a model call with "
            "the rows this format needs (for --format tokens: token ids, recorded with "
            "AGENTTRACE_TOKENS=1 from a server that returns them, docs/tokens.md)"
        )
    if report.unwritable:
        return f"none of the {report.unwritable:,} episodes rebuilt could be written in this format"
    return (
        f"no episode in {report.source}: none of its {report.spans:,} spans belongs to an "
        "agenttrace episode (no 'episode' span)"
    )


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Keep the garbage collector off what never becomes garbage during a long export.

    Objects alive before the export (modules, the rest of the program) are frozen out of
    collections, and the youngest generation is collected less often: the records and
    trajectories an export makes form no reference cycles, so reference counting frees them
    either way. Measured: about 10-20 % of the export's time went to collections.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], 50_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _content_restorer(blob_store: str | None) -> Any:
    """Blob references resolved and cut content flagged (storage.content), when available."""
    try:
        from agenttrace.storage.blobs import open_blob_store
        from agenttrace.storage.content import restore_content
    except ImportError:  # the content policy module is not part of this build
        return lambda records: records
    store = open_blob_store(blob_store) if blob_store else None
    return lambda records: restore_content(records, store)


# --- feedback ---------------------------------------------------------------------------------


def _progress(err: Console, *, disabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=err,
        disable=disabled or not err.is_terminal,
    )


def _progress_text(report: ExportReport, assembler: StreamingAssembler) -> str:
    return (
        f"{report.spans:,} spans read, {sum(report.written.values()):,} episodes written, "
        f"{assembler.open_episodes:,} open"
        + (f", {report.bad_records:,} bad" if report.bad_records else "")
    )


def _print_summary(report: ExportReport, path: Path, fmt: str, out: Console, err: Console) -> None:
    counts = report.counts
    episodes = sum(report.written.values())
    rate = report.spans / max(report.seconds, 1e-9)
    out.print(f"agenttrace export: from {report.source}")
    out.print(
        f"read {report.spans:,} spans in {report.seconds:.1f} s ({rate:,.0f} spans/s); "
        f"wrote {episodes:,} episodes"
        + (f" as {report.rows:,} chat rows" if fmt == "chat" else "")
        + (f" as {report.rows:,} token rows" if fmt == "tokens" else "")
        + (f" as {report.rows:,} step rows" if fmt == "steps" else "")
        + (f" ({report.rows:,} steps) into a Minari dataset" if fmt == "minari" else "")
        + f" to {path}"
    )
    if report.written:
        statuses = ", ".join(f"{status} {n:,}" for status, n in sorted(report.written.items()))
        out.print(f"  by status: {statuses}")
    if counts.incomplete:
        out.print(
            f"  {counts.incomplete:,} episodes never completed in the source and were written "
            "as they are (status incomplete)"
        )
    if report.lossy:
        out.print(
            Text.assemble(
                "  ",
                (f"{report.lossy:,} lossy", "bold yellow"),
                ": the storage cut or lost some of their content; each trajectory's 'lossy' "
                "field says which",
            )
        )
    if report.filtered:
        left = ", ".join(f"{reason} {n:,}" for reason, n in sorted(report.filtered.items()))
        out.print(f"  left out by filters: {left}")
    if report.parts:
        split = ", ".join(f"{part} {n:,}" for part, n in report.parts.items())
        out.print(f"  split: {split}")
    if report.late_scores[True]:
        out.print(
            f"  {report.late_scores[True]:,} scores came after their episode was written: kept "
            "as score records beside the output (loaders merge them; docs/scores.md)"
        )
    if report.late_scores[False]:
        out.print(f"  {report.late_scores[False]:,} late scores: this format has no place for them")
    if report.without_llm_calls:
        what = "model calls with token ids" if fmt == "tokens" else "model calls"
        out.print(f"  {report.without_llm_calls:,} episodes had no {what} (no rows)")
    if report.unwritable:
        out.print(f"  {report.unwritable:,} episodes could not be stored in this format (below)")
    for label, value in (
        ("spans of no episode (other services or unrelated traces)", counts.unrelated),
        ("duplicate spans ignored", counts.duplicates),
        ("spans arrived after their episode was written (raise --grace)", counts.late),
    ):
        if value:
            out.print(f"  {value:,} {label}")


def print_problems(report: ExportReport, err: Console, *, written: bool = True) -> None:
    """What was skipped (unreadable records) or left out (lines and values that could not
    be decoded: the partial exit), the first few of each named by file and line."""
    print_skipped(err, report.bad_records, report.first_errors, "unreadable record")
    count, first = report.undecodable, report.first_undecodable
    if not count:
        return
    err.print(
        Text.assemble(
            (
                f"{count:,} line{'s or values' if count != 1 else ' or value'} could not be "
                f"decoded and {'were' if count != 1 else 'was'} left out",
                "bold",
            ),
            " (each says what became of it; everything else is written; exit status 3)"
            if written
            else " (each says what became of it)",
            f", first {len(first)} shown:" if count > len(first) else ":",
        )
    )
    for error in first:
        err.print(f"  {error}", markup=False, highlight=False)


def print_skipped(err: Console, count: int, first: Sequence[object], what: str) -> None:
    """``N <what>s skipped (first 5 shown):`` and the first ones, one a line (shared with
    ``inspect``); nothing when there are none."""
    if not count:
        return
    err.print(
        Text.assemble(
            (f"{count:,} {what}{'s' if count != 1 else ''} skipped", "bold"),
            f" (first {len(first)} shown):" if count > len(first) else ":",
        )
    )
    for error in first:
        err.print(f"  {error}", markup=False, highlight=False)
