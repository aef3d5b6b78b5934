"""Episode fields known only later (issue 21, item 2): read from the episode function's return
value (``episode[episode_id=return.episode_id, error=return.error_info]``) or from another
call made inside the episode (``Env.get_episode_id=episode.fields[episode_id=return]``).

The runner below is the Ray runner's shape: ``play_episode(task)`` learns the episode's id
from ``self.env.get_episode_id()`` only after the loop and returns
``Trajectory(timesteps, reset_kwargs, error_info, episode_id)``. It is plain code; the targets
name it by this module's import name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import read_run

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument.auto import AgentTraceInstrumentor
from agenttrace.instrument.targets import Target, TargetError, parse_target
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.stream import assemble

HERE = __name__  # the module the targets name (pytest imports it under this name)


# --- the user's code: a runner, its environment, its record ---------------------------------


class StepFailed(RuntimeError):
    pass


@dataclass
class Task:
    task_id: str
    reset_kwargs: dict[str, Any]
    steps: int = 3


@dataclass
class ErrorInfo:
    type: str
    message: str


@dataclass
class Trajectory:
    timesteps: list[dict[str, Any]] = field(default_factory=list)
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    error_info: Any = None
    episode_id: str = ""


class Env:
    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.fail_at: int | None = None
        self.failure: Exception | None = None  # what step(fail_at) raises

    def reset(self, **kwargs: Any) -> int:
        self.episode_id = f"env-{uuid.uuid4().hex[:12]}"
        return 0

    def step(self, action: int) -> dict[str, Any]:
        if action == self.fail_at:
            raise self.failure or StepFailed(f"step {action} failed")
        return {"observation": action + 1, "reward": 1.0, "terminated": False}

    def get_episode_id(self) -> str | None:
        return self.episode_id

    def rollout_ids(self) -> Iterator[int]:  # a generator that returns the id at its end
        yield 1
        yield 2
        return self.episode_id

    async def aget_episode_id(self) -> str | None:
        await asyncio.sleep(0)
        return self.episode_id

    def report(self, outcome: dict[str, Any]) -> bool:
        return True


class Runner:
    def __init__(self) -> None:
        self.env = Env()
        self.error_info: Any = None  # what the next episode reports as its error
        self.raise_after: Exception | None = None

    def play_episode(self, task: Task) -> Trajectory:
        self.env.reset(**task.reset_kwargs)
        timesteps = []
        error = self.error_info
        try:
            for action in range(task.steps):
                timesteps.append(self.env.step(action))
        except StepFailed as exc:
            error = ErrorInfo(f"{type(exc).__module__}.{type(exc).__qualname__}", "runner's text")
        episode_id = self.env.get_episode_id() or ""
        if self.raise_after is not None:
            raise self.raise_after
        return Trajectory(timesteps, dict(task.reset_kwargs), error, episode_id)

    async def play_async(self, task: Task) -> Trajectory:
        self.env.reset(**task.reset_kwargs)
        timesteps = [self.env.step(action) for action in range(task.steps)]
        episode_id = await self.env.aget_episode_id() or ""
        await asyncio.sleep(0)
        return Trajectory(timesteps, dict(task.reset_kwargs), self.error_info, episode_id)


TASK = Task("sum-1", {"seed": 7, "api_key": "sk-123", "task": "1 + 2"})
STEP = f"{HERE}:Env.step=env.step[extractor=mapping]"


def episode_target(**arguments: str) -> dict[str, Any]:
    return {
        "path": f"{HERE}:Runner.play_episode",
        "role": "episode",
        "arguments": {"task_id": "task.task_id", **arguments},
    }


@pytest.fixture
def instrument() -> Iterator[Any]:
    instrumentor = AgentTraceInstrumentor()

    def install(*targets: Any) -> None:
        instrumentor.instrument(targets=list(targets))

    yield install
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def episode_spans(runtime: at.AgentTrace) -> list[Any]:
    return [r for r in read_otlp_json(runtime.span_paths) if r.name == sc.EPISODE]


def rebuilt(runtime: at.AgentTrace) -> list[at.Trajectory]:
    """The run's trajectories rebuilt offline from its span file."""
    return assemble(read_otlp_json(runtime.span_paths))


