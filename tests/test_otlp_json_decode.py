"""The one OTLP/JSON decoder reads a line's text exactly as it reads the parsed document.

Text is read by msgspec straight into structs, the parsed document (what ``json.loads`` gives,
and what tracing backends answer) is built into the same structs; anything the typed reading
cannot take, or any problem it meets, sends the text to ``json.loads`` and the document's way
(agenttrace/storage/otlp_json_decode.py). These tests read the same input every way: as a str
line and as a bytes line (iter_records), strictly (decode_line), and as the document
``json.loads`` makes of it (decode_document), and compare the records (by repr, so 1, 1.0 and
True differ) and the problems reported (by text). ``json.loads`` is the independent truth for
what is JSON at all.

Content validation (``codec.is_json``) is compared with ``json.loads`` too, with each JSON
reader the codec can use.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenttrace.storage import (
    SpanFormatError,
    decode_document,
    decode_line,
    encode_lines,
    iter_records,
    otlp_json_decode,
    read_otlp_json,
)
from agenttrace.trajectory import codec

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is in the test extra
    orjson = None

#: The JSON readers the codec's content check can use.
CODEC_MODES = ["json", *(["orjson"] if orjson is not None else []), "msgspec"]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upstream"


@contextlib.contextmanager
def codec_mode(name: str) -> Iterator[None]:
    """The codec's content check on the JSON reader ``name`` (restored afterwards)."""
    saved = codec._fast_loads
    try:
        codec._fast_loads = {
            "json": None,
            "orjson": orjson.loads if orjson is not None else None,
            "msgspec": msgspec.json.decode,
        }[name]
        yield
    finally:
        codec._fast_loads = saved


def read_lines(lines: list[str | bytes]) -> tuple[str, list[str]]:
    errors: list[SpanFormatError] = []
    records = list(iter_records(lines, source="s.jsonl", on_error=errors.append))
    return repr(records), [str(error) for error in errors]


def strict(line: str | bytes) -> str:
    try:
        return repr(decode_line(line))
    except SpanFormatError as error:
        return "error: %s" % error
    except RecursionError:  # pragma: no cover - not generated here
        return "RecursionError"


def document_records(document: Any) -> tuple[str, list[str]]:
    errors: list[SpanFormatError] = []
    return repr(decode_document(document, errors.append)), [str(e) for e in errors]


def line_error(line: str | bytes) -> str:
    """What iter_records reports for a line json.loads refuses: json's own words."""
    try:
        json.loads(line)
    except ValueError as error:
        return "s.jsonl:1: invalid JSON, line skipped: %s" % error
    raise AssertionError("json.loads reads %r" % line)


def assert_read_as_its_document(line: str | bytes) -> None:
    """A line (with its newline) reads as the document json.loads makes of it: the same records,
    and the document's problems located at the line; a line json.loads refuses is one problem
    in json's words."""
    got = read_lines([line])
    try:
        document = json.loads(line)
    except ValueError:
        assert got == ("[]", [line_error(line)])
        return
    records, errors = document_records(document)
    assert got == (records, ["s.jsonl:1: " + error for error in errors])


def assert_same_everywhere(text: str) -> None:
    """``text`` as a str line, a bytes line and strictly reads as the document json.loads makes
    of it: the same records and the same problems."""
    if not text.strip():
        assert read_lines([text + "\n"]) == ("[]", [])  # blank lines are skipped
        return
    assert_read_as_its_document(text + "\n")
    assert_read_as_its_document(text.encode("utf-8", "surrogatepass") + b"\n")  # (BOMs: json)
    assert_strictly_read_as_its_document(text)


def assert_strictly_read_as_its_document(line: str | bytes) -> None:
    """decode_line raises the document's first problem, or json's words for what is no JSON."""
    try:
        document = json.loads(line)
    except ValueError as error:
        assert strict(line) == "error: invalid JSON: %s" % error
        return
    records, errors = document_records(document)
    assert strict(line) == ("error: " + errors[0] if errors else records)


# ------------------------------------------------------------------------------------------
# documents: the common shape, and everything odd that can stand in each place

