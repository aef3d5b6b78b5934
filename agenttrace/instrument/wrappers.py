"""Environment wrappers: agenttrace episodes from an environment, with the user's loop unchanged.

Wrap the environment once and every episode played on it becomes an ``episode`` span with
``env.reset`` and one ``timestep > env.step`` per step, from which the trajectory processor
rebuilds the trajectory::

    from agenttrace.instrument.wrappers import TracedEnv

    env = TracedEnv(gym.make("CartPole-v1"), task_id="balance")
    obs, info = env.reset(seed=0)  # opens the episode
    ...  # env.step(action) as usual; the episode ends with the terminal step

* :class:`TracedEnv` wraps a ``gymnasium.Env`` (a ``gymnasium.Wrapper``);
  :func:`instrument_gymnasium` makes ``gymnasium.make`` return traced environments.
* :class:`TracedDmEnv` wraps a ``dm_env.Environment``.
* :class:`TrajectoryCollectingEnvironment` wraps an ARES-style async environment (async
  ``reset``/``step``/``close``, ``async with``, dm_env-style ``TimeStep`` results).

An episode spans many calls, so no context is held between them: each call of the wrapped
environment makes its own spans current while it runs and restores the caller's context
before it returns (spans the environment creates inside ``step`` nest under its
``env.step``). Episode ends: terminal step ``completed``, truncated step ``truncated``,
``reset()`` while an episode is open ``abandoned`` (for the old one), ``close()`` while open
``aborted``, an exception from the environment ``errored`` (the exception passes through
unchanged), ``asyncio.CancelledError``/``KeyboardInterrupt`` ``cancelled``.

``collector`` (every wrapper takes one) is called with each finished :class:`Trajectory` of
that wrapper, on the thread that ended the episode, right when it ended. It is the same
trajectory the sinks get: rebuilt by the one assembler from the same span records, which a
small span processor (added once per TracerProvider) keeps for watched episodes only.

docs/env-wrappers.md is the user guide.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import numbers
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._version import install_hint
from agenttrace.instrument.env_identity import env_display_name, env_spec_json
from agenttrace.instrument.extractors import _UNSET, EXTRACTORS
from agenttrace.instrument.field_values import read_flag
from agenttrace.instrument.proxies import PatchProxy
from agenttrace.instrument.spans import (
    EnvResetScope,
    EnvStepScope,
    EpisodeScope,
    TimestepScope,
)
from agenttrace.processing.writer import AGENTTRACE_SCOPE
from agenttrace.trajectory import Trajectory, build_trajectory, record_from_span
from agenttrace.trajectory.records import SpanRecord

try:
    import gymnasium
    import gymnasium.envs.registration
except ImportError:  # the gymnasium wrapper then explains what to install
    gymnasium = None  # type: ignore[assignment]

try:
    import dm_env
except ImportError:
    dm_env = None  # type: ignore[assignment]

logger = logging.getLogger("agenttrace")

Collector = Callable[[Trajectory], Any]


# --- the collector: finished trajectories of watched episodes ---------------------------------


class _EpisodeCollector(SpanProcessor):
    """Keeps span records of watched episodes; hands each finished episode to its callback.

    Unwatched spans cost one dict lookup. The callback runs in ``on_end`` of the episode span,
    on the thread that ended it; its failures are logged, never raised into ``span.end()``.
    """

    def __init__(self) -> None:
        self._watched: dict[str, tuple[list[SpanRecord], Collector]] = {}

    def watch(self, episode_id: str, callback: Collector) -> None:
        self._watched[episode_id] = ([], callback)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not self._watched:
            return
        try:
            attributes = span.attributes
            episode_id = attributes.get(sc.EPISODE_ID) if attributes else None
            if episode_id is None:
                return
            episode_id = str(episode_id)
            entry = self._watched.get(episode_id)
            if entry is None:
                return
            records, callback = entry
            records.append(record_from_span(span))
            if span.name != sc.EPISODE:
                return
            self._watched.pop(episode_id, None)
        except Exception:
            _internal_error("collecting spans for a collector")
            return
        _deliver(episode_id, records, callback)

    def shutdown(self) -> None:
        self._watched.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _deliver(episode_id: str, records: list[SpanRecord], callback: Collector) -> None:
    try:
        trajectory = build_trajectory(records, episode_id, trusted_scope=AGENTTRACE_SCOPE)
    except Exception:
        _internal_error("rebuilding a trajectory for a collector")
        return
    try:
        callback(trajectory)
    except Exception:
        logger.exception(
            "agenttrace: the collector %r failed on episode %s; that trajectory is lost to it "
            "(the sinks still have it)",
            callback,
            episode_id,
        )


_collectors: weakref.WeakKeyDictionary[TracerProvider, _EpisodeCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def _collector_for(provider: TracerProvider) -> _EpisodeCollector:
    with _collectors_lock:
        collector = _collectors.get(provider)
        if collector is None:
            collector = _EpisodeCollector()
            provider.add_span_processor(collector)
            _collectors[provider] = collector
        return collector


def _checked_collector(collector: Any) -> Collector | None:
    if collector is None:
        return None
    if not callable(collector):
        raise TypeError(f"collector must be callable, got {type(collector).__name__}")
    # a coroutine function, or an object whose __call__ is one
    if inspect.iscoroutinefunction(collector) or inspect.iscoroutinefunction(
        type(collector).__call__
    ):
        raise TypeError(
            "collector must be a plain function called with each finished Trajectory; "
            f"{collector!r} is a coroutine function (e.g. use queue.put_nowait instead)"
        )
    return collector


# --- one wrapper's episodes ------------------------------------------------------------------


def _episode_context(episode: EpisodeScope) -> Context | None:
    """The context that makes ``episode`` current for its children.

    spans.py has no public way to make a started scope current without ending it on exit;
    this reads the scope's context (see docs/env-wrappers.md, "internals").
    """
    context = getattr(episode, "_context", None)
    return context if isinstance(context, Context) else None


def _is_cancel(exc: BaseException) -> bool:
    return not isinstance(exc, Exception)


class _Recorder:
    """One wrapper's episodes: opened at reset, one step per call, each ended exactly once."""

    def __init__(
        self,
        owner: Any,
        *,
        extractor: str,
        episode_options: dict[str, Any],
        collector: Collector | None,
    ) -> None:
        self.owner = owner
        self.extract = EXTRACTORS[extractor]
        self.extractor = extractor
        self.episode_options = episode_options
        self.collector = collector
        self.runtime: pipeline.AgentTrace | None = None
        self.episode: EpisodeScope | None = None
        self.recording = False  # whether the open episode's span records (not sampled out)
        self.last_episode_id: str | None = None
        self.active = True  # False under an outer TracedEnv of the same stack

    def open_episode(self) -> EpisodeScope | None:
        """The open episode; None when there is none or it was ended elsewhere."""
        episode = self.episode
        if episode is None:
            return None
        if self.recording and not episode.span.is_recording():
            self.episode = None  # ended by at.env_closed(env) or a previous failure
            return None
        return episode

    def begin(self, seed: Any = None) -> None:
        """Open a new episode; one still open ends ``abandoned``."""
        self.end_open(sc.STATUS_ABANDONED)
        try:
            runtime = pipeline.get_default()
            self.runtime = runtime
            if not runtime.enabled:
                return
            if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
                seed = int(seed)
            else:
                seed = None
            episode = EpisodeScope(
                env=self.owner, seed=seed, runtime=runtime, **self.episode_options
            ).start()
            self.episode = episode
            self.recording = episode.span.is_recording()
            self.last_episode_id = episode.id
            if self.collector is not None and episode.id and self.recording:
                _collector_for(runtime.provider).watch(episode.id, self.collector)
        except Exception:
            _internal_error("opening an episode in an env wrapper")

    def end(self, status: str, exc: BaseException | None = None) -> None:
        episode, self.episode = self.episode, None
        if episode is None:
            return
        try:
            episode.end_as(status, exc)
        except Exception:
            _internal_error("ending an episode in an env wrapper")

    def end_open(self, status: str) -> None:
        if self.open_episode() is not None:
            self.end(status)

    def deactivate(self) -> None:
        """An outer wrapper traces this stack now: stop producing spans."""
        self.active = False
        self.end_open(sc.STATUS_ABANDONED)

    def reset_call(self, seed: Any = None) -> _TracedCall:
        """Open an episode and trace the reset call in it."""
        self.begin(seed)
        return _TracedCall(self, reset=True)

    def step_call(self, action: Any) -> _TracedCall | None:
        """Trace one step of the open episode; None when no episode is open."""
        if self.open_episode() is None:
            return None
        return _TracedCall(self, reset=False, action=action)

    def ending_status(self, result: Any) -> str | None:
        """completed/truncated when ``result`` ends the episode, else None."""
        found = self.extract(result)
        if found is None:
            return None
        if read_flag(found.terminated):  # (a flag that is not a bool: as record() reads it)
            return sc.STATUS_COMPLETED
        if read_flag(found.truncated):
            return sc.STATUS_TRUNCATED
        return None


