"""The writer's span export: the span records it already has, sent to the OTLP endpoint.

The trajectory processor turns every span into a compact record once, and the writer gets
them all (for the span file and the trajectories). Sending those same records to the OTLP
endpoint, from the writer, costs the step loop nothing more: with the writer in its helper
process, encoding and sending happen on the other core, and a slow or dead endpoint holds
records there, never in the program's memory (whose garbage collector would pay for them).

Records become SDK ``ReadableSpan`` s again just before the real exporter (the SDK's OTLP
exporter of the configured protocol, or the export content policy around it) gets them, so
every ``OTEL_EXPORTER_OTLP_*`` setting works as it does for the SDK. The queue, the down
rule and every counter are :class:`~agenttrace.export_queue.ExportQueue` 's.
The backend gets each span as the span file has it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agenttrace.export_queue import ExportQueue
from agenttrace.processing.span_export import describe_exporter
from agenttrace.trajectory.records import SpanRecord

logger = logging.getLogger("agenttrace")

#: Module and class of the OTLP exporter of each signal, under ...otlp.proto.{grpc,http}.
_OTLP_EXPORTERS = {
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
    "logs": ("_log_exporter", "OTLPLogExporter"),
}


class UnsupportedProtocol(ValueError):
    """``OTEL_EXPORTER_OTLP_PROTOCOL`` names a protocol agenttrace does not send."""


def otlp_protocol(signal: str, environment: Mapping[str, str] | None = None) -> str:
    """``grpc`` or ``http`` for ``signal``, from the OTEL_* variables; raises
    :class:`UnsupportedProtocol` for any other."""
    env = os.environ if environment is None else environment
    protocol = (
        env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol == "grpc":
        return "grpc"
    if protocol in ("http/protobuf", "http"):
        return "http"
    raise UnsupportedProtocol(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: agenttrace supports grpc and http/protobuf"
    )


_environment_lock = threading.Lock()


def otlp_exporter(signal: str, environment: Mapping[str, str] | None = None) -> Any:
    """The SDK's OTLP exporter of ``signal`` for the protocol the OTEL_* variables name.

    ``environment``, when given, holds the ``OTEL_*`` variables to make it under (those of
    the process that configured agenttrace, when this runs in the writer process).
    """
    transport = otlp_protocol(signal, environment)
    module_name, class_name = _OTLP_EXPORTERS[signal]
    module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{transport}.{module_name}")
    if environment is None or dict(environment) == otel_environment():
        return getattr(module, class_name)()  # (the program's environ is never touched)
    with _environment_lock, _otel_environment(environment):
        return getattr(module, class_name)()


@contextlib.contextmanager
def _otel_environment(environment: Mapping[str, str]) -> Any:
    """os.environ's OTEL_* variables replaced by ``environment`` 's for a moment."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
    for key in saved:
        del os.environ[key]
    os.environ.update({k: v for k, v in environment.items() if k.startswith("OTEL_")})
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith("OTEL_")]:
            del os.environ[key]
        os.environ.update(saved)


def otel_environment() -> dict[str, str]:
    """This process's OTEL_* variables, for a :class:`SpanExportSpec`."""
    return {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}


class SpanExportSpec(NamedTuple):
    """What the writer needs to send span records over OTLP: buildable in another process."""

    environment: Mapping[str, str]  # OTEL_* variables of the configuring process
    content: str = "full"  # the export content policy (docs/export-content.md)
    max_bytes: int = 0  # the policy's size limit (0: its default)
    blob_store: str | None = None  # the policy's blob store (content="ref")
    max_queue: int = 65_536


def collect_export_spec(url: str, max_queue: int) -> SpanExportSpec:
    """Spans to an ``agenttrace collect`` service at ``url``: OTLP/HTTP, whole (no export
    content policy: the service rebuilds trajectories from them)."""
    environment = otel_environment()
    environment.update(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{url}/v1/traces",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
    )
    return SpanExportSpec(environment=environment, content="full", max_queue=max_queue)


