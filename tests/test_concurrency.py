"""Many episodes at once: asyncio tasks, threads, and decorated (async) generators.

Every episode has its own deterministic reward pattern, actions, observations and length, so a
step that lands in the wrong episode, a lost step or a merged episode shows up as a mismatch.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from conftest import RunResult, read_run
from opentelemetry import trace

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.storage import read_otlp_json

N_ASYNC = 256
N_THREADS = 8
EPISODES_PER_THREAD = 6

LOSS_COUNTERS = (
    "episodes_dropped_open_limit",
    "spans_too_late_for_step",
    "late_spans",
    "episodes_dropped_queue_full",
    "spans_dropped_queue_full",
    "spans_failed_write",
    "episodes_failed_assembly",
    "episodes_expired_idle",
    "episodes_open_at_shutdown",
    "spans_dropped",
    "internal_errors",
)


class PatternEnv(gym.Env):
    """Episode ``k``: ``length(k)`` steps, observation ``[k, t]``, reward ``reward(k, t)``."""

    observation_space = gym.spaces.Box(0, 1_000_000, shape=(2,), dtype=np.int64)
    action_space = gym.spaces.Discrete(1_000_000)

    def __init__(self, k: int) -> None:
        self.k = k
        self.t = 0

    @staticmethod
    def length(k: int) -> int:
        return 1 + (k * 7) % 13

    @staticmethod
    def reward(k: int, t: int) -> float:
        return k * 1000.0 + t * 0.5 - (t % 3)

    def _obs(self) -> np.ndarray:
        return np.array([self.k, self.t], dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"k": self.k}

    def step(self, action: Any):
        assert action == self.k * 100 + self.t, "the action must be this episode's"
        reward = self.reward(self.k, self.t)
        self.t += 1
        terminated = self.t == self.length(self.k)
        # Every 5th episode ends by time limit instead of by termination.
        if self.k % 5 == 4 and terminated:
            return self._obs(), reward, False, True, {"k": self.k, "t": self.t}
        return self._obs(), reward, terminated, False, {"k": self.k, "t": self.t}


def policy(k: int, obs: np.ndarray) -> int:
    return k * 100 + int(obs[1])


@dataclass
class Produced:
    """What one episode really did, recorded by the test."""

    k: int
    episode_id: str | None = None
    steps: list[tuple[np.ndarray, int, float, bool, bool]] = field(default_factory=list)
    final_observation: np.ndarray | None = None

    @property
    def return_(self) -> float:
        return float(sum(reward for _, _, reward, _, _ in self.steps))


def check_exact(trajectory: at.Trajectory, produced: Produced) -> None:
    where = f"episode k={produced.k} ({produced.episode_id})"
    assert trajectory.episode_id == produced.episode_id, where
    assert trajectory.missing_steps == [], where
    assert trajectory.length == len(produced.steps) == PatternEnv.length(produced.k), where
    assert trajectory.return_ == produced.return_, where
    assert [s.index for s in trajectory.steps] == list(range(len(produced.steps))), where
    for step, (obs, action, reward, terminated, truncated) in zip(
        trajectory.steps, produced.steps, strict=True
    ):
        assert isinstance(step.observation, np.ndarray), where
        assert step.observation.dtype == obs.dtype, where
        assert np.array_equal(step.observation, obs), f"{where} step {step.index}"
        assert type(step.action) is int and step.action == action, f"{where} step {step.index}"
        assert step.reward == reward, f"{where} step {step.index}"
        assert (step.terminated, step.truncated) == (terminated, truncated), where
    assert np.array_equal(trajectory.final_observation, produced.final_observation), where
    last_terminated = produced.steps[-1][3]
    expected = sc.STATUS_COMPLETED if last_terminated else sc.STATUS_TRUNCATED
    assert trajectory.status == expected, where


def check_run(result: RunResult, produced: list[Produced]) -> None:
    ids = [p.episode_id for p in produced]
    assert None not in ids
    assert len(set(ids)) == len(ids), "episode ids must be distinct"
    # None lost, none merged, none invented.
    assert len(result.live) == len(produced)
    assert len(result.offline) == len(produced)
    live = {t.episode_id: t for t in result.live}
    offline = {t.episode_id: t for t in result.offline}
    assert set(live) == set(offline) == set(ids)
    for p in produced:
        check_exact(live[p.episode_id], p)
        assert live[p.episode_id] == offline[p.episode_id]
    stats = result.stats
    assert stats["episodes_written"] == len(produced)
    assert stats["episodes_open"] == 0
    assert {k: stats[k] for k in LOSS_COUNTERS} == dict.fromkeys(LOSS_COUNTERS, 0)
    assert stats["sink_errors"] == {}


# --- asyncio tasks and threads at the same time ---------------------------------------------


async def async_episode(k: int) -> Produced:
    env = PatternEnv(k)
    produced = Produced(k)
    with at.episode(task_id=f"async-{k}", env=env) as ep:
        produced.episode_id = ep.id
        with at.env_reset() as reset:
            obs, _ = reset.record_result(env.reset())
        await asyncio.sleep(0)
        done = False
        while not done:
            with at.timestep():
                with at.agent_act() as act:
                    action = policy(k, obs)
                    await asyncio.sleep(0)  # "thinking": other episodes run meanwhile
                    act.record(observation=obs, action=action)
                with at.env_step() as step:
                    result = env.step(action)
                    await asyncio.sleep(0)
                    next_obs, reward, terminated, truncated, _ = step.record_result(result)
            produced.steps.append((obs, action, reward, terminated, truncated))
            obs, done = next_obs, terminated or truncated
            await asyncio.sleep(0)
        assert ep.length == len(produced.steps)
        assert ep.return_ == produced.return_
    produced.final_observation = obs
    return produced


def thread_episodes(first_k: int, count: int, start: threading.Barrier, out: list) -> None:
    start.wait(10)
    for k in range(first_k, first_k + count):
        env = PatternEnv(k)
        produced = Produced(k)
        with at.episode(task_id=f"thread-{k}", env=env) as ep:
            produced.episode_id = ep.id
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset())
            done = False
            while not done:
                with at.timestep():
                    with at.agent_act() as act:
                        action = policy(k, obs)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        next_obs, reward, terminated, truncated, _ = step.record_result(
                            env.step(action)
                        )
                produced.steps.append((obs, action, reward, terminated, truncated))
                obs, done = next_obs, terminated or truncated
        produced.final_observation = obs
        out.append(produced)


async def test_256_async_episodes_and_8_threads_are_exact(pipeline):
    thread_out: list[Produced] = []
    start = threading.Barrier(N_THREADS + 1)
    threads = [
        threading.Thread(
            target=thread_episodes,
            args=(10_000 + i * EPISODES_PER_THREAD, EPISODES_PER_THREAD, start, thread_out),
        )
        for i in range(N_THREADS)
    ]
    for thread in threads:
        thread.start()
    start.wait(10)  # the threads start their episodes as the tasks start theirs
    produced = await asyncio.gather(*(async_episode(k) for k in range(N_ASYNC)))
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()

    assert len(thread_out) == N_THREADS * EPISODES_PER_THREAD
    all_produced = [*produced, *thread_out]
    result = read_run(pipeline)
    check_run(result, all_produced)
    by_id = {t.episode_id: t for t in result.live}
    for p in produced:
        assert by_id[p.episode_id].task_id == f"async-{p.k}"
    for p in thread_out:
        assert by_id[p.episode_id].task_id == f"thread-{p.k}"
    statuses = {t.status for t in result.live}
    assert statuses == {sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED}


async def test_async_episodes_in_one_trace_each(pipeline):
    """Interleaved tasks never parent one episode's spans under another's trace."""
    produced = await asyncio.gather(*(async_episode(k) for k in range(32)))
    result = read_run(pipeline)
    trace_ids = {t.episode_id: t.trace_id for t in result.live}
    assert len(set(trace_ids.values())) == len(produced)
    for record in read_otlp_json(pipeline.span_paths):
        episode_id = record.attributes.get(sc.EPISODE_ID)
        assert episode_id in trace_ids
        assert record.trace_id_hex == trace_ids[episode_id]


# --- decorated async generators ---------------------------------------------------------------


@at.env_step
def step_env(env: PatternEnv, action: int):
    return env.step(action)


@at.agent_act
def act(obs: np.ndarray, k: int) -> int:
    return policy(k, obs)


@at.episode
async def stream_episode(k: int, task_id: str | None = None):
    """An episode as an async generator: yields each step as it happens."""
    env = PatternEnv(k)
    episode_id = at.current_episode_id()
    with at.env_reset() as reset:
        obs, _ = reset.record_result(env.reset())
    done = False
    while not done:
        await asyncio.sleep(0)
        action = act(obs, k)
        next_obs, reward, terminated, truncated, _ = step_env(env, action)
        yield episode_id, (obs, action, reward, terminated, truncated), next_obs
        obs, done = next_obs, terminated or truncated


async def consume(k: int) -> Produced:
    produced = Produced(k)
    async for episode_id, step, obs in stream_episode(k, task_id=f"stream-{k}"):
        # Between items the generator's span is not the consumer's current span.
        assert at.current_episode_id() is None
        assert not trace.get_current_span().get_span_context().is_valid
        produced.episode_id = episode_id
        produced.steps.append(step)
        produced.final_observation = obs
        await asyncio.sleep(0)
    return produced


async def test_async_generator_episodes_consumed_concurrently(pipeline):
    produced = await asyncio.gather(*(consume(k) for k in range(64)))
    result = read_run(pipeline)
    check_run(result, list(produced))
    by_id = {t.episode_id: t for t in result.live}
    for p in produced:
        assert by_id[p.episode_id].task_id == f"stream-{p.k}"


async def test_one_async_generator_shared_by_several_tasks(pipeline):
    """Worker tasks take turns pulling steps from one episode generator."""
    k = 12  # 1 + 84 % 13 = 7 steps
    stream = stream_episode(k, task_id="shared")
    lock = asyncio.Lock()
    produced = Produced(k)
    pulled_by: list[int] = []
    tracer = pipeline.provider.get_tracer("test-consumers")

    async def worker(n: int) -> None:
        with tracer.start_as_current_span(f"worker {n}") as own:
            while True:
                async with lock:
                    try:
                        episode_id, step, obs = await stream.__anext__()
                    except StopAsyncIteration:
                        return
                    assert trace.get_current_span() is own
                    assert at.current_episode_id() is None
                    produced.episode_id = episode_id
                    produced.steps.append(step)
                    produced.final_observation = obs
                    pulled_by.append(n)
                await asyncio.sleep(0)

    await asyncio.gather(*(worker(n) for n in range(4)))
    assert len(set(pulled_by)) > 1, "several tasks took part"
    result = read_run(pipeline)
    check_run(result, [produced])


async def test_async_generators_closed_early_under_concurrency(pipeline):
    """Consumers stop early (aclose): each episode ends truncated with the steps it had."""

    async def take(k: int, n: int) -> tuple[str, int]:
        stream = stream_episode(k, task_id=f"early-{k}")
        episode_id = None
        for _ in range(n):
            episode_id, _, _ = await stream.__anext__()
            await asyncio.sleep(0)
        await stream.aclose()
        assert at.current_episode_id() is None
        return episode_id, n

    # Episodes long enough (at least 5 steps) that every consumer stops before the end.
    ks = [k for k in range(100) if PatternEnv.length(k) >= 5][:24]
    taken = await asyncio.gather(*(take(k, 1 + i % 4) for i, k in enumerate(ks)))
    result = read_run(pipeline)
    live = {t.episode_id: t for t in result.live}
    offline = {t.episode_id: t for t in result.offline}
    assert len(live) == len(offline) == len(ks)
    for episode_id, n in taken:
        assert live[episode_id] == offline[episode_id]
        assert [s.index for s in live[episode_id].steps] == list(range(n))
        assert live[episode_id].status == sc.STATUS_TRUNCATED
    assert result.stats["internal_errors"] == 0


# --- decorated sync generators -----------------------------------------------------------------


@at.episode
def episode_steps(k: int, task_id: str | None = None):
    """An episode as a generator: yields each step as it happens."""
    env = PatternEnv(k)
    episode_id = at.current_episode_id()
    with at.env_reset() as reset:
        obs, _ = reset.record_result(env.reset())
    done = False
    while not done:
        with at.timestep():
            with at.agent_act() as agent:
                action = policy(k, obs)
                agent.record(observation=obs, action=action)
            with at.env_step() as step:
                next_obs, reward, terminated, truncated, _ = step.record_result(env.step(action))
        yield episode_id, (obs, action, reward, terminated, truncated), next_obs
        obs, done = next_obs, terminated or truncated


def round_robin(ks: list[int]) -> list[Produced]:
    """Advance many generator episodes in turns on one thread."""
    produced = {k: Produced(k) for k in ks}
    streams = {k: episode_steps(k, task_id=f"gen-{k}") for k in ks}
    while streams:
        for k in list(streams):
            try:
                episode_id, step, obs = next(streams[k])
            except StopIteration:
                del streams[k]
                continue
            assert at.current_episode_id() is None
            p = produced[k]
            p.episode_id = episode_id
            p.steps.append(step)
            p.final_observation = obs
    return list(produced.values())


def test_generator_episodes_interleaved_on_one_thread_and_across_threads(pipeline):
    results: list[list[Produced]] = []

    def worker(first: int) -> None:
        results.append(round_robin(list(range(first, first + 12))))

    threads = [threading.Thread(target=worker, args=(1000 + 100 * i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    results.append(round_robin(list(range(24))))
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    produced = [p for batch in results for p in batch]
    assert len(produced) == 24 + 4 * 12
    result = read_run(pipeline)
    check_run(result, produced)
