"""OTLP/JSON span files: the OpenTelemetry Collector ``file`` exporter's format, both ways.

Each line is one ``{"resourceSpans": [...]}`` export request in the OTLP/JSON mapping (hex ids,
64-bit integers as decimal strings, enums as integers). Writing it ourselves means a run leaves
files that any OTLP tool reads, and reading it means the Collector's own files rebuild episodes
exactly like live spans do (see docs/span-files.md).

The encoder sits on the exporter's background thread, which competes for the GIL with the
training loop, so it builds text from cached templates instead of dicts + ``json.dumps``. The
reader parses with :mod:`json` itself (orjson when installed): ``google.protobuf.json_format``
would read the hex ids as base64 (hex is valid base64) and corrupt them. It reads the common
shape of a span on a fast path and everything else on a checked one (see "Decoding, fast path").
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import math
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from gc import get_referents
from itertools import chain
from json.encoder import encode_basestring_ascii as _quote  # the C implementation
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agenttrace.storage.errors import (  # (defined there, for the value checks; named here)
    TOO_DEEP,
    ErrorHandler,
    ReadPosition,
    SpanDecodeError,
    SpanFormatError,
    SpanFormatWarning,
    error_kind,
    warn,
)
from agenttrace.storage.span_checks import check_values
from agenttrace.storage.span_paths import resolve_span_paths, rotation_order
from agenttrace.trajectory.codec import MAX_DEPTH
from agenttrace.trajectory.records import SpanEvent, SpanLink, SpanRecord, described, left_out

try:  # optional (otel-agenttrace[fast]): reads lines about three times as fast as json
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - exercised by tests that hide it
    _msgspec = None
try:  # used when installed (and msgspec is not, or refuses a line): twice as fast as json
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by tests that hide it
    _orjson = None

try:  # The API package (a hard dependency) owns the SDK's attribute container; see _items.
    from opentelemetry.attributes import BoundedAttributes as _Bounded
except ImportError:  # pragma: no cover - opentelemetry-api is always installed with agenttrace
    _Bounded = None

__all__ = [
    "ErrorHandler",
    "OtlpJsonLinesWriter",
    "SpanDecodeError",
    "SpanFormatError",
    "SpanFormatWarning",
    "decode_document",
    "decode_line",
    "encode_lines",
    "iter_records",
    "read_otlp_json",
]

PathLike = str | os.PathLike[str]
Source = PathLike | Sequence[PathLike]


_warn = warn


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------

_KIND_CODE = {"UNSPECIFIED": 0, "INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4,
              "CONSUMER": 5}  # fmt: skip
_STATUS_CODE = {"UNSET": 0, "OK": 1, "ERROR": 2}
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
    number = _STATUS_CODE.get(name, 0)
    if message is None:
        return _STATUS_NO_MESSAGE.get(name, "{}")
    if number:
        return '{"code":%d,"message":%s}' % (number, _quote(message))
    return '{"message":%s}' % _quote(message)


def _kind_code(kind: Any) -> int:
    return _KIND_CODE.get(kind if type(kind) is str else getattr(kind, "name", str(kind)), 0)


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
    kind_code = _KIND_CODE
    status_no_message = _STATUS_NO_MESSAGE
    quote = _quote
    head_template = _SPAN_HEAD
    put_attributes = _put_attributes
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
                # HAS_IS_REMOTE | IS_REMOTE, and the W3C trace flags in the low byte
                else '"parentSpanId":"%016x","flags":%d,' % (parent_id, 769 if sampled else 768)
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


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------

_KIND_NAME: dict[Any, str] = {}
for _name, _code in _KIND_CODE.items():
    _KIND_NAME[_code] = _name
    _KIND_NAME[_name] = _name
    _KIND_NAME["SPAN_KIND_" + _name] = _name
for _key in (0, "UNSPECIFIED", "SPAN_KIND_UNSPECIFIED"):
    _KIND_NAME[_key] = "INTERNAL"  # what the SDK assumes when no kind is given
_STATUS_NAME: dict[Any, str] = {}
for _name, _code in _STATUS_CODE.items():
    _STATUS_NAME[_code] = _name
    _STATUS_NAME[_name] = _name
    _STATUS_NAME["STATUS_CODE_" + _name] = _name
del _name, _code, _key

_B64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
_OTHER_SIGNALS = ("resourceLogs", "resourceMetrics", "resourceProfiles", "resource_logs",
                  "resource_metrics")  # fmt: skip
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_FLOAT_MAX = 1.7976931348623157e308  # an integer beyond it has no float
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1  # times: OTLP's fixed64 (ints from JSON may be signed)


def _id(value: Any, size: int, what: str) -> int:
    """Hex (the OTLP/JSON spec) or base64 (protobuf's generic JSON, Tempo) ids, by length."""
    if type(value) is not str:
        raise SpanFormatError("%s must be a string, got %s" % (what, _json_type(value)))
    # isascii + isalnum shut out what int(..., 16) would forgive: "_", spaces, signs, non-ASCII
    # digits; the "0x" prefix it also takes is ruled out by position.
    if len(value) == 2 * size and value.isascii() and value.isalnum() and value[1] not in "xX":
        try:
            return int(value, 16)
        except ValueError:
            pass
    elif 0 < len(value) <= 4 * ((size + 2) // 3) and _B64.fullmatch(value):
        try:
            raw = base64.b64decode(
                value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4),
                validate=True,
            )
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == size:
            return int.from_bytes(raw, "big")
    raise SpanFormatError(
        "%s %r is neither %d hex digits nor base64 of %d bytes" % (what, value, 2 * size, size)
    )


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}  # fmt: skip


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _nanos(value: Any, what: str) -> int:
    nanos = None
    if type(value) is str:
        if value.isascii() and value.isdigit():
            nanos = int(value)
    elif type(value) is int:
        nanos = value
    elif type(value) is float and value.is_integer():
        nanos = int(value)
    if nanos is None:
        raise SpanFormatError("%s must be a decimal string of nanoseconds, got %r" % (what, value))
    if not _I64_MIN <= nanos <= _U64_MAX:
        raise SpanFormatError("%s is %s, beyond 64 bits" % (what, described(nanos)))
    return nanos


