"""Span records from live SDK spans: the fast path reads exactly what the public API shows."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from agenttrace.trajectory import records


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def finished_spans() -> list[ReadableSpan]:
    exporter = _Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "records-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("records", "1.2.3")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        with tracer.start_as_current_span(
            "child",
            kind=SpanKind.CLIENT,
            attributes={"rl.reward": 1.5, "tags": ("a", "b")},
            links=[Link(parent.get_span_context(), {"why": "test"})],
        ) as child:
            child.add_event("something", {"n": 3})
            child.set_status(Status(StatusCode.ERROR, "went wrong"))
    return exporter.spans


def test_the_sdk_fast_path_matches_the_public_api() -> None:
    assert records._SDK_LAYOUT_OK
    spans = finished_spans()
    for span in spans:
        fast = records._record_from_sdk_span(span)
        public = records._record_from_public_api(span)
        assert fast == public
        assert type(fast) is records.SpanRecord
    child = records.record_from_span(spans[0])
    assert child.name == "child"
    assert (child.kind, child.status_code, child.status_message) == (
        "CLIENT",
        "ERROR",
        "went wrong",
    )
    assert child.parent_span_id == spans[1].context.span_id
    assert child.events[0].name == "something" and child.events[0].attributes == {"n": 3}
    assert child.links[0].span_id == spans[1].context.span_id
    assert child.resource["service.name"] == "records-test"
    assert (child.scope_name, child.scope_version, child.sampled) == ("records", "1.2.3", True)


def test_spans_of_another_class_use_the_public_api() -> None:
    span = finished_spans()[0]

    class Wrapped:  # public properties only, like a span from another SDK
        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            return getattr(span, name)

    assert records.record_from_span(Wrapped()) == records._record_from_public_api(span)
