"""Unit tests of the tracing API against the real OpenTelemetry SDK.

Spans are captured with an ``InMemorySpanExporter`` on a TracerProvider handed to
``at.configure(tracer_provider=...)``; trajectories are read back from the run folder.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import traceback
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import RunResult, read_run
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.trajectory.codec import REDACTED

DETACH_ERROR = "Failed to detach context"


# --- fixtures and helpers -----------------------------------------------------------------------


@dataclass
class Mem:
    runtime: at.AgentTrace
    exporter: InMemorySpanExporter
    provider: TracerProvider

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        spans = list(self.exporter.get_finished_spans())
        return [s for s in spans if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, f"expected one {name!r} span, got {[s.name for s in found]}"
        return found[0]

    def read(self) -> RunResult:
        return read_run(self.runtime)


def make_mem(tmp_path: Path, **options: Any) -> Mem:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(
        tracer_provider=provider, out=str(tmp_path), sinks=["jsonl"], run_name="api", **options
    )
    return Mem(runtime, exporter, provider)


@pytest.fixture
def mem(tmp_path) -> Mem:
    return make_mem(tmp_path)


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    for candidate in spans:
        if candidate.context.span_id == span.parent.span_id:
            return candidate
    raise AssertionError(f"parent of {span.name} not among the exported spans")


def all_attribute_text(spans: list[ReadableSpan]) -> str:
    """Every attribute key and value of every span and span event, as one text."""
    parts = []
    for span in spans:
        parts.append(span.name)
        for key, value in (span.attributes or {}).items():
            parts.append(f"{key}={value!r}")
        for event in span.events:
            for key, value in (event.attributes or {}).items():
                parts.append(f"{key}={value!r}")
        if span.status.description:
            parts.append(span.status.description)
    return "\n".join(parts)


def check_episode_tree(mem: Mem, n_steps: int) -> None:
    """episode > timestep > (agent.act, env.step), ids and indices stamped."""
    spans = mem.spans()
    (episode,) = mem.spans(sc.EPISODE)
    assert episode.parent is None
    episode_id = episode.attributes[sc.EPISODE_ID]
    for span in spans:
        assert span.context.trace_id == episode.context.trace_id, span.name
        assert span.attributes[sc.EPISODE_ID] == episode_id, span.name
    timesteps = sorted(mem.spans(sc.TIMESTEP), key=lambda s: s.start_time)
    assert [s.attributes[sc.TIMESTEP_INDEX] for s in timesteps] == list(range(n_steps))
    for ts in timesteps:
        assert parent_of(ts, spans) is episode
    for role in (sc.AGENT_ACT, sc.ENV_STEP):
        children = sorted(mem.spans(role), key=lambda s: s.start_time)
        assert len(children) == n_steps, role
        for index, child in enumerate(children):
            parent = parent_of(child, spans)
            assert parent is timesteps[index], f"{role} {index} under {parent.name}"
            assert child.attributes[sc.TIMESTEP_INDEX] == index
    assert all(s.end_time is not None for s in spans)


def check_trajectory_of_tree(result: RunResult, actions: list, rewards: list) -> None:
    (live,) = result.live
    (offline,) = result.offline
    assert live == offline
    assert [s.index for s in live.steps] == list(range(len(actions)))
    assert [s.action for s in live.steps] == actions
    assert live.rewards == rewards


# --- decorators: spans and parents in every function form ---------------------------------------


@at.agent_act
def sync_act(obs: int) -> int:
    assert trace.get_current_span().name == sc.AGENT_ACT
    return obs + 1


@at.env_step
def sync_step(action: int) -> tuple:
    assert trace.get_current_span().name == sc.ENV_STEP
    return action * 10, float(action), action == 2, False, {}


@at.timestep
def sync_timestep(obs: int) -> tuple:
    assert trace.get_current_span().name == sc.TIMESTEP
    return sync_step(sync_act(obs))


@at.episode
def sync_episode(task_id: str | None = None) -> str:
    assert trace.get_current_span().name == sc.EPISODE
    obs = 0
    for _ in range(2):
        obs, *_ = sync_timestep(obs)
    return at.current_episode_id()


def test_sync_decorators_make_nested_spans(mem):
    outer = trace.get_current_span()
    episode_id = sync_episode(task_id="sync")
    assert trace.get_current_span() is outer
    check_episode_tree(mem, 2)
    assert mem.one(sc.EPISODE).attributes[sc.TASK_ID] == "sync"
    assert mem.one(sc.EPISODE).attributes[sc.EPISODE_ID] == episode_id
    # obs 0 -> action 1 -> obs 10 -> action 11
    check_trajectory_of_tree(mem.read(), [1, 11], [1.0, 11.0])


@at.agent_act
async def async_act(obs: int) -> int:
    await asyncio.sleep(0)
    assert trace.get_current_span().name == sc.AGENT_ACT
    return obs + 1


@at.env_step
async def async_step(action: int) -> tuple:
    await asyncio.sleep(0)
    assert trace.get_current_span().name == sc.ENV_STEP
    return action * 10, float(action), action == 2, False, {}


@at.timestep
async def async_timestep(obs: int) -> tuple:
    return await async_step(await async_act(obs))


@at.episode
async def async_episode(task_id: str | None = None) -> str:
    obs = 0
    for _ in range(2):
        obs, *_ = await async_timestep(obs)
        await asyncio.sleep(0)
    return at.current_episode_id()


async def test_async_decorators_make_nested_spans(mem):
    episode_ids = await asyncio.gather(async_episode(task_id="a"), async_episode(task_id="b"))
    assert len(set(episode_ids)) == 2
    assert at.current_episode_id() is None
    spans = mem.spans()
    for episode_id in episode_ids:
        own = [s for s in spans if s.attributes[sc.EPISODE_ID] == episode_id]
        assert sorted(s.name for s in own) == sorted(
            [sc.EPISODE] + [sc.TIMESTEP, sc.AGENT_ACT, sc.ENV_STEP] * 2
        )
        (episode,) = [s for s in own if s.name == sc.EPISODE]
        for span in own:
            if span.name == sc.TIMESTEP:
                assert parent_of(span, spans) is episode
            elif span.name in (sc.AGENT_ACT, sc.ENV_STEP):
                parent = parent_of(span, spans)
                assert parent.name == sc.TIMESTEP
                assert parent.attributes[sc.TIMESTEP_INDEX] == span.attributes[sc.TIMESTEP_INDEX]
    result = mem.read()
    assert len(result.live) == 2
    for trajectory in result.live:
        assert [s.action for s in trajectory.steps] == [1, 11]


@at.timestep
def streamed_timestep(obs: int):
    """A step that streams its 'tokens' to the caller, then acts."""
    for token in ("a", "b"):
        assert trace.get_current_span().name == sc.TIMESTEP
        yield token
    sync_step(sync_act(obs))
    return "done"


@at.episode
def generator_episode():
    obs = 0
    for _ in range(2):
        assert trace.get_current_span().name == sc.EPISODE
        result = yield from streamed_timestep(obs)
        assert result == "done"  # the generator's return value passes through
        yield "step"
        obs = obs * 10 + 10


def test_generator_decorators_make_nested_spans(mem):
    tracer = mem.provider.get_tracer("caller")
    with tracer.start_as_current_span("caller") as caller:
        items = []
        for item in generator_episode():
            assert trace.get_current_span() is caller  # never the generator's span
            assert at.current_episode_id() is None
            items.append(item)
    assert items == ["a", "b", "step", "a", "b", "step"]
    spans = [s for s in mem.spans() if s.name != "caller"]
    (episode,) = mem.spans(sc.EPISODE)
    assert parent_of(episode, mem.spans()).name == "caller"
    timesteps = sorted(mem.spans(sc.TIMESTEP), key=lambda s: s.start_time)
    assert [parent_of(t, spans) for t in timesteps] == [episode, episode]
    for role in (sc.AGENT_ACT, sc.ENV_STEP):
        children = sorted(mem.spans(role), key=lambda s: s.start_time)
        assert [parent_of(c, spans) for c in children] == timesteps
    assert {s.attributes[sc.EPISODE_ID] for s in spans} == {episode.attributes[sc.EPISODE_ID]}
    check_trajectory_of_tree(mem.read(), [1, 11], [1.0, 11.0])


@at.timestep
async def streamed_async_timestep(obs: int):
    for token in ("a", "b"):
        await asyncio.sleep(0)
        assert trace.get_current_span().name == sc.TIMESTEP
        yield token
    await async_step(await async_act(obs))


@at.episode
async def async_generator_episode():
    obs = 0
    for _ in range(2):
        async for token in streamed_async_timestep(obs):
            assert trace.get_current_span().name == sc.EPISODE
            yield token
        obs = obs * 10 + 10


async def test_async_generator_decorators_make_nested_spans(mem):
    tracer = mem.provider.get_tracer("caller")
    with tracer.start_as_current_span("caller") as caller:
        items = []
        async for item in async_generator_episode():
            assert trace.get_current_span() is caller
            items.append(item)
            await asyncio.sleep(0)
    assert items == ["a", "b", "a", "b"]
    spans = [s for s in mem.spans() if s.name != "caller"]
    (episode,) = mem.spans(sc.EPISODE)
    assert parent_of(episode, mem.spans()) is mem.one("caller")
    timesteps = sorted(mem.spans(sc.TIMESTEP), key=lambda s: s.start_time)
    assert [parent_of(t, spans) for t in timesteps] == [episode, episode]
    for role in (sc.AGENT_ACT, sc.ENV_STEP):
        children = sorted(mem.spans(role), key=lambda s: s.start_time)
        assert [parent_of(c, spans) for c in children] == timesteps
    check_trajectory_of_tree(mem.read(), [1, 11], [1.0, 11.0])


def test_bare_and_configured_decorator_forms(mem):
    @at.env_step(extractor="dm_env")
    def dm_step(action):
        return DmTimeStep(StepType.LAST, 2.0, 0.0, "end")

    @at.timestep()
    def ts():
        return dm_step(7)

    with at.episode() as ep:
        ts()
    (trajectory,) = mem.read().live
    assert trajectory.episode_id == ep.id
    assert trajectory.steps[0].action == 7
    assert trajectory.steps[0].terminated is True
    assert trajectory.status == sc.STATUS_COMPLETED


# --- generators closed early -----------------------------------------------------------------


@at.episode
def endless_episode():
    i = 0
    while True:
        with at.timestep() as step:
            step.record(action=i, reward=1.0)
        yield i
        i += 1


@pytest.mark.parametrize("how", ["break", "close", "del"])
def test_generator_closed_early_ends_its_span_and_leaves_the_callers(mem, caplog, how):
    caplog.set_level(logging.DEBUG)
    tracer = mem.provider.get_tracer("caller")
    with tracer.start_as_current_span("caller") as caller:
        if how == "break":
            for i in endless_episode():
                if i == 2:
                    break
        else:
            gen = endless_episode()
            assert [next(gen), next(gen), next(gen)] == [0, 1, 2]
            if how == "close":
                gen.close()
            else:
                del gen
                gc.collect()
        assert trace.get_current_span() is caller
        assert at.current_episode_id() is None
        (episode,) = mem.spans(sc.EPISODE)  # ended (exported) before the caller ends
        with tracer.start_as_current_span("after") as after:
            pass
    assert parent_of(after, mem.spans()).context.span_id == caller.get_span_context().span_id
    assert episode.status.status_code is not StatusCode.ERROR
    assert DETACH_ERROR not in caplog.text
    (trajectory,) = mem.read().live
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    assert trajectory.status == sc.STATUS_TRUNCATED


@at.episode
def episode_with_cleanup():
    try:
        for i in range(10):
            with at.timestep() as step:
                step.record(action=i, reward=1.0)
            yield i
    finally:
        # Cleanup belongs to the episode: e.g. a final LLM summary call.
        with at.llm_call(model="summarizer"):
            pass


def test_generator_cleanup_after_early_close_runs_inside_its_span(mem, caplog):
    caplog.set_level(logging.DEBUG)
    for i in episode_with_cleanup():
        if i == 1:
            break
    (episode,) = mem.spans(sc.EPISODE)
    (cleanup,) = mem.spans("chat summarizer")
    assert cleanup.context.trace_id == episode.context.trace_id
    assert parent_of(cleanup, mem.spans()) is episode
    assert cleanup.attributes.get(sc.EPISODE_ID) == episode.attributes[sc.EPISODE_ID]
    assert cleanup.end_time <= episode.end_time
    assert DETACH_ERROR not in caplog.text


@at.episode
async def async_episode_with_cleanup():
    try:
        for i in range(10):
            with at.timestep() as step:
                step.record(action=i, reward=1.0)
            yield i
    finally:
        with at.llm_call(model="summarizer"):
            await asyncio.sleep(0)


async def test_async_generator_cleanup_after_aclose_runs_inside_its_span(mem, caplog):
    caplog.set_level(logging.DEBUG)
    stream = async_episode_with_cleanup()
    async for i in stream:
        if i == 1:
            break
    await stream.aclose()
    (episode,) = mem.spans(sc.EPISODE)
    (cleanup,) = mem.spans("chat summarizer")
    assert cleanup.context.trace_id == episode.context.trace_id
    assert parent_of(cleanup, mem.spans()) is episode
    assert cleanup.attributes.get(sc.EPISODE_ID) == episode.attributes[sc.EPISODE_ID]
    assert DETACH_ERROR not in caplog.text


@at.episode
async def endless_async_episode():
    i = 0
    while True:
        with at.timestep() as step:
            step.record(action=i, reward=1.0)
        await asyncio.sleep(0)
        yield i
        i += 1


async def test_async_generator_closed_from_another_task(mem, caplog):
    caplog.set_level(logging.DEBUG)
    tracer = mem.provider.get_tracer("caller")
    stream = endless_async_episode()

    async def consumer() -> None:
        with tracer.start_as_current_span("consumer") as own:
            for expected in range(3):
                assert await stream.__anext__() == expected
                assert trace.get_current_span() is own
            await asyncio.sleep(0)
            assert trace.get_current_span() is own

    async def closer() -> None:
        with tracer.start_as_current_span("closer") as own:
            await stream.aclose()
            assert trace.get_current_span() is own
            assert at.current_episode_id() is None

    await asyncio.create_task(consumer())
    await asyncio.create_task(closer())
    assert not trace.get_current_span().get_span_context().is_valid
    (episode,) = mem.spans(sc.EPISODE)
    assert episode.end_time is not None
    assert episode.status.status_code is not StatusCode.ERROR
    assert DETACH_ERROR not in caplog.text
    (trajectory,) = mem.read().live
    assert [s.index for s in trajectory.steps] == [0, 1, 2]


async def test_async_generator_break_in_async_for(mem, caplog):
    caplog.set_level(logging.DEBUG)
    tracer = mem.provider.get_tracer("caller")
    with tracer.start_as_current_span("caller") as caller:
        stream = endless_async_episode()
        async for i in stream:
            if i == 1:
                break
        await stream.aclose()
        assert trace.get_current_span() is caller
    assert mem.one(sc.EPISODE).end_time is not None
    assert DETACH_ERROR not in caplog.text


def test_exception_thrown_into_a_decorated_generator_reaches_it(mem):
    seen = []
    signal = ValueError("skip this one")

    @at.episode
    def resilient():
        for i in range(3):
            try:
                yield i
            except ValueError as exc:
                seen.append(exc)
                assert trace.get_current_span().name == sc.EPISODE
                yield "recovered"

    gen = resilient()
    assert next(gen) == 0
    assert gen.throw(signal) == "recovered"
    assert seen == [signal] and seen[0] is signal
    assert list(gen) == [1, 2]
    assert mem.one(sc.EPISODE).status.status_code is not StatusCode.ERROR

    fatal = KeyError("not handled")
    gen = resilient()
    next(gen)
    with pytest.raises(KeyError) as caught:
        gen.throw(fatal)
    assert caught.value is fatal
    errored = [s for s in mem.spans(sc.EPISODE) if s.status.status_code is StatusCode.ERROR]
    assert len(errored) == 1
    assert errored[0].attributes[sc.EPISODE_STATUS] == sc.STATUS_ERRORED


# --- user exceptions pass through unchanged -------------------------------------------------------


class Boom(Exception):
    pass


ROLES: dict[str, Callable[..., Any]] = {
    "episode": at.episode,
    "env_reset": at.env_reset,
    "timestep": at.timestep,
    "agent_act": at.agent_act,
    "env_step": at.env_step,
    "llm_call": at.llm_call,
}
SPAN_NAME = {
    "episode": sc.EPISODE,
    "env_reset": sc.ENV_RESET,
    "timestep": sc.TIMESTEP,
    "agent_act": sc.AGENT_ACT,
    "env_step": sc.ENV_STEP,
    "llm_call": "chat",
}


def raise_it(exc: BaseException) -> None:
    raise exc


def run_form(form: str, role: Callable[..., Any], exc: Exception) -> None:
    """Raise ``exc`` from inside a span of ``role`` used in the given form."""
    if form == "context-manager":
        with role():
            raise_it(exc)
    elif form == "sync":

        @role
        def f(x):
            raise_it(exc)

        f(1)
    elif form == "async":

        @role
        async def f(x):
            await asyncio.sleep(0)
            raise_it(exc)

        asyncio.run(f(1))
    elif form == "generator":

        @role
        def f(x):
            yield 1
            raise_it(exc)

        list(f(1))
    elif form == "async-generator":

        @role
        async def f(x):
            yield 1
            await asyncio.sleep(0)
            raise_it(exc)

        async def consume():
            return [item async for item in f(1)]

        asyncio.run(consume())
    else:
        raise AssertionError(form)


FORMS = ["context-manager", "sync", "async", "generator", "async-generator"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("role_name", list(ROLES))
def test_user_exceptions_pass_through_unchanged(mem, role_name, form):
    role = ROLES[role_name]
    exc = Boom(f"{role_name} failed in {form}")
    with pytest.raises(Boom) as caught:
        if role_name == "episode":
            run_form(form, role, exc)
        else:
            with at.episode() as ep:
                run_form(form, role, exc)
    assert caught.value is exc
    assert type(caught.value) is Boom
    assert exc.__cause__ is None and exc.__context__ is None
    frames = traceback.extract_tb(exc.__traceback__)
    assert frames[-1].name == "raise_it"
    assert frames[-1].line == "raise exc"
    (span,) = mem.spans(SPAN_NAME[role_name])
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == [sc.EXCEPTION_EVENT]
    (trajectory,) = mem.read().live
    if role_name != "episode":
        assert trajectory.episode_id == ep.id
    assert trajectory.status == sc.STATUS_ERRORED
    assert trajectory.error.message == str(exc)


def test_base_exceptions_pass_through_unchanged(mem):
    class Stop(BaseException):
        pass

    stop = Stop("not an Exception")
    with pytest.raises(Stop) as caught, at.episode(), at.timestep():
        raise stop
    assert caught.value is stop


# --- ids stamped on children --------------------------------------------------------------------


def test_episode_and_step_ids_are_stamped_on_children(mem):
    foreign_tracer = mem.provider.get_tracer("some.other.instrumentation")
    assert at.current_episode_id() is None
    with at.episode() as ep:
        assert at.current_episode_id() == ep.id
        with at.env_reset() as reset:
            assert reset.episode_id == ep.id
        for expected in range(3):
            with at.timestep() as step:
                assert step.index == expected
                assert step.episode_id == ep.id
                with at.llm_call(model="m") as llm:
                    assert llm.episode_id == ep.id
                with foreign_tracer.start_as_current_span("http.request"):
                    with foreign_tracer.start_as_current_span("db.query"):
                        pass
                with at.env_step() as env_step:
                    assert env_step.index == expected
    assert at.current_episode_id() is None
    for span in mem.spans():
        assert span.attributes[sc.EPISODE_ID] == ep.id, span.name
    for name in ("chat m", sc.ENV_STEP, sc.TIMESTEP):
        indices = sorted(s.attributes[sc.TIMESTEP_INDEX] for s in mem.spans(name))
        assert indices == [0, 1, 2], name
    (trajectory,) = mem.read().live
    assert [len(s.llm_calls) for s in trajectory.steps] == [1, 1, 1]


def test_explicit_step_index(mem):
    with at.episode() as ep:
        with at.timestep(5) as step:
            step.record(reward=1.0)
        with at.timestep() as step:
            assert step.index == 6
            step.record(reward=2.0, terminated=True)
    (trajectory,) = mem.read().live
    assert trajectory.episode_id == ep.id
    assert [s.index for s in trajectory.steps] == [5, 6]
    assert trajectory.missing_steps == [0, 1, 2, 3, 4]
    assert trajectory.status == sc.STATUS_INCOMPLETE


def test_reward_of_env_step_wins_and_the_return_agrees(mem):
    """A reward recorded on timestep and on env.step: env.step's counts, everywhere."""
    with at.episode() as ep:
        for i in range(3):
            with at.timestep() as step:
                with at.env_step() as env_step:
                    env_step.record(reward=float(i), terminated=i == 2, truncated=False)
                step.record(reward=100.0)  # e.g. a shaped reward on the outer span
        assert ep.return_ == 3.0
    result = mem.read()
    (trajectory,) = result.live
    assert trajectory == result.offline[0]
    assert trajectory.rewards == [0.0, 1.0, 2.0]
    assert trajectory.return_ == 3.0
    assert mem.one(sc.EPISODE).attributes[sc.EPISODE_RETURN] == 3.0