NUMBER_LITERALS = [
    "0",
    "-0",
    "7",
    "-3",
    "1.0",
    "1.5",
    "-0.0",
    "1E5",
    "2e19",
    "1e400",  # json: inf; orjson: refuses
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",  # beyond int64: orjson gives a float
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
    "NaN",
    "Infinity",
    "-Infinity",
]


class Raw(str):
    """A number literal written into the JSON text as it is (see ``dumps``)."""


def dumps(value: Any) -> str:
    """json.dumps, with ``Raw`` values spliced in unquoted (big, NaN, odd number literals)."""
    raws: list[str] = []

    def swap(item: Any) -> Any:
        if isinstance(item, Raw):
            raws.append(str(item))
            return "\x00raw%d\x00" % (len(raws) - 1)
        if isinstance(item, dict):
            return {k: swap(v) for k, v in item.items()}
        if isinstance(item, list):
            return [swap(v) for v in item]
        return item

    text = json.dumps(swap(value), ensure_ascii=False)
    for index, raw in enumerate(raws):
        text = text.replace('"\\u0000raw%d\\u0000"' % index, raw)
    return text


texts = st.text(max_size=12) | st.sampled_from(["", "é", "日本", "\U0001f600", "a\nb", "\ud800"])
numbers = st.sampled_from(NUMBER_LITERALS).map(Raw)
digit_strings = st.sampled_from(
    ["0", "42", "-5", "+5", " 7", "1_000", "٣", "1.5", "", "x", "18446744073709551616"]
)
odd = st.none() | st.booleans() | numbers | texts | st.just([]) | st.just({}) | st.just([1])


def hex_id(size: int) -> st.SearchStrategy[Any]:
    good = st.integers(1, 2 ** (8 * size) - 1).map(lambda n: "%0*x" % (2 * size, n))
    return st.one_of(
        good,
        good,
        good.map(str.upper),
        st.just("0" * 2 * size),
        st.integers(0, 2 ** (8 * size) - 1).map(
            lambda n: base64.b64encode(n.to_bytes(size, "big")).decode()
        ),
        st.just("0x" + "1" * (2 * size - 2)),
        st.just("1_" + "2" * (2 * size - 2)),
        st.just(" " + "3" * (2 * size - 1)),
        st.just("g" * 2 * size),
        odd,
    )


def any_values(depth: int = 2) -> st.SearchStrategy[Any]:
    scalar = st.one_of(
        texts.map(lambda s: {"stringValue": s}),
        st.integers(-(2**70), 2**70).map(lambda n: {"intValue": str(n)}),
        digit_strings.map(lambda s: {"intValue": s}),
        st.integers(-(2**70), 2**70).map(lambda n: {"intValue": n}),  # as a number
        numbers.map(lambda n: {"intValue": n}),
        st.floats(allow_nan=False, allow_infinity=False).map(lambda f: {"doubleValue": f}),
        numbers.map(lambda n: {"doubleValue": n}),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1.5", "nan", "x", " 2 "]).map(
            lambda s: {"doubleValue": s}
        ),
        st.booleans().map(lambda b: {"boolValue": b}),
        st.binary(max_size=6).map(lambda b: {"bytesValue": base64.b64encode(b).decode()}),
        st.sampled_from(["!!", "QQ", "_-8"]).map(lambda s: {"bytesValue": s}),
        st.just({}),  # an empty AnyValue: no value
        st.none(),
        odd.map(lambda v: {"stringValue": v}),
        odd.map(lambda v: {"boolValue": v}),
        st.just({"stringValue": "a", "intValue": "1"}),  # two fields: the first decides
        st.just({"intValue": "1", "stringValue": "a"}),
        st.just({"madeUpValue": 1}),
        odd,
    )
    if depth == 0:
        return scalar
    inner = any_values(depth - 1)
    return st.one_of(
        scalar,
        scalar,
        st.lists(inner, max_size=3).map(lambda vs: {"arrayValue": {"values": vs}}),
        st.just({"arrayValue": {}}),
        st.lists(st.tuples(texts, inner), max_size=3).map(
            lambda kvs: {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in kvs]}}
        ),
        st.just({"kvlistValue": {"values": "x"}}),
    )


