"""Neutral span records: what the assembler reads, whoever produced the spans.

The live processor converts SDK spans with :func:`record_from_span`; storage readers build the
same records from OTLP/JSON, Jaeger, Tempo or Phoenix. Ids are integers (0 = no parent),
times are Unix nanoseconds, attribute values are OTel primitives (sequences may be tuples or
lists). Records hold no reference to the SDK span, so finished spans can be freed at once.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agenttrace import semconv as sc


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
    #: What the storage this record was read from cut or lost: attribute key (or one of
    #: ``LOSSY_TIMES``, ``LOSSY_SPAN``) -> reason. Empty for live records.
    lossy: Mapping[str, str] = {}

    @property
    def trace_id_hex(self) -> str:
        return format(self.trace_id, "032x")


_EMPTY: Mapping[str, Any] = {}
#: ``SpanRecord.lossy`` keys for what is not an attribute.
LOSSY_TIMES = "@times"  # start/end times kept at a coarser precision than nanoseconds
LOSSY_SPAN = "@span"  # the span itself is incomplete (e.g. events or attributes dropped)
LOSSY_CONTEXT = "@context"  # kind, resource, scope or links lost (no trajectory field holds them)


def _plain_mapping(attributes: Any) -> Mapping[str, Any]:
    """The plain dict behind the SDK's BoundedAttributes (frozen once a span has ended)."""
    if not attributes:
        return _EMPTY
    inner = getattr(attributes, "_dict", None)
    return inner if type(inner) is dict else dict(attributes)


def record_from_span(span: Any) -> SpanRecord:
    """Compact record of a finished (or started) SDK span; cheap enough for ``on_end``."""
    if _SDK_LAYOUT_OK:
        try:
            return _record_from_sdk_span(span)
        except AttributeError:  # not the SDK's span class (or a future one)
            pass
    return _record_from_public_api(span)


_make_record = SpanRecord._make


def _events(events: Any) -> tuple[SpanEvent, ...]:
    return tuple(SpanEvent(e.name, e.timestamp, _plain_mapping(e.attributes)) for e in events)


def _links(links: Any) -> tuple[SpanLink, ...]:
    return tuple(
        SpanLink(link.context.trace_id, link.context.span_id, _plain_mapping(link.attributes))
        for link in links
    )


def _sdk_layout_ok() -> bool:
    """Whether the SDK objects look as the fast path below expects (checked once)."""
    try:
        context = SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(1))
        status = Status(StatusCode.ERROR, "x")
        return (
            context[0] == 7
            and context[1] == 9
            and context[2] is True
            and context[3] == 1
            and status._status_code._name_ == "ERROR"
            and status._description == "x"
            and SpanKind.CLIENT._name_ == "CLIENT"
        )
    except Exception:
        return False


_SDK_LAYOUT_OK = _sdk_layout_ok()
# Spans of one provider share one Resource: its plain attribute dict is looked up once.
_last_resource: tuple[Any, Mapping[str, Any]] = (None, _EMPTY)


def _resource_attributes(resource: Any) -> Mapping[str, Any]:
    global _last_resource
    cached, mapping = _last_resource
    if resource is cached:
        return mapping
    mapping = _plain_mapping(resource.attributes) if resource is not None else _EMPTY
    _last_resource = (resource, mapping)
    return mapping


def _record_from_sdk_span(span: Any) -> SpanRecord:
    """The hot path (a few tenths of a microsecond): the SDK span's fields, read directly.

    SpanContext is a tuple (trace_id, span_id, is_remote, trace_flags, ...) and enum members
    keep their name in ``_name_``; :func:`_sdk_layout_ok` confirms both before this is used.
    """
    context = span._context
    parent = span._parent
    status = span._status
    scope = span._instrumentation_scope
    attributes = span._attributes
    inner = getattr(attributes, "_dict", None)
    return _make_record(
        (
            context[0],
            context[1],
            parent[1] if parent is not None else 0,
            span._name,
            span._start_time,
            span._end_time,
            # The BoundedAttributes of an ended span is frozen: share its dict, not a copy.
            inner if type(inner) is dict else _plain_mapping(attributes),
            _events(span._events) if span._events else (),
            status._status_code._name_,
            status._description,
            span._kind._name_,
            _resource_attributes(span._resource),
            scope._name if scope is not None else "",
            scope._version if scope is not None else None,
            _links(span._links) if span._links else (),
            parent[2] if parent is not None else False,
            context[3] & 1 == 1,  # W3C "sampled" bit
            _EMPTY,
        )
    )


def _record_from_public_api(span: Any) -> SpanRecord:
    context = span.context
    parent = span.parent
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
        _plain_mapping(span.attributes),
        _events(span.events),
        status.status_code.name,
        status.description,
        span.kind.name,
        _plain_mapping(resource.attributes) if resource is not None else _EMPTY,
        scope.name if scope is not None else "",
        scope.version if scope is not None else None,
        _links(span.links),
        bool(parent.is_remote) if parent is not None else False,
        context.trace_flags.sampled,
        _EMPTY,
    )


# --- rl.* values the assembler reads ---------------------------------------------------------

