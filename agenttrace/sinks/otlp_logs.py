"""OTLP logs sink: each trajectory becomes one OpenTelemetry log record.

This lets trajectories reach any OTLP backend (a collector, Loki, Elastic, a vendor) next to
the traces, linked to the episode's trace by trace id. The sink builds the records itself and
hands them to a ``LogRecordExporter`` through an
:class:`~agenttrace.export_queue.ExportQueue`, so it touches no global logging or
OpenTelemetry state, a slow or dead endpoint never holds up the writer (records are sent
from a daemon thread, in batches bounded by count and bytes), and every trajectory is counted:
``sent``, or ``failed`` (export failed, endpoint down, queue full, or still queued at close).
The endpoint counts as down after two failed exports in a row (one warning, and one when it
works again); ``close`` keeps its deadline.

Log record layout (docs/sinks.md): body is ``trajectory.to_json()``; ``event_name`` is
``rl.trajectory``; attributes ``rl.episode.id``, ``rl.task.id`` (when set),
``rl.episode.status``, ``rl.episode.return``, ``rl.episode.length``; the timestamp is the
episode's end time; ``trace_id`` is the episode's trace.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.trace import TraceFlags

from agenttrace import semconv as sc
from agenttrace._version import DISTRIBUTION
from agenttrace.export_queue import ExportQueue
from agenttrace.sinks.files import utf8_safe
from agenttrace.trajectory.model import Trajectory

if TYPE_CHECKING:
    from opentelemetry.sdk._logs.export import LogRecordExporter
    from opentelemetry.sdk.resources import Resource

_logger = logging.getLogger(__name__)
_DEFAULT_FLAGS = TraceFlags(TraceFlags.DEFAULT)

PROTOCOL_HTTP = "http/protobuf"
PROTOCOL_GRPC = "grpc"
#: Exports start early once this many bytes of bodies are buffered (collectors often cap
#: requests at 4 MiB (gRPC) to 64 MiB; one larger trajectory still goes alone).
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024
SCOPE_NAME = "agenttrace.sinks.otlp_logs"


def _import_sdk() -> tuple[Any, ...]:
    try:
        from opentelemetry._logs import LogRecord
        from opentelemetry.sdk._logs import ReadableLogRecord
        from opentelemetry.sdk._logs.export import LogRecordExportResult
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    except ImportError as exc:  # SDK before 1.39 has LogData instead of ReadableLogRecord
        raise ImportError(
            "OtlpLogSink needs opentelemetry-sdk >= 1.39 (ReadableLogRecord): "
            "pip install -U opentelemetry-sdk opentelemetry-exporter-otlp"
        ) from exc
    return LogRecord, ReadableLogRecord, LogRecordExportResult, Resource, InstrumentationScope


def _protocol(protocol: str | None) -> str:
    chosen = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or PROTOCOL_HTTP
    ).strip()
    if chosen not in (PROTOCOL_HTTP, PROTOCOL_GRPC):
        raise ValueError(
            f"unsupported OTLP protocol {chosen!r}: use {PROTOCOL_HTTP!r} or {PROTOCOL_GRPC!r}"
        )
    return chosen


def _http_logs_url(endpoint: str) -> str:
    """A bare ``http://host:4318`` gets the logs path, like OTEL_EXPORTER_OTLP_ENDPOINT."""
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path="/v1/logs"))
    return endpoint


def redact_url(url: str | None) -> str:
    """An endpoint fit for a log line: no user:password, query or fragment (may hold tokens)."""
    if not url:
        return "<default endpoint>"
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def default_exporter(
    *,
    endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    protocol: str | None = None,
    timeout: float | None = None,
) -> LogRecordExporter:
    """The SDK's OTLP log exporter for ``protocol``; unset options come from OTEL_* env vars."""
    chosen = _protocol(protocol)
    if chosen == PROTOCOL_GRPC:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        return OTLPLogExporter(
            endpoint=endpoint, headers=dict(headers) if headers else None, timeout=timeout
        )
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (
        OTLPLogExporter as HTTPLogExporter,
    )

    return HTTPLogExporter(
        endpoint=_http_logs_url(endpoint) if endpoint else None,
        headers=dict(headers) if headers else None,
        timeout=timeout,
    )