class _TracedCall:
    """One call of the wrapped environment, its spans current only while it runs.

    Entered around the call: attaches the episode's context and starts ``env.reset`` (or
    ``timestep`` and ``env.step``); on exit ends them, restores the caller's context and then
    ends the episode if the call ended it (children end before the episode span).
    """

    __slots__ = ("_action", "_ending", "_recorder", "_reset", "_scopes", "_token")

    def __init__(self, recorder: _Recorder, *, reset: bool, action: Any = _UNSET) -> None:
        self._recorder = recorder
        self._reset = reset
        self._action = action
        self._scopes: list[Any] = []
        self._token: object | None = None
        self._ending: str | None = None

    def __enter__(self) -> _TracedCall:
        recorder = self._recorder
        episode = recorder.episode
        if episode is None:
            return self
        try:
            context = _episode_context(episode)
            if context is not None:
                self._token = otel_context.attach(context)
            elif recorder.recording:  # the call's spans would miss the episode: say so
                raise RuntimeError("the episode scope has no context to make current")
            runtime = recorder.runtime
            if self._reset:
                scopes: tuple[Any, ...] = (EnvResetScope(runtime=runtime),)
            else:
                scopes = (
                    TimestepScope(runtime=runtime),
                    EnvStepScope(extractor=recorder.extractor, runtime=runtime),
                )
            for scope in scopes:
                scope.__enter__()
                self._scopes.append(scope)
            if self._action is not _UNSET:
                scopes[-1].record(action=self._action)
        except Exception:
            _internal_error("starting a traced env call")
        return self

    def record(self, result: Any) -> None:
        """Record what the environment returned (and whether it ended the episode)."""
        if not self._scopes:
            return
        try:
            self._scopes[-1].record_result(result)
            if not self._reset:
                self._ending = self._recorder.ending_status(result)
        except Exception:
            _internal_error("recording an env result")

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            for scope in reversed(self._scopes):
                scope.__exit__(exc_type, exc, tb)
        except Exception:
            _internal_error("ending a traced env call")
        finally:
            self._scopes.clear()
            token, self._token = self._token, None
            if token is not None:
                otel_context.detach(token)
        recorder = self._recorder
        if recorder.episode is None:
            return
        if exc is not None:
            recorder.end(sc.STATUS_CANCELLED if _is_cancel(exc) else sc.STATUS_ERRORED, exc)
        elif self._ending is not None:
            recorder.end(self._ending)


