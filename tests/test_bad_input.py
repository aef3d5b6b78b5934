"""Bad input gets a clear error or the documented fallback, and never costs other episodes."""

from __future__ import annotations

import json
import logging
import math
import warnings

import numpy as np
from conftest import read_run

import agenttrace as at
from agenttrace.sinks import JsonDirSink, load_trajectories
from agenttrace.trajectory.codec import UnserializableValueWarning
from agenttrace.trajectory.equality import values_equal


def _good_episode(task: str) -> None:
    with at.episode(task_id=task):
        with at.env_step() as step:
            step.record(observation=[1, 2], action=0, reward=1.0, terminated=True)


class Socket:
    """Stands for anything with no faithful JSON form."""

    def __repr__(self) -> str:
        return "<Socket fd=3>"


def test_unserializable_observation_takes_the_documented_fallback(pipeline) -> None:
    _good_episode("before")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with at.episode(task_id="odd"):
            with at.env_step() as step:
                step.record(observation={"conn": Socket()}, reward=0.5, terminated=True)
    _good_episode("after")
    result = read_run(pipeline)
    assert [t.task_id for t in result.live] == ["before", "odd", "after"]
    odd = result.live[1]
    assert odd.final_observation == {
        "conn": {"$unserializable": {"type": f"{__name__}:Socket", "repr": "<Socket fd=3>"}}
    }
    assert odd.return_ == 0.5
    assert any(w.category is UnserializableValueWarning for w in caught)
    assert result.live == result.offline


def test_nan_and_inf_rewards_are_kept_and_warned_about(pipeline, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        with at.episode(task_id="nan"):
            for reward in (1.0, float("nan"), 2.0):
                with at.env_step() as step:
                    step.record(reward=reward)
        with at.episode(task_id="inf"):
            with at.env_step() as step:
                step.record(reward=float("inf"), terminated=True)
    _good_episode("fine")
    result = read_run(pipeline)
    nan, inf, fine = result.live
    assert math.isnan(nan.return_) and math.isnan(nan.steps[1].reward)
    assert inf.return_ == math.inf
    assert fine.return_ == 1.0
    assert "non-finite reward" in caplog.text
    text = pipeline.trajectory_paths[0].read_text()
    assert "NaN" not in text and '{"$float":"nan"}' in text  # strict JSON
    assert result.live == result.offline


def test_a_ten_megabyte_observation_round_trips(pipeline) -> None:
    big = np.arange(10 * 1024 * 1024, dtype=np.uint8)
    with at.episode(task_id="big"):
        with at.env_step() as step:
            step.record(observation=big, reward=1.0, terminated=True)
    _good_episode("small")
    result = read_run(pipeline)
    big_trajectory, small = result.live
    assert values_equal(big_trajectory.final_observation, big)
    assert small.task_id == "small"
    assert result.live == result.offline


def test_hostile_episode_ids_stay_inside_their_folder(tmp_path) -> None:
    out = tmp_path / "episodes"
    runtime = at.configure(out=str(tmp_path / "runs"), sinks=["jsonl", JsonDirSink(out)])
    hostile = ["../../escape", "a/b/c", "..", "/etc/passwd", "nul\x00byte", "ok"]
    for episode_id in hostile:
        with at.episode(episode_id=episode_id):
            with at.env_step() as step:
                step.record(reward=1.0, terminated=True)
    runtime.shutdown()
    files = sorted(out.iterdir())
    assert len(files) == len(hostile)  # distinct ids never collide
    assert all(path.parent == out for path in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes", "runs"]
    loaded = {json.loads(p.read_text())["episode_id"] for p in files}
    assert loaded == set(hostile)
    assert {t.episode_id for t in load_trajectories(runtime.trajectory_paths)} == set(hostile)


def test_a_sink_failing_on_one_episode_loses_nothing_else(tmp_path) -> None:
    kept = []

    def picky(trajectory):
        if trajectory.task_id == "poison":
            raise ValueError("cannot store this one")
        kept.append(trajectory.task_id)

    runtime = at.configure(out=str(tmp_path), sinks=["jsonl", picky])
    for task in ("a", "poison", "b"):
        _good_episode(task)
    runtime.shutdown()
    assert kept == ["a", "b"]
    assert [t.task_id for t in load_trajectories(runtime.trajectory_paths)] == ["a", "poison", "b"]


def test_odd_step_results_never_break_the_loop(pipeline) -> None:
    results = [object(), ("too", "short"), {"reward": "high", "done": True}, None]
    with at.episode(task_id="odd-results"):
        for result in results:
            with at.env_step() as step:
                assert step.record_result(result) is result
    _good_episode("after")
    tasks = [t.task_id for t in read_run(pipeline).live]
    assert tasks == ["odd-results", "after"]
