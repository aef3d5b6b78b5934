"""JsonlSink and the JSONL reader: round trips, rotation, crash leftovers, bad records."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest
from conftest_sinks_helpers import ErrorLog, make_batch, make_trajectory

from agenttrace.sinks import (
    JsonlSink,
    Sink,
    TrajectoryLoadError,
    iter_trajectories,
    load_trajectories,
)
from agenttrace.trajectory.model import Trajectory


def write_all(sink: JsonlSink, trajectories: list[Trajectory]) -> None:
    for trajectory in trajectories:
        sink.write(trajectory)


def test_round_trip_equal_and_one_line_per_episode(tmp_path):
    batch = make_batch(6)
    sink = JsonlSink(tmp_path / "out")
    assert isinstance(sink, Sink)
    write_all(sink, batch)
    sink.close()

    path = tmp_path / "out" / "trajectories.jsonl"
    assert sink.paths == [path]
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    # Split on "\n" only: the text holds U+2028, which str.splitlines() would also split on.
    lines = raw.decode("utf-8").split("\n")
    assert lines == [t.to_json() for t in batch] + [""]

    errors = ErrorLog()
    loaded = load_trajectories(tmp_path / "out", on_error=errors)
    assert errors.errors == []
    assert loaded == batch
    # NaN/inf rewards and numpy dtypes survived, not just "equal enough".
    assert loaded[0].steps[0].reward != loaded[0].steps[0].reward
    assert loaded[0].steps[0].observation["vec"].dtype == np.float32
    assert loaded[0].steps[0].observation["image"].dtype == np.uint8
    assert loaded[0].steps[0].action == (0, "left", b"\x00\xff\x10")


def test_every_source_form_reads_the_same(tmp_path):
    batch = make_batch(3)
    sink = JsonlSink(tmp_path)
    write_all(sink, batch)
    sink.close()
    path = tmp_path / "trajectories.jsonl"
    assert load_trajectories(path) == batch
    assert load_trajectories(str(path)) == batch
    assert load_trajectories(str(tmp_path / "*.jsonl")) == batch
    assert load_trajectories([path, path]) == batch + batch
    assert list(iter_trajectories(tmp_path)) == batch


def test_rotation_by_size_keeps_order_across_files(tmp_path):
    batch = make_batch(7)
    line_sizes = [len(t.to_json().encode()) + 1 for t in batch]
    max_bytes = int(max(line_sizes) * 2.5)  # two lines fit, a third does not
    sink = JsonlSink(tmp_path, max_bytes=max_bytes)
    write_all(sink, batch)
    sink.close()

    names = [p.name for p in sink.paths]
    assert names == [
        "trajectories.jsonl",
        "trajectories-00001.jsonl",
        "trajectories-00002.jsonl",
        "trajectories-00003.jsonl",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    for path in sink.paths:
        assert path.stat().st_size <= max_bytes
    # "-00001" sorts before "." by name; the reader must still keep write order.
    assert load_trajectories(tmp_path) == batch


def test_line_larger_than_max_bytes_gets_its_own_file(tmp_path):
    batch = make_batch(3)
    sink = JsonlSink(tmp_path, max_bytes=100)
    write_all(sink, batch)
    sink.close()
    assert len(sink.paths) == 3
    for path, trajectory in zip(sink.paths, batch, strict=True):
        assert path.read_text(encoding="utf-8") == trajectory.to_json() + "\n"
    assert load_trajectories(tmp_path) == batch


def test_new_sink_continues_newest_file(tmp_path):
    first, second = make_batch(2), [make_trajectory(10), make_trajectory(11)]
    sink = JsonlSink(tmp_path)
    write_all(sink, first)
    sink.close()
    again = JsonlSink(tmp_path)
    write_all(again, second)
    again.close()
    assert [p.name for p in again.paths] == ["trajectories.jsonl"]
    assert load_trajectories(tmp_path) == first + second


def test_torn_last_line_then_append_keeps_every_complete_record(tmp_path):
    batch = make_batch(5)
    sink = JsonlSink(tmp_path)
    write_all(sink, batch[:2])
    sink.close()
    path = tmp_path / "trajectories.jsonl"
    torn = batch[2].to_json()
    with open(path, "ab") as handle:  # a crash mid-write: half a line, no newline
        handle.write(torn[: len(torn) // 2].encode("utf-8"))

    errors = ErrorLog()
    assert load_trajectories(path, on_error=errors) == batch[:2]
    assert len(errors.errors) == 1
    error = errors.errors[0]
    assert error.torn and error.line == 3
    assert "torn last line" in str(error) and f"{path}:3:" in str(error)

    restarted = JsonlSink(tmp_path)
    write_all(restarted, batch[3:])
    restarted.close()

    lines = path.read_text(encoding="utf-8").split("\n")
    assert torn[: len(torn) // 2] not in lines  # the torn text was cut before appending
    errors = ErrorLog()
    assert load_trajectories(path, on_error=errors) == batch[:2] + batch[3:]
    assert errors.errors == []


def test_torn_inside_a_string_or_literal_is_still_called_torn(tmp_path):
    path = tmp_path / "t.jsonl"
    good = make_trajectory(0).to_json()
    path.write_text(
        "\n".join([good, '{"schema":"agenttrace.traj', '{"a":tr', '{"a":1}garbage', good]) + "\n",
        encoding="utf-8",
    )
    errors = ErrorLog()
    assert len(load_trajectories(path, on_error=errors)) == 2
    assert [(e.line, e.torn) for e in errors.errors] == [(2, True), (3, True), (4, False)]


def test_malformed_middle_line_is_reported_with_file_and_line(tmp_path):
    batch = make_batch(3)
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join([batch[0].to_json(), "{not json at all}", "", batch[1].to_json()]) + "\n",
        encoding="utf-8",
    )
    errors = ErrorLog()
    assert load_trajectories(path, on_error=errors) == batch[:2]
    assert len(errors.errors) == 1
    error = errors.errors[0]
    assert isinstance(error, TrajectoryLoadError)
    assert (error.path, error.line, error.torn) == (str(path), 2, False)
    assert str(error).startswith(f"{path}:2: not valid JSON")


def test_default_on_error_warns_and_goes_on(tmp_path):
    batch = make_batch(2)
    path = tmp_path / "bad.jsonl"
    path.write_text(batch[0].to_json() + "\n[1, 2\n" + batch[1].to_json() + "\n", "utf-8")
    with pytest.warns(UserWarning, match=r"bad\.jsonl:2:"):
        loaded = load_trajectories(path)
    assert loaded == batch


def test_record_missing_required_key_names_the_key(tmp_path):
    batch = make_batch(3)
    broken = batch[1].to_dict()
    del broken["status"]
    path = tmp_path / "missing.jsonl"
    path.write_text(
        "\n".join([batch[0].to_json(), json.dumps(broken), batch[2].to_json()]) + "\n",
        encoding="utf-8",
    )
    errors = ErrorLog()
    assert load_trajectories(path, on_error=errors) == [batch[0], batch[2]]
    assert len(errors.errors) == 1
    assert errors.errors[0].line == 2
    assert "missing required key(s): status" in str(errors.errors[0])


def test_wrong_shapes_and_encodings_are_per_record_errors(tmp_path):
    good = make_trajectory(0)
    bad_array = good.to_dict()
    bad_array["final_observation"] = {"$ndarray": {"dtype": "<f4", "shape": [9], "data": [1]}}
    path = tmp_path / "odd.jsonl"
    path.write_bytes(
        b"\n".join(
            [
                b"[1, 2, 3]",
                b"\xff\xfe not utf-8",
                json.dumps(bad_array).encode(),
                good.to_json().encode(),
            ]
        )
        + b"\n"
    )
    errors = ErrorLog()
    assert load_trajectories(path, on_error=errors) == [good]
    assert [e.line for e in errors.errors] == [1, 2, 3]
    assert "JSON object" in errors.errors[0].message
    assert "UTF-8" in errors.errors[1].message


def test_ten_megabyte_observation_round_trips(tmp_path):
    trajectory = make_trajectory(1, steps=1)
    big = np.zeros(10 * 1024 * 1024, dtype=np.uint8)
    big[::4097] = 7
    trajectory.steps[0].observation = big
    sink = JsonlSink(tmp_path)
    sink.write(trajectory)
    sink.close()
    (loaded,) = load_trajectories(tmp_path)
    assert loaded == trajectory
    assert loaded.steps[0].observation.shape == (10 * 1024 * 1024,)
    assert int(loaded.steps[0].observation.sum()) == int(big.sum())


def test_gzip_files_read_and_truncated_gzip_is_reported(tmp_path):
    batch = make_batch(4)
    sink = JsonlSink(tmp_path / "plain")
    write_all(sink, batch)
    sink.close()
    data = (tmp_path / "plain" / "trajectories.jsonl").read_bytes()
    gz = tmp_path / "zipped" / "trajectories.jsonl.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(data))
    assert load_trajectories(gz.parent) == batch

    cut = tmp_path / "cut.jsonl.gz"
    compressed = gzip.compress(data)
    cut.write_bytes(compressed[: len(compressed) * 3 // 4])
    errors = ErrorLog()
    loaded = load_trajectories(cut, on_error=errors)
    assert loaded == batch[: len(loaded)]
    assert len(errors.errors) == 1
    assert "cannot read file" in errors.errors[0].message


def test_on_error_that_raises_stops_reading(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("nope\n" + make_trajectory(0).to_json() + "\n", "utf-8")

    def strict(error: TrajectoryLoadError) -> None:
        raise error

    with pytest.raises(TrajectoryLoadError, match=r"x\.jsonl:1:"):
        load_trajectories(path, on_error=strict)


def test_missing_sources_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        load_trajectories(tmp_path / "nothing-here.jsonl")
    with pytest.raises(FileNotFoundError, match="no files match"):
        iter_trajectories(str(tmp_path / "*.jsonl"))  # fails at the call, not on first next()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a trajectory")
    with pytest.raises(FileNotFoundError, match="no trajectory files"):
        load_trajectories(empty)
    with pytest.raises(FileNotFoundError, match="empty list"):
        load_trajectories([])


def test_write_after_close_raises_and_close_is_idempotent(tmp_path):
    sink = JsonlSink(tmp_path)
    sink.write(make_trajectory(0))
    sink.flush()
    sink.close()
    sink.close()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(make_trajectory(1))
    assert len(load_trajectories(tmp_path)) == 1


def test_folder_is_created_and_basename_must_be_plain(tmp_path):
    folder = tmp_path / "a" / "b"
    sink = JsonlSink(folder, basename="run-1")
    sink.write(make_trajectory(0))
    sink.close()
    assert (folder / "run-1.jsonl").is_file()
    for bad in ("../escape", "", ".hidden", "a/b"):
        with pytest.raises(ValueError, match="basename"):
            JsonlSink(tmp_path, basename=bad)


def test_file_copied_mid_write_loses_only_the_last_record(tmp_path):
    """What a reader sees while a writer is appending: every complete line, one torn error."""
    batch = make_batch(3)
    sink = JsonlSink(tmp_path / "live")
    write_all(sink, batch)
    sink.close()
    data = (tmp_path / "live" / "trajectories.jsonl").read_bytes()
    snapshot = tmp_path / "snapshot.jsonl"
    snapshot.write_bytes(data[:-100])
    errors = ErrorLog()
    assert load_trajectories(snapshot, on_error=errors) == batch[:2]
    assert [(e.line, e.torn) for e in errors.errors] == [(3, True)]
    shutil.rmtree(tmp_path / "live")


def test_lone_surrogates_round_trip_as_json_escapes(tmp_path):
    """Strings decoded with surrogateescape (file names, raw bytes) cannot be UTF-8 encoded."""
    trajectory = make_trajectory(0, steps=1)
    trajectory.episode_id = "ep-\udcff"
    trajectory.steps[0].observation = {"name": "caf\udce9", "ok": "✓"}
    sink = JsonlSink(tmp_path)
    sink.write(trajectory)
    sink.close()
    raw = (tmp_path / "trajectories.jsonl").read_bytes()
    raw.decode("utf-8")  # valid UTF-8 on disk
    assert b"\\udcff" in raw
    assert load_trajectories(tmp_path) == [trajectory]
