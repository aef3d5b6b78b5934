"""stable-baselines3's ``evaluate_policy`` over its own vector envs, captured zero-code.

``AGENTTRACE_GYMNASIUM=1 opentelemetry-instrument python evaluate.py``: no target, no import
of agenttrace. SB3's ``DummyVecEnv`` steps its sub-envs in this process and
``SubprocVecEnv`` in worker processes (forkserver by default; spawn and fork too), each
resetting a sub-env in the step that ends it. The truth is what SB3 itself reports: the
per-step callback ``evaluate_policy`` calls for every sub-env step it counts (observation,
action, reward, done, ``TimeLimit.truncated``), the returns and lengths it returns, and how
many vector steps the policy was asked for.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import numpy as np
import pytest
from conftest import run_instrumented

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories

NUM_ENVS = 3

EVALUATE = """
import json, os, sys

import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv


class Heuristic:
    '''Any object with SB3's predict() will do; this one lets episodes end both ways.'''

    calls = 0

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        Heuristic.calls += 1
        return (observation[:, 2] > 0).astype(np.int64), state


if __name__ == "__main__":
    kind, method, ending = sys.argv[1:]
    if kind == "dummy":
        vec_env_cls, vec_env_kwargs = DummyVecEnv, None
    else:
        vec_env_cls, vec_env_kwargs = SubprocVecEnv, {"start_method": method}
    venv = make_vec_env(
        "CartPole-v1", n_envs=3, seed=5, vec_env_cls=vec_env_cls,
        vec_env_kwargs=vec_env_kwargs, env_kwargs={"max_episode_steps": 45},
    )
    counted = []

    def record(local, _globals):
        i = local["i"]
        counted.append({
            "env": int(i),
            "observation": local["observations"][i].tolist(),
            "action": int(local["actions"][i]),
            "reward": float(local["rewards"][i]),
            "done": bool(local["done"]),
            "truncated": bool(local["info"].get("TimeLimit.truncated", False)),
        })

    returns, lengths = evaluate_policy(
        Heuristic(), venv, n_eval_episodes=8, return_episode_rewards=True, callback=record
    )
    if ending == "close":
        venv.close()  # else the workers are ended by multiprocessing at exit (SIGTERM)
    print(json.dumps({
        "steps": counted, "returns": returns, "lengths": lengths,
        "vector_steps": Heuristic.calls, "pid": os.getpid(),
    }))
"""


def counted_episodes(steps: list[dict[str, Any]]) -> dict[int, list[list[dict[str, Any]]]]:
    """SB3's callback steps, split per sub-env into the episodes it counted."""
    episodes: dict[int, list[list[dict[str, Any]]]] = {}
    for step in steps:
        runs = episodes.setdefault(step["env"], [[]])
        if runs[-1] and runs[-1][-1]["done"]:
            runs.append([])
        runs[-1].append(step)
    return episodes


@pytest.mark.parametrize(
    ("kind", "method", "ending"),
    [
        ("dummy", "-", "close"),
        ("subproc", "forkserver", "close"),
        ("subproc", "spawn", "exit"),
        ("subproc", "fork", "exit"),
    ],
)
def test_evaluate_policy_zero_code_equals_what_sb3_counted(tmp_path, kind, method, ending):
    done = run_instrumented(
        tmp_path,
        textwrap.dedent(EVALUATE),
        kind,
        method,
        ending,
        name="evaluate.py",
        AGENTTRACE_GYMNASIUM="1",
        AGENTTRACE_OUT=str(tmp_path / "runs"),
    )
    truth = json.loads(done.stdout)
    folders = sorted((tmp_path / "runs").glob("*/trajectories.jsonl"))
    # One run folder per process that played sub-envs: this one, or each worker.
    assert len(folders) == (1 if kind == "dummy" else NUM_ENVS)
    trajectories = load_trajectories(folders)
    assert len({t.episode_id for t in trajectories}) == len(trajectories)

    runs: dict[int, list[at.Trajectory]] = {}
    for trajectory in sorted(trajectories, key=lambda t: t.start_time):
        runs.setdefault(trajectory.attributes[sc.ENV_INDEX], []).append(trajectory)
    assert sorted(runs) == list(range(NUM_ENVS))

    workers = {i: {t.attributes[sc.ENV_WORKER] for t in runs[i]} for i in runs}
    assert all(len(pids) == 1 for pids in workers.values())
    pids = {pid for found in workers.values() for pid in found}
    if kind == "dummy":
        assert pids == {truth["pid"]}
    else:
        assert len(pids) == NUM_ENVS and truth["pid"] not in pids

    matched_returns = []
    for index, counted in counted_episodes(truth["steps"]).items():
        played = runs[index]
        assert len(played) > len(counted), "SB3's counted episodes, then the ones it ignored"
        for trajectory, expected in zip(played, counted, strict=False):
            assert trajectory.length == len(trajectory.steps) == len(expected)
            assert trajectory.missing_steps == []
            for step, seen in zip(trajectory.steps, expected, strict=True):
                np.testing.assert_array_equal(
                    step.observation, np.array(seen["observation"], dtype=np.float32)
                )
                assert (step.action, step.reward) == (seen["action"], seen["reward"])
            last = expected[-1]
            assert last["done"]
            assert (trajectory.steps[-1].terminated, trajectory.steps[-1].truncated) == (
                not last["truncated"],
                last["truncated"],
            )
            status = sc.STATUS_TRUNCATED if last["truncated"] else sc.STATUS_COMPLETED
            assert trajectory.status == status
            matched_returns.append(trajectory.return_)
        # The sub-env's episode still open when evaluation stopped: ended by close() in
        # the process that played it, or written as incomplete when that process ended.
        open_status = sc.STATUS_ABORTED if ending == "close" else sc.STATUS_INCOMPLETE
        assert played[-1].status == open_status
        assert all(t.status != open_status for t in played[:-1])
    assert sorted(matched_returns) == sorted(truth["returns"])
    assert {status for t in trajectories for status in [t.status]} >= {
        sc.STATUS_COMPLETED,
        sc.STATUS_TRUNCATED,
    }, "the policy ends episodes both ways"
    # Nothing lost, counted or not: every sub-env took a step on every vector step.
    assert sum(len(t.steps) for t in trajectories) == truth["vector_steps"] * NUM_ENVS


def test_sb3_vector_envs_are_left_alone_when_gymnasium_is_not_instrumented(tmp_path) -> None:
    """The post-import hooks only patch while ``instrument_gymnasium`` is on."""
    done = run_instrumented(
        tmp_path,
        textwrap.dedent(
            """
            import gymnasium
            from agenttrace.instrument.wrappers import (
                instrument_gymnasium, uninstrument_gymnasium,
            )
            instrument_gymnasium()
            uninstrument_gymnasium()
            from stable_baselines3.common.vec_env import DummyVecEnv
            print(type(vars(DummyVecEnv)["__init__"]).__name__)
            instrument_gymnasium()
            print(type(vars(DummyVecEnv)["__init__"]).__name__)
            uninstrument_gymnasium()
            print(type(vars(DummyVecEnv)["__init__"]).__name__)
            """
        ),
        AGENTTRACE_OUT=str(tmp_path / "runs"),
    )
    assert done.stdout.split() == ["function", "PatchProxy", "function"]