common_keys = st.sampled_from(
    ["rl.episode.id", "rl.timestep.index", "rl.reward", "rl.observation", "service.name"]
)
key_values = st.one_of(
    st.tuples(common_keys | texts, any_values()).map(lambda kv: {"key": kv[0], "value": kv[1]}),
    st.tuples(common_keys, any_values()).map(lambda kv: {"key": kv[0], "value": kv[1]}),
    odd.map(lambda k: {"key": k, "value": {"stringValue": "x"}}),
    st.just({"key": "no value"}),
    odd,
)
attributes = st.lists(key_values, max_size=4) | odd
nanos = st.one_of(
    st.integers(0, 2**63).map(str),
    st.integers(0, 2**63),
    digit_strings,
    numbers,
    odd,
)
events = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "name": texts | odd,
            "timeUnixNano": nanos,
            "attributes": attributes,
            "droppedAttributesCount": st.integers(0, 3),
        },
    )
    | odd,
    max_size=2,
)
links = st.lists(
    st.fixed_dictionaries(
        {"traceId": hex_id(16), "spanId": hex_id(8)},
        optional={"attributes": attributes, "traceState": texts},
    )
    | odd,
    max_size=2,
)
statuses = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {},
        optional={
            "code": st.sampled_from([0, 1, 2, 3, "STATUS_CODE_ERROR", "OK", True]) | numbers,
            "message": texts | odd,
        },
    ),
    odd,
)
kinds = st.sampled_from([0, 1, 2, 3, 4, 5, 6, "SPAN_KIND_SERVER", "CLIENT", "x", True]) | numbers
flags = st.sampled_from([0, 1, 0x100, 0x300, 0x301, 0x201, 768]) | numbers | odd


def spans() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"traceId": hex_id(16), "spanId": hex_id(8)},
        optional={
            "parentSpanId": hex_id(8) | st.just(""),
            "name": st.sampled_from(["episode", "timestep", "env.step", "chat m"]) | texts | odd,
            "kind": kinds,
            "startTimeUnixNano": nanos,
            "endTimeUnixNano": nanos,
            "attributes": attributes,
            "events": events | odd,
            "links": links | odd,
            "status": statuses,
            "flags": flags,
            "traceState": texts,
            "droppedAttributesCount": st.integers(0, 3),
        },
    )


def scope_blocks() -> st.SearchStrategy[Any]:
    scope = st.fixed_dictionaries(
        {}, optional={"name": texts | odd, "version": texts | odd, "attributes": attributes}
    )
    return st.one_of(
        st.fixed_dictionaries(
            {"spans": st.lists(spans() | odd, max_size=3)},
            optional={"scope": scope | odd, "schemaUrl": texts},
        ),
        st.fixed_dictionaries(  # OTLP < 0.15
            {"instrumentationLibrary": scope, "spans": st.lists(spans(), max_size=2)}
        ),
        st.fixed_dictionaries({}, optional={"spans": odd}),
        odd,
    )


resource_blocks = st.one_of(
    st.fixed_dictionaries(
        {"scopeSpans": st.lists(scope_blocks(), max_size=2)},
        optional={
            "resource": st.fixed_dictionaries({}, optional={"attributes": attributes}) | odd,
            "schemaUrl": texts,
        },
    ),
    st.fixed_dictionaries({"instrumentationLibrarySpans": st.lists(scope_blocks(), max_size=2)}),
    st.fixed_dictionaries({}, optional={"scopeSpans": odd}),
    odd,
)
documents = st.one_of(
    st.fixed_dictionaries({"resourceSpans": st.lists(resource_blocks, max_size=3)}),
    st.fixed_dictionaries({"batches": st.lists(resource_blocks, max_size=2)}),  # Tempo < 2.6
    st.just({"resourceLogs": []}),
    st.fixed_dictionaries({"resourceSpans": odd}),
    odd,
)