#: Step indices and episode lengths are OTLP int64 values: at most this, exclusive.
INDEX_LIMIT = 1 << 63
_FLOAT_MAX = sys.float_info.max  # an int beyond it has no float (float() overflows)
NUMBER, COUNT, TEXT = "a number", "a whole number from 0 to 2^63-1", "a string"
#: rl.* attributes the assembler reads, and what each must be; anything else is left out as
#: if absent (docs/trace-storage.md, "Bad values"). Numbers may be floats (NaN and infinities
#: too), ints a float can hold, or bools (1.0/0.0).
VALUE_KINDS: Mapping[str, str] = {
    sc.REWARD: NUMBER,
    sc.DISCOUNT: NUMBER,
    sc.EPISODE_RETURN: NUMBER,
    sc.TIMESTEP_INDEX: COUNT,
    sc.EPISODE_LENGTH: COUNT,
    sc.EPISODE_STATUS: TEXT,
}
_TYPE_WORDS = {str: "a string", tuple: "an array", list: "an array", dict: "a key-value list",
               bytes: "bytes", bool: "a boolean", int: "an integer", float: "a float"}  # fmt: skip


def value_problem(key: str, value: Any) -> str | None:
    """Why the assembler cannot take ``value`` as rl.* attribute ``key`` (see VALUE_KINDS);
    None when it can (or for None, or a key it does not check)."""
    kind = VALUE_KINDS.get(key)
    if kind is None or value is None:
        return None
    cls = type(value)
    if kind is NUMBER:
        if cls is float or cls is bool or (cls is int and -_FLOAT_MAX <= value <= _FLOAT_MAX):
            return None
    elif kind is COUNT:
        if cls is int and 0 <= value < INDEX_LIMIT:
            return None
    elif cls is str:
        return None
    if kind is NUMBER and cls is int:
        return "%s, too large for a float" % described(value)
    return "%s, not %s" % (described(value), kind)


def described(value: Any) -> str:
    """``value`` in a few words for an error: its type, and itself when short."""
    cls = type(value)
    word = _TYPE_WORDS.get(cls, cls.__name__)
    if cls is int:
        if abs(value) >= 10**20:
            return "an integer of about 10^%d" % int(value.bit_length() * 0.30103)
        return "%s (%d)" % (word, value)
    if cls in (str, float, bool):
        shown = repr(value)
        return "%s (%s)" % (word, shown if len(shown) <= 40 else shown[:37] + "...")
    return word


def left_out(key: str, problem: str) -> str:
    """The lossy reason of an rl.* value the assembler left out (the same live and offline)."""
    return "%s was %s; left out (read as absent)" % (key, problem)


# --- vector steps ---------------------------------------------------------------------------

#: env.vector_step list attribute -> the env.step attribute each entry becomes.
_VECTOR_FIELDS = (
    (sc.VECTOR_ACTIONS, sc.ACTION),
    (sc.VECTOR_OBSERVATIONS, sc.OBSERVATION),
    (sc.VECTOR_INFOS, sc.INFO),
    (sc.VECTOR_REWARDS, sc.REWARD),
    (sc.VECTOR_TERMINATED, sc.TERMINATED),
    (sc.VECTOR_TRUNCATED, sc.TRUNCATED),
)
_SPAN_ID_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # spreads the derived span ids of one vector step apart


def is_vector_step(record: SpanRecord) -> bool:
    """Whether ``record`` is an ``env.vector_step`` span to read as one env step per entry."""
    return record.name == sc.ENV_VECTOR_STEP and sc.VECTOR_EPISODE_IDS in record.attributes


def split_vector_step(record: SpanRecord) -> list[SpanRecord]:
    """The ``env.step`` record of each sub-environment an ``env.vector_step`` span stepped.

    Each is what a span of its own would have been: a child of its episode's span (the
    vector span's link to it; its own parent when links were not kept), with the episode id,
    the step index and that sub-environment's entry of every ``rl.vector.*`` list. They are
    ``sampled=False``: records to rebuild from, never written or exported (the vector span
    itself is). Entries that are missing or malformed are left out, never the other steps.
    """
    attributes = record.attributes
    episode_ids = attributes.get(sc.VECTOR_EPISODE_IDS)
    indices = attributes.get(sc.VECTOR_STEP_INDICES)
    if not isinstance(episode_ids, (list, tuple)) or not isinstance(indices, (list, tuple)):
        return []
    fields = [
        (key, values)
        for list_key, key in _VECTOR_FIELDS
        if isinstance(values := attributes.get(list_key), (list, tuple))
    ]
    links = record.links if len(record.links) == len(episode_ids) else ()
    parts: list[SpanRecord] = []
    for i, (episode_id, index) in enumerate(zip(episode_ids, indices, strict=False)):
        if not isinstance(episode_id, str) or type(index) is not int or index < 0:
            continue
        step = {sc.EPISODE_ID: episode_id, sc.TIMESTEP_INDEX: index}
        for key, values in fields:
            if i < len(values) and values[i] is not None and values[i] != "":
                step[key] = values[i]
        if sc.TERMINATED in step or sc.TRUNCATED in step:
            step[sc.DONE] = bool(step.get(sc.TERMINATED)) or bool(step.get(sc.TRUNCATED))
        trace_id, parent = (
            (links[i].trace_id, links[i].span_id)
            if links
            else (
                record.trace_id,
                record.parent_span_id,
            )
        )
        parts.append(
            record._replace(
                trace_id=trace_id,
                span_id=(record.span_id ^ (_GOLDEN * (i + 1))) & _SPAN_ID_MASK or 1,
                parent_span_id=parent,
                name=sc.ENV_STEP,
                attributes=step,
                links=(),
                sampled=False,
            )
        )
    return parts


def split_vector_steps(records: Iterable[SpanRecord]) -> Iterator[SpanRecord]:
    """``records`` with every ``env.vector_step`` span followed by its env steps."""
    for record in records:
        yield record
        if is_vector_step(record):
            yield from split_vector_step(record)
