"""Environment wrappers: real gymnasium and dm_env environments and an ARES-style async env.

The user's loop is plain (no agenttrace call in it); the wrapped environment alone must give
trajectories equal to what the loop saw, recorded beside it in plain lists, and to gymnasium's
own ``RecordEpisodeStatistics``. Live (trajectories.jsonl), offline (rebuilt from spans.jsonl)
and collector trajectories must all be equal.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import dm_env
import gymnasium as gym
import gymnasium.envs.registration
import numpy as np
import pytest
from conftest import RunResult, read_run
from gymnasium.wrappers import RecordEpisodeStatistics
from opentelemetry import trace
from test_gymnasium import EpisodeRun, assert_same, check_trajectory, make_policy, snapshot

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument.vector import TracedVectorEnv
from agenttrace.instrument.wrappers import (
    TracedDmEnv,
    TracedEnv,
    TrajectoryCollectingEnvironment,
    instrument_gymnasium,
    uninstrument_gymnasium,
)
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory import SpanRecord

GYM_ENVS = [
    pytest.param("CartPole-v1", {"max_episode_steps": 25}, id="CartPole-v1"),
    pytest.param("FrozenLake-v1", {"is_slippery": False, "max_episode_steps": 12}, id="FrozenLake"),
]
SEEDS = range(100, 106)


def by_id(trajectories: list[at.Trajectory]) -> dict[str, at.Trajectory]:
    found: dict[str, at.Trajectory] = {}
    for trajectory in trajectories:
        assert trajectory.episode_id not in found, f"{trajectory.episode_id} written twice"
        found[trajectory.episode_id] = trajectory
    return found


def checked(result: RunResult) -> dict[str, at.Trajectory]:
    """Live trajectories by id, after checking the offline rebuild gives the same ones."""
    live, offline = by_id(result.live), by_id(result.offline)
    assert live.keys() == offline.keys()
    for episode_id, trajectory in live.items():
        assert trajectory == offline[episode_id], episode_id
    assert result.stats["internal_errors"] == 0
    assert result.stats["episodes_open"] == 0
    return live


def span_records(runtime: at.AgentTrace) -> list[SpanRecord]:
    return list(read_otlp_json(runtime.span_paths))


# --- gymnasium ---------------------------------------------------------------------------------


def play_plain(env: gym.Env, seed: int) -> EpisodeRun:
    """The user's loop, unchanged: no agenttrace call; what it saw goes into a plain list."""
    policy = make_policy(env, seed)
    obs, info = env.reset(seed=seed)
    run = EpisodeRun(episode_id=env.get_wrapper_attr("agenttrace_episode_id"), seed=seed)
    run.reset_info = info
    done = False
    while not done:
        assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached
        assert at.current_episode_id() is None
        action = policy(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        run.steps.append((snapshot(obs), action, reward, terminated, truncated))
        obs = next_obs
        done = terminated or truncated
    run.final_observation = snapshot(obs)
    run.stats_return = info["episode"]["r"]
    run.stats_length = info["episode"]["l"]
    return run


@pytest.mark.parametrize(("env_name", "env_kwargs"), GYM_ENVS)
@pytest.mark.parametrize("traced_outermost", [True, False], ids=["traced-outside", "stats-outside"])
def test_gymnasium_wrapper_rebuilds_what_the_loop_saw(
    pipeline, env_name, env_kwargs, traced_outermost
):
    collected: list[at.Trajectory] = []
    task_id = f"{env_name}-wrapped"
    if traced_outermost:
        env = TracedEnv(
            RecordEpisodeStatistics(gym.make(env_name, **env_kwargs)),
            task_id=task_id,
            collector=collected.append,
        )
    else:
        env = RecordEpisodeStatistics(
            TracedEnv(gym.make(env_name, **env_kwargs), task_id=task_id, collector=collected.append)
        )
    runs = [play_plain(env, seed) for seed in SEEDS]
    env.close()  # nothing open: changes nothing

    live = checked(read_run(pipeline))
    assert list(live) == [run.episode_id for run in runs]
    for run in runs:
        trajectory = live[run.episode_id]
        check_trajectory(trajectory, run, task_id)
        assert trajectory.attributes[sc.ENV_NAME] == env_name
        assert trajectory.attributes[sc.EPISODE_SEED] == run.seed
    # The collector got the very trajectories the sinks wrote, as each episode ended.
    assert collected == [live[run.episode_id] for run in runs]
    assert {t.status for t in collected} <= {sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED}


class FailingStep(gym.Wrapper):
    """Raises the given exception object at step ``at_step`` (counted from 0 per episode)."""

    def __init__(self, env: gym.Env, error: BaseException, at_step: int) -> None:
        super().__init__(env)
        self.error, self.at_step, self.count = error, at_step, 0

    def reset(self, **kwargs: Any) -> Any:
        self.count = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        if self.count == self.at_step:
            raise self.error
        self.count += 1
        return self.env.step(action)


class FailingReset(gym.Wrapper):
    def __init__(self, env: gym.Env, error: Exception) -> None:
        super().__init__(env)
        self.error = error

    def reset(self, **kwargs: Any) -> Any:
        raise self.error


def test_gymnasium_early_ends(pipeline):
    cartpole = {"max_episode_steps": 500}
    env = TracedEnv(gym.make("CartPole-v1", **cartpole), task_id="early")
    env.reset(seed=1)
    env.step(0)
    env.step(1)
    abandoned = env.agenttrace_episode_id
    env.reset(seed=2)  # the open episode is left behind
    env.step(0)
    aborted_by_close = env.agenttrace_episode_id
    env.close()

    other = TracedEnv(gym.make("CartPole-v1", **cartpole))
    other.reset(seed=3)
    other.step(1)
    aborted_by_env_closed = other.agenttrace_episode_id
    at.env_closed(other)  # the same mechanism as the tracing API's
    assert other.step(0)[1] == 1.0  # no episode open: passes through untraced

    error = RuntimeError("physics exploded")
    failing = TracedEnv(FailingStep(gym.make("CartPole-v1", **cartpole), error, at_step=2))
    failing.reset(seed=4)
    failing.step(0)
    failing.step(1)
    with pytest.raises(RuntimeError) as raised:
        failing.step(0)
    assert raised.value is error
    errored_in_step = failing.agenttrace_episode_id
    failing.reset(seed=5)  # a fresh episode after the failure
    failing.step(0)
    after_error = failing.agenttrace_episode_id
    failing.close()

    reset_error = ValueError("no such level")
    broken = TracedEnv(FailingReset(gym.make("CartPole-v1"), reset_error))
    with pytest.raises(ValueError) as raised_reset:
        broken.reset(seed=6)
    assert raised_reset.value is reset_error
    errored_in_reset = broken.agenttrace_episode_id

    interrupted = TracedEnv(
        FailingStep(gym.make("CartPole-v1", **cartpole), KeyboardInterrupt(), at_step=1)
    )
    interrupted.reset(seed=7)
    interrupted.step(0)
    with pytest.raises(KeyboardInterrupt):
        interrupted.step(0)
    cancelled = interrupted.agenttrace_episode_id

    live = checked(read_run(pipeline))
    expected = {
        abandoned: (sc.STATUS_ABANDONED, 2),
        aborted_by_close: (sc.STATUS_ABORTED, 1),
        aborted_by_env_closed: (sc.STATUS_ABORTED, 1),
        errored_in_step: (sc.STATUS_ERRORED, 3),  # steps 0, 1 and the failed step 2
        after_error: (sc.STATUS_ABORTED, 1),
        errored_in_reset: (sc.STATUS_ERRORED, 0),
        cancelled: (sc.STATUS_CANCELLED, 2),
    }
    assert len(set(expected)) == len(expected) == len(live)
    for episode_id, (status, length) in expected.items():
        assert (live[episode_id].status, live[episode_id].length) == (status, length), episode_id
    assert live[abandoned].task_id == "early"
    for episode_id, error_obj in ((errored_in_step, error), (errored_in_reset, reset_error)):
        recorded = live[episode_id].error
        assert recorded is not None
        assert (recorded.type, recorded.message) == (type(error_obj).__name__, str(error_obj))
    for episode_id in set(expected) - {errored_in_step, errored_in_reset}:
        assert live[episode_id].error is None
    failed_step = live[errored_in_step].steps[2]
    assert failed_step.action == 0 and failed_step.reward is None
    assert [s.reward for s in live[errored_in_step].steps[:2]] == [1.0, 1.0]


class LLMInsideStep(gym.Wrapper):
    """An environment whose step calls a model: a span the user's side creates inside step."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.seen_episode_ids: list[str | None] = []

    def step(self, action: Any) -> Any:
        self.seen_episode_ids.append(at.current_episode_id())
        with at.llm_call(model="judge-1") as call:
            call.record(output_messages=[{"role": "assistant", "content": f"action {action}"}])
        return self.env.step(action)


def test_gymnasium_spans_nest_and_the_callers_context_stays(pipeline):
    tracer = pipeline.provider.get_tracer("user-code")
    inner = LLMInsideStep(gym.make("CartPole-v1", max_episode_steps=5))
    env = TracedEnv(inner)
    with tracer.start_as_current_span("user.loop") as loop:
        env.reset(seed=0)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(1)
            assert trace.get_current_span() is loop  # the caller's context, unchanged
            assert at.current_episode_id() is None
            done = terminated or truncated
    episode_id = env.agenttrace_episode_id
    assert inner.seen_episode_ids == [episode_id] * len(inner.seen_episode_ids)

    live = checked(read_run(pipeline))
    trajectory = live[episode_id]
    # The model call made inside each step belongs to that step.
    assert [len(step.llm_calls) for step in trajectory.steps] == [1] * trajectory.length
    assert trajectory.steps[0].llm_calls[0].output_messages[0]["content"] == "action 1"

    records = span_records(pipeline)
    by_span = {r.span_id: r for r in records}
    (loop_record,) = [r for r in records if r.name == "user.loop"]
    (episode,) = [r for r in records if r.name == sc.EPISODE]
    assert episode.parent_span_id == loop_record.span_id
    for record in records:
        parent = by_span.get(record.parent_span_id)
        if record.name in (sc.ENV_RESET, sc.TIMESTEP):
            assert parent is episode
        elif record.name == sc.ENV_STEP:
            assert parent.name == sc.TIMESTEP
            assert parent.attributes[sc.TIMESTEP_INDEX] == record.attributes[sc.TIMESTEP_INDEX]
        elif record.name.startswith("chat "):
            assert parent.name == sc.ENV_STEP


def test_instrument_gymnasium_patches_make_and_restores_it_exactly(pipeline):
    original_make = gymnasium.make
    original_registration_make = gymnasium.envs.registration.make
    original_make_vec = gymnasium.make_vec

    def nested_entry_point(**kwargs: Any) -> gym.Env:
        return gym.make("CartPole-v1", **kwargs)  # a make inside make: not traced itself

    gymnasium.register("AgentTraceNested-v0", entry_point=nested_entry_point)
    instrument_gymnasium(task_id="made")
    try:
        patched = gymnasium.make
        instrument_gymnasium(task_id="again")  # already on: changes nothing
        assert gymnasium.make is patched
        env = RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=20))
        assert isinstance(env.env, TracedEnv)
        made_runs = [play_plain(env, seed) for seed in (1, 2)]

        # Wrapping a traced env again: only the outermost traces.
        double = TracedEnv(
            RecordEpisodeStatistics(gym.make("FrozenLake-v1", is_slippery=False)),
            task_id="outer",
        )
        double_runs = [play_plain(double, seed) for seed in (3, 4)]

        nested = gym.make("AgentTraceNested-v0")
        layers, layer = [], nested
        while isinstance(layer, gym.Wrapper):
            layers.append(layer)
            layer = layer.env
        assert [type(w) for w in layers].count(TracedEnv) == 1

        vector = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        assert isinstance(vector, TracedVectorEnv)  # sub-envs recorded from the batches ...
        assert not any(isinstance(sub, TracedEnv) for sub in vector.env.envs)  # ... once
        vector.close()
    finally:
        uninstrument_gymnasium()
        del gymnasium.envs.registration.registry["AgentTraceNested-v0"]
    assert gymnasium.make is original_make
    assert gymnasium.envs.registration.make is original_registration_make
    assert gymnasium.make_vec is original_make_vec
    assert not isinstance(gym.make_vec("CartPole-v1", num_envs=2), TracedVectorEnv)
    assert not isinstance(gym.make("CartPole-v1"), TracedEnv)
    uninstrument_gymnasium()  # not instrumented: nothing to do

    live = checked(read_run(pipeline))
    runs = made_runs + double_runs
    assert set(live) == {run.episode_id for run in runs}  # no duplicate episodes
    for run in made_runs:
        check_trajectory(live[run.episode_id], run, "made")
    for run in double_runs:
        check_trajectory(live[run.episode_id], run, "outer")
    records = span_records(pipeline)
    assert sum(r.name == sc.ENV_RESET for r in records) == len(runs)
    assert sum(r.name == sc.ENV_STEP for r in records) == sum(len(r.steps) for r in runs)


# --- dm_env ------------------------------------------------------------------------------------


class Corridor(dm_env.Environment):
    """Walk right to the goal: +1 there (terminated, discount 0), -0.25 per other move;
    after ``limit`` moves the sequence is truncated (LAST with discount 1)."""

    def __init__(self, length: int = 4, limit: int = 8) -> None:
        self.length, self.limit = length, limit
        self.position = self.moves = 0
        self.needs_reset = True
        self.closed = False

    def _observation(self) -> np.ndarray:
        return np.array([self.position, self.length - self.position], dtype=np.int64)

    def reset(self) -> dm_env.TimeStep:
        self.position = self.moves = 0
        self.needs_reset = False
        return dm_env.restart(self._observation())

    def step(self, action: int) -> dm_env.TimeStep:
        if self.needs_reset:
            return self.reset()  # dm_env: a step after LAST starts a new sequence
        self.moves += 1
        self.position = max(0, self.position + (1 if action == 1 else -1))
        if self.position == self.length:
            self.needs_reset = True
            return dm_env.termination(1.0, self._observation())
        if self.moves == self.limit:
            self.needs_reset = True
            return dm_env.truncation(-0.25, self._observation())
        return dm_env.transition(-0.25, self._observation())

    def observation_spec(self) -> Any:
        return dm_env.specs.Array((2,), np.int64, name="position")

    def action_spec(self) -> Any:
        return dm_env.specs.DiscreteArray(2, name="move")

    def close(self) -> None:
        self.closed = True


@dataclass
class DmRun:
    episode_id: str
    first: dm_env.TimeStep
    steps: list[tuple[np.ndarray, int, dm_env.TimeStep]] = field(default_factory=list)


def play_dm(env: TracedDmEnv, rng: np.random.Generator, first: dm_env.TimeStep) -> DmRun:
    run = DmRun(env.agenttrace_episode_id, first)
    timestep = first
    while not timestep.last():
        action = int(rng.random() < 0.7)
        next_timestep = env.step(action)
        run.steps.append((timestep.observation.copy(), action, next_timestep))
        timestep = next_timestep
    return run


def check_dm(trajectory: at.Trajectory, run: DmRun) -> None:
    assert len(trajectory.steps) == trajectory.length == len(run.steps)
    assert_same(trajectory.steps[0].observation, run.first.observation, "first observation")
    for step, (observation, action, outcome) in zip(trajectory.steps, run.steps, strict=True):
        assert_same(step.observation, observation, f"step {step.index} observation")
        assert step.action == action
        assert step.reward == outcome.reward
        assert step.discount == outcome.discount
        last = outcome.last()
        assert step.terminated is (last and outcome.discount == 0.0)
        assert step.truncated is (last and outcome.discount != 0.0)
    final = run.steps[-1][2]
    assert_same(trajectory.final_observation, final.observation, "final observation")
    expected = sc.STATUS_COMPLETED if final.discount == 0.0 else sc.STATUS_TRUNCATED
    assert trajectory.status == expected
    assert trajectory.return_ == sum(outcome.reward for _, _, outcome in run.steps)


def test_dm_env_wrapper_rebuilds_what_the_loop_saw(pipeline):
    collected: list[at.Trajectory] = []
    inner = Corridor()
    env = TracedDmEnv(inner, task_id="corridor", collector=collected.append)
    assert isinstance(env, dm_env.Environment)
    assert env.observation_spec() == inner.observation_spec()
    assert env.action_spec().num_values == 2
    assert env.limit == 8  # other attributes are the wrapped env's
    rng = np.random.default_rng(0)
    runs = [play_dm(env, rng, env.reset()) for _ in range(6)]
    # dm_env: a step after LAST starts the next sequence; it is the next episode's reset.
    runs.append(play_dm(env, rng, env.step(1)))
    env.close()
    assert inner.closed

    live = checked(read_run(pipeline))
    assert list(live) == [run.episode_id for run in runs]
    for run in runs:
        check_dm(live[run.episode_id], run)
        assert live[run.episode_id].task_id == "corridor"
        assert live[run.episode_id].attributes[sc.ENV_NAME] == "Corridor"
    assert {t.status for t in live.values()} == {sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED}
    assert collected == list(live.values())


def test_dm_env_early_ends(pipeline):
    env = TracedDmEnv(Corridor(length=50, limit=100))
    env.reset()
    env.step(1)
    abandoned = env.agenttrace_episode_id
    env.reset()
    env.step(1)
    aborted = env.agenttrace_episode_id
    with env:  # dm_env's context manager closes the env: the open episode is aborted
        pass

    error = OSError("simulator went away")

    class Crashing(Corridor):
        def step(self, action: int) -> dm_env.TimeStep:
            if self.moves == 1:
                raise error
            return super().step(action)

    crashing = TracedDmEnv(Crashing(length=50, limit=100))
    crashing.reset()
    crashing.step(1)
    with pytest.raises(OSError) as raised:
        crashing.step(1)
    assert raised.value is error
    errored = crashing.agenttrace_episode_id

    live = checked(read_run(pipeline))
    assert {k: (t.status, t.length) for k, t in live.items()} == {
        abandoned: (sc.STATUS_ABANDONED, 1),
        aborted: (sc.STATUS_ABORTED, 1),
        errored: (sc.STATUS_ERRORED, 2),
    }
    assert live[errored].error.type == "OSError"


# --- ARES-style async environment ---------------------------------------------------------------


class StepType(enum.IntEnum):
    FIRST = 0
    MID = 1
    LAST = 2


class TimeStep(NamedTuple):
    step_type: StepType
    reward: float | None
    discount: float | None
    observation: Any


class GuessTheNumber:
    """An ARES-style async environment: an agent guesses a secret number from hints.

    Every call awaits (as a real env would await a sandbox or a model), so concurrent episodes
    interleave. Optional hooks make it fail or hang in step, to test the episode ends.
    """

    open_episodes = 0  # across instances: how many episodes are in flight at once
    most_open = 0

    def __init__(self, secret: int, max_turns: int = 10) -> None:
        self.secret, self.max_turns = secret, max_turns
        self.name = f"guess-{secret}"
        self.turns = 0
        self.in_episode = False
        self.closed = False
        self.entered = False
        self.fail_with: Exception | None = None
        self.hang: asyncio.Event | None = None

    def hint(self, guess: int) -> str:
        return "higher" if guess < self.secret else "lower" if guess > self.secret else "correct"

    def _begin(self) -> None:
        if not self.in_episode:
            self.in_episode = True
            type(self).open_episodes += 1
            type(self).most_open = max(type(self).most_open, type(self).open_episodes)

    def _end(self) -> None:
        if self.in_episode:
            self.in_episode = False
            type(self).open_episodes -= 1

    async def reset(self, *, task: str = "guess") -> TimeStep:
        await asyncio.sleep(0)
        self._end()
        self._begin()
        self.turns = 0
        prompt = {"role": "user", "content": f"{task}: a number in 0..99 ({self.max_turns} turns)"}
        return TimeStep(StepType.FIRST, None, None, {"messages": [prompt]})

    async def step(self, action: int) -> TimeStep:
        await asyncio.sleep(0)
        if self.hang is not None:
            await self.hang.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.turns += 1
        hint = self.hint(action)
        observation = {"messages": [{"role": "user", "content": hint}], "turn": self.turns}
        await asyncio.sleep(0)
        if hint == "correct":
            self._end()
            return TimeStep(StepType.LAST, 1.0, 0.0, observation)
        if self.turns == self.max_turns:
            self._end()
            return TimeStep(StepType.LAST, 0.0, 1.0, observation)
        return TimeStep(StepType.MID, 0.0, 1.0, observation)

    async def close(self) -> None:
        await asyncio.sleep(0)
        self._end()
        self.closed = True

    async def __aenter__(self) -> GuessTheNumber:
        self.entered = True
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


@dataclass
class AsyncRun:
    episode_id: str
    observations: list[Any] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    outcomes: list[TimeStep] = field(default_factory=list)


async def play_guessing(env: Any, *, bisect: bool = True) -> AsyncRun:
    """The agent's loop: bisect on the hints (or guess badly), recording what it saw."""
    timestep = await env.reset(task="guess")
    run = AsyncRun(env.agenttrace_episode_id)
    low, high = 0, 99
    while timestep.step_type != StepType.LAST:
        guess = (low + high) // 2 if bisect else 0
        run.observations.append(timestep.observation)
        run.actions.append(guess)
        timestep = await env.step(guess)
        run.outcomes.append(timestep)
        hint = timestep.observation["messages"][0]["content"]
        if hint == "higher":
            low = guess + 1
        elif hint == "lower":
            high = guess - 1
    return run


def check_async(trajectory: at.Trajectory, run: AsyncRun) -> None:
    assert trajectory.length == len(trajectory.steps) == len(run.actions)
    for step, observation, action, outcome in zip(
        trajectory.steps, run.observations, run.actions, run.outcomes, strict=True
    ):
        assert step.observation == observation
        assert step.action == action
        assert step.reward == outcome.reward
        assert step.discount == outcome.discount
    assert trajectory.final_observation == run.outcomes[-1].observation
    assert trajectory.return_ == sum(outcome.reward for outcome in run.outcomes)


async def test_async_env_six_episode_ends(pipeline):
    collected: list[at.Trajectory] = []
    ids: dict[str, str] = {}

    inner = GuessTheNumber(secret=37)
    env = TrajectoryCollectingEnvironment(inner, collected.append, task_id="guess")
    completed = await play_guessing(env)
    ids[completed.episode_id] = sc.STATUS_COMPLETED
    truncated = await play_guessing(env, bisect=False)
    ids[truncated.episode_id] = sc.STATUS_TRUNCATED

    await env.reset()
    await env.step(10)
    ids[env.agenttrace_episode_id] = sc.STATUS_ABANDONED
    await env.reset()  # leaves the previous episode behind
    await env.step(20)
    ids[env.agenttrace_episode_id] = sc.STATUS_ABORTED
    await env.close()
    assert inner.closed

    async with TrajectoryCollectingEnvironment(GuessTheNumber(5), collected.append) as scoped:
        assert isinstance(scoped, TrajectoryCollectingEnvironment)
        assert scoped.entered  # the wrapped env's __aenter__ ran
        await scoped.reset()
        await scoped.step(50)
        ids[scoped.agenttrace_episode_id] = sc.STATUS_ABORTED
    assert scoped.closed

    error = ConnectionError("sandbox lost")
    failing = TrajectoryCollectingEnvironment(GuessTheNumber(60), collected.append)
    await failing.reset()
    await failing.step(50)
    failing.fail_with = error  # attribute writes reach the wrapped env too
    with pytest.raises(ConnectionError) as raised:
        await failing.step(70)
    assert raised.value is error
    ids[failing.agenttrace_episode_id] = sc.STATUS_ERRORED

    hanging_inner = GuessTheNumber(80)
    hanging = TrajectoryCollectingEnvironment(hanging_inner, collected.append)
    await hanging.reset()
    await hanging.step(50)
    hanging_inner.hang = asyncio.Event()  # never set: the next step waits until cancelled
    task = asyncio.create_task(hanging.step(90))
    for _ in range(5):  # let the step reach the wait
        await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ids[hanging.agenttrace_episode_id] = sc.STATUS_CANCELLED

    live = checked(read_run(pipeline))
    assert {episode_id: t.status for episode_id, t in live.items()} == ids
    assert sorted(t.status for t in collected) == sorted(ids.values())
    assert collected == [live[t.episode_id] for t in collected]
    check_async(live[completed.episode_id], completed)
    check_async(live[truncated.episode_id], truncated)
    assert live[completed.episode_id].task_id == "guess"
    assert live[completed.episode_id].attributes[sc.ENV_NAME] == "GuessTheNumber"
    errored = live[failing.agenttrace_episode_id]
    assert (errored.error.type, errored.error.message) == ("ConnectionError", "sandbox lost")
    assert errored.length == 2
    cancelled = live[hanging.agenttrace_episode_id]
    assert cancelled.error is None and cancelled.length == 2


async def test_async_env_32_concurrent_episodes_none_merged_none_lost(pipeline):
    GuessTheNumber.open_episodes = GuessTheNumber.most_open = 0
    collected: list[at.Trajectory] = []
    envs = [
        TrajectoryCollectingEnvironment(GuessTheNumber(secret=(7 * i + 3) % 100), collected.append)
        for i in range(32)
    ]

    async def two_episodes(env: TrajectoryCollectingEnvironment) -> list[AsyncRun]:
        return [await play_guessing(env), await play_guessing(env, bisect=False)]

    results = await asyncio.gather(*(two_episodes(env) for env in envs))
    for env in envs:
        await env.close()
    assert GuessTheNumber.most_open > 1  # the episodes really ran interleaved

    runs = [run for pair in results for run in pair]
    live = checked(read_run(pipeline))
    assert len(runs) == len({run.episode_id for run in runs}) == len(live) == 64
    for run in runs:
        check_async(live[run.episode_id], run)
    assert sorted(t.episode_id for t in collected) == sorted(live)
    assert all(t == live[t.episode_id] for t in collected)


async def test_async_env_wrapper_is_transparent():
    inner = GuessTheNumber(secret=12, max_turns=3)
    env = TrajectoryCollectingEnvironment(inner)
    assert env.__wrapped__ is inner
    assert env.name == "guess-12"
    assert env.hint(3) == "higher"  # methods of the wrapped env
    await env.reset(task="warm-up")
    timestep = await env.step(action=12)  # keyword arguments pass through as given
    assert timestep.step_type == StepType.LAST and timestep.reward == 1.0
    env.max_turns = 5
    assert inner.max_turns == 5
    with pytest.raises(AttributeError):
        _ = env.no_such_attribute


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="reset, step"):
        TrajectoryCollectingEnvironment(object())
    with pytest.raises(TypeError, match="collector must be callable"):
        TrajectoryCollectingEnvironment(GuessTheNumber(1), collector=5)

    async def async_collector(trajectory: at.Trajectory) -> None:
        pass

    with pytest.raises(TypeError, match="coroutine function"):
        TracedDmEnv(Corridor(), collector=async_collector)
    with pytest.raises(TypeError, match="attributes must be a dict"):
        TracedEnv(gym.make("CartPole-v1"), attributes=[("a", 1)])
    with pytest.raises(TypeError, match="unknown options: seed"):
        instrument_gymnasium(seed=3)


def test_a_failing_collector_is_logged_and_the_loop_goes_on(pipeline, caplog):
    def collector(trajectory: at.Trajectory) -> None:
        raise RuntimeError("replay buffer full")

    env = TracedEnv(gym.make("CartPole-v1", max_episode_steps=3), collector=collector)
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        for seed in (1, 2):
            env.reset(seed=seed)
            for _ in range(3):
                env.step(0)  # the third step truncates: the collector fails, the step returns
    live = checked(read_run(pipeline))
    assert len(live) == 2  # the sinks still got both
    failures = [r for r in caplog.records if "collector" in r.getMessage()]
    assert len(failures) == 2
