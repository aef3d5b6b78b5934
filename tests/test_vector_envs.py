"""Vector envs: each sub-environment's reset-to-terminal run is an episode of its own.

The truth is independent of agenttrace: the same sub-environments played one by one as
single gymnasium envs (seed + i, then unseeded resets, as vector envs do), and gymnasium's own
vector ``RecordEpisodeStatistics``. Every autoreset mode, sync and async vector envs, and a
native vector implementation (CartPole's), in code and zero-code (``AGENTTRACE_GYMNASIUM=1``
under ``opentelemetry-instrument``, no target).
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import assert_same_episodes, read_run, run_instrumented
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agenttrace as at
from agenttrace import _logging
from agenttrace import semconv as sc
from agenttrace.instrument.vector import TracedVectorEnv
from agenttrace.sinks import load_trajectories

SEED = 11
NUM_ENVS = 3
LIMIT = 30  # max_episode_steps: some episodes truncate
VECTOR_STEPS = 90


def policy(observation: np.ndarray) -> int:
    return int(observation[2] + 0.3 * observation[3] > 0)


@dataclass
class Episode:
    observations: list[np.ndarray] = field(default_factory=list)  # acted on, per step
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False


def played_alone(index: int, episodes: int) -> list[Episode]:
    """Sub-environment ``index`` played as a single env: reset(seed=SEED + index), then
    unseeded resets, the same policy."""
    env = gym.make("CartPole-v1", max_episode_steps=LIMIT)
    observation, _ = env.reset(seed=SEED + index)
    found: list[Episode] = []
    while len(found) < episodes:
        episode = Episode()
        while True:
            action = policy(observation)
            episode.observations.append(observation)
            episode.actions.append(action)
            observation, reward, terminated, truncated, _ = env.step(action)
            episode.rewards.append(float(reward))
            if terminated or truncated:
                episode.terminated, episode.truncated = bool(terminated), bool(truncated)
                break
        found.append(episode)
        observation, _ = env.reset()
    env.close()
    return found


def play_vector(envs: Any, mode: AutoresetMode) -> list[dict]:
    """The user's loop; returns the episode statistics gymnasium's wrapper reported."""
    statistics: list[dict] = []
    observations, _ = envs.reset(seed=SEED)
    for _ in range(VECTOR_STEPS):
        actions = np.array([policy(o) for o in observations])
        observations, _, terminations, truncations, infos = envs.step(actions)
        if "episode" in infos:
            for i in np.flatnonzero(infos["_episode"]):
                statistics.append(
                    {
                        "index": int(i),
                        "return": float(infos["episode"]["r"][i]),
                        "length": int(infos["episode"]["l"][i]),
                    }
                )
        ended = terminations | truncations
        if mode == AutoresetMode.DISABLED and ended.any():
            observations, _ = envs.reset(options={"reset_mask": ended})
    envs.close()
    return statistics


def by_sub_env(trajectories: list[at.Trajectory]) -> dict[int, list[at.Trajectory]]:
    found: dict[int, list[at.Trajectory]] = {}
    for trajectory in sorted(trajectories, key=lambda t: t.start_time):
        found.setdefault(trajectory.attributes[sc.ENV_INDEX], []).append(trajectory)
    return found


def check_against_alone(trajectories: list[at.Trajectory]) -> None:
    """Every finished episode equals the single-env play; the one still open at close() is
    ``aborted`` and a prefix of the next."""
    runs = by_sub_env(trajectories)
    assert sorted(runs) == list(range(NUM_ENVS))
    for index, episodes in runs.items():
        truth = played_alone(index, len(episodes))
        assert episodes[0].attributes[sc.EPISODE_SEED] == SEED + index
        *finished, last = episodes
        assert len(finished) >= 2, "each sub-environment finishes episodes"
        for trajectory, expected in zip(episodes, truth, strict=True):
            steps = trajectory.steps
            n = len(steps) if trajectory is last else len(expected.actions)
            assert len(steps) == n and trajectory.missing_steps == []
            for step, obs, action, reward in zip(
                steps, expected.observations, expected.actions, expected.rewards, strict=False
            ):
                np.testing.assert_allclose(step.observation, obs, rtol=0, atol=0)
                assert (step.action, step.reward) == (action, reward)
            if trajectory is last:
                assert trajectory.status == sc.STATUS_ABORTED
                assert not (steps and (steps[-1].terminated or steps[-1].truncated))
            else:
                assert (steps[-1].terminated, steps[-1].truncated) == (
                    expected.terminated,
                    expected.truncated,
                )
                status = sc.STATUS_COMPLETED if expected.terminated else sc.STATUS_TRUNCATED
                assert trajectory.status == status
                assert trajectory.return_ == sum(expected.rewards)


def check_statistics(trajectories: list[at.Trajectory], statistics: list[dict]) -> None:
    """gymnasium's RecordEpisodeStatistics saw the same finished episodes, per sub-env."""
    finished = [t for t in trajectories if t.status != sc.STATUS_ABORTED]
    mine = sorted((t.attributes[sc.ENV_INDEX], t.end_time, t.return_, t.length) for t in finished)
    theirs = sorted(statistics, key=lambda s: s["index"])
    assert statistics, "episodes ended"
    assert [(i, r, n) for i, _, r, n in mine] == [
        (s["index"], s["return"], s["length"]) for s in theirs
    ]


MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_each_sub_env_run_equals_playing_it_alone(pipeline, vectorization, mode) -> None:
    envs = gym.make_vec(
        "CartPole-v1",
        num_envs=NUM_ENVS,
        vectorization_mode=vectorization,
        vector_kwargs={"autoreset_mode": mode},
        max_episode_steps=LIMIT,
    )
    if mode == AutoresetMode.NEXT_STEP:
        envs = RecordEpisodeStatistics(envs)
    statistics = play_vector(TracedVectorEnv(envs), mode)
    run = read_run(pipeline)
    assert_same_episodes(run.live, run.offline)
    check_against_alone(run.live)
    if mode == AutoresetMode.NEXT_STEP:
        check_statistics(run.live, statistics)
    workers = {t.attributes[sc.ENV_WORKER] for t in run.live}
    if vectorization == "sync":
        assert workers == {os.getpid()}
    else:  # the worker process of each sub-env, none of them this one
        assert len(workers) == NUM_ENVS and os.getpid() not in workers


def test_a_native_vector_env_is_split_by_its_batched_results(pipeline) -> None:
    """CartPole's own vector implementation has no sub-env objects: the batches are all."""
    native = gym.make_vec(
        "CartPole-v1",
        num_envs=NUM_ENVS,
        vectorization_mode="vector_entry_point",
        max_episode_steps=LIMIT,
    )
    assert not hasattr(native, "envs")
    seen: dict[int, list[list[np.ndarray]]] = {i: [[]] for i in range(NUM_ENVS)}
    envs = TracedVectorEnv(RecordEpisodeStatistics(native))
    observations, _ = envs.reset(seed=SEED)
    statistics = []
    pending = np.zeros(NUM_ENVS, dtype=bool)
    for _ in range(VECTOR_STEPS):
        actions = np.array([policy(o) for o in observations])
        for i in range(NUM_ENVS):
            if pending[i]:
                seen[i].append([])
            else:
                seen[i][-1].append(observations[i])
        observations, _, terminations, truncations, infos = envs.step(actions)
        pending = terminations | truncations
        for i in np.flatnonzero(infos.get("_episode", [])):
            statistics.append(
                {
                    "index": int(i),
                    "return": float(infos["episode"]["r"][i]),
                    "length": int(infos["episode"]["l"][i]),
                }
            )
    envs.close()
    run = read_run(pipeline)
    check_statistics(run.live, statistics)
    for index, episodes in by_sub_env(run.live).items():
        observed = [run for run in seen[index] if run]
        assert len(episodes) == len(observed)
        for trajectory, observations_seen in zip(episodes, observed, strict=True):
            assert len(trajectory.steps) == len(observations_seen)
            for step, obs in zip(trajectory.steps, observations_seen, strict=True):
                np.testing.assert_array_equal(step.observation, obs)


