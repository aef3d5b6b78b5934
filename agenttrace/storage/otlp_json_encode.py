"""Encoding OTLP/JSON: span records to one export-request line, as the span file writer
writes it.

Each line is one ``{"resourceSpans": [...]}`` export request in the OTLP/JSON mapping (hex ids,
64-bit integers as decimal strings, enums as integers): what the OpenTelemetry Collector's
``file`` exporter writes, so any OTLP tool reads agenttrace's span files (docs/span-files.md).

The encoder sits on the exporter's background thread, which competes for the GIL with the
training loop, so it builds text from cached templates instead of dicts + ``json.dumps``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from gc import get_referents
from json.encoder import encode_basestring_ascii as _quote  # the C implementation
from types import MappingProxyType
from typing import Any

from agenttrace.storage.otlp_enums import FLAGS_REMOTE_PARENT, KIND_CODE, STATUS_CODE
from agenttrace.trajectory.records import SpanEvent, SpanLink, SpanRecord

try:  # The API package (a hard dependency) owns the SDK's attribute container; see _items.
    from opentelemetry.attributes import BoundedAttributes as _Bounded
except ImportError:  # pragma: no cover - opentelemetry-api is always installed with agenttrace
    _Bounded = None

__all__ = ["encode_lines"]

_STATUS_NO_MESSAGE = {"UNSET": "{}", "OK": '{"code":1}', "ERROR": '{"code":2}'}
_CACHE_LIMIT = 4096  # entries per cache before it is emptied (keys made up at run time)

# key -> '{"key":"<key>","value":{"<type>Value":' (one cache per Python value type)
_STR_PREFIX: dict[str, str] = {}
_INT_PREFIX: dict[str, str] = {}
_FLOAT_PREFIX: dict[str, str] = {}
_BOOL_PREFIX: dict[str, str] = {}
_SCOPE_HEAD: dict[tuple[str, str | None], str] = {}
_ARRAY_TEXT: dict[str, str] = {}  # repr of a short numeric tuple -> its arrayValue


def _prefix(cache: dict[str, str], key: Any, field: str) -> str:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()  # cleared in place: _attributes holds bound .get methods of these dicts
    text = '{"key":%s,"value":{"%s":' % (_quote(key if type(key) is str else str(key)), field)
    cache[key] = text
    return text


def _float(value: float) -> str:
    if value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
        return repr(value)
    if value != value:
        return '"NaN"'
    return '"Infinity"' if value > 0 else '"-Infinity"'


def _array(value: tuple[Any, ...] | list[Any]) -> str:
    """arrayValue of a sequence; C-level joins for the homogeneous sequences the SDK keeps."""
    if not value:
        return '{"arrayValue":{}}'
    first = type(value[0])
    if first is str:
        try:
            return (
                '{"arrayValue":{"values":[{"stringValue":'
                + '},{"stringValue":'.join(map(_quote, value))
                + "}]}}"
            )
        except TypeError:  # not all strings
            return _mixed_array(value)
    if len(value) > 8:
        return _number_array(value)
    # Short numeric tuples (shapes, small vectors) repeat: cache by repr, which tells 1, 1.0 and
    # True apart where tuple equality would not.
    key = repr(value)
    text = _ARRAY_TEXT.get(key)
    if text is None:
        if len(_ARRAY_TEXT) >= _CACHE_LIMIT:
            _ARRAY_TEXT.clear()
        text = _ARRAY_TEXT[key] = _number_array(value)
    return text


def _number_array(value: tuple[Any, ...] | list[Any]) -> str:
    types = set(map(type, value))
    if len(types) == 1:
        t = types.pop()
        if t is int:
            return (
                '{"arrayValue":{"values":[{"intValue":"'
                + '"},{"intValue":"'.join(map(int.__repr__, value))
                + '"}]}}'
            )
        if t is float:
            return (
                '{"arrayValue":{"values":[{"doubleValue":'
                + '},{"doubleValue":'.join(map(_float, value))
                + "}]}}"
            )
    return _mixed_array(value)


def _mixed_array(value: tuple[Any, ...] | list[Any]) -> str:
    return '{"arrayValue":{"values":[%s]}}' % ",".join([_any_value(v) for v in value])


def _any_value(value: Any) -> str:
    """One AnyValue object; the general path, for arrays' items and uncommon types."""
    t = type(value)
    if t is str:
        return '{"stringValue":%s}' % _quote(value)
    if t is bool:
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if t is int:
        return '{"intValue":"%d"}' % value
    if t is float:
        return '{"doubleValue":%s}' % _float(value)
    if t is tuple or t is list:
        return _array(value)
    if isinstance(value, bool):
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, str):
        return '{"stringValue":%s}' % _quote(str(value))
    if isinstance(value, int):
        return '{"intValue":"%d"}' % value
    if isinstance(value, float):  # numpy.float64 and friends
        return '{"doubleValue":%s}' % _float(float(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return '{"bytesValue":"%s"}' % base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return '{"kvlistValue":{"values":[%s]}}' % _attributes(value)
    if value is None:
        return "{}"
    if hasattr(value, "__index__"):  # numpy integers
        return '{"intValue":"%d"}' % value.__index__()
    if isinstance(value, Sequence):
        return _array(tuple(value))
    # Not an OTel value: keep it readable rather than fail the whole batch on the exporter thread.
    return '{"stringValue":%s}' % _quote(str(value))


def _items(attributes: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    """The (key, value) pairs, fast for the SDK's containers.

    SDK spans expose ``MappingProxyType(BoundedAttributes)``; BoundedAttributes inherits
    ``MutableMapping.items()``, a Python generator calling ``__getitem__`` per key, which costs
    more than the encoding itself. Its plain ``_dict`` gives the same pairs; copied first (one
    C call, atomic under the GIL) because an open span's attributes may change on another
    thread. ``gc.get_referents`` is how to see inside a mappingproxy from Python.
    """
    t = type(attributes)
    if t is dict:
        return attributes.items()
    if t is MappingProxyType:
        inner = get_referents(attributes)
        if len(inner) == 1:
            attributes = inner[0]
            t = type(attributes)
    if t is _Bounded:
        return attributes._dict.copy().items()  # type: ignore[attr-defined]
    return attributes.items()


def _put_attributes(
    append: Callable[[str], None],
    attributes: Mapping[str, Any],
    str_get: Callable[[str], str | None] = _STR_PREFIX.get,
    int_get: Callable[[str], str | None] = _INT_PREFIX.get,
    float_get: Callable[[str], str | None] = _FLOAT_PREFIX.get,
    bool_get: Callable[[str], str | None] = _BOOL_PREFIX.get,
) -> None:
    """Append KeyValue objects as pieces, each followed by a comma (the caller drops the last).

    Pieces instead of one string: joined once per batch, the text is copied once.
    """
    quote = _quote
    for key, value in _items(attributes):
        t = type(value)
        if t is str:
            append(str_get(key) or _prefix(_STR_PREFIX, key, "stringValue"))
            append(quote(value))
            append("}},")
        elif t is int:
            append('%s"%d"}},' % (int_get(key) or _prefix(_INT_PREFIX, key, "intValue"), value))
        elif t is float:
            append(float_get(key) or _prefix(_FLOAT_PREFIX, key, "doubleValue"))
            append(repr(value) if value - value == 0.0 else _float(value))
            append("}},")
        elif t is bool:
            append(
                (bool_get(key) or _prefix(_BOOL_PREFIX, key, "boolValue"))
                + ("true}}," if value else "false}},")
            )
        elif t is tuple:
            append('{"key":%s,"value":%s},' % (quote(key), _array(value)))
        else:
            append(
                '{"key":%s,"value":%s},'
                % (quote(key if type(key) is str else str(key)), _any_value(value))
            )


def _attributes(attributes: Mapping[str, Any]) -> str:
    """Comma-separated KeyValue objects (without the brackets)."""
    pieces: list[str] = []
    _put_attributes(pieces.append, attributes)
    if pieces:
        pieces[-1] = pieces[-1][:-1]
    return "".join(pieces)


def _events(events: Iterable[SpanEvent]) -> str:
    parts = []
    for name, time, attributes in events:
        if attributes:
            parts.append(
                '{"timeUnixNano":"%d","name":%s,"attributes":[%s]}'
                % (time or 0, _quote(name), _attributes(attributes))
            )
        else:
            parts.append('{"timeUnixNano":"%d","name":%s}' % (time or 0, _quote(name)))
    return '"events":[%s],' % ",".join(parts)


def _links(links: Iterable[SpanLink]) -> str:
    parts = []
    for trace_id, span_id, attributes in links:
        if attributes:
            parts.append(
                '{"traceId":"%032x","spanId":"%016x","attributes":[%s]}'
                % (trace_id, span_id, _attributes(attributes))
            )
        else:
            parts.append('{"traceId":"%032x","spanId":"%016x"}' % (trace_id, span_id))
    return '"links":[%s],' % ",".join(parts)


def _status(code: Any, message: str | None) -> str:
    name = code if type(code) is str else getattr(code, "name", str(code))
    number = STATUS_CODE.get(name, 0)
    if message is None:
        return _STATUS_NO_MESSAGE.get(name, "{}")
    if number:
        return '{"code":%d,"message":%s}' % (number, _quote(message))
    return '{"message":%s}' % _quote(message)


def _kind_code(kind: Any) -> int:
    return KIND_CODE.get(kind if type(kind) is str else getattr(kind, "name", str(kind)), 0)


def _scope_head(name: str, version: str | None) -> str:
    key = (name, version)
    head = _SCOPE_HEAD.get(key)
    if head is None:
        if len(_SCOPE_HEAD) >= _CACHE_LIMIT:
            _SCOPE_HEAD.clear()
        if not version:  # None or "", both written as absent like protobuf does
            head = '{"scope":{"name":%s},"spans":[' % _quote(name or "")
        else:
            head = '{"scope":{"name":%s,"version":%s},"spans":[' % (
                _quote(name or ""),
                _quote(version),
            )
        _SCOPE_HEAD[key] = head
    return head


_NOTHING = object()
_SPAN_HEAD = '{"traceId":"%s","spanId":"%016x",%s"name":%s,"kind":%d,"startTimeUnixNano":"%d",'


def encode_lines(records: Iterable[SpanRecord]) -> str:
    """One OTLP/JSON line (no newline) holding ``records`` in their order: each run of
    records with the same resource and scope is one group (a ``resourceSpans`` entry per run of
    one resource, a ``scopeSpans`` entry per run of one scope), so readers get the records back
    in the order they were written (the order spans ended, which a long episode's rebuild
    relies on).

    The result is what the Collector's file exporter writes per batch, valid for ``json.loads``
    (NaN and infinities become the strings OTLP/JSON uses). Open spans (``end_time`` None)
    are written without ``endTimeUnixNano``.
    """
    # (resource text, (scope name, scope version), pieces of span texts each ending in a
    # comma), one per run of records with the same resource and scope, in order.
    runs: list[tuple[str, tuple[str, str | None], list[str]]] = []
    # id(resource mapping) -> (mapping, its text); holding the mapping keeps the id valid.
    resources: dict[int, tuple[Any, str]] = {}
    last_resource: Any = _NOTHING
    last_scope: tuple[str, str | None] = ("", None)
    last_trace_id = -1
    trace_text = ""
    pieces: list[str] = []
    append = pieces.append
    kind_code = KIND_CODE
    status_no_message = _STATUS_NO_MESSAGE
    quote = _quote
    head_template = _SPAN_HEAD
    put_attributes = _put_attributes
    remote = FLAGS_REMOTE_PARENT
    for record in records:
        (
            trace_id,
            span_id,
            parent_id,
            name,
            start,
            end,
            attributes,
            events,
            status_code,
            status_message,
            kind,
            resource,
            scope_name,
            scope_version,
            links,
            parent_is_remote,
            sampled,
            *_,  # fields added to SpanRecord later are not OTLP's business
        ) = record
        if (
            resource is not last_resource
            or scope_name != last_scope[0]
            or scope_version != last_scope[1]
        ):
            entry = resources.get(id(resource))
            if entry is None:
                text = (
                    '{"resource":{"attributes":[%s]},"scopeSpans":[' % _attributes(resource)
                    if resource
                    else '{"resource":{},"scopeSpans":['
                )
                entry = resources[id(resource)] = (resource, text)
            last_resource = resource
            last_scope = (scope_name, scope_version)
            pieces = []
            runs.append((entry[1], last_scope, pieces))
            append = pieces.append
        if trace_id != last_trace_id:  # a batch is mostly one trace: format its id once
            trace_text = "%032x" % trace_id
            last_trace_id = trace_id
        if parent_id:
            head = (
                '"parentSpanId":"%016x",' % parent_id
                if not parent_is_remote
                else '"parentSpanId":"%016x","flags":%d,' % (parent_id, remote | bool(sampled))
            )
        else:
            head = ""
        append(
            head_template
            % (
                trace_text,
                span_id,
                head,
                quote(name),
                kind_code.get(kind, 0) if type(kind) is str else _kind_code(kind),
                start or 0,
            )
        )
        if end is not None:
            append('"endTimeUnixNano":"%d",' % end)
        if attributes:
            append('"attributes":[')
            put_attributes(append, attributes)
            pieces[-1] = pieces[-1][:-1]
            append("],")
        if events:
            append(_events(events))
        if links:
            append(_links(links))
        if status_message is None:
            append(
                '"status":%s},' % (status_no_message.get(status_code) or _status(status_code, None))
            )
        else:
            append('"status":%s},' % _status(status_code, status_message))
    out = ['{"resourceSpans":[']
    current: str | None = None
    for resource_text, scope, span_pieces in runs:
        if resource_text is not current:  # (one text object per resource in this line)
            if current is not None:
                out[-1] = "]}"  # no comma after the resource's last scope
                out.append("]},")
            out.append(resource_text)
            current = resource_text
        out.append(_scope_head(*scope))
        span_pieces[-1] = span_pieces[-1][:-1]  # the last span's comma
        out.extend(span_pieces)
        out.append("]},")
    if runs:
        out[-1] = "]}"  # no comma after the last scope
        out.append("]}")  # nor after the last resource
    out.append("]}")
    return "".join(out)
