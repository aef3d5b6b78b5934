"""A configured pipeline: where spans come from and where spans and trajectories go.

``configure()`` builds one :class:`AgentTrace` and makes it the default used by the tracing
API; without a call, the first span configures from the environment. The TracerProvider is,
in order: the one passed in; the global one when it is an SDK provider (agenttrace adds its
processors to it and never replaces it); else a private provider that only agenttrace uses.
Episode metrics pick their MeterProvider the same way (docs/metrics.md).
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime as _dt
import logging
import os
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from agenttrace import _logging, config, exit_line, process_end
from agenttrace import semconv as sc
from agenttrace._threads import signals_blocked
from agenttrace._version import __version__
from agenttrace.processing.foreign_spans import ForeignSpanPolicy
from agenttrace.processing.metrics import CountingMetricExporter, EpisodeMetrics
from agenttrace.processing.record_export import (
    SpanExportSpec,
    UnsupportedProtocol,
    collect_export_spec,
    otel_environment,
    otlp_exporter,
    otlp_protocol,
)
from agenttrace.processing.trajectory_processor import TrajectoryProcessor
from agenttrace.processing.writer import (
    EXPORT_COUNTERS,
    EpisodeWriter,
    SinkSpec,
    WriterSpec,
)
from agenttrace.processing.writer_process import RemoteWriter
from agenttrace.reading import before_reading
from agenttrace.sinks.base import Sink
from agenttrace.sinks.callback import as_sink
from agenttrace.sinks.files import safe_filename
from agenttrace.storage.blobs import open_blob_store
from agenttrace.trajectory.model import Trajectory

logger = logging.getLogger("agenttrace")

_OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_OTLP_METRICS_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class AgentTrace:
    """One run's tracing pipeline. Use :func:`configure` to make one."""

    def __init__(
        self,
        settings: config.Settings,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: Any | None = None,
        extra_sinks: Iterable[Sink | Callable[[Trajectory], None]] = (),
    ) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.capture_content = settings.content != "none"
        self.redact = settings.redact
        self.run_dir: Path | None = None
        self.trajectory_processor: TrajectoryProcessor | None = None
        self.metrics: EpisodeMetrics | None = None
        self.owned_meter_provider: Any | None = None  # an SDK MeterProvider agenttrace made
        self.metric_exporter: CountingMetricExporter | None = None  # its exporter, counted
        self._shut_down = False
        self._pid = os.getpid()
        # What a forked child needs to make a pipeline like this one (see _after_fork_in_child).
        self._made_with = (tracer_provider, meter_provider, tuple(extra_sinks))
        self.provider, self.owns_provider = _choose_provider(tracer_provider, settings)
        self.tracer = self.provider.get_tracer(sc.INSTRUMENTATION_SCOPE, __version__)
        # Open episodes by environment, to mark them abandoned/aborted (see instrument.spans).
        self.open_episodes_by_env: dict[int, Any] = {}
        self.env_lock = threading.Lock()
        user_sinks = list(self._made_with[2])
        self._user_sink_count = len(user_sinks)
        if not self.enabled:
            return
        targets = settings.spans
        if settings.collect:  # an agenttrace collect service rebuilds: send spans, whole
            targets = ("otlp", "file") if targets and "file" in targets else ("otlp",)
        elif targets is None:
            targets = ("file",)
            if self.owns_provider and any(os.environ.get(v) for v in _OTLP_ENDPOINT_VARS):
                targets = ("file", "otlp")
        # Everything that can fail on a bad setting or an unusable output folder comes before
        # anything starts (threads, the helper process) or is added to the provider.
        # Spans go to the OTLP endpoint from the writer (agenttrace.processing.record_export),
        # under the export content policy: spans.jsonl stays whole.
        span_export = _span_export_spec(settings) if "otlp" in targets else None
        files_here = "file" in targets or (
            not settings.collect
            and any(kind in ("jsonl", "parquet", "steps", "jsondir") for kind in settings.sinks)
        )
        spec = WriterSpec(
            sinks=tuple(self._sink_specs()),
            span_file=self._span_file_options() if "file" in targets else None,
            span_export=span_export,
            # Late scores beside the run's files (agenttrace.sinks.scores).
            score_folder=str(self._ensure_run_dir()) if files_here else None,
            max_episode_bytes=settings.max_episode_bytes,
        )
        in_ray_worker = _in_ray_worker()
        chosen_meter_provider = self._choose_meter_provider(meter_provider)
        if chosen_meter_provider is not None:
            self.metrics = EpisodeMetrics(chosen_meter_provider)
        try:
            writer = _make_writer(
                spec,
                user_sinks,
                settings.writer,
                in_ray_worker=in_ray_worker,
                on_summary=self.metrics.record if self.metrics is not None else None,
            )
        except BaseException:
            if self.owned_meter_provider is not None:
                self.owned_meter_provider.shutdown()
            raise
        self.trajectory_processor = TrajectoryProcessor(
            writer=writer,
            max_open_episodes=settings.max_open_episodes,
            idle_timeout=settings.idle_timeout,
            queue_size=settings.queue_size,
            block_timeout=settings.block_timeout,
            check_interval=settings.flush_interval,
            flush_each_episode=in_ray_worker,
            foreign_spans=ForeignSpanPolicy(
                capture_content=self.capture_content, redact=self.redact
            ),
            conventions=settings.conventions,
            shutdown_at_exit=False,  # this pipeline's exit handler shuts it down, then reports
        )
        self.provider.add_span_processor(self.trajectory_processor)
        # Registered after the writer: exit handlers run last-registered first, so this one
        # runs before the helper process is told to stop (writer_process._Helper.stop).
        atexit.register(self._at_exit)
        process_end.watch(self)
        _pipelines.add(self)

    # --- construction ---------------------------------------------------------------------

    def _choose_meter_provider(self, explicit: Any | None) -> Any | None:
        """Where episode metrics go: see the ``metrics`` setting; None records none."""
        # Imported here: the SDK's metrics package costs 30 ms, which `agenttrace export` and
        # runs without metrics need not pay.
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        mode = self.settings.metrics
        if mode == "none":
            return None
        if explicit is not None and mode == "auto":
            if not callable(getattr(explicit, "get_meter", None)):
                raise config.ConfigError(
                    "meter_provider must be an OpenTelemetry MeterProvider, "
                    f"got {type(explicit).__name__}"
                )
            return explicit
        if mode == "auto":
            current = metrics.get_meter_provider()
            if isinstance(current, MeterProvider):
                return current
            wanted = self.owns_provider and any(
                os.environ.get(v) for v in _OTLP_METRICS_ENDPOINT_VARS
            )
            if not wanted:
                return None
        self.metric_exporter = CountingMetricExporter(_otlp("metrics"))
        with signals_blocked():  # its export thread starts here: see agenttrace._threads
            reader = PeriodicExportingMetricReader(self.metric_exporter)
        self.owned_meter_provider = MeterProvider(
            metric_readers=[reader], resource=self.provider.resource, shutdown_on_exit=False
        )
        return self.owned_meter_provider

    def _ensure_run_dir(self) -> Path:
        """The run folder, made now and checked writable, so a bad ``out`` fails here."""
        if self.run_dir is None:
            name = self.settings.run_name or _default_run_name()
            run_dir = Path(self.settings.out) / safe_filename(name)
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
                _check_writable(run_dir)
            except OSError as exc:
                raise config.OutputFolderError(
                    f"cannot write to the output folder {self.settings.out!r} "
                    f"(out= / AGENTTRACE_OUT): {exc}"
                ) from exc
            self.run_dir = run_dir
        return self.run_dir

    def _sink_specs(self) -> list[SinkSpec]:
        if self.settings.collect:  # the service writes the trajectories
            return []
        specs = []
        for kind in self.settings.sinks:
            options: dict[str, Any]
            if kind == "jsonl":
                options = {
                    "folder": self._ensure_run_dir(),
                    "max_bytes": self.settings.jsonl_max_bytes,
                }
            elif kind in ("parquet", "steps"):
                options = {"folder": self._ensure_run_dir()}
            elif kind == "minari":
                run_name = self._ensure_run_dir().name
                options = {
                    "dataset_id": self.settings.minari_dataset_id or f"agenttrace/{run_name}-v0",
                    # (this process's: a writer process started earlier has another environ)
                    "root": os.environ.get("MINARI_DATASETS_PATH"),
                }
            elif kind == "jsondir":
                options = {"folder": self._ensure_run_dir() / "episodes"}
            else:  # otlp
                options = {"resource": dict(self.provider.resource.attributes)}
            specs.append(SinkSpec(kind, options))
        return specs

    def _span_file_options(self) -> dict[str, Any]:
        return {
            "path_or_folder": self._ensure_run_dir(),
            "basename": "spans",
            "max_bytes": self.settings.jsonl_max_bytes,
        }

    # --- public -------------------------------------------------------------------------

    @property
    def trajectory_paths(self) -> list[Path]:
        """Trajectory files written so far (complete after ``force_flush``/``shutdown``)."""
        processor = self.trajectory_processor
        return processor.trajectory_paths if processor is not None else []

    @property
    def span_paths(self) -> list[Path]:
        processor = self.trajectory_processor
        return processor.span_paths if processor is not None else []

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write every finished episode and span so far; True when all made it in time."""
        if not self.enabled or self._shut_down:
            return True
        deadline = time.monotonic() + timeout_millis / 1000

        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        processor = self.trajectory_processor
        assert processor is not None
        ok = processor.force_flush(timeout_millis)
        ok = processor.writer.flush_export(remaining()) and ok
        if self.owned_meter_provider is not None:
            try:
                ok = self.owned_meter_provider.force_flush(int(remaining() * 1000)) and ok
            except Exception:
                logger.debug("agenttrace: flushing the metrics failed", exc_info=True)
                ok = False
        return ok

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Flush, write still-open episodes as incomplete, close files. Idempotent.

        Everything shares one deadline, ``timeout_millis`` from now (at exit, on SIGTERM
        and when a worker process ends: the ``exit_timeout`` setting): the writer (files
        first, then the span export and sinks that send over the network) and the metrics'
        last export each get a share. Files are always finished; what is not sent by then
        is counted (:meth:`stats`), never waited on longer, and no exporter's failure is
        raised. Then, unless the ``exit_report`` setting is false, says on stderr in one line
        how many episodes were written and where, and what did not reach the endpoint
        (:meth:`summary_line`). Runs by itself at exit, on SIGTERM and when a worker process
        ends.
        """
        if self._shut_down:
            return
        self._shut_down = True
        atexit.unregister(self._at_exit)
        deadline = time.monotonic() + timeout_millis / 1000
        # The metrics' last export gets a share of its own: the writer (files first, then
        # the span export) may use the rest, and a dead endpoint must not leave it none.
        metrics_share = 0.0
        if self.owned_meter_provider is not None:
            metrics_share = min(_METRICS_EXIT_SHARE * timeout_millis / 1000, 1.0)

        def remaining(share: float = 0.0) -> int:
            return max(0, int((deadline - share - time.monotonic()) * 1000))

        _guarded("writing what is left", lambda: self._shutdown_processor(remaining(metrics_share)))
        if self.owns_provider:
            _guarded("shutting the TracerProvider down", self.provider.shutdown)
        if self.owned_meter_provider is not None:  # after the writer: its last episodes count
            provider = self.owned_meter_provider
            if self.metric_exporter is not None:
                self.metric_exporter.closing = True
            _guarded("sending the last metrics", lambda: provider.shutdown(max(1, remaining())))
        # A forked child that exits normally runs this too; its counters start as a copy of
        # the parent's, so only the process that made the pipeline reports.
        if self.settings.exit_report and self.enabled and not _is_worker_process():
            self._say_where_written()

    def _shutdown_processor(self, timeout_millis: int) -> None:
        if self.trajectory_processor is not None:
            self.trajectory_processor.shutdown(timeout_millis)

    def _stop_in_forked_child(self) -> None:
        """This is a forked child's copy of a parent's pipeline: its threads, helper process,
        files and open episodes are the parent's. It stops here without writing anything;
        the child's spans go to a pipeline of its own (:func:`get_default`)."""
        self._shut_down = True
        atexit.unregister(self._at_exit)
        if self.trajectory_processor is not None:
            self.trajectory_processor.stop_in_forked_child()

    def _for_forked_child(self) -> AgentTrace:
        """A pipeline for a forked child like this one, writing to a run folder of its own
        (``<this run>-worker-<pid>``), from the same settings, providers and sinks."""
        parent_run = self.run_dir.name if self.run_dir is not None else _default_run_name()
        settings = dataclasses.replace(self.settings, run_name=f"{parent_run}-worker-{os.getpid()}")
        tracer_provider, meter_provider, extra_sinks = self._made_with
        return AgentTrace(
            settings,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            extra_sinks=extra_sinks,
        )

    def _at_exit(self) -> None:
        self.shutdown(timeout_millis=int(self.settings.exit_timeout * 1000))

    def summary_line(self) -> str | None:
        """``agenttrace: 12 episodes -> <file or run folder>``, with what was lost, if any.

        None when this pipeline neither wrote nor tried to write anything. Complete after
        :meth:`shutdown`.
        """
        if not self.enabled or self.trajectory_processor is None:
            return None
        stats = self.stats()
        episodes = stats.get("episodes_written", 0)
        lost = exit_line.losses(stats)
        lost += exit_line.not_sent(stats, kept_in_file=bool(self.span_paths))
        exporter = self.metric_exporter
        if exporter is not None and (exporter.failed or not exporter.exported):
            lost.append(exit_line.metrics_not_sent(exporter.last_error))
        scores = int(stats.get("scores_written", 0) or 0)
        if not (episodes or stats.get("spans_written", 0) or lost or scores):
            return None
        line = f"agenttrace: {episodes} episode{'' if episodes == 1 else 's'}"
        where = self._where_written()
        if where:
            line += f" -> {where}"
        if scores and self.run_dir is not None:
            line += (
                f"; {scores} late score{'' if scores == 1 else 's'} -> "
                f"{self.run_dir / 'scores.jsonl'}"
            )
        if lost:
            line += ", " + ", ".join(lost) + " (see AgentTrace.stats())"
        return line

    def _where_written(self) -> str:
        paths = self.trajectory_paths
        if len(paths) == 1:
            return str(paths[0])
        if paths:
            if self.run_dir is not None and all(self.run_dir in p.parents for p in paths):
                return str(self.run_dir)
            return os.path.commonpath([str(p) for p in paths])
        places = []
        if "steps" in self.settings.sinks and self.run_dir is not None:
            places.append(f"{self.run_dir} (step tables)")
        if "minari" in self.settings.sinks and self.run_dir is not None:
            dataset = self.settings.minari_dataset_id or f"agenttrace/{self.run_dir.name}-v0"
            places.append(f"the Minari dataset {dataset}")
        if "otlp" in self.settings.sinks:
            places.append("the OTLP logs endpoint")
        if self._user_sink_count:
            places.append("your sink" + ("s" if self._user_sink_count > 1 else ""))
        if self.settings.collect:  # (spans sent: the service writes the trajectories)
            places.append(f"agenttrace collect at {self.settings.collect}")
        if not places:  # no trajectory output: say where the spans went
            spans = self.span_paths
            if len(spans) == 1:
                places.append(f"{spans[0]} (spans only)")
            elif self.run_dir is not None:
                places.append(f"{self.run_dir} (spans only)")
        return " and ".join(places)

    def _say_where_written(self) -> None:
        try:
            line = self.summary_line()
            if line is not None and sys.stderr is not None:
                # Not the logger: it has no handler of its own, and info would be dropped.
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:  # at exit, on a closed stderr say: never an error of ours
            logger.debug("agenttrace: could not write the exit report", exc_info=True)

    def stats(self) -> dict[str, Any]:
        """Counters for the run summary, including every kind of loss."""
        stats: dict[str, Any] = (
            self.trajectory_processor.stats() if self.trajectory_processor else {}
        )
        stats["spans_dropped"] = stats.get("spans_dropped_queue_full", 0) + stats.get(
            "spans_failed_write", 0
        )
        # spans_exported, spans_not_exported (+ _queue_full, _export_failed, _endpoint_down,
        # _at_shutdown), spans_pending: the OTLP endpoint's (the writer sends them), apart
        # from the losses above; export_content_*: what the export content policy changed.
        for key in EXPORT_COUNTERS:
            stats.setdefault(key, 0)
        stats["spans_export_failed"] = stats["spans_not_exported_export_failed"]  # older name
        exporter = self.metric_exporter
        stats["metrics_exported"] = exporter.exported if exporter is not None else 0
        stats["metrics_not_exported"] = 0
        if exporter is not None:
            # After shutdown, a last export that never returned is not sent either.
            unconfirmed = self._shut_down and not exporter.exported and not exporter.failed
            stats["metrics_not_exported"] = exporter.failed + int(unconfirmed)
        # One figure for both places metrics can fail: summarizing (the writer) and recording.
        stats["metrics_failures"] = stats.pop("episodes_failed_metrics", 0) + (
            self.metrics.failures if self.metrics is not None else 0
        )
        return stats