def _decode_value(value: Any, depth: int = 0) -> Any:
    """AnyValue JSON -> the Python value the SDK would hold (tuples for arrays). Arrays and
    key-value lists nested deeper than MAX_DEPTH, and a double that is an integer beyond a
    float's range, raise SpanDecodeError (the caller leaves the attribute out)."""
    if depth > MAX_DEPTH:
        raise SpanDecodeError(
            "a value nested deeper than %d levels of arrays or key-value lists" % MAX_DEPTH
        )
    if type(value) is not dict:
        if value is None:
            return None
        raise SpanFormatError("value must be an object, got %s" % _json_type(value))
    for field, x in value.items():
        if field == "stringValue":
            if type(x) is str:
                return x
        elif field == "intValue":
            if type(x) is str:
                try:
                    return int(x)
                except ValueError:
                    pass
            elif type(x) is int or (type(x) is float and x.is_integer()):
                return int(x)
        elif field == "doubleValue":
            if type(x) is float:
                return x
            if type(x) is int:
                if -_FLOAT_MAX <= x <= _FLOAT_MAX:
                    return float(x)
                raise SpanDecodeError("a doubleValue that is %s, too large" % described(x))
            if type(x) is str:
                special = _FLOAT_WORDS.get(x)
                if special is not None:
                    return special
                try:
                    return float(x)
                except ValueError:
                    pass
        elif field == "boolValue":
            if type(x) is bool:
                return x
        elif field == "arrayValue":
            if type(x) is dict:
                items = x.get("values") or []
                if type(items) is list:
                    return tuple([_decode_value(v, depth + 1) for v in items])
        elif field == "kvlistValue":
            if type(x) is dict:
                items = x.get("values") or []
                if type(items) is list:
                    return _decode_attributes(items, "kvlist", depth=depth + 1)
        elif field == "bytesValue":
            if type(x) is str:
                try:
                    return base64.b64decode(
                        x.replace("-", "+").replace("_", "/") + "=" * (-len(x) % 4),
                        validate=True,
                    )
                except (binascii.Error, ValueError):
                    pass
        else:
            raise SpanFormatError("unknown value type %r" % field)
        raise SpanFormatError("bad %s %.80r" % (field, x))
    return None  # an empty AnyValue: OTLP's "no value"


def _decode_attributes(
    items: Any, where: str, dropped: list[tuple[str, str]] | None = None, depth: int = 0
) -> dict[str, Any]:
    """KeyValue array -> dict; ``where`` (span, event, link, resource) names it in errors.
    With ``dropped``, a value that cannot be decoded (SpanDecodeError) is left out and listed
    there as (key, reason); any other problem raises."""
    if not items:
        return {}
    if type(items) is not list:
        raise SpanFormatError("%s attributes must be an array, got %s" % (where, _json_type(items)))
    out: dict[str, Any] = {}
    for item in items:
        key = item.get("key") if type(item) is dict else None
        if type(key) is not str:
            raise SpanFormatError("%s attribute without a string key: %.80r" % (where, item))
        value = item.get("value")
        if type(value) is dict and len(value) == 1:  # fast path for the common scalars
            text = value.get("stringValue")
            if type(text) is str:
                out[key] = text
                continue
            text = value.get("intValue")
            if type(text) is str:
                try:
                    out[key] = int(text)
                    continue
                except ValueError:
                    pass
        try:
            out[key] = _decode_value(value, depth)
        except SpanFormatError as error:
            if dropped is not None and type(error) is SpanDecodeError:
                dropped.append((key, error.reason))
                continue
            raise type(error)("%s attribute %s: %s" % (where, _quote(key), error.reason)) from None
    return out


def _objects(raw: Any, what: str) -> list[dict]:
    """An OTLP array of objects (events, links); empty when absent."""
    if not raw:
        return []
    if type(raw) is not list:
        raise SpanFormatError("%ss must be an array, got %s" % (what, _json_type(raw)))
    for item in raw:
        if type(item) is not dict:
            raise SpanFormatError("%s must be an object, got %s" % (what, _json_type(item)))
    return raw


def _event_name(event: dict) -> str:
    name = event.get("name", "")
    if type(name) is not str:
        raise SpanFormatError("event name must be a string")
    return name


def _decode_span(
    span: Any,
    resource: dict[str, Any],
    scope_name: str,
    scope_version: str | None,
    dropped: list[tuple[str, str]] | None = None,
) -> SpanRecord:
    """One span; an attribute value that cannot be decoded is left out, listed in
    ``dropped`` and in the record's ``lossy``."""
    if type(span) is not dict:
        raise SpanFormatError("span must be an object, got %s" % _json_type(span))
    get = span.get
    name = get("name", "")
    if type(name) is not str:
        raise SpanFormatError("name must be a string, got %s" % _json_type(name))
    trace_hex = get("traceId")
    if not trace_hex:
        raise SpanFormatError("no traceId")
    span_hex = get("spanId")
    if not span_hex:
        raise SpanFormatError("no spanId")
    trace_id = _id(trace_hex, 16, "traceId")
    span_id = _id(span_hex, 8, "spanId")
    if not trace_id or not span_id:
        raise SpanFormatError("all-zero traceId or spanId")
    parent_hex = span.get("parentSpanId")
    parent_id = _id(parent_hex, 8, "parentSpanId") if parent_hex else 0

    start = span.get("startTimeUnixNano")
    start = _nanos(start, "startTimeUnixNano") if start is not None else 0
    end = span.get("endTimeUnixNano")
    end = _nanos(end, "endTimeUnixNano") if end is not None else 0

    kind_value = get("kind", 0)
    kind = _KIND_NAME.get(kind_value) if type(kind_value) is not bool else None
    if kind is None:
        raise SpanFormatError("unknown kind %r" % (kind_value,))

    status_code, status_message = "UNSET", None
    status = get("status")
    if status:
        if type(status) is not dict:
            raise SpanFormatError("status must be an object, got %s" % _json_type(status))
        code = status.get("code", 0)
        status_code = _STATUS_NAME.get(code) if type(code) is not bool else None
        if status_code is None:
            raise SpanFormatError("unknown status code %r" % (code,))
        status_message = status.get("message")
        if status_message is not None and type(status_message) is not str:
            raise SpanFormatError("status message must be a string")

    events = tuple(
        SpanEvent(
            _event_name(event),
            _nanos(event["timeUnixNano"], "event timeUnixNano")
            if event.get("timeUnixNano") is not None
            else 0,
            _decode_attributes(event.get("attributes"), "event", dropped),
        )
        for event in _objects(get("events"), "event")
    )
    links = tuple(
        SpanLink(
            _id(link.get("traceId"), 16, "link traceId"),
            _id(link.get("spanId"), 8, "link spanId"),
            _decode_attributes(link.get("attributes"), "link", dropped),
        )
        for link in _objects(get("links"), "link")
    )

    flags = get("flags", 0)
    if type(flags) is not int:
        flags = 0
    attributes = _decode_attributes(get("attributes"), "span", dropped)
    return SpanRecord(
        trace_id,
        span_id,
        parent_id,
        name,
        start,
        end or None,  # OTLP leaves 0/absent for a span that has not ended
        attributes,
        events,
        status_code,
        status_message,
        kind,
        resource,
        scope_name,
        scope_version,
        links,
        bool(flags & 0x200),  # SPAN_FLAGS_CONTEXT_IS_REMOTE
        # Exported spans are sampled; writers such as the Python SDK leave the trace-flag byte
        # at 0, so only a byte that is set but lacks the sampled bit says "not sampled".
        not (flags & 0xFF) or bool(flags & 0x01),
        {key: left_out(key, reason) for key, reason in dropped} if dropped else _NO_LOSS,
    )


