"""The value encoding is faithful, and trajectories round-trip through JSON and the schema."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttrace.trajectory import codec
from agenttrace.trajectory.equality import values_equal
from agenttrace.trajectory.model import (
    EpisodeError,
    LLMCall,
    Step,
    ToolCall,
    Trajectory,
    TrajectoryFormatError,
)

SCHEMA = json.loads(
    (Path(__file__).parent.parent / "agenttrace" / "trajectory" / "schema.json").read_text()
)


@dataclasses.dataclass
class Pose:
    x: float
    joints: np.ndarray
    label: str = "arm"


class Colour(enum.Enum):
    RED = "red"
    BLUE = 2


class Order(pydantic.BaseModel):
    item: str
    quantity: int
    tags: list[str] = []


FAITHFUL = [
    None,
    True,
    0,
    -(2**70),
    1.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    'ünïcødé \n"',
    b"",
    b"\x00\xff\x10",
    bytearray(b"ab"),
    (1, "a", (2.0,)),
    [],
    {},
    {"a": [1, {"b": (2,)}]},
    {1: "int key", (2, 3): "tuple key"},
    {"$ndarray": "looks like a tag"},
    {1, 2, 3},
    frozenset({"x"}),
    np.float32(1.25),
    np.int64(-7),
    np.bool_(True),
    np.uint8(255),
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.zeros((0, 3)),
    np.array([np.nan, np.inf]),
    np.zeros(5000, dtype=np.uint8),
    np.array(["a", "bc"]),
    np.array([1 + 2j]),
    np.array([1, "x", None], dtype=object),
    np.float16(0.5),
    np.complex64(1 - 1j),
    Pose(1.0, np.ones(3)),
    Colour.RED,
    Colour.BLUE,
    Order(item="apple", quantity=3, tags=["a"]),
    dt.datetime(2026, 11, 21, 12, 30, 5, 123456, tzinfo=dt.timezone.utc),
    dt.date(2026, 1, 2),
]


@pytest.mark.parametrize("value", FAITHFUL, ids=lambda v: type(v).__name__)
def test_values_round_trip_to_equal_objects(value) -> None:
    text = codec.dumps(value)
    json.loads(text)  # strict JSON: no bare NaN
    assert "NaN" not in text.replace('"nan"', "")
    back = codec.loads(text)
    expected = bytes(value) if isinstance(value, bytearray) else value  # bytes-likes -> bytes
    assert values_equal(back, expected), (value, text, back)
    assert type(back) is type(expected)


def test_numpy_arrays_keep_dtype_shape_and_byte_order() -> None:
    for array in (np.arange(6, dtype=">i4").reshape(2, 3), np.ones((2, 2, 2), dtype=np.float64)):
        back = codec.loads(codec.dumps(array))
        assert back.dtype == array.dtype and back.shape == array.shape
        assert np.array_equal(back, array)
    assert not values_equal(np.ones(3, dtype=np.float32), np.ones(3, dtype=np.float64))


json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(), st.binary()
)
nested = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.dictionaries(st.integers(), inner, max_size=3),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(nested)
def test_any_nested_value_round_trips(value) -> None:
    assert values_equal(codec.loads(codec.dumps(value)), value)


def test_unknown_types_fall_back_with_one_warning_and_never_raise() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    class BrokenRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = json.loads(codec.dumps(Opaque()))
        codec.dumps(Opaque())
        broken = json.loads(codec.dumps([BrokenRepr()]))
    assert first == {
        "$unserializable": {"type": f"{__name__}:{Opaque.__qualname__}", "repr": "<opaque>"}
    }
    assert "repr failed" in broken[0]["$unserializable"]["repr"]
    categories = [w.category for w in caught]
    assert categories.count(codec.UnserializableValueWarning) == 2  # once per type
    assert codec.loads(codec.dumps(Opaque())) == first  # decodes to its documented form


def test_secret_keys_are_redacted_when_asked() -> None:
    value = {
        "api_key": "sk-1",
        "headers": {"Authorization": "Bearer x"},
        "ok": 1,
        "db_password": "p",
        7: {"token": "t"},
    }
    text = codec.dumps(value, redact_secrets=True)
    for secret in ("sk-1", "Bearer x", '"p"', '"t"'):
        assert secret not in text
    assert codec.loads(text)["ok"] == 1
    assert "sk-1" in codec.dumps(value)  # only when asked


def test_malformed_tags_give_a_clear_error() -> None:
    with pytest.raises(codec.ValueDecodeError, match=r"\$ndarray"):
        codec.loads('{"$ndarray": {"dtype": "<f4"}}')
    with pytest.raises(codec.ValueDecodeError, match="not JSON"):
        codec.loads("{nope")


def _trajectory() -> Trajectory:
    step0 = Step(
        index=0,
        observation=np.ones(4, dtype=np.float32),
        action=1,
        reward=1.0,
        info={"lives": 3},
        start_time=10,
        end_time=20,
        llm_calls=[
            LLMCall(
                name="chat m",
                model="m",
                input_messages=[{"role": "user", "content": "hi"}],
                output_messages=[{"role": "assistant", "content": "yo"}],
                finish_reasons=["stop"],
                input_tokens=3,
                output_tokens=2,
                start_time=11,
                end_time=12,
                attributes={"gen_ai.request.temperature": 0.5},
            )
        ],
        tool_calls=[ToolCall(name="search", call_id="c1", arguments={"q": "x"}, result=[1])],
    )
    step1 = Step(
        index=1,
        observation=np.zeros(4, dtype=np.float32),
        action=0,
        reward=float("nan"),
        terminated=True,
        discount=0.0,
        start_time=21,
        end_time=30,
    )
    return Trajectory(
        episode_id="ep-1",
        trace_id="0" * 31 + "1",
        task_id="t",
        status="errored",
        error=EpisodeError("ValueError", "boom", "Traceback ..."),
        start_time=1,
        end_time=40,
        return_=float("nan"),
        length=2,
        attributes={"rl.env.name": "CartPole-v1"},
        steps=[step0, step1],
        final_observation=(b"\x01", Pose(0.0, np.zeros(2))),
        reset_info={"seed": 3},
    )


def test_trajectory_json_round_trip_and_schema() -> None:
    trajectory = _trajectory()
    text = trajectory.to_json()
    document = json.loads(text)
    jsonschema.validate(document, SCHEMA)
    assert list(document)[:13] == [
        "schema",
        "episode_id",
        "trace_id",
        "task_id",
        "status",
        "error",
        "start_time",
        "end_time",
        "return",
        "length",
        "attributes",
        "steps",
        "final_observation",
    ]
    assert document == json.loads(json.dumps(trajectory.to_dict()))
    back = Trajectory.from_json(text)
    assert back == trajectory
    assert back.steps[0].observation.dtype == np.float32
    assert back != Trajectory.from_json(text.replace('"action":1', '"action":2'))


def test_lazy_raw_content_is_spliced_undecoded_and_decodes_on_read() -> None:
    raw = codec.RawJSON(codec.dumps(np.arange(3, dtype=np.int16)))
    step = Step(index=0, observation=raw)
    assert step.__dict__["_observation"] is raw
    assert raw in step.to_json()
    assert step.__dict__["_observation"] is raw  # writing did not decode
    assert step.observation.dtype == np.int16  # reading does, once
    assert type(step.__dict__["_observation"]) is np.ndarray


def test_missing_keys_and_unknown_schema_are_clear_errors() -> None:
    document = json.loads(_trajectory().to_json())
    del document["steps"], document["status"]
    with pytest.raises(TrajectoryFormatError, match="steps"):
        Trajectory.from_dict(document)
    document = json.loads(_trajectory().to_json())
    document["schema"] = "agenttrace.trajectory/99"
    with pytest.raises(TrajectoryFormatError, match="unsupported schema"):
        Trajectory.from_dict(document)
    with pytest.raises(TrajectoryFormatError, match="not JSON"):
        Trajectory.from_json("{")
