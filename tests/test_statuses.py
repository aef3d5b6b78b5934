"""The seven episode statuses, in the rebuilt trajectories (live and offline) and on the span.

completed, truncated, errored, cancelled, abandoned and aborted are decided in-process and put
on the episode span (``rl.episode.status``); incomplete is decided by the rebuild (the episode
never ended, or some of its steps never arrived).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import RunResult, read_run
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json


@dataclass
class Traced:
    runtime: at.AgentTrace
    exporter: InMemorySpanExporter

    def episode_span(self, episode_id: str) -> ReadableSpan:
        found = [
            span
            for span in self.exporter.get_finished_spans()
            if span.name == sc.EPISODE and span.attributes.get(sc.EPISODE_ID) == episode_id
        ]
        assert len(found) == 1, f"expected one episode span for {episode_id}, got {found}"
        return found[0]

    def span_status(self, episode_id: str) -> str:
        return self.episode_span(episode_id).attributes[sc.EPISODE_STATUS]


@pytest.fixture
def traced(tmp_path) -> Traced:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path),
        run_name="test",
        sinks=["jsonl"],
        spans=["file"],
    )
    yield Traced(runtime, exporter)
    at.shutdown()
    provider.shutdown()


def by_id(trajectories: list[at.Trajectory]) -> dict[str, at.Trajectory]:
    found: dict[str, at.Trajectory] = {}
    for trajectory in trajectories:
        assert trajectory.episode_id not in found, f"{trajectory.episode_id} written twice"
        found[trajectory.episode_id] = trajectory
    return found


def both(result: RunResult, episode_id: str) -> at.Trajectory:
    """The live trajectory of ``episode_id`` after checking the offline rebuild equals it."""
    live = by_id(result.live)[episode_id]
    offline = by_id(result.offline)[episode_id]
    assert live == offline
    return live


def cartpole(max_episode_steps: int = 500) -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=max_episode_steps)


def balance(obs: np.ndarray) -> int:
    """A good CartPole controller: it never falls within a short time limit."""
    return int(obs[2] + 0.5 * obs[3] > 0)


def run_steps(env: gym.Env, policy, *, seed: int = 0, max_steps: int | None = None) -> list:
    """Steps of one episode inside the current episode scope; returns (terminated, truncated)s."""
    flags = []
    with at.env_reset() as reset:
        obs, _ = reset.record_result(env.reset(seed=seed))
    done = False
    while not done and (max_steps is None or len(flags) < max_steps):
        with at.timestep():
            with at.agent_act() as act:
                action = policy(obs)
                act.record(observation=obs, action=action)
            with at.env_step() as step:
                obs, _, terminated, truncated, _ = step.record_result(env.step(action))
        flags.append((terminated, truncated))
        done = terminated or truncated
    return flags


# --- completed and truncated ----------------------------------------------------------------


def test_completed_when_the_last_step_terminates(traced):
    env = cartpole()
    env.action_space.seed(0)
    with at.episode(env=env) as ep:
        flags = run_steps(env, lambda obs: env.action_space.sample())
    assert flags[-1] == (True, False)
    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_COMPLETED
    assert trajectory.steps[-1].terminated and not trajectory.steps[-1].truncated
    assert len(trajectory.steps) == len(flags)
    assert traced.span_status(ep.id) == sc.STATUS_COMPLETED
    assert traced.episode_span(ep.id).status.status_code is not StatusCode.ERROR


def test_truncated_by_gymnasium_time_limit(traced):
    env = cartpole(max_episode_steps=7)
    with at.episode(env=env) as ep:
        flags = run_steps(env, balance)
    assert flags[-1] == (False, True)
    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_TRUNCATED
    assert trajectory.length == 7
    assert trajectory.steps[-1].truncated and not trajectory.steps[-1].terminated
    assert traced.span_status(ep.id) == sc.STATUS_TRUNCATED


def test_truncated_when_the_loop_stops_without_a_terminal_step(traced):
    env = cartpole()
    with at.episode(env=env) as ep:
        flags = run_steps(env, balance, max_steps=4)
    assert flags[-1] == (False, False)
    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_TRUNCATED
    assert [s.index for s in trajectory.steps] == [0, 1, 2, 3]
    assert traced.span_status(ep.id) == sc.STATUS_TRUNCATED


def test_episode_without_steps_is_completed(traced):
    with at.episode(task_id="empty") as ep:
        pass
    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_COMPLETED
    assert trajectory.steps == [] and trajectory.length == 0
    assert traced.span_status(ep.id) == sc.STATUS_COMPLETED


# --- errored --------------------------------------------------------------------------------


class EnvCrashed(RuntimeError):
    pass


class CrashOnStep(gym.Wrapper):
    """A real env whose ``step`` raises on the given step (a simulator failure)."""

    def __init__(self, env: gym.Env, crash_at: int) -> None:
        super().__init__(env)
        self.crash_at = crash_at
        self.calls = 0
        self.raised: EnvCrashed | None = None

    def step(self, action):
        if self.calls == self.crash_at:
            self.raised = EnvCrashed(f"physics exploded at step {self.calls}")
            raise self.raised
        self.calls += 1
        return self.env.step(action)


def test_errored_exception_propagates_unchanged_and_is_recorded(traced):
    env = CrashOnStep(cartpole(), crash_at=2)
    actions = []
    with pytest.raises(EnvCrashed) as caught:
        with at.episode(env=env, task_id="crash") as ep:
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset(seed=1))
            for _ in range(10):
                with at.timestep():
                    action = balance(obs)
                    actions.append(action)
                    with at.env_step() as step:
                        step.record(action=action)
                        obs, *_ = step.record_result(env.step(action))

    # The very object the env raised, unchanged, with its traceback down to the raise.
    exc = caught.value
    assert exc is env.raised
    assert type(exc) is EnvCrashed
    assert str(exc) == "physics exploded at step 2"
    assert exc.__cause__ is None and exc.__context__ is None
    frames = traceback.extract_tb(exc.__traceback__)
    assert frames[-1].name == "step" and frames[-1].filename == __file__
    assert frames[-1].line == "raise self.raised"
    assert any(
        f.name == "test_errored_exception_propagates_unchanged_and_is_recorded" for f in frames
    )

    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_ERRORED
    assert trajectory.error is not None
    # The OTel SDK names the type as exception.type: bare or module-qualified by version.
    assert trajectory.error.type in ("EnvCrashed", f"{EnvCrashed.__module__}.EnvCrashed")
    assert trajectory.error.message == "physics exploded at step 2"
    assert "raise self.raised" in trajectory.error.stack
    assert "EnvCrashed: physics exploded at step 2" in trajectory.error.stack
    # The failing step is still there, with the action it tried.
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    assert [s.action for s in trajectory.steps] == actions
    assert trajectory.steps[2].reward is None
    assert trajectory.missing_steps == []

    span = traced.episode_span(ep.id)
    assert span.attributes[sc.EPISODE_STATUS] == sc.STATUS_ERRORED
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == [sc.EXCEPTION_EVENT]


# --- cancelled ------------------------------------------------------------------------------


async def test_cancelled_when_the_task_is_cancelled_mid_step(traced):
    env = cartpole()
    in_step_3 = asyncio.Event()
    handle: dict[str, str] = {}

    async def episode_task() -> None:
        with at.episode(env=env) as ep:
            handle["id"] = ep.id
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset(seed=0))
            for i in range(100):
                with at.timestep():
                    action = balance(obs)
                    with at.env_step() as step:
                        step.record(action=action)
                        if i == 3:
                            in_step_3.set()
                            await asyncio.Event().wait()  # an env call that never returns
                        obs, *_ = step.record_result(env.step(action))
                await asyncio.sleep(0)

    task = asyncio.create_task(episode_task())
    await in_step_3.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()

    result = read_run(traced.runtime)
    trajectory = both(result, handle["id"])
    assert trajectory.status == sc.STATUS_CANCELLED
    assert trajectory.error is None
    assert [s.index for s in trajectory.steps] == [0, 1, 2, 3]
    assert trajectory.steps[3].reward is None
    span = traced.episode_span(handle["id"])
    assert span.attributes[sc.EPISODE_STATUS] == sc.STATUS_CANCELLED
    assert span.status.status_code is not StatusCode.ERROR


async def test_cancelled_decorated_async_episode(traced):
    started = asyncio.Event()
    ids: list[str] = []

    @at.episode
    async def run(task_id: str | None = None) -> None:
        ids.append(at.current_episode_id())
        for i in range(5):
            with at.timestep() as step:
                step.record(action=i, reward=1.0)
                if i == 2:
                    started.set()
                    await asyncio.sleep(3600)

    task = asyncio.create_task(run(task_id="decorated"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = read_run(traced.runtime)
    trajectory = both(result, ids[0])
    assert trajectory.status == sc.STATUS_CANCELLED
    assert trajectory.task_id == "decorated"
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    assert traced.span_status(ids[0]) == sc.STATUS_CANCELLED


def test_cancelled_by_keyboard_interrupt(traced):
    env = cartpole()
    interrupt = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as caught:
        with at.episode(env=env) as ep:
            run_steps(env, balance, max_steps=2)
            with at.timestep():
                raise interrupt
    assert caught.value is interrupt
    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_CANCELLED
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    assert traced.span_status(ep.id) == sc.STATUS_CANCELLED


# --- abandoned and aborted ------------------------------------------------------------------


def test_abandoned_when_a_new_episode_starts_on_the_same_env(traced):
    env = cartpole()
    with at.episode(env=env, task_id="first") as first:
        run_steps(env, balance, max_steps=2)
        # The first episode is still open when a second one starts on the same env.
        with at.episode(env=env, task_id="second") as second:
            second_flags = run_steps(env, balance, seed=5, max_steps=3)
    assert first.id != second.id
    assert second_flags[-1] == (False, False)

    result = read_run(traced.runtime)
    abandoned = both(result, first.id)
    assert abandoned.status == sc.STATUS_ABANDONED
    assert abandoned.task_id == "first"
    assert [s.index for s in abandoned.steps] == [0, 1]
    assert traced.span_status(first.id) == sc.STATUS_ABANDONED

    follower = both(result, second.id)
    assert follower.status == sc.STATUS_TRUNCATED
    assert follower.task_id == "second"
    assert [s.index for s in follower.steps] == [0, 1, 2]
    assert traced.span_status(second.id) == sc.STATUS_TRUNCATED
    assert len(result.live) == 2


def test_abandoned_across_threads_sharing_an_env(traced):
    """A worker left its episode open; another worker starts one on the same env."""
    import threading

    env = cartpole()
    opened, release = threading.Event(), threading.Event()
    ids: dict[str, str] = {}

    def stuck_worker() -> None:
        with at.episode(env=env, task_id="stuck") as ep:
            ids["stuck"] = ep.id
            run_steps(env, balance, max_steps=1)
            opened.set()
            release.wait(10)

    thread = threading.Thread(target=stuck_worker)
    thread.start()
    assert opened.wait(10)
    with at.episode(env=env, task_id="fresh") as ep:
        ids["fresh"] = ep.id
        run_steps(env, balance, max_steps=1)
    release.set()
    thread.join(10)

    result = read_run(traced.runtime)
    assert both(result, ids["stuck"]).status == sc.STATUS_ABANDONED
    assert both(result, ids["fresh"]).status == sc.STATUS_TRUNCATED
    assert traced.span_status(ids["stuck"]) == sc.STATUS_ABANDONED


def test_aborted_when_the_env_is_closed_while_open(traced):
    env = cartpole()
    with at.episode(env=env, task_id="closing") as ep:
        run_steps(env, balance, max_steps=3)
        env.close()
        at.env_closed(env)
    result = read_run(traced.runtime)
    trajectory = both(result, ep.id)
    assert trajectory.status == sc.STATUS_ABORTED
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    assert traced.span_status(ep.id) == sc.STATUS_ABORTED


def test_closing_an_env_with_no_open_episode_changes_nothing(traced):
    env = cartpole()
    with at.episode(env=env) as ep:
        run_steps(env, balance, max_steps=2)
    at.env_closed(env)
    other = cartpole()
    with at.episode(env=other) as ep2:
        at.env_closed(env)  # a different env: ep2 stays open
        run_steps(other, balance, max_steps=1)
    result = read_run(traced.runtime)
    assert both(result, ep.id).status == sc.STATUS_TRUNCATED
    assert both(result, ep2.id).status == sc.STATUS_TRUNCATED


# --- incomplete -----------------------------------------------------------------------------


def test_incomplete_episode_started_and_never_ended_is_written_at_shutdown(traced):
    ep = at.episode(task_id="never-ended").start()
    assert ep.id is not None
    result = read_run(traced.runtime)
    live = by_id(result.live)
    assert ep.id in live, "an open episode must be written (as incomplete) at shutdown"
    trajectory = live[ep.id]
    assert trajectory.status == sc.STATUS_INCOMPLETE
    assert trajectory.steps == []
    assert trajectory.missing_steps == []
    assert result.stats["episodes_open_at_shutdown"] == 1
    assert result.stats["episodes_failed_assembly"] == 0


def test_incomplete_at_shutdown_lists_missing_steps(traced):
    """Step 1 started and never ended (a hung call); steps 0 and 2 finished."""
    handle: dict[str, str] = {}

    def open_episode() -> None:  # runs in a copied context, which is then thrown away
        ep = at.episode(task_id="hung").__enter__()
        handle["id"] = ep.id
        with at.timestep() as step:
            step.record(observation=0, action="a", reward=1.0)
        hung = at.timestep().start()
        assert hung.index == 1
        with at.timestep() as step:
            step.record(observation=2, action="c", reward=3.0)

    contextvars.copy_context().run(open_episode)
    result = read_run(traced.runtime)
    live, offline = by_id(result.live)[handle["id"]], by_id(result.offline)[handle["id"]]
    for trajectory in (live, offline):
        assert trajectory.status == sc.STATUS_INCOMPLETE
        assert [s.index for s in trajectory.steps] == [0, 2]
        assert [s.action for s in trajectory.steps] == ["a", "c"]
        assert trajectory.missing_steps == [1]
        assert trajectory.length == 3  # steps 0..2 existed, one of them is missing
    # The episode span never ended, so it is not in spans.jsonl: only the steps can agree.
    assert live.steps == offline.steps
    assert result.stats["episodes_open_at_shutdown"] == 1


def wait_for_trajectory(path: Path, episode_id: str, timeout: float = 10.0) -> at.Trajectory:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for trajectory in load_trajectories(path):
                if trajectory.episode_id == episode_id:
                    return trajectory
        time.sleep(0.05)
    raise AssertionError(f"episode {episode_id} was not written within {timeout} s")


def test_incomplete_after_idle_timeout_without_shutdown(tmp_path):
    runtime = at.configure(
        out=str(tmp_path), run_name="idle", sinks=["jsonl"], spans=["file"], idle_timeout=0.5
    )
    handle: dict[str, str] = {}

    def open_episode() -> None:
        ep = at.episode(task_id="idle").__enter__()
        handle["id"] = ep.id
        for i in range(2):
            with at.timestep() as step:
                step.record(observation=i, action=i, reward=0.5)

    contextvars.copy_context().run(open_episode)
    bare = at.episode(task_id="bare-idle").start()  # started, no span of it ever ends
    path = tmp_path / "idle" / "trajectories.jsonl"
    trajectory = wait_for_trajectory(path, handle["id"])
    bare_trajectory = wait_for_trajectory(path, bare.id)
    assert runtime.stats()["episodes_expired_idle"] == 2
    assert bare_trajectory.status == sc.STATUS_INCOMPLETE
    assert bare_trajectory.steps == []
    assert trajectory.status == sc.STATUS_INCOMPLETE
    assert [s.index for s in trajectory.steps] == [0, 1]
    assert trajectory.rewards == [0.5, 0.5]
    assert trajectory.missing_steps == []
    assert sc.EPISODE_STATUS not in trajectory.attributes  # it never ended with a status

    # An active episode in the same run is not touched by the idle check.
    with at.episode(task_id="active") as ep:
        with at.timestep() as step:
            step.record(reward=1.0, terminated=True)
    result = read_run(runtime)
    live = by_id(result.live)
    assert live[handle["id"]].status == sc.STATUS_INCOMPLETE
    assert live[ep.id].status == sc.STATUS_COMPLETED
    assert result.stats["episodes_expired_idle"] == 2
    assert result.stats["episodes_failed_assembly"] == 0


def test_incomplete_when_a_step_span_is_missing_from_storage(traced):
    """Drop step 2's spans from spans.jsonl: the rebuild lists the gap, no renumbering."""
    env = cartpole()
    with at.episode(env=env, task_id="gap") as ep:
        flags = run_steps(env, balance, max_steps=5)
    assert len(flags) == 5
    result = read_run(traced.runtime)
    complete = both(result, ep.id)
    assert complete.status == sc.STATUS_TRUNCATED

    records = list(read_otlp_json(traced.runtime.span_paths))
    kept = [
        r
        for r in records
        if not (
            r.name in (sc.TIMESTEP, sc.AGENT_ACT, sc.ENV_STEP)
            and r.attributes.get(sc.TIMESTEP_INDEX) == 2
        )
    ]
    assert len(records) - len(kept) == 3
    (rebuilt,) = at.assemble(kept)
    assert rebuilt.episode_id == ep.id
    assert rebuilt.status == sc.STATUS_INCOMPLETE
    assert rebuilt.attributes[sc.EPISODE_STATUS] == sc.STATUS_TRUNCATED  # the status it had
    assert rebuilt.missing_steps == [2]
    assert [s.index for s in rebuilt.steps] == [0, 1, 3, 4]
    assert rebuilt.length == 5
    for step in rebuilt.steps:  # the remaining steps are untouched
        original = complete.steps[step.index]
        assert step == original

    # The last step lost: the episode span's length still tells that it existed.
    kept = [
        r
        for r in records
        if not (
            r.name in (sc.TIMESTEP, sc.AGENT_ACT, sc.ENV_STEP)
            and r.attributes.get(sc.TIMESTEP_INDEX) == 4
        )
    ]
    (rebuilt,) = at.assemble(kept)
    assert rebuilt.status == sc.STATUS_INCOMPLETE
    assert rebuilt.missing_steps == [4]
    assert [s.index for s in rebuilt.steps] == [0, 1, 2, 3]


