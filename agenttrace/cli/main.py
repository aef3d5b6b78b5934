"""The ``agenttrace`` command: ``demo`` runs the pipeline end to end, ``export`` rebuilds
trajectories from stored spans, ``inspect`` summarizes trajectory files or shows chosen
episodes step by step (:mod:`agenttrace.cli.episode_view`), ``score`` records late scores.
docs/cli.md describes them all.

Exit codes, the same for every command (:mod:`agenttrace.cli.exits`): 0 ok; 1 failed; 2 usage
(bad arguments or settings); 3 partial (some records or episodes bad, the rest written); 130
interrupted. A failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import math
import os
import random
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

import agenttrace as at
from agenttrace import config
from agenttrace import semconv as sc
from agenttrace._version import __version__
from agenttrace.cli import collect as collect_command
from agenttrace.cli import demo as demo_task
from agenttrace.cli import episode_view, export_ray
from agenttrace.cli import export as export_command
from agenttrace.cli import gateway as gateway_command
from agenttrace.cli import score as score_command
from agenttrace.cli import view as view_command
from agenttrace.cli.exits import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    Parser,
    count,
    error_text,
    exit_epilog,
)
from agenttrace.cli.export_args import int_at_least
from agenttrace.cli.summary import printable, render_summary, summarize
from agenttrace.reading import TrajectoryLoadError, iter_trajectories
from agenttrace.sinks.files import safe_filename, utf8_safe
from agenttrace.storage import span_paths

#: Bad records shown by ``inspect`` (all are counted).
SHOWN_ERRORS = 5
#: Counters of ``AgentTrace.stats()`` that are not losses or problems.
_NOT_LOSSES = frozenset(
    {
        "episodes_written",
        "statuses",
        "episodes_open",
        "spans_written",
        "spans_exported",
        "spans_pending",
        "metrics_exported",
        "trajectories_exported",
    }
)


_positive_int = int_at_least(1, "at least 1")
_non_negative_int = int_at_least(0, "0 or more")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (separate from :func:`main` so docs and tests can inspect it)."""
    parser = Parser(
        prog="agenttrace",
        description="OpenTelemetry for agent episodes: traces for people, trajectories for "
        "training.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'agenttrace demo' to see it work end to end, then 'agenttrace inspect'\n"
        "on the trajectories.jsonl it wrote.\n\n" + exit_epilog(),
    )
    parser.add_argument("--version", action="version", version=f"agenttrace {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run a built-in toy agent task and write its traces and trajectories",
        description="Run N episodes of a toy task ('reach the target number') played by a "
        "scripted agent whose every step makes one GenAI chat span, K episodes at a time on "
        "asyncio. Writes trajectories.jsonl and spans.jsonl (OTLP/JSON) to a new run folder, "
        "then prints a summary read back from the files. No model, and no network unless "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set: then spans and episode metrics go there too.",
        epilog="Exit status: 0 success; 1 failed: the run folder could not be created, or "
        "the trajectories file does not hold the episodes played; 2 bad arguments or "
        "settings; 3 partial: the pipeline counted spans or episodes lost (each counter "
        "named), the rest written; 130 interrupted (Ctrl-C: episodes in flight are recorded "
        "as cancelled and the summary is still printed).",
    )
    demo.add_argument(
        "--episodes",
        "-n",
        type=_positive_int,
        default=50,
        metavar="N",
        help="episodes to run (default: 50)",
    )
    demo.add_argument(
        "--concurrency",
        "-k",
        type=_positive_int,
        default=8,
        metavar="K",
        help="episodes in flight at once (default: 8)",
    )
    demo.add_argument(
        "--out",
        metavar="DIR",
        help="parent folder of the run folder (default: $AGENTTRACE_OUT, else agenttrace_runs)",
    )
    demo.add_argument(
        "--run-name",
        metavar="NAME",
        help="name of the run folder, which must not hold a run already "
        "(default: $AGENTTRACE_RUN_NAME, else demo-<UTC time>-<random>)",
    )
    demo.add_argument(
        "--seed",
        type=_non_negative_int,
        metavar="S",
        help="seed for a reproducible run (default: random, printed so it can be replayed)",
    )

    inspect = commands.add_parser(
        "inspect",
        help="summarize trajectory files, or show chosen episodes step by step",
        description="Print the episode summary of trajectory files (.jsonl, .jsonl.gz, .json, "
        ".parquet). FILE may be a file, a folder (its trajectory files) or a glob pattern "
        "(quote it). With --episode, --worst or --status, print the chosen episodes step by "
        "step instead: header, each step's action, reward, termination, observation, the "
        "messages of its model calls and its tool calls, and the episode's error. Bad records "
        "are skipped and reported on stderr; the good ones are still read.",
        epilog="Exit status: 0 when at least one trajectory was read (or the files are empty, "
        "or no episode matches --status); 1 when a source does not exist, no record could be "
        "read (the message says what the file looks like instead), or an --episode id is not "
        "in the files; 2 bad arguments.",
    )
    inspect.add_argument("files", nargs="+", metavar="FILE", help="file, folder or glob")
    inspect.add_argument(
        "--episode",
        action="append",
        default=[],
        metavar="ID",
        help="show this episode step by step (repeatable, or @FILE with one id per line)",
    )
    inspect.add_argument(
        "--worst",
        type=_positive_int,
        metavar="N",
        help="show the N episodes with the lowest return, lowest first",
    )
    inspect.add_argument(
        "--status",
        action="append",
        default=[],
        metavar="STATUS",
        help="show the episodes with this status (repeatable, or comma-separated): "
        + ", ".join(sc.EPISODE_STATUSES),
    )
    inspect.add_argument(
        "--max-chars",
        type=_non_negative_int,
        default=episode_view.MAX_CHARS,
        metavar="N",
        help="characters of a message or value shown before it is cut "
        f"(default: {episode_view.MAX_CHARS}; 0: never cut)",
    )
    inspect.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object; with --episode, --worst or --status, "
        "the chosen trajectories as JSON lines (the trajectory file format)",
    )
    export_command.add_parser(commands)
    score_command.add_parser(commands)
    collect_command.add_parser(commands)
    gateway_command.add_parsers(commands)
    view_command.add_parser(commands)
    return parser


