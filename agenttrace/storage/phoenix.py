"""Phoenix (Arize): span records of one project, read through its REST API.

``GET /v1/projects/{project}/spans?limit=&cursor=&start_time=&end_time=&order=asc`` answers
``{"data": [span, ...], "next_cursor": str | null}``; each span is
``{"id", "name", "context": {"trace_id", "span_id"}, "span_kind", "parent_id", "start_time",
"end_time", "status_code", "status_message", "attributes", "events": [{"name", "timestamp",
"attributes"}]}`` with ISO 8601 times and hex ids. The reader follows ``next_cursor`` page by
page, so memory stays bounded by one page.

What Phoenix keeps of an OTLP span, and what the reader does about the rest (the records'
``lossy`` says it per record, see :data:`agenttrace.trajectory.records.LOSSY_TIMES`):

* times to the **microsecond** (``datetime.fromtimestamp(ns / 1e9)``: rounded, not cut);
* no span kind, resource, instrumentation scope, links, trace state or remote-parent flag;
* attribute keys split on dots into nested objects; the API flattens them back. Keys come back
  normalised (whitespace around segments, empty segments and leading zeros of numeric
  segments dropped, ``a.2.b`` renumbered to ``a.0.b`` when it is the only index), which the
  reader cannot undo; NaN and infinite values are dropped;
* ``openinference.span.kind`` is moved out of the attributes into ``span_kind``: put back;
* spans with ``gen_ai.*`` attributes get OpenInference attributes derived from them
  (``llm.model_name``, ``session.id``, ``output.value`` ...; never overriding a value the span
  had): dropped unless ``keep_derived=True``, each noted in ``lossy``;
* attributes whose key ends in ``metadata``, ``llm.prompt_template.variables`` or
  ``tool.parameters`` are parsed as JSON: objects are re-encoded as (compact) JSON text,
  other values kept and noted in ``lossy``;
* ``exception`` events keep only ``exception.type``, ``.message``, ``.escaped`` and
  ``.stacktrace``.
"""

from __future__ import annotations

import calendar
import json
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, NoReturn

from agenttrace import semconv as sc
from agenttrace.storage.errors import ErrorHandler, SpanFormatError, warn
from agenttrace.storage.http import BackendError, JsonClient
from agenttrace.trajectory.records import (
    LOSSY_CONTEXT,
    LOSSY_TIMES,
    SpanEvent,
    SpanRecord,
)

__all__ = ["MAX_PAGE_SIZE", "PhoenixReader", "decode_span"]

#: Phoenix's largest ``limit`` for one page of spans.
MAX_PAGE_SIZE = 1000

_STATUS = {"UNSET": "UNSET", "OK": "OK", "ERROR": "ERROR"}
_SPAN_KIND_KEY = "openinference.span.kind"
_NO_SPAN_KIND = "UNKNOWN"  # what the API answers when the span had no openinference.span.kind
_GEN_AI_PREFIX = "gen_ai."
#: Keys Phoenix parses as JSON text when they end with one of these (phoenix.trace.attributes).
_JSON_STRING_SUFFIXES = ("metadata", "llm.prompt_template.variables", "tool.parameters")
#: OpenInference attributes Phoenix derives from gen_ai.* ones (phoenix.trace.gen_ai.conversion):
#: exact keys, and prefixes of the flattened messages, tools and documents.
_DERIVED_KEYS = frozenset(
    {
        _SPAN_KIND_KEY,
        "session.id",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "llm.model_name",
        "llm.provider",
        "llm.system",
        "llm.finish_reason",
        "llm.invocation_parameters",
        "llm.token_count.prompt",
        "llm.token_count.completion",
        "llm.token_count.total",
        "llm.token_count.prompt_details.cache_read",
        "llm.token_count.prompt_details.cache_write",
        "llm.token_count.completion_details.reasoning",
        "tool.id",
        "tool.name",
        "tool.description",
        "tool.json_schema",
        "tool.parameters",
        "embedding.model_name",
        "embedding.invocation_parameters",
    }
)
_DERIVED_PREFIXES = (
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.tools.",
    "retrieval.documents.",
    "embedding.embeddings.",
)
_SPAN_FIELDS_LOST = (
    "Phoenix keeps no span kind, resource, instrumentation scope, links, trace state or "
    "remote-parent flag"
)
_EXCEPTION_EVENTS_CUT = (
    "its exception events keep only exception.type, .message, .escaped and .stacktrace"
)
_MICROSECONDS = "Phoenix keeps times to the microsecond (rounded)"
_DERIVED = (
    "dropped: Phoenix derives it from the gen_ai.* attributes and never overrides a value the "
    "span had, so an original value cannot be told apart (keep_derived=True keeps it)"
)
_JSON_REENCODED = "Phoenix parsed this JSON text into an object; re-encoded as compact JSON"
_JSON_RETYPED = "Phoenix parses this attribute as JSON: the value may have been JSON text"
_NULL = "Phoenix answered null for this attribute (dropped)"
_NOT_OTEL = "not an OpenTelemetry attribute value in Phoenix's answer; kept as JSON text"

