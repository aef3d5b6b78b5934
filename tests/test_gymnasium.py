"""Real gymnasium environments through the tracing API, checked against gymnasium itself.

Every episode is run through ``gymnasium.wrappers.RecordEpisodeStatistics`` (the reference
for return and length) and also recorded step by step into a plain python list (the
reference for observations, actions, rewards and termination). The rebuilt trajectories, both
live (trajectories.jsonl) and offline (rebuilt from spans.jsonl), must match both exactly.

Both ways of using the API are covered: context managers with ``record_result(env.step(a))``
and decorated functions (``@at.env_reset``, ``@at.agent_act``, ``@at.env_step``,
``@at.episode``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import read_run
from gymnasium.wrappers import RecordEpisodeStatistics

import agenttrace as at
from agenttrace import semconv as sc

N_EPISODES = 5

# FrozenLake 4x4 (not slippery): a route from S to G, used by an epsilon-greedy policy so that
# some episodes reach the goal (reward 1), some fall into a hole and some hit the time limit.
_FROZEN_ROUTE = {0: 2, 1: 2, 2: 1, 6: 1, 10: 1, 14: 2}

ENVS = [
    pytest.param("CartPole-v1", {"max_episode_steps": 25}, id="CartPole-v1"),
    pytest.param("FrozenLake-v1", {"is_slippery": False, "max_episode_steps": 12}, id="FrozenLake"),
    pytest.param("Taxi-v4", {"max_episode_steps": 30}, id="Taxi-v4"),
]


@dataclass
class EpisodeRun:
    """What one episode produced, recorded by the test itself (not by agenttrace)."""

    episode_id: str
    seed: int
    steps: list[tuple[Any, Any, Any, bool, bool]] = field(default_factory=list)
    final_observation: Any = None
    reset_info: Any = None
    stats_return: float = 0.0
    stats_length: int = 0
    handle_return: float | None = None
    handle_length: int | None = None


def make_env(name: str, kwargs: dict) -> gym.Env:
    return RecordEpisodeStatistics(gym.make(name, **kwargs))


def make_policy(env: gym.Env, seed: int) -> Callable[[Any], Any]:
    """A seeded policy: random, or epsilon-greedy along a route for FrozenLake."""
    env.action_space.seed(seed)
    rng = np.random.default_rng(seed)
    name = env.spec.id if env.spec is not None else ""

    def policy(obs: Any) -> Any:
        if name.startswith("FrozenLake") and int(obs) in _FROZEN_ROUTE and rng.random() < 0.8:
            return np.int64(_FROZEN_ROUTE[int(obs)])
        return env.action_space.sample()

    return policy


def snapshot(value: Any) -> Any:
    """A copy the environment cannot mutate later."""
    return value.copy() if isinstance(value, np.ndarray) else value


def assert_same(actual: Any, expected: Any, what: str) -> None:
    """Exact equality: numpy arrays by dtype, shape and data; everything else by type too."""
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{what}: {actual!r} is not an ndarray"
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
        assert np.array_equal(actual, expected), f"{what}: {actual!r} != {expected!r}"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{what}: {actual!r} is not a dict"
        assert actual.keys() == expected.keys(), f"{what}: keys {actual.keys()} != {expected}"
        for key in expected:
            assert_same(actual[key], expected[key], f"{what}[{key!r}]")
    else:
        assert type(actual) is type(expected), f"{what}: type {type(actual)} != {type(expected)}"
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


# --- way 1: context managers ------------------------------------------------------------------


def play_with_context_managers(env: gym.Env, seed: int, task_id: str) -> EpisodeRun:
    policy = make_policy(env, seed)
    with at.episode(task_id=task_id, env=env, seed=seed) as ep:
        run = EpisodeRun(episode_id=ep.id, seed=seed)
        with at.env_reset() as reset:
            obs, info = reset.record_result(env.reset(seed=seed))
        run.reset_info = info
        done = False
        while not done:
            with at.timestep():
                with at.agent_act() as act:
                    action = policy(obs)
                    act.record(observation=obs, action=action)
                with at.env_step() as step:
                    next_obs, reward, terminated, truncated, info = step.record_result(
                        env.step(action)
                    )
            run.steps.append((snapshot(obs), action, reward, terminated, truncated))
            obs = next_obs
            done = terminated or truncated
        run.handle_return, run.handle_length = ep.return_, ep.length
    run.final_observation = snapshot(obs)
    run.stats_return = info["episode"]["r"]
    run.stats_length = info["episode"]["l"]
    return run


# --- way 2: decorators ------------------------------------------------------------------------


@at.env_reset
def reset_env(env: gym.Env, seed: int) -> tuple[Any, dict]:
    return env.reset(seed=seed)


@at.agent_act
def act(obs: Any, policy: Callable[[Any], Any]) -> Any:
    return policy(obs)


@at.env_step
def step_env(env: gym.Env, action: Any) -> tuple:
    return env.step(action)


@at.episode
def play(env: gym.Env, seed: int, task_id: str | None = None) -> EpisodeRun:
    episode_id = at.current_episode_id()
    assert episode_id is not None
    run = EpisodeRun(episode_id=episode_id, seed=seed)
    policy = make_policy(env, seed)
    obs, info = reset_env(env, seed)
    run.reset_info = info
    done = False
    while not done:
        action = act(obs, policy)
        next_obs, reward, terminated, truncated, info = step_env(env, action)
        run.steps.append((snapshot(obs), action, reward, terminated, truncated))
        obs = next_obs
        done = terminated or truncated
    run.final_observation = snapshot(obs)
    run.stats_return = info["episode"]["r"]
    run.stats_length = info["episode"]["l"]
    return run


def play_with_decorators(env: gym.Env, seed: int, task_id: str) -> EpisodeRun:
    return play(env, seed, task_id=task_id)


STYLES = [
    pytest.param(play_with_context_managers, id="context-managers"),
    pytest.param(play_with_decorators, id="decorators"),
]


# --- checks -----------------------------------------------------------------------------------


def check_trajectory(trajectory: at.Trajectory, run: EpisodeRun, task_id: str) -> None:
    where = f"episode {run.episode_id} (seed {run.seed})"
    assert trajectory.episode_id == run.episode_id
    assert trajectory.task_id == task_id
    assert trajectory.missing_steps == [], where
    # Return and length equal gymnasium's own RecordEpisodeStatistics.
    assert trajectory.return_ == run.stats_return, where
    assert trajectory.length == run.stats_length, where
    assert len(trajectory.steps) == run.stats_length == len(run.steps), where
    assert [s.index for s in trajectory.steps] == list(range(len(run.steps))), where
    assert sum(s.reward for s in trajectory.steps) == run.stats_return, where
    for step, (obs, action, reward, terminated, truncated) in zip(
        trajectory.steps, run.steps, strict=True
    ):
        at_step = f"{where} step {step.index}"
        assert_same(step.observation, obs, f"{at_step} observation")
        assert_same(step.action, action, f"{at_step} action")
        assert isinstance(step.reward, float), at_step
        assert step.reward == float(reward), at_step
        assert step.terminated is bool(terminated), at_step
        assert step.truncated is bool(truncated), at_step
    assert_same(trajectory.final_observation, run.final_observation, f"{where} final obs")
    assert_same(trajectory.reset_info, run.reset_info, f"{where} reset info")
    _, _, _, last_terminated, last_truncated = run.steps[-1]
    if last_terminated:
        assert trajectory.status == sc.STATUS_COMPLETED, where
    else:
        assert last_truncated
        assert trajectory.status == sc.STATUS_TRUNCATED, where
    assert trajectory.error is None


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(("env_name", "env_kwargs"), ENVS)
def test_trajectories_match_gymnasium(pipeline, env_name, env_kwargs, style):
    env = make_env(env_name, env_kwargs)
    task_id = f"{env_name}-task"
    runs = [style(env, seed, task_id) for seed in range(100, 100 + N_EPISODES)]
    env.close()
    at.env_closed(env)  # nothing is open any more: no episode may change

    result = read_run(pipeline)
    assert len({run.episode_id for run in runs}) == N_EPISODES
    live = {t.episode_id: t for t in result.live}
    offline = {t.episode_id: t for t in result.offline}
    assert len(result.live) == len(result.offline) == N_EPISODES
    assert set(live) == set(offline) == {run.episode_id for run in runs}
    for run in runs:
        check_trajectory(live[run.episode_id], run, task_id)
        check_trajectory(offline[run.episode_id], run, task_id)
        assert live[run.episode_id] == offline[run.episode_id]
        assert live[run.episode_id].attributes.get(sc.EPISODE_SEED) == run.seed
        if style is play_with_context_managers:  # at.episode(env=env) names the env
            assert live[run.episode_id].attributes.get(sc.ENV_NAME) == env_name
    stats = result.stats
    assert stats["episodes_written"] == N_EPISODES
    assert stats["episodes_open"] == 0
    assert stats["internal_errors"] == 0


@pytest.mark.parametrize(("env_name", "env_kwargs"), ENVS)
def test_episode_handle_return_and_length_match_gymnasium(pipeline, env_name, env_kwargs):
    env = make_env(env_name, env_kwargs)
    runs = [play_with_context_managers(env, seed, "t") for seed in range(7, 10)]
    for run in runs:
        assert run.handle_return == run.stats_return
        assert run.handle_length == run.stats_length
    result = read_run(pipeline)
    for trajectory in result.live:
        run = next(r for r in runs if r.episode_id == trajectory.episode_id)
        # The episode span itself carries the same numbers.
        assert trajectory.return_ == run.stats_return
        assert trajectory.length == run.stats_length


def test_both_styles_give_identical_trajectory_content(pipeline):
    """The same seeded episode recorded both ways rebuilds to the same steps."""
    env_a = make_env("CartPole-v1", {"max_episode_steps": 25})
    env_b = make_env("CartPole-v1", {"max_episode_steps": 25})
    run_a = play_with_context_managers(env_a, 3, "same")
    run_b = play_with_decorators(env_b, 3, "same")
    result = read_run(pipeline)
    by_id = {t.episode_id: t for t in result.live}
    a, b = by_id[run_a.episode_id], by_id[run_b.episode_id]
    assert len(a.steps) == len(b.steps) == run_a.stats_length == run_b.stats_length
    for step_a, step_b in zip(a.steps, b.steps, strict=True):
        assert step_a.index == step_b.index
        assert_same(step_a.observation, step_b.observation, "observation")
        assert_same(step_a.action, step_b.action, "action")
        assert step_a.reward == step_b.reward
        assert (step_a.terminated, step_a.truncated) == (step_b.terminated, step_b.truncated)
    assert a.status == b.status
    assert_same(a.final_observation, b.final_observation, "final observation")


def test_statuses_cover_completed_and_truncated(pipeline):
    """The chosen settings really exercise both end states (else the suite proves less)."""
    statuses = set()
    for param in ENVS:
        env_name, env_kwargs = param.values
        env = make_env(env_name, env_kwargs)
        for seed in range(100, 100 + N_EPISODES):
            play_with_context_managers(env, seed, env_name)
    result = read_run(pipeline)
    statuses = {t.status for t in result.live}
    assert statuses == {sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED}