def test_a_failing_vector_step_errors_every_open_episode_and_raises_unchanged(pipeline) -> None:
    class Broken(gym.Wrapper):
        calls = 0

        def step(self, action: Any) -> Any:
            Broken.calls += 1
            if Broken.calls == 7:
                raise ValueError("the simulator crashed")
            return self.env.step(action)

    envs = TracedVectorEnv(gym.vector.SyncVectorEnv([lambda: Broken(gym.make("CartPole-v1"))] * 2))
    observations, _ = envs.reset(seed=SEED)
    with pytest.raises(ValueError, match="the simulator crashed") as raised:
        for _ in range(10):
            observations, *_ = envs.step(np.array([policy(o) for o in observations]))
    assert type(raised.value) is ValueError
    run = read_run(pipeline)
    assert [t.status for t in run.live] == [sc.STATUS_ERRORED] * 2
    assert {t.error.message for t in run.live} == {"the simulator crashed"}
    # Three steps played, and the fourth that raised (its action, no outcome), per sub-env.
    for trajectory in run.live:
        assert [s.reward for s in trajectory.steps] == [1.0, 1.0, 1.0, None]
        assert trajectory.steps[-1].action is not None


CLEANRL_LOOP = """
import json, sys
from pathlib import Path

import gymnasium as gym
import numpy as np

envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode=sys.argv[1], max_episode_steps=30)
envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
observations, _ = envs.reset(seed=11)
finished = []
for _ in range(120):
    actions = (observations[:, 2] + 0.3 * observations[:, 3] > 0).astype(np.int64)
    observations, rewards, terminations, truncations, infos = envs.step(actions)
    for i in np.flatnonzero(infos.get("_episode", [])):
        finished.append([int(i), float(infos["episode"]["r"][i]), int(infos["episode"]["l"][i])])
envs.close()
print(json.dumps(finished))
"""


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_zero_code_cleanrl_style_loop(tmp_path, vectorization) -> None:
    """``AGENTTRACE_GYMNASIUM=1 opentelemetry-instrument python train.py``: no target, no
    import of agenttrace, every sub-env episode recorded (in this process: async workers only
    step their sub-envs)."""
    done = run_instrumented(
        tmp_path,
        textwrap.dedent(CLEANRL_LOOP),
        vectorization,
        name="train.py",
        AGENTTRACE_GYMNASIUM="1",
        AGENTTRACE_OUT=str(tmp_path / "runs"),
    )
    finished = json.loads(done.stdout)
    trajectories = load_trajectories(sorted((tmp_path / "runs").glob("*/trajectories.jsonl")))
    check_statistics(trajectories, [{"index": i, "return": r, "length": n} for i, r, n in finished])
    assert sorted({t.attributes[sc.ENV_INDEX] for t in trajectories}) == [0, 1, 2, 3]
    open_at_close = [t for t in trajectories if t.status == sc.STATUS_ABORTED]
    assert len(open_at_close) == 4  # one per sub-env, ended by close()
    assert all(t.attributes[sc.ENV_NAME] == "CartPole-v1" for t in trajectories)


ENV_TARGETS_LOOP = """
import json
from pathlib import Path

import gymnasium as gym
import numpy as np

def policy(o):
    return int(o[2] + 0.3 * o[3] > 0)

played = {}
# Two envs stepped in turn (no function plays an episode), then a vector env built by hand,
# whose sub-envs the vector env resets and steps itself (next-step autoreset).
envs = [gym.make("CartPole-v1", max_episode_steps=30) for _ in range(2)]
observations = [env.reset(seed=20 + i)[0] for i, env in enumerate(envs)]
episodes = [[[]], [[]]]
for _ in range(100):
    for i, env in enumerate(envs):
        action = policy(observations[i])
        episodes[i][-1].append([observations[i].tolist(), action])
        observations[i], reward, terminated, truncated, _ = env.step(action)
        episodes[i][-1][-1].append(float(reward))
        if terminated or truncated:
            episodes[i][-1][-1].append("completed" if terminated else "truncated")
            observations[i], _ = env.reset()
            episodes[i].append([])
vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=30)] * 2)
vector.reset(seed=40)
vector_steps, pending = 0, np.zeros(2, dtype=bool)
for _ in range(50):
    vector_steps += int((~pending).sum())  # a sub-env that ended is reset, not stepped
    _, _, terminations, truncations, _ = vector.step(np.array([0, 1]))
    pending = terminations | truncations
print(json.dumps({"episodes": episodes, "vector_steps": vector_steps}))
"""