def consoles() -> tuple[Console, Console]:
    """The consoles for stdout and stderr.

    Everything printed is literal: no markup (an install hint such as
    ``pip install 'otel-agenttrace[parquet]'`` keeps its brackets, and so do statuses, ids and
    paths read from files), no emoji codes, no highlighting. Styles are given as ``style=`` or
    :class:`rich.text.Text`. ``soft_wrap``: long lines (paths, error messages) stay whole, so
    they can be copied.
    """
    options: dict[str, Any] = {"markup": False, "emoji": False, "highlight": False}
    return Console(soft_wrap=True, **options), Console(stderr=True, soft_wrap=True, **options)


def _flagged(flag: str, text: str) -> Text:
    """``flag`` in bold red, then ``text`` as it is."""
    return Text.assemble((flag, "bold red"), " ", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agenttrace`` console script; returns the exit code.

    Every failure is one line on stderr with the exit code of :mod:`agenttrace.cli.exits`:
    argparse's errors (2), bad settings (2), a missing optional package (1, naming the extra
    that installs it), Ctrl-C (130). Anything else unexpected is one line too (1), except
    under pytest, where it is raised so the tests see the bug.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help, --version and bad arguments
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    if args.command is None:
        print(
            f"agenttrace: error: no command given: choose one of {', '.join(commands(parser))} "
            "(see: agenttrace --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    out, err = consoles()
    where = f"agenttrace {args.command}"
    try:
        if args.command == "demo":
            return run_demo(args, out, err)
        if args.command == "export":
            engine = export_ray if args.engine == "ray" else export_command
            return engine.run(args, out, err)
        if args.command == "score":
            return score_command.run(args, out, err)
        if args.command == "collect":
            return collect_command.run(args, out, err)
        if args.command == "gateway":
            return gateway_command.run_gateway(args, out, err)
        if args.command == "run":
            return gateway_command.run_command(args, out, err)
        if args.command == "view":
            return view_command.run(args, out, err)
        return run_inspect(args, out, err)
    except config.ConfigError as exc:
        err.print(f"{where}: error: {exc}")
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as rich does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err.print(f"{where}: interrupted")
        return EXIT_INTERRUPTED
    except ImportError as exc:  # a missing optional package
        err.print(f"{where}: error: {error_text(exc)}")
        return EXIT_FAILURE
    except Exception as exc:
        if os.environ.get("PYTEST_CURRENT_TEST"):
            raise
        err.print(
            f"{where}: error: unexpected {type(exc).__name__}: {printable(str(exc))} "
            "(a bug in agenttrace: please report it with the command line)"
        )
        return EXIT_FAILURE


def commands(parser: argparse.ArgumentParser) -> list[str]:
    """The names of the subcommands, in the order --help lists them."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


# --- demo ------------------------------------------------------------------------------------


def _default_run_name() -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"demo-{now}-{random.SystemRandom().getrandbits(24):06x}"


def run_demo(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``agenttrace demo``: run the toy task, then summarize what was written."""
    settings = config.resolve(out=args.out, run_name=args.run_name)  # ConfigError: exit 2
    if not settings.enabled:
        err.print(
            "agenttrace demo: error: tracing is switched off (AGENTTRACE_ENABLED is false), "
            "so the demo would write nothing"
        )
        return EXIT_USAGE
    run_name = settings.run_name or _default_run_name()
    run_dir = Path(settings.out) / safe_filename(run_name)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        err.print(
            f"agenttrace demo: error: run folder {run_dir} already holds a run; "
            "choose another --run-name"
        )
        return EXIT_USAGE
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    concurrency = min(args.concurrency, args.episodes)

    try:
        # Spans: the file, plus OTLP when an OTEL_EXPORTER_OTLP_ENDPOINT is set (the compose
        # stack's collector, docs/observability-stack.md), as for any configured run.
        runtime = at.configure(
            out=settings.out, run_name=run_name, sinks=["jsonl"], exit_report=False
        )
    except OSError as exc:
        err.print(f"agenttrace demo: error: cannot create the run folder: {exc}")
        return EXIT_FAILURE
    out.print(
        f"agenttrace demo: {count(args.episodes, 'episode')} of 'reach the target', "
        f"{concurrency} at a time, seed {seed}"
    )
    interrupted = False
    started = time.perf_counter()
    try:
        outcome, interrupted = _run_with_progress(args.episodes, concurrency, seed, err)
        ran = time.perf_counter() - started
    finally:
        # Flush and close the files before reading them back, within the exit deadline
        # (a collector that is down must not hold the demo longer than it would a program).
        runtime.shutdown(int(runtime.settings.exit_timeout * 1000))
        at.shutdown()  # and leave no default pipeline behind (main() may run in-process)
    total = time.perf_counter() - started

    read_errors: list[TrajectoryLoadError] = []
    written: list[tuple[str, str]] = []  # (episode id, status): all the self-check needs

    def stream() -> Iterator[at.Trajectory]:
        """Read the file once, in constant memory, noting ids and statuses on the way."""
        if not runtime.trajectory_paths:
            return
        for trajectory in iter_trajectories(runtime.trajectory_paths, on_error=read_errors.append):
            written.append((trajectory.episode_id, trajectory.status))
            yield trajectory

    summary = summarize(stream())
    finished = sum(outcome.outcomes.values())
    out.print(
        f"Ran {count(finished, 'episode')} in {ran:.2f} s "
        f"({finished / max(ran, 1e-9):.1f} episodes/s); "
        f"{total:.2f} s with writing the files. "
        f"Tool failures caught: {outcome.outcomes.get('errored', 0)}."
    )
    render_summary(summary, out)
    for label, paths in (
        ("trajectories", runtime.trajectory_paths),
        ("spans", runtime.span_paths),
    ):
        for path in paths:
            out.print(f"{label + ':':<14}{path}")
    stats = runtime.stats()
    for line in _backend_lines(runtime, stats):
        out.print(line)
    losses = _report_losses(stats, out)
    for error in read_errors:
        out.print(_flagged("UNREADABLE", str(error)))
        losses += 1
    if interrupted:
        out.print("Interrupted: the episodes cut short are recorded as cancelled.")
        return EXIT_INTERRUPTED
    missing, mismatches = _check_against_runner(outcome, written, out)
    if not (losses or missing or mismatches) and runtime.trajectory_paths:
        out.print(f"Next: agenttrace inspect {runtime.trajectory_paths[0]}")
    if mismatches or (missing and not losses) or not written:
        # Episodes duplicated, unknown or with other statuses, or lost without a counter
        # saying so: the pipeline lost track of them.
        what = count(mismatches + bool(missing), "mismatch", "mismatches")
        err.print(
            "agenttrace demo: error: no episode could be read back from the trajectories file"
            if not written
            else f"agenttrace demo: error: the trajectories file does not hold the episodes "
            f"this run played ({what}, above)"
        )
        return EXIT_FAILURE
    if losses:  # (episodes missing from the file are among the losses counted)
        problems = count(losses, "loss or problem", "losses or problems")
        err.print(f"agenttrace demo: partial: {problems} counted (above); the rest is written")
        return EXIT_PARTIAL
    return EXIT_OK


def _backend_lines(runtime: at.AgentTrace, stats: dict[str, Any]) -> list[str]:
    """Where spans and metrics went besides the files (a collector, docs/metrics.md)."""
    lines = []
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "the OTLP endpoint")
    if stats.get("spans_exported"):
        where = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        lines.append(f"{'exported:':<14}{stats['spans_exported']} spans over OTLP to {where}")
    if runtime.owned_meter_provider is not None:
        # "Sent" only of what the endpoint accepted (the last export runs at shutdown).
        where = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", endpoint)
        if stats.get("metrics_exported") and not stats.get("metrics_not_exported"):
            lines.append(f"{'metrics:':<14}episode metrics sent over OTLP to {where}")
        else:
            lines.append(f"{'metrics:':<14}episode metrics NOT sent over OTLP to {where}")
    elif runtime.metrics is not None:
        lines.append(f"{'metrics:':<14}episode metrics recorded on your MeterProvider")
    return lines


