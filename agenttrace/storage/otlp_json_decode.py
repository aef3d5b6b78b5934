"""Decoding OTLP/JSON: one export request, as text or as a parsed document, to span records;
each problem reported where it is, the rest kept.

There is one decoder, :func:`_records`, and it reads the msgspec structs of
:mod:`agenttrace.storage.otlp_json_structs` (resource blocks, scope blocks, spans, events,
links, key-value lists, AnyValues). Text gets to it one of two ways:

* msgspec reads the text straight into the structs (:func:`_typed`). This is how nearly every
  line is read: the structs hold no dicts but the scopes, and the garbage collector does not
  track them. The decoder's problems with such a request are not reported from it: the text
  is read again the second way, which says what is wrong in the same words every time.
* :func:`json.loads` parses the text and :func:`~agenttrace.storage.otlp_json_structs.built`
  builds the same structs from the parsed document, keeping as it is whatever does not fit
  where it stands (a span that is a number, attributes that are a string), so the decoder can
  name it. This is the way of text msgspec refuses (damaged lines, and JSON that only ``json``
  reads: ``NaN``, lone surrogates, ``1e400``, UTF-16), of text the structs do not describe
  (Tempo's ``batches``, protobuf's field names), and, without the text, of the documents a
  tracing backend answers. ``json``'s message says what is wrong with text that is not JSON.

A struct does not say in which order its fields came, and an AnyValue holding several is read
by its first (as a JSON reader reading it into a dict does); so a request with such a value
takes the second way as well. Ids are hex (the OTLP/JSON spec) or base64 (protobuf's generic
JSON mapping, Tempo), enums are numbers or names.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from msgspec import UNSET
from msgspec.structs import astuple

from agenttrace.storage.errors import (
    TOO_DEEP,
    ErrorHandler,
    SpanDecodeError,
    SpanFormatError,
    error_kind,
    reason_of,
    warn,
)
from agenttrace.storage.otlp_enums import (
    FLAG_PARENT_IS_REMOTE,
    KIND_NAME,
    STATUS_NAME,
    is_sampled,
)
from agenttrace.storage.otlp_json_structs import (
    AnyValue,
    ArrayValue,
    Event,
    ExportRequest,
    KeyValue,
    KeyValueList,
    Link,
    Resource,
    ResourceSpans,
    ScopeSpans,
    Span,
    Status,
    built,
    decode_request,
)
from agenttrace.storage.span_checks import check_values
from agenttrace.trajectory.json_depth import MAX_DEPTH
from agenttrace.trajectory.records import SpanEvent, SpanLink, SpanRecord, described, left_out

__all__ = ["decode_document", "decode_line", "decode_text"]


# --------------------------------------------------------------------------------------------
# Text to records
# --------------------------------------------------------------------------------------------


class _ReadAgain(Exception):
    """The typed request has a problem, or a value whose order of fields counts: read the
    text the other way (see the module doc)."""


def _read_again(error: SpanFormatError) -> None:
    raise _ReadAgain


def decode_text(line: str | bytes, report: ErrorHandler) -> list[SpanRecord]:
    """The records of one OTLP/JSON document in text (a line, a frame's payload), before the
    ``rl.*`` value checks (:func:`~agenttrace.storage.span_checks.check_values`). A bad span
    (or resource or scope block) goes to ``report``, the rest is returned; logs or metrics give
    ``[]``. Text that is not JSON raises ValueError and nesting past the stack RecursionError,
    as :func:`json.loads` does (whose message says what is wrong)."""
    request = _typed(line)
    if request is not None:
        try:
            return _records(request.resourceSpans, _read_again)
        except _ReadAgain:
            pass
    return _document_records(json.loads(line), report)


def _typed(line: str | bytes) -> ExportRequest | None:
    """The text read into the structs, or None when msgspec refuses it or it holds no
    ``resourceSpans`` array."""
    try:
        if type(line) is bytes and not line.isascii():
            line = line.decode("utf-8")  # msgspec does not check the UTF-8 of what it skips
        request = decode_request(line)
    except Exception:  # msgspec's errors, bad UTF-8, RecursionError: json.loads says why
        return None
    return request if type(request.resourceSpans) is list else None


def decode_document(document: Any, on_error: ErrorHandler | None = None) -> list[SpanRecord]:
    """Records of one parsed OTLP/JSON trace document: an export request, or the traces a
    backend answered (``resourceSpans`` or Tempo's ``batches``; hex or base64 ids; enum
    numbers or names). Problems go to ``on_error`` (default: warnings), the rest is kept."""
    report = on_error or warn
    return check_values(_document_records(document, report), report)


def decode_line(line: str | bytes) -> list[SpanRecord]:
    """Records of one OTLP/JSON export request; strict: the first problem raises.

    Use :func:`~agenttrace.storage.iter_records` or :func:`~agenttrace.storage.read_otlp_json`
    to keep the good spans of a bad line. Lines holding only logs or metrics give ``[]``.
    """
    try:
        records = decode_text(line, _raise)
    except SpanFormatError:
        raise
    except ValueError as error:
        raise SpanFormatError("invalid JSON: %s" % error) from None
    except RecursionError:
        raise SpanDecodeError(TOO_DEEP) from None
    return check_values(records, _raise)


def _raise(error: SpanFormatError) -> None:
    raise error


# --------------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------------

_B64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
_OTHER_SIGNALS = ("resourceLogs", "resourceMetrics", "resourceProfiles", "resource_logs",
                  "resource_metrics")  # fmt: skip
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_FLOAT_MAX = 1.7976931348623157e308  # an integer beyond it has no float
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1  # times: OTLP's fixed64 (ints from JSON may be signed)
_TOO_DEEP_VALUE = "a value nested deeper than %d levels of arrays or key-value lists" % MAX_DEPTH
_NO_LOSS = SpanRecord._field_defaults["lossy"]  # the records' shared empty default
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}  # fmt: skip


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _document_records(document: Any, report: ErrorHandler) -> list[SpanRecord]:
    """The records of a parsed document, through its structs (:func:`built`); a document
    that is no trace export request is reported, nesting past the stack too."""
    try:
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
                raise SpanFormatError(
                    "not an OTLP trace export: no resourceSpans (keys: %s)" % keys
                )
        if type(resource_spans) is not list:
            raise SpanFormatError("resourceSpans must be an array")
        return _records([built(block) for block in resource_spans], report)
    except SpanFormatError as error:
        report(error)
    except RecursionError:
        report(SpanDecodeError(TOO_DEEP))
    return []


def _records(resource_spans: list[Any], report: ErrorHandler) -> list[SpanRecord]:
    """The decoder: records of a request's resource blocks; a bad span (or resource or scope
    block, which costs its spans) goes to ``report`` and the rest are still returned."""
    records: list[SpanRecord] = []
    trace_ids: dict[str, int] = {}
    span_ids: dict[str, int] = {}
    dropped: list[tuple[str, str]] = []  # (key, why) of the values left out of a span
    index = 0  # span index within the request, counted across resources and scopes
    for r, block in enumerate(resource_spans):
        try:
            if type(block) is not ResourceSpans:
                raise SpanFormatError("not an object")
            resource: Any = block.resource
            if not resource:
                resource = {}
            elif type(resource) is not Resource:
                raise SpanFormatError("resource must be an object")
            else:
                resource = _attributes(resource.attributes, "resource")
            scope_blocks = block.scopeSpans
            if scope_blocks is None or scope_blocks is UNSET:
                scope_blocks = block.instrumentationLibrarySpans or []
            if type(scope_blocks) is not list:
                raise SpanFormatError("scopeSpans must be an array")
        except Exception as error:  # RecursionError from absurd nesting included
            skipped = _count_spans(block)
            report(
                error_kind(error)(
                    "resourceSpans[%d]: %s; its %d span(s) skipped"
                    % (r, reason_of(error), skipped),
                    skipped=skipped,
                )
            )
            index += skipped
            continue
        for s, scope_block in enumerate(scope_blocks):
            try:
                if type(scope_block) is not ScopeSpans:
                    raise SpanFormatError("not an object")
                scope = scope_block.scope or scope_block.instrumentationLibrary or {}
                if type(scope) is not dict:
                    raise SpanFormatError("scope must be an object")
                scope_name = scope.get("name") or ""
                # proto3 strings have no "unset": absent is "", as the SDK itself gives
                scope_version = scope.get("version") or ""
                if type(scope_name) is not str or type(scope_version) is not str:
                    raise SpanFormatError("scope name and version must be strings")
                spans = scope_block.spans or []
                if type(spans) is not list:
                    raise SpanFormatError("spans must be an array")
            except Exception as error:
                skipped = _count_scope_spans(scope_block)
                report(
                    error_kind(error)(
                        "resourceSpans[%d].scopeSpans[%d]: %s; its %d span(s) skipped"
                        % (r, s, reason_of(error), skipped),
                        skipped=skipped,
                    )
                )
                index += skipped
                continue
            append = records.append
            for span in spans:
                try:
                    append(
                        _span(
                            span, resource, scope_name, scope_version, dropped, trace_ids, span_ids
                        )
                    )
                except Exception as error:  # anything unforeseen in one span spoils only it
                    reason = reason_of(error)
                    name = span.name if type(span) is Span else None
                    if type(name) is str:
                        reason = "%s (span %s)" % (reason, _quote(name))
                    report(error_kind(error)(reason, span=index))
                    dropped.clear()
                if dropped:  # values left out of a span that was kept
                    record = records[-1]
                    for key, reason in dropped:
                        report(
                            SpanDecodeError(
                                "span %s (id %016x): %s"
                                % (_quote(record.name), record.span_id, left_out(key, reason))
                            )
                        )
                    dropped.clear()
                index += 1
    return records


_new_record = tuple.__new__  # SpanRecord(...) without its argument handling: every field given


def _span(
    span: Any,
    resource: dict[str, Any],
    scope_name: str,
    scope_version: str,
    dropped: list[tuple[str, str]],
    trace_ids: dict[str, int],
    span_ids: dict[str, int],
) -> SpanRecord:
    """One span; an attribute value that cannot be decoded is left out, listed in
    ``dropped`` and in the record's ``lossy``. The checks run in the order they always did,
    so the first problem of a span is the one reported. ``trace_ids`` and ``span_ids`` hold
    the ids read so far, by their text: the spans of a request share their traces, and their
    parents are each other."""
    if type(span) is not Span:
        raise SpanFormatError("span must be an object, got %s" % _json_type(span))
    (trace_hex, span_hex, parent_hex, name, kind, start, end, attributes, events, links, status,
     flags) = astuple(span)  # fmt: skip
    if type(name) is not str:
        if name is not UNSET:
            raise SpanFormatError("name must be a string, got %s" % _json_type(name))
        name = ""
    if not trace_hex:
        raise SpanFormatError("no traceId")
    if not span_hex:
        raise SpanFormatError("no spanId")
    trace_id = trace_ids.get(trace_hex) if type(trace_hex) is str else None
    if trace_id is None:
        trace_id = trace_ids[trace_hex] = _id(trace_hex, 16, "traceId")
    span_id = span_ids.get(span_hex) if type(span_hex) is str else None
    if span_id is None:
        span_id = span_ids[span_hex] = _id(span_hex, 8, "spanId")
    if not trace_id or not span_id:
        raise SpanFormatError("all-zero traceId or spanId")
    if parent_hex:
        parent_id = span_ids.get(parent_hex) if type(parent_hex) is str else None
        if parent_id is None:
            parent_id = span_ids[parent_hex] = _id(parent_hex, 8, "parentSpanId")
    else:
        parent_id = 0

    if type(start) is str and start.isdigit() and start.isascii() and len(start) < 20:
        start = int(start)  # (the common case of _nanos)
    else:
        start = 0 if start is None or start is UNSET else _nanos(start, "startTimeUnixNano")
    if type(end) is str and end.isdigit() and end.isascii() and len(end) < 20:
        end = int(end)
    else:
        end = 0 if end is None or end is UNSET else _nanos(end, "endTimeUnixNano")

    kind_value = 0 if kind is UNSET else kind
    kind = KIND_NAME.get(kind_value) if type(kind_value) is not bool else None
    if kind is None:
        raise SpanFormatError("unknown kind %r" % (kind_value,))

    if status:
        if type(status) is not Status:
            raise SpanFormatError("status must be an object, got %s" % _json_type(status))
        code = status.code
        if code is UNSET:
            code = 0
        status_code = STATUS_NAME.get(code) if type(code) is not bool else None
        if status_code is None:
            raise SpanFormatError("unknown status code %r" % (code,))
        status_message = status.message
        if status_message is UNSET:
            status_message = None
        elif status_message is not None and type(status_message) is not str:
            raise SpanFormatError("status message must be a string")
    else:
        status_code, status_message = "UNSET", None

    events = _events(events, dropped) if events else ()
    links = _links(links, dropped) if links else ()

    if type(flags) is not int or not flags:
        remote, sampled = False, True
    else:
        remote, sampled = bool(flags & FLAG_PARENT_IS_REMOTE), is_sampled(flags)
    attributes = _attributes(attributes, "span", dropped)
    return _new_record(
        SpanRecord,
        (
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
            remote,
            sampled,
            {key: left_out(key, reason) for key, reason in dropped} if dropped else _NO_LOSS,
        ),
    )


def _events(events: Any, dropped: list[tuple[str, str]]) -> tuple[SpanEvent, ...]:
    _check_objects(events, "event", Event)
    out = []
    for event in events:
        name = event.name
        if type(name) is not str:
            if name is not UNSET:
                raise SpanFormatError("event name must be a string")
            name = ""
        time = event.timeUnixNano
        time = 0 if time is None or time is UNSET else _nanos(time, "event timeUnixNano")
        out.append(SpanEvent(name, time, _attributes(event.attributes, "event", dropped)))
    return tuple(out)


def _links(links: Any, dropped: list[tuple[str, str]]) -> tuple[SpanLink, ...]:
    _check_objects(links, "link", Link)
    return tuple(
        [
            SpanLink(
                _id(_or_none(link.traceId), 16, "link traceId"),
                _id(_or_none(link.spanId), 8, "link spanId"),
                _attributes(link.attributes, "link", dropped),
            )
            for link in links
        ]
    )


def _check_objects(items: Any, what: str, kind: type) -> None:
    """An OTLP array of objects (events, links), each one checked before any is read."""
    if type(items) is not list:
        raise SpanFormatError("%ss must be an array, got %s" % (what, _json_type(items)))
    for item in items:
        if type(item) is not kind:
            raise SpanFormatError("%s must be an object, got %s" % (what, _json_type(item)))


def _or_none(value: Any) -> Any:
    return None if value is UNSET else value


def _attributes(
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
    unset = UNSET
    for item in items:
        if type(item) is not KeyValue:
            raise SpanFormatError("%s attribute without a string key: %.80r" % (where, item))
        key = item.key
        value = item.value
        if type(value) is AnyValue:  # the common values, one field each, inline
            x = value.stringValue
            if x is not unset:
                if type(x) is str and (
                    value.intValue
                    is value.doubleValue
                    is value.boolValue
                    is value.arrayValue
                    is value.kvlistValue
                    is value.bytesValue
                    is unset
                ):
                    out[key] = x
                    continue
            elif (
                value.arrayValue is value.kvlistValue is value.bytesValue is unset
                and (value.intValue is unset)
                + (value.doubleValue is unset)
                + (value.boolValue is unset)
                == 2
            ):
                x = value.intValue
                if type(x) is str:
                    try:
                        out[key] = int(x)
                        continue
                    except ValueError:
                        pass
                elif depth <= MAX_DEPTH:  # (deeper, only text is taken, as it always was)
                    x = value.doubleValue
                    if type(x) is float:
                        out[key] = x
                        continue
                    x = value.boolValue
                    if type(x) is bool:
                        out[key] = x
                        continue
        try:
            out[key] = _value(value, depth)
        except SpanFormatError as error:
            if dropped is not None and type(error) is SpanDecodeError:
                dropped.append((key, error.reason))
                continue
            raise type(error)("%s attribute %s: %s" % (where, _quote(key), error.reason)) from None
    return out


def _value(value: Any, depth: int) -> Any:
    """AnyValue -> the Python value the SDK would hold (tuples for arrays). Arrays and
    key-value lists nested deeper than MAX_DEPTH, and a double that is an integer beyond a
    float's range, raise SpanDecodeError (the caller leaves the attribute out)."""
    if depth > MAX_DEPTH:
        raise SpanDecodeError(_TOO_DEEP_VALUE)
    if type(value) is not AnyValue:
        if value is None or value is UNSET:
            return None
        if type(value) is dict:  # (built from a document: its first field is no AnyValue's)
            raise SpanFormatError("unknown value type %r" % next(iter(value)))
        raise SpanFormatError("value must be an object, got %s" % _json_type(value))
    fields = astuple(value)
    missing = fields.count(UNSET)
    if missing != 6:
        if missing == 7:
            return None  # an empty AnyValue: OTLP's "no value"
        raise _ReadAgain  # which field came first decides: read as a document
    text, integer, double, boolean, array, kvlist, data = fields
    if text is not UNSET:
        if type(text) is str:
            return text
        field, x = "stringValue", text
    elif integer is not UNSET:
        if type(integer) is str:
            try:
                return int(integer)
            except ValueError:
                pass
        elif type(integer) is int or (type(integer) is float and integer.is_integer()):
            return int(integer)
        field, x = "intValue", integer
    elif double is not UNSET:
        if type(double) is float:
            return double
        if type(double) is int:
            if -_FLOAT_MAX <= double <= _FLOAT_MAX:
                return float(double)
            raise SpanDecodeError("a doubleValue that is %s, too large" % described(double))
        if type(double) is str:
            special = _FLOAT_WORDS.get(double)
            if special is not None:
                return special
            try:
                return float(double)
            except ValueError:
                pass
        field, x = "doubleValue", double
    elif boolean is not UNSET:
        if type(boolean) is bool:
            return boolean
        field, x = "boolValue", boolean
    elif array is not UNSET:
        if type(array) is ArrayValue:
            return tuple([_value(item, depth + 1) for item in array.values or ()])
        field, x = "arrayValue", array
    elif kvlist is not UNSET:
        if type(kvlist) is KeyValueList:
            return _attributes(kvlist.values, "kvlist", depth=depth + 1)
        field, x = "kvlistValue", kvlist
    else:
        if type(data) is str:
            try:
                return base64.b64decode(
                    data.replace("-", "+").replace("_", "/") + "=" * (-len(data) % 4),
                    validate=True,
                )
            except (binascii.Error, ValueError):
                pass
        field, x = "bytesValue", data
    raise SpanFormatError("bad %s %.80r" % (field, x))


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


def _count_spans(block: Any) -> int:
    """The spans of a resource block that is skipped, as its text counts them."""
    try:
        return sum(len(scope.spans or ()) for scope in block.scopeSpans or ())
    except Exception:
        return 0


def _count_scope_spans(scope_block: Any) -> int:
    try:
        return len(scope_block.spans or ())
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