# --- tracer providers ---------------------------------------------------------------------------


def test_configure_never_replaces_the_global_tracer_provider(tmp_path):
    before = trace.get_tracer_provider()
    runtime = at.configure(out=str(tmp_path / "a"), sinks=["jsonl"])
    assert trace.get_tracer_provider() is before
    assert runtime.provider is not before
    with at.episode():
        pass
    assert trace.get_tracer_provider() is before

    provider = TracerProvider()
    runtime = at.configure(tracer_provider=provider, out=str(tmp_path / "b"), sinks=["jsonl"])
    assert trace.get_tracer_provider() is before
    assert runtime.provider is provider
    with at.episode():
        pass
    at.shutdown()
    assert trace.get_tracer_provider() is before


def test_tracer_provider_is_respected(tmp_path):
    mem = make_mem(tmp_path / "one")
    other_exporter = InMemorySpanExporter()
    other = TracerProvider()
    other.add_span_processor(SimpleSpanProcessor(other_exporter))
    with at.episode() as ep:
        with at.timestep():
            pass
    assert {s.name for s in mem.spans()} == {sc.EPISODE, sc.TIMESTEP}
    assert other_exporter.get_finished_spans() == ()
    # A scope may name its own provider.
    with at.episode(tracer_provider=other) as ep2:
        pass
    assert [s.name for s in other_exporter.get_finished_spans()] == [sc.EPISODE]
    assert other_exporter.get_finished_spans()[0].attributes[sc.EPISODE_ID] == ep2.id
    result = mem.read()
    assert [t.episode_id for t in result.live] == [ep.id]