class OtlpLogSink:
    """Sends each trajectory as one OTLP log record, in batches of ``batch_size``.

    ``endpoint`` and ``headers`` default to the standard ``OTEL_EXPORTER_OTLP_LOGS_*`` /
    ``OTEL_EXPORTER_OTLP_*`` environment variables (read by the exporter); ``protocol`` to
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``. Pass ``exporter`` to use any
    ``LogRecordExporter`` instead. ``resource`` is a ``Resource`` or a mapping of attributes
    (merged with ``OTEL_RESOURCE_ATTRIBUTES``/``OTEL_SERVICE_NAME`` by ``Resource.create``).
    Export errors never reach the caller: they are counted in ``failed`` and logged once per
    reason. Header values are never logged.
    """

    #: Closing it sends over the network: the writer bounds it by the exit deadline.
    sends_over_network = True

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        headers: Mapping[str, str] | None = None,
        protocol: str | None = None,
        exporter: LogRecordExporter | None = None,
        resource: Resource | Mapping[str, Any] | None = None,
        batch_size: int = 64,
        timeout: float | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_queue: int = 4_096,
        retry_interval: float = 2.0,
        close_timeout: float = 30.0,
    ) -> None:
        """``max_queue`` trajectories wait to be sent, at most (more are counted as failed);
        ``retry_interval`` seconds pass before an endpoint that is down is tried again;
        ``close_timeout`` bounds :meth:`close` called without a timeout."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        (
            self._LogRecord,
            self._Readable,
            self._ExportResult,
            resource_cls,
            scope_cls,
        ) = _import_sdk()
        if exporter is None:
            exporter = default_exporter(
                endpoint=endpoint, headers=headers, protocol=protocol, timeout=timeout
            )
            # For messages only: never the headers, never credentials in the URL.
            self._target = redact_url(getattr(exporter, "_endpoint", None) or endpoint)
        else:
            self._target = type(exporter).__name__
        self.exporter = exporter
        if resource is None:
            resource = resource_cls.create({})
        elif isinstance(resource, Mapping):
            resource = resource_cls.create(dict(resource))
        self.resource = resource
        self._scope = scope_cls(SCOPE_NAME, _package_version())
        self.batch_size = int(batch_size)
        self.max_batch_bytes = int(max_batch_bytes)
        self._close_timeout = close_timeout
        self._queue = ExportQueue(
            self._send,
            describe=f"OTLP logs {self._target}",
            stop_exporter=exporter.shutdown,
            name="agenttrace-log-export",
            max_queue=max_queue,
            max_batch=self.batch_size,
            size_of=_record_size,
            max_batch_bytes=self.max_batch_bytes,
            retry_interval=retry_interval,
            unit="trajectories",
        )
        self._closed = False

    @property
    def sent(self) -> int:
        """Trajectories the endpoint accepted."""
        return self._queue.exported

    @property
    def failed(self) -> int:
        """Trajectories that did not reach the endpoint (every reason)."""
        return self._queue.not_exported

    @property
    def queue(self) -> ExportQueue:
        return self._queue

    def _record(self, trajectory: Trajectory, body: str) -> Any:
        # Protobuf strings must be valid UTF-8; the body keeps exact JSON escapes instead.
        attributes: dict[str, Any] = {
            sc.EPISODE_ID: utf8_safe(str(trajectory.episode_id)),
            sc.EPISODE_STATUS: utf8_safe(str(trajectory.status)),
            sc.EPISODE_LENGTH: int(trajectory.length),
        }
        if trajectory.task_id is not None:
            attributes[sc.TASK_ID] = utf8_safe(str(trajectory.task_id))
        with contextlib.suppress(TypeError, ValueError):
            attributes[sc.EPISODE_RETURN] = float(trajectory.return_)
        now = time.time_ns()
        record = self._LogRecord(
            timestamp=trajectory.end_time or now,
            observed_timestamp=now,
            body=body,
            attributes=attributes,
            event_name=sc.TRAJECTORY_EVENT_NAME,
        )
        # Link to the episode's trace (not to whatever span is current on this thread).
        record.trace_id = _trace_id(trajectory.trace_id)
        record.span_id = 0
        record.trace_flags = _DEFAULT_FLAGS
        return self._Readable(
            log_record=record, resource=self.resource, instrumentation_scope=self._scope
        )

    def write(self, trajectory: Trajectory) -> None:
        """Queue one record; it is sent with the next batch (``batch_size`` records, or
        ``max_batch_bytes`` of bodies, or within a second)."""
        if self._closed:
            raise RuntimeError("OtlpLogSink is closed; cannot write")
        body = utf8_safe(trajectory.to_json())
        self._queue.put((self._record(trajectory, body), len(body)))

    def _send(self, batch: list[tuple[Any, int]]) -> bool:
        return self.exporter.export([record for record, _ in batch]) == self._ExportResult.SUCCESS

    def flush(self, timeout: float = 30.0) -> bool:
        """Send what is queued now; wait for it at most ``timeout`` seconds (not at all
        while the endpoint is down). True when all of it was sent or given up."""
        return self._queue.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, within ``timeout`` (``close_timeout`` when not given), then
        shut the exporter down; what is left is counted as failed. Later writes raise."""
        if self._closed:
            return
        self._closed = True
        self._queue.close(self._close_timeout if timeout is None else timeout)
        if self.failed:
            _logger.warning("agenttrace: %s", self._queue.loss_summary())

    def __repr__(self) -> str:
        return f"OtlpLogSink({self._target})"


def _record_size(item: tuple[Any, int]) -> int:
    return item[1]


def _trace_id(text: str | None) -> int:
    if not text:
        return 0
    try:
        value = int(text, 16)
    except (TypeError, ValueError):
        return 0
    return value if 0 < value < 2**128 else 0


def _package_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
