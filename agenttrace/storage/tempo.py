"""Tempo: span records of the traces a TraceQL search finds.

``GET /api/search?q=<TraceQL>&start=&end=&limit=`` answers ``{"traces": [{"traceID": hex,
...}]}`` (Tempo may drop the ids' leading zeros); each trace is then fetched with
``GET /api/v2/traces/{id}`` (``{"trace": {...}}``), falling back to ``/api/traces/{id}`` on
Tempo before 2.1. Trace bodies are OTLP/JSON with base64 ids and enum names, under
``batches`` before Tempo 2.6 and ``resourceSpans`` after; the OTLP/JSON reader takes both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from agenttrace import semconv as sc
from agenttrace.storage.errors import ErrorHandler, SpanFormatError, warn
from agenttrace.storage.http import JsonClient
from agenttrace.storage.otlp_json_decode import decode_document
from agenttrace.trajectory.records import SpanRecord


def episode_query(service: str | None = None) -> str:
    """The default TraceQL: traces with an agenttrace episode span (of ``service``)."""
    conditions = [f"name = {json.dumps(sc.EPISODE)}"]
    if service:
        conditions.append(f"resource.service.name = {json.dumps(service)}")
    return "{ " + " && ".join(conditions) + " }"


class TempoReader:
    """Span records of the traces a TraceQL query finds (or of given trace ids)."""

    def __init__(
        self,
        base_url: str,
        *,
        query: str | None = None,
        service: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        trace_ids: list[str] | None = None,
        limit: int = 1000,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        on_error: ErrorHandler | None = None,
    ) -> None:
        self.client = JsonClient(base_url, headers=headers, token=token, timeout=timeout)
        self.query = query or episode_query(service)
        self.start, self.end = start, end or datetime.now(timezone.utc)
        self.trace_ids = list(trace_ids or [])
        self.limit = limit
        self.report = on_error or warn
        #: Traces the search returned; equal to ``limit`` means more may exist.
        self.traces_found = 0
        self._v2 = True

    def search(self) -> list[str]:
        """Trace ids (32 hex digits) the query finds."""
        params = {
            "q": self.query,
            "start": int(self.start.timestamp()) if self.start else None,
            "end": int(self.end.timestamp()) + 1,
            "limit": self.limit,
        }
        answer = self.client.get("/api/search", params) or {}
        ids = []
        for trace in answer.get("traces") or ():
            trace_id = trace.get("traceID") if isinstance(trace, dict) else None
            if isinstance(trace_id, str) and trace_id:
                ids.append(trace_id.rjust(32, "0"))
            else:
                self.report(SpanFormatError(f"search result without a traceID: {trace!r}"[:200]))
        self.traces_found = len(ids)
        return ids

    def records(self) -> Iterator[SpanRecord]:
        for trace_id in self.trace_ids or self.search():
            yield from self.trace(trace_id)

    def trace(self, trace_id: str) -> list[SpanRecord]:
        answer: Any = None
        if self._v2:
            answer = self.client.get(f"/api/v2/traces/{trace_id}", missing_ok=True)
            if answer is None and not self._v2_exists():
                self._v2 = False
        if not self._v2:
            answer = self.client.get(f"/api/traces/{trace_id}", missing_ok=True)
        if not answer:
            return []
        body = answer.get("trace", answer) if isinstance(answer, dict) else answer
        if not body:  # a trace found by search but already gone (retention)
            return []
        return decode_document(body, self.report)

    def _v2_exists(self) -> bool:
        """Whether a 404 from /api/v2 means "no such trace" rather than "no such API"."""
        try:
            self.client.get("/api/v2/search/tags", missing_ok=False)
        except Exception:
            return False
        return True
