"""The writer: finished episodes in, span file lines and trajectories out.

This is the only place that runs the assembler and the sinks for live runs. It runs on the
processor's background thread (:class:`EpisodeWriter` used directly) or in a helper process
(:mod:`agenttrace.processing.writer_process` builds one from a :class:`WriterSpec`). Either
way it sees one batch at a time from one thread, and everything it loses is counted in
:meth:`EpisodeWriter.report`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from agenttrace.export_queue import COUNTERS as QUEUE_COUNTERS
from agenttrace.processing.metrics import EpisodeSummary, summarize
from agenttrace.processing.record_export import RecordSpanExporter, SpanExportSpec
from agenttrace.semconv import SCORE
from agenttrace.sinks.base import Sink
from agenttrace.sinks.jsonl import JsonlSink
from agenttrace.sinks.scores import ScoreLog
from agenttrace.storage.otlp_json_writer import OtlpJsonLinesWriter
from agenttrace.trajectory.assembler import EpisodeAssembly
from agenttrace.trajectory.records import SpanRecord
from agenttrace.trajectory.scores import score_from_record

logger = logging.getLogger("agenttrace")

#: Attribute added to a trajectory whose long episode had spans come after their step was
#: finished (see EpisodeAssembly): how many were left out.
LATE_SPANS_ATTRIBUTE = "agenttrace.spans_too_late_for_step"

#: Instrumentation scope of agenttrace's own spans, whose content text its encoder wrote.
AGENTTRACE_SCOPE = "agenttrace"

#: ``max_episode_bytes`` when none is given.
DEFAULT_MAX_EPISODE_BYTES = 64 * 1024 * 1024


class EpisodeSpans(NamedTuple):
    """Span records of an episode still open, handed over as they end: their span lines are
    written and the writer keeps them towards the episode's trajectory."""

    episode_id: str
    records: list[SpanRecord]


class FinishedEpisode(NamedTuple):
    """What the processor hands over when an episode ends (or is given up on)."""

    episode_id: str
    # The records not handed over earlier in EpisodeSpans items.
    records: list[SpanRecord]
    # The episode span as it was at start: stands in for it if it never ended.
    start_record: SpanRecord | None
    root_span_id: int
    # How many records came earlier in EpisodeSpans items.
    streamed: int = 0


WriterItem = FinishedEpisode | EpisodeSpans | list[SpanRecord]


class SinkSpec(NamedTuple):
    """A built-in sink by name and constructor options: buildable in another process."""

    kind: str  # jsonl | parquet | steps | minari | jsondir | otlp
    options: Mapping[str, Any]


class WriterSpec(NamedTuple):
    sinks: tuple[SinkSpec, ...] = ()
    span_file: Mapping[str, Any] | None = None  # OtlpJsonLinesWriter options, or no span file
    span_export: SpanExportSpec | None = None  # spans to the OTLP endpoint, or not sent
    score_folder: str | None = None  # where late scores go (scores.jsonl), or nowhere
    summaries: bool = False  # summarize each episode for metrics (processing.metrics)
    max_episode_bytes: int = DEFAULT_MAX_EPISODE_BYTES


def build_sink(spec: SinkSpec) -> Sink:
    """The built-in sink a spec names (optional dependencies are imported only here)."""
    if spec.kind == "jsonl":
        from agenttrace.sinks.jsonl import JsonlSink

        return JsonlSink(**spec.options)
    if spec.kind == "parquet":
        from agenttrace.sinks.parquet import ParquetSink

        return ParquetSink(**spec.options)
    if spec.kind == "steps":
        from agenttrace.sinks.step_tables import StepTablesSink

        return StepTablesSink(**spec.options)
    if spec.kind == "minari":
        from agenttrace.sinks.minari_dataset import MinariSink

        return MinariSink(**spec.options)
    if spec.kind == "jsondir":
        from agenttrace.sinks.jsondir import JsonDirSink

        return JsonDirSink(**spec.options)
    if spec.kind == "otlp":
        from agenttrace.sinks.otlp_logs import OtlpLogSink

        return OtlpLogSink(**spec.options)
    raise ValueError(f"unknown sink kind {spec.kind!r}")


#: Counters in a report; the ones named *_failed_* / lost are losses.
REPORT_COUNTERS = (
    "episodes_done",
    "spans_done",
    "spans_written",
    "spans_failed_write",
    "episodes_failed_assembly",
    "episodes_failed_metrics",
    "spans_too_late_for_step",
    "torn_lines_cut",
    "torn_bytes_cut",
    "scores_written",
    "scores_malformed",
)


