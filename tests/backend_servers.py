"""Local HTTP servers that answer like trace backends' query APIs, for the storage readers' tests.

They hold span records (from a real agenttrace run) and answer in each API's wire format, the
way the upstream samples in fixtures/upstream show it. Each server binds 127.0.0.1 on a free
port, remembers every request (path, query, headers) and is stopped by its test.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agenttrace.storage import encode_lines
from agenttrace.trajectory.records import SpanRecord

Route = Callable[[str, dict[str, list[str]]], tuple[int, Any]]


class BackendServer:
    """Answers GET requests through ``route(path, query) -> (status, json body)``."""

    def __init__(self, route: Route) -> None:
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append({"path": url.path, "query": query, "headers": headers})
                status, body = route(url.path, query)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def otlp_json(records: Iterable[SpanRecord]) -> dict:
    return json.loads(encode_lines(list(records)))


def _service(record: SpanRecord) -> str | None:
    return record.resource.get("service.name")


def _rfc3339_ns(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1e9)


def select_traces(
    records: list[SpanRecord], service: str | None, start_ns: int, end_ns: int, limit: int
) -> list[SpanRecord]:
    """Whole traces with a span of ``service`` whose root started in the window, newest
    ``limit`` of them (what Jaeger's and Tempo's searches do)."""
    roots: dict[int, int] = {}
    for record in records:
        if record.parent_span_id == 0 or record.trace_id not in roots:
            roots[record.trace_id] = min(
                roots.get(record.trace_id, record.start_time), record.start_time
            )
    matching = {
        r.trace_id
        for r in records
        if (service is None or _service(r) == service) and start_ns <= roots[r.trace_id] <= end_ns
    }
    chosen = set(sorted(matching, key=roots.__getitem__, reverse=True)[:limit])
    return [r for r in records if r.trace_id in chosen]


# --- Jaeger ----------------------------------------------------------------------------------


def jaeger_v3_route(records: list[SpanRecord]) -> Route:
    def route(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path.startswith("/api/v3/traces/"):
            trace_id = int(path.rsplit("/", 1)[1], 16)
            found = [r for r in records if r.trace_id == trace_id]
        elif path == "/api/v3/traces":
            one = {k: v[0] for k, v in query.items()}
            if "query.start_time_min" not in one or "query.start_time_max" not in one:
                return 400, {"error": {"message": "query.start_time_min and max are required"}}
            found = select_traces(
                records,
                one.get("query.service_name"),
                _rfc3339_ns(one["query.start_time_min"]),
                _rfc3339_ns(one["query.start_time_max"]),
                int(one.get("query.search_depth", 100)),
            )
        else:
            return 404, {"error": {"message": "not found"}}
        if not found:
            return 404, {"error": {"code": 5, "message": "trace not found"}}
        return 200, {"result": otlp_json(found)}

    return route


def jaeger_v1_span(record: SpanRecord, process_id: str) -> dict:
    """One record as Jaeger's v1 JSON shows it (Jaeger's OTLP -> Jaeger translation)."""
    tags = [_tag(k, v) for k, v in record.attributes.items()]
    if record.scope_name:
        tags.append(_tag("otel.scope.name", record.scope_name))
    if record.scope_version:
        tags.append(_tag("otel.scope.version", record.scope_version))
    if record.kind != "INTERNAL":
        tags.append(_tag("span.kind", record.kind.lower()))
    if record.status_code != "UNSET":
        tags.append(_tag("otel.status_code", record.status_code))
        if record.status_code == "ERROR":
            tags.append(_tag("error", True))
    if record.status_message:
        tags.append(_tag("otel.status_description", record.status_message))
    references = []
    if record.parent_span_id:
        references.append(_ref("CHILD_OF", record.trace_id, record.parent_span_id))
    references += [_ref("FOLLOWS_FROM", link.trace_id, link.span_id) for link in record.links]
    start_us = record.start_time // 1000
    return {
        "traceID": format(record.trace_id, "032x"),
        "spanID": format(record.span_id, "016x"),
        "flags": 1,
        "operationName": record.name,
        "references": references,
        "startTime": start_us,
        "duration": (record.end_time or record.start_time) // 1000 - start_us,
        "tags": tags,
        "logs": [
            {
                "timestamp": event.time // 1000,
                "fields": [_tag("event", event.name)]
                + [_tag(k, v) for k, v in event.attributes.items()],
            }
            for event in record.events
        ],
        "processID": process_id,
        "warnings": None,
    }


def _ref(kind: str, trace_id: int, span_id: int) -> dict:
    return {"refType": kind, "traceID": format(trace_id, "032x"), "spanID": format(span_id, "016x")}


def _tag(key: str, value: Any) -> dict:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, (tuple, list)):
        return {"key": key, "type": "string", "value": json.dumps(list(value))}
    return {"key": key, "type": "string", "value": str(value)}


def jaeger_v1_traces(records: list[SpanRecord]) -> list[dict]:
    traces: dict[int, dict] = {}
    for record in records:
        trace = traces.setdefault(
            record.trace_id,
            {
                "traceID": format(record.trace_id, "032x"),
                "spans": [],
                "processes": {},
                "warnings": None,
            },
        )
        resource = dict(record.resource)
        service = resource.pop("service.name", "unknown")
        process = {"serviceName": service, "tags": [_tag(k, v) for k, v in resource.items()]}
        process_id = next((k for k, v in trace["processes"].items() if v == process), None)
        if process_id is None:
            process_id = f"p{len(trace['processes']) + 1}"
            trace["processes"][process_id] = process
        trace["spans"].append(jaeger_v1_span(record, process_id))
    return list(traces.values())


def jaeger_v1_route(records: list[SpanRecord]) -> Route:
    def route(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path.startswith("/api/traces/"):
            trace_id = int(path.rsplit("/", 1)[1], 16)
            found = [r for r in records if r.trace_id == trace_id]
            if not found:
                return 404, {"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}
            return 200, {"data": jaeger_v1_traces(found)}
        if path == "/api/traces":
            one = {k: v[0] for k, v in query.items()}
            found = select_traces(
                records,
                one.get("service"),
                int(one.get("start", 0)) * 1000,
                int(one.get("end", 2**62 // 1000)) * 1000,
                int(one.get("limit", 20)),
            )
            return 200, {"data": jaeger_v1_traces(found), "total": 0, "limit": 0, "errors": None}
        return 404, {"data": None}

    return route


# --- Tempo -----------------------------------------------------------------------------------


def tempo_trace_body(records: list[SpanRecord], *, batches: bool) -> dict:
    """OTLP/JSON the way Tempo answers it: base64 ids, enum names; ``batches`` before 2.6."""
    document = otlp_json(records)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
                span["kind"] = _KIND_NAMES[span.get("kind", 0)]
                status = span.get("status") or {}
                if "code" in status:
                    status["code"] = _STATUS_NAMES[status["code"]]
    key = "batches" if batches else "resourceSpans"
    return {key: document["resourceSpans"]}


_KIND_NAMES = ["SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
               "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"]  # fmt: skip
_STATUS_NAMES = ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"]


def tempo_route(records: list[SpanRecord], *, version: str = "2.6") -> Route:
    """Tempo's search and trace-by-id APIs; ``version`` "2.0" has no /api/v2 and uses
    ``batches``."""
    modern = version != "2.0"

    def route(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path == "/api/search":
            one = {k: v[0] for k, v in query.items()}
            service = None
            if 'resource.service.name = "' in one.get("q", ""):
                service = one["q"].split('resource.service.name = "')[1].split('"')[0]
            found = select_traces(
                records,
                service,
                int(one.get("start", 0)) * 10**9,
                int(one.get("end", 2**31)) * 10**9,
                int(one.get("limit", 20)),
            )
            trace_ids = sorted({r.trace_id for r in found})
            # Tempo drops leading zeros of trace ids in search results
            traces = [{"traceID": format(t, "x"), "rootServiceName": "?"} for t in trace_ids]
            return 200, {"traces": traces, "metrics": {"inspectedTraces": len(trace_ids)}}
        if modern and path == "/api/v2/search/tags":
            return 200, {"scopes": []}
        prefix = "/api/v2/traces/" if modern else "/api/traces/"
        if path.startswith(prefix):
            trace_id = int(path.rsplit("/", 1)[1], 16)
            found = [r for r in records if r.trace_id == trace_id]
            if not found:
                return 404, {"error": "trace not found"}
            body = tempo_trace_body(found, batches=not modern)
            return 200, {"trace": body} if modern else body
        return 404, {"error": "not found"}

    return route


class OtlpReceiver:
    """An OTLP/HTTP protobuf receiver on 127.0.0.1 (a collector's front door): keeps the spans
    sent to /v1/traces, and the metrics (with their resource attributes) sent to /v1/metrics.
    Stopped by its test.

    ``delay`` seconds before each answer make it a slow collector (still healthy); a
    ``status`` other than 200 (503, say, with ``retry_after`` seconds) makes it refuse every
    request after reading it, keeping nothing.
    """

    def __init__(
        self, *, delay: float = 0.0, status: int = 200, retry_after: float | None = None
    ) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[Any] = []
        self.trace_bodies: list[bytes] = []  # each /v1/traces request as it arrived
        self.metrics: dict[str, list[Any]] = {}  # by name, one entry per export
        self.resources: list[dict[str, str]] = []  # of each metrics export
        self.requests = 0  # every POST, answered or refused
        self.in_flight = self.most_in_flight = 0  # requests being answered at once
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a collector answers

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    receiver.requests += 1
                    receiver.in_flight += 1
                    receiver.most_in_flight = max(receiver.most_in_flight, receiver.in_flight)
                try:
                    self._answer(body)
                finally:
                    with lock:
                        receiver.in_flight -= 1

            def _answer(self, body: bytes) -> None:
                if delay:
                    time.sleep(delay)
                if status != 200:
                    self.send_response(status)
                    if retry_after is not None:
                        self.send_header("Retry-After", str(retry_after))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/v1/traces":
                    receiver.trace_bodies.append(body)
                    traces = ExportTraceServiceRequest.FromString(body)
                    for resource_spans in traces.resource_spans:
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                elif self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest.FromString(body)
                    for resource_metrics in metrics.resource_metrics:
                        attributes = resource_metrics.resource.attributes
                        receiver.resources.append({a.key: a.value.string_value for a in attributes})
                        for scope_metrics in resource_metrics.scope_metrics:
                            for metric in scope_metrics.metrics:
                                receiver.metrics.setdefault(metric.name, []).append(metric)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def refused_endpoint() -> str:
    """An http://127.0.0.1 endpoint whose port refuses connections (nothing listens)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a hung
    collector, a firewall that swallows packets after the handshake)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.sock.settimeout(0.1)
        self.connections: list[socket.socket] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopping:
            try:
                connection, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections.append(connection)  # kept open, never read, never answered

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def stop(self) -> None:
        self._stopping = True
        self._thread.join(5)
        for connection in self.connections:
            connection.close()
        self.sock.close()
