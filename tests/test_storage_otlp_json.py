"""OTLP/JSON span files: encode/decode round trips, the spec's examples, and damaged input."""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from agenttrace.storage import (
    OtlpJsonLinesWriter,
    SpanFormatError,
    SpanFormatWarning,
    decode_line,
    encode_lines,
    iter_records,
    read_otlp_json,
)
from agenttrace.trajectory.records import SpanRecord, record_from_span

# Real samples from upstream projects, vendored unchanged (see fixtures/upstream/SOURCES.md).
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upstream"


# ------------------------------------------------------------------------------------------
# helpers


class Collect(SpanProcessor):
    """Keeps the record of every ended span, as the live processor would see it."""

    def __init__(self) -> None:
        self.records: list[SpanRecord] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.records.append(record_from_span(span))


def provider(service: str, collect: Collect) -> TracerProvider:
    result = TracerProvider(resource=Resource.create({"service.name": service, "run.seed": 7}))
    result.add_span_processor(collect)
    return result


def plain(value: Any) -> Any:
    """Comparable form: type-tagged, mappings as sorted tuples, sequences as tuples, NaN equal."""
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((k, plain(v)) for k, v in value.items())))
    if isinstance(value, (tuple, list)):
        return ("seq", tuple(plain(v) for v in value))
    return (type(value).__name__, value)


def fields(record: SpanRecord) -> dict[str, Any]:
    out = record._asdict()
    out["attributes"] = plain(record.attributes)
    out["resource"] = plain(record.resource)
    out["events"] = tuple((e.name, e.time, plain(e.attributes)) for e in record.events)
    out["links"] = tuple((k.trace_id, k.span_id, plain(k.attributes)) for k in record.links)
    return out


def assert_same_records(decoded: list[SpanRecord], original: list[SpanRecord]) -> None:
    assert len(decoded) == len(original)
    by_id = {r.span_id: r for r in decoded}
    assert len(by_id) == len(decoded)
    for record in original:
        assert fields(by_id[record.span_id]) == fields(record), record.name


def sdk_records() -> list[SpanRecord]:
    """Spans of two resources and two scopes with every attribute type the SDK takes."""
    first, second = Collect(), Collect()
    tracer = provider("learner", first).get_tracer("agenttrace.test", "1.2.3")
    other_scope = provider("learner", first).get_tracer("other.library")  # no version
    remote_tracer = provider("env-server", second).get_tracer("agenttrace.test", "1.2.3")

    every_type = {
        "s": 'quote " backslash \\ newline \n tab \t unicode é 漢字 🤖 nul \x00',
        "empty": "",
        "t": True,
        "f": False,
        "i": -42,
        "big": 2**62 + 12345,  # past 2**53: would be rounded by a float-based JSON reader
        "x": 0.1,
        "tiny": 5e-324,
        "huge": 1.7976931348623157e308,
        "nan": math.nan,
        "inf": math.inf,
        "ninf": -math.inf,
        "strs": ("a", 'b"', "ç"),
        "bools": (True, False),
        "ints": (1, -2, 2**60),
        "floats": (1.5, math.nan, math.inf, -math.inf, -0.0),
        "shape": (4, 84, 84),
    }
    with tracer.start_as_current_span("rl.episode", kind=SpanKind.SERVER) as root:
        root.set_attribute("rl.episode.id", "ep-1")
        with tracer.start_as_current_span("env.step", kind=SpanKind.CLIENT) as step:
            step.set_attributes(every_type)
            step.add_event("checkpoint", {"step": 3, "score": 0.5, "tags": ("x", "y")})
            step.add_event("bare")
            try:
                raise ValueError("bad action: 'jump'\nline two")
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
        open_span = tracer.start_span("still.open", attributes={"n": 1})
        open_record = record_from_span(open_span)  # end_time None
        open_span.end()

    remote_parent = SpanContext(
        trace_id=0x0123456789ABCDEF0123456789ABCDEF,
        span_id=0x00000000000000FF,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    context = trace.set_span_in_context(NonRecordingSpan(remote_parent))
    with remote_tracer.start_as_current_span("env.server", context=context) as served:
        served.set_attribute("ok", True)

    ended = [r for r in first.records if r.span_id != open_record.span_id]
    records = [*ended, open_record, *second.records]
    assert open_record.end_time is None
    assert any(r.parent_is_remote for r in records)
    assert len({tuple(sorted(r.resource.items())) for r in records}) == 2
    assert {(r.scope_name, r.scope_version) for r in records} == {
        ("agenttrace.test", "1.2.3"),
        ("other.library", ""),  # the SDK's "no version"
    }
    return records


def span_json(**fields: Any) -> dict[str, Any]:
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "s",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    span.update(fields)
    return {k: v for k, v in span.items() if v is not None}


def line_of(*spans: dict[str, Any], resource: dict[str, Any] | None = None) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": resource or {},
                    "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}],
                }
            ]
        }
    )


