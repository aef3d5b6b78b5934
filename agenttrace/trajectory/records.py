"""Neutral span records: what the assembler reads, whoever produced the spans.

The live processor converts SDK spans with :func:`record_from_span`; storage readers build the
same records from OTLP/JSON, Jaeger, Tempo or Phoenix. Ids are integers (0 = no parent),
times are Unix nanoseconds, attribute values are OTel primitives (sequences may be tuples or
lists). Records hold no reference to the SDK span, so finished spans can be freed at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class SpanEvent(NamedTuple):
    name: str
    time: int
    attributes: Mapping[str, Any]


class SpanLink(NamedTuple):
    trace_id: int
    span_id: int
    attributes: Mapping[str, Any]


class SpanRecord(NamedTuple):
    trace_id: int
    span_id: int
    parent_span_id: int  # 0 when the span is a root
    name: str
    start_time: int
    end_time: int | None  # None while the span is still open
    attributes: Mapping[str, Any]
    events: tuple[SpanEvent, ...] = ()
    status_code: str = "UNSET"  # UNSET | OK | ERROR
    status_message: str | None = None
    kind: str = "INTERNAL"  # INTERNAL | SERVER | CLIENT | PRODUCER | CONSUMER
    resource: Mapping[str, Any] = {}
    scope_name: str = ""
    scope_version: str | None = None
    links: tuple[SpanLink, ...] = ()
    parent_is_remote: bool = False
    sampled: bool = True  # False for RECORD_ONLY spans: seen by processors, never exported

    @property
    def trace_id_hex(self) -> str:
        return format(self.trace_id, "032x")

    @property
    def span_id_hex(self) -> str:
        return format(self.span_id, "016x")


_EMPTY: Mapping[str, Any] = {}


def _plain_mapping(attributes: Any) -> Mapping[str, Any]:
    """The plain dict behind the SDK's BoundedAttributes (frozen once a span has ended)."""
    if not attributes:
        return _EMPTY
    inner = getattr(attributes, "_dict", None)
    return inner if type(inner) is dict else dict(attributes)


def record_from_span(span: Any) -> SpanRecord:
    """Compact record of a finished (or started) SDK span; cheap enough for ``on_end``."""
    context = span.context
    parent = span.parent
    events = span.events
    links = span.links
    status = span.status
    scope = span.instrumentation_scope
    resource = span.resource
    return SpanRecord(
        context.trace_id,
        context.span_id,
        parent.span_id if parent is not None else 0,
        span.name,
        span.start_time,
        span.end_time,
        # ReadableSpan.attributes is a read-only proxy; the BoundedAttributes behind it is
        # frozen once the span has ended, so its plain dict is shared, not copied.
        _plain_mapping(getattr(span, "_attributes", None) or span.attributes),
        tuple(SpanEvent(e.name, e.timestamp, _plain_mapping(e.attributes)) for e in events)
        if events
        else (),
        status.status_code.name,
        status.description,
        span.kind.name,
        _plain_mapping(resource.attributes) if resource is not None else _EMPTY,
        scope.name if scope is not None else "",
        scope.version if scope is not None else None,
        tuple(
            SpanLink(link.context.trace_id, link.context.span_id, _plain_mapping(link.attributes))
            for link in links
        )
        if links
        else (),
        bool(parent.is_remote) if parent is not None else False,
        context.trace_flags.sampled,
    )
