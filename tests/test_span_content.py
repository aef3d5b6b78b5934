"""The export content policy on real SDK spans, and the offline rebuild that undoes it.

Spans leave through ContentPolicyExporter around an InMemorySpanExporter; their records are
written as OTLP/JSON, read back, restored (blobs resolved, losses flagged) and assembled. The
live trajectories (written by the trajectory processor, which always sees full content) are
the reference.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from backend_servers import OtlpReceiver
from conftest import read_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

import agenttrace as at
from agenttrace import config
from agenttrace import semconv as sc
from agenttrace.processing import ContentPolicyExporter, span_content
from agenttrace.processing.span_content import truncate_json_text
from agenttrace.storage import encode_lines, read_otlp_json
from agenttrace.storage.blobs import LocalBlobStore, parse_blob_reference
from agenttrace.storage.content import REASON_REMOVED, restore_content
from agenttrace.trajectory.records import record_from_span

LIMIT = 300
BIG_TEXT = "the quick brown fox, " * 40  # 840 bytes as JSON


def _episodes() -> None:
    """Two episodes with content below and above LIMIT in every content attribute kind."""
    for seed in range(2):
        rng = np.random.default_rng(seed)
        with at.episode(task_id=f"t{seed}", env_name="toy"):
            with at.env_reset() as reset:
                reset.record(observation=rng.normal(size=60), info={"seed": seed})  # big, small
            for i in range(3):
                with at.timestep():
                    with at.agent_act() as act:
                        with at.llm_call(model="m", provider="local") as llm:
                            llm.record(
                                input_messages=[
                                    {"role": "system", "content": BIG_TEXT},
                                    {"role": "user", "content": f"step {i}"},
                                ],
                                output_messages=[{"role": "assistant", "content": "go"}],
                            )
                        act.record(observation=[i], action={"move": i, "why": BIG_TEXT[: i * 150]})
                    with at.env_step() as step:
                        step.record(
                            observation=rng.integers(0, 9, size=(8, 8)),
                            reward=float(i),
                            terminated=i == 2,
                            info={"legal": list(range(i * 40)), 3: "int key", "t": (1, 2)},
                        )


def _run(tmp_path: Path, policy: str, store=None, max_bytes: int = LIMIT):
    """Run the episodes with agenttrace and a policy exporter on one provider.

    Returns (live trajectories, exported spans, originals as the other exporter saw them).
    """
    provider = TracerProvider()
    exported = InMemorySpanExporter()
    originals = InMemorySpanExporter()
    provider.add_span_processor(
        SimpleSpanProcessor(
            ContentPolicyExporter(exported, policy, max_bytes=max_bytes, blob_store=store)
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(originals))
    runtime = at.configure(
        out=str(tmp_path),
        run_name=policy,
        sinks=["jsonl"],
        spans=["file"],
        tracer_provider=provider,
    )
    _episodes()
    result = read_run(runtime)
    assert result.offline == result.live  # the run folder's spans.jsonl stays lossless
    return result.live, exported.get_finished_spans(), originals.get_finished_spans()


def _through_otlp_json(tmp_path: Path, spans, store=None) -> list:
    """Exported spans -> records -> an OTLP/JSON file -> records -> restore_content."""
    path = tmp_path / "exported.jsonl"
    path.write_text(encode_lines(record_from_span(span) for span in spans) + "\n")
    return list(restore_content(read_otlp_json(path), store))


def _content_items(span):
    return {
        key: value
        for key, value in span.attributes.items()
        if span_content.is_export_content_key(key)
    }


def test_full_policy_passes_the_same_span_objects_and_rebuilds_equal(tmp_path) -> None:
    live, exported, originals = _run(tmp_path, "full")
    assert [id(s) for s in exported] == [id(s) for s in originals]
    records = _through_otlp_json(tmp_path, exported)
    assert all(not r.lossy for r in records)
    assert at.assemble(records) == live


def test_ref_policy_exports_references_and_export_resolves_them(tmp_path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    live, exported, originals = _run(tmp_path, "ref", store)
    by_id = {s.context.span_id: s for s in originals}
    referenced = 0
    for span in exported:
        original = by_id[span.context.span_id]
        keys = span.attributes.get(sc.CONTENT_BLOBS, ())
        assert (span is original) == (not keys)
        for key, value in _content_items(span).items():
            full = original.attributes[key]
            if len(full.encode()) > LIMIT:
                assert key in keys
                ref, size = parse_blob_reference(value)
                assert size == len(full.encode()) and store.get(ref) == full.encode()
                referenced += 1
            else:
                assert value == full and key not in keys
    assert referenced >= 10
    # originals (what the trajectory processor shares) are untouched
    assert all(sc.CONTENT_BLOBS not in s.attributes for s in originals)
    records = _through_otlp_json(tmp_path, exported, store)
    assert all(not r.lossy and sc.CONTENT_BLOBS not in r.attributes for r in records)
    assert at.assemble(records) == live


def test_ref_policy_without_a_store_or_with_a_missing_blob_flags_not_fails(tmp_path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    live, exported, _ = _run(tmp_path, "ref", store)
    unresolved = _through_otlp_json(tmp_path, exported, None)
    flagged = {(r.span_id, key): reason for r in unresolved for key, reason in r.lossy.items()}
    assert flagged and all("no blob store given" in reason for reason in flagged.values())
    for record in unresolved:
        for key in record.lossy:
            assert parse_blob_reference(record.attributes[key]) is not None  # left in place
    assert len(at.assemble(unresolved)) == len(live)

    # delete one blob: only the attributes that used it are flagged, the rest resolve
    victim = next(p for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    victim_ref = "sha256:" + victim.parent.name + victim.name
    victim.unlink()
    records = _through_otlp_json(tmp_path, exported, LocalBlobStore(tmp_path / "blobs"))
    reasons = [reason for r in records for reason in r.lossy.values()]
    assert reasons and all(
        reason == f"blob {victim_ref} missing from {tmp_path / 'blobs'}" for reason in reasons
    )
    resolved = [r for r in records if not r.lossy]
    assert any(parse_blob_reference(v) is None for r in resolved for v in r.attributes.values())
    assert len(at.assemble(records)) == len(live)


def test_truncate_policy_cuts_to_valid_json_and_export_flags_the_keys(tmp_path) -> None:
    live, exported, originals = _run(tmp_path, "truncate")
    by_id = {s.context.span_id: s for s in originals}
    cut_keys = 0
    for span in exported:
        original = by_id[span.context.span_id]
        marked = set(span.attributes.get(sc.CONTENT_TRUNCATED, ()))
        over = {
            key for key, value in _content_items(original).items() if len(value.encode()) > LIMIT
        }
        assert marked == over
        for key, value in _content_items(span).items():
            assert len(value.encode()) <= LIMIT
            json.loads(value)  # still valid JSON
            if key not in over:
                assert value == original.attributes[key]
        cut_keys += len(over)
    assert cut_keys >= 10
    records = _through_otlp_json(tmp_path, exported)
    flagged = 0
    for record in records:
        assert sc.CONTENT_TRUNCATED not in record.attributes
        for key, reason in record.lossy.items():
            size = len(record.attributes[key].encode())
            assert reason == f"truncated to {size} bytes by the export content policy"
            flagged += 1
    assert flagged == cut_keys
    rebuilt = at.assemble(records)
    assert [t.episode_id for t in rebuilt] == [t.episode_id for t in live]
    # what was not cut is rebuilt exactly: rewards, termination, the small observations
    for old, new in zip(live, rebuilt, strict=True):
        assert [s.reward for s in new.steps] == [s.reward for s in old.steps]
        assert [s.terminated for s in new.steps] == [s.terminated for s in old.steps]
        assert [s.observation for s in new.steps] == [s.observation for s in old.steps]


def test_none_policy_removes_content_and_export_flags_it(tmp_path) -> None:
    live, exported, originals = _run(tmp_path, "none")
    by_id = {s.context.span_id: s for s in originals}
    for span in exported:
        original = by_id[span.context.span_id]
        assert _content_items(span) == {}
        removed = span.attributes.get(sc.CONTENT_REMOVED, ())
        assert set(removed) == set(_content_items(original))
        assert _content_items(original) or sc.CONTENT_REMOVED not in span.attributes
    records = _through_otlp_json(tmp_path, exported)
    lossy = {key for r in records for key in r.lossy}
    assert lossy == {
        sc.OBSERVATION,
        sc.ACTION,
        sc.INFO,
        sc.GEN_AI_INPUT_MESSAGES,
        sc.GEN_AI_OUTPUT_MESSAGES,
    }
    assert all(v == REASON_REMOVED for r in records for v in r.lossy.values())
    rebuilt = at.assemble(records)
    assert [[s.reward for s in t.steps] for t in rebuilt] == [
        [s.reward for s in t.steps] for t in live
    ]


class _BrokenStore(LocalBlobStore):
    def _write(self, digest: str, data: bytes) -> None:
        raise OSError("bucket unreachable")


def test_a_failing_blob_store_falls_back_to_truncation_and_logs_once(tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agenttrace")
    exporter = InMemorySpanExporter()
    policy = ContentPolicyExporter(
        exporter, "ref", max_bytes=LIMIT, blob_store=_BrokenStore(tmp_path)
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(policy))
    tracer = provider.get_tracer("plain")
    for i in range(3):
        with tracer.start_as_current_span("env.step") as span:
            span.set_attribute(sc.OBSERVATION, json.dumps([i] * 200))
            span.set_attribute(sc.REWARD, 1.0)
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    for span in spans:
        assert span.attributes[sc.CONTENT_TRUNCATED] == (sc.OBSERVATION,)
        assert sc.CONTENT_BLOBS not in span.attributes
        assert len(json.loads(span.attributes[sc.OBSERVATION])) < 200
        assert span.attributes[sc.REWARD] == 1.0
    assert policy.blob_failures == 3 and policy.truncated == 3
    warnings = [r for r in caplog.records if "blob store" in r.getMessage()]
    assert len(warnings) <= 1  # once per process (another test may have logged it first)


def test_an_internal_error_removes_the_content_instead_of_failing_the_export(
    tmp_path, monkeypatch
) -> None:
    def broken(text, max_bytes):
        raise RuntimeError("bug")

    monkeypatch.setattr(span_content, "truncate_json_text", broken)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ContentPolicyExporter(exporter, "truncate")))
    with provider.get_tracer("plain").start_as_current_span("s") as span:
        span.set_attribute(sc.ACTION, json.dumps("x" * 5000))
        span.set_attribute("other", 1)
    [out] = exporter.get_finished_spans()
    assert sc.ACTION not in out.attributes
    assert out.attributes[sc.CONTENT_REMOVED] == (sc.ACTION,)
    assert out.attributes["other"] == 1


def test_spans_without_large_content_pass_as_the_same_object() -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("plain").start_as_current_span("s") as span:
        span.set_attribute(sc.OBSERVATION, "[1,2,3]")
        span.set_attribute(sc.REWARD, 0.5)
    [finished] = exporter.get_finished_spans()
    for policy in ("full", "truncate"):
        assert ContentPolicyExporter(exporter, policy).apply(finished) is finished


def test_foreign_genai_spans_and_events_follow_the_policy(tmp_path) -> None:
    provider = TracerProvider(span_limits=SpanLimits(max_attributes=6))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(
        SimpleSpanProcessor(ContentPolicyExporter(exporter, "truncate", max_bytes=128))
    )
    messages = json.dumps([{"role": "user", "content": "hello " * 100}])
    with provider.get_tracer("openai-like").start_as_current_span("chat gpt") as span:
        for i in range(4):  # over the attribute limit (the oldest go): the count must survive
            span.set_attribute(f"extra.{i}", i)
        span.set_attribute(sc.GEN_AI_OPERATION_NAME, "chat")
        span.set_attribute(sc.GEN_AI_INPUT_MESSAGES, messages)
        span.set_attribute("gen_ai.prompt.0.content", "plain text, not JSON " * 20)
        span.set_attribute("gen_ai.prompt.0.role", "user")
        span.add_event(sc.GEN_AI_CONTENT_PROMPT_EVENT, {sc.GEN_AI_PROMPT: messages})
    [out] = exporter.get_finished_spans()
    assert out.dropped_attributes == 2
    assert set(out.attributes[sc.CONTENT_TRUNCATED]) == {
        sc.GEN_AI_INPUT_MESSAGES,
        "gen_ai.prompt.0.content",
    }
    assert json.loads(out.attributes[sc.GEN_AI_INPUT_MESSAGES])[0]["role"] == "user"
    assert out.attributes["gen_ai.prompt.0.content"].endswith("…")
    assert out.attributes["gen_ai.prompt.0.role"] == "user"
    [event] = out.events
    assert event.attributes[sc.CONTENT_TRUNCATED] == (sc.GEN_AI_PROMPT,)
    assert len(event.attributes[sc.GEN_AI_PROMPT].encode()) <= 128
    # the rebuild flags the event's content too, and drops every marker
    [record] = _through_otlp_json(tmp_path, [out])
    assert set(record.lossy) == {
        sc.GEN_AI_INPUT_MESSAGES,
        "gen_ai.prompt.0.content",
        sc.GEN_AI_PROMPT,
    }
    assert "in event 'gen_ai.content.prompt'" in record.lossy[sc.GEN_AI_PROMPT]
    assert sc.CONTENT_TRUNCATED not in record.events[0].attributes


def test_restore_passes_unmarked_records_through_unchanged(tmp_path) -> None:
    _, exported, _ = _run(tmp_path, "full")
    records = [record_from_span(span) for span in exported]
    assert all(a is b for a, b in zip(restore_content(records), records, strict=True))


def test_markers_read_back_from_jaeger_v1_style_strings() -> None:
    record = record_from_span(
        ReadableSpan(
            "s",
            SpanContext(1, 2, False, TraceFlags(1)),
            attributes={
                sc.OBSERVATION: "[1]",
                sc.CONTENT_TRUNCATED: json.dumps([sc.OBSERVATION]),
                sc.CONTENT_REMOVED: sc.ACTION,
            },
        )
    )
    [restored] = restore_content([record])
    assert restored.attributes == {sc.OBSERVATION: "[1]"}
    assert restored.lossy == {
        sc.OBSERVATION: "truncated to 3 bytes by the export content policy",
        sc.ACTION: REASON_REMOVED,
    }


def test_exporter_arguments_are_checked(tmp_path) -> None:
    exporter = InMemorySpanExporter()
    with pytest.raises(ValueError, match="unknown content policy"):
        ContentPolicyExporter(exporter, "some")
    with pytest.raises(ValueError, match="blob_store"):
        ContentPolicyExporter(exporter, "ref")
    with pytest.raises(ValueError, match="at least 64"):
        ContentPolicyExporter(exporter, "truncate", max_bytes=10)
    assert config.EXPORT_MAX_BYTES_DEFAULT == span_content.DEFAULT_MAX_BYTES
    assert config.EXPORT_MAX_BYTES_MIN == span_content.MIN_MAX_BYTES
    assert set(config.EXPORT_CONTENT_CHOICES) == set(span_content.POLICIES)


# --- settings and the pipeline -----------------------------------------------------------------


def test_settings_default_to_truncate_and_ref_needs_a_store(tmp_path) -> None:
    settings = config.resolve(environ={})
    assert (settings.export_content, settings.export_max_bytes) == ("truncate", 2000)
    assert settings.blob_store is None
    env = {
        "AGENTTRACE_EXPORT_CONTENT": "ref",
        "AGENTTRACE_BLOB_STORE": str(tmp_path),
        "AGENTTRACE_EXPORT_MAX_BYTES": "4096",
    }
    settings = config.resolve(environ=env)
    assert (settings.export_content, settings.export_max_bytes) == ("ref", 4096)
    with pytest.raises(config.ConfigError, match="AGENTTRACE_BLOB_STORE"):
        config.resolve(environ={"AGENTTRACE_EXPORT_CONTENT": "ref"})
    with pytest.raises(config.ConfigError, match="AGENTTRACE_EXPORT_CONTENT"):
        config.resolve(environ={"AGENTTRACE_EXPORT_CONTENT": "half"})
    with pytest.raises(config.ConfigError, match="at least 64"):
        config.resolve(environ={"AGENTTRACE_EXPORT_MAX_BYTES": "10"})
    with pytest.raises(config.ConfigError, match="export_max_bytes"):
        config.resolve(environ={}, export_max_bytes=0)


def _send_one_big_step(runtime: at.AgentTrace, text: str) -> None:
    with at.episode(), at.timestep(), at.env_step() as step:
        step.record(observation={"text": text}, reward=1.0)
    runtime.shutdown()


def _received_observations(receiver: OtlpReceiver) -> list[str]:
    return [
        attribute.value.string_value
        for span in receiver.spans
        for attribute in span.attributes
        if attribute.key == sc.OBSERVATION
    ]


def test_pipeline_applies_the_policy_to_the_backend_only(tmp_path, monkeypatch) -> None:
    receiver = OtlpReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        big = "x" * 5_000
        runtime = at.configure(out=str(tmp_path), spans=["file", "otlp"], export_max_bytes=512)
        _send_one_big_step(runtime, big)
        [sent] = _received_observations(receiver)
        assert len(sent.encode()) <= 512 and sent != json.dumps({"text": big})
        in_file = [
            r.attributes[sc.OBSERVATION]
            for r in read_otlp_json(runtime.span_paths)
            if sc.OBSERVATION in r.attributes
        ]
        assert [json.loads(value)["text"] for value in in_file] == [big]  # the file is whole
        assert runtime.stats()["export_content_truncated"] == 1
        receiver.spans.clear()
        runtime = at.configure(out=str(tmp_path), spans=["otlp"], export_content="full")
        _send_one_big_step(runtime, big)
        assert [json.loads(v)["text"] for v in _received_observations(receiver)] == [big]
        receiver.spans.clear()
        store = tmp_path / "blobs"
        runtime = at.configure(
            out=str(tmp_path), spans=["otlp"], export_content="ref", blob_store=str(store)
        )
        _send_one_big_step(runtime, big)
        [sent] = _received_observations(receiver)
        reference = parse_blob_reference(sent)
        assert reference is not None
        assert json.loads(LocalBlobStore(store).get(reference[0]))["text"] == big
        stats = runtime.stats()
        assert stats["export_content_blobs"] == 1 and stats["export_content_blob_failures"] == 0
    finally:
        receiver.stop()


def test_pipeline_reports_a_blob_store_it_cannot_open(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(config.ConfigError, match="AGENTTRACE_BLOB_STORE"):
        at.configure(
            out=str(tmp_path),
            spans=["otlp"],
            export_content="ref",
            blob_store="nosuchprotocol-xyz://bucket",
        )


# --- truncation as a property --------------------------------------------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80),
    lambda children: (
        st.lists(children, max_size=12)
        | st.dictionaries(st.text(max_size=12), children, max_size=8)
    ),
    max_leaves=60,
)
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _is_prefix(cut, whole) -> bool:
    """Whether ``cut`` is what truncation may make of ``whole``: equal, a stand-in, a cut
    string, or a container keeping a prefix of items whose last may itself be cut."""
    if cut == whole and type(cut) is type(whole):
        return True
    if isinstance(cut, dict) and set(cut) == {"$truncated"}:
        return True
    if isinstance(cut, str) and isinstance(whole, str):
        return cut.endswith("…") and whole.startswith(cut[:-1])
    if isinstance(cut, list) and isinstance(whole, list):
        if len(cut) > len(whole):
            return False
        if not cut:
            return True
        return cut[:-1] == whole[: len(cut) - 1] and _is_prefix(cut[-1], whole[len(cut) - 1])
    if isinstance(cut, dict) and isinstance(whole, dict):
        keys, whole_keys = list(cut), list(whole)
        if keys != whole_keys[: len(keys)]:
            return False
        return all(cut[k] == whole[k] for k in keys[:-1]) and (
            not keys or _is_prefix(cut[keys[-1]], whole[keys[-1]])
        )
    return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json_values, max_bytes=st.integers(min_value=64, max_value=700))
def test_truncated_json_parses_fits_and_keeps_a_prefix(value, max_bytes) -> None:
    text = _dump(value)
    out, cut = truncate_json_text(text, max_bytes)
    assert cut == (_size(text) > max_bytes)
    assert _size(out) <= max_bytes
    decoded = json.loads(out)
    if not cut:
        assert out == text
    else:
        assert _is_prefix(decoded, value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.dictionaries(
        st.sampled_from(
            [
                sc.OBSERVATION,
                sc.ACTION,
                sc.INFO,
                sc.GEN_AI_INPUT_MESSAGES,
                "gen_ai.tool.call.result",
            ]
        ),
        _json_values,
        min_size=1,
    ),
    max_bytes=st.integers(min_value=64, max_value=400),
)
def test_the_marker_lists_exactly_the_cut_keys(values, max_bytes) -> None:
    texts = {key: _dump(value) for key, value in values.items()}
    span = ReadableSpan(
        "s",
        SpanContext(1, 2, False, TraceFlags(1)),
        attributes={**texts, "rl.reward": 1.0, "note": "x" * 1000},
    )
    out = ContentPolicyExporter(InMemorySpanExporter(), "truncate", max_bytes=max_bytes).apply(span)
    over = {key for key, text in texts.items() if _size(text) > max_bytes}
    assert set(out.attributes.get(sc.CONTENT_TRUNCATED, ())) == over
    assert (out is span) == (not over)
    for key in texts:
        assert _size(out.attributes[key]) <= max_bytes
        json.loads(out.attributes[key])
    assert out.attributes["note"] == "x" * 1000  # not content: never cut
    assert dict(span.attributes) == {**texts, "rl.reward": 1.0, "note": "x" * 1000}


def test_values_of_agenttraces_encoding_stay_decodable_or_become_stand_ins() -> None:
    from agenttrace.trajectory import codec

    big = np.arange(5000, dtype=np.float32).reshape(50, 100)
    cases = {
        "array": big,
        "tuple": tuple(range(2000)),
        "set": set(range(2000)),
        "int keys": {i: "v" * 20 for i in range(200)},
        "bytes": b"\x00" * 3000,
        "nested": {"frame": big, "score": 3},
    }
    for name, value in cases.items():
        out, cut = truncate_json_text(codec.dumps(value), 256)
        assert cut and _size(out) <= 256, name
        decoded = codec.loads(out)  # never a ValueDecodeError
        if name == "array":
            assert decoded == {
                "$truncated": {
                    "tag": "$ndarray",
                    "size": len(codec.dumps(big)),
                    "dtype": "<f4",
                    "shape": [50, 100],
                }
            }
        if name == "tuple":
            assert isinstance(decoded, tuple) and decoded == tuple(range(len(decoded)))
        if name == "int keys":
            assert set(decoded) <= set(range(200)) and decoded


def test_text_with_lone_surrogates_and_deep_nesting_stays_valid() -> None:
    text = json.dumps(["\ud800" * 300])  # escaped in the input: valid JSON text
    out, cut = truncate_json_text(text, 100)
    assert cut and _size(out) <= 100 and json.loads(out)[0].startswith("\ud800")
    deep = "[" * 50_000 + "]" * 50_000
    out, cut = truncate_json_text(deep, 100)
    assert cut and json.loads(out) == {"$truncated": {"size": 100_000}}


def test_spans_reaching_a_real_otlp_endpoint_are_cut_while_spans_jsonl_stays_whole(
    tmp_path, monkeypatch
) -> None:
    from backend_servers import OtlpReceiver

    collector = OtlpReceiver()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5")
        runtime = at.configure(out=str(tmp_path), export_max_bytes=256)
        with at.episode(), at.env_reset() as reset:
            reset.record(observation=list(range(500)), info={"note": "small"})
        runtime.shutdown()
    finally:
        collector.stop()
    [received] = [s for s in collector.spans if s.name == sc.ENV_RESET]
    attributes = {a.key: a.value for a in received.attributes}
    cut = attributes[sc.OBSERVATION].string_value
    assert len(cut.encode()) <= 256 and json.loads(cut) == list(range(len(json.loads(cut))))
    assert [v.string_value for v in attributes[sc.CONTENT_TRUNCATED].array_value.values] == [
        sc.OBSERVATION
    ]
    assert attributes[sc.INFO].string_value == '{"note":"small"}'
    [in_file] = [r for r in read_otlp_json(runtime.span_paths) if r.name == sc.ENV_RESET]
    assert json.loads(in_file.attributes[sc.OBSERVATION]) == list(range(500))
    assert sc.CONTENT_TRUNCATED not in in_file.attributes
    assert runtime.stats()["export_content_truncated"] == 1


def test_agenttrace_export_resolves_blobs_and_flags_what_it_cannot(tmp_path, capsys) -> None:
    from agenttrace.cli.main import main
    from agenttrace.sinks import load_trajectories

    store = tmp_path / "blobs"
    live, exported, _ = _run(tmp_path, "ref", LocalBlobStore(store))
    spans = tmp_path / "exported-spans.jsonl"
    spans.write_text(encode_lines(record_from_span(span) for span in exported) + "\n")
    whole = tmp_path / "whole.jsonl"
    argv = ["export", "--from", str(spans), "--blob-store", str(store), "--out", str(whole)]
    assert main(argv) == 0
    assert load_trajectories(whole) == live

    flagged = tmp_path / "flagged.jsonl"
    assert main(["export", "--from", str(spans), "--out", str(flagged)]) == 0
    out = capsys.readouterr().out
    assert f"{len(live)} lossy" in out
    for trajectory in load_trajectories(flagged):
        assert trajectory.lossy
        assert all("no blob store given" in reason for reason in trajectory.lossy.values())
        assert "reset_info" not in trajectory.lossy  # small: sent as it is
        assert any(path.endswith("llm_calls") for path in trajectory.lossy)