def collect_errors() -> tuple[list[SpanFormatError], Any]:
    errors: list[SpanFormatError] = []
    return errors, errors.append


# ------------------------------------------------------------------------------------------
# (a) encode -> decode round trip of real SDK spans


def test_round_trip_keeps_every_field_of_every_record() -> None:
    records = sdk_records()
    line = encode_lines(records)
    assert "\n" not in line and not line.endswith("\n")
    json.loads(line)  # strict JSON: no bare NaN / Infinity
    assert "NaN" not in line.replace('"NaN"', "")
    assert_same_records(decode_line(line), records)


def test_round_trip_types_are_exact() -> None:
    records = sdk_records()
    step = next(r for r in decode_line(encode_lines(records)) if r.name == "env.step")
    attrs = step.attributes
    assert attrs["big"] == 2**62 + 12345 and type(attrs["big"]) is int
    assert type(attrs["t"]) is bool and type(attrs["i"]) is int and type(attrs["x"]) is float
    assert math.isnan(attrs["nan"]) and attrs["inf"] == math.inf and attrs["ninf"] == -math.inf
    assert attrs["ints"] == (1, -2, 2**60) and isinstance(attrs["ints"], tuple)
    assert attrs["bools"] == (True, False) and all(type(b) is bool for b in attrs["bools"])
    assert math.copysign(1.0, attrs["floats"][4]) == -1.0  # -0.0 survives
    assert step.status_code == "ERROR" and step.status_message == 'env said "no"'
    assert step.kind == "CLIENT"
    exception = next(e for e in step.events if e.name == "exception")
    assert exception.attributes["exception.type"] == "ValueError"
    assert exception.attributes["exception.message"] == "bad action: 'jump'\nline two"


def test_encoding_keeps_the_record_order_in_runs_of_resource_and_scope() -> None:
    records = sdk_records()
    shuffled = records[1:] + records[:1] + records[2:4]  # resources and scopes interleaved
    shuffled = [r._replace(span_id=n + 1) for n, r in enumerate(shuffled)]
    document = json.loads(encode_lines(shuffled))
    groups = [
        (
            {a["key"]: a["value"] for a in block["resource"]["attributes"]}["service.name"][
                "stringValue"
            ],
            scope["scope"]["name"],
            [span["name"] for span in scope["spans"]],
        )
        for block in document["resourceSpans"]
        for scope in block["scopeSpans"]
    ]
    # One group per run: no two neighbours share both resource and scope...
    assert all(a[:2] != b[:2] for a, b in itertools.pairwise(groups))
    assert {service for service, _, _ in groups} == {"learner", "env-server"}
    # ...and the records come back in the order they were written.
    assert [name for *_, names in groups for name in names] == [r.name for r in shuffled]
    decoded = list(iter_records([encode_lines(shuffled)]))
    assert [r.span_id for r in decoded] == [r.span_id for r in shuffled]


