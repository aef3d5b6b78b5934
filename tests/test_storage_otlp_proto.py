"""The Collector file exporter's length-prefixed format: real SDK spans, encoded by the OTLP
exporters' own encoder and framed as the Collector frames them, read back like OTLP/JSON."""

from __future__ import annotations

import base64
import math
import os
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import play_cartpole
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

import agenttrace as at
from agenttrace.sinks import load_trajectories
from agenttrace.storage import (
    OtlpJsonLinesWriter,
    SpanFormatError,
    SpanFormatWarning,
    decode_document,
    encode_lines,
    read_otlp_json,
)
from agenttrace.storage.otlp_proto import (
    ZSTD_MAGIC,
    _resolve,
    decode_proto,
    is_length_prefixed,
    read_otlp_proto,
)
from agenttrace.trajectory.records import SpanRecord, record_from_span

# ------------------------------------------------------------------------------------------
# helpers


def frame(payload: bytes) -> bytes:
    """One export as the Collector writes it (fileexporter's exportMessageAsBuffer)."""
    return len(payload).to_bytes(4, "big") + payload


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def batches(spans: Sequence[ReadableSpan], size: int) -> list[Sequence[ReadableSpan]]:
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def proto_payload(spans: Sequence[ReadableSpan]) -> bytes:
    """What the OTLP exporters send for ``spans``: ExportTraceServiceRequest bytes."""
    return encode_spans(spans).SerializeToString()


def json_records(spans: Sequence[ReadableSpan], folder: Path, size: int) -> list[SpanRecord]:
    """The same spans, in the same batches, through the OTLP/JSON writer and reader."""
    with OtlpJsonLinesWriter(folder) as writer:
        for batch in batches(spans, size):
            writer.write([record_from_span(s) for s in batch])
    return list(read_otlp_json(writer.paths))


def plain(value: Any) -> Any:
    """Comparable form: type-tagged, mappings as sorted tuples, sequences kept apart, NaN equal."""
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((k, plain(v)) for k, v in value.items())))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(plain(v) for v in value))
    return (type(value).__name__, value)


def fields(record: SpanRecord) -> dict[str, Any]:
    out = {k: plain(v) for k, v in record._asdict().items()}
    out["events"] = tuple((e.name, e.time, plain(e.attributes)) for e in record.events)
    out["links"] = tuple((k.trace_id, k.span_id, plain(k.attributes)) for k in record.links)
    return out


def assert_same_records(got: list[SpanRecord], want: list[SpanRecord]) -> None:
    assert len(got) == len(want)
    by_id = {r.span_id: r for r in got}
    assert len(by_id) == len(got)
    for record in want:
        assert fields(by_id[record.span_id]) == fields(record), record.name


def same(got: list[SpanRecord], want: list[SpanRecord]) -> bool:
    """Equal records in the same order (NaN attributes equal too)."""
    return [fields(r) for r in got] == [fields(r) for r in want]


def collect() -> tuple[list[SpanFormatError], Any]:
    errors: list[SpanFormatError] = []
    return errors, errors.append