def common_span(draw: st.DrawFn) -> dict:
    """A span in exactly the shape agenttrace and the Collector write (the fast path's)."""
    attrs = draw(
        st.lists(
            st.tuples(
                common_keys | texts,
                st.one_of(
                    texts.map(lambda s: {"stringValue": s}),
                    st.integers(-(2**63), 2**63 - 1).map(lambda n: {"intValue": str(n)}),
                    st.floats(-1e18, 1e18).map(lambda f: {"doubleValue": f}),  # below 2**63
                    st.booleans().map(lambda b: {"boolValue": b}),
                    st.lists(texts, max_size=3).map(
                        lambda xs: {"arrayValue": {"values": [{"stringValue": x} for x in xs]}}
                    ),
                ),
            ),
            max_size=6,
        )
    )
    span = {
        "traceId": "%032x" % draw(st.sampled_from([1, 2**127 + 5, 2**128 - 1])),
        "spanId": "%016x" % draw(st.integers(1, 2**64 - 1)),
        "name": draw(texts),
        "kind": draw(st.integers(0, 5)),
        "startTimeUnixNano": str(draw(st.integers(0, 2**63))),
        "endTimeUnixNano": str(draw(st.integers(0, 2**63))),
        "attributes": [{"key": k, "value": v} for k, v in attrs],
        "status": draw(st.sampled_from([{}, {"code": 1}, {"code": 2, "message": "boom"}])),
    }
    if draw(st.booleans()):
        span["parentSpanId"] = "%016x" % draw(st.integers(1, 2**64 - 1))
    return span


STRING = {"stringValue": "s"}


@st.composite
def common_documents(draw: st.DrawFn) -> dict:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": STRING}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "agenttrace", "version": "0.1.0"},
                        "spans": [common_span(draw) for _ in range(draw(st.integers(0, 4)))],
                    }
                ],
            }
        ]
    }


SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(documents)
def test_odd_documents_read_the_same_every_way(document: Any) -> None:
    assert_same_everywhere(dumps(document))


@SETTINGS
@given(common_documents())
def test_common_documents_read_the_same_every_way(document: Any) -> None:
    assert_same_everywhere(dumps(document))


def typed_records(text: str | bytes) -> str | None:
    """The records of ``text`` read by msgspec into the structs, if it reads them there (None
    when the text goes to json.loads and the document's way)."""
    request = otlp_json_decode._typed(text)
    if request is None:
        return None

    def read_again(error: SpanFormatError) -> None:
        raise AssertionError("read again: %s" % error)

    return repr(otlp_json_decode._records(request.resourceSpans, read_again))


@SETTINGS
@given(common_documents())
def test_common_documents_are_read_by_msgspec(document: Any) -> None:
    text = dumps(document)
    typed = typed_records(text)
    assert (typed is None) == ("\ud800" in text)  # msgspec refuses lone surrogates; json not
    assert typed is None or typed == document_records(json.loads(text))[0]


@SETTINGS
@given(common_documents(), st.data())
def test_one_odd_value_anywhere_reads_the_same_every_way(document: Any, data: st.DataObject):
    """A common document with one value swapped for something odd, or one field left out."""
    spans_ = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    if spans_:
        span = data.draw(st.sampled_from(spans_))
        key = data.draw(st.sampled_from(sorted(span)))
        if data.draw(st.booleans()):
            del span[key]  # absent: a default, or an error
        elif key == "attributes" and span["attributes"]:
            item = data.draw(st.sampled_from(span["attributes"]))
            item["value"] = data.draw(any_values())
        else:
            span[key] = data.draw(odd | numbers)
    assert_same_everywhere(dumps(document))


_FIELDS = {
    "stringValue": "s",
    "intValue": "3",
    "doubleValue": 1.5,
    "boolValue": True,
    "arrayValue": {"values": [{"stringValue": "a"}]},
    "kvlistValue": {"values": [{"key": "k", "value": {"intValue": "1"}}]},
    "bytesValue": "QQ==",
    "madeUpValue": 1,
}


