"""One codec, every process: a tagged value round-trips byte for byte through a process that
cannot import its type (issue 30, section 8).

The user's types live in a module written to a temporary folder and loaded under a unique name
that is on no ``sys.path``: this process can rebuild them, no other process can (decoding
never imports code). Two other processes read what this one writes:

* a *peer*, a plain ``python`` that runs ``codec.dumps(codec.loads(line))`` on each line it
  reads (the property tests, over every tag the codec writes and over tags it does not know);
* the real writer helper process (``writer="process"``), compared with the writer thread of
  the same run and with ``agenttrace export`` run as a program.

The independent truth is the value encoding's table in docs/trajectory-format.md, written out
by hand in :func:`documented` below.
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import agenttrace as at
from agenttrace.trajectory import codec
from agenttrace.trajectory.equality import values_equal

USER_TYPES = textwrap.dedent(
    """
    import dataclasses
    import enum
    from typing import Any

    import pydantic


    class Color(enum.Enum):
        RED = "red"
        BLUE = 2


    class Level(enum.IntEnum):
        LOW = 1
        HIGH = 3


    @dataclasses.dataclass
    class Point:
        x: Any
        label: Any = None


    class Model(pydantic.BaseModel):
        value: Any = None


    class Opaque:
        def __init__(self, n):
            self.n = n

        def __repr__(self):
            return f"Opaque({self.n})"
    """
)

PEER = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[1])\n"
    "from agenttrace.trajectory import codec\n"
    "for line in sys.stdin.buffer:\n"
    "    text = line[:-1].decode('utf-8', 'surrogatepass')\n"
    "    try:\n"
    "        out = codec.dumps(codec.loads(text))\n"
    "    except Exception as exc:\n"
    "        out = 'ERROR %s: %s' % (type(exc).__name__, exc)\n"
    "    sys.stdout.buffer.write(out.encode('utf-8', 'surrogatepass') + b'\\n')\n"
    "    sys.stdout.buffer.flush()\n"
)


def _load_user_types() -> ModuleType:
    """The user's module, importable in this process only (a unique name on no sys.path)."""
    folder = Path(tempfile.mkdtemp(prefix="agenttrace-user-types-"))
    name = f"user_types_{uuid.uuid4().hex[:8]}"
    path = folder / f"{name}.py"
    path.write_text(USER_TYPES)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


TYPES = _load_user_types()


@pytest.fixture(scope="module")
def user_types() -> ModuleType:
    return TYPES