# The lossy mappings almost every record shares (one object each, not one per record).
_LOSSY_COMMON = MappingProxyType({LOSSY_TIMES: _MICROSECONDS, LOSSY_CONTEXT: _SPAN_FIELDS_LOST})
# The trajectory's error reads exception.type/.message/.stacktrace, all kept: context only.
_LOSSY_EXCEPTION = MappingProxyType(
    {**_LOSSY_COMMON, LOSSY_CONTEXT: f"{_SPAN_FIELDS_LOST}; {_EXCEPTION_EVENTS_CUT}"}
)


class PhoenixReader:
    """Span records of one Phoenix project, page by page.

    ``project`` is the project's name (as sent in the ``openinference.project.name`` resource
    attribute) or its id. ``start``/``end`` bound the spans' *start* times (Phoenix filters
    spans, not traces: an episode crossing a bound comes back partial). ``page_size`` spans
    per request (1 to 1000). A project Phoenix does not have raises :class:`BackendError`
    naming it. ``keep_derived`` keeps the OpenInference attributes Phoenix adds to GenAI spans.
    """

    def __init__(
        self,
        base_url: str,
        project: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        page_size: int = MAX_PAGE_SIZE,
        keep_derived: bool = False,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        on_error: ErrorHandler | None = None,
    ) -> None:
        if not isinstance(project, str) or not project:
            raise ValueError("Phoenix needs a project name (or id)")
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be 1 to {MAX_PAGE_SIZE} (Phoenix's limit)")
        self.client = JsonClient(base_url, headers=headers, token=token, timeout=timeout)
        self.project = project
        self.start, self.end = start, end
        self.page_size = page_size
        self.keep_derived = keep_derived
        self.report = on_error or warn
        #: Spans the last ``records()`` walk received (decoded or reported), and its pages.
        self.spans_read = 0
        self.pages_read = 0

    @property
    def path(self) -> str:
        return "/v1/projects/" + urllib.parse.quote(self.project, safe="") + "/spans"

    def records(self) -> Iterator[SpanRecord]:
        """Every span of the project (within start/end), oldest first, one page at a time."""
        self.spans_read = self.pages_read = 0
        cursor: str | None = None
        seen_cursors: set[str] = set()
        while True:
            params = {
                "limit": self.page_size,
                "cursor": cursor,
                "start_time": _iso(self.start),
                "end_time": _iso(self.end),
                "order": "asc",  # insertion (export) order; older Phoenix ignores it
            }
            answer = self.client.get(self.path, params, missing_ok=True)
            if answer is None:
                self._raise_missing()
            page = f"Phoenix project {self.project!r} page {self.pages_read}"
            self.pages_read += 1
            data = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(data, list):
                self.report(
                    SpanFormatError(f"not {{'data': [...]}}: {answer!r}"[:300], source=page)
                )
                return
            self.spans_read += len(data)
            for index, span in enumerate(data):
                try:
                    record = decode_span(span, keep_derived=self.keep_derived)
                except Exception as error:  # one bad span never costs the others
                    message = f"{_where(span)}: {error}"
                    self.report(SpanFormatError(message, source=page, span=index))
                    continue
                yield record
            cursor = answer.get("next_cursor")
            if cursor is None or cursor == "":
                return
            if not isinstance(cursor, str) or cursor in seen_cursors:
                message = f"bad or repeated next_cursor {cursor!r}"[:200]
                self.report(SpanFormatError(message, source=page))
                return
            seen_cursors.add(cursor)

    def _raise_missing(self) -> NoReturn:
        """A 404 for the spans: no such project, or no such API (wrong URL, old Phoenix)."""
        project_path = self.path[: -len("/spans")]
        if self.client.get(project_path, missing_ok=True) is None:
            url = self.client.url(project_path)
            raise BackendError(
                f"Phoenix at {self.client.base_url} has no project {self.project!r} (a project "
                "is made by the first span sent with resource attribute "
                f"openinference.project.name={self.project})",
                url=url,
                status=404,
            )
        url = self.client.url(self.path)
        raise BackendError(
            f"GET {url} answered 404: project {self.project!r} exists but this server has no "
            "span list API (/v1/projects/{project}/spans): a Phoenix too old, or not Phoenix",
            url=url,
            status=404,
        )


# --- one span --------------------------------------------------------------------------------


def decode_span(span: Any, *, keep_derived: bool = False) -> SpanRecord:
    """One span of the API's answer as a span record; raises SpanFormatError when unreadable."""
    if not isinstance(span, dict):
        raise SpanFormatError("span must be an object")
    context = span.get("context")
    if not isinstance(context, dict):
        raise SpanFormatError("span has no context")
    trace_id = _hex_id(context.get("trace_id"), 16, "trace_id")
    span_id = _hex_id(context.get("span_id"), 8, "span_id")
    parent = span.get("parent_id")
    parent_id = _hex_id(parent, 8, "parent_id") if parent else 0

    start, start_fine = _time_ns(span.get("start_time"), "start_time")
    end_text = span.get("end_time")
    end, end_fine = _time_ns(end_text, "end_time") if end_text is not None else (None, False)
    # Times with sub-microsecond digits mean the server keeps nanoseconds (Phoenix does not).
    fine = start_fine or end_fine

    lossy: dict[str, str] = {}
    raw = span.get("attributes")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpanFormatError("attributes must be an object")
    attributes = _flat_attributes(raw, lossy)
    kind = span.get("span_kind")
    if isinstance(kind, str) and kind and kind != _NO_SPAN_KIND:
        attributes.setdefault(_SPAN_KIND_KEY, kind)
    _restore_json_strings(attributes, lossy)
    if not keep_derived and any(key.startswith(_GEN_AI_PREFIX) for key in attributes):
        for key in [k for k in attributes if _is_derived(k)]:
            del attributes[key]
            lossy[key] = _DERIVED

    events = []
    has_exception = False
    for number, event in enumerate(span.get("events") or ()):
        if not isinstance(event, dict):
            raise SpanFormatError(f"event #{number} must be an object")
        time, event_fine = _time_ns(event.get("timestamp"), f"event #{number} timestamp")
        fine = fine or event_fine
        event_attributes = event.get("attributes") or {}
        if not isinstance(event_attributes, dict):
            raise SpanFormatError(f"event #{number}: attributes must be an object")
        name = str(event.get("name") or "")
        has_exception = has_exception or name == sc.EXCEPTION_EVENT
        events.append(SpanEvent(name, time, _flat_attributes(event_attributes, None)))

    status_code = _STATUS.get(str(span.get("status_code") or "UNSET").upper())
    if status_code is None:
        raise SpanFormatError(f"unknown status_code {span.get('status_code')!r}")
    message = span.get("status_message")
    name = span.get("name")
    if not isinstance(name, str):
        raise SpanFormatError("span has no name")

    common = _LOSSY_EXCEPTION if has_exception else _LOSSY_COMMON
    if lossy or fine:  # not the shared mapping: say what this span lost
        lossy = {**common, **lossy}
        if fine:
            del lossy[LOSSY_TIMES]
    return SpanRecord(
        trace_id,
        span_id,
        parent_id,
        name,
        start,
        end,
        attributes,
        tuple(events),
        status_code,
        str(message) if message else None,
        "INTERNAL",
        {},
        "",
        None,
        (),
        False,
        True,
        MappingProxyType(lossy) if lossy else common,
    )


def _where(span: Any) -> str:
    """The span's name and ids, as far as they can be read, for error messages."""
    if not isinstance(span, dict):
        return "not an object"
    context = span.get("context") if isinstance(span.get("context"), dict) else {}
    ids = [f"span id {context.get('span_id')}"[:60]]
    if context.get("trace_id"):
        ids.append(f"trace {context['trace_id']}"[:60])
    name = span.get("name")
    return (f"{name[:80]!r} " if isinstance(name, str) else "") + f"({', '.join(ids)})"


def _hex_id(value: Any, size: int, what: str) -> int:
    text = value.replace("-", "") if isinstance(value, str) else value  # legacy UUID ids
    if not isinstance(text, str) or not text or len(text) > 2 * size:
        raise SpanFormatError(f"{what} must be up to {2 * size} hex digits, got {value!r}"[:200])
    if not text.isascii() or not text.isalnum():
        raise SpanFormatError(f"{what} {value!r} is not hex"[:200])
    try:
        number = int(text, 16)
    except ValueError:
        raise SpanFormatError(f"{what} {value!r} is not hex"[:200]) from None
    if not number:
        raise SpanFormatError(f"{what} is zero")
    return number


_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)


