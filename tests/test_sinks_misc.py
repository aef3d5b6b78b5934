"""safe_filename, JsonDirSink, CallbackSink and reading mixed sources."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from conftest_sinks_helpers import ErrorLog, make_batch, make_trajectory
from hypothesis import given, settings
from hypothesis import strategies as st

from agenttrace.sinks import (
    CallbackSink,
    JsonDirSink,
    JsonlSink,
    ParquetSink,
    Sink,
    load_trajectories,
    safe_filename,
)
from agenttrace.sinks.files import resolve_inside

HOSTILE_IDS = [
    "../../etc/passwd",
    "/etc/passwd",
    "..",
    ".",
    "",
    "...",
    ".bashrc",
    "a/b",
    "a_b",
    "a\\b",
    "..\\..\\windows\\system32",
    "nul\x00byte",
    "ctrl\x01\x1f\x7f",
    "line\nbreak",
    "日本語のエピソード",
    "emoji-🙂",
    "x" * 10_000,
    "x" * 10_001,
    "CON",
    "con.json",
    "trailing.",
    "Episode-1",
    "episode-1",
    "lone\udcffsurrogate",
    "a_b-" + "0" * 16,
]


def assert_safe_component(name: str) -> None:
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name
    assert name not in (".", "..")
    assert not name.startswith(".")
    assert len(name.encode()) <= 200


def test_hostile_ids_become_distinct_safe_names():
    names = [safe_filename(i) for i in HOSTILE_IDS]
    for name in names:
        assert_safe_component(name)
    assert len(set(names)) == len(HOSTILE_IDS)
    # Case-insensitive file systems (macOS, Windows) must not merge two ids either.
    assert len({n.lower() for n in names}) == len(HOSTILE_IDS)


def test_plain_ids_stay_readable_and_changed_ids_keep_a_readable_prefix():
    assert safe_filename("ep-0001") == "ep-0001"
    assert safe_filename("run.3_b") == "run.3_b"
    assert safe_filename("ep-0001", suffix=".json") == "ep-0001.json"
    assert re.fullmatch(r"a_b-[0-9a-f]{16}", safe_filename("a/b"))
    long = safe_filename("y" * 10_000)
    assert long.startswith("y" * 120) and len(long) == 120 + 1 + 16
    # An id that looks like the tagged form of another id is tagged again.
    tagged = safe_filename("a/b")
    assert safe_filename(tagged) != tagged


def test_unsafe_suffix_is_refused():
    for suffix in ("/x", "..", "\x00"):
        with pytest.raises(ValueError, match="suffix"):
            safe_filename("ok", suffix=suffix)
    with pytest.raises(TypeError):
        safe_filename(b"bytes")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=2, max_size=8, unique=True))
def test_any_ids_map_to_distinct_safe_names(ids):
    names = [safe_filename(i, suffix=".json") for i in ids]
    for name in names:
        assert_safe_component(name)
    assert len({n.lower() for n in names}) == len(ids)


def test_resolve_inside_refuses_a_planted_symlink(tmp_path):
    inside = tmp_path / "inside"
    inside.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    assert resolve_inside(inside, "../x").parent == inside
    (inside / "evil.json").symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        resolve_inside(inside, "evil", suffix=".json")


def test_jsondir_round_trip_with_pretty_files(tmp_path):
    batch = make_batch(4)
    sink = JsonDirSink(tmp_path / "eps")
    assert isinstance(sink, Sink)
    for trajectory in batch:
        sink.write(trajectory)
    sink.close()
    files = sorted(p.name for p in (tmp_path / "eps").iterdir())
    assert files == [f"ep-000{i}.json" for i in range(4)]
    text = (tmp_path / "eps" / "ep-0001.json").read_text(encoding="utf-8")
    assert text.startswith('{\n  "schema": "agenttrace.trajectory/1"')
    assert load_trajectories(tmp_path / "eps") == batch


def test_jsondir_hostile_ids_stay_inside_and_never_collide(tmp_path):
    out = tmp_path / "deep" / "out"
    sink = JsonDirSink(out)
    written = []
    for index, episode_id in enumerate(HOSTILE_IDS):
        trajectory = make_trajectory(index % 7, steps=1)
        trajectory.episode_id = episode_id
        sink.write(trajectory)
        written.append(trajectory)
    sink.close()

    everything = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert [e for e in everything if not e.startswith(os.path.join("deep", "out"))] == ["deep"]
    files = list(out.iterdir())
    assert all(p.is_file() and p.parent == out and p.suffix == ".json" for p in files)
    assert len(files) == len(HOSTILE_IDS)  # no two ids shared a file
    assert sorted(sink.paths) == sorted(files)
    by_id = {t.episode_id: t for t in load_trajectories(out)}
    assert set(by_id) == set(HOSTILE_IDS)
    for trajectory in written:
        assert by_id[trajectory.episode_id] == trajectory


def test_jsondir_rewrites_an_episode_atomically(tmp_path):
    sink = JsonDirSink(tmp_path)
    first = make_trajectory(0)
    sink.write(first)
    second = make_trajectory(1)
    second.episode_id = first.episode_id
    sink.write(second)
    assert [p.name for p in tmp_path.iterdir()] == ["ep-0000.json"]  # no temporary left over
    assert sink.paths == [tmp_path / "ep-0000.json"]
    assert load_trajectories(tmp_path) == [second]
    sink.close()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(first)


def test_jsondir_ten_megabyte_observation(tmp_path):
    trajectory = make_trajectory(3, steps=1)
    trajectory.final_observation = np.zeros(10 * 1024 * 1024, dtype=np.uint8)
    sink = JsonDirSink(tmp_path)
    sink.write(trajectory)
    sink.close()
    assert load_trajectories(tmp_path) == [trajectory]


def test_callback_sink_calls_the_function_in_order():
    seen = []
    sink = CallbackSink(seen.append)
    assert isinstance(sink, Sink)
    batch = make_batch(3)
    for trajectory in batch:
        sink.write(trajectory)
    sink.flush()
    assert seen == batch and seen[0] is batch[0]
    sink.close()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(batch[0])
    assert len(seen) == 3
    with pytest.raises(TypeError):
        CallbackSink("not callable")  # type: ignore[arg-type]


def test_callback_errors_reach_the_writer():
    def broken(trajectory):
        raise KeyError(trajectory.episode_id)

    with pytest.raises(KeyError, match="ep-0000"):
        CallbackSink(broken).write(make_trajectory(0))


def test_mixed_sources_and_json_list_files(tmp_path):
    batch = make_batch(6)
    jsonl = JsonlSink(tmp_path / "jsonl")
    jsonl.write(batch[0])
    jsonl.close()
    parquet = ParquetSink(tmp_path / "parquet")
    parquet.write(batch[1])
    parquet.close()
    jsondir = JsonDirSink(tmp_path / "dir")
    jsondir.write(batch[2])
    jsondir.close()
    listed = tmp_path / "list.json"
    items = [batch[3].to_dict(), {"schema": "agenttrace.trajectory/1"}, batch[4].to_dict()]
    listed.write_text(json.dumps(items), encoding="utf-8")

    errors = ErrorLog()
    loaded = load_trajectories(
        [tmp_path / "jsonl", tmp_path / "parquet", str(tmp_path / "dir" / "*.json"), listed],
        on_error=errors,
    )
    assert loaded == batch[:5]
    assert len(errors.errors) == 1
    assert errors.errors[0].path == str(listed)
    assert "item 1" in errors.errors[0].message and "episode_id" in errors.errors[0].message


def test_invalid_json_file_is_one_error(tmp_path):
    (tmp_path / "a.json").write_text('{"schema": ', encoding="utf-8")
    (tmp_path / "b.json").write_text(make_trajectory(0).to_json(), encoding="utf-8")
    errors = ErrorLog()
    assert load_trajectories(tmp_path, on_error=errors) == [make_trajectory(0)]
    assert [(e.path, e.line) for e in errors.errors] == [(str(tmp_path / "a.json"), None)]