# --- the episode's id -----------------------------------------------------------------------


def test_the_episode_id_comes_from_the_return_value(pipeline, instrument) -> None:
    instrument(episode_target(episode_id="return.episode_id"), STEP)
    runner = Runner()
    first, second = runner.play_episode(TASK), runner.play_episode(Task("sum-2", {}))
    assert first.episode_id.startswith("env-") and first.episode_id != second.episode_id
    result = read_run(pipeline)
    live = sorted(result.live, key=lambda t: t.start_time)
    assert [t.episode_id for t in live] == [first.episode_id, second.episode_id]
    assert [t.task_id for t in live] == ["sum-1", "sum-2"]
    assert [len(t.steps) for t in live] == [3, 3] and live[0].return_ == 3.0
    assert live[0].status == "truncated" and live[0].error is None
    # rl.episode.id stays the internal key every span of the episode carries
    span = next(s for s in episode_spans(pipeline) if s.attributes[sc.TASK_ID] == "sum-1")
    internal = span.attributes[sc.EPISODE_ID]
    assert internal != first.episode_id
    assert span.attributes[sc.EPISODE_EXTERNAL_ID] == first.episode_id
    steps = [r for r in read_otlp_json(pipeline.span_paths) if r.name == sc.ENV_STEP]
    assert sum(r.attributes[sc.EPISODE_ID] == internal for r in steps) == 3
    # the offline rebuild from the span file is the live trajectory
    offline = sorted(rebuilt(pipeline), key=lambda t: t.start_time)
    assert offline == live


def test_an_episode_fields_target_sets_the_id_of_the_episode_it_is_called_in(
    pipeline, instrument
) -> None:
    instrument(
        episode_target(),
        STEP,
        {"path": f"{HERE}:Env.get_episode_id", "role": "episode.fields",
         "arguments": {"episode_id": "return"}},
    )  # fmt: skip
    runner = Runner()
    played = [runner.play_episode(TASK) for _ in range(2)]
    with at.episode(task_id="by-hand"):  # an episode of the tracing API is one too
        runner.env.reset()
        by_hand = runner.env.get_episode_id()
    result = read_run(pipeline)
    live = sorted(result.live, key=lambda t: t.start_time)
    assert [t.episode_id for t in live] == [p.episode_id for p in played] + [by_hand]
    assert [t.task_id for t in live] == ["sum-1", "sum-1", "by-hand"]
    assert sorted(rebuilt(pipeline), key=lambda t: t.start_time) == live


def test_episode_fields_from_arguments_and_the_receiver(pipeline, instrument) -> None:
    instrument(
        episode_target(),
        {"path": f"{HERE}:Env.report", "role": "episode.fields",
         "arguments": {"episode_id": "self.episode_id", "task_id": "outcome.task",
                       "error": "outcome.error", "attributes.verdict": "outcome",
                       "attributes.accepted": "return"}},
    )  # fmt: skip
    runner = Runner()
    with at.episode():
        runner.env.reset()
        assert runner.env.report({"task": "t-9", "error": "judge said no", "n": 1}) is True
    (trajectory,) = read_run(pipeline).live
    assert trajectory.episode_id == runner.env.episode_id
    assert trajectory.task_id == "t-9"
    assert trajectory.status == "errored"
    assert (trajectory.error.type, trajectory.error.message) == (None, "judge said no")
    assert json.loads(trajectory.attributes["verdict"]) == {
        "task": "t-9",
        "error": "judge said no",
        "n": 1,
    }
    assert trajectory.attributes["accepted"] is True


def test_a_generator_field_call_sets_its_return_when_exhausted(pipeline, instrument) -> None:
    instrument(f"{HERE}:Env.rollout_ids=episode.fields[episode_id=return]")
    env = Env()
    with at.episode():
        env.reset()
        assert list(env.rollout_ids()) == [1, 2]
    (trajectory,) = read_run(pipeline).live
    assert trajectory.episode_id == env.episode_id


