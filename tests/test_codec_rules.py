"""The value encoding, rule by rule (agenttrace/trajectory/codec.py, docs/trajectory-format.md):
each type's JSON written out by hand, the nesting limit at its exact edge, secrets at any
depth, and what a damaged tag reads as."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import json
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from agenttrace.trajectory import codec
from agenttrace.trajectory.codec import MAX_DEPTH, ValueDecodeError
from agenttrace.trajectory.equality import values_equal
from agenttrace.trajectory.kept_tags import Tagged


class Color(enum.Enum):
    RED = "r"


@dataclasses.dataclass
class Point:
    x: int
    y: Any = None


def _depth(data: Any) -> int:
    """Levels of lists and objects in parsed JSON (a scalar: 0), counted here, not by the
    codec."""
    if isinstance(data, dict):
        return 1 + max((_depth(v) for v in data.values()), default=0)
    if isinstance(data, list):
        return 1 + max((_depth(v) for v in data), default=0)
    return 0


@contextlib.contextmanager
def _at_module_level(cls: type) -> Iterator[None]:
    """A class made in a test, importable by its path (test_codec_rules:Name) meanwhile."""
    globals()[cls.__name__] = cls
    cls.__qualname__ = cls.__name__
    try:
        yield
    finally:
        del globals()[cls.__name__]


def _nest(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


# --- $float: only what the encoder writes -----------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [("nan", math.nan), ("inf", math.inf)])
def test_float_tags_read_back(text, expected) -> None:
    assert values_equal(codec.decode({"$float": text}), expected)
    assert codec.decode({"$float": "-inf"}) == -math.inf


@pytest.mark.parametrize("body", [False, True, 0, 1.5, "12.5", "INF", "NaN", "Infinity", None, []])
def test_a_damaged_float_tag_is_reported_like_any_malformed_tag(body) -> None:
    with pytest.raises(ValueDecodeError, match=r"^malformed \$float value: "):
        codec.decode({"$float": body})
    with pytest.raises(ValueDecodeError, match=r"^malformed \$float value: "):
        codec.loads(json.dumps({"a": [{"$float": body}]}))
    with pytest.raises(ValueDecodeError, match=r"^malformed \$tuple value: "):  # (the same way)
        codec.decode({"$tuple": 5})


def test_non_finite_floats_are_written_as_tags() -> None:
    assert codec.dumps(math.nan) == '{"$float":"nan"}'
    assert codec.dumps(math.inf) == '{"$float":"inf"}'
    assert codec.dumps(-math.inf) == '{"$float":"-inf"}'
    assert codec.dumps([1.5, -0.0]) == "[1.5,-0.0]"
    assert codec.encode(math.inf) == {"$float": "inf"}


# --- each type, written by hand ---------------------------------------------------------------

_WRITTEN = [
    (None, "null"),
    (True, "true"),
    (False, "false"),
    (7, "7"),
    ("é", '"é"'),
    ((1, "a"), '{"$tuple":[1,"a"]}'),
    (b"hi", '{"$bytes":"aGk="}'),
    (bytearray(b"hi"), '{"$bytes":"aGk="}'),
    ({1: "a", "b": 2}, '{"$dict":[[1,"a"],["b",2]]}'),
    ({"$x": 1}, '{"$dict":[["$x",1]]}'),  # (one key starting with $: would read as a tag)
    ({"$x": 1, "y": 2}, '{"$x":1,"y":2}'),
    ({3, 1, 2}, '{"$set":[1,2,3]}'),
    (frozenset({"b", "a"}), '{"$frozenset":["a","b"]}'),
    (np.array([1, 2], dtype="<i8"), '{"$ndarray":{"dtype":"<i8","shape":[2],"data":[1,2]}}'),
    (np.array([[True]]), '{"$ndarray":{"dtype":"|b1","shape":[1,1],"data":[[true]]}}'),
    (np.array([0.5, 1.0]), '{"$ndarray":{"dtype":"<f8","shape":[2],"data":[0.5,1.0]}}'),
    (np.array([0.5], dtype="<f4"), '{"$ndarray":{"dtype":"<f4","shape":[1],"data":[0.5]}}'),
    (np.array(["ab"]), '{"$ndarray":{"dtype":"<U2","shape":[1],"data":["ab"]}}'),
    (np.float32(2.0), '{"$numpy":{"dtype":"<f4","value":2.0}}'),
    (np.int8(-3), '{"$numpy":{"dtype":"|i1","value":-3}}'),
    (np.bool_(True), '{"$numpy":{"dtype":"|b1","value":true}}'),
    (np.float64("nan"), '{"$numpy":{"dtype":"<f8","value":{"$float":"nan"}}}'),
    (Color.RED, '{"$enum":{"type":"test_codec_rules:Color","value":"r"}}'),
    (
        Point(1, (2,)),
        '{"$dataclass":{"type":"test_codec_rules:Point","fields":{"x":1,"y":{"$tuple":[2]}}}}',
    ),
    (dt.datetime(2024, 5, 6, 7, 8, 9), '{"$datetime":"2024-05-06T07:08:09"}'),
    (dt.date(2024, 5, 6), '{"$date":"2024-05-06"}'),
]


@pytest.mark.parametrize(("value", "text"), _WRITTEN, ids=[repr(v)[:30] for v, _ in _WRITTEN])
def test_each_type_is_written_as_the_format_says(value, text) -> None:
    assert codec.dumps(value) == text
    assert codec.encode(value) == json.loads(text)
    back = codec.loads(text)
    if isinstance(value, bytearray):
        assert back == bytes(value) and type(back) is bytes
    else:
        assert values_equal(back, value)
        assert type(back) is type(value)


def test_arrays_not_inlined_are_raw_bytes() -> None:
    with_nan = np.array([1.0, math.nan])
    assert codec.encode(with_nan) == {
        "$ndarray": {"dtype": "<f8", "shape": [2], "b64": "AAAAAAAA8D8AAAAAAAD4fw=="}
    }
    big = np.zeros(1025, dtype="<i2")
    body = codec.encode(big)["$ndarray"]
    assert set(body) == {"dtype", "shape", "b64"} and body["shape"] == [1025]
    assert len(codec.encode(np.zeros(1024, dtype="<i2"))["$ndarray"]["data"]) == 1024
    complex_ = np.array([1 + 2j])
    assert "b64" in codec.encode(complex_)["$ndarray"]
    for value in (with_nan, big, complex_):
        assert values_equal(codec.loads(codec.dumps(value)), value)


def test_object_arrays_hold_encoded_items() -> None:
    array = np.empty(2, dtype=object)
    array[:] = [(1,), None]
    assert codec.encode(array) == {
        "$ndarray": {"dtype": "|O", "shape": [2], "data": [{"$tuple": [1]}, None]}
    }
    back = codec.loads(codec.dumps(array))
    assert back.dtype == object and back.tolist() == [(1,), None]


def test_numpy_scalars_without_a_json_value_are_raw_bytes() -> None:
    value = np.complex64(1 + 2j)
    body = codec.encode(value)["$numpy"]
    assert body["dtype"] == "<c8" and set(body) == {"dtype", "b64"}
    assert codec.loads(codec.dumps(value)) == value
    moment = np.datetime64("2024-01-02", "D")
    assert set(codec.encode(moment)["$numpy"]) == {"dtype", "b64"}
    assert codec.loads(codec.dumps(moment)) == moment
    assert codec.decode({"$numpy": {"dtype": "<M8[D]", "value": 3}}) == np.datetime64(3, "D")


def test_subclasses_are_written_as_their_base() -> None:
    class Flag(int):
        pass

    class Text(str):
        pass

    class Items(list):
        pass

    class Number(float):
        pass

    assert codec.encode(Flag(3)) == 3 and type(codec.encode(Flag(3))) is int
    assert codec.encode(Text("a")) == "a" and type(codec.encode(Text("a"))) is str
    assert codec.encode(Items([1, (2,)])) == [1, {"$tuple": [2]}]
    assert codec.encode(Number(math.inf)) == {"$float": "inf"}
    assert codec.encode(Number(0.5)) == 0.5


def test_unknown_objects_fall_back_to_their_repr(monkeypatch) -> None:
    monkeypatch.setattr(codec, "_warned_types", set())  # (warned once per type and process)

    class Thing:
        def __repr__(self) -> str:
            return "T" * 1500

    with pytest.warns(codec.UnserializableValueWarning):
        data = codec.encode(Thing())
    body = data["$unserializable"]
    assert body["type"].endswith("Thing") and body["repr"] == "T" * 1000

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError

    with pytest.warns(codec.UnserializableValueWarning):
        assert codec.encode(Broken())["$unserializable"]["repr"] == "<repr failed: RuntimeError>"
    back = codec.loads(codec.dumps(Thing()))
    assert type(back) is Tagged and back == data


# --- secrets at any depth ---------------------------------------------------------------------


def test_secrets_are_redacted_below_the_top_level() -> None:
    value = {
        "outer": {"api_key": "s1", "fine": 1, "inner": [{"password": "s2"}]},
        "pairs": {1: "x", "token": "s3"},
        "tuple": ({"Authorization": "s4"},),
        "max_tokens": 5,  # (a count, not a secret)
    }
    expected = {
        "outer": {"api_key": "[REDACTED]", "fine": 1, "inner": [{"password": "[REDACTED]"}]},
        "pairs": {"$dict": [[1, "x"], ["token", "[REDACTED]"]]},
        "tuple": {"$tuple": [{"Authorization": "[REDACTED]"}]},
        "max_tokens": 5,
    }
    assert codec.encode(value, redact_secrets=True) == expected
    assert json.loads(codec.dumps(value, redact_secrets=True)) == expected
    assert codec.encode(value)["outer"]["api_key"] == "s1"  # (only when asked)
    assert codec.encode(value)["pairs"] == {"$dict": [[1, "x"], ["token", "s3"]]}


def test_secrets_are_redacted_in_kept_tags_and_in_deep_values() -> None:
    kept = codec.loads('{"$blob": {"ref": "r", "secret": "s"}}')
    assert type(kept) is Tagged
    assert codec.encode({"k": kept}, redact_secrets=True) == {
        "k": {"$blob": {"ref": "r", "secret": "[REDACTED]"}}
    }
    assert codec.encode({"k": kept}) == {"k": {"$blob": {"ref": "r", "secret": "s"}}}
    deep = _nest({"password": "s", "a": 1}, MAX_DEPTH)  # one level too deep
    text = codec.encode(deep, redact_secrets=True)["$json"]
    assert json.loads(text) == _nest({"password": "[REDACTED]", "a": 1}, MAX_DEPTH)
    pairs = _nest({"token": "s", 2: 3}, MAX_DEPTH)
    text = codec.encode(pairs, redact_secrets=True)["$json"]
    assert json.loads(text) == _nest({"$dict": [["token", "[REDACTED]"], [2, 3]]}, MAX_DEPTH)
    assert json.loads(codec.encode(deep)["$json"]) == _nest({"password": "s", "a": 1}, MAX_DEPTH)


def test_secrets_are_redacted_in_a_kept_tag_too_deep_to_encode() -> None:
    """A kept tag nested past the limit is written as its data's JSON text: redacted too."""
    inner = _nest({"token": "s", "ok": [{"api_key": "k", "n": 1}]}, 300)
    kept = Tagged({"$blob": inner})
    text = codec.dumps({"k": kept}, redact_secrets=True)
    assert json.loads(json.loads(text)["$json"]) == {
        "k": {
            "$blob": _nest({"token": "[REDACTED]", "ok": [{"api_key": "[REDACTED]", "n": 1}]}, 300)
        }
    }
    assert json.loads(json.loads(codec.dumps({"k": kept}))["$json"]) == {"k": {"$blob": inner}}
    deepest = inner
    while type(deepest) is list:
        deepest = deepest[0]
    assert deepest == {"token": "s", "ok": [{"api_key": "k", "n": 1}]}  # the data is untouched


