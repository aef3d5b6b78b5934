"""The shape of an OTLP/JSON export request, as the msgspec structs the decoder
(:mod:`agenttrace.storage.otlp_json_decode`) reads, and the same structs built from a document
already parsed.

msgspec reads text straight into :class:`ExportRequest` (:data:`decode_request`). Fields are
Any wherever a wrong value is reported span by span (so msgspec takes anything there) and
typed where the decoder walks on; scopes stay dicts; absent fields are UNSET. :func:`built`
makes the structs of one resource block of a parsed document: what fits its place becomes its
struct, anything else stays as it is (a number where a span should be, a string where
attributes should be) for the decoder to report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from agenttrace.trajectory.json_depth import MAX_DEPTH

__all__ = [
    "AnyValue",
    "ArrayValue",
    "Event",
    "ExportRequest",
    "KeyValue",
    "KeyValueList",
    "Link",
    "Resource",
    "ResourceSpans",
    "ScopeSpans",
    "Span",
    "Status",
    "VALUE_FIELDS",
    "built",
    "decode_request",
]


class AnyValue(Struct, gc=False, forbid_unknown_fields=True):
    stringValue: Any = UNSET
    intValue: Any = UNSET
    doubleValue: Any = UNSET
    boolValue: Any = UNSET
    arrayValue: ArrayValue | UnsetType = UNSET
    kvlistValue: KeyValueList | UnsetType = UNSET
    bytesValue: Any = UNSET


class ArrayValue(Struct, gc=False):
    values: list[AnyValue] | UnsetType | None = UNSET


class KeyValue(Struct, gc=False):
    key: str
    value: AnyValue | UnsetType | None = UNSET


class KeyValueList(Struct, gc=False):
    values: list[KeyValue] | UnsetType | None = UNSET


class Status(Struct, gc=False):
    code: Any = UNSET
    message: Any = UNSET


class Event(Struct, gc=False):
    name: Any = UNSET
    timeUnixNano: Any = UNSET
    attributes: list[KeyValue] | UnsetType | None = UNSET


class Link(Struct, gc=False):
    traceId: Any = UNSET
    spanId: Any = UNSET
    attributes: list[KeyValue] | UnsetType | None = UNSET


class Span(Struct, gc=False):
    traceId: Any = UNSET
    spanId: Any = UNSET
    parentSpanId: Any = UNSET
    name: Any = UNSET
    kind: Any = UNSET
    startTimeUnixNano: Any = UNSET
    endTimeUnixNano: Any = UNSET
    attributes: list[KeyValue] | UnsetType | None = UNSET
    events: list[Event] | UnsetType | None = UNSET
    links: list[Link] | UnsetType | None = UNSET
    status: Status | UnsetType | None = UNSET
    flags: Any = UNSET


class ScopeSpans(Struct, gc=False):
    scope: Any = UNSET
    instrumentationLibrary: Any = UNSET  # OTLP < 0.15
    spans: list[Span] | UnsetType | None = UNSET


class Resource(Struct, gc=False):
    attributes: list[KeyValue] | UnsetType | None = UNSET


class ResourceSpans(Struct, gc=False):
    resource: Resource | UnsetType | None = UNSET
    scopeSpans: list[ScopeSpans] | UnsetType | None = UNSET
    instrumentationLibrarySpans: list[ScopeSpans] | UnsetType | None = UNSET  # OTLP < 0.15


class ExportRequest(Struct, gc=False):
    resourceSpans: list[ResourceSpans] | UnsetType | None = UNSET


decode_request = msgspec.json.Decoder(ExportRequest).decode


#: An AnyValue's fields, in the order of the struct.
VALUE_FIELDS = AnyValue.__struct_fields__


def built(block: Any) -> Any:
    """The structs of one resource block of a parsed document (anything that is no object
    stays as it is). Of an AnyValue only the first field is kept: it alone decides what the
    value is."""
    if type(block) is not dict:
        return block
    resource = block.get("resource", UNSET)
    if type(resource) is dict:
        resource = Resource(_built_list(resource.get("attributes", UNSET), _built_key_value))
    return ResourceSpans(
        resource,
        _built_list(block.get("scopeSpans", UNSET), _built_scope_block),
        _built_list(block.get("instrumentationLibrarySpans", UNSET), _built_scope_block),
    )


def _built_scope_block(scope_block: Any) -> Any:
    if type(scope_block) is not dict:
        return scope_block
    return ScopeSpans(
        scope_block.get("scope", UNSET),
        scope_block.get("instrumentationLibrary", UNSET),
        _built_list(scope_block.get("spans", UNSET), _built_span),
    )


def _built_span(span: Any) -> Any:
    if type(span) is not dict:
        return span
    get = span.get
    status = get("status", UNSET)
    if type(status) is dict:
        status = Status(status.get("code", UNSET), status.get("message", UNSET))
    return Span(
        get("traceId", UNSET),
        get("spanId", UNSET),
        get("parentSpanId", UNSET),
        get("name", UNSET),
        get("kind", UNSET),
        get("startTimeUnixNano", UNSET),
        get("endTimeUnixNano", UNSET),
        _built_list(get("attributes", UNSET), _built_key_value),
        _built_list(get("events", UNSET), _built_event),
        _built_list(get("links", UNSET), _built_link),
        status,
        get("flags", UNSET),
    )


def _with_attributes(kind: type) -> Callable[[Any], Any]:
    """The builder of an event or a link: two fields as they are, then attributes."""
    first, second, _ = kind.__struct_fields__

    def build(item: Any) -> Any:
        if type(item) is not dict:
            return item
        attributes = _built_list(item.get("attributes", UNSET), _built_key_value)
        return kind(item.get(first, UNSET), item.get(second, UNSET), attributes)

    return build


_built_event = _with_attributes(Event)
_built_link = _with_attributes(Link)


def _built_list(items: Any, build: Callable[[Any], Any]) -> Any:
    return [build(item) for item in items] if type(items) is list else items


def _built_key_value(item: Any) -> Any:
    if type(item) is not dict or type(item.get("key")) is not str:
        return item
    return KeyValue(item["key"], _built_value(item.get("value", UNSET), 0))


def _built_value(value: Any, depth: int) -> Any:
    """An AnyValue at ``depth`` levels of arrays and key-value lists. Past MAX_DEPTH the
    decoder takes nothing but a key-value list's text and integer text, from a value that has
    no other field: anything else there stays a dict, for the decoder to refuse."""
    if type(value) is not dict:
        return value
    if not value:
        return AnyValue()
    field, x = next(iter(value.items()))
    if depth > MAX_DEPTH:
        if len(value) == 1 and field in ("stringValue", "intValue"):
            return AnyValue(**{field: x})
        return value
    # (loops, not comprehensions: one frame a level, as the decoder's own recursion)
    if field == "arrayValue":
        if type(x) is dict:
            items = x.get("values") or []
            if type(items) is list:
                values = []
                for item in items:
                    values.append(_built_value(item, depth + 1))
                x = ArrayValue(values)
    elif field == "kvlistValue":
        if type(x) is dict:
            items = x.get("values") or []
            if type(items) is list:
                values = []
                for item in items:
                    if type(item) is dict and type(item.get("key")) is str:
                        item = KeyValue(
                            item["key"], _built_value(item.get("value", UNSET), depth + 1)
                        )
                    values.append(item)
                x = KeyValueList(values)
    elif field not in VALUE_FIELDS:
        return value  # the decoder names the field it does not know
    return AnyValue(**{field: x})
