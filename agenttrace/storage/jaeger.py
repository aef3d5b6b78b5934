"""Jaeger: span records from its query APIs, api_v3 (OTLP/JSON) and v1 (Jaeger's own JSON).

* **api_v3** (Jaeger v2): ``GET /api/v3/traces?query.service_name=…&query.start_time_min=…``
  answers ``{"result": {"resourceSpans": [...]}}``, the traces found concatenated (404 when
  none); ``GET /api/v3/traces/{id}`` answers one trace the same way. Decoded by the OTLP/JSON
  reader.
* **v1** (``/api/traces``, Jaeger v1 and the v2 UI's internal API): ``{"data": [{traceID,
  spans: [...], processes}]}`` with microsecond times, ``tags`` and ``logs``. The mapping back
  to OTLP follows Jaeger's own translator: ``span.kind``, ``otel.status_code``,
  ``otel.status_description``, ``error`` and ``otel.scope.*`` tags become kind, status and
  scope; the first ``CHILD_OF`` reference is the parent, other references become links; log
  fields become events named by their ``event`` field. Jaeger keeps times in microseconds
  and stores array attributes as JSON text, so records read through v1 are that precise.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from agenttrace import semconv as sc
from agenttrace.storage.errors import ErrorHandler, SpanFormatError, warn
from agenttrace.storage.http import JsonClient
from agenttrace.storage.otlp_json_decode import decode_document
from agenttrace.trajectory.records import LOSSY_TIMES, SpanEvent, SpanLink, SpanRecord

_KINDS = {"client": "CLIENT", "server": "SERVER", "producer": "PRODUCER",
          "consumer": "CONSUMER", "internal": "INTERNAL"}  # fmt: skip
_STATUS = {"OK": "OK", "ERROR": "ERROR", "UNSET": "UNSET"}
# Tags that Jaeger made out of OTLP span fields; they go back into those fields.
_KIND_TAG = "span.kind"
_STATUS_TAG = "otel.status_code"
_STATUS_MESSAGE_TAGS = ("otel.status_description", "otel.status_message")
_ERROR_TAG = "error"
_SCOPE_NAME_TAGS = ("otel.scope.name", "otel.library.name")
_SCOPE_VERSION_TAGS = ("otel.scope.version", "otel.library.version")
_DROPPED_TAGS = frozenset({"internal.span.format", "w3c.tracestate"})
_EVENT_NAME_FIELD = "event"
#: Attributes the OTLP -> Jaeger conversion turned from arrays into JSON text.
_ARRAY_ATTRIBUTES = frozenset({sc.GEN_AI_RESPONSE_FINISH_REASONS, *sc.VECTOR_LISTS})
_V1_LOSSY = MappingProxyType({LOSSY_TIMES: "Jaeger's v1 API keeps times to the microsecond"})


# --- v1 JSON -> span records -----------------------------------------------------------------


def decode_v1(document: Any, on_error: ErrorHandler | None = None) -> list[SpanRecord]:
    """Records of a v1 API answer (``{"data": [trace, ...]}``), one trace, a list of traces,
    or a list of spans with their ``process`` inline (the UI's JSON download).

    A bad span goes to ``on_error`` (default: a warning) and the rest are returned.
    """
    report = on_error or warn
    if isinstance(document, dict) and "data" in document:
        document = document["data"] or []
    if isinstance(document, dict):
        document = [document]
    if not isinstance(document, list):
        raise SpanFormatError("not a Jaeger v1 answer: expected {'data': [...]} or a list")
    records: list[SpanRecord] = []
    for t, item in enumerate(document):
        if isinstance(item, dict) and "spans" in item:  # a trace
            processes = item.get("processes") or {}
            spans = item.get("spans") or []
        else:  # a span with its process inline
            processes, spans = {}, [item]
        if not isinstance(spans, list) or not isinstance(processes, dict):
            report(SpanFormatError(f"trace #{t}: spans must be a list, processes an object"))
            continue
        for s, span in enumerate(spans):
            try:
                records.append(_decode_v1_span(span, processes))
            except Exception as error:  # one bad span never costs the others
                name = span.get("operationName") if isinstance(span, dict) else None
                where = f"trace #{t} span #{s}" + (f" ({name!r})" if isinstance(name, str) else "")
                report(SpanFormatError(f"{where}: {error}", span=s))
    return records


def _decode_v1_span(span: Any, processes: Mapping[str, Any]) -> SpanRecord:
    if not isinstance(span, dict):
        raise SpanFormatError("span must be an object")
    trace_id = _hex_id(span.get("traceID"), 16, "traceID")
    span_id = _hex_id(span.get("spanID"), 8, "spanID")
    parent_id = 0
    links: list[SpanLink] = []
    for ref in span.get("references") or ():
        ref_trace = _hex_id(ref.get("traceID"), 16, "reference traceID")
        ref_span = _hex_id(ref.get("spanID"), 8, "reference spanID")
        if not parent_id and ref.get("refType") == "CHILD_OF" and ref_trace == trace_id:
            parent_id = ref_span
        else:
            links.append(SpanLink(ref_trace, ref_span, {}))
    if not parent_id and span.get("parentSpanID"):  # older v1 answers
        parent_id = _hex_id(span["parentSpanID"], 8, "parentSpanID")

    start_us, duration_us = span.get("startTime"), span.get("duration", 0)
    if type(start_us) is not int or type(duration_us) is not int or duration_us < 0:
        raise SpanFormatError("startTime and duration must be whole microseconds")

    attributes = _tags(span.get("tags"))
    kind = _KINDS.get(str(attributes.pop(_KIND_TAG, "internal")).lower(), "INTERNAL")
    status_code = _STATUS.get(str(attributes.pop(_STATUS_TAG, "")).upper(), "UNSET")
    status_message = None
    for key in _STATUS_MESSAGE_TAGS:
        if key in attributes:
            status_message = str(attributes.pop(key))
    if attributes.get(_ERROR_TAG) is True:
        attributes.pop(_ERROR_TAG)
        if status_code == "UNSET":
            status_code = "ERROR"
    scope_name = scope_version = ""
    for key in _SCOPE_NAME_TAGS:
        if key in attributes:
            scope_name = str(attributes.pop(key))
    for key in _SCOPE_VERSION_TAGS:
        if key in attributes:
            scope_version = str(attributes.pop(key))
    for key in _DROPPED_TAGS & attributes.keys():
        del attributes[key]

    process = span.get("process")
    if process is None:
        process = processes.get(span.get("processID"), {})
    if not isinstance(process, dict):
        raise SpanFormatError("process must be an object")
    resource = _tags(process.get("tags"))
    if process.get("serviceName"):
        resource = {"service.name": process["serviceName"], **resource}

    events = []
    for log in span.get("logs") or ():
        fields = _tags(log.get("fields"))
        name = fields.pop(_EVENT_NAME_FIELD, "")
        time_us = log.get("timestamp", 0)
        if type(time_us) is not int:
            raise SpanFormatError("log timestamp must be whole microseconds")
        events.append(SpanEvent(str(name), time_us * 1000, fields))

    flags = span.get("flags", 1)
    return SpanRecord(
        trace_id,
        span_id,
        parent_id,
        str(span.get("operationName", "")),
        start_us * 1000,
        (start_us + duration_us) * 1000,
        attributes,
        tuple(events),
        status_code,
        status_message,
        kind,
        resource,
        scope_name,
        scope_version,
        tuple(links),
        False,
        not isinstance(flags, int) or bool(flags & 1),
        _V1_LOSSY,
    )


def _hex_id(value: Any, size: int, what: str) -> int:
    if not isinstance(value, str) or not value or len(value) > 2 * size:
        raise SpanFormatError(f"{what} must be up to {2 * size} hex digits, got {value!r}")
    try:
        number = int(value, 16)
    except ValueError:
        raise SpanFormatError(f"{what} {value!r} is not hex") from None
    if not number or not value.isascii() or not value.isalnum():
        raise SpanFormatError(f"{what} {value!r} is not a non-zero hex id")
    return number


def _tags(tags: Any) -> dict[str, Any]:
    if not tags:
        return {}
    if not isinstance(tags, list):
        raise SpanFormatError("tags must be a list")
    out: dict[str, Any] = {}
    for tag in tags:
        key = tag.get("key") if isinstance(tag, dict) else None
        if not isinstance(key, str):
            raise SpanFormatError(f"tag without a key: {tag!r}"[:200])
        out[key] = _tag_value(key, tag.get("type", "string"), tag.get("value"))
    return out


def _tag_value(key: str, kind: Any, value: Any) -> Any:
    kind = str(kind).lower()
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "binary":
        return base64.b64decode(value) if isinstance(value, str) else value
    if key in _ARRAY_ATTRIBUTES and isinstance(value, str) and value.startswith("["):
        try:
            items = json.loads(value)
        except (ValueError, RecursionError):
            return value
        if isinstance(items, list) and all(isinstance(i, (str, bool, int, float)) for i in items):
            return tuple(items)
    return value


# --- the HTTP APIs ---------------------------------------------------------------------------


class JaegerReader:
    """Span records of the traces a Jaeger query finds, through api_v3 (default) or v1.

    ``service`` is required by Jaeger's search; ``start``/``end`` bound the traces' start
    times; ``attributes`` (v3: Jaeger 2.19 or later) and ``operation`` narrow it further;
    ``limit`` is Jaeger's search depth (traces per query). ``trace_ids`` skips the search.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api: str = "v3",
        service: str | None = None,
        operation: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        attributes: Mapping[str, str] | None = None,
        trace_ids: list[str] | None = None,
        limit: int = 1000,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        on_error: ErrorHandler | None = None,
    ) -> None:
        if api not in ("v3", "v1"):
            raise ValueError(f"Jaeger api must be 'v3' or 'v1', got {api!r}")
        if not trace_ids and not service:
            raise ValueError("Jaeger needs a service to search (or trace ids)")
        self.client = JsonClient(base_url, headers=headers, token=token, timeout=timeout)
        self.api = api
        self.service, self.operation = service, operation
        self.end = end or datetime.now(timezone.utc)
        self.start = start or datetime.fromtimestamp(0, timezone.utc)
        self.attributes = dict(attributes or {})
        self.trace_ids = list(trace_ids or [])
        self.limit = limit
        self.report = on_error or warn
        #: Traces the last search returned; equal to ``limit`` means more may exist.
        self.traces_found = 0

    def records(self) -> Iterator[SpanRecord]:
        if self.trace_ids:
            for trace_id in self.trace_ids:
                yield from self._trace(trace_id)
            return
        if self.api == "v3":
            yield from self._search_v3()
        else:
            yield from self._search_v1()

    def _trace(self, trace_id: str) -> list[SpanRecord]:
        if self.api == "v3":
            answer = self.client.get(f"/api/v3/traces/{trace_id}", missing_ok=True)
            return self._v3_records(answer)
        answer = self.client.get(f"/api/traces/{trace_id}", missing_ok=True)
        return decode_v1(answer, self.report) if answer else []

    def _search_v3(self) -> list[SpanRecord]:
        params = {
            "query.service_name": self.service,
            "query.operation_name": self.operation,
            "query.start_time_min": _rfc3339(self.start),
            "query.start_time_max": _rfc3339(self.end),
            "query.search_depth": self.limit,
            "query.attributes": json.dumps(self.attributes) if self.attributes else None,
        }
        records = self._v3_records(self.client.get("/api/v3/traces", params, missing_ok=True))
        self.traces_found = len({record.trace_id for record in records})
        return records

    def _v3_records(self, answer: Any) -> list[SpanRecord]:
        if answer is None:
            return []
        result = answer.get("result", answer) if isinstance(answer, dict) else answer
        return decode_document(result, self.report)

    def _search_v1(self) -> list[SpanRecord]:
        params = {
            "service": self.service,
            "operation": self.operation,
            "start": _micros(self.start),
            "end": _micros(self.end),
            "limit": self.limit,
            "tags": json.dumps(self.attributes) if self.attributes else None,
        }
        answer = self.client.get("/api/traces", params, missing_ok=True)
        data = (answer or {}).get("data") or []
        self.traces_found = len(data)
        return decode_v1(data, self.report)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)
