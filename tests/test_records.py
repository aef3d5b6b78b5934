"""Span records from live SDK spans: the fast path reads exactly what the public API shows."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from agenttrace import semconv as sc
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


# --- env.vector_step -------------------------------------------------------------------------


def _vector_record(links: tuple = (), **attributes) -> records.SpanRecord:
    base = {
        sc.VECTOR_EPISODE_IDS: ("ep-a", "ep-b", "ep-c"),
        sc.VECTOR_STEP_INDICES: (4, 0, 7),
        sc.VECTOR_ACTIONS: ("1", "0", "1"),
        sc.VECTOR_REWARDS: (1.0, 0.5, -2.0),
        sc.VECTOR_TERMINATED: (False, True, False),
        sc.VECTOR_TRUNCATED: (False, False, True),
    }
    base.update(attributes)
    return records.SpanRecord(
        trace_id=0xABC,
        span_id=0x1234,
        parent_span_id=0x99,
        name=sc.ENV_VECTOR_STEP,
        start_time=10,
        end_time=20,
        attributes=base,
        scope_name=sc.INSTRUMENTATION_SCOPE,
        links=links,
    )


def test_a_vector_step_splits_into_one_env_step_per_entry() -> None:
    links = tuple(records.SpanLink(0xE0 + i, 0x50 + i, {}) for i in range(3))
    parts = records.split_vector_step(_vector_record(links))
    assert [p.name for p in parts] == [sc.ENV_STEP] * 3
    assert [p.attributes[sc.EPISODE_ID] for p in parts] == ["ep-a", "ep-b", "ep-c"]
    assert [p.attributes[sc.TIMESTEP_INDEX] for p in parts] == [4, 0, 7]
    assert [p.attributes[sc.ACTION] for p in parts] == ["1", "0", "1"]
    assert [p.attributes[sc.REWARD] for p in parts] == [1.0, 0.5, -2.0]
    assert [p.attributes[sc.DONE] for p in parts] == [False, True, True]
    # Each is a child of its episode's span (the link), in that episode's trace.
    assert [(p.trace_id, p.parent_span_id) for p in parts] == [
        (0xE0, 0x50),
        (0xE1, 0x51),
        (0xE2, 0x52),
    ]
    ids = [p.span_id for p in parts]
    assert len(set(ids)) == 3 and 0x1234 not in ids and all(0 < i < 2**64 for i in ids)
    assert ids == [p.span_id for p in records.split_vector_step(_vector_record(links))]
    assert not any(p.sampled for p in parts)  # never written or exported again
    assert all((p.start_time, p.end_time, p.links) == (10, 20, ()) for p in parts)


def test_a_vector_step_whose_links_were_not_kept_uses_its_own_place() -> None:
    parts = records.split_vector_step(_vector_record())
    assert {(p.trace_id, p.parent_span_id) for p in parts} == {(0xABC, 0x99)}


def test_a_malformed_vector_entry_costs_only_itself() -> None:
    record = _vector_record(
        **{
            sc.VECTOR_EPISODE_IDS: ("ep-a", 5, "ep-c", "ep-d"),
            sc.VECTOR_STEP_INDICES: (4, 0, True, 2),
            sc.VECTOR_ACTIONS: ("1",),  # shorter: the others have no action
            sc.VECTOR_REWARDS: "not a list",
        }
    )
    parts = records.split_vector_step(record)
    assert [(p.attributes[sc.EPISODE_ID], p.attributes[sc.TIMESTEP_INDEX]) for p in parts] == [
        ("ep-a", 4),
        ("ep-d", 2),
    ]
    assert parts[0].attributes[sc.ACTION] == "1" and sc.ACTION not in parts[1].attributes
    assert all(sc.REWARD not in p.attributes for p in parts)
    assert records.split_vector_step(_vector_record(**{sc.VECTOR_STEP_INDICES: None})) == []
    plain = _vector_record()._replace(name=sc.ENV_STEP)
    assert list(records.split_vector_steps([plain])) == [plain]
