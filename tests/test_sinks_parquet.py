"""ParquetSink and read_parquet: equality round trips, parts, column layout, bad rows."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest_sinks_helpers import ErrorLog, make_batch, make_trajectory

from agenttrace.reading.parquet import read_parquet
from agenttrace.sinks import ParquetSink, Sink, load_trajectories
from agenttrace.sinks.parquet import arrow_schema, trajectory_to_row
from agenttrace.trajectory.model import Step, Trajectory


def parquet_files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".parquet"))


def test_round_trip_equal(tmp_path):
    batch = make_batch(8)
    sink = ParquetSink(tmp_path)
    assert isinstance(sink, Sink)
    for trajectory in batch:
        sink.write(trajectory)
    sink.close()
    assert parquet_files(tmp_path) == ["trajectories-00000.parquet"]
    assert sink.paths == [tmp_path / "trajectories-00000.parquet"]

    errors = ErrorLog()
    loaded = list(read_parquet(sink.paths[0], on_error=errors))
    assert errors.errors == []
    assert loaded == batch
    assert load_trajectories(tmp_path) == batch
    # The hard cases, checked one by one.
    assert np.isnan(loaded[0].steps[0].reward)
    assert loaded[0].steps[1].reward == float("inf")
    assert loaded[0].steps[2].reward is None
    assert np.isnan(loaded[3].return_)
    assert loaded[2].error == batch[2].error and loaded[2].status == "errored"
    assert loaded[4].trace_id is None and loaded[4].end_time is None
    assert loaded[5].missing_steps == [4]
    assert loaded[0].steps[0].llm_calls[0].input_messages[1]["parts"][0]["content"] == "step 0"


def test_columns_have_the_documented_types(tmp_path):
    sink = ParquetSink(tmp_path)
    for trajectory in make_batch(4):
        sink.write(trajectory)
    sink.close()
    table = pq.read_table(sink.paths[0])
    assert table.schema.equals(arrow_schema())
    assert table.schema.field("return").type == pa.float64()
    assert table.schema.field("start_time").type == pa.int64()
    assert table.schema.field("missing_steps").type == pa.list_(pa.int64())
    step_type = table.schema.field("steps").type.value_type
    assert step_type.field("reward").type == pa.float64()
    assert step_type.field("terminated").type == pa.bool_()
    assert step_type.field("observation").type == pa.string()

    # NaN and inf are stored as float64 values, None as null: queryable without the codec.
    rewards = pc.list_flatten(table.column("steps")).combine_chunks().field("reward")
    assert rewards.null_count == sum(1 for t in make_batch(4) for s in t.steps if s.reward is None)
    assert pc.sum(pc.is_nan(rewards.drop_null())).as_py() >= 1
    assert pc.sum(pc.is_inf(rewards.drop_null())).as_py() >= 1

    row = table.slice(2, 1).to_pylist()[0]
    assert json.loads(row["error"]) == {
        "type": "ValueError",
        "message": "boom 2",
        "stack": "Traceback...\nValueError",
    }
    assert json.loads(row["attributes"])["rl.env.name"] == "Grid-v0"
    assert json.loads(row["steps"][0]["llm_calls"])[0]["model"] == "gpt-test"
    assert json.loads(row["steps"][0]["tool_calls"])[0]["name"] == "search"
    assert table.column("error")[0].as_py() is None


def test_flush_finishes_a_readable_part_and_next_write_starts_another(tmp_path):
    batch = make_batch(5)
    sink = ParquetSink(tmp_path)
    sink.write(batch[0])
    sink.write(batch[1])
    sink.flush()
    assert parquet_files(tmp_path) == ["trajectories-00000.parquet"]
    assert list(read_parquet(tmp_path / "trajectories-00000.parquet")) == batch[:2]

    sink.write(batch[2])
    sink.flush()
    sink.flush()  # nothing new: no empty part
    sink.write(batch[3])
    assert parquet_files(tmp_path) == [
        "trajectories-00000.parquet",
        "trajectories-00001.parquet",
    ]
    sink.write(batch[4])
    sink.close()
    assert parquet_files(tmp_path) == [
        "trajectories-00000.parquet",
        "trajectories-00001.parquet",
        "trajectories-00002.parquet",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert load_trajectories(tmp_path) == batch


def test_rows_per_file_splits_parts_in_order(tmp_path):
    batch = make_batch(7)
    sink = ParquetSink(tmp_path, rows_per_file=3)
    for trajectory in batch[:6]:
        sink.write(trajectory)
    assert len(parquet_files(tmp_path)) == 2  # finished without any flush
    sink.write(batch[6])
    sink.close()
    assert [pq.read_metadata(p).num_rows for p in sink.paths] == [3, 3, 1]
    assert load_trajectories(tmp_path) == batch


def test_large_parts_are_written_in_row_groups(tmp_path):
    batch = [make_trajectory(i % 7, steps=1) for i in range(300)]
    sink = ParquetSink(tmp_path)
    for trajectory in batch:
        sink.write(trajectory)
    sink.close()
    metadata = pq.read_metadata(sink.paths[0])
    assert metadata.num_rows == 300
    assert metadata.num_row_groups == 2
    assert list(read_parquet(sink.paths[0], batch_rows=7)) == batch


def test_new_sink_never_overwrites_earlier_parts(tmp_path):
    first = ParquetSink(tmp_path)
    first.write(make_trajectory(0))
    first.close()
    second = ParquetSink(tmp_path)
    second.write(make_trajectory(1))
    second.close()
    assert parquet_files(tmp_path) == [
        "trajectories-00000.parquet",
        "trajectories-00001.parquet",
    ]
    assert [t.episode_id for t in load_trajectories(tmp_path)] == ["ep-0000", "ep-0001"]


def test_ten_megabyte_observation_round_trips(tmp_path):
    trajectory = make_trajectory(2, steps=2)
    big = np.zeros(10 * 1024 * 1024, dtype=np.uint8)
    big[-1] = 255
    trajectory.steps[1].observation = big
    sink = ParquetSink(tmp_path)
    sink.write(trajectory)
    sink.close()
    (loaded,) = load_trajectories(tmp_path)
    assert loaded == trajectory
    assert loaded.steps[1].observation[-1] == 255


def test_bad_rows_are_reported_and_the_others_load(tmp_path):
    batch = make_batch(3)
    rows = [trajectory_to_row(t) for t in batch]
    rows[1]["attributes"] = "{broken json"
    path = tmp_path / "hand-made.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), path)
    errors = ErrorLog()
    assert list(read_parquet(path, on_error=errors)) == [batch[0], batch[2]]
    assert len(errors.errors) == 1
    assert errors.errors[0].line == 1
    assert str(errors.errors[0]).startswith(f"{path}: row 1:")


def test_missing_required_column_value_names_the_key(tmp_path):
    rows = [trajectory_to_row(t) for t in make_batch(2)]
    schema = arrow_schema().remove(arrow_schema().get_field_index("status"))
    for row in rows:
        del row["status"]
    path = tmp_path / "no-status.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    errors = ErrorLog()
    assert list(read_parquet(path, on_error=errors)) == []
    assert [e.line for e in errors.errors] == [0, 1]
    assert "missing required key(s): status" in errors.errors[0].message


def test_foreign_and_corrupt_files_are_one_error_each(tmp_path):
    foreign = tmp_path / "a-other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), foreign)
    corrupt = tmp_path / "b-corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not really parquet")
    good = ParquetSink(tmp_path, basename="c")
    good.write(make_trajectory(0))
    good.close()
    errors = ErrorLog()
    assert load_trajectories(tmp_path, on_error=errors) == [make_trajectory(0)]
    assert [(e.path, e.line) for e in errors.errors] == [(str(foreign), None), (str(corrupt), None)]
    assert "not an agenttrace trajectory file" in errors.errors[0].message
    assert "cannot read Parquet file" in errors.errors[1].message


def test_non_number_reward_is_a_clear_error(tmp_path):
    trajectory = Trajectory(episode_id="x", steps=[Step(index=0, reward="high")])
    sink = ParquetSink(tmp_path)
    with pytest.raises((TypeError, ValueError), match="reward of episode 'x' step 0"):
        sink.write(trajectory)
    sink.write(make_trajectory(0))
    sink.close()
    assert load_trajectories(tmp_path) == [make_trajectory(0)]


def test_write_after_close_raises(tmp_path):
    sink = ParquetSink(tmp_path)
    sink.close()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(make_trajectory(0))
    assert parquet_files(tmp_path) == []


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_importing_sinks_does_not_import_pyarrow():
    result = run_python(
        "import sys, agenttrace.sinks\n"
        "from agenttrace.sinks import ParquetSink\n"
        "print('pyarrow' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_without_pyarrow_the_error_says_what_to_install(tmp_path):
    result = run_python(
        "import sys\n"
        "sys.modules['pyarrow'] = None  # as if pyarrow were not installed\n"
        "from agenttrace.sinks import ParquetSink\n"
        "try:\n"
        f"    ParquetSink({str(tmp_path)!r})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install -e '.[parquet]' from a clone of the repository" in result.stdout


def test_unstorable_trajectory_fails_alone_and_spoils_no_row_group(tmp_path):
    batch = make_batch(3)
    surrogate_text = make_trajectory(5, steps=1)
    surrogate_text.steps[0].info = {"path": "caf\udce9"}  # JSON text: stored as an escape
    bad_id = make_trajectory(6, steps=1)
    bad_id.episode_id = "ep-\udcff"  # a plain string column must be UTF-8
    bad_time = make_trajectory(7, steps=1)
    bad_time.start_time = 2**64  # beyond int64
    sink = ParquetSink(tmp_path)
    sink.write(batch[0])
    with pytest.raises(ValueError, match=r"episode 'ep-\\udcff' cannot be stored in Parquet"):
        sink.write(bad_id)
    with pytest.raises(ValueError, match="episode 'ep-0007' cannot be stored"):
        sink.write(bad_time)
    sink.write(surrogate_text)
    sink.write(batch[1])
    sink.close()
    assert load_trajectories(tmp_path) == [batch[0], surrogate_text, batch[1]]
