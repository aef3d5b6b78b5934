"""ForeignSpanPolicy: agenttrace's content policy on records of other instrumentations' spans."""

from __future__ import annotations

import json

from conftest import wait_until
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.exit_line import losses
from agenttrace.processing.foreign_spans import ForeignSpanPolicy, UndecidedSpans, is_content_key
from agenttrace.trajectory.records import SpanEvent, SpanRecord


def record(scope: str, attributes: dict, events: tuple = ()) -> SpanRecord:
    return SpanRecord(1, 2, 0, "chat m", 0, 1, attributes, events, scope_name=scope)


def test_agenttraces_own_spans_pass_unchanged() -> None:
    own = record(sc.INSTRUMENTATION_SCOPE, {sc.GEN_AI_INPUT_MESSAGES: "[]", "api_key": "x"})
    assert ForeignSpanPolicy(capture_content=False).apply(own) is own


def test_a_foreign_span_with_nothing_to_change_is_the_same_record() -> None:
    span = record("openai", {sc.GEN_AI_REQUEST_MODEL: "m"}, (SpanEvent("e", 0, {"a": 1}),))
    assert ForeignSpanPolicy(capture_content=False).apply(span) is span


def test_content_and_secrets_go_the_rest_stays() -> None:
    span = record(
        "openai",
        {sc.GEN_AI_INPUT_MESSAGES: '[{"role":"user","content":"hi"}]', "token": "t", "n": 1},
        (SpanEvent("gen_ai.choice", 5, {sc.GEN_AI_EVENT_CONTENT: "{}", "index": 0}),),
    )
    cleaned = ForeignSpanPolicy(capture_content=False).apply(span)
    assert dict(cleaned.attributes) == {"n": 1}
    assert cleaned.events == (SpanEvent("gen_ai.choice", 5, {"index": 0}),)
    assert span.attributes[sc.GEN_AI_INPUT_MESSAGES]  # the original record is not changed
    kept = ForeignSpanPolicy(capture_content=True).apply(span)
    assert dict(kept.attributes) == {
        sc.GEN_AI_INPUT_MESSAGES: span.attributes[sc.GEN_AI_INPUT_MESSAGES],
        "n": 1,
    }


def test_a_raising_redact_hook_withholds_that_value_only() -> None:
    def redact(key, value):
        raise RuntimeError("hook bug")

    span = record("x", {sc.GEN_AI_OUTPUT_MESSAGES: "[1]", "n": 1})
    cleaned = ForeignSpanPolicy(redact=redact).apply(span)
    assert dict(cleaned.attributes) == {sc.GEN_AI_OUTPUT_MESSAGES: "[REDACTED]", "n": 1}


def test_redact_gets_plain_text_back_as_text() -> None:
    span = record("x", {sc.GEN_AI_TOOL_CALL_RESULT: "not json: Paris"})
    cleaned = ForeignSpanPolicy(redact=lambda k, v: v.replace("Paris", "?")).apply(span)
    assert cleaned.attributes[sc.GEN_AI_TOOL_CALL_RESULT] == "not json: ?"


def test_content_keys() -> None:
    assert is_content_key("gen_ai.prompt.3.content")
    assert is_content_key("gen_ai.completion.0.tool_calls.1.arguments")
    assert not is_content_key("gen_ai.completion.0.finish_reason")
    assert not is_content_key("gen_ai.prompt.0.role")
    assert not is_content_key(sc.GEN_AI_REQUEST_MODEL)


def span(trace: int, span_id: int, parent: int = 0, *, remote: bool = False) -> SpanRecord:
    return SpanRecord(trace, span_id, parent, f"s{span_id}", 1, 2, {}, parent_is_remote=remote)


def test_undecided_spans_are_claimed_by_the_span_above_them_in_their_trace() -> None:
    """Held spans go to the local root (or nested span) they are below, through held
    parents; other traces and other local roots of the same trace keep theirs."""
    held = UndecidedSpans()
    other_root = [span(1, 8, 7, remote=True), span(1, 9, 8)]  # below a remote parent
    other_trace = [span(5, 3, 2)]
    for record in (span(1, 4, 3), *other_root, *other_trace):  # 1 > 2 > 3 > 4
        assert held.hold(record) == []
    assert len(held) == 4
    assert held.claim(1, 3) == [span(1, 4, 3)]  # a nested episode takes what is below it
    assert held.hold(span(1, 3, 2)) == [] and held.hold(span(1, 2, 1)) == []
    assert held.claim(1, 1) == [span(1, 3, 2), span(1, 2, 1)]  # in the order they ended
    assert held.claim(1, 1) == []
    assert held.claim(1, 8) == [span(1, 9, 8)]
    assert len(held) == 2  # the remote-parented span 8 and the other trace's
    assert sorted(r.span_id for r in held.drain()) == [3, 8] and len(held) == 0


def test_undecided_spans_are_bounded_and_given_up_when_idle() -> None:
    held = UndecidedSpans(max_spans=3)
    assert held.hold(span(1, 2, 1)) == [] and held.hold(span(1, 3, 1)) == []
    assert held.hold(span(2, 2, 1)) == []
    given_up = held.hold(span(3, 2, 1))  # over the bound: the oldest trace goes
    assert [(r.trace_id, r.span_id) for r in given_up] == [(1, 2), (1, 3)]
    assert len(held) == 2 and held.claim(1, 1) == []
    assert held.expire(idle_timeout=3600) == []
    assert sorted(r.trace_id for r in held.expire(idle_timeout=0)) == [2, 3]
    assert len(held) == 0


def test_held_spans_of_no_episode_go_to_the_span_file_counted_only_when_given_up(
    tmp_path,
) -> None:
    """Through the live processor: spans held under a root that ends without being an
    episode go to the span file, uncounted; spans whose root never ends are given up after
    idle_timeout, counted in stats() and the exit line, and kept in the span file too."""
    provider = TracerProvider()
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path / "runs"),
        spans=["file"],
        sinks=["jsonl"],
        conventions="openinference",
        idle_timeout=0.5,
        exit_report=False,
    )
    tracer = provider.get_tracer("other.tracer")
    try:
        with tracer.start_as_current_span("plain root"):  # ends as no episode
            for n in range(3):
                with tracer.start_as_current_span(f"child {n}"):
                    pass
        never_ends = tracer.start_span("root that never ends")
        with trace.use_span(never_ends, end_on_exit=False):
            for n in range(2):
                with tracer.start_as_current_span(f"orphan {n}"):
                    pass
        assert wait_until(lambda: runtime.stats().get("spans_undecided_given_up") == 2)
        assert losses(runtime.stats()) == ["2 spans lost"]
    finally:
        runtime.shutdown()
        provider.shutdown()
    (spans_file,) = (tmp_path / "runs").glob("*/spans.jsonl")
    names = {
        span["name"]
        for line in spans_file.read_text().splitlines()
        for resource in json.loads(line).get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    }
    assert {"plain root", "child 0", "child 1", "child 2", "orphan 0", "orphan 1"} <= names