class Peer:
    """Another Python process that re-encodes what it decodes, one line at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-E", "-c", PEER, json.dumps(sys.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def __call__(self, text: str) -> str:
        assert "\n" not in text
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(text.encode("utf-8", "surrogatepass") + b"\n")
        stdin.flush()
        return stdout.readline()[:-1].decode("utf-8", "surrogatepass")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


@pytest.fixture(scope="module")
def peer(user_types) -> Iterator[Peer]:
    running = Peer()
    # It runs the same codec, and cannot find the user's types.
    assert running(json.dumps({"$tuple": [1]})) == '{"$tuple":[1]}'
    yield running
    running.close()


def compact(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


# --- the independent truth: docs/trajectory-format.md, "Value encoding" ------------------------


def documented(types: ModuleType) -> list[tuple[Any, Any]]:
    """(value, the JSON the docs' table gives for it), one or more per tag."""
    mod = types.__name__
    deep: Any = "bottom"
    for _ in range(300):
        deep = [deep]
    big = np.arange(1100, dtype=np.int16)
    return [
        (float("nan"), {"$float": "nan"}),
        (float("-inf"), {"$float": "-inf"}),
        ((1, "a"), {"$tuple": [1, "a"]}),
        (b"\x00\xff", {"$bytes": base64.b64encode(b"\x00\xff").decode()}),
        ({1: "a", (2, 3): "b"}, {"$dict": [[1, "a"], [{"$tuple": [2, 3]}, "b"]]}),
        ({"$enum": 5}, {"$dict": [["$enum", 5]]}),  # a user's dict that looks like a tag
        ({"b", "a"}, {"$set": ["a", "b"]}),  # (sorted by their JSON text)
        (frozenset({3}), {"$frozenset": [3]}),
        (
            np.array([[1.5, 2.0]], dtype="<f4"),
            {"$ndarray": {"dtype": "<f4", "shape": [1, 2], "data": [[1.5, 2.0]]}},
        ),
        (
            big,
            {
                "$ndarray": {
                    "dtype": "<i2",
                    "shape": [1100],
                    "b64": base64.b64encode(big.tobytes()).decode(),
                }
            },
        ),
        (
            np.array([types.Color.RED, None], dtype=object),
            {
                "$ndarray": {
                    "dtype": "|O",
                    "shape": [2],
                    "data": [{"$enum": {"type": f"{mod}:Color", "value": "red"}}, None],
                }
            },
        ),
        (np.float32(1.5), {"$numpy": {"dtype": "<f4", "value": 1.5}}),
        (
            np.complex64(1 + 2j),
            {
                "$numpy": {
                    "dtype": "<c8",
                    "b64": base64.b64encode(np.complex64(1 + 2j).tobytes()).decode(),
                }
            },
        ),
        (
            types.Point(types.Color.BLUE, (1,)),
            {
                "$dataclass": {
                    "type": f"{mod}:Point",
                    "fields": {
                        "x": {"$enum": {"type": f"{mod}:Color", "value": 2}},
                        "label": {"$tuple": [1]},
                    },
                }
            },
        ),
        (
            types.Model(value=[1, "x"]),
            {"$pydantic": {"type": f"{mod}:Model", "fields": {"value": [1, "x"]}}},
        ),
        (types.Color.RED, {"$enum": {"type": f"{mod}:Color", "value": "red"}}),
        (types.Level.HIGH, {"$enum": {"type": f"{mod}:Level", "value": 3}}),
        (dt.datetime(2024, 5, 1, 12, 30), {"$datetime": "2024-05-01T12:30:00"}),
        (dt.date(2024, 5, 1), {"$date": "2024-05-01"}),
        (
            types.Opaque(7),
            {"$unserializable": {"type": f"{mod}:Opaque", "repr": "Opaque(7)"}},
        ),
        (deep, {"$json": compact(deep)}),
        # Tags inside tags, and user types as dict keys and set items.
        (
            {types.Color.RED: [types.Level.LOW]},
            {
                "$dict": [
                    [
                        {"$enum": {"type": f"{mod}:Color", "value": "red"}},
                        [{"$enum": {"type": f"{mod}:Level", "value": 1}}],
                    ]
                ]
            },
        ),
        (
            {types.Color.BLUE},
            {"$set": [{"$enum": {"type": f"{mod}:Color", "value": 2}}]},
        ),
    ]


def test_the_documented_table_covers_every_tag_the_codec_writes(user_types) -> None:
    written = {next(iter(json_form)) for _, json_form in documented(user_types)}
    assert written == set(codec._TAGS)


def test_every_tag_is_written_as_documented_and_passes_another_process_unchanged(
    user_types, peer
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", codec.UnserializableValueWarning)
        for value, json_form in documented(user_types):
            text = codec.dumps(value)
            assert text == compact(json_form), json_form
            assert peer(text) == text, json_form  # the peer cannot rebuild the user's types
            assert codec.dumps(codec.loads(text)) == text, json_form  # this process can
            if "$unserializable" not in json_form and "$json" not in json_form:
                assert values_equal(codec.loads(text), value), json_form


UNKNOWN_TAGGED = [
    {"$blob": {"ref": "sha256:" + "0" * 64, "size": 3}},
    {"$truncated": {"tag": "$ndarray", "size": 100000}},
    {"$future": [{"$tuple": [1, {"$later": None}]}, {"nested": {"$x": 1.5}}]},
    {"$": "just a dollar"},
    {"$enum2": {"type": "gone:Type"}},
]


def test_unknown_tags_are_kept_as_they_are_in_every_process(peer) -> None:
    for data in UNKNOWN_TAGGED:
        text = compact(data)
        assert peer(text) == text
        assert codec.dumps(codec.loads(text)) == text
        wrapped = compact({"obs": [data, {"$tuple": [data]}], "k": {"$dict": [[data, 1]]}})
        assert peer(wrapped) == wrapped
        assert codec.dumps(codec.loads(wrapped)) == wrapped
    # As read, an unknown tag is the very dict (compared, tested for its tag, hashed).
    blob = codec.loads(compact(UNKNOWN_TAGGED[0]))
    assert blob == UNKNOWN_TAGGED[0] and "$blob" in blob and {blob: 1}[blob] == 1


def test_a_kept_unserializable_marker_is_no_key() -> None:
    """It stands for no value: two such keys would be one (the recorder writes them as text)."""
    text = compact({"$dict": [[{"$unserializable": {"type": "m:T", "repr": "x"}}, 1]]})
    with pytest.raises(codec.ValueDecodeError, match="cannot be a key"):
        codec.loads(text)


# --- property: any value, any nesting ---------------------------------------------------------

_names = st.text(max_size=6) | st.sampled_from(["$enum", "$x", "$", "token", "type"])


def _user_values(types: ModuleType) -> st.SearchStrategy[Any]:
    enums = st.sampled_from([*types.Color, *types.Level])
    zones = [None, dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30))]
    datetimes = st.datetimes(timezones=st.sampled_from(zones))
    hashable = st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=8)
        | st.binary(max_size=8)
        | enums
        | st.dates(),
        lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
        max_leaves=6,
    )
    numbers = hnp.arrays(
        dtype=hnp.scalar_dtypes() | hnp.unicode_string_dtypes(max_len=4),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    )
    scalars = (
        hashable
        | datetimes
        | numbers
        | numbers.map(lambda a: a.ravel()[0] if a.size else np.float64(0.5))
        | st.builds(types.Opaque, st.integers(0, 9))
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.tuples(inner, inner)
            | st.dictionaries(_names, inner, max_size=3)
            | st.dictionaries(hashable, inner, max_size=3)
            | st.sets(hashable, max_size=3)
            | st.builds(types.Point, inner, inner)
            | st.builds(types.Model, value=inner)
            | inner.map(lambda v: np.array([v, None], dtype=object)[:1])
        ),
        max_leaves=12,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=_user_values(TYPES))