def test_encoded_fields_follow_the_otlp_json_mapping() -> None:
    records = sdk_records()
    spans = {
        s["name"]: s
        for b in json.loads(encode_lines(records))["resourceSpans"]
        for scope in b["scopeSpans"]
        for s in scope["spans"]
    }
    root, step = spans["rl.episode"], spans["env.step"]
    assert len(root["traceId"]) == 32 and root["traceId"] == root["traceId"].lower()
    assert len(root["spanId"]) == 16 and "parentSpanId" not in root
    assert step["parentSpanId"] == root["spanId"]
    assert root["kind"] == 2 and step["kind"] == 3 and spans["plain"]["kind"] == 1
    assert isinstance(root["startTimeUnixNano"], str) and root["startTimeUnixNano"].isdigit()
    assert "endTimeUnixNano" not in spans["still.open"]
    assert root["status"] == {}
    assert spans["agent.act"]["status"] == {"code": 1}
    assert step["status"] == {"code": 2, "message": 'env said "no"'}
    values = {a["key"]: a["value"] for a in step["attributes"]}
    assert values["big"] == {"intValue": str(2**62 + 12345)}
    assert values["nan"] == {"doubleValue": "NaN"}
    assert values["ninf"] == {"doubleValue": "-Infinity"}
    assert values["t"] == {"boolValue": True}
    assert values["shape"] == {
        "arrayValue": {"values": [{"intValue": "4"}, {"intValue": "84"}, {"intValue": "84"}]}
    }
    assert spans["env.server"]["flags"] == 0x301  # parent is remote; sampled
    assert spans["consume"]["links"][0]["attributes"] == [
        {"key": "why", "value": {"stringValue": "batch"}}
    ]


def test_values_outside_the_sdk_round_trip_or_degrade_readably() -> None:
    record = SpanRecord(
        trace_id=1,
        span_id=2,
        parent_span_id=0,
        name="manual",
        start_time=10,
        end_time=20,
        attributes={
            "blob": b"\x00\xffbytes",
            "nested": {"a": 1, "b": ("x",), "c": {"d": None}},
            "list": [1, 2],
            "mixed": (1, True, 1.0, "1"),
            "np_float": np.float64(2.5),
            "np_int": np.int64(7),
            "empty": (),
            "object": Path("/tmp/x"),
        },
        resource={},
    )
    document = json.loads(encode_lines([record]))
    scope = document["resourceSpans"][0]["scopeSpans"][0]
    assert scope["scope"] == {"name": ""}
    (decoded,) = decode_line(encode_lines([record]))
    assert decoded.attributes == {
        "blob": b"\x00\xffbytes",
        "nested": {"a": 1, "b": ("x",), "c": {"d": None}},
        "list": (1, 2),
        "mixed": (1, True, 1.0, "1"),
        "np_float": 2.5,
        "np_int": 7,
        "empty": (),
        "object": "/tmp/x",
    }
    assert [type(v) for v in decoded.attributes["mixed"]] == [int, bool, float, str]
    # proto3 strings have no "unset": a missing version reads back as "" (what the SDK gives)
    assert decoded.scope_name == "" and decoded.scope_version == "" and decoded.resource == {}


def test_equal_tuples_of_different_types_encode_by_their_own_type() -> None:
    # (1, 2), (1.0, 2.0) and (True, False)-like tuples are equal in Python; the array cache
    # must still tell them apart.
    made = [
        SpanRecord(1, n + 1, 0, "s", 1, 2, {"v": value})
        for n, value in enumerate([(1, 0), (1.0, 0.0), (True, False), (1, 0)])
    ]
    decoded = sorted(decode_line(encode_lines(made)), key=lambda r: r.span_id)
    assert [tuple(type(x) for x in r.attributes["v"]) for r in decoded] == [
        (int, int),
        (float, float),
        (bool, bool),
        (int, int),
    ]


def test_many_distinct_keys_survive_the_prefix_cache_reset() -> None:
    attributes = {"key.%d" % i: (i if i % 2 else "v%d" % i) for i in range(10_000)}
    record = SpanRecord(5, 6, 0, "wide", 1, 2, attributes)
    (decoded,) = decode_line(encode_lines([record]))
    assert decoded.attributes == attributes


def test_empty_batch_is_an_empty_export() -> None:
    assert encode_lines([]) == '{"resourceSpans":[]}'
    assert decode_line(encode_lines([])) == []