def _decode_document(
    document: Any, on_span_error: Callable[[SpanFormatError], None]
) -> list[SpanRecord]:
    """Records of one parsed export request; a bad span (or resource/scope block) goes to
    ``on_span_error`` and the rest are still returned."""
    if type(document) is not dict:
        raise SpanFormatError(
            "expected an object with resourceSpans, got %s" % _json_type(document)
        )
    resource_spans = document.get("resourceSpans")
    if resource_spans is None:
        resource_spans = document.get("batches")  # Tempo before 2.6
    if resource_spans is None:
        if "resource_spans" in document:
            document = _camel_keys(document)
            resource_spans = document["resourceSpans"]
        elif any(key in document for key in _OTHER_SIGNALS):
            return []  # logs or metrics sharing the file exporter: not ours to read
        else:
            keys = ", ".join(sorted(document)[:5]) or "none"
            raise SpanFormatError("not an OTLP trace export: no resourceSpans (keys: %s)" % keys)
    if type(resource_spans) is not list:
        raise SpanFormatError("resourceSpans must be an array")
    records: list[SpanRecord] = []
    index = 0  # span index within the line, counted across resources and scopes
    for r, block in enumerate(resource_spans):
        try:
            if type(block) is not dict:
                raise SpanFormatError("not an object")
            raw_resource = block.get("resource") or {}
            if type(raw_resource) is not dict:
                raise SpanFormatError("resource must be an object")
            resource = _decode_attributes(raw_resource.get("attributes"), "resource")
            scope_blocks = block.get("scopeSpans")
            if scope_blocks is None:
                scope_blocks = block.get("instrumentationLibrarySpans") or []  # OTLP < 0.15
            if type(scope_blocks) is not list:
                raise SpanFormatError("scopeSpans must be an array")
        except Exception as error:  # RecursionError from absurd nesting included
            skipped = _count_spans(block)
            on_span_error(
                error_kind(error)(
                    "resourceSpans[%d]: %s; its %d span(s) skipped" % (r, _reason(error), skipped)
                )
            )
            index += skipped
            continue
        for s, scope_block in enumerate(scope_blocks):
            try:
                if type(scope_block) is not dict:
                    raise SpanFormatError("not an object")
                scope = scope_block.get("scope") or scope_block.get("instrumentationLibrary") or {}
                if type(scope) is not dict:
                    raise SpanFormatError("scope must be an object")
                scope_name = scope.get("name") or ""
                # proto3 strings have no "unset": absent is "", as the SDK itself gives
                scope_version = scope.get("version") or ""
                if type(scope_name) is not str or type(scope_version) is not str:
                    raise SpanFormatError("scope name and version must be strings")
                spans = scope_block.get("spans") or []
                if type(spans) is not list:
                    raise SpanFormatError("spans must be an array")
            except Exception as error:
                skipped = _count_spans({"scopeSpans": [scope_block]})
                on_span_error(
                    error_kind(error)(
                        "resourceSpans[%d].scopeSpans[%d]: %s; its %d span(s) skipped"
                        % (r, s, _reason(error), skipped)
                    )
                )
                index += skipped
                continue
            for span in spans:
                dropped: list[tuple[str, str]] = []
                try:
                    records.append(_decode_span(span, resource, scope_name, scope_version, dropped))
                except Exception as error:  # anything unforeseen in one span spoils only it
                    reason = _reason(error)
                    name = span.get("name") if type(span) is dict else None
                    if type(name) is str:
                        reason = "%s (span %s)" % (reason, _quote(name))
                    on_span_error(error_kind(error)(reason, span=index))
                    dropped = []
                for key, reason in dropped:  # values left out of a span that was kept
                    record = records[-1]
                    on_span_error(
                        SpanDecodeError(
                            "span %s (id %016x): %s"
                            % (_quote(record.name), record.span_id, left_out(key, reason))
                        )
                    )
                index += 1
    return records


# --------------------------------------------------------------------------------------------
# Decoding, fast path
# --------------------------------------------------------------------------------------------
#
# The checked path above reads anything and says what is wrong, at several microseconds a
# span. Nearly every line ever read is in the common shape (hex ids, decimal-string times,
# integer enums, one scalar or array per AnyValue), so this path reads only that shape, with
# the same type checks but none of the error reporting: on the first thing it does not expect
# it gives up on the whole document, which then goes through the checked path, so every
# record and every error is exactly what the checked path makes (tests/test_decode_fast_path.py
# compares the two on arbitrary documents).
#
# When orjson is installed it parses the lines (about twice as fast as json). Where the two
# could disagree on a document that both accept, the fast path gives up: orjson reads integers
# beyond 64 bits as floats, so a float where an integer is expected, or a double at least
# 2**63 in size, sends the line back to json and the checked path.

_MAX_DEPTH = 32  # array/kvlist nesting the fast path follows (deeper: the checked path)
_BIG = 2.0**63  # floats this large may be orjson's reading of an integer literal
_make = tuple.__new__  # SpanRecord(...) without its argument handling: 18 fields, in order
_NO_LOSS = SpanRecord._field_defaults["lossy"]  # the shared empty default the checked path gets


class _Unusual(Exception):
    """Raised by the fast path for anything outside the common shape."""


def _fast_hex(value: Any, size: int) -> int:
    """An id in the OTLP/JSON spelling: exactly ``2 * size`` hex digits (as :func:`_id`)."""
    if (
        type(value) is not str
        or len(value) != 2 * size
        or not value.isascii()
        or not value.isalnum()  # int(.., 16) would forgive "_", spaces and signs
        or value[1] in "xX"  # ... and a "0x" prefix
    ):
        raise _Unusual
    return int(value, 16)  # other letters raise ValueError: unusual too


def _fast_nanos(value: Any) -> int:
    if type(value) is str and value.isdigit() and value.isascii():
        nanos = int(value)
        if nanos <= _U64_MAX:
            return nanos
    elif value is None:
        return 0
    elif type(value) is int and _I64_MIN <= value <= _U64_MAX:
        return value
    raise _Unusual  # floats among them: an integer beyond 64 bits, if orjson read it


