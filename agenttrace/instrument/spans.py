"""The tracing API: episode, env.reset, timestep, agent.act, env.step and LLM call spans.

Each of :func:`episode`, :func:`env_reset`, :func:`timestep`, :func:`agent_act`,
:func:`env_step` and :func:`llm_call` returns a single-use *scope* that is

* a context manager (``with at.timestep() as step: ...``) yielding a handle with
  ``record(...)`` helpers, and
* a decorator (``@at.env_step`` or ``@at.env_step(extractor="dm_env")``) for sync and async
  functions, generators and async generators. Decorated functions record their argument and
  return value the way the role suggests (env.step: the action in, the step result out).

Generators never hold a span's context across ``yield``: the context is attached on each
resume and detached before control returns to the caller, so closing a generator early (or
from another task) neither leaks the span into the caller nor detaches the wrong context.

The user's exceptions pass through unchanged (and mark the span and the episode errored);
``asyncio.CancelledError`` and ``KeyboardInterrupt`` mark the episode ``cancelled``. A failure
inside agenttrace is logged and never reaches the user's code.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import uuid
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._logging import warn_once as _warn_once
from agenttrace._secrets import REDACTED, is_secret_name
from agenttrace.instrument.arguments import CallArguments, Parameters
from agenttrace.instrument.extractors import _UNSET, EXTRACTORS, extract_reset
from agenttrace.instrument.llm_results import read_result
from agenttrace.trajectory import codec

logger = logging.getLogger("agenttrace")

_FRAME_KEY = otel_context.create_key("agenttrace.frame")


class _EpisodeState:
    """Per-episode bookkeeping shared by the episode's descendant spans."""

    __slots__ = (
        "act_open",
        "env_key",
        "episode_id",
        "folded_below",
        "folded_return",
        "handle",
        "last_flags",
        "length",
        "next_index",
        "reset_error",
        "rewards",
        "runtime",
        "status",
    )

    def __init__(self, episode_id: str, runtime: pipeline.AgentTrace) -> None:
        self.episode_id = episode_id
        self.runtime = runtime
        self.next_index = 0
        self.length = 0
        # An agent.act outside a timestep took next_index and no env.step has used it yet.
        self.act_open = False
        # Per step index: (priority of the recording role, value). The assembler prefers
        # env.step over agent.act over timestep; so does this, so the return recorded on the
        # episode span equals the sum of the rebuilt steps' rewards.
        # Steps well behind the newest are folded into folded_return, so a million-step
        # episode keeps a few hundred entries (a reward for a folded step is not recorded).
        self.rewards: dict[int, tuple[int, float]] = {}
        self.folded_return = 0.0
        self.folded_below = 0
        # (index, priority, terminated, truncated) of the newest step that recorded flags.
        self.last_flags: tuple[int, int, bool, bool] | None = None
        self.status: str | None = None
        self.env_key: int | None = None
        self.handle: EpisodeScope | None = None
        # An exception that ended an env.reset span of this episode (the runner may catch it).
        self.reset_error: Exception | None = None

    @property
    def return_(self) -> float:
        return float(self.folded_return + sum(reward for _, reward in self.rewards.values()))

    def record_reward(self, index: int, priority: int, reward: float) -> None:
        """Keep the reward of the highest-priority role that recorded one for step ``index``."""
        rewards = self.rewards
        if index < self.folded_below:
            return
        known = rewards.get(index)
        if known is None or known[0] <= priority:
            rewards[index] = (priority, reward)
        if len(rewards) > _REWARDS_KEPT:
            self.folded_below = max(self.folded_below, self.next_index - _REWARDS_KEPT // 2)
            for old in [i for i in rewards if i < self.folded_below]:
                self.folded_return += rewards.pop(old)[1]

    def record_flags(self, index: int, priority: int, terminated: bool, truncated: bool) -> None:
        last = self.last_flags
        if last is None or index > last[0] or (index == last[0] and priority >= last[1]):
            self.last_flags = (index, priority, terminated, truncated)

    def last_step_flags(self) -> tuple[bool, bool]:
        """(terminated, truncated) of the episode's last step."""
        last = self.last_flags
        if last is None or last[0] != self.length - 1:
            return (False, False)
        return (last[2], last[3])


#: Step rewards an episode keeps by index before folding the older half into one sum.
_REWARDS_KEPT = 512


class _Frame:
    """What child spans need from the context: the episode and the current step index."""

    __slots__ = ("episode", "index")

    def __init__(self, episode: _EpisodeState | None, index: int | None) -> None:
        self.episode = episode
        self.index = index


def current_episode_id() -> str | None:
    """Id of the episode the current context belongs to (None outside episodes)."""
    frame = otel_context.get_value(_FRAME_KEY)
    if isinstance(frame, _Frame) and frame.episode is not None:
        return frame.episode.episode_id
    return None


# --- the scope: one span, usable as context manager and as decorator -------------------------


class _Scope:
    """One span of a given role. Subclasses decide name, attributes and what gets recorded."""

    role: str = ""
    kind = SpanKind.INTERNAL
    #: A context key set (to True) in this span's context while it is current, so code running
    #: inside can tell (the auto-instrumentor uses it to trace a call nested in a call of the
    #: same target once, not twice).
    _context_mark: str | None = None
    # Attributes recorded but not yet on the span (see trace_callable); None: write at once.
    _pending: dict[str, Any] | None = None
    #: The object (or class) a traced method was called on, when trace_callable knows it.
    _receiver: Any = None

    def __init__(
        self,
        attributes: dict[str, Any] | None = None,
        *,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        self._attributes = _safe_attributes(attributes) if attributes else {}
        self._tracer_provider = tracer_provider
        self._runtime = runtime
        self._span: Span | None = None
        self._context: otel_context.Context | None = None
        self._token: object | None = None
        self._frame: _Frame | None = None
        self._ended = False

    # configuration copied into each call of a decorated function
    def _clone(self) -> _Scope:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._span = clone._context = clone._token = clone._frame = None
        clone._ended = False
        return clone

    # --- lifecycle --------------------------------------------------------------------------

    def _resolve_runtime(self) -> pipeline.AgentTrace:
        if self._runtime is None:
            self._runtime = pipeline.get_default()
        return self._runtime

    def _tracer(self, runtime: pipeline.AgentTrace) -> trace.Tracer:
        if self._tracer_provider is not None:
            return self._tracer_provider.get_tracer(sc.INSTRUMENTATION_SCOPE)
        return runtime.tracer

    def start(self) -> _Scope:
        """Start the span without making it current (``with scope:`` makes it current)."""
        if self._span is not None:
            return self
        try:
            runtime = self._resolve_runtime()
            if not runtime.enabled:
                return self
            parent = otel_context.get_current()
            parent_frame = parent.get(_FRAME_KEY)
            if not isinstance(parent_frame, _Frame):
                parent_frame = None
            attributes = dict(self._attributes)
            frame = self._prepare(runtime, parent_frame, attributes)
            self._frame = frame
            if frame is not None and frame.episode is not None:
                attributes[sc.EPISODE_ID] = frame.episode.episode_id
            span = self._tracer(runtime).start_span(
                self._span_name(), context=parent, kind=self.kind, attributes=attributes
            )
            ctx = trace.set_span_in_context(span, parent)
            # That Context is a fresh copy nobody else holds yet: adding our keys to it in
            # place saves a copy of the whole context per key (Context forbids item
            # assignment only to stop changes to contexts already shared).
            if frame is not parent_frame:
                dict.__setitem__(ctx, _FRAME_KEY, frame)
            if self._context_mark is not None:
                dict.__setitem__(ctx, self._context_mark, True)
            self._span, self._context = span, ctx
            self._started()
        except Exception:
            _internal_error(f"starting a {self.role} span")
        return self

    def _attach(self) -> None:
        if self._context is not None:
            self._token = otel_context.attach(self._context)

    def _detach(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            otel_context.detach(token)

    def end(self, exc: BaseException | None = None) -> None:
        """End the span; ``exc`` is the exception that ended the block, if any."""
        if self._ended or self._span is None:
            self._ended = True
            return
        self._ended = True
        span = self._span
        try:
            if exc is not None and isinstance(exc, Exception) and not _is_cancel(exc):
                span.record_exception(exc, escaped=True)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            self._finishing(exc)
        except Exception:
            _internal_error(f"ending a {self.role} span")
        finally:
            pending, self._pending = self._pending, None
            if pending:
                try:
                    span.set_attributes(pending)
                except Exception:
                    _internal_error(f"ending a {self.role} span")
            span.end()

    def __enter__(self) -> _Scope:
        self.start()
        self._attach()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._detach()
        self.end(exc)

    async def __aenter__(self) -> _Scope:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    # --- hooks for subclasses -------------------------------------------------------------

    def _span_name(self) -> str:
        return self.role

    def _prepare(
        self, runtime: pipeline.AgentTrace, frame: _Frame | None, attributes: dict[str, Any]
    ) -> _Frame | None:
        """Set role-specific start attributes; return the frame children will see."""
        return frame

    def _started(self) -> None:
        pass

    def _finishing(self, exc: BaseException | None) -> None:
        pass

    def _before_start(self, arguments: CallArguments) -> None:
        """Take from the call's arguments what the span must know when it starts (an
        episode's id). Only scopes that override it pay for binding arguments that early."""

    def _on_call(self, arguments: CallArguments) -> None:
        """Record what the decorated call was given."""

    def _on_return(self, result: Any) -> None:
        """Record what the decorated call returned."""

    # --- handle API -----------------------------------------------------------------------

    @property
    def span(self) -> Span:
        """The OpenTelemetry span (a non-recording one when tracing is off)."""
        return self._span if self._span is not None else trace.INVALID_SPAN

    @property
    def episode_id(self) -> str | None:
        frame = self._frame
        return frame.episode.episode_id if frame and frame.episode else None

    def set_attribute(self, key: str, value: Any) -> None:
        if self._span is not None and not is_secret_name(key):
            self._span.set_attribute(key, value)

    def _content(self, key: str, value: Any) -> str | None:
        """JSON text for a content attribute, after the content policy and redaction."""
        runtime = self._runtime
        if runtime is None or not runtime.capture_content:
            return None
        if runtime.redact is not None:
            try:
                value = runtime.redact(key, value)
            except Exception:
                _internal_error("the redact hook (content withheld)")
                return codec.dumps(REDACTED)
        return codec.dumps(value, redact_secrets=True)

    # --- decorator ------------------------------------------------------------------------

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if self._span is not None:
            raise TypeError("this scope already started; use a fresh one as a decorator")
        return trace_callable(self, func)


class CallHooks:
    """What every traced call of one function does before and after the function runs.

    The single implementation of per-call tracing: the decorators (:func:`trace_callable`)
    and the auto-instrumentor's wrappers (agenttrace.instrument.auto) both use it, so
    arguments (``_on_call``), return values (``_on_return``) and exceptions are handled the
    same way. ``receiver=True`` says the first positional argument is the object or class a
    method is bound to: it is never taken for an observation or action whatever its name.
    """

    __slots__ = ("early", "name", "parameters", "reads_arguments", "receiver", "template")

    def __init__(self, template: _Scope, func: Callable[..., Any], *, receiver: bool) -> None:
        self.template = template
        self.receiver = receiver
        self.parameters = Parameters.of(func, skip_receiver=receiver)
        self.name = getattr(func, "__qualname__", None) or repr(func)
        # Roles that read no arguments (timestep) skip looking at them on every call.
        self.reads_arguments = type(template)._on_call is not _Scope._on_call
        self.early = type(template)._before_start is not _Scope._before_start

    def begin(self, args: tuple, kwargs: dict) -> _Scope:
        """A started scope for a call with these arguments (receiver included, if any)."""
        if self.receiver and args:
            return self.begin_bound(args[0], args[1:], kwargs)
        return self.begin_bound(None, args, kwargs)

    def begin_bound(self, receiver: Any, args: tuple, kwargs: dict) -> _Scope:
        """:meth:`begin` for a call whose receiver is already split off ``args``."""
        scope = self.template._clone()
        if receiver is not None:
            scope._receiver = receiver
        if self.early:
            try:
                scope._before_start(CallArguments(self.parameters, args, kwargs))
            except Exception:
                _internal_error(f"reading arguments of {self.name}")
        scope.start()
        if scope._span is not None:
            # What the call records (arguments now, the result at the end) reaches the span
            # in one set_attributes at its end, not one per record.
            scope._pending = {}
            if self.reads_arguments:
                try:
                    scope._on_call(CallArguments(self.parameters, args, kwargs))
                except Exception:
                    _internal_error(f"recording arguments of {self.name}")
        return scope

    def finish(self, scope: _Scope, result: Any) -> None:
        if scope._span is not None:
            try:
                scope._on_return(result)
            except Exception:
                _internal_error(f"recording the result of {self.name}")

    def run(self, scope: _Scope, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Call a sync ``func`` with the scope current; end the scope with its outcome."""
        scope._attach()
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            scope._detach()
            scope.end(exc)
            raise
        self.finish(scope, result)
        scope._detach()
        scope.end()
        return result


def trace_callable(
    template: _Scope, func: Callable[..., Any], *, receiver: bool = False
) -> Callable[..., Any]:
    """``func`` traced with a fresh clone of ``template`` per call (see :class:`CallHooks`).

    The result is a function of the same kind as ``func`` (sync, coroutine, generator or
    async generator function).
    """
    hooks = CallHooks(template, func, receiver=receiver)
    begin, run = hooks.begin, hooks.run

    if inspect.isasyncgenfunction(func):
        return functools.wraps(func)(_async_generator_wrapper(func, begin))
    if inspect.isgeneratorfunction(func):
        return functools.wraps(func)(_generator_wrapper(func, begin))
    if inspect.iscoroutinefunction(func):
        finish = hooks.finish

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = begin(args, kwargs)
            scope._attach()
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:
                scope._detach()
                scope.end(exc)
                raise
            finish(scope, result)
            scope._detach()
            scope.end()
            return result

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run(begin(args, kwargs), func, args, kwargs)

    return wrapper


def _is_cancel(exc: BaseException) -> bool:
    return isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))


def _generator_wrapper(func: Callable[..., Any], begin: Callable) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        scope = begin(args, kwargs)
        scope._attach()
        try:
            inner = func(*args, **kwargs)
        finally:
            scope._detach()
        error: BaseException | None = None
        try:
            to_send: Any = None
            throw: BaseException | None = None
            while True:
                scope._attach()
                try:
                    item = inner.throw(throw) if throw is not None else inner.send(to_send)
                except StopIteration as stop:
                    return stop.value
                finally:
                    scope._detach()
                throw = None
                try:
                    to_send = yield item
                except GeneratorExit:
                    raise
                except BaseException as exc:  # thrown in by the caller: pass it on inside
                    throw = exc
        except GeneratorExit:
            scope._attach()  # the generator's own cleanup runs inside its span
            try:
                inner.close()  # closed early: not an error
            finally:
                scope._detach()
        except BaseException as exc:
            error = exc
            raise
        finally:
            scope.end(error)

    return wrapper


def _async_generator_wrapper(func: Callable[..., Any], begin: Callable) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        scope = begin(args, kwargs)
        scope._attach()
        try:
            inner = func(*args, **kwargs)
        finally:
            scope._detach()
        error: BaseException | None = None
        try:
            to_send: Any = None
            throw: BaseException | None = None
            while True:
                scope._attach()
                try:
                    if throw is not None:
                        item = await inner.athrow(throw)
                    else:
                        item = await inner.asend(to_send)
                except StopAsyncIteration:
                    return
                finally:
                    scope._detach()
                throw = None
                try:
                    to_send = yield item
                except GeneratorExit:
                    raise
                except BaseException as exc:
                    throw = exc
        except GeneratorExit:
            scope._attach()
            try:
                await inner.aclose()
            finally:
                scope._detach()
        except BaseException as exc:
            error = exc
            raise
        finally:
            scope.end(error)

    return wrapper


def _safe_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """Drop attributes named like secrets; keep OTel-compatible values, JSON-encode others."""
    clean: dict[str, Any] = {}
    for key, value in attributes.items():
        if is_secret_name(key) or value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            clean[key] = value
        elif (
            isinstance(value, (list, tuple))
            and all(isinstance(v, (str, bool, int, float)) for v in value)
            and len({type(v) for v in value}) <= 1
        ):
            clean[key] = tuple(value)
        else:
            clean[key] = codec.dumps(value, redact_secrets=True)
    return clean


# --- step-like scopes: record observation, action, reward, termination ----------------------


class StepScope(_Scope):
    """Handle of env.reset, timestep, agent.act and env.step spans."""

    #: Rank of this role's reward/termination for the step (0: not part of a step).
    _priority = 0

    def __init__(
        self,
        index: int | None = None,
        *,
        extractor: str | Callable[[Any], Any] = "auto",
        attributes: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        self._index = index
        if isinstance(extractor, str):
            if extractor not in EXTRACTORS:
                raise ValueError(
                    f"unknown extractor {extractor!r}; built-in: {', '.join(EXTRACTORS)}"
                )
            extractor = EXTRACTORS[extractor]
        self._extractor = extractor

    @property
    def index(self) -> int | None:
        return self._frame.index if self._frame is not None else None

    def record(
        self,
        *,
        observation: Any = _UNSET,
        action: Any = _UNSET,
        reward: Any = _UNSET,
        terminated: Any = _UNSET,
        truncated: Any = _UNSET,
        done: Any = _UNSET,
        discount: Any = _UNSET,
        info: Any = _UNSET,
    ) -> None:
        """Record what this span saw; only the given fields are set."""
        span = self._span
        if span is None:
            return
        try:
            attrs: dict[str, Any] = {}
            for key, value in ((sc.OBSERVATION, observation), (sc.ACTION, action), (sc.INFO, info)):
                if value is not _UNSET:
                    text = self._content(key, value)
                    if text is not None:
                        attrs[key] = text
            episode = self._frame.episode if self._frame else None
            if reward is not _UNSET and reward is not None:
                reward = float(reward)
                if not math.isfinite(reward):
                    _warn_once(
                        f"nonfinite:{episode.episode_id if episode else ''}",
                        "agenttrace: episode %s step %s has a non-finite reward (%r); it is "
                        "recorded as is and makes the return %r too",
                        episode.episode_id if episode else "?",
                        self.index,
                        reward,
                        reward,
                    )
                attrs[sc.REWARD] = reward
                index = self.index
                if episode is not None and index is not None and self._priority:
                    episode.record_reward(index, self._priority, reward)
            if done is not _UNSET and terminated is _UNSET and truncated is _UNSET:
                terminated, truncated = bool(done), False
            for key, value in ((sc.TERMINATED, terminated), (sc.TRUNCATED, truncated)):
                if value is not _UNSET and value is not None:
                    attrs[key] = bool(value)
            if sc.TERMINATED in attrs or sc.TRUNCATED in attrs:
                term, trunc = attrs.get(sc.TERMINATED, False), attrs.get(sc.TRUNCATED, False)
                attrs[sc.DONE] = term or trunc
                index = self.index
                if episode is not None and index is not None and self._priority:
                    episode.record_flags(index, self._priority, term, trunc)
            if discount is not _UNSET and discount is not None:
                attrs[sc.DISCOUNT] = float(discount)
            if self._pending is not None:
                self._pending.update(attrs)
            elif attrs:
                span.set_attributes(attrs)
        except Exception:
            _internal_error(f"recording on a {self.role} span")

    def _record_content(self, key: str, value: Any) -> None:
        """``record()`` of one content field (observation, action), without its other work:
        what a decorated call records from its argument or return value."""
        if self._span is None:
            return
        try:
            text = self._content(key, value)
            if text is None:
                return
            if self._pending is not None:
                self._pending[key] = text
            else:
                self._span.set_attribute(key, text)
        except Exception:
            _internal_error(f"recording on a {self.role} span")

    def record_result(self, result: Any) -> Any:
        """Record an environment step result of any built-in shape; returns it unchanged."""
        if self._span is None:
            return result
        try:
            found = self._extractor(result)
        except Exception:
            _internal_error("the step extractor")
            found = None
        if found is None:
            self.record(observation=result)
            return result
        self.record(
            observation=found.observation,
            reward=found.reward,
            terminated=found.terminated if found.terminated is not None else _UNSET,
            truncated=found.truncated if found.truncated is not None else _UNSET,
            discount=found.discount if found.discount is not None else _UNSET,
            info=found.info,
        )
        return result

    def _step_frame(self, frame: _Frame | None, index: int, attributes: dict[str, Any]) -> _Frame:
        attributes[sc.TIMESTEP_INDEX] = index
        if frame is not None and frame.index == index:
            return frame  # inside its timestep: children see the same frame
        return _Frame(frame.episode if frame else None, index)


class EnvResetScope(StepScope):
    role = sc.ENV_RESET

    def _on_call(self, arguments: CallArguments) -> None:
        seed = arguments.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            self.set_attribute(sc.EPISODE_SEED, seed)

    def record_result(self, result: Any) -> Any:
        observation, info = extract_reset(result)
        self.record(observation=observation, info=info)
        return result

    def _on_return(self, result: Any) -> None:
        self.record_result(result)

    def _finishing(self, exc: BaseException | None) -> None:
        episode = self._frame.episode if self._frame else None
        if episode is not None and isinstance(exc, Exception) and not _is_cancel(exc):
            episode.reset_error = exc


class TimestepScope(StepScope):
    role = sc.TIMESTEP
    _priority = 1

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        episode = frame.episode if frame else None
        index = self._index
        if index is None:
            index = episode.next_index if episode else 0
        if episode is not None:
            episode.next_index = max(episode.next_index, index + 1)
            episode.length = max(episode.length, index + 1)
            episode.act_open = False  # (an agent.act before it took this index: it joins)
        return self._step_frame(frame, index, attributes)

    def _on_return(self, result: Any) -> None:
        if self._extractor(result) is not None:
            self.record_result(result)


class AgentActScope(StepScope):
    role = sc.AGENT_ACT
    _priority = 2

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        index = self._index
        episode = frame.episode if frame else None
        if index is None:
            if frame is not None and frame.index is not None:
                index = frame.index
            elif episode is not None:
                # A turn outside a timestep: an agent.act that no env.step followed was a
                # step of its own, so this one starts the next (docs/tracing-api.md).
                if episode.act_open:
                    episode.next_index += 1
                index = episode.next_index
                episode.act_open = True
            else:
                index = 0
        if episode is not None:
            # The step exists from here on, even if the env.step it pairs with never comes
            # (the agent was cancelled): it counts in the length. next_index stays, so that
            # env.step takes this index.
            episode.length = max(episode.length, index + 1)
        return self._step_frame(frame, index, attributes)

    def _on_call(self, arguments: CallArguments) -> None:
        observation = arguments.first(("observation", "obs", "state", "messages"))
        if observation is not _UNSET:
            self._record_content(sc.OBSERVATION, observation)

    def _on_return(self, result: Any) -> None:
        self._record_content(sc.ACTION, result)


class EnvStepScope(StepScope):
    role = sc.ENV_STEP
    _priority = 3

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        episode = frame.episode if frame else None
        index = self._index
        in_timestep = frame is not None and frame.index is not None
        if index is None:
            index = frame.index if in_timestep else (episode.next_index if episode else 0)
        if episode is not None and not in_timestep:
            episode.next_index = max(episode.next_index, index + 1)
            episode.length = max(episode.length, index + 1)
            episode.act_open = False
        return self._step_frame(frame, index, attributes)

    def _on_call(self, arguments: CallArguments) -> None:
        action = arguments.first(("action", "actions", "act"))
        if action is not _UNSET:
            self._record_content(sc.ACTION, action)

    def _on_return(self, result: Any) -> None:
        self.record_result(result)


# --- episode -------------------------------------------------------------------------------


class EpisodeScope(_Scope):
    """Handle of an episode span: id, running return and length, status and early ends."""

    role = sc.EPISODE

    def __init__(
        self,
        *,
        episode_id: str | None = None,
        task_id: str | None = None,
        env: Any = None,
        env_name: str | None = None,
        agent_name: str | None = None,
        policy_version: str | None = None,
        seed: int | None = None,
        attributes: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        self._episode_id = episode_id
        self._env = env
        for key, value in (
            (sc.TASK_ID, task_id),
            (sc.ENV_NAME, env_name),
            (sc.AGENT_NAME, agent_name),
            (sc.POLICY_VERSION, policy_version),
            (sc.EPISODE_SEED, seed),
        ):
            if value is not None:
                self._attributes[key] = value if isinstance(value, (int, float)) else str(value)
        if env is not None and sc.ENV_NAME not in self._attributes:
            name = _env_name(env)
            if name:
                self._attributes[sc.ENV_NAME] = name

    def _clone(self) -> EpisodeScope:
        clone = super()._clone()
        assert isinstance(clone, EpisodeScope)
        clone._episode_id = None  # each call of a decorated function is its own episode
        return clone

    #: Options a single call can give its own episode, before the span starts (the
    #: auto-instrumentor reads them from the call's arguments: ``episode_id=run.id``).
    PER_CALL_OPTIONS = ("episode_id", "policy_version", "agent_name", "env_name")

    def _set_per_call(self, option: str, value: Any) -> None:
        """This call's ``option`` (one of PER_CALL_OPTIONS); before ``start()``, None ignored.

        The id must be known when the span starts: the trajectory processor tracks the
        episode under it from then on. Other clones of the template are not affected.
        """
        if value is None or self._span is not None:
            return
        if option == "episode_id":
            text = str(value)
            if text:
                self._episode_id = text
            return
        key = {
            "policy_version": sc.POLICY_VERSION,
            "agent_name": sc.AGENT_NAME,
            "env_name": sc.ENV_NAME,
        }[option]
        scalar = isinstance(value, (int, float)) and not isinstance(value, bool)
        self._attributes = {**self._attributes, key: value if scalar else str(value)}

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        episode_id = self._episode_id or uuid.uuid4().hex
        attributes[sc.EPISODE_ID] = episode_id
        attributes.setdefault(sc.GEN_AI_CONVERSATION_ID, episode_id)
        state = _EpisodeState(episode_id, runtime)
        state.handle = self
        return _Frame(state, None)

    def _started(self) -> None:
        if self._env is not None:
            self._register_env(self._env)

    def _register_env(self, env: Any) -> None:
        """Remember the episode's env, ending an episode still open on it as abandoned."""
        if self._frame is None or self._frame.episode is None:
            return
        state = self._frame.episode
        runtime = state.runtime
        state.env_key = id(env)
        with runtime.env_lock:
            previous = runtime.open_episodes_by_env.get(state.env_key)
            runtime.open_episodes_by_env[state.env_key] = state
        if previous is not None and previous.handle is not None:
            previous.handle.end_as(sc.STATUS_ABANDONED)

    def _on_call(self, arguments: CallArguments) -> None:
        for name, key in (("task_id", sc.TASK_ID), ("seed", sc.EPISODE_SEED)):
            value = arguments.get(name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                self.set_attribute(key, value)
        env = arguments.get("env")
        if self._env is None and env is not None and hasattr(env, "step"):
            self._env = env
            name = _env_name(env)
            if name and sc.ENV_NAME not in self._attributes:
                self.set_attribute(sc.ENV_NAME, name)
            self._register_env(env)

    @property
    def id(self) -> str | None:
        return self.episode_id

    @property
    def return_(self) -> float:
        frame = self._frame
        return frame.episode.return_ if frame and frame.episode else 0.0

    @property
    def length(self) -> int:
        frame = self._frame
        return frame.episode.length if frame and frame.episode else 0

    def set_status(self, status: str) -> None:
        """Override the status the episode ends with (one of semconv.EPISODE_STATUSES)."""
        if status not in sc.EPISODE_STATUSES or status == sc.STATUS_INCOMPLETE:
            raise ValueError(
                f"unknown episode status {status!r}; use one of "
                f"{', '.join(s for s in sc.EPISODE_STATUSES if s != sc.STATUS_INCOMPLETE)}"
            )
        if self._frame is not None and self._frame.episode is not None:
            self._frame.episode.status = status

    def end_as(self, status: str, exc: BaseException | None = None) -> None:
        """End the episode now with ``status`` (e.g. abandoned, aborted); later ends no-op."""
        self.set_status(status)
        self.end(exc)

    def _finishing(self, exc: BaseException | None) -> None:
        state = self._frame.episode if self._frame else None
        if state is None or self._span is None:
            return
        if state.env_key is not None:
            runtime = state.runtime
            with runtime.env_lock:
                if runtime.open_episodes_by_env.get(state.env_key) is state:
                    del runtime.open_episodes_by_env[state.env_key]
        status = state.status
        if status is None:
            if exc is not None and _is_cancel(exc):
                status = sc.STATUS_CANCELLED
            elif isinstance(exc, Exception):
                status = sc.STATUS_ERRORED
            elif state.length == 0 and state.reset_error is not None:
                # The reset failed and the runner caught it (returning an empty trajectory
                # with its error, say): the episode errored, with the reset's exception.
                status = sc.STATUS_ERRORED
                error = state.reset_error
                self._span.record_exception(error)
                self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            else:
                terminated, _ = state.last_step_flags()
                if terminated or state.length == 0:
                    status = sc.STATUS_COMPLETED
                else:
                    status = sc.STATUS_TRUNCATED
        if status == sc.STATUS_ERRORED and exc is None and state.reset_error is None:
            self._span.set_status(Status(StatusCode.ERROR, "episode errored"))
        self._span.set_attributes(
            {
                sc.EPISODE_STATUS: status,
                sc.EPISODE_RETURN: state.return_,
                sc.EPISODE_LENGTH: state.length,
            }
        )


def _env_name(env: Any) -> str | None:
    spec = getattr(getattr(env, "unwrapped", env), "spec", None) or getattr(env, "spec", None)
    name = getattr(spec, "id", None)
    return name if isinstance(name, str) else None


# --- LLM calls -------------------------------------------------------------------------------


class LLMCallScope(_Scope):
    """A GenAI ``chat {model}`` span inside a step."""

    role = "llm"
    kind = SpanKind.CLIENT

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: str | None = None,
        operation: str = sc.GEN_AI_OPERATION_CHAT,
        attributes: dict[str, Any] | None = None,
        extractor: Callable[[Any], Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        # Reads the call's return value into what read_result understands (a target's
        # ``extractor=pkg.mod:func``); None: the value as it is.
        self._extractor = extractor
        self._model = model
        self._operation = operation
        self._attributes[sc.GEN_AI_OPERATION_NAME] = operation
        if model:
            self._attributes[sc.GEN_AI_REQUEST_MODEL] = model
        if provider:
            self._attributes[sc.GEN_AI_PROVIDER_NAME] = provider

    def _span_name(self) -> str:
        return sc.llm_span_name(self._model, self._operation)

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        if frame is not None and frame.index is not None:
            attributes[sc.TIMESTEP_INDEX] = frame.index
        return frame

    def record(
        self,
        *,
        input_messages: Any = _UNSET,
        output_messages: Any = _UNSET,
        response_model: str | None = None,
        finish_reasons: list[str] | tuple[str, ...] | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        response_id: str | None = None,
        tool_definitions: Any = _UNSET,
    ) -> None:
        """Record the request and response of the call (content follows the content policy)."""
        span = self._span
        if span is None:
            return
        try:
            attrs: dict[str, Any] = {}
            for key, value in (
                (sc.GEN_AI_INPUT_MESSAGES, input_messages),
                (sc.GEN_AI_OUTPUT_MESSAGES, output_messages),
                (sc.GEN_AI_TOOL_DEFINITIONS, tool_definitions),
            ):
                if value is not _UNSET:
                    text = self._content(key, value)
                    if text is not None:
                        attrs[key] = text
            if response_model:
                attrs[sc.GEN_AI_RESPONSE_MODEL] = response_model
            if finish_reasons is not None:
                attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = tuple(str(r) for r in finish_reasons)
            if input_tokens is not None:
                attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = int(input_tokens)
            if output_tokens is not None:
                attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = int(output_tokens)
            if response_id:
                attrs[sc.GEN_AI_RESPONSE_ID] = response_id
            if attrs:
                span.set_attributes(attrs)
        except Exception:
            _internal_error("recording an LLM call")

    def record_response(self, response: Any) -> Any:
        """Record what the model returned; returns it unchanged. Reads OpenAI
        ``ChatCompletion``/``Response`` objects and their dicts, plain dicts
        (``content``/``text``/``message``, ``finish_reason``, ``usage``, ``tool_calls``) and
        text (:mod:`agenttrace.instrument.llm_results`); a target's ``extractor`` reads it
        first when given."""
        if self._span is None:
            return response
        try:
            value = self._extractor(response) if self._extractor is not None else response
            fields = read_result(value)
            if fields:
                self.record(**fields)
        except Exception:
            _internal_error("recording an LLM response")
        return response

    def _on_call(self, call: CallArguments) -> None:
        arguments = call.flat()
        model = arguments.get("model")
        if isinstance(model, str) and self._model is None:
            self._model = model
            self.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)
            self._span.update_name(self._span_name())  # type: ignore[union-attr]
        messages = arguments.get("messages", arguments.get("prompt", _UNSET))
        tools = arguments.get("tools")
        self.record(
            input_messages=messages,
            tool_definitions=tools if tools is not None else _UNSET,
        )
        for name, key in sc.GEN_AI_REQUEST_PARAMETERS.items():
            value = arguments.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._span.set_attribute(key, value)  # type: ignore[union-attr]

    def _on_return(self, result: Any) -> None:
        self.record_response(result)


# --- public constructors ---------------------------------------------------------------------


def _bare_or_configured(factory: Callable[..., _Scope], args: tuple, kwargs: dict) -> Any:
    """Support ``@at.env_step`` as well as ``@at.env_step(...)`` and ``with at.env_step():``."""
    if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], int):
        return factory()(args[0])
    return factory(*args, **kwargs)


def episode(*args: Any, **kwargs: Any) -> Any:
    """An ``episode`` span. Keywords: episode_id, task_id, env, env_name, agent_name,
    policy_version, seed, attributes, tracer_provider."""
    return _bare_or_configured(EpisodeScope, args, kwargs)


def env_reset(*args: Any, **kwargs: Any) -> Any:
    """An ``env.reset`` span; record the initial observation and info on it."""
    return _bare_or_configured(EnvResetScope, args, kwargs)


def timestep(*args: Any, **kwargs: Any) -> Any:
    """A ``timestep`` span; the index counts up per episode unless given."""
    return _bare_or_configured(TimestepScope, args, kwargs)


def agent_act(*args: Any, **kwargs: Any) -> Any:
    """An ``agent.act`` span: the observation the agent acted on and the action it chose."""
    return _bare_or_configured(AgentActScope, args, kwargs)


def env_step(*args: Any, **kwargs: Any) -> Any:
    """An ``env.step`` span: the action in; observation, reward and termination out."""
    return _bare_or_configured(EnvStepScope, args, kwargs)


def llm_call(*args: Any, **kwargs: Any) -> Any:
    """A GenAI ``chat {model}`` span. Keywords: model, provider, operation, attributes."""
    return _bare_or_configured(LLMCallScope, args, kwargs)


def env_closed(env: Any) -> None:
    """Tell agenttrace ``env`` was closed: an episode still open on it ends ``aborted``."""
    runtime = pipeline.get_default()
    with runtime.env_lock:
        state = runtime.open_episodes_by_env.pop(id(env), None)
    if state is not None and state.handle is not None:
        state.handle.end_as(sc.STATUS_ABORTED)