# ------------------------------------------------------------------------------------------
# (b) the specification's own examples


def fixture(name: str) -> Path:
    path = FIXTURES / name
    assert path.exists(), "vendored fixture %s is missing" % path
    return path


def test_spec_trace_example_decodes() -> None:
    text = fixture("otlp/trace.json").read_text()
    (record,) = decode_line(text)
    assert record.trace_id == 0x5B8EFFF798038103D269B633813FC60C
    assert record.span_id == 0xEEE19B7EC3C1B174
    assert record.parent_span_id == 0xEEE19B7EC3C1B173
    assert record.name == "I'm a server span"
    assert record.kind == "SERVER"
    assert record.start_time == 1544712660000000000
    assert record.end_time == 1544712661000000000
    assert record.attributes == {"my.span.attr": "some value"}
    assert record.resource == {"service.name": "my.service"}
    assert (record.scope_name, record.scope_version) == ("my.library", "1.0.0")
    assert record.status_code == "UNSET" and record.status_message is None
    assert record.events == () and record.links == ()
    # The same pretty-printed file through the file reader: read as one document.
    errors, on_error = collect_errors()
    assert list(read_otlp_json(fixture("otlp/trace.json"), on_error=on_error)) == [record]
    assert errors == []


def test_logs_example_holds_no_spans_and_is_no_error() -> None:
    path = fixture("otlp/logs.json")
    assert decode_line(path.read_text()) == []
    errors, on_error = collect_errors()
    assert list(read_otlp_json(path, on_error=on_error)) == []
    assert errors == []


def test_jaeger_converter_input_reads_whole() -> None:
    path = fixture("jaeger/otlp2jaeger-in.json")
    errors, on_error = collect_errors()
    records = list(read_otlp_json(path, on_error=on_error))
    assert errors == []
    document = json.loads(path.read_text())
    count = sum(len(s["spans"]) for b in document["resourceSpans"] for s in b["scopeSpans"])
    assert len(records) == count > 0
    assert all(r.trace_id == 0x83A9EFD15C1C98A977E0711CC93EE28B for r in records)
    assert records[0].attributes["peer.service"] == "telemetrygen-client"


# ------------------------------------------------------------------------------------------
# (c) what other writers produce


def test_enum_names_base64_ids_and_numeric_int_values_are_accepted() -> None:
    trace_bytes = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    span_bytes = bytes.fromhex("b7ad6b7169203331")
    parent_bytes = bytes.fromhex("00f067aa0ba902b7")
    line = line_of(
        span_json(
            traceId=base64.b64encode(trace_bytes).decode(),  # 24 chars, Tempo style
            spanId=base64.b64encode(span_bytes).decode(),  # 12 chars
            parentSpanId=base64.b64encode(parent_bytes).decode().rstrip("="),  # unpadded
            kind="SPAN_KIND_SERVER",
            status={"code": "STATUS_CODE_ERROR", "message": "boom"},
            startTimeUnixNano=1000,  # a JSON number instead of a string
            attributes=[
                {"key": "n", "value": {"intValue": 42}},
                {"key": "d", "value": {"doubleValue": 3}},
                {"key": "nan", "value": {"doubleValue": "NaN"}},
                {"key": "none", "value": {}},
            ],
            links=[{"traceId": base64.b64encode(trace_bytes).decode(), "spanId": "AAAAAAAAAAE="}],
        )
    )
    (record,) = decode_line(line)
    assert record.trace_id == int.from_bytes(trace_bytes, "big")
    assert record.span_id == int.from_bytes(span_bytes, "big")
    assert record.parent_span_id == int.from_bytes(parent_bytes, "big")
    assert record.kind == "SERVER"
    assert (record.status_code, record.status_message) == ("ERROR", "boom")
    assert record.start_time == 1000
    assert record.attributes["n"] == 42 and type(record.attributes["n"]) is int
    assert record.attributes["d"] == 3.0 and type(record.attributes["d"]) is float
    assert math.isnan(record.attributes["nan"])
    assert record.attributes["none"] is None
    assert record.links[0].span_id == 1