def test_incomplete_from_hand_built_span_records():
    """The assembler alone: episode span says 4 steps, step 1's record never arrived."""
    trace_id, root = 0xABC, 1
    base = 1_700_000_000_000_000_000

    def step_record(index: int, reward: float) -> at.SpanRecord:
        return at.SpanRecord(
            trace_id,
            100 + index,
            root,
            sc.ENV_STEP,
            base + index * 10,
            base + index * 10 + 5,
            {
                sc.EPISODE_ID: "ep-1",
                sc.TIMESTEP_INDEX: index,
                sc.REWARD: reward,
                sc.ACTION: str(index),
                sc.TERMINATED: index == 3,
                sc.TRUNCATED: False,
            },
            scope_name="agenttrace",
        )

    episode = at.SpanRecord(
        trace_id,
        root,
        0,
        sc.EPISODE,
        base,
        base + 100,
        {
            sc.EPISODE_ID: "ep-1",
            sc.EPISODE_STATUS: sc.STATUS_COMPLETED,
            sc.EPISODE_LENGTH: 4,
            sc.EPISODE_RETURN: 10.0,
        },
        scope_name="agenttrace",
    )
    records = [step_record(3, 4.0), episode, step_record(0, 1.0), step_record(2, 3.0)]
    trajectory = at.build_trajectory(records)
    assert trajectory.status == sc.STATUS_INCOMPLETE
    assert trajectory.attributes[sc.EPISODE_STATUS] == sc.STATUS_COMPLETED
    assert trajectory.missing_steps == [1]
    assert [s.index for s in trajectory.steps] == [0, 2, 3]
    assert trajectory.rewards == [1.0, 3.0, 4.0]
    assert trajectory.length == 4
    assert trajectory.return_ == 10.0  # the in-process return, not the sum of what arrived