def test_tracer_provider_must_be_an_sdk_provider(tmp_path):
    with pytest.raises(at.ConfigError):
        at.configure(tracer_provider=trace.NoOpTracerProvider(), out=str(tmp_path))


# --- secrets, redaction, content policy -----------------------------------------------------------

SECRETS = {
    "api_key": "sk-SECRET-api-key-0001",
    "token": "tok-SECRET-0002",
    "password": "pw-SECRET-0003",
    "authorization": "Bearer SECRET-0004",
}


def test_arguments_named_like_secrets_are_never_recorded(mem):
    @at.episode
    def run(task_id, authorization=None):
        with at.env_reset(attributes={"api_key": SECRETS["api_key"], "ok": 1}) as reset:
            reset.set_attribute("password", SECRETS["password"])
            reset.record(observation={"api_key": SECRETS["api_key"], "x": 1})
        reset_env(None, seed=3, password=SECRETS["password"])
        with at.timestep():
            act(SECRETS["api_key"], "what next?")
            think(obs=[1, 2], token=SECRETS["token"])
            chat(
                model="gpt-test",
                messages=[
                    {"role": "user", "content": "hi", "authorization": SECRETS["authorization"]}
                ],
                api_key=SECRETS["api_key"],
                token=SECRETS["token"],
                password=SECRETS["password"],
                authorization=SECRETS["authorization"],
            )
            step(None, 1, token=SECRETS["token"])

    @at.env_reset
    def reset_env(env, seed, password=None):
        return ({"obs": 0}, {"info": "i", "token": SECRETS["token"]})

    @at.agent_act
    def act(api_key, prompt):
        return "left"

    @at.agent_act
    def think(obs, token=None):
        return "right"

    @at.llm_call
    def chat(model, messages, **kwargs):
        return "reply"

    @at.env_step
    def step(env, action, token=None):
        return ({"obs": 1, "password": SECRETS["password"]}, 1.0, True, False, {})

    run("t", authorization=SECRETS["authorization"])
    text = all_attribute_text(mem.spans())
    result = mem.read()
    files = [*mem.runtime.trajectory_paths, *mem.runtime.span_paths]
    assert files
    stored = "\n".join(Path(p).read_text() for p in files)
    stored += "\n".join(t.to_json() for t in result.live + result.offline)
    for name, secret in SECRETS.items():
        assert secret not in text, f"{name} leaked into span attributes"
        assert secret not in stored, f"{name} leaked into the run files"
    # The dict keys named like secrets are kept, with their values redacted.
    (trajectory,) = result.live
    assert trajectory.final_observation == {"obs": 1, "password": REDACTED}