def _is_worker_process() -> bool:
    """A multiprocessing worker: it writes a run folder of its own but says nothing at exit
    (a vector env's sixteen workers would print sixteen lines); its parent's line stands."""
    module = sys.modules.get("multiprocessing")
    try:
        return module is not None and module.parent_process() is not None
    except Exception:
        return False


def _check_writable(folder: Path) -> None:
    """Raise the OSError of creating a file in ``folder``, if any."""
    fd, name = tempfile.mkstemp(prefix=".agenttrace-write-check-", dir=folder)
    os.close(fd)
    os.unlink(name)


def _default_run_name() -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"run-{now}-{os.getpid()}"


def _make_writer(
    spec: WriterSpec,
    user_sinks: list[Sink | Callable[[Trajectory], None]],
    mode: str,
    *,
    in_ray_worker: bool,
    on_summary: Callable[[Any], None] | None = None,
) -> EpisodeWriter | RemoteWriter:
    """In a helper process when asked (or on auto, when it can run every sink), else here."""
    if mode == "auto":
        helpful = not user_sinks and _available_cpus() >= 2 and not in_ray_worker
        mode = "process" if helpful else "thread"
    elif mode == "process" and user_sinks:
        logger.warning(
            "agenttrace: writer=process cannot run your own sink objects in another process; "
            "writing in this process"
        )
        mode = "thread"
    if mode == "process":
        return RemoteWriter(spec, on_summary=on_summary)
    return EpisodeWriter.from_spec(
        spec, [as_sink(sink) for sink in user_sinks], on_summary=on_summary
    )