def _fast_value(value: Any, depth: int) -> Any:
    """AnyValue -> Python value as :func:`_decode_value` gives it, for one-field values."""
    if type(value) is not dict or len(value) != 1 or depth > _MAX_DEPTH:
        raise _Unusual
    for field, x in value.items():
        t = type(x)
        if field == "stringValue":
            if t is str:
                return x
        elif field == "intValue":
            if t is str:
                return int(x)  # ValueError: unusual
            if t is int:
                return x
        elif field == "doubleValue":
            if t is float:
                if -_BIG < x < _BIG:
                    return x
            elif t is int:
                return float(x)
            elif t is str:
                special = _FLOAT_WORDS.get(x)
                return special if special is not None else float(x)
        elif field == "boolValue":
            if t is bool:
                return x
        elif field == "arrayValue":
            if t is dict:
                items = x.get("values") or []
                if type(items) is list:
                    return tuple([_fast_value(v, depth + 1) for v in items])
        elif field == "kvlistValue" and t is dict:
            return _fast_attributes(x.get("values"), depth + 1)
    raise _Unusual


def _fast_attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    """KeyValue array -> dict as :func:`_decode_attributes` gives it; scalars inline."""
    if not items:
        return {}
    if type(items) is not list:
        raise _Unusual
    out: dict[str, Any] = {}
    missing = _NOTHING
    for item in items:
        if type(item) is not dict:
            raise _Unusual
        key = item.get("key")
        value = item.get("value")
        if type(key) is not str or type(value) is not dict:
            raise _Unusual
        if len(value) == 1:  # the common scalars first, each one dict lookup
            x = value.get("stringValue", missing)
            if type(x) is str:
                out[key] = x
                continue
            x = value.get("intValue", missing)
            if type(x) is str:
                out[key] = int(x)
                continue
            x = value.get("doubleValue", missing)
            if type(x) is float and -_BIG < x < _BIG:
                out[key] = x
                continue
            x = value.get("boolValue", missing)
            if type(x) is bool:
                out[key] = x
                continue
        out[key] = _fast_value(value, depth)
    return out


def _fast_events(events: Any) -> tuple[SpanEvent, ...]:
    if type(events) is not list:
        raise _Unusual
    out = []
    for event in events:
        if type(event) is not dict:
            raise _Unusual
        name = event.get("name", "")
        if type(name) is not str:
            raise _Unusual
        out.append(
            SpanEvent(
                name,
                _fast_nanos(event.get("timeUnixNano")),
                _fast_attributes(event.get("attributes")),
            )
        )
    return tuple(out)


def _fast_links(links: Any) -> tuple[SpanLink, ...]:
    if type(links) is not list:
        raise _Unusual
    out = []
    for link in links:
        if type(link) is not dict:
            raise _Unusual
        out.append(
            SpanLink(
                _fast_hex(link.get("traceId"), 16),
                _fast_hex(link.get("spanId"), 8),
                _fast_attributes(link.get("attributes")),
            )
        )
    return tuple(out)


def _fast_document(document: Any) -> list[SpanRecord] | None:
    """The records of a document in the common shape, or None to use the checked path."""
    try:
        return _fast_records(document)
    except Exception:  # _Unusual, or anything a surprise raises: the checked path tells
        return None


def _fast_records(document: Any) -> list[SpanRecord]:
    if type(document) is not dict:
        raise _Unusual
    resource_spans = document.get("resourceSpans")
    if type(resource_spans) is not list:
        raise _Unusual  # absent (Tempo's batches, proto names, other signals) or wrong
    records: list[SpanRecord] = []
    append = records.append
    kind_name = _KIND_NAME
    status_name = _STATUS_NAME
    fast_hex = _fast_hex
    fast_attributes = _fast_attributes
    make = _make
    record_type = SpanRecord
    no_loss = _NO_LOSS
    last_trace_hex: Any = None
    last_parent_hex: Any = None
    trace_id = parent_id = 0
    for block in resource_spans:
        if type(block) is not dict:
            raise _Unusual
        raw_resource = block.get("resource") or {}
        if type(raw_resource) is not dict:
            raise _Unusual
        resource = fast_attributes(raw_resource.get("attributes"))
        scope_blocks = block.get("scopeSpans")
        if type(scope_blocks) is not list:
            raise _Unusual
        for scope_block in scope_blocks:
            if type(scope_block) is not dict:
                raise _Unusual
            scope = scope_block.get("scope") or scope_block.get("instrumentationLibrary") or {}
            if type(scope) is not dict:
                raise _Unusual
            scope_name = scope.get("name") or ""
            scope_version = scope.get("version") or ""
            spans = scope_block.get("spans") or []
            if type(scope_name) is not str or type(scope_version) is not str:
                raise _Unusual
            if type(spans) is not list:
                raise _Unusual
            for span in spans:
                if type(span) is not dict:
                    raise _Unusual
                get = span.get
                name = get("name", "")
                if type(name) is not str:
                    raise _Unusual
                trace_hex = get("traceId")
                if trace_hex != last_trace_hex:  # the spans of a batch share few traces
                    trace_id = fast_hex(trace_hex, 16)
                    last_trace_hex = trace_hex
                span_hex = get("spanId")  # _fast_hex(span_hex, 8), inline
                if (
                    type(span_hex) is not str
                    or len(span_hex) != 16
                    or not span_hex.isascii()
                    or not span_hex.isalnum()
                    or span_hex[1] in "xX"
                ):
                    raise _Unusual
                span_id = int(span_hex, 16)
                if not trace_id or not span_id:
                    raise _Unusual
                parent_hex = get("parentSpanId")
                if parent_hex != last_parent_hex:  # siblings come together
                    parent_id = fast_hex(parent_hex, 8) if parent_hex else 0
                    last_parent_hex = parent_hex

                start = get("startTimeUnixNano")
                if type(start) is str and start.isdigit() and start.isascii():
                    start = int(start)
                else:
                    start = _fast_nanos(start)
                end = get("endTimeUnixNano")
                if type(end) is str and end.isdigit() and end.isascii():
                    end = int(end)
                else:
                    end = _fast_nanos(end)
                if start > _U64_MAX or end > _U64_MAX:
                    raise _Unusual

                kind = get("kind", 0)
                if type(kind) is not int and type(kind) is not str:
                    raise _Unusual  # floats and bools among them
                kind = kind_name[kind]  # KeyError: unusual

                status = get("status")
                if status:
                    if type(status) is not dict:
                        raise _Unusual
                    code = status.get("code", 0)
                    if type(code) is not int and type(code) is not str:
                        raise _Unusual
                    status_code = status_name[code]
                    status_message = status.get("message")
                    if status_message is not None and type(status_message) is not str:
                        raise _Unusual
                else:
                    status_code, status_message = "UNSET", None

                events = get("events")
                links = get("links")
                flags = get("flags", 0)
                if type(flags) is not int:
                    if type(flags) is float:
                        raise _Unusual  # an integer beyond 64 bits, if orjson read it
                    flags = 0
                append(
                    make(
                        record_type,
                        (
                            trace_id,
                            span_id,
                            parent_id,
                            name,
                            start,
                            end or None,
                            fast_attributes(get("attributes")),
                            _fast_events(events) if events else (),
                            status_code,
                            status_message,
                            kind,
                            resource,
                            scope_name,
                            scope_version,
                            _fast_links(links) if links else (),
                            bool(flags & 0x200),
                            not (flags & 0xFF) or bool(flags & 0x01),
                            no_loss,
                        ),
                    )
                )
    return records