# --- the nesting limit, at its edge -----------------------------------------------------------

# Each value and the levels its JSON adds around its innermost scalar, counted by hand.
_LEVELS = [
    ("list", lambda: [1], [1], 1),
    ("dict", lambda: {"a": 1}, {"a": 1}, 1),
    ("tuple", lambda: (1,), {"$tuple": [1]}, 2),
    ("set", lambda: {1}, {"$set": [1]}, 2),
    ("pairs", lambda: {1: 2}, {"$dict": [[1, 2]]}, 3),
    (
        "array",
        lambda: np.array([[1]], dtype="<i8"),
        {"$ndarray": {"dtype": "<i8", "shape": [1, 1], "data": [[1]]}},
        4,
    ),
    (
        "object array",
        lambda: np.array([None], dtype=object),
        {"$ndarray": {"dtype": "|O", "shape": [1], "data": [None]}},
        3,
    ),
    (
        "dataclass",
        lambda: Point(1),
        {"$dataclass": {"type": "test_codec_rules:Point", "fields": {"x": 1, "y": None}}},
        3,
    ),
]


_LEVELS += [
    ("list in a dict", lambda: {"a": [1]}, {"a": [1]}, 2),
    ("list in a tuple", lambda: ([1],), {"$tuple": [[1]]}, 3),
    ("list in pairs", lambda: {1: [2]}, {"$dict": [[1, [2]]]}, 4),
    ("tuple key", lambda: {(1,): 2}, {"$dict": [[{"$tuple": [1]}, 2]]}, 5),
    (
        "list in an object array",
        lambda: np.array([None, [1]], dtype=object)[1:],
        {"$ndarray": {"dtype": "|O", "shape": [1], "data": [[1]]}},
        4,
    ),
    # tags whose body is a scalar, or an object of scalars: the tag's levels alone
    ("bytes", lambda: b"x", {"$bytes": "eA=="}, 1),
    ("datetime", lambda: dt.datetime(2024, 1, 2), {"$datetime": "2024-01-02T00:00:00"}, 1),
    ("date", lambda: dt.date(2024, 1, 2), {"$date": "2024-01-02"}, 1),
    ("nan", lambda: math.nan, {"$float": "nan"}, 1),
    ("enum", lambda: Color.RED, {"$enum": {"type": "test_codec_rules:Color", "value": "r"}}, 2),
    ("numpy scalar", lambda: np.int8(3), {"$numpy": {"dtype": "|i1", "value": 3}}, 2),
    (
        "numpy nan",
        lambda: np.float64("nan"),
        {"$numpy": {"dtype": "<f8", "value": {"$float": "nan"}}},
        3,
    ),
    (
        "numpy bytes",
        lambda: np.complex64(1),
        {"$numpy": {"dtype": "<c8", "b64": "AACAPwAAAAA="}},
        2,
    ),
    (
        "raw array",
        lambda: np.zeros(1, dtype="<c8"),
        {"$ndarray": {"dtype": "<c8", "shape": [1], "b64": "AAAAAAAAAAA="}},
        3,
    ),
]