@pytest.mark.parametrize("first", sorted(_FIELDS))
@pytest.mark.parametrize("second", [None, *sorted(_FIELDS)])
def test_values_with_several_fields_read_the_same_every_way(first: str, second: str | None) -> None:
    """An AnyValue is read by its first field; structs do not know the order."""
    value = {first: _FIELDS[first]}
    if second is not None:
        value[second] = _FIELDS[second]
    document = _number_in("intValue", "7")
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "several", "value": value})
    assert_same_everywhere(dumps(document))


@pytest.mark.parametrize(
    "key",
    ["name", "kind", "parentSpanId", "startTimeUnixNano", "endTimeUnixNano", "attributes",
     "status", "flags", "events", "links", "traceId", "spanId"],
)  # fmt: skip
@pytest.mark.parametrize("value", ["absent", None, 0, "", [], {}])
def test_absent_and_empty_fields_read_the_same_every_way(key: str, value: Any) -> None:
    span = _number_in("intValue", "7")["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["flags"] = 0x301
    if value == "absent":
        span.pop(key, None)
    else:
        span[key] = value
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    assert_same_everywhere(dumps(document))


def _number_in(place: str, literal: str) -> dict:
    """A common span with ``literal`` (unquoted) at ``place``."""
    number = Raw(literal)
    span: dict[str, Any] = {
        "traceId": "%032x" % 7,
        "spanId": "%016x" % 9,
        "name": "env.step",
        "kind": 1,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": "k", "value": {"stringValue": "v"}}],
        "status": {},
    }
    if place in ("startTimeUnixNano", "endTimeUnixNano", "kind", "flags"):
        span[place] = number
    elif place == "status.code":
        span["status"] = {"code": number}
    elif place == "event time":
        span["events"] = [{"name": "e", "timeUnixNano": number}]
    elif place == "event attribute":
        attributes = [{"key": "n", "value": {"intValue": number}}]
        span["events"] = [{"name": "e", "attributes": attributes}]
    elif place == "array item":
        span["attributes"].append(
            {"key": "a", "value": {"arrayValue": {"values": [{"doubleValue": number}]}}}
        )
    elif place == "kvlist item":
        kv = {"values": [{"key": "n", "value": {"intValue": number}}]}
        span["attributes"].append({"key": "m", "value": {"kvlistValue": kv}})
    elif place == "resource":
        return {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "r", "value": {"intValue": number}}]},
                    "scopeSpans": [{"spans": [span]}],
                }
            ]
        }
    else:  # an attribute's value field
        span["attributes"].append({"key": "n", "value": {place: number}})
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "s"}, "spans": [span]}]}]}


@pytest.mark.parametrize("literal", NUMBER_LITERALS)
@pytest.mark.parametrize(
    "place",
    ["startTimeUnixNano", "endTimeUnixNano", "kind", "flags", "status.code", "event time",
     "event attribute", "array item", "kvlist item", "resource", "intValue", "doubleValue",
     "boolValue", "stringValue"],
)  # fmt: skip
def test_every_number_literal_anywhere_reads_the_same_every_way(place: str, literal: str) -> None:
    """Integers beyond 64 bits, NaN, 1e400 (which msgspec refuses), -0 ... everywhere."""
    assert_same_everywhere(dumps(_number_in(place, literal)))


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "not json",
        '{"resourceSpans": [',  # torn
        "[]",
        "{}",
        '{"resourceSpans": []} trailing',
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": NaN}]}]}]}',
        '\ufeff{"resourceSpans": []}',
        '{"resourceSpans": [], "resourceSpans": null}',  # duplicate keys: the last counts
        '{"resourceSpans": null, "resourceSpans": []}',
    ],
)
def test_odd_lines_read_the_same_every_way(line: str) -> None:
    assert_same_everywhere(line)


_SPAN = (
    '{"traceId":"%032x","spanId":"%016x","name":"é","attributes":[{"key":"k","value":'
    '{"stringValue":"ü"}}]}' % (5, 6)
)


