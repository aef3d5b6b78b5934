"""How long encode_lines takes per span: run ``python benchmarks/otlp_json_encode.py``.

Spans come from the real SDK (7 attributes of mixed types, one in ten with an event), batched
like a BatchSpanProcessor export (512). Prints microseconds per span for encode_lines, for the
obvious dicts + json.dumps encoder (a machine-independent yardstick) and for decoding the result
back, best of several rounds.
"""

from __future__ import annotations

import json
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from agenttrace.storage import decode_line, encode_lines
from agenttrace.trajectory.records import SpanRecord, record_from_span

BATCH = 512
ROUNDS = 40


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.records: list[SpanRecord] = []

    def on_end(self, span) -> None:  # type: ignore[no-untyped-def]
        self.records.append(record_from_span(span))


def make_records(n: int) -> list[SpanRecord]:
    collect = _Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(collect)
    tracer = provider.get_tracer("agenttrace", "0.1.0")
    with tracer.start_as_current_span("rl.episode"):
        for i in range(n - 1):
            with tracer.start_as_current_span("env.step") as span:
                span.set_attribute("rl.episode.id", "ep-0001")
                span.set_attribute("rl.timestep.index", i)
                span.set_attribute("rl.reward", 0.5 * i)
                span.set_attribute("rl.terminated", False)
                span.set_attribute("rl.action", "[0.1, -0.3]")
                span.set_attribute("rl.observation.shape", (4, 84, 84))
                span.set_attribute("gen_ai.request.model", "policy-v3")
                if i % 10 == 0:
                    span.add_event("checkpoint", {"step": i})
    provider.shutdown()
    return collect.records


def naive_encode(records: list[SpanRecord]) -> str:
    """The obvious way (dicts + json.dumps), for a machine-independent comparison."""

    def value(v):  # type: ignore[no-untyped-def]
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        if isinstance(v, (tuple, list)):
            return {"arrayValue": {"values": [value(x) for x in v]}}
        return {"stringValue": str(v)}

    def attrs(mapping):  # type: ignore[no-untyped-def]
        return [{"key": k, "value": value(v)} for k, v in mapping.items()]

    spans = []
    for r in records:
        span = {
            "traceId": format(r.trace_id, "032x"),
            "spanId": format(r.span_id, "016x"),
            "name": r.name,
            "kind": 1,
            "startTimeUnixNano": str(r.start_time),
            "endTimeUnixNano": str(r.end_time),
            "attributes": attrs(r.attributes),
            "status": {},
        }
        if r.parent_span_id:
            span["parentSpanId"] = format(r.parent_span_id, "016x")
        if r.events:
            span["events"] = [
                {"timeUnixNano": str(e.time), "name": e.name, "attributes": attrs(e.attributes)}
                for e in r.events
            ]
        spans.append(span)
    resource = {"attributes": attrs(records[0].resource)}
    scope = {"name": records[0].scope_name, "version": records[0].scope_version}
    document = {
        "resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}]
    }
    return json.dumps(document, separators=(",", ":"))


def best_per_span(func, batches: list[list[SpanRecord]]) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for batch in batches:
            func(batch)
        best = min(best, time.perf_counter() - start)
    return best / sum(len(b) for b in batches) * 1e6


def main() -> None:
    records = make_records(BATCH * 8)
    batches = [records[i : i + BATCH] for i in range(0, len(records), BATCH)]
    encode_us = best_per_span(encode_lines, batches)
    naive_us = best_per_span(naive_encode, batches)
    lines = [encode_lines(b) for b in batches]
    best = float("inf")
    for _ in range(ROUNDS // 4):
        start = time.perf_counter()
        for line in lines:
            decode_line(line)
        best = min(best, time.perf_counter() - start)
    decode_us = best / len(records) * 1e6
    size = sum(len(line) + 1 for line in lines) / len(records)
    print("encode_lines: %.2f us/span" % encode_us)
    print("dicts + json.dumps, for comparison: %.2f us/span" % naive_us)
    print("decode_line:  %.2f us/span" % decode_us)
    print("line bytes:   %.0f per span" % size)


if __name__ == "__main__":
    main()