def test_unspecified_kind_and_uppercase_hex_and_proto_field_names() -> None:
    (record,) = decode_line(line_of(span_json(kind=0, traceId="0AF7651916CD43DD8448EB211C80319C")))
    assert record.kind == "INTERNAL" and record.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    snake = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": "0af7651916cd43dd8448eb211c80319c",
                                "span_id": "b7ad6b7169203331",
                                "parent_span_id": "",
                                "name": "snake",
                                "start_time_unix_nano": "5",
                                "attributes": [{"key": "a_b", "value": {"int_value": "1"}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    (record,) = decode_line(json.dumps(snake))
    assert (record.name, record.start_time, record.parent_span_id) == ("snake", 5, 0)
    assert record.attributes == {"a_b": 1}  # attribute keys are data, never renamed
    assert record.end_time is None


# ------------------------------------------------------------------------------------------
# (d) damaged input: every good span comes back, one clear error per bad item


def test_decode_line_is_strict_and_says_what_is_wrong() -> None:
    with pytest.raises(SpanFormatError, match="invalid JSON"):
        decode_line("{nope")
    with pytest.raises(SpanFormatError, match="no resourceSpans"):
        decode_line('{"hello": 1}')
    with pytest.raises(SpanFormatError, match=r"span 1: no traceId \(span \"x\"\)"):
        decode_line(line_of(span_json(), span_json(traceId=None, name="x")))
    with pytest.raises(SpanFormatError, match="unknown kind 9"):
        decode_line(line_of(span_json(kind=9)))
    with pytest.raises(SpanFormatError, match="traceId 'xyz' is neither 32 hex digits"):
        decode_line(line_of(span_json(traceId="xyz")))
    with pytest.raises(SpanFormatError, match="all-zero"):
        decode_line(line_of(span_json(spanId="0000000000000000")))
    assert issubclass(SpanFormatError, ValueError)


def damaged_lines() -> list[str]:
    good = line_of(span_json(spanId="0000000000000001"), span_json(spanId="0000000000000002"))
    weird_value = line_of(
        span_json(spanId="0000000000000005", attributes=[{"key": "w", "value": {"oddValue": 1}}]),
        span_json(spanId="0000000000000006"),
    )
    lines = [
        good,  # 1: two spans
        "this is not JSON",  # 2
        line_of(  # 3: middle span has no traceId
            span_json(spanId="0000000000000003"),
            span_json(spanId="00000000000000aa", traceId=None),
            span_json(spanId="0000000000000004"),
        ),
        '{"something": "else"}',  # 4: JSON, but not an export request
        weird_value,  # 5: first span's attribute has an unknown value type
        "",  # 6: blank lines are nothing
        line_of(span_json(spanId="0000000000000007")),  # 7
    ]
    return lines  # good spans: 1, 2, 3, 4, 6, 7


def expected_errors(source: str) -> list[tuple[str, int, int | None, str]]:
    return [
        (source, 2, None, "invalid JSON"),
        (source, 3, 1, "no traceId"),
        (source, 4, None, "no resourceSpans"),
        (source, 5, 0, "unknown value type 'oddValue'"),
        (source, 8, None, "torn last line"),
    ]


def check_errors(errors: list[SpanFormatError], source: str) -> None:
    assert len(errors) == 5, [str(e) for e in errors]
    for error, (src, line, span, reason) in zip(errors, expected_errors(source), strict=True):
        assert (error.source, error.line, error.span) == (src, line, span)
        assert reason in error.reason
        assert str(error).startswith("%s:%d: " % (src, line))
    assert "span 1: no traceId" in str(errors[1])


def test_iter_records_skips_bad_lines_and_spans_and_reports_each_once() -> None:
    lines = damaged_lines()
    good = line_of(span_json(spanId="0000000000000008"))
    torn = good[: len(good) // 2]
    errors, on_error = collect_errors()
    records = list(
        iter_records([x + "\n" for x in lines] + [torn], source="mem", on_error=on_error)
    )
    assert [r.span_id for r in records] == [1, 2, 3, 4, 6, 7]
    check_errors(errors, "mem")


def test_damaged_file_reports_with_file_and_line(tmp_path: Path) -> None:
    lines = damaged_lines()
    good = line_of(span_json(spanId="0000000000000008"))
    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(lines) + "\n" + good[:-10])  # the writer died mid-line
    errors, on_error = collect_errors()
    records = list(read_otlp_json(path, on_error=on_error))
    assert [r.span_id for r in records] == [1, 2, 3, 4, 6, 7]
    check_errors(errors, str(path))


def test_default_error_handler_warns(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text(line_of(span_json()) + "\nnot json\n")
    with pytest.warns(SpanFormatWarning, match=r"spans.jsonl:2: invalid JSON"):
        records = list(read_otlp_json(path))
    assert len(records) == 1


def test_a_complete_last_line_without_newline_is_not_torn(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text(line_of(span_json()))
    errors, on_error = collect_errors()
    assert len(list(read_otlp_json(path, on_error=on_error))) == 1
    assert errors == []


def test_bad_resource_block_reports_once_and_keeps_other_blocks() -> None:
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "k", "value": {"oddValue": 1}}]},
                "scopeSpans": [{"spans": [span_json(), span_json()]}],
            },
            {"scopeSpans": [{"spans": [span_json(spanId="0000000000000009")]}]},
        ]
    }
    errors, on_error = collect_errors()
    records = list(iter_records([json.dumps(document)], on_error=on_error))
    assert [r.span_id for r in records] == [9]
    assert len(errors) == 1
    assert 'resourceSpans[0]: resource attribute "k": unknown value type' in str(errors[0])
    assert "2 span(s) skipped" in str(errors[0])
    assert errors[0].spans_lost == 2
    assert errors[0].located("spans.jsonl", 3).spans_lost == 2  # (kept with the location)