# --- the episode's error ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_info", "expected"),
    [
        (ErrorInfo("ray_runner.env.EnvResetError", "cannot parse '1 +* 2'"),
         ("ray_runner.env.EnvResetError", "cannot parse '1 +* 2'")),
        ({"type": "TimeoutError", "message": "no answer in 30 s"},
         ("TimeoutError", "no answer in 30 s")),
        (StepFailed("the sandbox died"), (f"{HERE}.StepFailed", "the sandbox died")),
        (ValueError("bad task"), ("ValueError", "bad task")),
        ("the env server went away", (None, "the env server went away")),
    ],
)  # fmt: skip
def test_an_error_the_runner_returns_ends_the_episode_errored(
    pipeline, instrument, error_info, expected
) -> None:
    instrument(episode_target(error="return.error_info"), STEP)
    runner = Runner()
    runner.error_info = error_info
    returned = runner.play_episode(TASK)
    assert returned.error_info is error_info  # (the result is the runner's own, unchanged)
    result = read_run(pipeline)
    (trajectory,) = result.live
    assert trajectory.status == "errored"
    assert (trajectory.error.type, trajectory.error.message) == expected
    assert len(trajectory.steps) == 3  # the steps played are kept
    (span,) = episode_spans(pipeline)
    assert span.status_code == "ERROR" and span.status_message == expected[1]
    assert [e.name for e in span.events] == ["exception"]
    assert result.offline == result.live


@pytest.mark.parametrize("error_info", [None, "", {}])
def test_no_error_returned_is_no_error(pipeline, instrument, error_info) -> None:
    instrument(episode_target(error="return.error_info"), STEP)
    runner = Runner()
    runner.error_info = error_info
    runner.play_episode(TASK)
    (trajectory,) = read_run(pipeline).live
    assert (trajectory.status, trajectory.error) == ("truncated", None)


def test_an_exception_the_episode_already_errored_with_is_kept(pipeline, instrument) -> None:
    """env.step raised, the runner caught it and returned its own error_info: the episode
    errored with the exception, not with the runner's text."""
    instrument(episode_target(error="return.error_info"), STEP)
    runner = Runner()
    runner.env.fail_at = 1
    returned = runner.play_episode(TASK)
    assert returned.error_info.message == "runner's text"
    (trajectory,) = read_run(pipeline).live
    assert trajectory.status == "errored"
    assert trajectory.error.type == f"{HERE}.StepFailed"
    assert trajectory.error.message == "step 1 failed"


# --- attributes through the content policy ------------------------------------------------


def test_attributes_from_the_return_value_go_through_the_content_policy(
    pipeline, instrument, caplog
) -> None:
    instrument(
        episode_target(**{
            "attributes.reset_kwargs": "return.reset_kwargs",
            "attributes.steps": "return.timesteps",
            "attributes.leak": "return.reset_kwargs.api_key",
            "attributes.api_key": "return.episode_id",
        }),
        STEP,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        Runner().play_episode(TASK)
    (trajectory,) = read_run(pipeline).live
    # the same as attributes.reset_kwargs=ARG (tests/test_argument_attributes.py)
    assert json.loads(trajectory.attributes["reset_kwargs"]) == {
        "seed": 7,
        "api_key": "[REDACTED]",
        "task": "1 + 2",
    }
    assert [s["observation"] for s in json.loads(trajectory.attributes["steps"])] == [1, 2, 3]
    assert "leak" not in trajectory.attributes  # a path through a secret's name: never read
    assert "api_key" not in trajectory.attributes  # an attribute named like a secret
    assert "sk-123" not in json.dumps(trajectory.attributes)
    assert any("names a secret" in r.getMessage() for r in caplog.records)


def test_with_content_off_returned_dicts_are_withheld(tmp_path, instrument) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="off", sinks=["jsonl"], content="none")
    instrument(episode_target(**{"attributes.reset_kwargs": "return.reset_kwargs",
                                 "attributes.seed": "return.reset_kwargs.seed"}))  # fmt: skip
    Runner().play_episode(TASK)
    (trajectory,) = read_run(runtime).live
    assert "reset_kwargs" not in trajectory.attributes
    assert trajectory.attributes["seed"] == 7  # (a number is no content)