def test_redact_hook_scrubs_content(tmp_path):
    calls: list[str] = []

    def redact(key: str, value: Any) -> Any:
        calls.append(key)
        if isinstance(value, str):
            return value.replace("alice@example.com", "<email>")
        if isinstance(value, list):
            return [
                {**m, "content": m["content"].replace("alice@example.com", "<email>")}
                for m in value
            ]
        return value

    mem = make_mem(tmp_path, redact=redact)
    with at.episode():
        with at.timestep():
            with at.agent_act() as act:
                act.record(
                    observation="mail alice@example.com", action="reply to alice@example.com"
                )
            with at.llm_call(model="m") as llm:
                llm.record(
                    input_messages=[{"role": "user", "content": "I am alice@example.com"}],
                    output_messages=[{"role": "assistant", "content": "hi alice@example.com"}],
                )
            with at.env_step() as step:
                step.record(reward=1.0, terminated=True, info="sent to alice@example.com")
    assert "alice@example.com" not in all_attribute_text(mem.spans())
    assert {sc.OBSERVATION, sc.ACTION, sc.INFO, sc.GEN_AI_INPUT_MESSAGES} <= set(calls)
    result = mem.read()
    (trajectory,) = result.live
    step = trajectory.steps[0]
    assert step.observation == "mail <email>"
    assert step.action == "reply to <email>"
    assert step.info == "sent to <email>"
    assert step.llm_calls[0].input_messages == [{"role": "user", "content": "I am <email>"}]
    text = "\n".join(Path(p).read_text() for p in mem.runtime.trajectory_paths)
    text += "\n".join(Path(p).read_text() for p in mem.runtime.span_paths)
    assert "alice@example.com" not in text
    assert step.reward == 1.0