def exported(provider: TracerProvider) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def sdk_spans() -> list[ReadableSpan]:
    """Spans of two resources and two scopes with every attribute type the SDK takes, events,
    links, statuses, kinds, a remote parent and one span still open."""
    first = TracerProvider(resource=Resource.create({"service.name": "learner", "seed": 7}))
    second = TracerProvider(resource=Resource.create({"service.name": "env-server"}))
    one, two = exported(first), exported(second)
    tracer = first.get_tracer("agenttrace.test", "1.2.3")
    other_scope = first.get_tracer("other.library")  # no version
    every_type = {
        "s": 'quote " backslash \\ newline \n unicode é 漢字 🤖 nul \x00',
        "empty": "",
        "t": True,
        "i": -42,
        "big": 2**62 + 12345,
        "x": 0.1,
        "tiny": 5e-324,
        "nan": math.nan,
        "inf": math.inf,
        "ninf": -math.inf,
        "strs": ("a", 'b"', "ç"),
        "bools": (True, False),
        "ints": (1, -2, 2**60),
        "floats": (1.5, math.nan, -math.inf, -0.0),
        "none": (),
    }
    with tracer.start_as_current_span("rl.episode", kind=SpanKind.SERVER) as root:
        root.set_attribute("rl.episode.id", "ep-1")
        with tracer.start_as_current_span("env.step", kind=SpanKind.CLIENT) as step:
            step.set_attributes(every_type)
            step.add_event("checkpoint", {"step": 3, "score": 0.5, "tags": ("x", "y")})
            step.add_event("bare")
            try:
                raise ValueError("bad action\nline two")
            except ValueError as error:
                step.record_exception(error)
            step.set_status(Status(StatusCode.ERROR, 'env said "no"'))
        with tracer.start_as_current_span("agent.act", kind=SpanKind.PRODUCER) as act:
            act.set_status(Status(StatusCode.OK))
            linked = act.get_span_context()
        with other_scope.start_as_current_span(
            "consume", kind=SpanKind.CONSUMER, links=[Link(linked, {"why": "batch"})]
        ):
            pass
        with other_scope.start_as_current_span("plain", links=[Link(linked)]):
            pass
        still_open = tracer.start_span("still.open", attributes={"n": 1})
        open_view = still_open._readable_span()  # what an exporter sees of an open span
    still_open.end()
    remote_parent = SpanContext(
        trace_id=0x0123456789ABCDEF0123456789ABCDEF,
        span_id=0xFF,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    context = trace.set_span_in_context(NonRecordingSpan(remote_parent))
    with second.get_tracer("agenttrace.test", "1.2.3").start_as_current_span(
        "env.server", context=context
    ) as served:
        served.set_attribute("ok", True)
    ended = [s for s in one.get_finished_spans() if s.name != "still.open"]
    spans = [*ended, open_view, *two.get_finished_spans()]
    assert open_view.end_time is None and len(spans) == 7
    return spans


SERVICE = "proto-run"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[list[at.Trajectory], list[ReadableSpan]]:
    """Three CartPole episodes traced with agenttrace: (live trajectories, the SDK's spans)."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    exporter = exported(provider)
    runtime = at.configure(
        out=str(tmp_path_factory.mktemp("run")),
        run_name="proto",
        sinks=["jsonl"],
        tracer_provider=provider,
    )
    play_cartpole(episodes=3, max_steps=20)
    runtime.shutdown()
    live = load_trajectories(runtime.trajectory_paths)
    at.shutdown()
    spans = list(exporter.get_finished_spans())
    assert len(live) == 3 and len(spans) > 60
    return live, spans


# ------------------------------------------------------------------------------------------
# the same records as OTLP/JSON


def test_sdk_spans_read_exactly_like_otlp_json(tmp_path: Path) -> None:
    spans = sdk_spans()
    path = tmp_path / "traces.pb"
    path.write_bytes(b"".join(frame(proto_payload(b)) for b in batches(spans, 3)))
    errors, on_error = collect()
    got = list(read_otlp_proto(path, on_error=on_error))
    assert errors == []
    want = json_records(spans, tmp_path / "json", 3)
    assert_same_records(got, want)
    # ... and like the live records themselves (the open span included: end_time None)
    assert_same_records(got, [record_from_span(s) for s in spans])
    assert [r.end_time for r in got if r.name == "still.open"] == [None]
    remote = next(r for r in got if r.name == "env.server")
    assert remote.parent_is_remote and remote.sampled and remote.parent_span_id == 0xFF
    assert_same_records(decode_proto(proto_payload(spans)), got)  # one payload of them all


def test_real_run_in_rotated_files_rebuilds_the_live_trajectories(run, tmp_path: Path) -> None:
    live, spans = run
    payloads = [proto_payload(b) for b in batches(spans, 16)]
    # The Collector writes to `path` and renames full files with a timestamp (lumberjack).
    names = ["spans-2024-05-01T10-00-00.000.pb", "spans-2024-05-01T11-00-00.000.pb", "spans.pb"]
    third = len(payloads) // 3
    parts = [payloads[:third], payloads[third : 2 * third], payloads[2 * third :]]
    for name, part in zip(names, parts, strict=True):
        (tmp_path / name).write_bytes(b"".join(frame(p) for p in part))
    (tmp_path / "notes.jsonl").write_text("{}\n")  # not ours: skipped by the directory form
    assert [p.name for p in _resolve(tmp_path)] == names
    errors, on_error = collect()
    got = list(read_otlp_proto(tmp_path, on_error=on_error))
    assert errors == []
    assert_same_records(got, json_records(spans, tmp_path / "json", 16))
    assert [r.span_id for r in got] == [
        r.span_id for p in payloads for r in decode_proto(p)
    ]  # rotation order: oldest backup first, the file being written last
    assert at.assemble(got) == live


def test_zstd_frames_and_natively_compressed_files(run, tmp_path: Path) -> None:
    live, spans = run
    payloads = [proto_payload(b) for b in batches(spans, 16)]
    want = list(read_otlp_proto_bytes(tmp_path / "plain.pb", b"".join(map(frame, payloads))))
    # compression: zstd (legacy): each payload is one zstd frame, the length counts it
    legacy = b"".join(frame(zstd(p)) for p in payloads)
    assert is_length_prefixed(legacy[:16]) and legacy[4:8] == ZSTD_MAGIC
    assert same(read_otlp_proto_bytes(tmp_path / "legacy.pb", legacy), want)
    # nativeCompression gate: the file is a zstd stream, one zstd frame per write
    native = b"".join(zstd(frame(p)) for p in payloads)
    assert is_length_prefixed(native[:16])
    assert same(read_otlp_proto_bytes(tmp_path / "native.pb.zst", native), want)
    # ... and `format: json` under it: JSON lines inside the zstd stream
    text = "".join(
        encode_lines([record_from_span(s) for s in b]) + "\n" for b in batches(spans, 16)
    )
    native_json = read_otlp_proto_bytes(tmp_path / "native.json.zst", zstd(text.encode()))
    assert_same_records(native_json, want)
    assert at.assemble(native_json) == live


def test_damaged_zstd_is_reported_and_bounded(run, tmp_path: Path) -> None:
    _, spans = run
    first, second = (proto_payload(b) for b in batches(spans, 16)[:2])
    # a natively compressed file whose stream breaks after its first zstd frame
    path = tmp_path / "broken.pb.zst"
    path.write_bytes(zstd(frame(first)) + ZSTD_MAGIC + b"\x00garbage" * 10 + zstd(frame(second)))
    errors, on_error = collect()
    got = list(read_otlp_proto(path, on_error=on_error))
    assert same(got, decode_proto(first))
    assert [e.reason.split(":")[0] for e in errors] == ["zstd stream breaks off"]
    # a small zstd payload that would decompress past the limit is not decompressed
    bomb = zstd(b"\x00" * 100_000)
    path.write_bytes(frame(bomb) + frame(first))
    errors, on_error = collect()
    got = list(read_otlp_proto(path, on_error=on_error, max_frame_bytes=50_000))
    assert same(got, decode_proto(first))
    assert "would decompress to 100000 bytes, over the limit" in errors[0].reason
    # ... nor when its size is not in the frame header
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    bomb = streamed.compress(b"\x00" * 100_000) + streamed.flush()
    path.write_bytes(frame(bomb) + frame(first))
    errors, on_error = collect()
    got = list(read_otlp_proto(path, on_error=on_error, max_frame_bytes=50_000))
    assert same(got, decode_proto(first))
    assert "decompresses to more than 50000 bytes" in errors[0].reason
    # a zstd payload cut short inside its frame
    errors, on_error = collect()
    assert decode_proto(zstd(first)[:-20], on_error) == []
    assert "cut short" in errors[0].reason or "corrupt zstd" in errors[0].reason


def read_otlp_proto_bytes(path: Path, data: bytes) -> list[SpanRecord]:
    path.write_bytes(data)
    errors, on_error = collect()
    records = list(read_otlp_proto(path, on_error=on_error))
    assert errors == []
    return records


def test_json_frames_compressed_or_not(tmp_path: Path) -> None:
    # `format: json` with `compression: zstd` frames JSON documents (legacy behaviour)
    spans = sdk_spans()
    text = encode_lines([record_from_span(s) for s in spans]).encode()
    data = frame(zstd(text)) + frame(text) + frame(b" \n" + text)
    got = read_otlp_proto_bytes(tmp_path / "traces.json", data)
    assert len(got) == 3 * len(spans)
    assert_same_records(got[: len(spans)], [record_from_span(s) for s in spans])
    assert same(got[: len(spans)], got[len(spans) : 2 * len(spans)])
    assert is_length_prefixed(data[:16])


def test_protobuf_that_looks_like_json_after_a_newline_is_protobuf() -> None:
    # 0x0A (field 1, resourceSpans) is "\n"; a 123-byte ResourceSpans puts "{" after it.
    data = TracesData()
    block = data.resource_spans.add()
    span = block.scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.name = "x" * 89  # makes the ResourceSpans 123 bytes
    assert block.ByteSize() == 123, block.ByteSize()
    payload = data.SerializeToString()
    assert payload[:2] == b"\n{"
    errors, on_error = collect()
    assert [r.name for r in decode_proto(payload, on_error)] == [span.name]
    assert errors == []


def test_values_only_hand_made_protobuf_holds_decode_like_their_json() -> None:
    # kvlist, bytes, empty values and nested arrays: the SDK never makes them, the OTLP/JSON
    # reader maps them (arrays to tuples, kvlists to dicts, bytes to bytes, no value to None).
    data = TracesData()
    span = data.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "s"
    span.start_time_unix_nano, span.end_time_unix_nano = 10, 20
    attributes = {
        "bytes": AnyValue(bytes_value=b"\x00\xff raw"),
        "kv": AnyValue(),
        "nested": AnyValue(),
        "none": AnyValue(),
    }
    inner = attributes["kv"].kvlist_value.values
    inner.add(key="a", value=AnyValue(int_value=1))
    inner.add(key="b", value=AnyValue(string_value="x"))
    inner.add(key="no.value")
    nested = attributes["nested"].array_value.values
    nested.add(string_value="a")
    nested.add().array_value.values.add(double_value=2.5)
    nested.add()
    for key, value in attributes.items():
        span.attributes.append(KeyValue(key=key, value=value))
    span.attributes.append(KeyValue(key="missing"))
    (record,) = decode_proto(data.SerializeToString())
    assert record.attributes == {
        "bytes": b"\x00\xff raw",
        "kv": {"a": 1, "b": "x", "no.value": None},
        "nested": ("a", (2.5,), None),
        "none": None,
        "missing": None,
    }
    (from_json,) = decode_document(MessageToDict(data))
    assert fields(record) == fields(from_json)


# ------------------------------------------------------------------------------------------
# damage


def test_truncated_file_keeps_the_frames_before(tmp_path: Path) -> None:
    spans = sdk_spans()
    payloads = [proto_payload(b) for b in batches(spans, 2)]
    whole = b"".join(map(frame, payloads))
    for cut, what in ((len(whole) - 5, "frame 4"), (len(whole) - len(frame(payloads[-1])) + 2,
                                                     "a length prefix")):  # fmt: skip
        path = tmp_path / "cut.pb"
        path.write_bytes(whole[:cut])
        errors, on_error = collect()
        got = list(read_otlp_proto(path, on_error=on_error))
        assert [r.span_id for r in got] == [
            r.span_id for p in payloads[:3] for r in decode_proto(p)
        ]
        (error,) = errors
        assert str(error).startswith(str(path) + ": truncated after 3 frames: " + what)


def test_corrupt_frame_in_the_middle_is_skipped(tmp_path: Path) -> None:
    spans = sdk_spans()
    payloads = [proto_payload(b) for b in batches(spans, 2)]
    payloads[1] = b"\x0a\xff\xff\xff\x0f" + b"?" * (len(payloads[1]) - 5)  # a length too long
    payloads[2] = ZSTD_MAGIC + b"not really zstd"
    payloads[3] = b'{"resourceSpans": [' * 3
    payloads.append(b'{"a":' * 100_000)  # nested too deeply for json
    payloads.append(proto_payload(spans[:1]))
    path = tmp_path / "bad.pb"
    path.write_bytes(b"".join(map(frame, payloads)))
    errors, on_error = collect()
    got = list(read_otlp_proto(path, on_error=on_error))
    good = [payloads[0], payloads[-1]]
    assert [r.span_id for r in got] == [r.span_id for p in good for r in decode_proto(p)]
    offsets = [sum(len(frame(p)) for p in payloads[:i]) for i in range(len(payloads))]
    assert [e.reason.split(":")[0] for e in errors] == [
        "frame %d at byte %d skipped" % (i + 1, offsets[i]) for i in (1, 2, 3, 4)
    ]
    assert "not a protobuf ExportTraceServiceRequest" in errors[0].reason
    assert "zstd" in errors[1].reason
    assert "invalid JSON payload" in errors[2].reason
    assert "nested too deeply" in errors[3].reason


def test_absurd_length_stops_the_file_without_allocating_it(tmp_path: Path) -> None:
    payload = proto_payload(sdk_spans())
    for length in (0xFFFFFFF0, (1 << 30) + 1):
        path = tmp_path / "absurd.pb"
        path.write_bytes(frame(payload) + length.to_bytes(4, "big") + payload + frame(payload))
        errors, on_error = collect()
        got = list(read_otlp_proto(path, on_error=on_error))
        assert same(got, decode_proto(payload))
        (error,) = errors
        assert "frame 2 at byte %d claims %d bytes, over the" % (len(payload) + 4, length) in str(
            error
        )
    # A length below the limit but past the end: reported as truncation, read in chunks.
    path.write_bytes(frame(payload) + (900 << 20).to_bytes(4, "big") + b"x" * 100)
    errors, on_error = collect()
    tracemalloc.start()
    try:
        got = list(read_otlp_proto(path, on_error=on_error))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert same(got, decode_proto(payload)) and peak < 8 << 20
    assert "truncated after 1 frames: frame 2" in str(errors[0])
    # The limit is a parameter.
    errors, on_error = collect()
    assert list(read_otlp_proto(path, on_error=on_error, max_frame_bytes=10)) == []
    assert "over the 10-byte limit" in str(errors[0])


def test_empty_frames_and_files_are_no_error(tmp_path: Path) -> None:
    payload = proto_payload(sdk_spans())
    path = tmp_path / "empty.pb"
    path.write_bytes(b"")
    assert read_otlp_proto_bytes(path, b"") == []
    # An empty batch marshals to zero bytes: the Collector writes a zero length.
    assert same(read_otlp_proto_bytes(path, frame(b"") + frame(payload)), decode_proto(payload))
    assert is_length_prefixed(frame(b"") + frame(payload)[:8])


def test_a_bad_span_is_one_error_like_in_otlp_json(tmp_path: Path) -> None:
    data = TracesData()
    spans = data.resource_spans.add().scope_spans.add().spans
    for i, (trace_id, kind) in enumerate(((b"\x01" * 16, 1), (b"\x01" * 3, 1), (b"\x01" * 16, 9))):
        spans.add(trace_id=trace_id, span_id=bytes([0] * 7 + [i + 1]), name="s%d" % i, kind=kind)
    payload = data.SerializeToString()
    path = tmp_path / "bad-span.pb"
    path.write_bytes(frame(payload) + frame(payload))
    errors, on_error = collect()
    got = list(read_otlp_proto(path, on_error=on_error))
    assert [r.name for r in got] == ["s0", "s0"]
    assert [(e.source, e.line, e.span) for e in errors] == [
        (str(path), 1, 1),
        (str(path), 1, 2),
        (str(path), 2, 1),
        (str(path), 2, 2),
    ]
    assert errors[0].reason == 'traceId must be 16 bytes, got 3 (span "s1")'
    assert errors[1].reason == 'unknown kind 9 (span "s2")'
    json_errors, on_json_error = collect()
    assert decode_document(MessageToDict(data), on_json_error) == got[:1]
    assert [e.span for e in json_errors] == [1, 2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert decode_proto(payload) == got[:1]
    assert [(w.category, str(w.message)) for w in caught] == [
        (SpanFormatWarning, "span 1: " + errors[0].reason),
        (SpanFormatWarning, "span 2: " + errors[1].reason),
    ]


def test_logs_and_metrics_sharing_the_file_are_skipped_silently(tmp_path: Path) -> None:
    logs = ExportLogsServiceRequest()
    record = logs.resource_logs.add().scope_logs.add().log_records.add()
    record.time_unix_nano, record.severity_text = 5, "INFO"
    record.body.string_value = "hello"
    record.trace_id, record.span_id = b"\x01" * 16, b"\x02" * 8
    metrics = ExportMetricsServiceRequest()
    metric = metrics.resource_metrics.add().scope_metrics.add().metrics.add(name="loss")
    metric.gauge.data_points.add(as_double=0.5, time_unix_nano=7)
    payload = proto_payload(sdk_spans())
    data = b"".join(
        frame(p) for p in (logs.SerializeToString(), payload, metrics.SerializeToString())
    )
    assert same(read_otlp_proto_bytes(tmp_path / "all.pb", data), decode_proto(payload))


# ------------------------------------------------------------------------------------------
# sniffing and sources


def test_sniffing_tells_length_prefixed_files_from_json_lines(tmp_path: Path) -> None:
    payload = proto_payload(sdk_spans())
    with OtlpJsonLinesWriter(tmp_path) as writer:
        writer.write([record_from_span(s) for s in sdk_spans()])
    json_head = writer.path.read_bytes()[:16]
    assert is_length_prefixed(frame(payload)[:16])
    assert is_length_prefixed(frame(zstd(payload))[:16])
    assert is_length_prefixed(frame(b'{"resourceSpans":[]}'))
    assert is_length_prefixed(zstd(frame(payload))[:16])
    for head in (json_head, b"", b"\x00\x00\x00", frame(payload)[:4], b"  \n" + json_head,
                 b"\x1f\x8b\x08\x00\x0a\x00\x00\x00", b"\x00" * 16, b"\xef\xbb\xbf{",
                 b"\x00\x00\x01\x00zzzz"):  # fmt: skip
        assert not is_length_prefixed(head), head


def test_sources_directory_glob_list_and_missing(tmp_path: Path) -> None:
    payload = proto_payload(sdk_spans())
    n = len(decode_proto(payload))
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "b").mkdir()
    (runs / "a" / "traces.pb").write_bytes(frame(payload))
    (runs / "a" / "traces-00001.pb").write_bytes(frame(payload))
    (runs / "b" / "traces").write_bytes(frame(payload))  # the Collector's `path: ./traces`
    (runs / "b" / "spans.jsonl").write_text(encode_lines([]) + "\n")
    (runs / "b" / ".hidden.pb").write_bytes(b"junk")
    assert [p.name for p in _resolve(runs / "a")] == ["traces.pb", "traces-00001.pb"]
    assert [p.name for p in _resolve(runs / "b")] == ["traces"]
    assert len(list(read_otlp_proto(str(runs / "*")))) == 3 * n
    assert len(list(read_otlp_proto([runs / "a" / "traces.pb", runs / "a"]))) == 2 * n
    with pytest.raises(FileNotFoundError, match="no such span file"):
        read_otlp_proto(tmp_path / "missing.pb")
    with pytest.raises(FileNotFoundError, match="no span files match"):
        read_otlp_proto(str(tmp_path / "*.nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no length-prefixed span files"):
        read_otlp_proto(tmp_path / "empty")
    with pytest.raises(TypeError):
        read_otlp_proto(42)  # type: ignore[arg-type]


def test_reading_streams_frame_by_frame(tmp_path: Path) -> None:
    payload = proto_payload(sdk_spans())
    path = tmp_path / "big.pb"
    path.write_bytes(frame(payload) * 1500)
    size = path.stat().st_size
    assert size > 2 << 20
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_otlp_proto(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 1500 * len(decode_proto(payload))
    assert peak < size / 4


def test_default_error_handler_warns(tmp_path: Path) -> None:
    path = tmp_path / "cut.pb"
    path.write_bytes(b"\x00\x00\x00\x09abc")
    with pytest.warns(SpanFormatWarning, match="truncated after 0 frames"):
        assert list(read_otlp_proto(path)) == []


def test_missing_zstandard_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "z.pb"
    path.write_bytes(frame(proto_payload(sdk_spans())) + frame(zstd(b"")))
    # A fresh interpreter in which `import zstandard` fails as it does when not installed.
    script = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "zstandard" or name.startswith("zstandard."):
                    raise ModuleNotFoundError("No module named %r" % name)
                return None

        sys.meta_path.insert(0, Block())
        from agenttrace.storage.otlp_proto import read_otlp_proto

        records = read_otlp_proto(sys.argv[1])
        print(next(records).name)
        try:
            list(records)
        except ImportError as error:
            print("ImportError:", error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert result.returncode == 0, result.stderr
    first, error = result.stdout.splitlines()
    assert first  # the uncompressed frame before was read
    assert error.startswith("ImportError: these spans are zstd-compressed")
    assert error.endswith(
        "pip install -e '.[zstd]' from a clone of the repository "
        "(otel-agenttrace is not on the package index yet)"
    )


# ------------------------------------------------------------------------------------------
# hostile input

_SOME_PAYLOAD = proto_payload(sdk_spans())
_PIECES = st.sampled_from(
    [
        frame(_SOME_PAYLOAD),
        frame(zstd(_SOME_PAYLOAD)),
        ZSTD_MAGIC,
        b"\x00\x00\x00\x00",
        b"\x0a",
        b"{",
        _SOME_PAYLOAD[:40],
    ]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.one_of(st.binary(max_size=64), _PIECES), max_size=6))
def test_garbage_never_raises(tmp_path: Path, pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    path = tmp_path / "garbage.bin"
    path.write_bytes(data)
    errors, on_error = collect()
    records = list(read_otlp_proto(path, on_error=on_error))
    assert all(isinstance(r, SpanRecord) for r in records)
    assert all(isinstance(e, SpanFormatError) for e in errors)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpanFormatWarning)
        decode_proto(data)
    is_length_prefixed(data)


_KEYS = st.text(min_size=1, max_size=4)  # MessageToDict leaves out an empty key
_SCALARS = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=8)),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: AnyValue(double_value=v), st.floats()),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=8)),
    st.just(AnyValue()),
)


def _array(items: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(items)
    return value


def _kvlist(items: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    for key, item in items:
        value.kvlist_value.values.add(key=key, value=item)
    return value


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.builds(_array, st.lists(inner, max_size=3)),
        st.builds(_kvlist, st.lists(st.tuples(_KEYS, inner), max_size=3)),
    ),
    max_leaves=6,
)
_ATTRIBUTES = st.lists(st.tuples(_KEYS, _VALUES), max_size=3)
_IDS16 = st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=17))
_IDS8 = st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=9))


@st.composite
def _traces(draw: Any) -> TracesData:
    data = TracesData()
    for _ in range(draw(st.integers(1, 2))):
        block = data.resource_spans.add()
        for key, value in draw(_ATTRIBUTES):
            block.resource.attributes.add(key=key, value=value)
        for _ in range(draw(st.integers(0, 2))):
            scope = block.scope_spans.add()
            scope.scope.name = draw(st.text(max_size=4))
            scope.scope.version = draw(st.text(max_size=4))
            for _ in range(draw(st.integers(0, 3))):
                span = scope.spans.add(
                    trace_id=draw(_IDS16),
                    span_id=draw(_IDS8),
                    parent_span_id=draw(st.one_of(st.just(b""), _IDS8)),
                    name=draw(st.text(max_size=6)),
                    kind=draw(st.integers(0, 6)),
                    start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                    end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                    flags=draw(st.sampled_from([0, 0x100, 0x300, 0x301, 0x302, 0x1FF])),
                )
                span.status.code = draw(st.integers(0, 3))
                span.status.message = draw(st.text(max_size=4))
                for key, value in draw(_ATTRIBUTES):
                    span.attributes.add(key=key, value=value)
                for _ in range(draw(st.integers(0, 2))):
                    event = span.events.add(name=draw(st.text(max_size=4)))
                    event.time_unix_nano = draw(st.integers(0, 2**64 - 1))
                    for key, value in draw(_ATTRIBUTES):
                        event.attributes.add(key=key, value=value)
                for _ in range(draw(st.integers(0, 1))):
                    link = span.links.add(trace_id=draw(_IDS16), span_id=draw(_IDS8))
                    for key, value in draw(_ATTRIBUTES):
                        link.attributes.add(key=key, value=value)
    return data


@settings(max_examples=200, deadline=None)
@given(_traces())
def test_any_traces_data_decodes_like_its_otlp_json(data: TracesData) -> None:
    """protobuf's own JSON form (base64 ids, enum names, int64 strings) through the OTLP/JSON
    reader gives the same records and the same span errors."""
    errors, on_error = collect()
    got = decode_proto(data.SerializeToString(), on_error)
    json_errors, on_json_error = collect()
    want = decode_document(MessageToDict(data), on_json_error)
    assert [fields(r) for r in got] == [fields(r) for r in want]
    assert [e.span for e in errors] == [e.span for e in json_errors]


def test_hex_and_base64_ids_never_mix_up() -> None:
    # The JSON form of a protobuf id is base64; that the OTLP/JSON reader reads it as base64
    # (not hex) is what the equivalence above relies on.
    data = TracesData()
    span = data.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes(range(1, 17)), bytes(range(1, 9))
    as_json = MessageToDict(data)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert base64.b64decode(as_json["traceId"]) == span.trace_id
    (record,) = decode_proto(data.SerializeToString())
    assert record.trace_id == int.from_bytes(bytes(range(1, 17)), "big")
    assert record.span_id == int.from_bytes(bytes(range(1, 9)), "big")