def _in_ray_worker() -> bool:
    """Ray ends worker processes without running exit handlers, and kills their children."""
    if "ray" not in sys.modules:
        return False
    try:
        from ray._private import worker

        return worker.global_worker.mode == worker.WORKER_MODE
    except Exception:
        return False


def _available_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _choose_provider(
    explicit: TracerProvider | None, settings: config.Settings
) -> tuple[TracerProvider, bool]:
    if explicit is not None:
        if not isinstance(explicit, TracerProvider):
            raise config.ConfigError(
                "tracer_provider must be an opentelemetry.sdk.trace.TracerProvider "
                f"(agenttrace adds span processors to it), got {type(explicit).__name__}"
            )
        return explicit, False
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current, False
    service = settings.service_name or os.environ.get("OTEL_SERVICE_NAME") or "agenttrace"
    resource = Resource.create({"service.name": service})
    return TracerProvider(resource=resource, shutdown_on_exit=False), True


def _span_export_spec(settings: config.Settings) -> SpanExportSpec:
    """How the writer sends spans over OTLP. A bad protocol or blob store fails here, in
    configure(), before anything starts (the writer opens its own blob store)."""
    if settings.collect:
        return collect_export_spec(settings.collect, settings.queue_size)
    environment = otel_environment()
    try:
        otlp_protocol("traces", environment)
    except UnsupportedProtocol as exc:
        raise config.ConfigError(str(exc)) from exc
    if settings.export_content == "ref":
        try:
            open_blob_store(settings.blob_store or "")
        except Exception as exc:
            raise config.ConfigError(
                f"blob_store={settings.blob_store!r} (AGENTTRACE_BLOB_STORE): {exc}"
            ) from exc
    return SpanExportSpec(
        environment=environment,
        content=settings.export_content,
        max_bytes=settings.export_max_bytes,
        blob_store=settings.blob_store,
        max_queue=settings.queue_size,
    )