def test_content_none_records_no_content_but_rewards(tmp_path):
    mem = make_mem(tmp_path, content="none")
    obs = np.arange(4, dtype=np.float32)
    with at.episode() as ep:
        with at.env_reset() as reset:
            reset.record_result((obs, {"seed": 1}))
        for i in range(3):
            with at.timestep():
                with at.agent_act() as act:
                    act.record(observation=obs, action=i)
                with at.llm_call(model="m") as llm:
                    llm.record(
                        input_messages=[{"role": "user", "content": "secret plan"}],
                        output_messages=[{"role": "assistant", "content": "ok"}],
                        input_tokens=3,
                        output_tokens=1,
                    )
                with at.env_step() as step:
                    step.record_result((obs + i, i + 0.5, i == 2, False, {"x": i}))
    content_keys = {
        sc.OBSERVATION,
        sc.ACTION,
        sc.INFO,
        sc.GEN_AI_INPUT_MESSAGES,
        sc.GEN_AI_OUTPUT_MESSAGES,
    }
    for span in mem.spans():
        assert not content_keys & set(span.attributes), span.name
    assert "secret plan" not in all_attribute_text(mem.spans())
    result = mem.read()
    (trajectory,) = result.live
    assert trajectory == result.offline[0]
    assert trajectory.episode_id == ep.id
    assert trajectory.rewards == [0.5, 1.5, 2.5]
    assert trajectory.return_ == 4.5
    assert [(s.terminated, s.truncated) for s in trajectory.steps] == [
        (False, False),
        (False, False),
        (True, False),
    ]
    assert all(s.observation is None and s.action is None for s in trajectory.steps)
    assert trajectory.final_observation is None
    assert trajectory.status == sc.STATUS_COMPLETED
    assert [s.llm_calls[0].input_tokens for s in trajectory.steps] == [3, 3, 3]
    assert trajectory.steps[0].llm_calls[0].input_messages is None