# --------------------------------------------------------------------------------------------
# Decoding, typed fast path (msgspec)
# --------------------------------------------------------------------------------------------
#
# With msgspec installed, lines are decoded straight into the structs below: the common shape
# of an export request, parsed about three times as fast as into dicts and with a fifth of the
# objects for the garbage collector (structs are untracked; only attribute values stay dicts).
# Anything the types refuse, and anything _typed_records does not expect, goes to the paths
# above, so the result is again exactly the checked path's. msgspec reads numbers exactly
# (integers of any size) and refuses what json would read differently (NaN, lone surrogates).
# It does not check the UTF-8 of text it skips, so lines that are not ASCII are decoded first.

if _msgspec is not None:
    from msgspec import UNSET as _UNSET
    from msgspec import Struct as _Struct
    from msgspec import UnsetType

    class _AnyValue(_Struct, gc=False, forbid_unknown_fields=True):
        stringValue: Any = _UNSET
        intValue: Any = _UNSET
        doubleValue: Any = _UNSET
        boolValue: Any = _UNSET
        arrayValue: Any = _UNSET
        kvlistValue: Any = _UNSET
        bytesValue: Any = _UNSET

    class _KeyValue(_Struct, gc=False):
        key: Any = _UNSET
        value: _AnyValue | UnsetType | None = _UNSET

    class _Status(_Struct, gc=False):
        code: Any = _UNSET
        message: Any = _UNSET

    class _Span(_Struct, gc=False):
        traceId: Any = _UNSET
        spanId: Any = _UNSET
        parentSpanId: Any = _UNSET
        name: Any = _UNSET
        kind: Any = _UNSET
        startTimeUnixNano: Any = _UNSET
        endTimeUnixNano: Any = _UNSET
        attributes: list[_KeyValue] | UnsetType | None = _UNSET
        events: Any = _UNSET
        links: Any = _UNSET
        status: _Status | UnsetType | None = _UNSET
        flags: Any = _UNSET

    class _ScopeSpans(_Struct, gc=False):
        scope: Any = _UNSET
        instrumentationLibrary: Any = _UNSET
        spans: list[_Span] | UnsetType | None = _UNSET

    class _ResourceSpans(_Struct, gc=False):
        resource: Any = _UNSET
        scopeSpans: list[_ScopeSpans] | UnsetType = _UNSET

    class _ExportRequest(_Struct, gc=False):
        resourceSpans: list[_ResourceSpans] | UnsetType = _UNSET

    _decode_request: Callable[[str | bytes], Any] | None = _msgspec.json.Decoder(
        _ExportRequest
    ).decode
else:  # pragma: no cover - exercised by tests that hide msgspec
    _UNSET = object()
    _AnyValue = None
    _decode_request = None


def _typed_document(line: str | bytes) -> list[SpanRecord] | None:
    """The records of a line in the common shape, via msgspec; None to take the other paths."""
    decode = _decode_request
    if decode is None:
        return None
    try:
        if type(line) is bytes and not line.isascii():
            line = line.decode("utf-8")  # what json.loads would refuse, msgspec may skip
        return _typed_records(decode(line))
    except Exception:  # _Unusual, msgspec's errors, bad UTF-8, RecursionError: other paths
        return None


def _typed_attributes(items: Any) -> dict[str, Any]:
    """_fast_attributes over msgspec's structs. An AnyValue struct does not say in which order
    its fields came, so only values with exactly one field are read here (the first field
    decides on the checked path)."""
    if not items:
        return {}
    out: dict[str, Any] = {}
    unset = _UNSET
    any_value = _AnyValue
    for item in items:
        key = item.key
        v = item.value
        if type(key) is not str or type(v) is not any_value:
            raise _Unusual  # absent or null: the checked path
        x = v.stringValue
        if x is not unset:  # most values: checked first, the other fields inline
            if (
                type(x) is str
                and v.intValue is unset
                and v.doubleValue is unset
                and v.boolValue is unset
                and v.arrayValue is unset
                and v.kvlistValue is unset
                and v.bytesValue is unset
            ):
                out[key] = x
                continue
            raise _Unusual
        if (
            (v.intValue is unset)
            + (v.doubleValue is unset)
            + (v.boolValue is unset)
            + (v.arrayValue is unset)
            + (v.kvlistValue is unset)
            + (v.bytesValue is unset)
        ) != 5:
            raise _Unusual  # no value, or several
        x = v.intValue
        if x is not unset:
            t = type(x)
            if t is str:
                out[key] = int(x)  # ValueError: unusual
            elif t is int:
                out[key] = x
            else:
                raise _Unusual
            continue
        x = v.doubleValue
        if x is not unset:
            t = type(x)
            if t is float and -_BIG < x < _BIG:
                out[key] = x
            elif t is int:
                out[key] = float(x)
            elif t is str:
                special = _FLOAT_WORDS.get(x)
                out[key] = special if special is not None else float(x)
            else:
                raise _Unusual
            continue
        x = v.boolValue
        if x is not unset:
            if type(x) is not bool:
                raise _Unusual
            out[key] = x
            continue
        x = v.arrayValue
        if x is not unset:
            out[key] = _fast_value({"arrayValue": x}, 0)
            continue
        x = v.kvlistValue
        if x is not unset:
            out[key] = _fast_value({"kvlistValue": x}, 0)
            continue
        raise _Unusual  # bytesValue: the checked path
    return out