def test_an_overlong_returned_id_is_left_out(pipeline, instrument) -> None:
    instrument(episode_target(episode_id="return.episode_id"))
    runner = Runner()
    runner.env.reset = lambda **kwargs: setattr(runner.env, "episode_id", "x" * 70_000)
    runner.play_episode(TASK)
    (trajectory,) = read_run(pipeline).live
    (span,) = episode_spans(pipeline)
    assert trajectory.episode_id == span.attributes[sc.EPISODE_ID]  # the internal one


# --- exceptions, no episode, async ----------------------------------------------------------


def test_return_options_are_not_applied_when_the_function_raises(pipeline, instrument) -> None:
    instrument(
        episode_target(episode_id="return.episode_id", error="return.error_info",
                       **{"attributes.reset_kwargs": "return.reset_kwargs"}),
        STEP,
    )  # fmt: skip
    runner = Runner()
    boom = KeyError("lost the sandbox")
    runner.raise_after = boom
    with pytest.raises(KeyError) as raised:
        runner.play_episode(TASK)
    assert raised.value is boom
    (trajectory,) = read_run(pipeline).live
    (span,) = episode_spans(pipeline)
    assert trajectory.episode_id == span.attributes[sc.EPISODE_ID] != runner.env.episode_id
    assert sc.EPISODE_EXTERNAL_ID not in span.attributes
    assert "reset_kwargs" not in trajectory.attributes
    assert trajectory.status == "errored"
    assert (trajectory.error.type, trajectory.error.message) == ("KeyError", "'lost the sandbox'")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    @property
    def broken(self) -> Any:
        raise OSError("a property that fails")


def test_a_failure_reading_a_field_never_reaches_the_program(pipeline, instrument, caplog) -> None:
    """An id that cannot be made text and a property that raises: agenttrace logs its own
    failure once and goes on; the call's result is the runner's, the episode is recorded."""
    instrument(f"{HERE}:Env.get_episode_id=episode.fields[episode_id=return,task_id=return.broken]")
    env = Env()
    odd = Unprintable()
    env.reset = lambda: setattr(env, "episode_id", odd)  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="agenttrace"), at.episode(task_id="kept"):
        env.reset()
        assert env.get_episode_id() is odd
    (trajectory,) = read_run(pipeline).live
    assert trajectory.task_id == "kept" and trajectory.status == "completed"
    (span,) = episode_spans(pipeline)
    assert trajectory.episode_id == span.attributes[sc.EPISODE_ID]
    assert any("internal error" in r.getMessage() for r in caplog.records)


def test_episode_fields_outside_an_episode_do_nothing(pipeline, instrument, caplog) -> None:
    instrument(
        f"{HERE}:Env.get_episode_id=episode.fields[episode_id=return]",
        f"{HERE}:Env.step=episode.fields[error=return]",
        f"{HERE}:Env.aget_episode_id=episode.fields[episode_id=return]",
    )
    env = Env()
    env.episode_id = "outside"
    with caplog.at_level(logging.DEBUG, logger="agenttrace"):
        assert env.get_episode_id() == "outside"
        assert asyncio.run(env.aget_episode_id()) == "outside"
        env.fail_at = 0
        with pytest.raises(StepFailed, match="step 0 failed"):
            env.step(0)
    result = read_run(pipeline)
    assert result.live == [] and result.offline == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_field_call_that_raises_sets_nothing_and_its_exception_passes(
    pipeline, instrument
) -> None:
    instrument(f"{HERE}:Env.step=episode.fields[episode_id=action]")
    env = Env()
    env.fail_at, env.failure = 1, StepFailed("mine")
    with at.episode() as episode:
        assert env.step(0) == {"observation": 1, "reward": 1.0, "terminated": False}
        with pytest.raises(StepFailed) as raised:
            env.step(1)
        assert raised.value is env.failure
    (trajectory,) = read_run(pipeline).live
    assert trajectory.episode_id == "0" != episode.id  # the call that returned, not the other
    assert trajectory.status == "completed" and trajectory.error is None