class RecordSpanExporter:
    """Sends sampled span records to the OTLP endpoint from daemon threads (see module)."""

    def __init__(self, spec: SpanExportSpec) -> None:
        exporter = otlp_exporter("traces", spec.environment)
        self.content_policy: Any = None
        if spec.content != "full":
            exporter = self.content_policy = _content_policy(exporter, spec)
        self.exporter = exporter
        self._queue = ExportQueue(
            self._export,
            describe=describe_exporter(exporter),
            stop_exporter=exporter.shutdown,
            name="agenttrace-span-export",
            max_queue=spec.max_queue,
            unit="spans",
        )
        self._resources: dict[Any, Resource] = {}
        self._scopes: dict[tuple[str, str | None], InstrumentationScope] = {}

    @property
    def queue(self) -> ExportQueue:
        return self._queue

    def write(self, records: Iterable[SpanRecord]) -> None:
        """Queue the records' spans (sampled ones only; RECORD_ONLY spans are never sent)."""
        self._queue.put_many(record for record in records if record.sampled)

    def flush(self, timeout: float) -> bool:
        return self._queue.flush(timeout)

    def close(self, timeout: float) -> None:
        self._queue.close(timeout)

    def counts(self) -> dict[str, int]:
        """The queue's counters (export_queue.COUNTERS)."""
        return self._queue.counts()

    def content_counts(self) -> dict[str, int]:
        """What the export content policy changed: ``export_content_*`` counters."""
        policy = self.content_policy
        return {
            "export_content_truncated": policy.truncated if policy is not None else 0,
            "export_content_blobs": policy.blobs if policy is not None else 0,
            "export_content_blob_failures": policy.blob_failures if policy is not None else 0,
        }

    def _export(self, records: list[SpanRecord]) -> bool:
        spans = [self._readable(record) for record in records]
        return self.exporter.export(spans) == SpanExportResult.SUCCESS

    def _readable(self, record: SpanRecord) -> ReadableSpan:
        """The record as the SDK span it was (what the SDK's OTLP encoder reads)."""
        flags = TraceFlags(TraceFlags.SAMPLED)
        parent = None
        if record.parent_span_id:
            parent = SpanContext(
                record.trace_id, record.parent_span_id, record.parent_is_remote, flags
            )
        code = StatusCode[record.status_code]
        return ReadableSpan(
            name=record.name,
            context=SpanContext(record.trace_id, record.span_id, False, flags),
            parent=parent,
            resource=self._resource(record.resource),
            attributes=record.attributes,
            events=[Event(e.name, e.attributes, e.time) for e in record.events],
            links=[
                Link(SpanContext(link.trace_id, link.span_id, True, flags), link.attributes)
                for link in record.links
            ],
            kind=SpanKind[record.kind],
            status=Status(code, record.status_message if code is StatusCode.ERROR else None),
            start_time=record.start_time,
            end_time=record.end_time,
            instrumentation_scope=self._scope(record.scope_name, record.scope_version),
        )

    def _resource(self, attributes: Mapping[str, Any]) -> Resource:
        try:
            key: Any = tuple(attributes.items())
            hash(key)
        except TypeError:  # a list value: not cached
            return Resource(dict(attributes))
        resource = self._resources.get(key)
        if resource is None:
            if len(self._resources) > 64:
                self._resources.clear()
            resource = self._resources[key] = Resource(dict(attributes))
        return resource

    def _scope(self, name: str, version: str | None) -> InstrumentationScope:
        key = (name, version)
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = InstrumentationScope(name, version)
        return scope


def _content_policy(exporter: Any, spec: SpanExportSpec) -> Any:
    from agenttrace.processing.span_content import DEFAULT_MAX_BYTES, ContentPolicyExporter
    from agenttrace.storage.blobs import open_blob_store

    store = open_blob_store(spec.blob_store) if spec.content == "ref" and spec.blob_store else None
    return ContentPolicyExporter(
        exporter, spec.content, max_bytes=spec.max_bytes or DEFAULT_MAX_BYTES, blob_store=store
    )