def _typed_records(request: Any) -> list[SpanRecord]:
    """_fast_records over msgspec's structs: absent fields are UNSET where dicts give None."""
    resource_spans = request.resourceSpans
    if type(resource_spans) is not list:
        raise _Unusual
    records: list[SpanRecord] = []
    append = records.append
    kind_name = _KIND_NAME
    status_name = _STATUS_NAME
    fast_hex = _fast_hex
    typed_attributes = _typed_attributes
    make = _make
    record_type = SpanRecord
    no_loss = _NO_LOSS
    unset = _UNSET
    last_trace_hex: Any = None
    last_parent_hex: Any = None
    trace_id = parent_id = 0
    for block in resource_spans:
        raw_resource = block.resource or {}
        if type(raw_resource) is not dict:
            raise _Unusual
        resource = _fast_attributes(raw_resource.get("attributes"))
        scope_blocks = block.scopeSpans
        if type(scope_blocks) is not list:
            raise _Unusual
        for scope_block in scope_blocks:
            scope = scope_block.scope or scope_block.instrumentationLibrary or {}
            if type(scope) is not dict:
                raise _Unusual
            scope_name = scope.get("name") or ""
            scope_version = scope.get("version") or ""
            if type(scope_name) is not str or type(scope_version) is not str:
                raise _Unusual
            for span in scope_block.spans or ():
                name = span.name
                if type(name) is not str:
                    if name is not unset:
                        raise _Unusual
                    name = ""
                trace_hex = span.traceId
                if trace_hex != last_trace_hex:
                    trace_id = fast_hex(trace_hex, 16)
                    last_trace_hex = trace_hex
                span_hex = span.spanId
                if (
                    type(span_hex) is not str
                    or len(span_hex) != 16
                    or not span_hex.isascii()
                    or not span_hex.isalnum()
                    or span_hex[1] in "xX"
                ):
                    raise _Unusual
                span_id = int(span_hex, 16)
                if not trace_id or not span_id:
                    raise _Unusual
                parent_hex = span.parentSpanId
                if parent_hex != last_parent_hex:
                    parent_id = fast_hex(parent_hex, 8) if parent_hex else 0
                    last_parent_hex = parent_hex

                start = span.startTimeUnixNano
                if type(start) is str and start.isdigit() and start.isascii():
                    start = int(start)
                else:
                    start = 0 if start is unset else _fast_nanos(start)
                end = span.endTimeUnixNano
                if type(end) is str and end.isdigit() and end.isascii():
                    end = int(end)
                else:
                    end = 0 if end is unset else _fast_nanos(end)
                if start > _U64_MAX or end > _U64_MAX:
                    raise _Unusual

                kind = span.kind
                if type(kind) is not int and type(kind) is not str:
                    if kind is not unset:
                        raise _Unusual
                    kind = 0
                kind = kind_name[kind]

                status = span.status
                if status is not None and status is not unset:  # {} as well: UNSET, None
                    code = status.code
                    if type(code) is not int and type(code) is not str:
                        if code is not unset:
                            raise _Unusual
                        code = 0
                    status_code = status_name[code]
                    status_message = status.message
                    if type(status_message) is not str:
                        if status_message is unset or status_message is None:
                            status_message = None
                        else:
                            raise _Unusual
                else:
                    status_code, status_message = "UNSET", None

                events = span.events
                links = span.links
                flags = span.flags
                if type(flags) is not int:
                    if type(flags) is float:
                        raise _Unusual
                    flags = 0
                append(
                    make(
                        record_type,
                        (
                            trace_id,
                            span_id,
                            parent_id,
                            name,
                            start,
                            end or None,
                            typed_attributes(span.attributes),
                            _fast_events(events) if events else (),
                            status_code,
                            status_message,
                            kind,
                            resource,
                            scope_name,
                            scope_version,
                            _fast_links(links) if links else (),
                            bool(flags & 0x200),
                            not (flags & 0xFF) or bool(flags & 0x01),
                            no_loss,
                        ),
                    )
                )
    return records


def decode_document(
    document: Any, on_error: Callable[[SpanFormatError], None] | None = None
) -> list[SpanRecord]:
    """Records of one parsed OTLP/JSON trace document: an export request, or the traces a
    backend answered (``resourceSpans`` or Tempo's ``batches``; hex or base64 ids; enum
    numbers or names). Problems go to ``on_error`` (default: warnings), the rest is kept."""
    report = on_error or warn
    records = _fast_document(document)
    if records is None:
        try:
            records = _decode_document(document, report)
        except SpanFormatError as error:
            report(error)
            return []
        except RecursionError:
            report(SpanDecodeError(TOO_DEEP))
            return []
    return check_values(records, report)


def _reason(error: Exception) -> str:
    if isinstance(error, RecursionError):
        return "nested too deeply to read (over Python's recursion limit)"
    if isinstance(error, SpanFormatError):
        return error.reason
    return "%s: %s" % (type(error).__name__, error)


def _count_spans(block: Any) -> int:
    try:
        return sum(len(scope.get("spans") or ()) for scope in block.get("scopeSpans") or ())
    except Exception:
        return 0


def _camel_keys(value: Any) -> Any:
    """proto field names (``trace_id``) -> JSON names (``traceId``); keys only, never values."""
    if type(value) is dict:
        return {_camel(k): _camel_keys(v) for k, v in value.items()}
    if type(value) is list:
        return [_camel_keys(v) for v in value]
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _raise(error: SpanFormatError) -> None:
    raise error


def decode_line(line: str | bytes) -> list[SpanRecord]:
    """Records of one OTLP/JSON export request; strict: the first problem raises.

    Use :func:`iter_records` or :func:`read_otlp_json` to keep the good spans of a bad line.
    Lines holding only logs or metrics give ``[]``.
    """
    records = _typed_document(line)
    if records is None:
        try:
            document, exact = _parse(line)
            records = _fast_document(document)
            if records is None:
                records = _decode_document(document if exact else json.loads(line), _raise)
        except SpanFormatError:
            raise
        except ValueError as error:
            raise SpanFormatError("invalid JSON: %s" % error) from None
        except RecursionError:
            raise SpanDecodeError(TOO_DEEP) from None
    return check_values(records, _raise)


def _parse(line: str | bytes) -> tuple[Any, bool]:
    """The parsed line, and whether it is exactly what ``json.loads`` gives.

    orjson when installed; json when it is not or when orjson refuses the line (NaN, numbers
    out of range, lone surrogates...: json reads some of these, and its error messages are the
    ones reported). Raises ValueError for text that is not JSON.
    """
    if _orjson is not None:
        try:
            return _orjson.loads(line), False
        except _orjson.JSONDecodeError:
            pass
    return json.loads(line), True


_NO_LINE = object()