def _time_ns(text: Any, what: str) -> tuple[int, bool]:
    """Unix nanoseconds of an ISO 8601 time (exactly, no float), and whether it had more than
    microsecond precision. A time without an offset is UTC."""
    match = _TIME.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise SpanFormatError(f"{what} is not an ISO 8601 time: {text!r}"[:200])
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
    except ValueError as error:
        raise SpanFormatError(f"{what} {text!r}: {error}"[:200]) from None
    seconds = calendar.timegm(moment.timetuple())
    if offset and offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)
    fraction = fraction or ""
    nanos = int((fraction + "000000000")[:9])
    return seconds * 1_000_000_000 + nanos, len(fraction.rstrip("0")) > 6


# --- attributes ------------------------------------------------------------------------------


def _flat_attributes(raw: Mapping[str, Any], lossy: dict[str, str] | None) -> dict[str, Any]:
    """Nested objects (and lists of objects) flattened into dotted keys, as Phoenix's own
    ``flatten(..., recurse_on_sequence=True)`` does; values made OTel primitives."""
    out: dict[str, Any] = {}
    _flatten_into(out, "", raw, lossy)
    return out


def _flatten_into(
    out: dict[str, Any], prefix: str, value: Any, lossy: dict[str, str] | None
) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten_into(out, f"{prefix}.{key}" if prefix else str(key), item, lossy)
        return
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                _flatten_into(out, f"{prefix}.{index}", item, lossy)
        return
    if value is None:
        if lossy is not None:
            lossy[prefix] = _NULL
        return
    converted = _primitive(value)
    if converted is _NOT_PRIMITIVE:
        converted = json.dumps(value, separators=(",", ":"), default=str)
        if lossy is not None:
            lossy[prefix] = _NOT_OTEL
    out[prefix] = converted