@pytest.mark.parametrize(
    ("make", "data", "levels"), [c[1:] for c in _LEVELS], ids=[c[0] for c in _LEVELS]
)
def test_a_value_is_kept_as_it_is_up_to_max_depth_levels(make, data, levels) -> None:
    assert MAX_DEPTH == 256
    inside = MAX_DEPTH - levels
    fits = _nest(make(), inside)
    assert codec.encode(fits) == _nest(data, inside)
    assert _depth(json.loads(codec.dumps(fits))) == MAX_DEPTH
    assert values_equal(codec.loads(codec.dumps(fits)), fits)


@pytest.mark.parametrize(
    ("make", "data", "levels"), [c[1:] for c in _LEVELS], ids=[c[0] for c in _LEVELS]
)
def test_the_json_text_of_a_too_deep_value_is_that_value(make, data, levels) -> None:
    inside = MAX_DEPTH - levels + 1
    deep = _nest(make(), inside)
    encoded = codec.encode(deep)
    assert set(encoded) == {"$json"}
    assert json.loads(encoded["$json"]) == _nest(data, inside)  # valid JSON, of this value
    assert codec.dumps(deep) == json.dumps(encoded, ensure_ascii=False, separators=(",", ":"))
    back = codec.loads(codec.dumps(deep))
    assert type(back) is Tagged and back == encoded
    assert codec.dumps(back) == codec.dumps(deep)  # (kept: written back as read)