def run_env_targets_loop(tmp_path: Path, **settings: str) -> tuple[Any, list[at.Trajectory]]:
    done = run_instrumented(
        tmp_path,
        textwrap.dedent(ENV_TARGETS_LOOP),
        name="loop.py",
        AGENTTRACE_TARGETS="gymnasium.core:Env.reset=env.reset;gymnasium.core:Env.step=env.step",
        AGENTTRACE_OUT=str(tmp_path / "runs"),
        **settings,
    )
    runs = sorted((tmp_path / "runs").glob("*/trajectories.jsonl"))
    return done, load_trajectories(runs) if runs else []


def test_env_targets_outside_any_episode_delimit_their_own(tmp_path) -> None:
    """Targets on gymnasium's Env.reset and Env.step only: each env instance's
    reset-to-terminal run is an episode (the outermost wrapper is the instance)."""
    done, trajectories = run_env_targets_loop(tmp_path)
    played = json.loads(done.stdout)["episodes"]
    in_order = sorted(trajectories, key=lambda t: t.start_time)
    for i, runs in enumerate(played):
        (first,) = [t for t in in_order if t.attributes.get(sc.EPISODE_SEED) == 20 + i]
        # The env's later episodes: unseeded, on the same env name, in start order; the
        # seeded one tells which of the interleaved runs are env i's (same lengths).
        finished = [run for run in runs if run and len(run[-1]) == 4]
        assert len(first.steps) == len(finished[0])
        assert first.status == finished[0][-1][-1]
        assert [s.action for s in first.steps] == [step[1] for step in finished[0]]
        assert [s.reward for s in first.steps] == [step[2] for step in finished[0]]
        for step, (observation, *_) in zip(first.steps, finished[0], strict=True):
            np.testing.assert_allclose(step.observation, observation, rtol=1e-6)
    finished_count = sum(len([r for r in runs if r and len(r[-1]) == 4]) for runs in played)
    ended = [t for t in trajectories if t.status in (sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED)]
    vector_episodes = [t for t in ended if t.attributes.get(sc.EPISODE_SEED) not in (20, 21)]
    assert len(ended) >= finished_count and vector_episodes
    assert all(t.missing_steps == [] and t.length == len(t.steps) for t in trajectories)
    assert "outside any episode" not in done.stderr


def test_env_steps_outside_any_episode_are_named_at_exit(tmp_path) -> None:
    done, trajectories = run_env_targets_loop(tmp_path, AGENTTRACE_ENV_EPISODES="false")
    assert trajectories == []
    played = json.loads(done.stdout)
    steps = sum(len(run) for runs in played["episodes"] for run in runs) + played["vector_steps"]
    assert f"agenttrace: {steps} env.step calls ran outside any episode" in done.stderr


def test_a_batched_step_result_is_not_taken_for_a_step_silently(pipeline, caplog, monkeypatch):
    monkeypatch.setattr(_logging, "_warned", set())
    envs = gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="sync")
    envs.reset(seed=SEED)
    with at.episode(), at.env_step() as step:
        step.record_result(envs.step(np.zeros(NUM_ENVS, dtype=np.int64)))
    envs.close()
    assert f"results of {NUM_ENVS} sub-environments at once" in caplog.text
    assert "AGENTTRACE_GYMNASIUM=1 or TracedVectorEnv" in caplog.text