#: What went over the network, in a report: the span export's counters (``spans_`` + each
#: of export_queue.COUNTERS), what the export content policy changed, and the trajectories
#: sinks that send (OTLP logs) sent or not.
EXPORT_COUNTERS = (
    *(f"spans_{name}" for name in QUEUE_COUNTERS),
    "export_content_truncated",
    "export_content_blobs",
    "export_content_blob_failures",
    "trajectories_exported",
    "trajectories_not_exported",
)


def empty_report() -> dict[str, Any]:
    report: dict[str, Any] = dict.fromkeys((*REPORT_COUNTERS, *EXPORT_COUNTERS), 0)
    report.update(statuses={}, sink_errors={}, trajectory_paths=[], span_paths=[])
    report["span_export_error"] = ""  # why the last failed span export failed
    return report


def merge_reports(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Two writers' reports as one (a helper process that died, then its local stand-in)."""
    merged = empty_report()
    for key in (*REPORT_COUNTERS, *EXPORT_COUNTERS):
        merged[key] = first.get(key, 0) + second.get(key, 0)
    for key in ("statuses", "sink_errors"):
        merged[key] = dict(Counter(first.get(key, {})) + Counter(second.get(key, {})))
    for key in ("trajectory_paths", "span_paths"):
        merged[key] = list(dict.fromkeys([*first.get(key, ()), *second.get(key, ())]))
    merged["span_export_error"] = second.get("span_export_error") or first.get(
        "span_export_error", ""
    )
    return merged


def sampled_count(records: Iterable[SpanRecord]) -> int:
    """Spans of these records that go to the span file (RECORD_ONLY spans do not)."""
    return sum(1 for record in records if record.sampled)


class EpisodeWriter:
    """Writes span records to the span file (and sends them to the OTLP endpoint) and
    finished episodes to the sinks."""

    def __init__(
        self,
        sinks: Iterable[Sink] = (),
        span_writer: OtlpJsonLinesWriter | None = None,
        *,
        on_summary: Callable[[EpisodeSummary], None] | None = None,
        max_episode_bytes: int = DEFAULT_MAX_EPISODE_BYTES,
        score_log: ScoreLog | None = None,
        span_export: RecordSpanExporter | None = None,
    ) -> None:
        self.sinks = list(sinks)
        self.span_export = span_export
        # Scores of episodes written already (or rebuilt elsewhere): records loaders merge.
        self.score_log = score_log
        self.max_episode_bytes = max_episode_bytes
        # Episodes still open: their records so far, on their way to the trajectory.
        self._open: dict[str, EpisodeAssembly] = {}
        self.span_writer = span_writer
        # The JSONL sinks go last, and the last of them is the commit record: an episode in its
        # file has been given to every output (see commit_sink).
        self._write_order = [s for s in self.sinks if not isinstance(s, JsonlSink)] + [
            s for s in self.sinks if isinstance(s, JsonlSink)
        ]
        # Gets each written episode's summary (metrics are recorded where the MeterProvider is).
        self.on_summary = on_summary
        self._lock = threading.Lock()  # report() may run on another thread
        self._counts: Counter[str] = Counter()
        self._statuses: Counter[str] = Counter()
        self._sink_errors: Counter[str] = Counter()

    @property
    def writes_spans(self) -> bool:
        """Whether it wants every span (for the span file or the OTLP endpoint)."""
        return self.span_writer is not None or self.span_export is not None

    @property
    def commit_sink(self) -> JsonlSink | None:
        """The JSONL sink written last for each episode (None without one): an episode whose
        line is in its file went to every sink. A helper process's stand-in reads it to learn
        which unconfirmed episodes the helper wrote before it died."""
        last = self._write_order[-1] if self._write_order else None
        return last if isinstance(last, JsonlSink) else None

    def positions(self) -> dict[str, tuple[int, int] | None]:
        """Where the span file and the commit sink will write next (see :func:`lines_since`)."""
        commit = self.commit_sink
        return {
            "spans": self.span_writer.position if self.span_writer is not None else None,
            "commit": commit.position if commit is not None else None,
        }

    @classmethod
    def from_spec(
        cls,
        spec: WriterSpec,
        extra_sinks: Iterable[Sink] = (),
        *,
        on_summary: Callable[[EpisodeSummary], None] | None = None,
    ) -> EpisodeWriter:
        built: list[Any] = []
        try:
            span_writer = OtlpJsonLinesWriter(**spec.span_file) if spec.span_file else None
            if span_writer is not None:
                built.append(span_writer)
            for sink_spec in spec.sinks:
                built.append(build_sink(sink_spec))
            span_export = RecordSpanExporter(spec.span_export) if spec.span_export else None
        except BaseException:
            for output in built:  # a later sink failed to open: release what did open
                with contextlib.suppress(Exception):
                    output.close()
            raise
        sinks = built[1:] if span_writer is not None else built
        return cls(
            [*sinks, *extra_sinks],
            span_writer,
            on_summary=on_summary,
            max_episode_bytes=spec.max_episode_bytes,
            score_log=ScoreLog(spec.score_folder) if spec.score_folder else None,
            span_export=span_export,
        )

    def write(self, items: list[WriterItem]) -> None:
        """One batch: span-only items (lists of records), open episodes' spans and finished
        episodes."""
        for item in items:
            if type(item) is list:
                self._write_spans(item)
                self._write_scores(item)
            elif type(item) is EpisodeSpans:
                self.write_open(item)
            else:
                self._write_episode(item)  # type: ignore[arg-type]

    def write_open(self, item: EpisodeSpans, *, spans: bool = True) -> None:
        """Spans of an open episode; ``spans=False`` skips their span file line (written)."""
        if spans:
            self._write_spans(item.records)
        self.resume(item.episode_id, item.records)

    @property
    def rebuilds(self) -> bool:
        """Whether anything here needs trajectories: not when the spans only pass through
        (an agenttrace collect service rebuilds them, the ``collect`` setting)."""
        return bool(self.sinks) or self.on_summary is not None

    def resume(self, episode_id: str, records: list[SpanRecord]) -> None:
        """Take records of an open episode towards its trajectory, writing nothing."""
        if not self.rebuilds:
            return
        assembly = self._open.get(episode_id)
        if assembly is None:
            assembly = self._open[episode_id] = EpisodeAssembly(
                episode_id, trusted_scope=AGENTTRACE_SCOPE, max_bytes=self.max_episode_bytes
            )
        try:
            assembly.add(records)
        except Exception:
            logger.exception("agenttrace: could not take spans of episode %r", episode_id)

    def discard(self, episode_id: str) -> None:
        """Forget the records taken for an open episode (it was written elsewhere)."""
        self._open.pop(episode_id, None)

    def write_episode(self, episode: FinishedEpisode, *, spans: bool = True) -> None:
        """One finished episode; ``spans=False`` skips its span file line (already written)."""
        self._write_episode(episode, spans)

    def _write_episode(self, episode: FinishedEpisode, spans: bool = True) -> None:
        records = episode.records
        if spans:
            self._write_spans(records)
        if not self.rebuilds:
            self._add("episodes_done")
            return
        try:
            assembly = self._open.pop(episode.episode_id, None)
            if assembly is None:
                assembly = EpisodeAssembly(
                    episode.episode_id,
                    trusted_scope=AGENTTRACE_SCOPE,
                    max_bytes=self.max_episode_bytes,
                )
            assembly.add(records)
            start = episode.start_record
            if start is not None and not assembly.has_span(episode.root_span_id):
                assembly.add([start])  # the episode span never ended
            trajectory = assembly.trajectory()
        except Exception:
            self._add("episodes_failed_assembly")
            logger.exception("agenttrace: could not rebuild episode %r", episode.episode_id)
            return
        finally:
            self._add("episodes_done")
        if assembly.late:
            self._add("spans_too_late_for_step", assembly.late)
            trajectory.attributes[LATE_SPANS_ATTRIBUTE] = assembly.late
        with self._lock:
            self._statuses[trajectory.status] += 1
        for sink in self._write_order:
            try:
                sink.write(trajectory)
            except Exception as exc:
                self._output_failed(sink, exc)
        if self.on_summary is not None:
            try:
                self.on_summary(summarize(trajectory))
            except Exception:
                self._add("episodes_failed_metrics")
                if self._counts["episodes_failed_metrics"] == 1:
                    logger.exception(
                        "agenttrace: no metrics for episode %r (later failures are counted)",
                        episode.episode_id,
                    )

    def _write_scores(self, records: list[SpanRecord]) -> None:
        """Scores among span-only records (their episode is not open here): a score record
        each, and to every sink that keeps scores of its own (``write_score``)."""
        for record in records:
            if record.name != SCORE:
                continue
            try:
                score = score_from_record(record)
            except ValueError as exc:
                self._add("scores_malformed")
                logger.warning("agenttrace: a score span is left out: %s", exc)
                continue
            if self.score_log is not None:
                try:
                    self.score_log.write(score)
                    self._add("scores_written")
                except Exception as exc:
                    self._output_failed(self.score_log, exc)
            for sink in self.sinks:
                write_score = getattr(sink, "write_score", None)
                if write_score is not None:
                    try:
                        write_score(score)
                    except Exception as exc:
                        self._output_failed(sink, exc)

    def _write_spans(self, records: list[SpanRecord]) -> None:
        writer = self.span_writer
        if writer is None and self.span_export is None:
            return
        sampled = [record for record in records if record.sampled]
        if not sampled:
            return
        if self.span_export is not None:
            self.span_export.write(sampled)
        if writer is None:
            return
        try:
            writer.write(sampled)
            self._add("spans_written", len(sampled))
        except Exception as exc:
            self._add("spans_failed_write", len(sampled))
            self._output_failed(writer, exc)
        finally:
            self._add("spans_done", len(sampled))

    def flush(self) -> None:
        """Flush the files; outputs that send over the network send what they have, without
        waiting for the endpoint (:meth:`flush_export` waits)."""
        for output in self._outputs():
            try:
                if getattr(output, "sends_over_network", False):
                    output.flush(0.0)
                else:
                    output.flush()
            except Exception as exc:
                self._output_failed(output, exc)

    def flush_export(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the spans so far (and what sinks that send over
        the network have) to reach their endpoints, not at all while one is down; True when
        everything did."""
        deadline = time.monotonic() + timeout
        ok = True
        if self.span_export is not None:
            ok = self.span_export.flush(timeout)
        for output in self._outputs():
            if getattr(output, "sends_over_network", False):
                try:
                    ok = output.flush(max(0.0, deadline - time.monotonic())) is not False and ok
                except Exception as exc:
                    self._output_failed(output, exc)
                    ok = False
        return ok

    def close(self, timeout: float | None = None) -> None:
        """Close every output. ``timeout`` bounds what goes over the network (the span
        export and sinks that send, such as OTLP logs), which gets the time the files leave;
        files are always finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        remote = [o for o in self._outputs() if getattr(o, "sends_over_network", False)]
        for output in self._outputs():
            if output not in remote:
                self._close(output)
        for output in remote:  # (each keeps the deadline it is given)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                output.close(left)
            except Exception as exc:
                self._output_failed(output, exc)
        if self.span_export is not None:
            left = 60.0 if deadline is None else max(0.0, deadline - time.monotonic())
            self.span_export.close(left)

    def _close(self, output: Any) -> None:
        try:
            output.close()
        except Exception as exc:
            self._output_failed(output, exc)

    def report(self) -> dict[str, Any]:
        """Counters, statuses written, sink errors and the files written so far."""
        report = empty_report()
        with self._lock:
            report.update(self._counts)
            report["statuses"] = dict(self._statuses)
            report["sink_errors"] = dict(self._sink_errors)
        report["trajectory_paths"] = [
            str(path) for sink in self.sinks for path in getattr(sink, "paths", ())
        ]
        if self.span_writer is not None:
            report["span_paths"] = [str(path) for path in self.span_writer.paths]
        if self.span_export is not None:
            for name, value in self.span_export.counts().items():
                report[f"spans_{name}"] = value
            report.update(self.span_export.content_counts())
            report["span_export_error"] = self.span_export.queue.last_error
        for output in self._outputs():
            if getattr(output, "sends_over_network", False):
                report["trajectories_exported"] += output.sent
                report["trajectories_not_exported"] += output.failed
        for output in self._outputs():
            report["torn_lines_cut"] += getattr(output, "torn_lines_cut", 0)
            report["torn_bytes_cut"] += getattr(output, "torn_bytes_cut", 0)
        return report

    def _outputs(self) -> list[Any]:
        outputs = [*self.sinks, self.span_writer] if self.span_writer is not None else self.sinks
        return [*outputs, self.score_log] if self.score_log is not None else outputs

    def _add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def _output_failed(self, output: Any, exc: Exception) -> None:
        name = type(output).__name__
        with self._lock:
            self._sink_errors[name] += 1
            first = self._sink_errors[name] == 1
        if first:
            logger.error(
                "agenttrace: sink %s failed (%s: %s); its later errors are counted, "
                "other sinks go on",
                name,
                type(exc).__name__,
                exc,
            )


def report_paths(report: Mapping[str, Any], key: str) -> list[Path]:
    return [Path(path) for path in report.get(key, ())]


def lines_since(output: Any, position: tuple[int, int]) -> Iterator[bytes]:
    """The complete lines (each ending with a newline) written to a rotating line file after
    ``position`` (an ``output.position`` taken earlier): the rest of that file, then the
    later-numbered files. A torn last line is left out."""
    index, offset = position
    while True:
        try:
            handle = open(output.path_for(index), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return
        with handle:
            handle.seek(offset)
            for line in handle:
                if line.endswith(b"\n"):
                    yield line
        index, offset = index + 1, 0