def _episode_options(
    task_id: str | None,
    env_name: str | None,
    agent_name: str | None,
    policy_version: str | None,
    attributes: dict[str, Any] | None,
) -> dict[str, Any]:
    if attributes is not None and not isinstance(attributes, dict):
        raise TypeError(f"attributes must be a dict, got {type(attributes).__name__}")
    return {
        "task_id": task_id,
        "env_name": env_name,
        "agent_name": agent_name,
        "policy_version": policy_version,
        "attributes": attributes,
    }


def _action_of(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The action of a ``step(*args, **kwargs)`` call, whatever the parameter is called."""
    if args:
        return args[0]
    if "action" in kwargs:
        return kwargs["action"]
    if len(kwargs) == 1:
        return next(iter(kwargs.values()))
    return _UNSET


# --- gymnasium -------------------------------------------------------------------------------

_GymWrapper: Any = gymnasium.Wrapper if gymnasium is not None else object


class TracedEnv(_GymWrapper):  # type: ignore[misc, valid-type]
    """A ``gymnasium.Wrapper`` that records every episode played on the environment.

    ``reset()`` opens an ``episode`` span and records ``env.reset`` (initial observation and
    info); each ``step(action)`` records a ``timestep`` with its ``env.step`` (action in;
    observation, reward, terminated, truncated, info out); the terminal or truncated step
    ends the episode. Everything else passes through unchanged, ``spec`` included. Wrapping a
    stack that already holds a TracedEnv silences the inner one: only the outermost traces.
    """

    def __init__(
        self,
        env: Any,
        *,
        task_id: str | None = None,
        env_name: str | None = None,
        agent_name: str | None = None,
        policy_version: str | None = None,
        attributes: dict[str, Any] | None = None,
        collector: Collector | None = None,
    ) -> None:
        if gymnasium is None:
            raise ImportError("TracedEnv needs gymnasium: " + install_hint("gym"))
        super().__init__(env)
        if env_name is None:
            env_name = env_display_name(env)
        spec = env_spec_json(env)
        if spec and isinstance(attributes, (dict, type(None))):  # (rebuilds it: docs/minari.md)
            attributes = {sc.ENV_SPEC: spec, **(attributes or {})}
        sub_env = _sub_env_index.get()
        if sub_env is not None:  # made for a vector env built by hand (instrument_gymnasium)
            attributes = {**(attributes or {}), sc.ENV_INDEX: sub_env, sc.ENV_WORKER: os.getpid()}
        self._agenttrace = _Recorder(
            self,
            extractor="gymnasium",
            episode_options=_episode_options(
                task_id, env_name, agent_name, policy_version, attributes
            ),
            collector=_checked_collector(collector),
        )
        inner = env
        while isinstance(inner, gymnasium.Wrapper):
            if isinstance(inner, TracedEnv):
                inner._agenttrace.deactivate()
            inner = inner.env

    @property
    def spec(self) -> Any:
        """The wrapped environment's spec: this wrapper changes nothing it describes."""
        return self.env.spec

    @property
    def agenttrace_episode_id(self) -> str | None:
        """Id of the episode in progress, or of the last one (None before the first reset)."""
        return self._agenttrace.last_episode_id

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        recorder = self._agenttrace
        if not recorder.active:
            return self.env.reset(seed=seed, options=options)
        with recorder.reset_call(seed) as call:
            result = self.env.reset(seed=seed, options=options)
            call.record(result)
        return result

    def step(self, action: Any) -> Any:
        recorder = self._agenttrace
        call = recorder.step_call(action) if recorder.active else None
        if call is None:  # no episode open (stepping before reset or after the end)
            return self.env.step(action)
        with call:
            result = self.env.step(action)
            call.record(result)
        return result

    def close(self) -> None:
        """An episode still open ends ``aborted``; then the environment closes."""
        self._agenttrace.end_open(sc.STATUS_ABORTED)
        return self.env.close()


_patches: list[tuple[Any, str, Any, Any]] = []  # (module or class, name, original, proxy)
#: Which sub-environment of a vector env built by hand the env being made is (its env_fn's
#: position), while instrument_gymnasium is on.
_sub_env_index: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "agenttrace_sub_env_index", default=None
)
_patch_lock = threading.Lock()
_in_make: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "agenttrace_in_gymnasium_make", default=False
)