def test_the_fallback_counts_its_two_levels(monkeypatch) -> None:
    monkeypatch.setattr(codec, "_warned_types", set())

    class Opaque:
        def __repr__(self) -> str:
            return "O"

    body = {"$unserializable": {"type": "test_codec_rules:Opaque", "repr": "O"}}
    Opaque.__qualname__ = "Opaque"
    with pytest.warns(codec.UnserializableValueWarning):
        assert codec.encode(_nest(Opaque(), MAX_DEPTH - 2)) == _nest(body, MAX_DEPTH - 2)
    deep = codec.encode(_nest(Opaque(), MAX_DEPTH - 1))
    assert set(deep) == {"$json"} and json.loads(deep["$json"]) == _nest(body, MAX_DEPTH - 1)


def test_decoding_keeps_data_nested_past_max_depth_as_its_text() -> None:
    fits, deep = _nest(1, MAX_DEPTH), _nest(1, MAX_DEPTH + 1)
    assert codec.decode(fits) == fits and codec.loads(json.dumps(fits)) == fits
    text = json.dumps(deep, separators=(",", ":"))
    assert codec.decode(deep) == {"$json": text}
    assert codec.loads(text) == {"$json": text}
    tagged = _nest({"$tuple": [1]}, MAX_DEPTH - 2)  # 256 levels with the tuple's two
    assert codec.decode(tagged) == _nest((1,), MAX_DEPTH - 2)
    too_deep = _nest({"$tuple": [[1]]}, MAX_DEPTH - 2)
    assert codec.decode(too_deep) == {"$json": json.dumps(too_deep, separators=(",", ":"))}
    pairs = _nest({"$dict": [[1, [2]]]}, MAX_DEPTH - 4)  # 3 levels + the value's list
    assert codec.decode(pairs) == _nest({1: [2]}, MAX_DEPTH - 4)
    assert set(codec.decode(_nest(pairs, 1))) == {"$json"}
    objects = _nest({"a": [1]}, MAX_DEPTH - 2)
    assert codec.decode(objects) == objects and set(codec.decode(_nest(objects, 1))) == {"$json"}


def test_parse_json_refuses_what_nests_too_deeply_or_is_not_json() -> None:
    assert codec.parse_json('{"$float": "nan"}') == {"$float": "nan"}  # (no tags decoded)
    assert codec.parse_json(json.dumps(_nest(1, MAX_DEPTH))) == _nest(1, MAX_DEPTH)
    with pytest.raises(ValueDecodeError, match=r"nested deeper than 256 levels"):
        codec.parse_json(json.dumps(_nest(1, MAX_DEPTH + 1)))
    with pytest.raises(ValueDecodeError, match=r"nested deeper than 256 levels"):
        codec.parse_json("[" * 5000 + "]" * 5000)
    with pytest.raises(ValueDecodeError, match=r"^not JSON"):
        codec.parse_json("{")
    assert codec.json_or_text('{"a": [1]}') == {"a": [1]}
    assert codec.json_or_text("plain words") == "plain words"
    assert codec.json_or_text(5) == 5


def test_loads_of_text_that_is_not_json() -> None:
    with pytest.raises(ValueDecodeError, match=r"^not JSON"):
        codec.loads("{1")
    assert codec.loads(b'{"a": 1}') == {"a": 1}
    deep = ("[" * 5000 + "]" * 5000).encode()
    assert codec.loads(deep) == {"$json": deep.decode()}


# --- decoding tags ----------------------------------------------------------------------------


