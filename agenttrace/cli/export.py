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
import gc
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from agenttrace import semconv as sc
from agenttrace.cli.exits import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    count,
    error_text,
)
from agenttrace.cli.export_args import (  # (re-exported: the export command's arguments)
    FORMATS,
    SOURCE_HELP,
    add_parser,
    int_at_least,
    nanos,
    parse_episode_ids,
    parse_statuses,
)
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
from agenttrace.sinks.minari_dataset import MinariDatasetError as DatasetError
from agenttrace.sinks.minari_dataset import check_minari_arguments
from agenttrace.sinks.single_file import output_kind
from agenttrace.sinks.step_tables import check_target
from agenttrace.storage.errors import ReadPosition, SpanDecodeError
from agenttrace.storage.http import BackendError, parse_headers
from agenttrace.storage.sources import SourceError, SourceOptions, open_source
from agenttrace.trajectory.conventions import Conventions, conventions_from_value
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import SpanRecord
from agenttrace.trajectory.stream import StreamingAssembler

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "FORMATS",
    "SOURCE_HELP",
    "EpisodeFilter",
    "add_parser",
    "int_at_least",
    "parse_episode_ids",
    "parse_statuses",
    "print_problems",
    "print_skipped",
    "run",
]


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


class EpisodeServices:
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


class _OutputError(ValueError):
    """The output could not be finished (nothing written)."""


# --- the run ----------------------------------------------------------------------------------


@dataclass
class ExportPlan:
    """What the arguments ask for, checked before anything is read."""

    kind: str  # "jsonl", "parquet", "steps" or "minari"
    episode_filter: EpisodeFilter
    headers: dict[str, str]
    conventions: Conventions | None
    splitter: Splitter | None