def instrument_gymnasium(**options: Any) -> None:
    """Make ``gymnasium.make`` (and ``EnvSpec.make``) return :class:`TracedEnv`-wrapped
    environments and ``gymnasium.make_vec`` :class:`~agenttrace.instrument.vector.
    TracedVectorEnv`-wrapped vector environments; ``options`` are TracedEnv's keywords.

    Environments made inside another ``make`` or ``make_vec`` call are left alone (the outer
    one is traced: a vector environment's sub-environments are recorded from its batched
    results). Calling it again while instrumented changes nothing (log message).
    """
    if gymnasium is None:
        raise ImportError("instrument_gymnasium needs gymnasium: " + install_hint("gym"))
    unknown = set(options) - {
        "task_id",
        "env_name",
        "agent_name",
        "policy_version",
        "attributes",
        "collector",
    }
    if unknown:
        raise TypeError(f"instrument_gymnasium got unknown options: {', '.join(sorted(unknown))}")
    _checked_collector(options.get("collector"))
    with _patch_lock:
        if _patches:
            logger.info("agenttrace: gymnasium is already instrumented")
            return
        from agenttrace.instrument import vector  # (it builds on this module)

        for name, traced in (("make", _traced_make), ("make_vec", vector.traced_make_vec)):
            wrapper = functools.partial(traced, options=dict(options))
            # One proxy per function: gymnasium.make is gymnasium.envs.registration.make,
            # and stays the same object as that name, which pickling by reference needs.
            proxies: dict[int, PatchProxy] = {}
            for module in (gymnasium, gymnasium.envs.registration):
                original = getattr(module, name)
                proxy = proxies.setdefault(id(original), PatchProxy(original, wrapper))
                setattr(module, name, proxy)
                _patches.append((module, name, original, proxy))
        for vector_class in (gymnasium.vector.SyncVectorEnv, gymnasium.vector.AsyncVectorEnv):
            _index_sub_envs(vector_class)
    vector.index_library_vector_envs_on_import()  # (takes the lock itself)