# --- failures inside agenttrace never break the user's loop ---------------------------------------


def test_a_raising_redact_hook_withholds_content_and_the_loop_goes_on(tmp_path):
    def redact(key: str, value: Any) -> Any:
        raise RuntimeError("redactor is broken")

    mem = make_mem(tmp_path, redact=redact)
    with at.episode():
        for i in range(3):
            with at.timestep():
                with at.agent_act() as act:
                    act.record(observation=f"private {i}", action=i)
                with at.env_step() as step:
                    assert step.record_result((i, 1.0, i == 2, False, {})) == (
                        i,
                        1.0,
                        i == 2,
                        False,
                        {},
                    )
    assert "private" not in all_attribute_text(mem.spans())
    (trajectory,) = mem.read().live
    assert trajectory.rewards == [1.0, 1.0, 1.0]
    assert [s.observation for s in trajectory.steps] == [REDACTED] * 3
    assert trajectory.status == sc.STATUS_COMPLETED


def test_a_raising_extractor_never_breaks_the_loop(mem):
    def extractor(result: Any) -> Any:
        raise ZeroDivisionError("extractor bug")

    @at.env_step(extractor=extractor)
    def step_fn(action):
        return (action, 1.0, False, False, {})

    with at.episode():
        for i in range(3):
            with at.timestep(), at.env_step(extractor=extractor) as step:
                value = (i, 1.0, False, False, {})
                assert step.record_result(value) is value
            with at.timestep():
                assert step_fn(i) == (i, 1.0, False, False, {})
    (trajectory,) = mem.read().live
    assert [s.index for s in trajectory.steps] == list(range(6))
    assert trajectory.steps[-1].action == 2


def test_a_raising_sink_never_breaks_the_loop(tmp_path):
    written = []

    def broken_sink(trajectory: at.Trajectory) -> None:
        raise OSError("disk on fire")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path),
        run_name="sinks",
        sinks=["jsonl", broken_sink, written.append],
    )
    for _ in range(4):
        with at.episode(), at.timestep() as step:
            step.record(reward=1.0, terminated=True)
    result = read_run(runtime)
    assert len(result.live) == 4
    assert len(written) == 4
    assert result.stats["sink_errors"] == {"CallbackSink": 4}


def test_bad_values_never_break_the_loop(mem):
    class NoRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no repr for you")

    with at.episode() as ep:
        with at.timestep() as step:
            step.record(reward="not a number", terminated="yes")
        with at.timestep() as step:
            with pytest.warns(at.UnserializableValueWarning):
                step.record(observation=NoRepr(), action=object(), reward=2.0)
        with at.llm_call() as llm:
            assert llm.record_response(42) == 42
            llm.record(input_tokens="many")
    (trajectory,) = mem.read().live
    assert trajectory.episode_id == ep.id
    assert trajectory.steps[1].reward == 2.0


# --- extractors -------------------------------------------------------------------------------


class StepType(enum.IntEnum):
    FIRST = 0
    MID = 1
    LAST = 2


