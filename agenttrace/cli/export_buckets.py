"""The tasks of ``agenttrace export --engine ray``: what each worker runs (no Ray here; the
driver, :mod:`agenttrace.cli.export_ray`, runs these on Ray Data).

1. **read** (:func:`read_chunk`, one task per chunk of the input): write the chunk's lines to
   one shard file, a segment per bucket. A span's bucket is its trace's: an episode lives in
   one trace (docs/context-propagation.md), so a bucket holds whole episodes, with the spans
   of other tracers under them. A line whose spans all go to one bucket goes there as it is
   (:mod:`agenttrace.storage.otlp_json_route` tells where without decoding it); any other
   line is decoded here and its records split. Two kinds of span reach across traces and are
   routed apart: a vector env step (one span for N sub-environments' episodes) is split into
   its env steps as the assembler would split it, each to the bucket of its episode's trace;
   a score (given by episode id, often from a trace of its own) goes to a side segment. Each
   chunk also writes which episodes it saw in which bucket, for the scores.
2. **scores** (:func:`route_scores`, only when there are scores): each score goes to the
   bucket of its episode (that of its own trace when no chunk saw the episode).
3. **rebuild** (:func:`rebuild_bucket`, one task per bucket): stream the bucket's segments,
   chunk after chunk, so its records come in the order of the input (the lines sent whole
   decoded here, with the one decoder), with its scores where they were read, through the one
   rebuild of ``agenttrace export``
   (:func:`agenttrace.cli.export.rebuild_to`: the streaming assembler, the filters, the
   writers), into the bucket's part of the output.

Each task holds at most one chunk (read) or the episodes open in one bucket (rebuild), never
the input. Tasks return what they did, and the problems they met, as plain values.
"""

from __future__ import annotations

import argparse
import heapq
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from agenttrace import semconv as sc
from agenttrace.cli.exits import error_text
from agenttrace.cli.export import ExportPlan, content_restorer, progress_bar, rebuild_to
from agenttrace.cli.export_outputs import SHOWN_ERRORS, ExportReport, open_output
from agenttrace.sinks.names import split_suffix
from agenttrace.storage.errors import ReadPosition, SpanDecodeError, SpanFormatError
from agenttrace.storage.otlp_json_lines import line_records
from agenttrace.storage.otlp_json_route import LinePlaces, line_places
from agenttrace.storage.record_shards import Segments, ShardWriter, read_segment
from agenttrace.storage.span_chunks import ChunkReader, SpanChunk
from agenttrace.trajectory.records import SpanRecord, is_vector_step, split_vector_step

_EPISODE_ID = sc.EPISODE_ID
_SCORE = sc.SCORE
_VECTOR_STEP = sc.ENV_VECTOR_STEP


def trace_bucket(trace_id: int, buckets: int) -> int:
    """The bucket of a trace (ints hash alike in every process)."""
    return hash(trace_id) % buckets


def episode_group(episode_id: str, buckets: int) -> int:
    """The score group of an episode id (a hash that is the same in every process)."""
    return zlib.crc32(episode_id.encode("utf-8", "surrogatepass")) % buckets


# --- 1. read ----------------------------------------------------------------------------------


@dataclass
class ProblemLog:
    """What a task could not read or decode: counted, the first few kept (where they are)
    for the driver to name the first of the whole input in the summary."""

    unreadable: int = 0
    undecodable: int = 0
    #: (decode error?, reason, file, line, span)
    first: list[tuple[bool, str, str | None, int | None, int | None]] = field(default_factory=list)

    def __call__(self, error: SpanFormatError) -> None:
        decode = isinstance(error, SpanDecodeError)
        if decode:
            self.undecodable += 1
        else:
            self.unreadable += 1
        if sum(1 for kept in self.first if kept[0] == decode) < SHOWN_ERRORS:
            self.first.append((decode, error.reason, error.source, error.line, error.span))

    def moved(self, name: str, lines_before: int) -> None:
        """Lines of file ``name`` counted from the start of the file, not of the chunk."""
        self.first = [
            (decode, reason, source, line + lines_before, span)
            if line is not None and source == name
            else (decode, reason, source, line, span)
            for decode, reason, source, line, span in self.first
        ]


def replay_problems(report: ExportReport, logs: list[ProblemLog], files: dict[str, int]) -> None:
    """The problems of every task into ``report``: all counted, the first named in the order
    of the input (``files``: file name -> its place in it)."""
    first = sorted(
        (kept for log in logs for kept in log.first),
        key=lambda kept: (files.get(kept[2] or "", len(files)), kept[3] or 0),
    )
    shown = {True: 0, False: 0}
    for decode, reason, source, line, span in first:
        if shown[decode] < SHOWN_ERRORS:
            kind = SpanDecodeError if decode else SpanFormatError
            report.bad(kind(reason, source=source, line=line, span=span))
            shown[decode] += 1
    report.undecodable += sum(log.undecodable for log in logs) - shown[True]
    report.bad_records += sum(log.unreadable for log in logs) - shown[False]