def _index_sub_envs(vector_class: type) -> None:
    """Patch ``vector_class(env_fns, ...)`` so each env_fn's env knows its position (called
    with ``_patch_lock`` held, while instrumented)."""
    from agenttrace.instrument import vector

    original = vars(vector_class)["__init__"]
    if isinstance(original, wrapt.FunctionWrapper):
        return
    proxy = PatchProxy(original, vector.indexed_vector_init)
    vector_class.__init__ = proxy
    _patches.append((vector_class, "__init__", original, proxy))


def index_sub_envs_if_instrumented(vector_class: type) -> None:
    """A library's vector env class imported after :func:`instrument_gymnasium`: patched
    like gymnasium's own while gymnasium is instrumented, left alone otherwise."""
    with _patch_lock:
        if _patches:
            _index_sub_envs(vector_class)


def uninstrument_gymnasium() -> None:
    """Put back exactly the functions :func:`instrument_gymnasium` replaced."""
    with _patch_lock:
        for module, name, original, proxy in reversed(_patches):
            if vars(module).get(name) is proxy:
                setattr(module, name, original)
            else:
                logger.warning(
                    "agenttrace: %s.%s was replaced after agenttrace patched it; left as it is",
                    module.__name__,
                    name,
                )
        _patches.clear()


def _traced_make(
    wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict, *, options: dict
) -> Any:
    if _in_make.get():
        return wrapped(*args, **kwargs)
    token = _in_make.set(True)
    try:
        env = wrapped(*args, **kwargs)
    finally:
        _in_make.reset(token)
    if not isinstance(env, gymnasium.Env) or isinstance(env, TracedEnv):
        return env
    try:
        return TracedEnv(env, **options)
    except Exception:
        _internal_error("wrapping an env made by gymnasium.make")
        return env


# --- dm_env ----------------------------------------------------------------------------------

_DmEnvironment: Any = dm_env.Environment if dm_env is not None else object


class _Forwarding:
    """Attribute reads and writes the wrapper does not define go to the wrapped environment."""

    _at_env: Any

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_at_") or name == "_agenttrace":
            raise AttributeError(name)  # not set yet (e.g. during unpickling)
        return getattr(self._at_env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_at_") or name == "_agenttrace" or hasattr(type(self), name):
            object.__setattr__(self, name, value)
        else:
            setattr(self._at_env, name, value)

    @property
    def __wrapped__(self) -> Any:
        """The wrapped environment."""
        return self._at_env

    @property
    def agenttrace_episode_id(self) -> str | None:
        """Id of the episode in progress, or of the last one (None before the first reset)."""
        return self._agenttrace.last_episode_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._at_env!r})"


def _check_env(env: Any, wrapper: str, methods: tuple[str, ...]) -> None:
    missing = [name for name in methods if not callable(getattr(env, name, None))]
    if missing:
        raise TypeError(
            f"{wrapper} needs an environment with {', '.join(methods)}; "
            f"{type(env).__name__} has no {', '.join(missing)}"
        )