def plan_export(args: argparse.Namespace) -> ExportPlan:
    """The export's arguments, checked; ValueError (or OSError for an unreadable ``@FILE``)
    says what is wrong."""
    if args.format == "minari":
        kind = "minari"
        check_minari_arguments(args.dataset_id, args.env)
    elif args.out is None:
        raise ValueError("--out is required (the output file or folder)")
    elif args.format == "steps":
        kind = "steps"
        check_target(args.out)
    else:
        kind = output_kind(args.out)
    episode_filter = EpisodeFilter(
        service=args.service,
        since=nanos(args.since),
        until=nanos(args.until),
        episode_ids=parse_episode_ids(args.episode),
        statuses=parse_statuses(args.status),
        min_return=args.min_return,
        max_return=args.max_return,
    )
    headers: dict[str, str] = {}
    for header in args.header:
        headers.update(parse_headers(header))
    conventions = conventions_from_value(args.conventions)
    if args.limit < 1 or args.timeout <= 0:
        raise ValueError("--limit must be >= 1 and --timeout > 0")
    splitter = Splitter.parse(args.split, by=args.split_by, seed=args.seed) if args.split else None
    return ExportPlan(kind, episode_filter, headers, conventions, splitter)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``agenttrace export``; returns the exit code."""
    try:
        plan = plan_export(args)
    except (ValueError, OSError) as exc:
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_USAGE
    kind = plan.kind
    target = Path(args.out) if args.out is not None else Path.cwd()
    parts = part_outputs(target, args.dataset_id, plan.splitter)
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
        headers=plan.headers,
        limit=args.limit,
        timeout=args.timeout,
        query=args.query,
        on_error=report.bad,
        position=position,
    )
    try:
        source = open_source(args.source, options)
        restore = content_restorer(args.blob_store)
    except (SourceError, ValueError) as exc:  # a bad form, or trajectories given as spans
        err.print(f"agenttrace export: error: {exc}")
        return EXIT_USAGE
    except (FileNotFoundError, ImportError) as exc:
        err.print(f"agenttrace export: error: {error_text(exc)}")
        return EXIT_FAILURE
    report.source = source.description

    # Every way out but success removes what this run created: the partial file and any
    # folder made for it. A file that was at the target before (--force) is never touched:
    # the output goes to a partial file renamed into place only at the very end.
    created = missing_folders(target.parent) if args.out is not None else []
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
        rebuild_to(
            args, plan, writers, source, restore, report, position, progress_bar(err, args.quiet)
        )
        if sum(report.written.values()) == 0 and not report.filtered:
            print_problems(report, err, written=False)
            err.print(f"agenttrace export: error: {why_nothing(report)}; no output written")
            return EXIT_FAILURE
        try:
            paths = [w.close() for w in writers.values()]
        except ValueError as exc:  # (a Minari dataset no episode could be written to)
            raise _OutputError(str(exc)) from exc
        path = paths[0] if len(paths) == 1 else ", ".join(str(p) for p in paths)
        written = True
    except KeyboardInterrupt:
        err.print("agenttrace export: interrupted; no output file written")
        return EXIT_INTERRUPTED
    except (BackendError, SourceError, ImportError, OSError, DatasetError, _OutputError) as exc:
        # A backend that fails, a missing optional package, a file that cannot be read or
        # written, an output that cannot hold these episodes: the run stops, and says why.
        print_problems(report, err, written=False)
        err.print(f"agenttrace export: error: {error_text(exc)}; no output written")
        return EXIT_FAILURE
    finally:
        if not written:
            for writer in writers.values():
                writer.discard()
            remove_folders(created)
    report.seconds = time.perf_counter() - started
    if not args.quiet:
        print_summary(report, path, args.format, out, err)
    print_problems(report, err)
    return EXIT_PARTIAL if report.undecodable or report.unwritable else EXIT_OK


def rebuild_to(
    args: argparse.Namespace,
    plan: ExportPlan,
    writers: dict[str | None, Any],
    source: Any,
    restore: Any,
    report: ExportReport,
    position: ReadPosition | None,
    progress: Progress,
) -> None:
    """Rebuild every episode of ``source`` and write those the filters keep to ``writers``
    (one per ``--split`` part), late scores beside them; ``report`` counts it all. The one
    rebuild of both engines: the Ray engine runs it once per bucket."""
    selection = Selection(
        {
            name: emitter(args.format, plan.kind, w, report, args.tokens_per)
            for name, w in writers.items()
        },
        filtered=report.filtered,
        parts=report.parts,
        gate=GroupGate() if args.group_complete else None,
        deduplicator=Deduplicator() if args.dedupe else None,
        splitter=plan.splitter,
    )
    services = EpisodeServices(position)
    assembler = StreamingAssembler(
        grace=args.grace,
        max_episode_bytes=args.max_episode_bytes,
        conventions=plan.conventions,
        on_problem=lambda episode_id, field, reason: report.bad(
            services.error(episode_id, field, reason)
        ),
    )
    _rebuild(
        services, source, restore, assembler, plan.episode_filter, selection.emit, report, progress
    )
    selection.finish()
    write_late_scores(assembler.late_scores, writers.values(), report)


def _rebuild(
    services: EpisodeServices,
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


def missing_folders(folder: Path) -> list[Path]:
    """The folders on the way to ``folder`` that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def remove_folders(folders: list[Path]) -> None:
    """Remove the folders a failed run created (deepest first), if they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (someone else wrote there), or already gone
            return


def why_nothing(report: ExportReport) -> str:
    """Why an export rebuilt no episode at all (filters that left nothing are no failure)."""
    if report.spans == 0:
        if report.bad_records or report.undecodable:
            return f"nothing could be read from {report.source}: every record was unreadable"
        return f"no spans in {report.source}"
    if report.without_llm_calls:
        return (
            f"none of the {count(report.without_llm_calls, 'episode')} rebuilt has a model "
            "call with the rows this format needs (for --format tokens: token ids, recorded "
            "with AGENTTRACE_TOKENS=1 from a server that returns them, docs/tokens.md)"
        )
    if report.unwritable:
        return (
            f"none of the {count(report.unwritable, 'episode')} rebuilt could be written in "
            "this format"
        )
    return (
        f"no episode in {report.source}: none of its {count(report.spans, 'span')} belongs to "
        "an agenttrace episode (no 'episode' span)"
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


def content_restorer(blob_store: str | None) -> Any:
    """Blob references resolved and cut content flagged (storage.content), when available."""
    try:
        from agenttrace.storage.blobs import open_blob_store
        from agenttrace.storage.content import restore_content
    except ImportError:  # the content policy module is not part of this build
        return lambda records: records
    store = open_blob_store(blob_store) if blob_store else None
    return lambda records: restore_content(records, store)


# --- feedback ---------------------------------------------------------------------------------


def progress_bar(err: Console, disabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=err,
        disable=disabled or not err.is_terminal,
    )


def _progress_text(report: ExportReport, assembler: StreamingAssembler) -> str:
    return (
        f"{count(report.spans, 'span')} read, "
        f"{count(sum(report.written.values()), 'episode')} written, "
        f"{assembler.open_episodes:,} open"
        + (f", {report.bad_records:,} bad" if report.bad_records else "")
    )


#: ``--format`` -> what its rows are called in the summary.
_ROWS = {"chat": "chat row", "tokens": "token row", "steps": "step row"}


def print_summary(
    report: ExportReport, path: Path | str, fmt: str, out: Console, err: Console
) -> None:
    counts = report.counts
    episodes = sum(report.written.values())
    rate = report.spans / max(report.seconds, 1e-9)
    out.print(f"agenttrace export: from {report.source}")
    rows = ""
    if fmt in _ROWS:
        rows = f" as {count(report.rows, _ROWS[fmt])}"
    elif fmt == "minari":
        rows = f" ({count(report.rows, 'step')}) into a Minari dataset"
    out.print(
        f"read {count(report.spans, 'span')} in {report.seconds:.1f} s ({rate:,.0f} spans/s); "
        f"wrote {count(episodes, 'episode')}{rows} to {path}"
    )
    if report.written:
        statuses = ", ".join(f"{status} {n:,}" for status, n in sorted(report.written.items()))
        out.print(f"  by status: {statuses}")
    if fmt == "tokens" and report.rows_per_episode:
        shown = ", ".join(
            f"{count(n, 'episode')} in {count(rows, 'row')}"
            for rows, n in sorted(report.rows_per_episode.items())
        )
        out.print(
            f"  token rows per episode: {shown} (a new row starts where a prompt does not "
            "extend the previous call's prompt and completion; docs/tokens.md)"
        )
    if counts.incomplete:
        out.print(
            f"  {count(counts.incomplete, 'episode')} never completed in the source and "
            f"{_were(counts.incomplete)} written as {_they(counts.incomplete)} are (status "
            "incomplete)"
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
    kept, lost = report.late_scores[True], report.late_scores[False]
    if kept:
        out.print(
            f"  {count(kept, 'score')} came after {_their(kept)} episode was written: kept "
            "as score records beside the output (loaders merge them; docs/scores.md)"
        )
    if lost:
        out.print(f"  {count(lost, 'late score')}: this format has no place for them")
    if report.without_llm_calls:
        what = "model calls with token ids" if fmt == "tokens" else "model calls"
        n = report.without_llm_calls
        out.print(f"  {count(n, 'episode')} had no {what} (no rows)")
    for noun, value, said in (
        ("span", counts.unrelated, "of no episode (other services or unrelated traces)"),
        ("duplicate span", counts.duplicates, "ignored"),
        ("span", counts.late, "arrived after {their} episode was written (raise --grace)"),
    ):
        if value:
            out.print(f"  {count(value, noun)} {said.format(their=_their(value))}")


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def _they(n: int) -> str:
    return "it" if n == 1 else "they"


def _their(n: int) -> str:
    return "its" if n == 1 else "their"


def print_problems(report: ExportReport, err: Console, *, written: bool = True) -> None:
    """What was skipped (unreadable records) or left out (lines and values that could not
    be decoded, episodes the format cannot hold: the partial exit), the first few of each
    named by file and line (or episode)."""
    print_skipped(err, report.bad_records, report.first_errors, "unreadable record")
    partial = "; everything else is written; exit status 3" if written else ""
    n, first = report.undecodable, report.first_undecodable
    if n:
        what = "lines or values" if n != 1 else "line or value"
        head = f"{n:,} {what} could not be decoded and {_were(n)} left out"
        _print_list(err, head, f" (each says what became of it{partial})", first, n)
    n, first = report.unwritable, report.first_unwritable
    if n:
        head = f"{count(n, 'episode')} could not be stored in this format and {_were(n)} left out"
        _print_list(err, head, f" ({partial[2:]})" if written else "", first, n)


def _print_list(
    err: Console, head: str, tail: str, first: Sequence[object], n: int, shown: str = ", {} shown"
) -> None:
    """``head`` (bold), ``tail``, how many of the ``n`` are shown, then ``first``, one a line."""
    more = shown.format(f"first {len(first)}") if n > len(first) else ""
    err.print(Text.assemble((head, "bold"), tail, more + ":"))
    for error in first:
        err.print(f"  {error}", markup=False, highlight=False)


def print_skipped(err: Console, number: int, first: Sequence[object], what: str) -> None:
    """``N <what>s skipped (first 5 shown):`` and the first ones, one a line (shared with
    ``inspect``); nothing when there are none."""
    if number:
        _print_list(err, f"{count(number, what)} skipped", "", first, number, " ({} shown)")
