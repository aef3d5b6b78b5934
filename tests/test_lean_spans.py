"""The lean span path (agenttrace.instrument.lean_spans) gives every processor on the provider
the spans the SDK's own path gives, and steps aside for any configuration it does not copy
exactly (a user's sampler, attribute limits)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import agenttrace as at
from agenttrace.instrument.lean_spans import lean_starter
from agenttrace.instrument.scope import _lean_starter


def play(tmp_path, provider: TracerProvider, **settings: Any) -> list[Any]:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(tracer_provider=provider, out=str(tmp_path), sinks=["jsonl"], **settings)
    with at.episode(task_id="t", attributes={"team": "rl", "tags": ["a", "b"]}):
        with at.env_reset() as reset:
            reset.record(observation=[0.0, 1.0], info={"k": 1})
        for t in range(3):
            with at.timestep():
                with at.agent_act() as act:
                    act.record(observation=[t], action=t % 2)
                with at.env_step() as step:
                    step.record(observation=[t + 1], reward=0.5, terminated=t == 2)
    runtime.shutdown()
    return list(exporter.get_finished_spans())


def shape(spans: list[Any]) -> list[tuple]:
    """What a processor sees, ids and times aside: names, kinds, attributes (episode ids
    replaced), parent names, sampled flags."""
    by_id = {span.context.span_id: span for span in spans}
    out = []
    for span in spans:
        attributes = {
            k: v
            for k, v in span.attributes.items()
            if k not in ("rl.episode.id", "gen_ai.conversation.id")
        }
        parent = by_id.get(span.parent.span_id).name if span.parent else None
        out.append(
            (
                span.name,
                span.kind,
                attributes,
                parent,
                span.context.trace_flags,
                span.status.status_code,
            )
        )
    return out


def test_processors_get_the_same_spans_either_way(tmp_path) -> None:
    lean = play(tmp_path / "lean", TracerProvider())
    sdk = play(tmp_path / "sdk", TracerProvider(), lean_spans=False)
    assert shape(lean) == shape(sdk)
    assert len(lean) == 1 + 1 + 3 * 3
    assert all(type(a.attributes["tags"]) is tuple for a in lean if "tags" in a.attributes)
    # One trace, every span a sampled, random-trace-id span of the episode's trace.
    assert len({span.context.trace_id for span in lean}) == 1
    assert len({span.context.span_id for span in lean}) == len(lean)


def test_the_default_provider_takes_the_lean_path_and_others_do_not(tmp_path) -> None:
    runtime = at.configure(sinks=["jsonl"], out=str(tmp_path))
    starter = _lean_starter(runtime)
    assert starter is not None
    # On this SDK the spans are built without Span.__init__ (its fields checked equal once).
    assert starter.__self__._new_span == starter.__self__._construct
    at.shutdown()
    assert lean_starter(TracerProvider(sampler=TraceIdRatioBased(0.5)).get_tracer("x")) is None
    limited = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=8))
    assert lean_starter(limited.get_tracer("x")) is None
    assert lean_starter(trace.NoOpTracerProvider().get_tracer("x")) is None


def test_a_users_sampler_and_limits_are_respected(tmp_path) -> None:
    assert play(tmp_path / "off", TracerProvider(sampler=ALWAYS_OFF)) == []
    limited = play(
        tmp_path / "cut", TracerProvider(span_limits=SpanLimits(max_span_attribute_length=8))
    )
    steps = [s for s in limited if s.name == "env.step"]
    assert steps and all(len(s.attributes["rl.observation"]) <= 8 for s in steps)


def test_a_parent_that_is_not_sampled_is_followed(tmp_path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(tracer_provider=provider, out=str(tmp_path), sinks=["jsonl"])
    assert _lean_starter(runtime) is not None
    unsampled = SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(unsampled)))
    try:
        with at.episode() as episode:
            with at.env_step() as step:
                step.record(reward=1.0)
    finally:
        otel_context.detach(token)
    runtime.shutdown()
    assert exporter.get_finished_spans() == ()
    assert not episode.span.is_recording()


@pytest.mark.parametrize("lean", [True, False])
def test_attributes_after_the_end_are_ignored_as_the_sdk_does(tmp_path, lean) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(
        tracer_provider=provider, out=str(tmp_path), sinks=["jsonl"], lean_spans=lean
    )
    with at.episode():
        step = at.env_step()
        with step:
            step.record(reward=1.0)
        step.record(reward=2.0)  # after its end: not recorded
    runtime.shutdown()
    (recorded,) = [s for s in exporter.get_finished_spans() if s.name == "env.step"]
    assert recorded.attributes["rl.reward"] == 1.0
