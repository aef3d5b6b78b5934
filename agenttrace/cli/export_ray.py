"""``agenttrace export --engine ray``: the offline rebuild on Ray Data, for inputs that one
core takes too long over.

Three stages, each a Ray Data ``map`` over a list of tasks (:mod:`agenttrace.cli.export_buckets`
says what each task does):

1. **read**: the span files, cut into chunks (:mod:`agenttrace.storage.span_chunks`), each
   decoded by one task into a shard file with a segment per bucket of traces;
2. **scores**, only when the input holds score spans: each sent to its episode's bucket;
3. **rebuild**: one task per bucket streams its segments, in the order of the input, through
   the one rebuild of ``agenttrace export`` (the streaming assembler, the filters, the
   writers) into its part of the output.

No global sort and no ``groupby`` (Ray Data's materialises its input): a task holds one chunk,
or the episodes open in one bucket. The shards go to a temporary folder beside ``--out``, so
every worker that can write the output can read them, and are removed at the end.

The output is a folder named as the local export's file would be (``trajectories.jsonl/``,
``trajectories.parquet/``), one part per bucket in it (``part-00003.jsonl``, its late scores
in ``part-00003.scores.jsonl``); the loaders read the folder as one
(``load_trajectories("trajectories.jsonl")``). Step tables make one step-tables folder, the
buckets' part files numbered in turn. As with the local export, a failed run leaves nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pickle
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from agenttrace._version import install_hint
from agenttrace.cli.exits import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    count,
    error_text,
)
from agenttrace.cli.export import (
    ExportPlan,
    missing_folders,
    plan_export,
    print_problems,
    print_summary,
    progress_bar,
    remove_folders,
    why_nothing,
)
from agenttrace.cli.export_buckets import (
    BucketResult,
    BucketTask,
    ReadResult,
    ReadTask,
    ScoreResult,
    ScoreTask,
    read_chunk,
    rebuild_bucket,
    replay_problems,
    route_scores,
)
from agenttrace.cli.export_outputs import ExportReport
from agenttrace.cli.selection import part_outputs
from agenttrace.sinks.step_tables import EPISODES_FOLDER, SCORES_FOLDER, STEPS_FOLDER
from agenttrace.storage.sources import SourceError, is_backend
from agenttrace.storage.span_chunks import SpanChunk, plan_chunks

#: Buckets per worker by default: enough that a slow bucket does not hold up the others.
PARTS_PER_WORKER = 4
_PART = re.compile(r"part-\d{5,}\.")


class _StageError(RuntimeError):
    """A task could not do its work (a file it could not read or write)."""


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``agenttrace export --engine ray``; returns the exit code."""

    def fail(message: str, code: int) -> int:
        err.print(f"agenttrace export: error: {message}")
        return code

    why = unsupported(args)
    if why:
        return fail(f"--engine ray does not support {why}; use --engine local", EXIT_USAGE)
    try:
        plan = plan_export(args)
    except (ValueError, OSError) as exc:
        return fail(str(exc), EXIT_USAGE)
    target = Path(args.out)
    outputs = {name: path for name, path, _ in part_outputs(target, None, plan.splitter)}
    for path in outputs.values():
        problem = _not_replaceable(path, plan.kind, args.force)
        if problem:
            return fail(problem, EXIT_USAGE)
    try:
        description, chunks = plan_chunks(args.source, args.chunk_bytes)
    except (SourceError, ValueError) as exc:
        return fail(str(exc), EXIT_USAGE)
    except (OSError, ImportError) as exc:
        return fail(error_text(exc), EXIT_FAILURE)
    try:
        import ray
        import ray.data
    except ImportError:
        return fail(f"--engine ray needs Ray Data: {install_hint('ray')}", EXIT_FAILURE)

    report = ExportReport(source=description)
    created = missing_folders(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.shards-", dir=target.parent))
    partials = {name: path.with_name(f".{path.name}.partial") for name, path in outputs.items()}
    started_ray = written = False
    try:
        for partial in partials.values():
            _remove(partial)
            partial.mkdir()
        with _quiet_ray_data(ray.data), progress_bar(err, args.quiet) as progress:
            line = progress.add_task("starting Ray", total=None)
            ray_seconds = time.perf_counter()
            try:
                started_ray = _start_ray(ray, args)
            except Exception as exc:  # (ray.init raises what it likes: ConnectionError, ...)
                why = f"Ray could not be started or reached: {error_text(exc)}"
                raise _StageError(why) from exc
            workers = args.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            buckets = args.partitions or PARTS_PER_WORKER * workers
            started = time.perf_counter()
            ray_seconds = started - ray_seconds
            stages = _Stages(ray.data, workers, progress, line)
            parts, share = _export(stages, args, plan, chunks, buckets, work, partials, report)
        if sum(report.written.values()) == 0 and not report.filtered:
            print_problems(report, err, written=False)
            return fail(f"{why_nothing(report)}; no output written", EXIT_FAILURE)
        if plan.kind == "steps":
            for partial in partials.values():
                _gather_step_tables(partial)
        for name, partial in partials.items():
            _into_place(partial, outputs[name])
        report.seconds = time.perf_counter() - started
        written = True
    except KeyboardInterrupt:
        return fail("interrupted; no output written", EXIT_INTERRUPTED)
    except (_StageError, OSError) as exc:
        print_problems(report, err, written=False)
        return fail(f"{error_text(exc)}; no output written", EXIT_FAILURE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not written:
            for partial in partials.values():
                _remove(partial)
            remove_folders(created)
        if started_ray:
            ray.shutdown()
    if not args.quiet:
        shown = ", ".join(str(path) for path in outputs.values())
        print_summary(report, shown, args.format, out, err)
        out.print(
            f"  on Ray: {count(len(chunks), 'chunk')} read, {count(parts, 'part')} written, "
            f"{count(workers, 'worker')}"
            + (f" (Ray started in {ray_seconds:.1f} s before)" if started_ray else "")
        )
        if share > 0.5 and workers > 1:
            out.print(
                f"  one part held {share:.0%} of the input, and one task rebuilt it: its traces "
                "hold many episodes each (one trace for a whole run? docs/cli.md, On Ray)"
            )
    print_problems(report, err)
    return EXIT_PARTIAL if report.undecodable or report.unwritable else EXIT_OK


def unsupported(args: argparse.Namespace) -> str | None:
    """What the arguments ask that the Ray engine cannot do, in words (None: nothing)."""
    if is_backend(args.source):
        return "reading a trace backend (it reads span files: paths, folders, globs, URLs)"
    if args.format == "minari":
        return "--format minari (one process writes a Minari dataset)"
    if args.group_complete:
        return "--group-complete (a rollout group's episodes may be rebuilt in different parts)"
    if args.dedupe:
        return "--dedupe (duplicates may be rebuilt in different parts)"
    return None


def _export(
    stages: _Stages,
    args: argparse.Namespace,
    plan: ExportPlan,
    chunks: list[SpanChunk],
    buckets: int,
    work: Path,
    partials: dict[str | None, Path],
    report: ExportReport,
) -> tuple[int, float]:
    """The three stages; returns how many parts were written, and the largest bucket's share
    of the input (in the bytes of its shards)."""
    tasks = [ReadTask(c, buckets, str(work / f"chunk-{c.index:06d}")) for c in chunks]
    seen = 0

    def read(result: ReadResult) -> str:
        nonlocal seen
        seen += result.seen
        return f"reading: {count(seen, 'span')} read"

    reads: list[ReadResult] = sorted(stages.run("chunk", tasks, read), key=lambda r: r.chunk)
    before: dict[int, tuple[str, int]] = {}  # chunk -> (file, lines of the file before it)
    lines: dict[int, int] = {}  # file -> lines of its chunks so far
    for result in reads:
        chunk = chunks[result.chunk]
        before[chunk.index] = (chunk.name, lines.get(chunk.file_index, 0))
        lines[chunk.file_index] = lines.get(chunk.file_index, 0) + result.lines
        result.problems.moved(*before[chunk.index])
    files = {chunk.name: chunk.file_index for chunk in chunks}
    problems = [result.problems for result in reads]
    report.spans = sum(result.spans for result in reads)
    if seen == 0:
        replay_problems(report, problems, files)
        return 0, 0.0

    score_tasks = []
    for group in range(buckets):
        held, index = buckets + group, 2 * buckets + group  # (the segments of the group)
        if any(r.segments[held][1] for r in reads):
            shards = [
                (r.chunk, _shard(tasks, r), r.segments[held], r.segments[index])
                for r in reads
                if r.segments[held][1] or r.segments[index][1]
            ]
            out = str(work / f"scores-{group:05d}")
            score_tasks.append(ScoreTask(group, buckets, shards, out))
    routed: list[ScoreResult] = stages.run("score group", score_tasks, lambda _: "scores")

    folders = {name: str(partial) for name, partial in partials.items()}
    sizes = [sum(r.segments[bucket][1] for r in reads) for bucket in range(buckets)]
    share = max(sizes) / max(1, sum(sizes))
    bucket_tasks = []
    for bucket in range(buckets):
        records = [
            (r.chunk, _shard(tasks, r), *r.segments[bucket]) for r in reads if r.segments[bucket][1]
        ]
        scores = [
            (score_tasks[n].out, *s.segments[bucket])
            for n, s in enumerate(routed)
            if s.segments[bucket][1]
        ]
        if records or scores:
            bucket_tasks.append(BucketTask(bucket, args, plan, folders, records, scores, before))

    def rebuilt(result: BucketResult) -> str:
        report.add(result.report)
        episodes = sum(report.written.values())
        return f"rebuilding: {count(episodes, 'episode')} written"

    done: list[BucketResult] = stages.run("part", bucket_tasks, rebuilt)
    report.spans += sum(result.spans for result in done)
    replay_problems(report, problems + [result.problems for result in done], files)
    return sum(1 for result in done if result.paths), share


def _shard(tasks: list[ReadTask], result: ReadResult) -> str:
    return tasks[result.chunk].shard


class _Stages:
    """Runs a list of tasks on Ray Data, one task a block, ``workers`` at a time, and shows
    each result's progress line as it comes."""

    def __init__(self, data: Any, workers: int, progress: Progress, line: Any) -> None:
        self.data = data
        self.workers = workers
        self.progress = progress
        self.line = line

    def run(self, what: str, tasks: list[Any], seen: Callable[[Any], str]) -> list[Any]:
        if not tasks:
            return []
        function = {ReadTask: read_chunk, ScoreTask: route_scores, BucketTask: rebuild_bucket}[
            type(tasks[0])
        ]
        rows = [{"task": pickle.dumps((function, task))} for task in tasks]
        dataset = self.data.from_items(rows, override_num_blocks=len(rows)).map(
            _run_task, num_cpus=1, concurrency=min(self.workers, len(rows))
        )
        results = []
        try:
            for row in dataset.iter_rows():
                result = pickle.loads(row["result"])
                if result.error is not None:
                    raise _StageError(result.error)
                results.append(result)
                text = f"{seen(result)} ({len(results)} of {count(len(tasks), what)})"
                self.progress.update(self.line, description=text)
        except _StageError:
            raise
        except Exception as exc:  # a task that raised: Ray Data hands on its error
            raise _StageError(f"a {what} task failed: {error_text(exc)}") from exc
        return results


def _run_task(row: dict[str, Any]) -> dict[str, Any]:
    """Ray Data's map function: one task, in a worker (both pickled, to keep them as
    they are: Ray Data would make Arrow columns of their fields)."""
    function, task = pickle.loads(row["task"])
    return {"result": pickle.dumps(function(task))}


def _start_ray(ray: Any, args: argparse.Namespace) -> bool:
    """Ray for the export: the one this process already runs, the cluster at
    ``--ray-address``, or a local one of ``--workers`` CPUs. True when this call started
    (or connected) it, so the export stops it again."""
    if ray.is_initialized():
        return False
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    if args.ray_address:
        ray.init(address=args.ray_address, **quiet)
    else:
        ray.init(num_cpus=args.workers or os.cpu_count() or 1, include_dashboard=False, **quiet)
    return True


@contextlib.contextmanager
def _quiet_ray_data(data: Any) -> Iterator[None]:
    """Ray Data's own progress bars and log lines off: the export shows its own."""
    context = data.DataContext.get_current()
    settings = {"enable_progress_bars": False, "print_on_execution_start": False}
    settings["enable_auto_log_stats"] = False
    before = {name: getattr(context, name) for name in settings}
    logger = logging.getLogger("ray.data")
    level = logger.level
    for name, value in settings.items():
        setattr(context, name, value)
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(context, name, value)
        logger.setLevel(level)


# --- the output folder ------------------------------------------------------------------------


def _not_replaceable(path: Path, kind: str, force: bool) -> str | None:
    """Why the output may not go to ``path`` (None: it may)."""
    if not path.exists():
        return None
    if not force:
        return f"{path} exists; use --force to replace it"
    if path.is_dir() and kind != "steps" and not _only_parts(path):
        return (
            f"{str(path)!r} exists and holds more than the parts of an export; choose another "
            "folder (it is never replaced)"
        )
    return None  # (a file, or step tables: plan_export checked those)


def _only_parts(folder: Path) -> bool:
    return all(entry.is_file() and _PART.match(entry.name) for entry in folder.iterdir())


def _gather_step_tables(folder: Path) -> None:
    """The step-tables folders of the buckets (``part-00003/``) made one: each table's part
    files moved into ``folder``'s table, numbered in turn, bucket after bucket."""
    buckets = sorted(p for p in folder.iterdir() if p.is_dir() and _PART.match(p.name + "."))
    for table in (STEPS_FOLDER, EPISODES_FOLDER, SCORES_FOLDER):
        number = 0
        for bucket in buckets:
            for part in sorted((bucket / table).glob("*.parquet")):
                basename = part.name.rsplit("-", 1)[0]
                (folder / table).mkdir(exist_ok=True)
                os.replace(part, folder / table / f"{basename}-{number:05d}.parquet")
                number += 1
    for bucket in buckets:
        shutil.rmtree(bucket)


def _into_place(partial: Path, path: Path) -> None:
    """Move the finished output to ``path``, replacing what is there (checked before)."""
    if path.exists():
        old = path.with_name(f".{path.name}.old")
        _remove(old)
        os.replace(path, old)
        os.replace(partial, path)
        _remove(old)
    else:
        os.replace(partial, path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