def _otlp(signal: str) -> Any:
    """The OTLP exporter of ``signal`` (a bad protocol is a ConfigError)."""
    try:
        return otlp_exporter(signal)
    except UnsupportedProtocol as exc:
        raise config.ConfigError(str(exc)) from exc


#: The part of the exit deadline kept for the metrics' last export (at most 1 s).
_METRICS_EXIT_SHARE = 0.2


def _guarded(what: str, step: Callable[[], Any]) -> None:
    """One step of the exit: its failure is logged (debug) and never raised."""
    try:
        step()
    except Exception:
        logger.debug("agenttrace: %s failed at shutdown", what, exc_info=True)


# --- the default instance -------------------------------------------------------------------

_default: AgentTrace | None = None
_default_lock = threading.Lock()


def configure(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: Any | None = None,
    sinks: Iterable[str | Sink | Callable[[Trajectory], None]] | None = None,
    **options: Any,
) -> AgentTrace:
    """Set up agenttrace and make it the default for the tracing API.

    Every option (``out``, ``run_name``, ``content``, ... see docs/configuration.md) may be
    given here or as its ``AGENTTRACE_*`` variable; arguments win. ``sinks`` mixes built-in
    sink names (``"jsonl"``, ``"parquet"``, ``"jsondir"``, ``"otlp"``) with sink objects or
    plain callables; given, it replaces ``AGENTTRACE_SINKS``. ``meter_provider`` receives the
    episode metrics (else the global SDK one, or OTLP; see the ``metrics`` setting). A previous
    default pipeline is shut down first, so its files are complete.

    A bad argument (or ``AGENTTRACE_*`` variable, or an output folder that cannot be written)
    raises :class:`ConfigError` naming the setting. Tracing is then off, never set up from
    the environment behind your back: the previous default pipeline is shut down and the
    tracing API records nothing until a ``configure()`` succeeds.
    """
    global _default
    try:
        extra = _split_sinks(sinks, options)
        settings = config.resolve(**options)
    except BaseException:
        _switch_off()
        raise
    with _default_lock:
        previous, _default = _default, None
    if previous is not None:
        previous.shutdown()
    try:
        instance = AgentTrace(
            settings,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            extra_sinks=extra,
        )
    except BaseException:
        _switch_off()
        raise
    with _default_lock:
        _default = instance
    return instance