def test_async_episode_and_async_field_call(pipeline, instrument) -> None:
    instrument(
        {"path": f"{HERE}:Runner.play_async", "role": "episode",
         "arguments": {"task_id": "task.task_id", "error": "return.error_info"}},
        {"path": f"{HERE}:Env.aget_episode_id", "role": "episode.fields",
         "arguments": {"episode_id": "return"}},
        STEP,
    )  # fmt: skip
    runners = [Runner(), Runner()]
    for runner in runners:
        runner.error_info = {"type": "Timeout", "message": "slow"}

    async def main() -> list[Trajectory]:
        return list(await asyncio.gather(*(runner.play_async(TASK) for runner in runners)))

    played = asyncio.run(main())
    assert all(isinstance(p, Trajectory) for p in played)
    result = read_run(pipeline)
    assert len({p.episode_id for p in played}) == 2
    assert sorted(t.episode_id for t in result.live) == sorted(p.episode_id for p in played)
    assert all(t.status == "errored" and t.error.message == "slow" for t in result.live)
    assert all(t.error.type == "Timeout" and t.task_id == "sum-1" for t in result.live)
    assert sorted(result.offline, key=str) == sorted(result.live, key=str)


def test_a_return_option_on_an_async_episode_reads_the_awaited_value(pipeline, instrument) -> None:
    instrument(
        {"path": f"{HERE}:Runner.play_async", "role": "episode",
         "arguments": {"episode_id": "return.episode_id"}},
    )  # fmt: skip
    runner = Runner()
    played = asyncio.run(runner.play_async(TASK))
    (trajectory,) = read_run(pipeline).live
    assert trajectory.episode_id == played.episode_id


# --- parsing ---------------------------------------------------------------------------------


def test_return_paths_parse_on_episode_and_episode_fields() -> None:
    target = parse_target(
        "pkg.runner:Runner.play_episode=episode[task_id=task.task_id,"
        "episode_id=return.episode_id,error=return.error_info,attributes.kw=return]"
    )
    assert target.arguments == {
        "task_id": "task.task_id",
        "episode_id": "return.episode_id",
        "error": "return.error_info",
        "attributes.kw": "return",
    }
    assert str(target).startswith("pkg.runner:Runner.play_episode=episode[task_id=task.task_id,")
    fields = parse_target("pkg.env:Env.get_episode_id=episode.fields[episode_id=return]")
    assert (fields.role, fields.arguments) == ("episode.fields", {"episode_id": "return"})
    Target("m:f", "episode.fields", arguments={"error": "exc", "attributes.x": "self.x"})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("m:f=env.step[action=return.x]", "role env.step does not read the return value"),
        ("m:f=llm[model=return]", "only episode and episode.fields targets take return paths"),
        ("m:f=episode[policy_version=return.v]", "policy_version is read when the call starts"),
        ("m:f=episode[group_id=return]", "before there is a return value"),
        ("m:f=episode[error=err]", "an episode reads its error from the return value"),
        ("m:f=env.step[error=return.e]", "only episode and episode.fields targets take error"),
        ("m:f=tool[error=exc]", "error=exc: only episode and episode.fields"),
        ("m:f=tool[result=out.value]", "a tool's result is read from its return value"),
        ("m:f=tool[name=return.name]", "role tool does not read the return value"),
        ("m:f=episode.fields", "an episode.fields target sets the fields it names"),
        ("m:f=episode.fields[seed=return]", "role episode.fields has no option 'seed'"),
        ("m:f=episode.fields[extractor=gymnasium]", "role episode.fields takes no extractor"),
        ("m:f=episode[episode_id=return.]", "must name an argument"),
    ],
)
def test_parse_errors_name_the_target_and_the_option(text, says) -> None:
    with pytest.raises(TargetError, match=r"target m:f") as raised:
        parse_target(text)
    assert says in str(raised.value)


def gen_episode(task: Task) -> Iterator[int]:
    yield 1
    return task.task_id


async def agen_fields() -> Any:
    yield 1


def test_resolve_errors_for_what_has_no_return_value(instrument) -> None:
    with pytest.raises(TargetError, match="has no return value agenttrace reads") as raised:
        instrument(f"{HERE}:gen_episode=episode[episode_id=return]")
    assert f"{HERE}:gen_episode" in str(raised.value)
    with pytest.raises(TargetError, match="is an async generator, which returns no value"):
        instrument(f"{HERE}:agen_fields=episode.fields[episode_id=return]")
    with pytest.raises(TargetError, match="the function has no argument 'run'"):
        instrument(f"{HERE}:Env.get_episode_id=episode.fields[episode_id=run.id]")