_NOT_PRIMITIVE = object()


def _primitive(value: Any) -> Any:
    """An OTel attribute value (arrays as tuples), or _NOT_PRIMITIVE."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list) and all(isinstance(i, (str, bool, int, float)) for i in value):
        return tuple(value)
    return _NOT_PRIMITIVE


def _json_prefix(key: str) -> str | None:
    """The dotted prefix of ``key`` (or the key) that Phoenix would have parsed as JSON text."""
    end = -1
    while True:
        end = key.find(".", end + 1)
        candidate = key if end < 0 else key[:end]
        if candidate.endswith(_JSON_STRING_SUFFIXES):
            return candidate
        if end < 0:
            return None


def _restore_json_strings(attributes: dict[str, Any], lossy: dict[str, str]) -> None:
    """Keys under a JSON-string attribute back into its (compact) JSON text."""
    objects: dict[str, dict[str, Any]] = {}
    for key in list(attributes):
        prefix = _json_prefix(key)
        if prefix is None:
            continue
        if prefix == key:
            if not isinstance(attributes[key], str):
                lossy.setdefault(key, _JSON_RETYPED)
            continue
        objects.setdefault(prefix, {})[key[len(prefix) + 1 :]] = attributes.pop(key)
    for prefix, flat in objects.items():
        if prefix in attributes:  # a value and an object under one key: leave both as they are
            attributes.update({f"{prefix}.{k}": v for k, v in flat.items()})
            continue
        attributes[prefix] = json.dumps(_nest(flat), separators=(",", ":"))
        lossy[prefix] = _JSON_REENCODED


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys -> nested objects (lists for tuples), the JSON the keys were made from."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        node = root
        *parents, last = key.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[last] = list(value) if isinstance(value, tuple) else value
    return root


def _is_derived(key: str) -> bool:
    return key in _DERIVED_KEYS or key.startswith(_DERIVED_PREFIXES)


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat()