DmTimeStep = namedtuple("DmTimeStep", ["step_type", "reward", "discount", "observation"])


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        pytest.param(
            (np.zeros(2), 1.5, True, False, {"a": 1}),
            (1.5, True, False, None),
            id="gymnasium-terminated",
        ),
        pytest.param(
            ("o", np.float32(0.5), np.bool_(False), np.bool_(True), {}),
            (0.5, False, True, None),
            id="gymnasium-numpy-truncated",
        ),
        pytest.param(("o", 2, True), (2.0, True, False, None), id="obs-reward-done"),
        pytest.param(("o", 2, False), (2.0, False, False, None), id="obs-reward-not-done"),
        pytest.param(("o", 2, True, {"i": 1}), (2.0, True, False, None), id="old-gym-4"),
        pytest.param(
            DmTimeStep(StepType.MID, 0.25, 1.0, "o"), (0.25, False, False, 1.0), id="dm-mid"
        ),
        pytest.param(
            DmTimeStep(StepType.LAST, 1.0, 0.0, "o"), (1.0, True, False, 0.0), id="dm-last-0"
        ),
        pytest.param(
            DmTimeStep(StepType.LAST, 1.0, 1.0, "o"), (1.0, False, True, 1.0), id="dm-last-1"
        ),
        pytest.param(
            {"observation": "o", "reward": 3, "terminated": False, "truncated": True},
            (3.0, False, True, None),
            id="dict",
        ),
        pytest.param(
            {"obs": "o", "reward": 3, "done": True}, (3.0, True, False, None), id="dict-done"
        ),
    ],
)
def test_extractors_through_env_step(mem, result, expected):
    reward, terminated, truncated, discount = expected
    found = at.extract_step(result)
    assert found is not None
    assert float(found.reward) == reward
    assert found.terminated is terminated
    assert bool(found.truncated) is truncated
    with at.episode() as ep:
        with at.env_reset() as reset:
            reset.record_result(("first", {}))
        with at.timestep(), at.env_step() as step:
            assert step.record_result(result) is result
    (trajectory,) = mem.read().live
    (step,) = trajectory.steps
    assert step.reward == reward
    assert step.terminated is terminated
    assert step.truncated is truncated
    assert step.discount == discount
    final = trajectory.final_observation
    if isinstance(found.observation, np.ndarray):
        assert final.dtype == found.observation.dtype
        assert np.array_equal(final, found.observation)
    else:
        assert final == found.observation
    assert step.observation == "first"
    expected_status = sc.STATUS_COMPLETED if terminated else sc.STATUS_TRUNCATED
    assert trajectory.status == expected_status
    assert trajectory.episode_id == ep.id


def test_dm_env_first_step_is_not_a_step_end():
    found = at.extract_step(DmTimeStep(StepType.FIRST, None, None, "o"))
    assert found is not None
    assert (found.terminated, found.truncated) == (False, False)
    assert found.observation == "o"


def test_named_extractor_and_unknown_name():
    with pytest.raises(ValueError, match="unknown extractor"):
        at.env_step(extractor="nope")
    assert at.extract_step("just an observation") is None


def test_unrecognised_step_result_is_recorded_as_observation(mem):
    with at.episode(), at.timestep(), at.env_step() as step:
        step.record_result("plain text observation")
    (trajectory,) = mem.read().live
    assert trajectory.final_observation == "plain text observation"
    assert trajectory.steps[0].reward is None


# --- LLM calls --------------------------------------------------------------------------------


@dataclass
class Message:
    role: str
    content: str


@dataclass
class Choice:
    message: Message
    finish_reason: str
    index: int = 0


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass
class ChatCompletion:
    id: str
    model: str
    choices: list[Choice]
    usage: Usage
    extra: dict = field(default_factory=dict)


def completion(text: str) -> ChatCompletion:
    return ChatCompletion(
        id="cmpl-1",
        model="gpt-test-2025",
        choices=[
            Choice(Message("assistant", text), "stop"),
            Choice(Message("assistant", text + "!"), "length", 1),
        ],
        usage=Usage(prompt_tokens=11, completion_tokens=7),
    )


def test_llm_call_inside_a_timestep_lands_in_that_step(mem):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go?"}]
    with at.episode():
        with at.timestep():
            pass
        with at.timestep() as step:
            with at.llm_call(model="gpt-test", provider="openai") as llm:
                llm.record(
                    input_messages=messages,
                    output_messages=[{"role": "assistant", "content": "left"}],
                    response_model="gpt-test-2025",
                    finish_reasons=["stop"],
                    input_tokens=12,
                    output_tokens=3,
                )
            with at.agent_act() as act:
                act.record(action="left")
            step.record(reward=1.0, terminated=True)
    span = mem.one("chat gpt-test")
    assert span.kind is trace.SpanKind.CLIENT
    assert span.attributes[sc.TIMESTEP_INDEX] == 1
    assert parent_of(span, mem.spans()).name == sc.TIMESTEP
    result = mem.read()
    (trajectory,) = result.live
    assert trajectory == result.offline[0]
    assert trajectory.steps[0].llm_calls == []
    (call,) = trajectory.steps[1].llm_calls
    assert call.name == "chat gpt-test"
    assert call.model == "gpt-test-2025"
    assert call.provider == "openai"
    assert call.input_messages == messages
    assert call.output_messages == [{"role": "assistant", "content": "left"}]
    assert call.finish_reasons == ["stop"]
    assert (call.input_tokens, call.output_tokens) == (12, 3)
    assert call.error is None


def test_record_response_of_an_openai_like_object(mem):
    response = completion("go left")
    with at.episode(), at.timestep(), at.llm_call(model="gpt-test") as llm:
        assert llm.record_response(response) is response
    (trajectory,) = mem.read().live
    (call,) = trajectory.steps[0].llm_calls
    assert call.model == "gpt-test-2025"
    assert call.output_messages == [
        {"role": "assistant", "content": "go left"},
        {"role": "assistant", "content": "go left!"},
    ]
    assert call.finish_reasons == ["stop", "length"]
    assert (call.input_tokens, call.output_tokens) == (11, 7)
    assert mem.one("chat gpt-test").attributes[sc.GEN_AI_RESPONSE_ID] == "cmpl-1"