@dataclass(frozen=True)
class ReadTask:
    chunk: SpanChunk
    buckets: int
    shard: str  # the shard file to write


@dataclass
class ReadResult:
    chunk: int
    spans: int = 0  # decoded here (the lines sent on whole are decoded by their bucket)
    seen: int = 0  # spans read, decoded or not (for the progress line)
    lines: int = 0
    scores: int = 0
    problems: ProblemLog = field(default_factory=ProblemLog)
    #: Frames of bucket b at b, scores of group g at buckets + g, episodes seen of group g
    #: at 2 * buckets + g.
    segments: Segments = field(default_factory=Segments)
    error: str | None = None


def read_chunk(task: ReadTask) -> ReadResult:
    """Read one chunk and write it, by bucket, to its shard file: a line whose spans all go
    to one bucket as it is (its bucket decodes it), any other line decoded and split."""
    buckets = task.buckets
    chunk, result = task.chunk, ReadResult(task.chunk.index)
    shard = ShardWriter(task.shard, 3 * buckets)
    seen: dict[str, int] = {}  # episode id -> bucket (for the scores of other traces)
    reader = ChunkReader(chunk, result.problems)
    try:
        for line, item in reader:
            if type(item) is bytes:
                places = line_places(item)
                bucket = _one_bucket(places, buckets)
                if places is not None and bucket is not None:
                    for episode_id in places.episodes:
                        seen.setdefault(episode_id, bucket)
                    shard.add(bucket, (line, item))
                    result.seen += places.spans
                    continue
                item = line_records(item, line, chunk.name, result.problems, last=True)
            assert isinstance(item, list)
            result.spans += len(item)
            result.seen += len(item)
            result.scores += _split(item, line, buckets, shard, seen)
        groups: list[dict[str, int]] = [{} for _ in range(buckets)]
        for episode_id, bucket in seen.items():
            groups[episode_group(episode_id, buckets)][episode_id] = bucket
        for group, episodes in enumerate(groups):
            if episodes:
                shard.add(2 * buckets + group, episodes)
        result.segments = shard.close()
    except (OSError, ImportError) as exc:  # the chunk, or the shard, cannot be read or written
        result.error = f"{chunk.name}: {error_text(exc)}"
    result.lines = reader.lines
    return result


def _one_bucket(places: LinePlaces | None, buckets: int) -> int | None:
    """The bucket of every span of a line; None when they go to several, or when only
    decoding the line can tell."""
    if places is None:
        return None
    found = {trace_bucket(trace, buckets) for trace in places.traces}
    return found.pop() if len(found) == 1 else None


def _split(
    records: list[SpanRecord], line: int, buckets: int, shard: ShardWriter, seen: dict[str, int]
) -> int:
    """A decoded line's records into the frames of their buckets; returns the scores."""
    scores = 0
    by_bucket: dict[int, list[SpanRecord]] = {}
    for record in records:
        episode_id = record.attributes.get(_EPISODE_ID)
        if episode_id is None:
            if record.name == _VECTOR_STEP and is_vector_step(record):
                for part in split_vector_step(record):  # (as the assembler splits it)
                    bucket = trace_bucket(part.trace_id, buckets)
                    seen.setdefault(str(part.attributes[_EPISODE_ID]), bucket)
                    by_bucket.setdefault(bucket, []).append(part)
                continue
        elif record.name == _SCORE:
            shard.add(buckets + episode_group(str(episode_id), buckets), (line, [record]))
            scores += 1
            continue
        bucket = trace_bucket(record.trace_id, buckets)
        if episode_id is not None:
            seen.setdefault(str(episode_id), bucket)
        by_bucket.setdefault(bucket, []).append(record)
    for bucket, kept in by_bucket.items():
        shard.add(bucket, (line, kept))
    return scores


# --- 2. scores --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreTask:
    group: int
    buckets: int
    #: (chunk, shard file, its scores segment of this group, its episodes segment of it)
    shards: list[tuple[int, str, tuple[int, int], tuple[int, int]]]
    out: str  # the file to write, a segment per bucket


@dataclass
class ScoreResult:
    group: int
    segments: Segments = field(default_factory=Segments)
    error: str | None = None