def test_any_value_round_trips_byte_for_byte_through_a_process_without_its_types(
    peer, value
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", codec.UnserializableValueWarning)
        text = codec.dumps(value)
    assert peer(text) == text
    assert codec.dumps(codec.loads(text)) == text


_json_leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
_json_leaves |= st.floats(allow_nan=False, allow_infinity=False)
_unknown_tag = st.text(max_size=5).map(lambda s: "$" + s).filter(lambda t: t not in codec._TAGS)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.recursive(
        _json_leaves,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.text(max_size=4).filter(lambda k: k not in codec._TAGS), inner, max_size=3
            )
            | st.builds(lambda tag, body: {tag: body}, _unknown_tag, inner)
            | inner.map(lambda v: {"$tuple": [v]})
        ),
        max_leaves=15,
    )
)
def test_unknown_tags_anywhere_are_kept_byte_for_byte(peer, data) -> None:
    """JSON another writer (or a newer agenttrace) wrote, with tags this codec does not know."""
    text = compact(data)
    assert peer(text) == text
    assert codec.dumps(codec.loads(text)) == text


# --- the real writer helper process ------------------------------------------------------------

CONTENT_FIELDS = ("observation", "action", "info")


def record_episode(types: ModuleType, value: Any) -> None:
    """One episode with ``value`` in every content field agenttrace records."""
    with at.episode(task_id="user-types"):
        with at.env_reset() as reset:
            reset.record(observation=value, info=value)
        with at.timestep():
            with at.agent_act() as act:
                act.record(observation=value, action=value)
                with at.llm_call(model="m") as call:
                    call.record(
                        input_messages=[{"role": "user", "content": value}],
                        output_messages=[{"role": "assistant", "content": "ok"}],
                    )
                with at.tool_call("lookup") as tool:
                    tool.record(call_id="c1", arguments=value, result=value)
            with at.env_step() as step:
                step.record(observation=value, reward=1.0, terminated=True, info=value)