def iter_records(
    lines: Iterable[str | bytes],
    *,
    source: str = "<lines>",
    on_error: Callable[[SpanFormatError], None] | None = None,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    """Records of OTLP/JSON lines, skipping what cannot be read instead of stopping.

    ``on_error`` gets one :class:`SpanFormatError` per unreadable line and per unreadable
    span (naming ``source``, the line number and the span index); by default each becomes a
    :class:`SpanFormatWarning`. A last line without its newline that is not valid JSON is
    reported as torn (its writer stopped mid-write). Blank lines are skipped. ``position``,
    when given, names the line of the records handed out last.
    """
    # Lines are decoded one at a time into lists that chain hands out at C speed: a generator
    # per record would cost more than a tenth of the reading.
    return chain.from_iterable(_line_lists(lines, source, on_error or _warn, position))


def _line_lists(
    lines: Iterable[str | bytes],
    source: str,
    report: Callable[[SpanFormatError], None],
    position: ReadPosition | None = None,
) -> Iterator[list[SpanRecord]]:
    """The records of each line (see :func:`iter_records`), a list per line."""
    number = 0
    pending: Any = _NO_LINE
    if position is not None:
        position.source = source
    for line in lines:
        if pending is not _NO_LINE:
            records = _line_records(pending, number, source, report, last=False)
            if position is not None:
                position.line = number
            yield records
        pending = line
        number += 1
    if pending is not _NO_LINE:
        records = _line_records(pending, number, source, report, last=True)
        if position is not None:
            position.line = number
        yield records


def _line_records(
    line: str | bytes,
    number: int,
    source: str,
    report: Callable[[SpanFormatError], None],
    *,
    last: bool,
) -> list[SpanRecord]:
    if not line.strip():
        return []
    records = _typed_document(line)
    if records is None:
        try:
            document, exact = _parse(line)
        except ValueError as error:
            newline = b"\n" if isinstance(line, bytes) else "\n"
            if last and not line.endswith(newline):  # type: ignore[arg-type]
                reason = "torn last line (no newline at the end and not valid JSON; the "
                reason += "writer probably stopped mid-write), skipped"
            else:
                reason = "invalid JSON, line skipped: %s" % error
            report(SpanFormatError(reason, source=source, line=number))
            return []
        except RecursionError:
            report(SpanDecodeError(TOO_DEEP, source=source, line=number))
            return []
        records = _fast_document(document)
        if records is None:

            def span_error(error: SpanFormatError) -> None:
                report(error.located(source, number))

            try:
                if not exact:  # the checked path reads what json reads, to report the same
                    document = json.loads(line)
                records = _decode_document(document, span_error)
            except SpanFormatError as error:
                span_error(error)
                return []
            except RecursionError:
                span_error(SpanDecodeError(TOO_DEEP))
                return []
    return check_values(records, report, source, number)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------

_SPAN_FILE = re.compile(r"[^.].*\.(json|jsonl|ndjson)(\.gz)?", re.IGNORECASE)
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Bytes looked at to tell a length-prefixed file from text lines (a whole first frame).
_SNIFF_BYTES = 1 << 16
_READ_BUFFER = 1 << 20  # lines are export batches of up to megabytes; 8 KiB reads cost time
#: Rotation order: spans.jsonl, spans-00001.jsonl, ... and the Collector's timestamped backups.
_file_order = rotation_order


def _directory_files(folder: Path) -> list[Path]:
    # (resolve_span_paths keeps those that hold spans: a run's trajectories.jsonl is left out)
    return sorted(
        (p for p in folder.iterdir() if _SPAN_FILE.fullmatch(p.name) and p.is_file()),
        key=_file_order,
    )


def _resolve(source: Source) -> list[Path]:
    return resolve_span_paths(
        source,
        folder_files=_directory_files,
        order=_file_order,
        kind="span files (*.json, *.jsonl, *.ndjson, optionally .gz)",
    )


def read_otlp_json(
    source: Source,
    *,
    on_error: Callable[[SpanFormatError], None] | None = None,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    """Stream the span records of OTLP/JSON files, as written by us or the Collector.

    ``source`` is a file, a directory (its ``*.json``, ``*.jsonl``, ``*.ndjson`` files, also
    gzipped, in rotation order), a glob, or a list of these. Files are read line by line in
    constant memory; gzip is recognised by suffix or content. Unreadable lines and spans go to
    ``on_error`` as in :func:`iter_records`. A file that is a single pretty-printed document
    (first line ``{``) is read whole. Raises FileNotFoundError at once if nothing matches.
    ``position`` as in :func:`iter_records`.
    """
    paths = _resolve(source)  # eagerly, so a wrong path fails here and not at first next()
    report = on_error or _warn
    return chain.from_iterable(_read_paths(paths, report, position))  # see iter_records


def _read_paths(
    paths: list[Path],
    report: Callable[[SpanFormatError], None],
    position: ReadPosition | None = None,
) -> Iterator[list[SpanRecord]]:
    for path in paths:
        yield from _read_file(path, report, position)


def _read_file(
    path: Path, report: Callable[[SpanFormatError], None], position: ReadPosition | None = None
) -> Iterator[list[SpanRecord]]:
    """The records of one file, a list per line."""
    name = str(path)
    if position is not None:
        position.source, position.line = name, None
    with open(path, "rb", buffering=_READ_BUFFER) as raw:
        stream: io.BufferedIOBase = raw
        compressed = path.suffix.lower() == ".gz" or raw.peek(2)[:2] == _GZIP_MAGIC
        try:
            if compressed:
                stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
            head = stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(stream, "peek") else b""
        except (OSError, EOFError, zlib.error) as error:
            report(SpanFormatError("unreadable gzip file: %s" % error, source=name))
            return
        if _is_binary(head):
            report(
                SpanFormatError(
                    "not OTLP/JSON lines (starts with bytes %r): the Collector's length-prefixed "
                    "format (`format: proto` or compression) is read by read_otlp_proto" % head,
                    source=name,
                )
            )
            return
        lines = _safe_lines(stream, name, report)
        first = next(lines, None)
        if first is None:
            return
        second = next(lines, None)
        if _starts_a_document(first, second):  # one pretty-printed document (an API answer)
            text = first + (second or b"") + b"".join(lines)
            records = _line_records(text, 1, name, report, last=False)
            if position is not None:
                position.line = 1
            yield records
            return
        head = (first,) if second is None else (first, second)
        yield from _line_lists(_chain(head, lines), name, report, position)


def _starts_a_document(first: bytes, second: bytes | None) -> bool:
    """Whether a file opens like pretty-printed JSON: ``{`` alone, then an indented line.

    A torn line that happens to be just ``{`` followed by ordinary lines is not one, so it
    costs only itself.
    """
    if first.strip() not in (b"{", b"["):
        return False
    return second is None or second[:1] in (b" ", b"\t", b'"', b"}", b"]", b"\r", b"\n")


def _is_binary(head: bytes) -> bool:
    """Whether a file's first bytes are binary (zstd, or the Collector's length-prefixed
    frames), not text lines.

    Only that is refused as a whole, and only when sure: a zstd stream, or a first frame whose
    length fits in ``head`` and whose payload decodes. Anything else is read line by line, so a
    damaged first line (even one starting with a zero byte) does not cost the rest of the file.
    """
    if head[:4] == _ZSTD_MAGIC:
        return True
    length = int.from_bytes(head[:4], "big")
    if head[:1] != b"\x00" or length == 0 or len(head) < 4 + length:
        return False
    # Imported here: otlp_proto builds on this module.
    from agenttrace.storage.otlp_proto import decode_proto, is_length_prefixed

    if not is_length_prefixed(head):
        return False
    problems: list[SpanFormatError] = []
    try:
        decode_proto(head[4 : 4 + length], on_error=problems.append)
    except ImportError:  # a zstd frame without the zstandard package: binary all the same
        return True
    return not problems


def _chain(head: tuple[bytes, ...], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from rest


def _safe_lines(
    stream: io.BufferedIOBase,
    name: str,
    report: Callable[[SpanFormatError], None],
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error),
) -> Iterator[bytes]:
    """The lines of ``stream``; a truncated or corrupt compressed stream (one of ``errors``
    while reading) ends them with one report."""
    count = 0
    try:
        for line in stream:
            count += 1
            yield line
    except errors as error:
        report(
            SpanFormatError(
                "compressed data ends or breaks after line %d: %s" % (count, error), source=name
            )
        )


def _cut_torn_tail(file: io.BufferedWriter, path: Path, size: int) -> int:
    """Cut the bytes after the last newline of the file ``file`` appends to (a line torn by a
    writer that died mid-write); returns how many were cut, and logs it when any were."""
    if not size:
        return 0
    end = size
    with open(path, "rb") as check:
        while end > 0:  # back to the last newline, 64 KiB at a time
            start = max(0, end - (1 << 16))
            check.seek(start)
            newline = check.read(end - start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
    cut = size - end
    if cut:
        import logging

        file.flush()
        os.ftruncate(file.fileno(), end)
        file.seek(0, os.SEEK_END)
        logging.getLogger("agenttrace").warning(
            "agenttrace: %s ended with a torn line of %d byte(s) (a writer stopped mid-write); "
            "cut it before appending",
            path,
            cut,
        )
    return cut


class OtlpJsonLinesWriter:
    """Append batches of records to ``spans.jsonl`` as OTLP/JSON lines, rotating by size.

    ``path_or_folder`` is a folder (created if needed; files are ``<basename>.jsonl``, then
    ``<basename>-00001.jsonl``, ``-00002`` ... once each reaches ``max_bytes``) or a file path
    ending in a suffix such as ``.jsonl`` (rotated names derive from it). Files are never
    renamed, so a reader may follow them while they grow. Each batch is one line, written with
    one write and flushed, so a crash can tear at most the last line; before appending to a
    file whose last byte is not a newline, the writer cuts that torn line (logging the bytes
    cut, counted in ``torn_lines_cut`` / ``torn_bytes_cut``), so a torn line never ends up in
    the middle of a file. Restarting resumes the newest file. Thread-safe; independent of the
    OpenTelemetry SDK.
    """

    def __init__(
        self,
        path_or_folder: PathLike,
        *,
        basename: str = "spans",
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive, got %r" % max_bytes)
        path = Path(path_or_folder)
        if path.is_dir() or (not path.exists() and not path.suffix):
            self._folder, self._stem, self._suffix = path, basename, ".jsonl"
        else:
            if path.suffix.lower() == ".gz":
                raise ValueError("OtlpJsonLinesWriter writes plain text; gzip files afterwards")
            self._folder, self._stem, self._suffix = path.parent, path.stem, path.suffix
        self._folder.mkdir(parents=True, exist_ok=True)
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._paths: list[Path] = []
        self._file: io.BufferedWriter | None = None
        self._size = 0
        self.torn_lines_cut = 0
        self.torn_bytes_cut = 0
        self._index = self._newest_index()
        self._open()

    def path_for(self, index: int) -> Path:
        """File number ``index`` of the series (0 is the plain name)."""
        return self._path(index)

    @property
    def position(self) -> tuple[int, int]:
        """``(file number, offset)``: where the next batch goes. Everything written after this
        call is in that file from that offset on, or in later-numbered files."""
        with self._lock:
            return self._index, self._size

    def _path(self, index: int) -> Path:
        if index == 0:
            return self._folder / (self._stem + self._suffix)
        return self._folder / ("%s-%05d%s" % (self._stem, index, self._suffix))

    def _newest_index(self) -> int:
        pattern = re.compile(re.escape(self._stem) + r"-(\d+)" + re.escape(self._suffix))
        numbers = [
            int(m.group(1)) for p in self._folder.iterdir() if (m := pattern.fullmatch(p.name))
        ]
        return max(numbers, default=0)

    def _open(self) -> None:
        path = self._path(self._index)
        file = open(path, "ab")  # noqa: SIM115 - kept open across writes, closed in close()
        try:
            size = file.tell()
            cut = _cut_torn_tail(file, path, size)  # the previous writer died mid-line
        except BaseException:
            file.close()
            raise
        if cut:
            self.torn_lines_cut += 1
            self.torn_bytes_cut += cut
            size -= cut
        self._file, self._size = file, size
        self._paths.append(path)
        if size >= self._max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._index += 1
        self._open()

    @property
    def paths(self) -> list[Path]:
        """The files this writer has written to (or opened to append), oldest first."""
        return list(self._paths)

    @property
    def path(self) -> Path:
        """The file the next batch goes to (unless it rotates first)."""
        return self._paths[-1]

    def write(self, records: Iterable[SpanRecord]) -> int:
        """Append ``records`` as one line; returns the bytes written (0 for no records)."""
        records = records if isinstance(records, (list, tuple)) else list(records)
        if not records:
            return 0
        data = (encode_lines(records) + "\n").encode("utf-8")
        with self._lock:
            if self._file is None:
                raise ValueError("OtlpJsonLinesWriter is closed")
            if self._size and self._size + len(data) > self._max_bytes:
                self._rotate()
            self._file.write(data)
            self._file.flush()
            self._size += len(data)
        return len(data)

    def flush(self) -> None:
        """Push everything written to the operating system (each write already does)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        """Flush and close; later writes raise. Safe to call twice."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> OtlpJsonLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