@pytest.mark.parametrize("vector_class", ["SyncVectorEnv", "AsyncVectorEnv"])
def test_a_vector_env_built_by_hand_names_each_sub_env(pipeline, tmp_path, vector_class) -> None:
    """CleanRL's way, ``SyncVectorEnv([make_env, ...])``, under instrument_gymnasium: each
    sub-env from ``gym.make`` is a TracedEnv that knows its position (rl.env.index), in this
    process or in an AsyncVectorEnv's worker (which writes its own run folder)."""
    from agenttrace.instrument.wrappers import instrument_gymnasium, uninstrument_gymnasium

    instrument_gymnasium()
    try:
        cls = getattr(gym.vector, vector_class)
        envs = cls([lambda: gym.make("CartPole-v1", max_episode_steps=LIMIT)] * NUM_ENVS)
        play_vector(envs, AutoresetMode.NEXT_STEP)
    finally:
        uninstrument_gymnasium()
    assert type(vars(cls)["__init__"]).__name__ == "function"  # put back as it was
    pipeline.shutdown()
    trajectories = load_trajectories(sorted(tmp_path.glob("**/trajectories*.jsonl")))
    finished = [t for t in trajectories if t.status != sc.STATUS_ABORTED]
    assert len({t.episode_id for t in trajectories}) == len(trajectories)
    runs = by_sub_env(finished)
    assert sorted(runs) == list(range(NUM_ENVS))
    workers = {i: {t.attributes[sc.ENV_WORKER] for t in runs[i]} for i in runs}
    assert all(len(pids) == 1 for pids in workers.values())  # one process per sub-env
    distinct = len({pid for pids in workers.values() for pid in pids})
    assert distinct == (NUM_ENVS if vector_class == "AsyncVectorEnv" else 1)
    assert (os.getpid() in workers[0]) is (vector_class == "SyncVectorEnv")
    for index, episodes in runs.items():
        truth = played_alone(index, len(episodes))
        assert episodes[0].attributes[sc.EPISODE_SEED] == SEED + index
        for trajectory, expected in zip(episodes, truth, strict=True):
            assert [s.action for s in trajectory.steps] == expected.actions
            assert [s.reward for s in trajectory.steps] == expected.rewards
            for step, observation in zip(trajectory.steps, expected.observations, strict=True):
                np.testing.assert_array_equal(step.observation, observation)


def test_one_span_per_vector_step_reaches_the_users_exporter(tmp_path) -> None:
    """``step()`` of N sub-environments is one ``env.vector_step`` span (not N env.step
    spans), linked to each episode it stepped, with one entry per sub-environment; the
    user's own exporter gets it as any span, and the rebuild reads one step per entry."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(
        tracer_provider=provider, out=str(tmp_path), sinks=["jsonl"], spans=["file"]
    )
    envs = TracedVectorEnv(
        gym.make_vec(
            "CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="sync", max_episode_steps=LIMIT
        )
    )
    observations, _ = envs.reset(seed=SEED)
    stepped = 0  # sub-env steps that were steps of an episode (not a next-step reset)
    calls_with_steps = 0  # (a call that only resets sub-envs steps no episode: no span)
    pending = np.zeros(NUM_ENVS, dtype=bool)
    for _ in range(VECTOR_STEPS):
        stepped += int((~pending).sum())
        calls_with_steps += int((~pending).any())
        observations, _, terminations, truncations, _ = envs.step(
            np.array([policy(o) for o in observations])
        )
        pending = terminations | truncations
    envs.close()
    run = read_run(runtime)
    spans = exporter.get_finished_spans()
    names = [span.name for span in spans]
    assert names.count(sc.ENV_VECTOR_STEP) == calls_with_steps
    assert names.count(sc.ENV_STEP) == 0
    episodes = {span.context.span_id: span for span in spans if span.name == sc.EPISODE}
    for span in (s for s in spans if s.name == sc.ENV_VECTOR_STEP):
        ids = span.attributes[sc.VECTOR_EPISODE_IDS]
        lists = [span.attributes[key] for key in (sc.VECTOR_ENV_INDICES, sc.VECTOR_STEP_INDICES)]
        lists += [span.attributes[key] for key in (sc.VECTOR_ACTIONS, sc.VECTOR_OBSERVATIONS)]
        lists += [span.attributes[key] for key in (sc.VECTOR_REWARDS, sc.VECTOR_TERMINATED)]
        assert all(len(values) == len(ids) for values in lists)
        linked = [episodes[link.context.span_id] for link in span.links]
        assert [e.attributes[sc.EPISODE_ID] for e in linked] == list(ids)
        assert [e.attributes[sc.ENV_INDEX] for e in linked] == list(
            span.attributes[sc.VECTOR_ENV_INDICES]
        )
    assert sum(len(t.steps) for t in run.live) == stepped
    assert_same_episodes(run.live, run.offline)
    check_against_alone(run.live)
    # Episode spans carry the return and length of the steps the vector spans held.
    for trajectory in run.live:
        (span,) = [
            s for s in episodes.values() if s.attributes[sc.EPISODE_ID] == trajectory.episode_id
        ]
        assert span.attributes[sc.EPISODE_LENGTH] == len(trajectory.steps)
        assert span.attributes[sc.EPISODE_RETURN] == sum(s.reward for s in trajectory.steps)
