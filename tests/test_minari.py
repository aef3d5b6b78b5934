"""Minari datasets equal to what Minari's own ``DataCollector`` records for the same loop.

One loop feeds both: ``DataCollector(TracedEnv(env))``, so every reset and step is seen by
Minari's recorder and by agenttrace's. The Minari dataset agenttrace writes, live (the
``minari`` sink) and from the span file (``agenttrace export --format minari``), must then
equal DataCollector's episode by episode, opened with the real ``minari.load_dataset``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari import DataCollector

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.cli.main import main
from agenttrace.instrument.wrappers import TracedEnv
from agenttrace.sinks import load_trajectories
from agenttrace.sinks.minari_dataset import MinariSink, infer_space
from agenttrace.trajectory.model import Step, Trajectory


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "minari-datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    warnings.filterwarnings("ignore", module="minari")  # (its own deprecation notes)
    return root


class DictEnv(gym.Env):
    """A Dict observation: a float32 vector and a Discrete counter; Discrete actions."""

    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "count": gym.spaces.Discrete(9)}
    )
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def _observation(self):
        position = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"position": position, "count": np.int64(self.t)}

    def step(self, action):
        self.t += 1
        return self._observation(), float(action) - 1.0, self.t >= 3 + int(action), False, {}


ENVS = {
    "CartPole-v1": lambda: gym.make("CartPole-v1", max_episode_steps=25),
    "FrozenLake-v1": lambda: gym.make("FrozenLake-v1"),
    "Taxi-v4": lambda: gym.make("Taxi-v4", max_episode_steps=20),
    "dict": DictEnv,
}


def record_both(env_name: str, out: Path, episodes: int = 5) -> tuple[Any, list[Trajectory], Path]:
    """The loop, under DataCollector and agenttrace at once: (DataCollector's dataset, the
    live trajectories, the span file). Seeds: given for some resets, Minari's own for others
    (DataCollector draws one when none is given; agenttrace records what reset got)."""
    runtime = at.configure(out=str(out), run_name=env_name, sinks=["jsonl"], spans=["file"])
    env = DataCollector(TracedEnv(ENVS[env_name]()))
    env.action_space.seed(1)
    for episode in range(episodes):
        env.reset(seed=episode if episode % 2 == 0 else None)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    theirs = env.create_dataset(dataset_id=f"datacollector/{env_name.lower()}-v0")
    runtime.shutdown()
    live = sorted(load_trajectories(runtime.trajectory_paths), key=lambda t: t.start_time)
    return theirs, live, runtime.span_paths[0]


def assert_same_values(ours: Any, theirs: Any, what: str) -> None:
    if isinstance(theirs, dict):
        assert ours.keys() == theirs.keys(), what
        for key in theirs:
            assert_same_values(ours[key], theirs[key], f"{what}.{key}")
        return
    assert ours.shape == theirs.shape, what
    np.testing.assert_array_equal(ours, theirs, err_msg=what)


def assert_same_datasets(ours: Any, theirs: Any) -> None:
    assert ours.total_episodes == theirs.total_episodes >= 5
    assert ours.total_steps == theirs.total_steps
    for a, b in zip(ours.iterate_episodes(), theirs.iterate_episodes(), strict=True):
        for field in ("observations", "actions", "terminations", "truncations"):
            assert_same_values(getattr(a, field), getattr(b, field), f"episode {b.id} {field}")
        # Rewards are floats in a trajectory: equal values; DataCollector keeps the env's
        # type (int64 for FrozenLake and Taxi).
        np.testing.assert_array_equal(a.rewards, b.rewards.astype(np.float64))
        assert a.rewards.dtype == np.float64
    ours_meta = list(ours.storage.get_episode_metadata(ours.episode_indices))
    theirs_meta = list(theirs.storage.get_episode_metadata(theirs.episode_indices))
    for a, b in zip(ours_meta, theirs_meta, strict=True):
        assert a["seed"] == b["seed"]
        assert a["rewards_sum"] == pytest.approx(b["rewards_sum"])
        assert a["total_steps"] == b["total_steps"]


@pytest.mark.parametrize("env_name", list(ENVS))
def test_exported_and_live_datasets_equal_datacollectors(env_name, tmp_path) -> None:
    theirs, live, spans = record_both(env_name, tmp_path)
    spaces = {}
    if env_name == "dict":  # not a registered env: its spaces are given
        spaces = {
            "observation_space": DictEnv.observation_space,
            "action_space": DictEnv.action_space,
        }
    sink = MinariSink(f"live/{env_name.lower()}-v0", episodes_per_write=2, **spaces)
    for trajectory in live:
        sink.write(trajectory)
    sink.close()
    ours = minari.load_dataset(f"live/{env_name.lower()}-v0")
    assert_same_datasets(ours, theirs)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space
    if env_name != "dict":
        assert ours.spec.env_spec.id == env_name  # from the episodes' rl.env.name
        code = main(
            ["export", "--from", str(spans), "--format", "minari", "--quiet",
             "--dataset-id", f"exported/{env_name.lower()}-v0"]
        )  # fmt: skip
        assert code == 0
        assert_same_datasets(minari.load_dataset(f"exported/{env_name.lower()}-v0"), theirs)


def test_the_live_minari_sink_writes_as_episodes_finish(tmp_path, minari_root) -> None:
    runtime = at.configure(
        out=str(tmp_path), run_name="live", sinks=["minari"], minari_dataset_id="run/cartpole-v0"
    )
    env = TracedEnv(gym.make("CartPole-v1", max_episode_steps=15))
    returns = []
    for seed in range(4):
        env.reset(seed=seed)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(seed % 2))
            total += reward
            done = terminated or truncated
        returns.append(total)
    runtime.shutdown()
    assert "the Minari dataset run/cartpole-v0" in runtime.summary_line()
    dataset = minari.load_dataset("run/cartpole-v0")
    assert (minari_root / "run" / "cartpole-v0" / "data" / "main_data.hdf5").is_file()
    assert [float(e.rewards.sum()) for e in dataset.iterate_episodes()] == returns
    assert [e.actions.tolist()[0] for e in dataset.iterate_episodes()] == [0, 1, 0, 1]


def test_episodes_that_did_not_end_are_truncated_and_empty_ones_skipped(tmp_path, caplog) -> None:
    def trajectory(n: int, steps: int, *, end: bool, **fields: Any) -> Trajectory:
        return Trajectory(
            episode_id=f"e{n}",
            steps=[
                Step(index=i, observation=np.float32([i, n]), action=1, reward=0.5,
                     terminated=end and i == steps - 1)
                for i in range(steps)
            ],
            final_observation=np.float32([steps, n]),
            length=steps,
            **fields,
        )  # fmt: skip

    sink = MinariSink("edge/cases-v0")
    sink.write(trajectory(0, 3, end=True))
    sink.write(trajectory(1, 2, end=False, status=sc.STATUS_ABORTED))
    sink.write(trajectory(2, 0, end=False, status=sc.STATUS_ABORTED))  # no steps
    sink.write(trajectory(3, 3, end=False, missing_steps=[1]))
    sink.close()
    assert sink.skipped == 2
    assert "episode e2 is left out: it has no steps" in caplog.text
    dataset = minari.load_dataset("edge/cases-v0")
    first, second = dataset.iterate_episodes()
    assert first.terminations.tolist() == [False, False, True] and not first.truncations.any()
    assert second.truncations.tolist() == [False, True]  # DataCollector's rule
    np.testing.assert_array_equal(second.observations[-1], np.float32([2, 1]))
    # Spaces inferred from the values (no env, none given): Box for float arrays,
    # Discrete for non-negative integers.
    assert dataset.observation_space == gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert dataset.action_space == gym.spaces.Discrete(2)


def test_space_inference_refuses_what_it_cannot_describe() -> None:
    assert infer_space([{"a": np.int64(3)}, {"a": np.int64(1)}]) == gym.spaces.Dict(
        {"a": gym.spaces.Discrete(4)}
    )
    assert infer_space(["ab", "b"]) == gym.spaces.Text(2, min_length=1, charset="ab")
    with pytest.raises(ValueError, match="give the environment id or the spaces"):
        infer_space([[{"role": "user", "content": "hi"}]])  # chat messages: no space holds them


def test_export_minari_errors_name_the_problem(tmp_path, capsys) -> None:
    _, _, spans = record_both("CartPole-v1", tmp_path)
    source = str(spans)
    assert main(["export", "--from", source, "--format", "minari"]) == 2
    assert "--format minari needs --dataset-id" in capsys.readouterr().err
    assert main(["export", "--from", source, "--format", "minari", "--dataset-id", "no good"]) == 2
    assert "Malformed dataset ID" in capsys.readouterr().err
    ok = [
        "export",
        "--from",
        source,
        "--format",
        "minari",
        "--dataset-id",
        "tests/copy-v0",
        "--quiet",
    ]
    assert main(ok) == 0
    assert main(ok) == 2
    assert "exists already; choose another id, or --force" in capsys.readouterr().err
    assert main([*ok, "--force"]) == 0
    assert minari.load_dataset("tests/copy-v0").total_episodes == 5