def _split_sinks(sinks: Any, options: dict[str, Any]) -> list[Sink | Callable[[Trajectory], None]]:
    """``configure(sinks=...)``: the built-in names go to ``options["sinks"]``; the sink objects
    and callables are returned. A string is a comma-separated list of names."""
    if sinks is None:
        return []
    if isinstance(sinks, str):
        options["sinks"] = sinks
        return []
    if isinstance(sinks, (bytes, bytearray)) or not isinstance(sinks, Iterable):
        raise config.ConfigError(
            f"sinks={config._shown(sinks)} (AGENTTRACE_SINKS): expected a list of sink names "
            f"({', '.join(config.SINK_CHOICES)}), sink objects or callables, "
            f"got {type(sinks).__name__}"
        )
    items = list(sinks)
    extra = [s for s in items if not isinstance(s, str)]
    for sink in extra:
        is_sink = all(hasattr(sink, name) for name in ("write", "flush", "close"))
        if not is_sink and not callable(sink):
            raise config.ConfigError(
                f"sinks: {config._shown(sink)} ({type(sink).__name__}) is neither a sink name "
                f"({', '.join(config.SINK_CHOICES)}), a sink (write, flush, close) nor a callable"
            )
    options["sinks"] = tuple(s for s in items if isinstance(s, str))
    return extra