def test_known_types_come_back_and_unknown_ones_stay_as_read() -> None:
    assert codec.decode({"$enum": {"type": "test_codec_rules:Color", "value": "r"}}) is Color.RED
    gone = {"$enum": {"type": "no_such_module:Color", "value": "r"}}
    assert type(codec.decode(gone)) is Tagged and codec.decode(gone) == gone
    wrong_value = {"$enum": {"type": "test_codec_rules:Color", "value": "z"}}
    assert type(codec.decode(wrong_value)) is Tagged
    not_enum = {"$enum": {"type": "test_codec_rules:Point", "value": 1}}
    assert type(codec.decode(not_enum)) is Tagged
    point = {"$dataclass": {"type": "test_codec_rules:Point", "fields": {"x": 1, "y": [2]}}}
    assert codec.decode(point) == Point(1, [2])
    missing = {"$dataclass": {"type": "test_codec_rules:Point", "fields": {"y": 2}}}
    assert type(codec.decode(missing)) is Tagged
    as_model = {"$pydantic": {"type": "test_codec_rules:Point", "fields": {"x": 1}}}
    assert type(codec.decode(as_model)) is Tagged  # (no model_validate)
    unknown = {"$newer": [1]}
    assert type(codec.decode(unknown)) is Tagged and codec.dumps(codec.decode(unknown)) == (
        '{"$newer":[1]}'
    )
    assert codec.decode({"$json": "[1]"}) == {"$json": "[1]"}
    with pytest.raises(ValueDecodeError, match=r"malformed \$json value"):
        codec.decode({"$json": 5})


def test_a_dataclass_field_outside_init_comes_back() -> None:
    @dataclasses.dataclass
    class Later:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    with _at_module_level(Later):
        value = Later(1)
        value.b = 5
        back = codec.loads(codec.dumps(value))
        assert type(back) is Later and (back.a, back.b) == (1, 5)


def test_pydantic_models_come_back() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Model(pydantic.BaseModel):
        a: int
        b: tuple = ()

    with _at_module_level(Model):
        value = Model(a=1, b=(2,))
        text = codec.dumps(value)
        assert json.loads(text) == {
            "$pydantic": {
                "type": "test_codec_rules:Model",
                "fields": {"a": 1, "b": {"$tuple": [2]}},
            }
        }
        assert codec.loads(text) == value
        holding_kept = {"$pydantic": {"type": "test_codec_rules:Model", "fields": {"a": {"$x": 1}}}}
        assert type(codec.decode(holding_kept)) is Tagged


@pytest.mark.parametrize(
    "data",
    [
        {"$ndarray": {"dtype": 5, "shape": [1], "data": [1]}},
        {"$ndarray": {"dtype": "V8", "shape": [1], "data": [1]}},
        {"$ndarray": {"dtype": "<i8,<i8", "shape": [1], "data": [1]}},
        {"$ndarray": {"dtype": "<i8", "shape": [2], "data": [1]}},
        {"$numpy": {"dtype": "V0", "value": 1}},
        {"$tuple": 5},
        {"$datetime": "yesterday"},
        {"$date": 5},
        {"$dict": [[1]]},
        {"$set": [[1, {}]]},
    ],
)
def test_malformed_tags_are_reported(data) -> None:
    with pytest.raises(ValueDecodeError, match=r"^malformed \$"):
        codec.decode(data)


def test_sets_and_keys_of_lists_come_back_hashable() -> None:
    assert codec.decode({"$set": [[1, 2]]}) == {(1, 2)}
    assert codec.decode({"$frozenset": [[1]]}) == frozenset({(1,)})
    assert codec.decode({"$dict": [[[1, 2], "v"]]}) == {(1, 2): "v"}


def test_raw_json_is_reused_and_checked() -> None:
    raw = codec.RawJSON("[1,2]")
    assert codec.json_text(raw) is raw and codec.json_text((1,)) == '{"$tuple":[1]}'
    assert type(codec.as_raw_json("[1]", trusted=False)) is codec.RawJSON
    assert type(codec.as_raw_json("[1", trusted=False)) is str
    assert type(codec.as_raw_json("[1", trusted=True)) is codec.RawJSON
    long_text = json.dumps(list(range(300)))
    assert codec.as_raw_json(long_text, trusted=False) == long_text
    deep = json.dumps(_nest(1, MAX_DEPTH + 1))
    kept = codec.as_raw_json(deep, trusted=False)
    assert codec.is_deep_json(kept) and json.loads(kept) == {"$json": deep}
    assert not codec.is_deep_json('{"$json":"[]"}')  # (a plain str is no RawJSON)
    assert not codec.is_deep_json(codec.RawJSON("[1]"))
    assert codec.checked_json("x" * 600) == "x" * 600 and type(codec.checked_json("x" * 600)) is str
    assert type(codec.checked_json("[" * 600)) is str


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", True),
        (" 1", True),
        ("1 ", True),
        ("", False),
        ("[1", False),
        ("nope", False),
        ("NaN", True),
        ("[1] x", False),
        ('"a"', True),
        ("{}", True),
    ],
)
def test_is_json_answers_as_json_loads_does(text, expected) -> None:
    assert codec.is_json(text) is expected
    assert codec.is_json(text) is expected  # (again: from its memo)