def route_scores(task: ScoreTask) -> ScoreResult:
    """Send each score of one group to the bucket of its episode."""
    buckets = task.buckets
    result = ScoreResult(task.group)
    try:
        where: dict[str, int] = {}
        for _, path, _, (offset, length) in task.shards:
            for episodes in read_segment(path, offset, length):
                for episode_id, bucket in episodes.items():
                    where.setdefault(episode_id, bucket)
        out = ShardWriter(task.out, buckets)
        for chunk, path, (offset, length), _ in task.shards:
            for line, records in read_segment(path, offset, length):
                for record in records:
                    episode_id = str(record.attributes[_EPISODE_ID])
                    bucket = where.get(episode_id)
                    if bucket is None:  # an episode not in the input: late, in its own bucket
                        bucket = trace_bucket(record.trace_id, buckets)
                    out.add(bucket, (chunk, line, [record]))
        result.segments = out.close()
    except OSError as exc:
        result.error = error_text(exc)
    return result


# --- 3. rebuild -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketTask:
    bucket: int
    args: argparse.Namespace
    plan: ExportPlan
    folders: dict[str | None, str]  # --split part (None without) -> the folder of its parts
    records: list[tuple[int, str, int, int]]  # (chunk, shard file, offset, length)
    scores: list[tuple[str, int, int]]  # (score file, offset, length)
    chunks: dict[int, tuple[str, int]]  # chunk -> (its file, lines of the file before it)


@dataclass
class BucketResult:
    bucket: int
    report: ExportReport
    spans: int = 0  # decoded here: the lines read stage sent on whole
    problems: ProblemLog = field(default_factory=ProblemLog)
    paths: list[str] = field(default_factory=list)
    error: str | None = None


def part_path(folder: str | Path, kind: str, out: str, bucket: int) -> Path:
    """Where bucket ``bucket`` writes: ``part-00003.jsonl`` (the suffix of ``--out``), or a
    folder ``part-00003`` of step tables."""
    name = f"part-{bucket:05d}"
    return Path(folder) / (name if kind == "steps" else name + split_suffix(Path(out).name)[1])


class _BucketSource:
    """A bucket's records in the order of the input (a line sent whole decoded here, with
    the one decoder); ``position`` names each one's file and line."""

    def __init__(self, task: BucketTask, result: BucketResult, position: ReadPosition) -> None:
        self.task = task
        self.result = result
        self.position = position

    def records(self) -> Iterator[SpanRecord]:
        task, result, position = self.task, self.result, self.position
        streams: list[Iterator[tuple[int, int, Any]]] = [
            read_segment(path, offset, length) for path, offset, length in task.scores
        ]
        streams.append(_frames(task.records))
        # A score comes before the records of its line: while its episode is open, it joins.
        frames = heapq.merge(*streams, key=lambda frame: frame[:2])
        for chunk, line, item in frames:
            name, before = task.chunks[chunk]
            position.source, position.line = name, before + line
            if type(item) is bytes:
                item = line_records(item, before + line, name, result.problems, last=True)
                result.spans += len(item)
            yield from item


def _frames(segments: list[tuple[int, str, int, int]]) -> Iterator[tuple[int, int, Any]]:
    """(chunk, line, the line's bytes or records) of a bucket's segments, chunk after chunk."""
    for chunk, path, offset, length in segments:
        for line, item in read_segment(path, offset, length):
            yield chunk, line, item


def rebuild_bucket(task: BucketTask) -> BucketResult:
    """Rebuild one bucket's episodes into its part of the output."""
    args, kind = task.args, task.plan.kind
    report = ExportReport()
    position = ReadPosition()
    writers: dict[str | None, Any] = {}
    result = BucketResult(task.bucket, report)
    report.bad = result.problems  # type: ignore[method-assign]  # (named by the driver, in order)
    try:
        for name, folder in task.folders.items():
            path = part_path(folder, kind, args.out, task.bucket)
            writers[name] = open_output(args, kind, path, None)
        quiet = progress_bar(Console(file=io.StringIO()), disabled=True)
        restore = content_restorer(args.blob_store)
        source = _BucketSource(task, result, position)
        rebuild_to(args, task.plan, writers, source, restore, report, position, quiet)
        if sum(report.written.values()) or report.late_scores[True]:
            result.paths = [str(writer.close()) for writer in writers.values()]
        else:  # (an empty bucket writes no part)
            for writer in writers.values():
                writer.discard()
    except (OSError, ImportError, ValueError) as exc:
        for writer in writers.values():
            writer.discard()
        result.error = f"part {task.bucket}: {error_text(exc)}"
    del report.bad  # (the method again)
    return result
