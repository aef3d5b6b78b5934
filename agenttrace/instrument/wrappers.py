"""Environment wrappers: agenttrace episodes from an environment, with the user's loop unchanged.

Wrap the environment once and every episode played on it becomes an ``episode`` span with
``env.reset`` and one ``timestep > env.step`` per step, from which the trajectory processor
rebuilds the trajectory::

    from agenttrace.instrument.wrappers import TracedEnv

    env = TracedEnv(gym.make("CartPole-v1"), task_id="balance")
    obs, info = env.reset(seed=0)  # opens the episode
    ...  # env.step(action) as usual; the episode ends with the terminal step

* :class:`TracedEnv` wraps a ``gymnasium.Env`` (a ``gymnasium.Wrapper``);
  :func:`instrument_gymnasium` makes ``gymnasium.make`` return traced environments and
  ``gymnasium.make_vec`` traced vector environments (:class:`~agenttrace.instrument.vector.
  TracedVectorEnv`), and tells the sub-environments of a vector env built by hand which one
  they are.
* :class:`TracedDmEnv` wraps a ``dm_env.Environment``.
* :class:`TrajectoryCollectingEnvironment` wraps an ARES-style async environment (async
  ``reset``/``step``/``close``, ``async with``, dm_env-style ``TimeStep`` results).

An episode spans many calls, so no context is held between them: each call of the wrapped
environment makes its own spans current while it runs and restores the caller's context
before it returns (spans the environment creates inside ``step`` nest under its
``env.step``). Episode ends: terminal step ``completed``, truncated step ``truncated``,
``reset()`` while an episode is open ``abandoned`` (for the old one), ``close()`` while open
``aborted``, an exception from the environment ``errored`` (the exception passes through
unchanged), ``asyncio.CancelledError``/``KeyboardInterrupt`` ``cancelled``. Every wrapper
here records through one recorder (:mod:`agenttrace.instrument.env_recorder`).

``collector`` (every wrapper takes one) is called with each finished :class:`Trajectory` of
that wrapper, on the thread that ended the episode, right when it ended. It is the same
trajectory the sinks get: rebuilt by the one assembler from the same span records, which a
small span processor (added once per TracerProvider) keeps for watched episodes only
(:mod:`agenttrace.instrument.wrapper_options`, with the other keywords the wrappers share).

docs/env-wrappers.md is the user guide.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import wrapt

from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._version import install_hint
from agenttrace.instrument.env_identity import env_display_name, env_spec_json
from agenttrace.instrument.env_recorder import _Recorder
from agenttrace.instrument.extractors import _UNSET
from agenttrace.instrument.proxies import PatchProxy
from agenttrace.instrument.vector import TracedVectorEnv
from agenttrace.instrument.wrapper_options import Collector, _checked_collector, _episode_options

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
        for name, traced in (("make", _traced_make), ("make_vec", traced_make_vec)):
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
    index_library_vector_envs_on_import()  # (takes the lock itself)


def _index_sub_envs(vector_class: type) -> None:
    """Patch ``vector_class(env_fns, ...)`` so each env_fn's env knows its position (called
    with ``_patch_lock`` held, while instrumented)."""
    original = vars(vector_class)["__init__"]
    if isinstance(original, wrapt.FunctionWrapper):
        return
    proxy = PatchProxy(original, indexed_vector_init)
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


# --- vector envs: make_vec and the sub-environments of vector envs built by hand ----------


class _IndexedEnvFn:
    """A vector env's ``env_fn`` that says which sub-environment it makes, and whether the
    vector env was made inside a traced ``make_vec`` (whose batched results record its
    sub-environments: they must not be recorded again where they run).

    ``AsyncVectorEnv`` sends env_fns to its worker processes with cloudpickle, so this
    travels with the env_fn: a worker forked from this process inherits both settings
    anyway, and one started by spawn or forkserver (a fresh interpreter, instrumented by
    itself or not at all) gets them from here. Picklable when the function it holds is.
    """

    def __init__(self, env_fn: Callable[[], Any], index: int, in_make: bool = False) -> None:
        self.env_fn = env_fn
        self.index = index
        self.in_make = in_make

    def __call__(self) -> Any:
        token = _sub_env_index.set(self.index)
        in_make = _in_make.set(True) if self.in_make else None
        try:
            return self.env_fn()
        finally:
            if in_make is not None:
                _in_make.reset(in_make)
            _sub_env_index.reset(token)


def indexed_vector_init(
    wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict
) -> Any:
    """``SyncVectorEnv``/``AsyncVectorEnv(env_fns, ...)`` with each env_fn indexed, so the
    sub-environments ``gymnasium.make`` traces carry ``rl.env.index``; inside a traced
    ``make_vec`` they are not traced at all, wherever they run."""
    try:
        env_fns = args[0] if args else kwargs["env_fns"]
        in_make = _in_make.get()
        indexed = [_IndexedEnvFn(fn, i, in_make) for i, fn in enumerate(env_fns)]
        if args:
            args = (indexed, *args[1:])
        else:
            kwargs = {**kwargs, "env_fns": indexed}
    except Exception:
        pass  # (not the signature we know: construct as given)
    return wrapped(*args, **kwargs)


#: Vector env classes of RL libraries that take ``env_fns`` first, as gymnasium's do:
#: (module, class). Their sub-envs made by ``gymnasium.make`` get ``rl.env.index`` too.
LIBRARY_VECTOR_ENVS = (
    ("stable_baselines3.common.vec_env.dummy_vec_env", "DummyVecEnv"),
    ("stable_baselines3.common.vec_env.subproc_vec_env", "SubprocVecEnv"),
)
_library_hooks_registered = False


def index_library_vector_envs_on_import() -> None:
    """Index the sub-envs of :data:`LIBRARY_VECTOR_ENVS` once each library is imported (now
    if it is), while gymnasium is instrumented. The hooks are registered once per process."""
    global _library_hooks_registered
    if _library_hooks_registered:  # (they look at whether gymnasium is instrumented)
        for module_name, class_name in LIBRARY_VECTOR_ENVS:
            module = sys.modules.get(module_name)
            if module is not None:
                _index_library_class(module, class_name)
        return
    _library_hooks_registered = True
    for module_name, class_name in LIBRARY_VECTOR_ENVS:
        hook = functools.partial(_index_library_class, class_name=class_name)
        wrapt.register_post_import_hook(hook, module_name)


def _index_library_class(module: Any, class_name: str) -> None:
    vector_class = getattr(module, class_name, None)
    if isinstance(vector_class, type):
        try:
            index_sub_envs_if_instrumented(vector_class)
        except Exception:
            _internal_error(f"indexing the sub-envs of {module.__name__}.{class_name}")


def traced_make_vec(
    wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict, *, options: dict
) -> Any:
    if _in_make.get():
        return wrapped(*args, **kwargs)
    token = _in_make.set(True)  # its sub-environments are recorded from the batched results
    try:
        envs = wrapped(*args, **kwargs)
    finally:
        _in_make.reset(token)
    if not isinstance(envs, gymnasium.vector.VectorEnv) or _is_traced_vector(envs):
        return envs
    try:
        return TracedVectorEnv(envs, **options)
    except Exception:
        _internal_error("wrapping a vector env made by gymnasium.make_vec")
        return envs


def _is_traced_vector(envs: Any) -> bool:
    while envs is not None:
        if isinstance(envs, TracedVectorEnv):
            return True
        envs = getattr(envs, "env", None)
    return False


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


def _action_of(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The action of a ``step(*args, **kwargs)`` call, whatever the parameter is called."""
    if args:
        return args[0]
    if "action" in kwargs:
        return kwargs["action"]
    if len(kwargs) == 1:
        return next(iter(kwargs.values()))
    return _UNSET


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