@pytest.mark.parametrize("body", [False, "12.5", "INF"])
def test_a_damaged_float_in_a_trajectory_line_is_reported_with_its_field(body) -> None:
    from agenttrace.trajectory.model import Trajectory
    from agenttrace.trajectory.validate import TrajectoryFormatError

    good = Trajectory(episode_id="e", steps=[]).to_dict()
    assert Trajectory.from_dict({**good, "return": {"$float": "-inf"}}).return_ == -math.inf
    with pytest.raises(TrajectoryFormatError, match=r"malformed \$float value") as raised:
        Trajectory.from_dict({**good, "return": {"$float": body}})
    assert raised.value.field == "return"


# --- rules each mutant of the codec broke unseen ----------------------------------------------


@pytest.fixture
def fresh_memos(monkeypatch):
    """The codec's per-process memos emptied (another test may have filled them)."""
    monkeypatch.setattr(codec, "_KNOWN_JSON", {})
    monkeypatch.setattr(codec, "_last_json", None)
    monkeypatch.setattr(codec, "_last_checked", None)
    monkeypatch.setattr(codec, "_warned_types", set())


class Shade(enum.Enum):
    PAIR = (1, 2)


class Outer:
    class Inner(enum.Enum):
        A = 1


@dataclasses.dataclass
class Empty:
    pass


@dataclasses.dataclass(frozen=True)
class Key:
    password: str


@dataclasses.dataclass(frozen=True)
class RecordTuple(tuple):
    x: int

    def __new__(cls, x):
        return super().__new__(cls, (x,))


class ModelTuple(tuple):
    model_fields: dict = {}

    def model_dump(self, mode: str) -> dict:
        return {"items": list(self)}


def test_secrets_in_keys_object_arrays_pairs_and_kept_tags() -> None:
    items = np.empty(1, dtype=object)
    items[0] = {"token": "s"}
    value = {
        Key("p"): 1,
        2: {"token": "s"},
        "array": items,
        "kept": Tagged({"$x": {1: "a", "token": "s"}}),
        "kept list": Tagged({"$x": [{"token": "s"}]}),
        "kept tuple": Tagged({"$x": ({"token": "s"},)}),
    }
    assert codec.encode(value, redact_secrets=True) == {
        "$dict": [
            [
                {
                    "$dataclass": {
                        "type": "test_codec_rules:Key",
                        "fields": {"password": "[REDACTED]"},
                    }
                },
                1,
            ],
            [2, {"token": "[REDACTED]"}],
            [
                "array",
                {"$ndarray": {"dtype": "|O", "shape": [1], "data": [{"token": "[REDACTED]"}]}},
            ],
            ["kept", {"$x": {"$dict": [[1, "a"], ["token", "[REDACTED]"]]}}],
            ["kept list", {"$x": [{"token": "[REDACTED]"}]}],
            ["kept tuple", {"$x": {"$tuple": [{"token": "[REDACTED]"}]}}],
        ]
    }


def test_a_kept_tag_at_the_edge() -> None:
    flat, listed = Tagged({"$x": 1}), Tagged({"$x": [[1]]})  # one level, three
    assert codec.encode(_nest(flat, MAX_DEPTH - 1)) == _nest({"$x": 1}, MAX_DEPTH - 1)
    assert set(codec.encode(_nest(flat, MAX_DEPTH))) == {"$json"}
    assert codec.encode(_nest(listed, MAX_DEPTH - 3)) == _nest({"$x": [[1]]}, MAX_DEPTH - 3)
    text = codec.encode(_nest(listed, MAX_DEPTH - 2))["$json"]
    assert json.loads(text) == _nest({"$x": [[1]]}, MAX_DEPTH - 2)
    nested = Tagged({"$x": {"a": {"b": 1}}})  # three levels of objects
    assert codec.encode(_nest(nested, MAX_DEPTH - 3)) == _nest(dict(nested), MAX_DEPTH - 3)
    assert set(codec.encode(_nest(nested, MAX_DEPTH - 2))) == {"$json"}