def test_decorated_llm_call_records_request_and_response(mem):
    @at.llm_call
    def create(model, messages, temperature=1.0, max_tokens=None, **kwargs):
        return completion("ok")

    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    with at.episode(), at.timestep():
        response = create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            temperature=0.25,
            max_tokens=64,
            tools=tools,
        )
    assert response.choices[0].message.content == "ok"
    span = mem.one("chat gpt-test")
    assert span.attributes[sc.GEN_AI_REQUEST_MODEL] == "gpt-test"
    assert span.attributes["gen_ai.request.temperature"] == 0.25
    assert span.attributes["gen_ai.request.max_tokens"] == 64
    (trajectory,) = mem.read().live
    (call,) = trajectory.steps[0].llm_calls
    assert call.input_messages == [{"role": "user", "content": "hi"}]
    assert call.output_messages[0] == {"role": "assistant", "content": "ok"}
    assert call.finish_reasons == ["stop", "length"]
    assert (call.input_tokens, call.output_tokens) == (11, 7)
    assert call.attributes[sc.GEN_AI_TOOL_DEFINITIONS] == tools


def test_failed_llm_call_is_recorded_as_error(mem):
    with pytest.raises(TimeoutError), at.episode(), at.timestep():
        with at.llm_call(model="slow"):
            raise TimeoutError("model timed out")
    (trajectory,) = mem.read().live
    (call,) = trajectory.steps[0].llm_calls
    assert "model timed out" in call.error


# --- episode handle ---------------------------------------------------------------------------


def test_episode_handle_status_overrides(mem):
    with at.episode() as ep:
        with pytest.raises(ValueError):
            ep.set_status("bogus")
        with pytest.raises(ValueError):
            ep.set_status(sc.STATUS_INCOMPLETE)
        with at.timestep() as step:
            step.record(reward=1.0, terminated=True)
        ep.set_status(sc.STATUS_ABORTED)
    with at.episode() as ep2:
        with at.timestep() as step:
            step.record(reward=2.0)
        ep2.end_as(sc.STATUS_ABANDONED)
        assert ep2.return_ == 2.0 and ep2.length == 1
    statuses = {t.episode_id: t.status for t in mem.read().live}
    assert statuses == {ep.id: sc.STATUS_ABORTED, ep2.id: sc.STATUS_ABANDONED}


def test_disabled_pipeline_records_nothing_and_runs_the_loop(tmp_path):
    runtime = at.configure(enabled=False, out=str(tmp_path), sinks=["jsonl"])
    with at.episode() as ep, at.timestep(), at.env_step() as step:
        value = ("o", 1.0, True, False, {})
        assert step.record_result(value) is value
    assert ep.id is None
    assert not ep.span.get_span_context().is_valid
    runtime.shutdown()
    assert runtime.trajectory_paths == []


def test_instrument_package_exports_every_integration_lazily() -> None:
    import subprocess
    import sys

    import agenttrace.instrument as instrument

    for name in instrument.__all__:
        assert getattr(instrument, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        instrument.nope  # noqa: B018
    light = subprocess.run(
        [sys.executable, "-c", "import agenttrace, sys; print('gymnasium' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert light.stdout.strip() == "False"


def test_decorated_functions_record_arguments_however_they_are_passed(mem) -> None:
    @at.agent_act
    def act(state, *, temperature=1.0):
        return "left"

    @at.env_step
    def step(env_handle, /, action, **extra):
        return ([0.0], 1.0, False, False, {})

    with at.episode():
        with at.timestep():
            act(state=[1, 2])
            step("env", action="left", note="x")
        with at.timestep():
            act([3, 4])
            step("env", "right")
    spans = [s for s in mem.spans() if s.name in (sc.AGENT_ACT, sc.ENV_STEP)]
    recorded = [
        (s.name, s.attributes.get(sc.OBSERVATION), s.attributes.get(sc.ACTION)) for s in spans
    ]
    assert recorded == [
        (sc.AGENT_ACT, "[1,2]", '"left"'),
        (sc.ENV_STEP, "[0.0]", '"left"'),
        (sc.AGENT_ACT, "[3,4]", '"left"'),
        (sc.ENV_STEP, "[0.0]", '"right"'),
    ]


@pytest.mark.parametrize(
    "result",
    [("o", None, True), ("o", None, False, True, {"i": 1}), ("o", None, True, {"i": 1})],
    ids=["obs-none-done", "gymnasium-none-truncated", "old-gym-none-done"],
)
def test_a_none_reward_is_still_a_step_and_its_flags_count(tmp_path, result):
    """Runners return ``(obs, None, done)``: the step stays, its flags are kept, and every
    file format holds the missing reward as a null."""
    from agenttrace.reading.step_tables import read_step_tables
    from agenttrace.sinks import load_trajectories

    found = at.extract_step(result)
    assert found is not None and found.reward is None
    runtime = at.configure(out=str(tmp_path), run_name="none", sinks=["jsonl", "parquet", "steps"])
    with at.episode():
        with at.env_step() as step:
            step.record_result(("first", 1.0, False, False, {}))
        with at.env_step() as step:
            step.record_result(result)
    runtime.shutdown()
    done = bool(found.terminated or found.truncated)
    for path in runtime.trajectory_paths:  # JSONL and Parquet
        (trajectory,) = load_trajectories([path])
        assert [s.reward for s in trajectory.steps] == [1.0, None]
        last = trajectory.steps[-1]
        assert (last.terminated, last.truncated) == (found.terminated, bool(found.truncated))
        assert trajectory.return_ == 1.0 and done
        expected = sc.STATUS_COMPLETED if found.terminated else sc.STATUS_TRUNCATED
        assert trajectory.status == expected
    steps, _ = read_step_tables(tmp_path / "none")
    assert steps["reward"].to_pylist() == [1.0, None]