def test_empty_gzip_and_detected_gzip_files(tmp_path: Path) -> None:
    records = sdk_records()
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with gzip.open(tmp_path / "spans-00001.jsonl.gz", "wt") as out:
        out.write(encode_lines(records[:3]) + "\n")
    # gzip recognised by its magic bytes, whatever the name says
    (tmp_path / "spans-00002.jsonl").write_bytes(
        gzip.compress((encode_lines(records[3:]) + "\n").encode())
    )
    errors, on_error = collect_errors()
    assert list(read_otlp_json(tmp_path / "empty.jsonl", on_error=on_error)) == []
    assert_same_records(list(read_otlp_json(tmp_path, on_error=on_error)), records)
    assert errors == []


def test_truncated_gzip_keeps_the_lines_before_the_break(tmp_path: Path) -> None:
    lines = [line_of(span_json(spanId="%016x" % n)) + "\n" for n in range(1, 201)]
    data = gzip.compress("".join(lines).encode())
    path = tmp_path / "spans.jsonl.gz"
    path.write_bytes(data[: len(data) * 3 // 4])
    errors, on_error = collect_errors()
    records = list(read_otlp_json(path, on_error=on_error))
    assert 0 < len(records) < 200
    assert [r.span_id for r in records] == list(range(1, len(records) + 1))
    assert len(errors) == 1 and "compressed data ends" in str(errors[0])


def test_a_length_prefixed_file_is_one_error(tmp_path: Path) -> None:
    """The Collector's protobuf format, handed to the JSON reader: one error saying so."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    for name in ("a", "b"):
        tracer_provider.get_tracer("t").start_span(name).end()
    payload = encode_spans(exporter.get_finished_spans()).SerializeToString()
    path = tmp_path / "spans.json"
    path.write_bytes((len(payload).to_bytes(4, "big") + payload) * 3)
    errors, on_error = collect_errors()
    assert list(read_otlp_json(path, on_error=on_error)) == []
    assert len(errors) == 1 and "read_otlp_proto" in str(errors[0])


def test_binary_junk_and_a_first_line_starting_with_a_zero_byte_are_read_line_by_line(
    tmp_path: Path,
) -> None:
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\x00\x00\x01\x2a" + os.urandom(300).replace(b"\n", b"") + b"\n" + b"x")
    errors, on_error = collect_errors()
    assert list(read_otlp_json(junk, on_error=on_error)) == []
    assert [error.line for error in errors] == [1, 2]
    # A damaged first line may start with a zero byte, even look like a frame header: the
    # good lines after it still count.
    for first in (b"\x00", b"\x00abc", b"\x00\x00\x00"):
        damaged = tmp_path / "damaged.json"
        damaged.write_bytes(first + b"\n" + line_of(span_json()).encode() + b"\n")
        errors, on_error = collect_errors()
        records = list(read_otlp_json(damaged, on_error=on_error))
        assert [r.name for r in records] == ["s"], first
        assert [error.line for error in errors] == [1], first


def test_sources_directory_glob_list_and_missing(tmp_path: Path) -> None:
    records = sdk_records()
    with OtlpJsonLinesWriter(tmp_path / "run", max_bytes=1) as writer:
        for record in records:
            writer.write([record])  # max_bytes=1: one line per file
    (tmp_path / "run" / "README.txt").write_text("not spans")
    (tmp_path / "run" / ".hidden.jsonl").write_text("garbage")
    names = [p.name for p in writer.paths]
    assert names[:3] == ["spans.jsonl", "spans-00001.jsonl", "spans-00002.jsonl"]
    assert len(names) == len(records)

    errors, on_error = collect_errors()
    from_dir = list(read_otlp_json(tmp_path / "run", on_error=on_error))
    assert [r.span_id for r in from_dir] == [r.span_id for r in records]  # rotation order
    from_glob = list(read_otlp_json(str(tmp_path / "run" / "spans-*.jsonl"), on_error=on_error))
    assert [r.span_id for r in from_glob] == [r.span_id for r in records[1:]]
    from_list = list(read_otlp_json([writer.paths[0], str(tmp_path / "run")], on_error=on_error))
    assert len(from_list) == len(records)  # a file named twice is read once
    assert errors == []

    with pytest.raises(FileNotFoundError, match="nowhere"):
        read_otlp_json(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"\*\.nothing"):
        read_otlp_json(str(tmp_path / "*.nothing"))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(FileNotFoundError, match="empty_dir"):
        read_otlp_json(tmp_path / "empty_dir")


def test_reading_streams_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text(line_of(span_json(name="first")) + "\nbroken\n" + line_of(span_json()) + "\n")
    errors, on_error = collect_errors()
    stream = read_otlp_json(path, on_error=on_error)
    assert next(stream).name == "first"
    assert errors == []  # the broken second line has not been parsed yet
    assert len(list(stream)) == 1
    assert len(errors) == 1


# ------------------------------------------------------------------------------------------
# (e) the writer


def test_writer_rotates_by_size_and_never_splits_a_batch(tmp_path: Path) -> None:
    batch = [SpanRecord(1, n, 0, "s", 1, 2, {"pad": "x" * 200}) for n in range(1, 4)]
    line_size = len(encode_lines(batch)) + 1
    writer = OtlpJsonLinesWriter(tmp_path, max_bytes=line_size * 2 + 10)
    for _ in range(5):
        assert writer.write(batch) == line_size
    assert writer.write([]) == 0
    writer.close()
    assert [p.name for p in writer.paths] == [
        "spans.jsonl",
        "spans-00001.jsonl",
        "spans-00002.jsonl",
    ]
    contents = [p.read_text() for p in writer.paths]
    assert [c.count("\n") for c in contents] == [2, 2, 1]
    assert all(c.endswith("\n") for c in contents)
    assert len(list(read_otlp_json(tmp_path))) == 15

    big = OtlpJsonLinesWriter(tmp_path / "big", max_bytes=10)
    big.write(batch)  # larger than max_bytes: written whole, in its own file
    big.write(batch)
    big.close()
    assert [len(p.read_text()) for p in big.paths] == [line_size, line_size]


def test_writer_resumes_newest_file_and_repairs_a_torn_line(tmp_path: Path) -> None:
    good = encode_lines([SpanRecord(1, 1, 0, "before", 1, 2, {})])
    (tmp_path / "spans.jsonl").write_text(good + "\n")
    (tmp_path / "spans-00003.jsonl").write_text(good + "\n" + good[:25])  # crashed mid-line
    writer = OtlpJsonLinesWriter(tmp_path)
    assert writer.path.name == "spans-00003.jsonl"
    assert (tmp_path / "spans-00003.jsonl").read_text() == good + "\n"  # the torn line is cut
    writer.write([SpanRecord(1, 2, 0, "after", 1, 2, {})])
    writer.flush()
    writer.close()
    writer.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        writer.write([SpanRecord(1, 3, 0, "late", 1, 2, {})])

    errors, on_error = collect_errors()
    names = [r.name for r in read_otlp_json(tmp_path / "spans-00003.jsonl", on_error=on_error)]
    assert names == ["before", "after"]  # the new batch was not glued to the torn line
    assert errors == []


def test_writer_file_path_names_the_series(tmp_path: Path) -> None:
    target = tmp_path / "out" / "trace.jsonl"
    writer = OtlpJsonLinesWriter(target, max_bytes=1)
    writer.write([SpanRecord(1, 1, 0, "a", 1, 2, {})])
    writer.write([SpanRecord(1, 2, 0, "b", 1, 2, {})])
    writer.close()
    assert [p.name for p in writer.paths] == ["trace.jsonl", "trace-00001.jsonl"]
    with pytest.raises(ValueError, match="gzip"):
        OtlpJsonLinesWriter(tmp_path / "x.jsonl.gz")
    with pytest.raises(ValueError, match="max_bytes"):
        OtlpJsonLinesWriter(tmp_path, max_bytes=0)


def test_writer_output_round_trips_sdk_spans(tmp_path: Path) -> None:
    records = sdk_records()
    with OtlpJsonLinesWriter(tmp_path) as writer:
        writer.write(records[:4])
        writer.write(iter(records[4:]))  # any iterable
    assert_same_records(list(read_otlp_json(tmp_path / "spans.jsonl")), records)


def test_sdk_attribute_containers_encode_like_dicts() -> None:
    # Records built straight from SDK objects may hold the SDK's own mappings.
    span = TracerProvider().get_tracer("t").start_span("open", attributes={"a": 1, "b": "x"})
    span.set_attribute("c", (1.5,))
    plain_record = SpanRecord(1, 2, 0, "s", 1, None, {"a": 1, "b": "x", "c": (1.5,)})
    as_proxy = plain_record._replace(attributes=span.attributes)  # MappingProxyType
    as_bounded = plain_record._replace(attributes=span._attributes)  # BoundedAttributes
    span.end()
    assert type(span.attributes).__name__ == "mappingproxy"
    assert encode_lines([as_proxy]) == encode_lines([plain_record])
    assert encode_lines([as_bounded]) == encode_lines([plain_record])


def test_remote_parent_and_sampling_flags() -> None:
    remote = SpanRecord(1, 2, 3, "s", 1, 2, {}, parent_is_remote=True)
    unsampled = remote._replace(span_id=4, sampled=False)
    spans = json.loads(encode_lines([remote, unsampled]))["resourceSpans"][0]["scopeSpans"][0]
    assert [s["flags"] for s in spans["spans"]] == [0x301, 0x300]  # W3C byte: sampled or not
    # The Python SDK's exporter writes 0x100 / 0x300 and never the trace-flag byte, so a zero
    # byte must read as sampled (exported spans are): an unsampled span does not round-trip.
    decoded = decode_line(encode_lines([remote, unsampled]))
    assert [(r.parent_is_remote, r.sampled) for r in decoded] == [(True, True), (True, True)]
    others = decode_line(line_of(span_json(flags=0x100), span_json(flags=0x302), span_json()))
    assert [(r.parent_is_remote, r.sampled) for r in others] == [
        (False, True),
        (True, False),  # a set trace-flag byte without the sampled bit
        (False, True),
    ]