def _run_with_progress(
    episodes: int, concurrency: int, seed: int, err: Console
) -> tuple[demo_task.RunOutcome, bool]:
    """Run the episodes under a progress bar on stderr (drawn only on a terminal)."""
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal,
    )
    counts: dict[str, int] = {}
    task = progress.add_task("episodes", total=episodes)

    def on_done(status: str) -> None:
        counts[status] = counts.get(status, 0) + 1
        text = " ".join(f"{name} {n}" for name, n in sorted(counts.items()))
        progress.update(task, advance=1, description=text)

    outcome = demo_task.RunOutcome()  # filled in as episodes finish, so kept if interrupted
    with progress:
        try:
            asyncio.run(demo_task.run_episodes(episodes, concurrency, seed, on_done, outcome))
        except KeyboardInterrupt:
            return outcome, True
    return outcome, False


def _report_losses(stats: dict[str, Any], out: Console) -> int:
    """Print every non-zero loss or problem counter; returns how many there were."""
    found: list[str] = []
    for key, value in stats.items():
        if key in _NOT_LOSSES:
            continue
        if isinstance(value, dict):
            found.extend(f"{key}[{name}] = {n}" for name, n in value.items() if n)
        elif isinstance(value, (int, float)) and value:
            found.append(f"{key} = {value}")
    if not found:
        out.print("nothing lost: every loss counter of the pipeline is 0")
    for line in found:
        out.print(_flagged("problem:", line))
    return len(found)