def test_a_long_truncated_episode_keeps_its_status_when_rebuilt_in_stretches(tmp_path):
    runtime = at.configure(
        out=str(tmp_path),
        run_name="limit",
        sinks=["jsonl"],
        spans=["file"],
        max_episode_bytes=10_000,
    )
    env = cartpole()
    with at.episode(env=env) as ep:
        flags = run_steps(env, balance, max_steps=60)
    result = read_run(runtime)
    (trajectory,) = result.live
    assert trajectory.episode_id == ep.id
    assert trajectory.status == sc.STATUS_TRUNCATED
    assert len(flags) == 60 and not any(flags[-1])
    assert [s.index for s in trajectory.steps] == list(range(60))
    assert result.offline == result.live


def test_a_reset_error_the_runner_catches_still_makes_the_episode_errored(pipeline):
    """The reference Runner returns an empty trajectory with error_info when reset fails."""

    @at.env_reset
    def reset(task: str):
        raise ValueError(f"cannot parse task {task!r}")

    @at.episode
    def play_episode(task: str) -> dict:
        try:
            reset(task)
        except ValueError as exc:
            return {"timesteps": [], "error_info": str(exc)}
        return {"timesteps": []}

    assert play_episode("1 +* 2") == {"timesteps": [], "error_info": "cannot parse task '1 +* 2'"}
    result = read_run(pipeline)
    for trajectory in (result.live[0], result.offline[0]):
        assert trajectory.status == sc.STATUS_ERRORED
        assert trajectory.error.type == "ValueError"
        assert trajectory.error.message == "cannot parse task '1 +* 2'"
        assert trajectory.length == 0