class TracedDmEnv(_Forwarding, _DmEnvironment):  # type: ignore[misc, valid-type]
    """A ``dm_env.Environment`` that records every episode played on the wrapped one.

    ``reset()`` (a ``FIRST`` TimeStep) opens the episode; each ``step(action)`` is a
    ``timestep`` with its ``env.step``; a ``LAST`` step ends it ``completed`` when its discount
    is 0, else ``truncated``. As dm_env says, a ``step()`` with no episode open (a fresh
    environment, or after ``LAST``) starts a new sequence: it is recorded as the new episode's
    reset. Specs and any other attribute pass through to the wrapped environment.
    """

    def __init__(
        self,
        env: Any,
        *,
        task_id: str | None = None,
        env_name: str | None = None,
        agent_name: str | None = None,
        policy_version: str | None = None,
        attributes: dict[str, Any] | None = None,
        collector: Collector | None = None,
    ) -> None:
        if dm_env is None:
            raise ImportError("TracedDmEnv needs dm-env: " + install_hint("dm-env"))
        _check_env(env, "TracedDmEnv", ("reset", "step"))
        self._at_env = env
        self._agenttrace = _Recorder(
            self,
            extractor="dm_env",
            episode_options=_episode_options(
                task_id, env_name or type(env).__name__, agent_name, policy_version, attributes
            ),
            collector=_checked_collector(collector),
        )

    def reset(self) -> Any:
        with self._agenttrace.reset_call() as call:
            timestep = self._at_env.reset()
            call.record(timestep)
        return timestep

    def step(self, action: Any) -> Any:
        recorder = self._agenttrace
        call = recorder.step_call(action) or recorder.reset_call()
        with call:
            timestep = self._at_env.step(action)
            call.record(timestep)
        return timestep

    def observation_spec(self) -> Any:
        return self._at_env.observation_spec()

    def action_spec(self) -> Any:
        return self._at_env.action_spec()

    def reward_spec(self) -> Any:
        return self._at_env.reward_spec()

    def discount_spec(self) -> Any:
        return self._at_env.discount_spec()

    def close(self) -> None:
        """An episode still open ends ``aborted``; then the environment closes."""
        self._agenttrace.end_open(sc.STATUS_ABORTED)
        close = getattr(self._at_env, "close", None)
        if callable(close):
            close()


# --- ARES-style async environments -----------------------------------------------------------


class TrajectoryCollectingEnvironment(_Forwarding):
    """Records every episode of an ARES-style async environment; works for any such env.

    The wrapped object has async ``reset()``, ``step(action)`` and ``close()`` and may be an
    async context manager; ``reset``/``step`` return dm_env-style ``TimeStep(step_type,
    reward, discount, observation)``. Calls keep their signatures (arguments pass through as
    given) and every other attribute is the wrapped environment's. Episode ends: ``LAST``
    ``completed`` (discount 0) or ``truncated`` (other discount); ``reset()`` while open
    ``abandoned``; ``close()``/``__aexit__`` while open ``aborted``; ``reset()``/``step()``
    raises ``errored``; cancelled during ``reset()``/``step()`` ``cancelled``. A ``step()``
    with no episode open starts a new sequence, as in dm_env (recorded as its reset).

    ``collector(trajectory)`` is called with each finished episode as it ends.
    """

    def __init__(
        self,
        env: Any,
        collector: Collector | None = None,
        *,
        task_id: str | None = None,
        env_name: str | None = None,
        agent_name: str | None = None,
        policy_version: str | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        _check_env(env, "TrajectoryCollectingEnvironment", ("reset", "step"))
        self._at_env = env
        self._agenttrace = _Recorder(
            self,
            extractor="dm_env",
            episode_options=_episode_options(
                task_id, env_name or type(env).__name__, agent_name, policy_version, attributes
            ),
            collector=_checked_collector(collector),
        )

    async def reset(self, *args: Any, **kwargs: Any) -> Any:
        with self._agenttrace.reset_call(kwargs.get("seed")) as call:
            timestep = await self._at_env.reset(*args, **kwargs)
            call.record(timestep)
        return timestep

    async def step(self, *args: Any, **kwargs: Any) -> Any:
        recorder = self._agenttrace
        call = recorder.step_call(_action_of(args, kwargs)) or recorder.reset_call()
        with call:
            timestep = await self._at_env.step(*args, **kwargs)
            call.record(timestep)
        return timestep

    async def close(self, *args: Any, **kwargs: Any) -> Any:
        """An episode still open ends ``aborted``; then the environment closes."""
        self._agenttrace.end_open(sc.STATUS_ABORTED)
        return await self._at_env.close(*args, **kwargs)

    async def __aenter__(self) -> Any:
        enter = getattr(type(self._at_env), "__aenter__", None)
        if enter is None:
            return self
        entered = await enter(self._at_env)
        return self if entered is self._at_env else entered

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        self._agenttrace.end_open(sc.STATUS_ABORTED)
        exit_ = getattr(type(self._at_env), "__aexit__", None)
        if exit_ is None:
            return None
        return await exit_(self._at_env, exc_type, exc, tb)


__all__ = [
    "TracedDmEnv",
    "TracedEnv",
    "TrajectoryCollectingEnvironment",
    "instrument_gymnasium",
    "uninstrument_gymnasium",
]