def _check_against_runner(
    outcome: demo_task.RunOutcome, episodes: list[tuple[str, str]], out: Console
) -> tuple[int, int]:
    """Compare the file with what the runner saw: every episode once, same outcomes.
    Returns (episodes missing from the file, other mismatches)."""
    problems = 0
    written = [episode_id for episode_id, _ in episodes]
    missing = outcome.episode_ids - set(written)
    duplicated = len(written) - len(set(written))
    unknown = set(written) - outcome.episode_ids
    for number, what in (
        (len(missing), "run but missing from the trajectories file"),
        (duplicated, "written more than once"),
        (len(unknown), "in the file that this run did not play"),
    ):
        if number:
            out.print(_flagged("MISMATCH", f"{count(number, 'episode')} {what}"))
            problems += what != "run but missing from the trajectories file"
    statuses: dict[str, int] = {}
    for _, status in episodes:
        statuses[status] = statuses.get(status, 0) + 1
    if not missing and statuses != outcome.outcomes:
        out.print(
            _flagged(
                "MISMATCH",
                f"statuses in the file {statuses} differ from the runner's count "
                f"{outcome.outcomes}",
            )
        )
        problems += 1
    return len(missing), problems


# --- inspect ---------------------------------------------------------------------------------


def run_inspect(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``agenttrace inspect``: the summary of trajectory files, or chosen episodes step by step.

    Either way the files are read once, as a stream: the summary in bounded memory, chosen
    episodes printed as they are read (``--worst N`` holds N). Nothing is printed on stdout
    when no record could be read; stderr then says what the files look like instead.
    """
    try:
        wanted = export_command.parse_episode_ids(args.episode)
        keep = export_command.EpisodeFilter(
            episode_ids=wanted, statuses=export_command.parse_statuses(args.status)
        )
    except (ValueError, OSError) as exc:  # an unknown status, an unreadable @FILE
        err.print(f"agenttrace inspect: error: {exc}")
        return EXIT_USAGE
    viewing = bool(wanted or keep.statuses or args.worst)
    errors = _BadRecords()
    seen = episode_view.Selection()
    shown = 0
    try:
        trajectories = iter_trajectories(list(args.files), on_error=errors.add)
        if viewing:
            chosen = episode_view.select(
                trajectories,
                lambda trajectory: keep.reason(trajectory, None) is None,
                wanted_ids=wanted,
                worst=args.worst,
                seen=seen,
            )
            shown = _show_episodes(chosen, args, out)
        else:
            summary = summarize(trajectories)
            seen.read = summary.episodes
    except (FileNotFoundError, ImportError) as exc:  # ImportError: .parquet without pyarrow
        err.print(f"agenttrace inspect: error: {printable(error_text(exc))}")
        return EXIT_FAILURE
    if errors.count and not seen.read:
        # Say what the files are instead; the record errors only when that says nothing.
        paths = dict.fromkeys(error.path for error in errors.first)
        described = {path: describe_file(path) for path in paths}
        if not all(described.values()):
            export_command.print_skipped(err, errors.count, errors.shown(), "bad record")
        said = [f"{path}: {what}" for path, what in described.items() if what]
        bad = count(errors.count, "bad record")
        line = f"agenttrace inspect: error: no trajectory could be read ({bad})"
        if len(said) == 1:  # the usual case, one file: all in one line
            line, said = f"{line}: {said[0]}", []
        err.print(printable(line))
        for what in said:
            err.print(printable(f"  {what}"))
        return EXIT_FAILURE
    if not viewing:
        if args.json:
            data = summary.to_dict()
            data["bad_records"] = errors.count
            print(json.dumps(_finite(data), allow_nan=False))
        else:
            out.print(
                f"agenttrace inspect: {count(seen.read, 'episode')} from {_sources(args.files)}"
            )
            render_summary(summary, out)
    export_command.print_skipped(err, errors.count, errors.shown(), "bad record")
    if not viewing:
        return EXIT_OK
    if not args.json:
        out.print(
            f"agenttrace inspect: {shown:,} of {count(seen.read, 'episode')} shown "
            f"({_criteria(args, keep)}) from {_sources(args.files)}"
        )
    missing = [episode_id for episode_id in sorted(wanted) if episode_id not in seen.found]
    for episode_id in missing:
        similar = seen.similar.get(episode_id)
        if similar:
            hint = f"ids containing it: {', '.join(similar)}"
        elif seen.first_ids:
            hint = f"some ids there: {', '.join(seen.first_ids)}"
        else:
            hint = "the files hold no episode"
        err.print(
            f"agenttrace inspect: error: episode {episode_id!r} not found among the "
            f"{count(seen.read, 'episode')} in {_sources(args.files)}; {printable(hint)}"
        )
    return EXIT_FAILURE if missing else EXIT_OK


def _show_episodes(chosen: Iterator[at.Trajectory], args: argparse.Namespace, out: Console) -> int:
    """Print each chosen episode as it comes (JSON lines with --json); returns how many."""
    shown = 0
    for trajectory in chosen:
        if args.json:
            print(utf8_safe(trajectory.to_json()))  # a lone surrogate as its JSON escape
        else:
            if shown:
                out.print()
            for line in episode_view.episode_lines(trajectory, args.max_chars):
                out.print(line)
        shown += 1
    return shown


def _criteria(args: argparse.Namespace, keep: export_command.EpisodeFilter) -> str:
    """What chose the episodes shown, in words."""
    parts = []
    if keep.episode_ids:
        parts.append("episode " + ", ".join(sorted(keep.episode_ids)))
    if keep.statuses:
        parts.append("status " + ", ".join(sorted(keep.statuses)))
    if args.worst:
        parts.append(f"the {args.worst} lowest returns")
    return printable("; ".join(parts))


def describe_file(path: str) -> str | None:
    """What a file that gave no trajectory looks like, from its first bytes
    (:func:`agenttrace.storage.span_paths.sniff`); None: trajectories, or cannot tell.

    Span files (OTLP/JSON lines with "resourceSpans", the Collector's protobuf) and chat-format
    exports are named, with what to do instead; anything else is described as found.
    """
    found = span_paths.sniff(path)
    if found.is_spans:
        kind = "OTLP/JSON lines"
        if found.kind == span_paths.SPANS_PROTO:
            kind = "the Collector's OTLP protobuf"
        return (
            f"this is a span file ({kind}); rebuild trajectories with: agenttrace export --from "
            f"{shlex.quote(path)} --out trajectories.jsonl"
        )
    if found.kind == span_paths.CHAT:
        return (
            "this is an export in chat format (one row per model call, as 'agenttrace export "
            "--format chat' writes), not trajectories"
        )
    if found.kind == span_paths.SCORES:
        return (
            "this is a scores file (late scores: loaders merge it with the trajectories beside "
            "it), not trajectories"
        )
    if found.kind == span_paths.TABLE and found.columns:
        columns = ", ".join(found.columns)
        return f"a Parquet file without the trajectory columns (its columns: {columns})"
    if found.kind in (span_paths.JSON, span_paths.UNSURE, span_paths.TEXT, span_paths.BINARY):
        return found.detail
    return None  # trajectories (the load errors say what is wrong with them), or unknown


class _BadRecords:
    """Counts every bad record but keeps only the first few, so memory stays bounded."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[TrajectoryLoadError] = []

    def add(self, error: TrajectoryLoadError) -> None:
        self.count += 1
        if len(self.first) < SHOWN_ERRORS:
            self.first.append(error)

    def shown(self) -> list[str]:
        """The first errors as printable text (a path or value may hold a lone surrogate)."""
        return [printable(str(error)) for error in self.first]


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write those as the strings "nan", "inf", "-inf"."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _sources(files: Sequence[str]) -> str:
    shown = ", ".join(files[:3])
    return printable(shown + (f" and {len(files) - 3} more" if len(files) > 3 else ""))


if __name__ == "__main__":
    sys.exit(main())