async def test_an_agent_cancelled_before_its_env_step_still_counts_in_the_length(pipeline):
    started = asyncio.Event()

    @at.agent_act
    async def act(observation: int) -> int:
        if observation == 2:
            started.set()
            await asyncio.sleep(3600)
        return observation + 1

    @at.episode
    async def play() -> None:
        observation = 0
        for _ in range(5):
            action = await act(observation)
            with at.env_step() as step:
                observation = step.record_result((action, 1.0, False))[0]

    task = asyncio.create_task(play())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = read_run(pipeline)
    for trajectory in (result.live[0], result.offline[0]):
        assert trajectory.status == sc.STATUS_CANCELLED
        assert trajectory.length == len(trajectory.steps) == 3
        assert trajectory.missing_steps == []


@pytest.mark.parametrize("role", ["env.step", "agent.act", "llm"])
def test_a_step_error_the_runner_catches_makes_the_episode_errored_too(pipeline, role):
    """One rule with the reset's: the runner catches the exception of its third step and
    returns the two steps before it with error_info; the episode errored with that exception,
    live and offline, and the raising step keeps what it recorded (no outcome)."""

    def failing_call() -> None:
        if role == "env.step":
            scope = at.env_step()
        elif role == "agent.act":
            scope = at.agent_act()
        else:
            scope = at.llm_call(model="m")
        with scope:
            raise ConnectionError(f"the {role} server went away")

    @at.episode
    def play_episode() -> dict:
        timesteps = []
        try:
            for t in range(5):
                if t == 2:
                    failing_call()
                with at.env_step() as step:
                    step.record(action=t, reward=1.0)
                timesteps.append(t)
        except ConnectionError as exc:
            return {"timesteps": timesteps, "error_info": str(exc)}
        return {"timesteps": timesteps}

    returned = play_episode()
    assert returned == {"timesteps": [0, 1], "error_info": f"the {role} server went away"}
    result = read_run(pipeline)
    for trajectory in (result.live[0], result.offline[0]):
        assert trajectory.status == sc.STATUS_ERRORED
        assert trajectory.error.type == "ConnectionError"
        assert trajectory.error.message == f"the {role} server went away"
        assert [s.reward for s in trajectory.steps[:2]] == [1.0, 1.0]
        assert trajectory.return_ == 2.0


def test_an_error_of_the_runners_own_code_is_not_a_step_error(pipeline) -> None:
    """Only the roles that talk to the environment or the model count: an exception the
    runner's own code raises through a timestep (and catches outside it) changes nothing."""

    @at.episode
    def play_episode() -> None:
        for t in range(2):
            try:
                with at.timestep():
                    with at.env_step() as step:
                        step.record(action=t, reward=1.0, terminated=t == 1)
                    if t == 0:
                        raise KeyError("a cache miss after the step")
            except KeyError:
                pass

    play_episode()
    (trajectory,) = read_run(pipeline).live
    assert trajectory.status == sc.STATUS_COMPLETED and trajectory.error is None
    assert [s.reward for s in trajectory.steps] == [1.0, 1.0]