def test_the_json_text_of_deep_values_holding_tags_objects_and_shared_items() -> None:
    kept = Tagged({"$x": {"token": "s", "a": 1}})
    edge = Tagged({"$x": _nest({"token": "s"}, MAX_DEPTH - 2)})  # 256 levels
    beyond = Tagged({"$x": _nest(1, 300)})
    shared = [1]
    value = _nest(
        [
            kept,
            edge,
            beyond,
            Point({"token": "s"}),
            Point(_nest(1, MAX_DEPTH - 3)),  # 256 levels
            Point(_nest(1, 300)),
            shared,
            shared,
            {"$y": 1},
            {"a": 1, "b": 2},
            frozenset({1, 2}),
            {3, 4},
            ModelTuple((5, 6)),
            RecordTuple(7),
        ],
        MAX_DEPTH,
    )
    text = codec.encode(value, redact_secrets=True)["$json"]
    assert json.loads(text) == _nest(
        [
            {"$x": {"token": "[REDACTED]", "a": 1}},
            {"$x": _nest({"token": "[REDACTED]"}, MAX_DEPTH - 2)},
            {"$x": _nest(1, 300)},
            {
                "$dataclass": {
                    "type": "test_codec_rules:Point",
                    "fields": {"x": {"token": "[REDACTED]"}, "y": None},
                }
            },
            {
                "$dataclass": {
                    "type": "test_codec_rules:Point",
                    "fields": {"x": _nest(1, MAX_DEPTH - 3), "y": None},
                }
            },
            {"$unserializable": {"type": "test_codec_rules:Point", "repr": "<nested too deeply>"}},
            [1],
            [1],
            {"$dict": [["$y", 1]]},
            {"a": 1, "b": 2},
            {"$frozenset": [1, 2]},
            {"$set": [3, 4]},
            {"$pydantic": {"type": "test_codec_rules:ModelTuple", "fields": {"items": [5, 6]}}},
            {"$dataclass": {"type": "test_codec_rules:RecordTuple", "fields": {"x": 7}}},
        ],
        MAX_DEPTH,
    )
    tuples: Any = 1
    for _ in range(200):  # 400 levels of $tuple
        tuples = (tuples,)
    expected: Any = 1
    for _ in range(200):
        expected = {"$tuple": [expected]}
    assert json.loads(codec.encode(tuples)["$json"]) == expected


def test_a_container_that_holds_itself_has_no_json_form() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(RecursionError, match=r"^a container that holds itself has no JSON form$"):
        codec.encode(loop)


def test_deep_data_with_nan_keeps_its_text_unredacted() -> None:
    data = _nest({"token": "s", "x": math.nan}, 300)  # (json.loads reads NaN)
    text = codec.decode(data)["$json"]
    assert json.loads(text) == _nest({"token": "s", "x": {"$float": "nan"}}, 300)


def test_deep_bytes_with_a_lone_surrogate_read_as_their_text() -> None:
    for levels in (300, 5000):  # (kept by the decoder; refused by json.loads)
        raw = b"[" * levels + b'"\xed\xa0\x80"' + b"]" * levels
        assert codec.loads(raw) == {"$json": raw.decode("utf-8", "surrogatepass")}


def test_arrays_keep_their_shape_and_their_limit() -> None:
    wide = np.arange(1200, dtype="<i2").reshape(2, 600)  # raw bytes
    back = codec.loads(codec.dumps(wide))
    assert back.shape == (2, 600) and back.tolist() == wide.tolist()
    objects = np.empty((1, 2), dtype=object)
    objects[0, 0], objects[0, 1] = (1,), None
    back = codec.loads(codec.dumps(objects))
    assert back.shape == (1, 2) and back.tolist() == [[(1,), None]]
    assert len(codec.encode(np.zeros(1024, dtype="<f4"))["$ndarray"]["data"]) == 1024
    assert "b64" in codec.encode(np.zeros(1025, dtype="<f4"))["$ndarray"]


def test_decoding_tags_at_the_edge() -> None:
    pairs = {"$dict": [[[1], 2]]}  # the key's list: 4 levels
    assert codec.decode(_nest(pairs, MAX_DEPTH - 4)) == _nest({(1,): 2}, MAX_DEPTH - 4)
    assert set(codec.decode(_nest(pairs, MAX_DEPTH - 3))) == {"$json"}
    objects = {"$ndarray": {"dtype": "|O", "shape": [1], "data": [[1]]}}  # 4 levels
    array = codec.decode(_nest(objects, MAX_DEPTH - 4))
    for _ in range(MAX_DEPTH - 4):
        array = array[0]
    assert array.dtype == object and array.shape == (1,)
    assert set(codec.decode(_nest(objects, MAX_DEPTH - 3))) == {"$json"}


def test_numpy_tags_read_as_their_dtype() -> None:
    empty = codec.decode({"$numpy": {"dtype": "|S0", "b64": ""}})
    assert type(empty) is np.bytes_ and bytes(empty) == b""
    span = codec.decode({"$numpy": {"dtype": "<m8[s]", "value": 3}})
    assert span.dtype == np.dtype("<m8[s]") and span == np.timedelta64(3, "s")
    no_text = codec.decode({"$ndarray": {"dtype": "<U0", "shape": [0], "data": []}})
    assert no_text.shape == (0,) and no_text.dtype.kind == "U"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"$float": "12.5"},
            r"""^malformed \$float value: not "nan", "inf" or "-inf" but '12.5'$""",
        ),
        ({"$float": []}, r"""^malformed \$float value: not "nan", "inf" or "-inf" but \[\]$"""),
        (
            {"$numpy": {"dtype": 5, "value": 1}},
            r"^malformed \$numpy value: a dtype is written as text, got int$",
        ),
        (
            {"$numpy": {"dtype": "V8", "b64": "AAAAAAAAAAA="}},
            r"^malformed \$numpy value: dtype 'V8' is not one agenttrace writes$",
        ),
        ({"$json": 5}, r"^malformed \$json value: \$json holds JSON text$"),
    ],
)
def test_malformed_tags_say_what_is_wrong(data, message) -> None:
    with pytest.raises(ValueDecodeError, match=message):
        codec.decode(data)