def _switch_off() -> None:
    """After a failed configure(): the previous default pipeline shut down, and a switched-off
    one in its place, so the tracing API neither records nor configures from the environment."""
    global _default
    with _default_lock:
        previous, _default = _default, AgentTrace(config.defaults(enabled=False))
    if previous is not None:
        previous.shutdown()


def get_default() -> AgentTrace:
    """The default pipeline, configured from the environment on first use.

    Never raises: when the environment holds a bad setting or the output folder cannot be
    written, it logs one line saying so and returns a switched-off pipeline, so the program
    runs on untraced (an explicit :func:`configure` raises :class:`ConfigError` instead).
    In a forked child, the first use makes a pipeline like the parent's default, with a run
    folder of its own. After a :func:`configure` that raised, it is a switched-off pipeline
    (until a ``configure()`` succeeds, or :func:`shutdown`).
    """
    global _parent_default
    instance = _default
    if instance is not None:
        return instance
    with _default_lock:
        if _default is None:
            parent, _parent_default = _parent_default, None
            _set_default(_for_child(parent) if parent is not None else _from_environment())
        assert _default is not None
        return _default


#: In a forked child, the parent's default pipeline (stopped), to make the child's from.
_parent_default: AgentTrace | None = None
#: Every pipeline made in this process and not shut down, to stop their copies after a fork.
_pipelines: weakref.WeakSet[AgentTrace] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing, vector-env workers): its parent's pipelines stop."""
    global _default, _parent_default
    for pipeline in list(_pipelines):
        pipeline._stop_in_forked_child()
    inherited, _default = _default, None
    if inherited is not None and inherited.enabled:
        _parent_default = inherited
    elif inherited is not None:
        # Switched off (enabled=False, a bad setting, a failed configure()): so is the child,
        # without reading the environment again or repeating the parent's line.
        _default = inherited