def field_texts(line: dict) -> dict[str, str]:
    """The JSON text of every field that holds the recorded value, by path."""
    (step,) = line["steps"]
    (call,) = step["llm_calls"]
    (tool,) = step["tool_calls"]
    fields = {f"steps[0].{name}": step[name] for name in CONTENT_FIELDS}
    fields["final_observation"] = line["final_observation"]
    fields["reset_info"] = line["reset_info"]
    fields["llm_calls[0].input_messages[0].content"] = call["input_messages"][0]["content"]
    fields["tool_calls[0].arguments"] = tool["arguments"]
    fields["tool_calls[0].result"] = tool["result"]
    return {path: compact(data) for path, data in fields.items()}


def run_with(writer: str, out: Path, types: ModuleType, value: Any) -> tuple[dict, Path]:
    runtime = at.configure(
        out=str(out),
        run_name=writer,
        sinks=["jsonl"],
        spans=["file"],
        writer=writer,
        exit_report=False,
    )
    remote = runtime.trajectory_processor.writer  # type: ignore[union-attr]
    assert getattr(remote, "in_helper_process", False) is (writer == "process")
    record_episode(types, value)
    runtime.shutdown()
    (path,) = [p for p in runtime.trajectory_paths if p.suffix == ".jsonl"]
    (line,) = [json.loads(text) for text in path.read_text().splitlines()]
    (spans,) = runtime.span_paths
    return field_texts(line), spans


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the writer helper process is POSIX only")
def test_the_writer_helper_writes_user_types_as_the_writer_thread_and_the_docs_do(
    tmp_path, user_types
) -> None:
    types = user_types
    mod = types.__name__
    value = {
        "color": types.Color.RED,
        "point": types.Point(types.Level.HIGH, label={types.Color.BLUE}),
        "by_color": {types.Color.BLUE: (1, 2)},
        "model": types.Model(value=types.Color.RED),
        "opaque": types.Opaque(1),
        "lookalike": {"$enum": "mine"},
    }
    color = {"$enum": {"type": f"{mod}:Color", "value": "red"}}
    blue = {"$enum": {"type": f"{mod}:Color", "value": 2}}
    truth = compact(
        {
            "color": color,
            "point": {
                "$dataclass": {
                    "type": f"{mod}:Point",
                    "fields": {
                        "x": {"$enum": {"type": f"{mod}:Level", "value": 3}},
                        "label": {"$set": [blue]},
                    },
                }
            },
            "by_color": {"$dict": [[blue, {"$tuple": [1, 2]}]]},
            "model": {"$pydantic": {"type": f"{mod}:Model", "fields": {"value": color}}},
            "opaque": {"$unserializable": {"type": f"{mod}:Opaque", "repr": "Opaque(1)"}},
            "lookalike": {"$dict": [["$enum", "mine"]]},
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", codec.UnserializableValueWarning)
        thread, _ = run_with("thread", tmp_path, types, value)
        helper, spans = run_with("process", tmp_path, types, value)
    assert set(helper) == set(thread) and len(helper) == 8
    for path in helper:
        assert helper[path] == thread[path], path  # byte for byte, field by field
        assert helper[path] == truth, path
    # Offline, in a process of its own (which cannot import the user's module either).
    out = tmp_path / "exported.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenttrace",
            "export",
            "--from",
            str(spans),
            "--out",
            str(out),
            "--quiet",
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [json.loads(text) for text in out.read_text().splitlines()]
    assert field_texts(line) == helper