def test_classes_are_found_by_their_qualified_name_and_rebuilt_only_by_their_tag() -> None:
    assert (
        codec.decode({"$enum": {"type": "test_codec_rules:Outer.Inner", "value": 1}})
        is Outer.Inner.A
    )
    pair = codec.decode({"$enum": {"type": "test_codec_rules:Shade", "value": {"$tuple": [1, 2]}}})
    assert pair is Shade.PAIR
    for data in (
        {"$enum": {"type": "test_codec_rules:NoSuchClass", "value": 1}},
        {"$dataclass": {"type": "test_codec_rules:Empty", "fields": []}},
        {"$pydantic": {"type": "test_codec_rules:Point", "fields": {"x": 1, "y": 2}}},
    ):
        assert type(codec.decode(data)) is Tagged and codec.decode(data) == data
    assert codec.decode({"$dataclass": {"type": "test_codec_rules:Empty", "fields": {}}}) == Empty()


def test_a_dataclass_field_outside_init_not_written_keeps_its_default() -> None:
    @dataclasses.dataclass
    class Later:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    with _at_module_level(Later):
        back = codec.decode({"$dataclass": {"type": "test_codec_rules:Later", "fields": {"a": 1}}})
        assert type(back) is Later and (back.a, back.b) == (1, 0)


def test_pydantic_models_come_back_only_by_their_tag_and_without_kept_tags() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Model(pydantic.BaseModel):
        a: int
        c: Any = None

    with _at_module_level(Model):
        for data in (
            {"$dataclass": {"type": "test_codec_rules:Model", "fields": {"a": 1}}},
            {"$pydantic": {"type": "test_codec_rules:Model", "fields": {"a": 1, "c": {"$x": 1}}}},
        ):
            assert type(codec.decode(data)) is Tagged and codec.decode(data) == data
        assert codec.decode(
            {"$pydantic": {"type": "test_codec_rules:Model", "fields": {"a": 1}}}
        ) == Model(a=1)


def test_the_unserializable_warning_comes_once_per_type(fresh_memos) -> None:
    class Thing:
        pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        codec.encode([Thing(), Thing()])
    assert [str(w.message) for w in caught] == [
        f"agenttrace: values of type test_codec_rules:{Thing.__qualname__} have no faithful JSON"
        " form; recording them as repr() (a '$unserializable' object)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" NaN", True),  # (msgspec refuses NaN: the scanner, or json.loads, decides)
        ("NaN", True),
        ("[NaN, 1]", True),
        ('{"a": [1, 2, 3], "b": "long"}', True),
        ('{"a": [1, 2, 3], "b": "long"', False),
        ('[NaN, "long enough"]', True),
    ],
)
def test_is_json_answers_as_json_loads_does_with_empty_memos(fresh_memos, text, expected) -> None:
    assert codec.is_json(text) is expected
    assert codec.is_json(text) is expected


def test_the_fast_parser_decides_for_text_that_cannot_nest_too_deeply(
    monkeypatch, fresh_memos
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(codec, "_fast_loads", asked.append)  # (accepts anything)
    short_deep = "[" * 600  # under 1,000 characters
    long_flat = "[" * 499 + " " * 600
    assert codec.is_json(short_deep) and codec.is_json(long_flat)
    assert codec.is_json("[" * 500 + " " * 500, brackets=0)  # (the caller's count)
    assert asked == [short_deep, long_flat, "[" * 500 + " " * 500]
    for text in ("[" * 500 + " " * 501, "{" * 500 + " " * 500, "[" * 250 + "{" * 250 + " " * 500):
        assert not codec.is_json(text)  # (json decides: not JSON)
    assert not codec.is_json("[" * 600 + " " * 600, brackets=600)
    assert len(asked) == 3


def test_the_memo_of_short_json_is_bounded(fresh_memos) -> None:
    for number in range(codec._KNOWN_LIMIT + 1):
        assert codec.is_json(str(number))
    assert len(codec._KNOWN_JSON) == 1
    assert codec.is_json("[1234567890,123]") and "[1234567890,123]" in codec._KNOWN_JSON  # 16


def test_checked_and_raw_json_give_the_text_they_were_given(fresh_memos, monkeypatch) -> None:
    assert codec.as_raw_json("[1]", trusted=True) == "[1]"
    assert codec.as_raw_json("[2]", trusted=False) == "[2]"
    short = codec.checked_json("[3]")
    assert type(short) is codec.RawJSON and short == "[3]"
    assert type(codec.checked_json("[3")) is str
    long_json = json.dumps([[i] for i in range(300)])  # 300 brackets, 2 levels
    assert type(codec.checked_json(long_json)) is codec.RawJSON
    assert codec.checked_json(long_json) == long_json
    objects = json.dumps([{"a": i} for i in range(300)]) + "x"
    assert type(codec.checked_json(objects)) is str
    monkeypatch.setattr(codec, "_deep_texts", 0)
    deep = json.dumps(_nest(1, MAX_DEPTH + 1))
    assert codec.checked_json(deep) == '{"$json":%s}' % json.dumps(deep)
    assert codec.deep_texts() == 1