def _for_child(parent: AgentTrace) -> AgentTrace:
    try:
        return parent._for_forked_child()
    except Exception as exc:
        line = f"agenttrace: {_one_line(exc)}; tracing is off in process {os.getpid()}"
        config.report_once(line, line)
        logger.debug("agenttrace: setting up a forked child's pipeline failed", exc_info=True)
        return AgentTrace(config.defaults(enabled=False))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _from_environment() -> AgentTrace:
    """The default pipeline from the environment; switched off, after one line (once per
    process: not again after shutdown() and a new first span), when that fails."""
    try:
        return AgentTrace(config.resolve())
    except (config.ConfigError, OSError, ImportError) as exc:
        if not _switched_off_in_environment():  # else off is what was asked for: no line
            line = f"agenttrace: {_one_line(exc)}; tracing is off for this process"
            config.report_once(line, line)
    except Exception as exc:
        line = (
            f"agenttrace: could not set up tracing ({_one_line(exc)}); "
            "tracing is off for this process"
        )
        config.report_once(line, line)
        logger.debug("agenttrace: setting up tracing failed", exc_info=True)
    return AgentTrace(config.defaults(enabled=False))


def _switched_off_in_environment() -> bool:
    try:
        return config.read_setting("enabled") is False
    except config.ConfigError:
        return False


def _one_line(exc: BaseException) -> str:
    text = config.one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, (config.ConfigError, OSError)):
        return text
    return f"{type(exc).__name__}: {text}"


def _set_default(instance: AgentTrace | None) -> None:
    global _default
    _default = instance


def shutdown() -> None:
    """Shut the default pipeline down (flush, write open episodes as incomplete).

    A fresh start: the next span configures from the environment again, also after a
    :func:`configure` that raised (whose switched-off pipeline this ends).
    """
    global _default
    with _default_lock:
        instance, _default = _default, None
    if instance is not None:
        instance.shutdown()


def force_flush(timeout_millis: int = 30_000) -> bool:
    instance = _default
    return instance.force_flush(timeout_millis) if instance is not None else True


#: How long loading trajectories waits for the default pipeline to write what it has.
READ_FLUSH_TIMEOUT_MILLIS = 30_000


def _flush_before_reading() -> None:
    """Before trajectories are loaded: write every episode the default pipeline finished."""
    instance = _default
    if instance is None or not instance.enabled or instance._shut_down:
        return
    processor = instance.trajectory_processor
    # The files only: reading never waits for an OTLP endpoint.
    if processor is not None and not processor.force_flush(READ_FLUSH_TIMEOUT_MILLIS):
        _logging.warn_once(
            "read-flush",
            "agenttrace: reading trajectories before the tracing pipeline finished writing "
            "(it took over %d s); episodes finished just before may be missing",
            READ_FLUSH_TIMEOUT_MILLIS // 1000,
        )


before_reading(_flush_before_reading)