@pytest.mark.parametrize(
    "line",
    [
        b'{"resourceSpans":[],"x":"\xff"}',  # not UTF-8, in a field no one reads
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}],"x":"\xc3"}' % _SPAN.encode(),
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}],"x":"\xed\xa0\x80"}'
        % _SPAN.encode(),  # a surrogate encoded in UTF-8: json reads it (surrogatepass)
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % _SPAN.encode(),
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % _SPAN.encode("utf-16"),
        b'\xef\xbb\xbf{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % _SPAN.encode(),
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}],"x":"\\ud800"}' % _SPAN.encode(),
    ],
)
def test_byte_lines_read_as_json_loads_reads_them(line: bytes) -> None:
    assert_read_as_its_document(line + b"\n")
    assert_strictly_read_as_its_document(line)


def test_torn_last_line_is_reported_as_torn() -> None:
    good = encode_lines(list(read_otlp_json(FIXTURES / "otlp" / "trace.json")))
    records, errors = read_lines([good + "\n", good[:-7]])
    assert len(errors) == 1 and "torn last line" in errors[0]
    assert records == read_lines([good + "\n"])[0] != "[]"


def test_real_files_read_as_their_documents(cartpole_run: tuple[list, list]) -> None:
    """The CartPole run's spans, and the upstream samples (every file in fixtures/upstream)."""
    _, records = cartpole_run
    lines = [encode_lines(records[i : i + 40]) for i in range(0, len(records), 40)]
    assert read_lines(lines) == (repr(records), [])
    samples = [p for p in (FIXTURES / "otlp").rglob("*.json*") if p.is_file()]
    assert samples
    for path in samples:  # (each one pretty-printed document)
        errors: list[SpanFormatError] = []
        got = repr(list(read_otlp_json(path, on_error=errors.append)))
        expected, expected_errors = document_records(json.loads(path.read_bytes()))
        assert got == expected
        assert [str(e) for e in errors] == ["%s:1: %s" % (path, e) for e in expected_errors]


def test_agenttraces_own_lines_are_read_by_msgspec(cartpole_run: tuple[list, list]) -> None:
    """What agenttrace writes is never read twice."""
    _, records = cartpole_run
    line = encode_lines(records)
    assert typed_records(line.encode()) == typed_records(line) == repr(records)


# ------------------------------------------------------------------------------------------
# content validation: is_json says what json.loads says

json_fragments = st.sampled_from(
    ["{", "}", "[", "]", ",", ":", '"', "\\", "1", "-", ".", "e", "NaN", "null", "true", " ", "\n",
     "\ud800", "\\ud800", "é", "1e400", "123456789012345678901234567890", "\ufeff", "\x00", "\t"]
)  # fmt: skip
json_like = st.lists(json_fragments | st.text(max_size=3), max_size=12).map("".join)
json_texts = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
).map(json.dumps)


def json_loads_accepts(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@SETTINGS
@given(json_like | json_texts | json_texts.map(lambda t: t[: len(t) // 2]) | st.text(max_size=20))
def test_is_json_agrees_with_json_loads(text: str) -> None:
    expected = json_loads_accepts(text)
    for name in CODEC_MODES:
        with codec_mode(name):
            codec._KNOWN_JSON.clear()
            codec._last_json = None
            assert codec.is_json(text) is expected, name
            assert codec.is_json(text) is expected, name  # again, from the memo if short
            raw = codec.as_raw_json(text, trusted=False)
            assert type(raw) is (codec.RawJSON if expected else str) and raw == text


def test_is_json_leaves_deep_nesting_to_json() -> None:
    """Nesting json cannot read (RecursionError) is not declared valid by orjson instead."""
    for depth in (10, 499, 600, 995, 1010, 5000):
        text = "[" * depth + "]" * depth
        try:
            expected: Any = json_loads_accepts(text)
        except RecursionError:
            expected = RecursionError
        for name in CODEC_MODES:
            with codec_mode(name):
                try:
                    got: Any = codec.is_json(text)
                except RecursionError:
                    got = RecursionError
                assert got == expected, (name, depth)
