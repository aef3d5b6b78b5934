"""Step tables: typed Parquet rows per step and per episode, read in one line by each tool.

The truth is what the gymnasium loop itself saw (observations acted on, actions, rewards), not
agenttrace's own reading of its files; the tables are read with pandas, polars, DuckDB and
Hugging Face ``datasets`` as their users would, and arrays come back with dtype and shape.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import exported

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.cli.main import main
from agenttrace.instrument.wrappers import TracedEnv
from agenttrace.reading.step_tables import column_values, decoded_column, read_step_tables
from agenttrace.sinks.step_tables import STEPS_FOLDER, StepTablesSink
from agenttrace.trajectory.model import Step, Trajectory


class GridEnv(gym.Env):
    """A Dict observation (a uint8 image, a float32 vector, a Discrete counter), a Box action."""

    observation_space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (3, 5), np.uint8),
            "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "count": gym.spaces.Discrete(50),
        }
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def _observation(self):
        return {
            "image": self.np_random.integers(0, 256, (3, 5), dtype=np.uint8),
            "position": self.np_random.uniform(-1, 1, 2).astype(np.float32),
            "count": np.int64(self.t),
        }

    def step(self, action):
        self.t += 1
        reward = float(np.sum(action))
        return self._observation(), reward, self.t >= 4 + int(self.np_random.integers(3)), False, {}


def play(env: gym.Env, episodes: int, seed: int) -> list[dict[str, Any]]:
    """Episodes played through a TracedEnv; per step what the loop saw."""
    seen = []
    env.action_space.seed(seed)
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            action = env.action_space.sample()
            next_observation, reward, terminated, truncated, _ = env.step(action)
            seen.append({"observation": observation, "action": action, "reward": float(reward)})
            observation, done = next_observation, terminated or truncated
    return seen


@pytest.fixture
def cartpole_tables(tmp_path) -> tuple[Path, list[dict[str, Any]]]:
    runtime = at.configure(out=str(tmp_path), run_name="run", sinks=["steps"], spans=["file"])
    seen = play(TracedEnv(gym.make("CartPole-v1", max_episode_steps=40)), episodes=6, seed=3)
    runtime.shutdown()
    return tmp_path / "run", seen


def test_each_tool_reads_the_step_table_in_one_line(cartpole_tables) -> None:
    run, seen = cartpole_tables
    rewards = np.array([s["reward"] for s in seen])
    observations = np.stack([s["observation"] for s in seen])

    import pandas as pd

    frame = pd.read_parquet(run / "steps")
    assert len(frame) == len(seen) and frame["reward"].sum() == rewards.sum()
    np.testing.assert_array_equal(np.stack(frame["observation"].to_numpy()), observations)

    import polars as pl

    table = pl.read_parquet(run / "steps" / "*.parquet")
    assert table.schema["observation"] == pl.Array(pl.Float32, 4)
    np.testing.assert_array_equal(table["observation"].to_numpy(), observations)

    import duckdb

    (average,) = duckdb.sql(f"SELECT avg(reward) FROM '{run}/steps/*.parquet'").fetchall()[0]
    assert average == pytest.approx(rewards.mean())

    import datasets

    loaded = datasets.load_dataset(
        "parquet", data_files=str(run / "steps" / "*.parquet"), split="train"
    )
    assert loaded.num_rows == len(seen)
    np.testing.assert_array_equal(np.array(loaded[0]["observation"], np.float32), observations[0])
    assert [int(a) for a in loaded["action"]] == [int(s["action"]) for s in seen]


def test_arrays_come_back_with_dtype_and_shape(cartpole_tables) -> None:
    run, seen = cartpole_tables
    steps, episodes = read_step_tables(run)
    observations = column_values(steps, "observation")
    assert observations.dtype == np.float32 and observations.shape == (len(seen), 4)
    np.testing.assert_array_equal(observations, np.stack([s["observation"] for s in seen]))
    actions = column_values(steps, "action")  # gymnasium's Discrete gives np.int64
    assert actions.dtype == np.int64 and actions.shape == (len(seen),)
    assert actions.tolist() == [int(s["action"]) for s in seen]
    # The episodes table: one row per episode, joined by episode_id.
    assert episodes.num_rows == 6
    lengths = dict(
        zip(episodes["episode_id"].to_pylist(), episodes["length"].to_pylist(), strict=True)
    )
    counted: dict[str, int] = {}
    for episode_id in steps["episode_id"].to_pylist():
        counted[episode_id] = counted.get(episode_id, 0) + 1
    assert counted == lengths
    assert set(episodes["status"].to_pylist()) <= {sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED}
    assert episodes["env_name"].to_pylist() == ["CartPole-v1"] * 6


def test_dict_observations_become_structs_of_typed_columns(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="grid", sinks=["steps"])
    seen = play(TracedEnv(GridEnv()), episodes=4, seed=9)
    runtime.shutdown()
    steps, _ = read_step_tables(tmp_path / "grid")
    field = steps.schema.field("observation")
    image = field.type.field("image")
    assert str(image.type) == "fixed_size_list<element: fixed_size_list<element: uint8>[5]>[3]"
    assert image.metadata[b"agenttrace.shape"] == b"[3, 5]"
    rows = steps["observation"].to_pylist()
    for row, step in zip(rows, seen, strict=True):
        np.testing.assert_array_equal(
            np.array(row["image"], np.uint8), step["observation"]["image"]
        )
        np.testing.assert_array_equal(
            np.array(row["position"], np.float32), step["observation"]["position"]
        )
        assert row["count"] == step["observation"]["count"]
    actions = column_values(steps, "action")
    assert actions.dtype == np.float32 and actions.shape == (len(seen), 2)
    np.testing.assert_array_equal(actions, np.stack([s["action"] for s in seen]))

    import duckdb

    (total,) = duckdb.sql(
        f"SELECT sum(observation.count) FROM '{tmp_path}/grid/steps/*.parquet'"
    ).fetchall()[0]
    assert total == sum(int(s["observation"]["count"]) for s in seen)


def trajectory(episode_id: str, observations: list[Any], **fields: Any) -> Trajectory:
    steps = [
        Step(index=i, observation=o, action=i, reward=1.0, info={"i": i} if i else None)
        for i, o in enumerate(observations)
    ]
    return Trajectory(episode_id=episode_id, steps=steps, length=len(steps), **fields)


def test_irregular_values_fall_back_to_the_encoded_column(tmp_path) -> None:
    sink = StepTablesSink(tmp_path)
    ragged = [np.arange(3, dtype=np.int16), np.arange(5, dtype=np.int16), None]
    sink.write(trajectory("ragged", ragged))
    sink.close()
    steps, _ = read_step_tables(tmp_path)
    assert steps.schema.field("observation").metadata[b"agenttrace.encoding"] == b"json"
    values = column_values(steps, "observation")
    assert values[2] is None
    for got, expected in zip(values[:2], ragged[:2], strict=True):
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, expected)
    assert decoded_column(steps["info"]) == [None, {"i": 1}, {"i": 2}]


def test_chat_messages_are_encoded_and_text_observations_typed(tmp_path) -> None:
    sink = StepTablesSink(tmp_path)
    messages = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "again"}]]
    sink.write(trajectory("chat", messages))
    sink.flush()
    sink.write(trajectory("text", ["a prompt", "another"]))
    sink.close()
    parts = sorted((tmp_path / STEPS_FOLDER).glob("*.parquet"))
    first, second = (pq.read_table(part) for part in parts)
    assert decoded_column(first["observation"]) == messages
    assert str(second.schema.field("observation").type) == "string"
    assert second["observation"].to_pylist() == ["a prompt", "another"]


def test_an_episode_needing_another_schema_starts_a_new_part(tmp_path, caplog) -> None:
    sink = StepTablesSink(tmp_path)
    sink.write(trajectory("a", [np.zeros(4, np.float32)] * 3))
    sink.write(trajectory("b", [np.ones(4, np.float32)] * 2))  # same schema, same part
    sink.write(trajectory("missing", [None, None]))  # all missing: fits any type, same part
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        sink.write(trajectory("c", [np.zeros(6, np.float32)]))
    sink.close()
    assert "needs another type for column 'observation'" in caplog.text
    parts = sorted((tmp_path / STEPS_FOLDER).glob("*.parquet"))
    assert [pq.read_metadata(p).num_rows for p in parts] == [7, 1]
    with pytest.raises(ValueError, match="different schemas"):
        read_step_tables(tmp_path)


def test_row_groups_are_bounded_and_parts_appear_only_when_complete(tmp_path) -> None:
    sink = StepTablesSink(tmp_path, row_group_rows=10)
    for n in range(5):
        sink.write(trajectory(f"e{n}", [np.full(2, n, np.int32)] * 7))
    folder = tmp_path / STEPS_FOLDER
    assert list(folder.glob("*.parquet")) == []  # still a .partial: readers see no half file
    assert len(list(folder.glob("*.partial"))) == 1
    sink.close()
    (part,) = folder.glob("*.parquet")
    metadata = pq.read_metadata(part)
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sum(sizes) == 35 and max(sizes) <= 14 and len(sizes) >= 3


def test_one_unstorable_episode_costs_only_itself(tmp_path) -> None:
    sink = StepTablesSink(tmp_path)
    sink.write(trajectory("good-1", [1.5, 2.5]))
    with pytest.raises(ValueError, match=r"'bad'.*cannot be stored in the step tables"):
        sink.write(trajectory("bad", [1.5], start_time=2**70))
    sink.write(trajectory("good-2", [3.5]))
    sink.close()
    steps, episodes = read_step_tables(tmp_path)
    assert episodes["episode_id"].to_pylist() == ["good-1", "good-2"]
    assert steps["observation"].to_pylist() == [1.5, 2.5, 3.5]


def test_export_format_steps_equals_the_live_tables(cartpole_tables, tmp_path) -> None:
    run, seen = cartpole_tables
    out = tmp_path / "tables"
    code = main(
        [
            "export",
            "--from",
            str(run / "spans.jsonl"),
            "--out",
            str(out),
            "--format",
            "steps",
            "--quiet",
        ]
    )
    assert code == 0
    live_steps, live_episodes = read_step_tables(run)
    steps, episodes = read_step_tables(out)
    key = ["episode_id", "index"]
    assert steps.sort_by([(k, "ascending") for k in key]).equals(
        live_steps.sort_by([(k, "ascending") for k in key])
    )
    assert sorted(episodes["episode_id"].to_pylist()) == sorted(
        live_episodes["episode_id"].to_pylist()
    )
    np.testing.assert_array_equal(
        np.sort(column_values(steps, "observation"), axis=0),
        np.sort(np.stack([s["observation"] for s in seen]), axis=0),
    )
    # The trajectory export of the same spans agrees on every episode's return.
    trajectories = exported(str(run / "spans.jsonl"), tmp_path / "t.jsonl")
    returns = dict(
        zip(episodes["episode_id"].to_pylist(), episodes["return"].to_pylist(), strict=True)
    )
    assert returns == {t.episode_id: t.return_ for t in trajectories}


def test_export_steps_refuses_a_file_name_or_a_folder_of_other_things(
    tmp_path, capsys, cartpole_tables
) -> None:
    run, _ = cartpole_tables
    source = str(run / "spans.jsonl")
    assert (
        main(
            ["export", "--from", source, "--out", str(tmp_path / "x.parquet"), "--format", "steps"]
        )
        == 2
    )
    assert "writes a folder" in capsys.readouterr().err
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert (
        main(["export", "--from", source, "--out", str(other), "--format", "steps", "--force"]) == 2
    )
    assert "holds more than step tables" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "keep me"
    out = tmp_path / "tables"
    assert (
        main(["export", "--from", source, "--out", str(out), "--format", "steps", "--quiet"]) == 0
    )
    assert (
        main(["export", "--from", source, "--out", str(out), "--format", "steps", "--quiet"]) == 2
    )
    assert (
        main(
            [
                "export",
                "--from",
                source,
                "--out",
                str(out),
                "--format",
                "steps",
                "--quiet",
                "--force",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == ["episode_table", "steps"]
    assert len(list((out / "steps").glob("*.parquet"))) == 1  # replaced, not added to


def test_vector_env_episodes_carry_their_sub_env_and_groups(tmp_path) -> None:
    from agenttrace.instrument.vector import TracedVectorEnv

    runtime = at.configure(out=str(tmp_path), run_name="vec", sinks=["steps"])
    envs = TracedVectorEnv(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync", max_episode_steps=10),
        attributes={sc.GROUP_ID: "task-7"},
    )
    envs.reset(seed=0)
    for _ in range(25):
        envs.step(np.zeros(2, dtype=np.int64))
    envs.close()
    runtime.shutdown()
    _, episodes = read_step_tables(tmp_path / "vec")
    assert set(episodes["env_index"].to_pylist()) == {0, 1}
    assert set(episodes["group_id"].to_pylist()) == {"task-7"}
    assert sc.STATUS_ABORTED in episodes["status"].to_pylist()
