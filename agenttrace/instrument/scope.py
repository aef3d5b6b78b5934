"""The base of every role's scope: one span, usable as a context manager and as a decorator.

:class:`_Scope` starts, attaches and ends one span, putting in its context the frame its
children find (:mod:`agenttrace.instrument.episode_state`); :class:`CallHooks` is the single
implementation of what a traced call does around the function (the decorators and the
auto-instrumentor's wrappers share it). The roles build on it, and this module imports none
of them: the episode (:mod:`~agenttrace.instrument.episode_scope`), the step-like spans
(:mod:`~agenttrace.instrument.step_scopes`) and the model and tool calls
(:mod:`~agenttrace.instrument.calls`); :mod:`agenttrace.instrument.spans` is the public API
over them.

Generators never hold a span's context across ``yield``: the context is attached on each
resume and detached before control returns to the caller, so closing a generator early (or
from another task) neither leaks the span into the caller nor detaches the wrong context.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._secrets import REDACTED, is_secret_name
from agenttrace.instrument.arguments import CallArguments, Parameters
from agenttrace.instrument.episode_state import _FRAME_KEY, _Frame, _is_cancel
from agenttrace.instrument.extractors import _UNSET
from agenttrace.instrument.field_values import readable_text, unencodable_text
from agenttrace.instrument.lean_spans import lean_starter, set_clean_attributes
from agenttrace.trajectory import codec


def content_text(
    runtime: pipeline.AgentTrace | None, key: str, value: Any, role: str = "a span"
) -> str | None:
    """JSON text for a content attribute, after the content policy and redaction (None:
    content is not captured). Never raises: a value that cannot be encoded, or whose text
    would not read back, takes the documented marker or fix
    (agenttrace.instrument.field_values), said once per ``role``, field and type."""
    if runtime is None or not runtime.capture_content:
        return None
    if runtime.redact is not None:
        try:
            value = runtime.redact(key, value)
        except Exception:
            _internal_error("the redact hook (content withheld)")
            return codec.dumps(REDACTED)
    try:
        text = codec.dumps(value, redact_secrets=True)
    except Exception as exc:  # a list that holds itself, nesting past the stack, ...
        return unencodable_text(role, key, value, exc)
    if (
        len(text) > 10
        and (type(value) is not np.ndarray or value.dtype.hasobject)  # (no keys: skip)
        and ('"$dict"' in text or '"$set"' in text or '"$frozenset"' in text)
    ):
        return readable_text(role, key, value, text)  # (keys that might not read back)
    return text


def _lean_starter(runtime: pipeline.AgentTrace) -> Any:
    """The runtime's lean span starter (None: the SDK's own path), worked out once."""
    try:
        return runtime._agenttrace_lean_start  # type: ignore[attr-defined]
    except AttributeError:
        starter = lean_starter(runtime.tracer) if runtime.settings.lean_spans else None
        runtime._agenttrace_lean_start = starter  # type: ignore[attr-defined]
        return starter


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
    #: The context to start the span in, when not the current one (an env's own episode,
    #: agenttrace.instrument.env_episodes).
    _parent: otel_context.Context | None = None
    #: Started by the lean path: attributes agenttrace builds go in unchecked.
    _lean = False
    #: An exception that ends a span of this role makes its episode errored, even when the
    #: runner catches it (env.reset, env.step, agent.act, model calls).
    _notes_errors = False

    def __init__(
        self,
        attributes: dict[str, Any] | None = None,
        *,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        self._attributes = _safe_attributes(attributes, self.role) if attributes else {}
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
            parent = self._parent if self._parent is not None else otel_context.get_current()
            parent_frame = parent.get(_FRAME_KEY)
            if not isinstance(parent_frame, _Frame):
                parent_frame = None
            attributes = dict(self._attributes)
            frame = self._prepare(runtime, parent_frame, attributes)
            self._frame = frame
            if frame is not None and frame.episode is not None:
                attributes[sc.EPISODE_ID] = frame.episode.episode_id
            start_lean = _lean_starter(runtime) if self._tracer_provider is None else None
            if start_lean is not None:  # (agenttrace.instrument.lean_spans)
                span = start_lean(self._span_name(), parent, self.kind, attributes)
                self._lean = True
            else:
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
                frame = self._frame
                if self._notes_errors and frame is not None and frame.episode is not None:
                    frame.episode.note_error(exc)
            self._finishing(exc)
        except Exception:
            _internal_error(f"ending a {self.role} span")
        finally:
            pending, self._pending = self._pending, None
            if pending:
                try:
                    self._set_built(span, pending)
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

    def _encoded(self, fields: Iterable[tuple[str, Any]]) -> dict[str, str]:
        """The content attributes among ``(key, value)`` pairs that were given (not
        ``_UNSET``), encoded as :meth:`_content` does; withheld ones left out."""
        found: dict[str, str] = {}
        for key, value in fields:
            if value is not _UNSET:
                text = self._content(key, value)
                if text is not None:
                    found[key] = text
        return found

    def _write(self, attributes: dict[str, Any]) -> None:
        """Put ``attributes`` on the span, or with what a traced call writes at its end."""
        if self._pending is not None:
            self._pending.update(attributes)
        elif attributes:
            self._set_built(self._span, attributes)

    def _set_built(self, span: Any, attributes: dict[str, Any]) -> None:
        """Attributes agenttrace built (clean values) onto its span: without a second check
        on a lean span (agenttrace.instrument.lean_spans), else through the SDK."""
        if self._lean:
            set_clean_attributes(span, attributes)
        else:
            span.set_attributes(attributes)

    def _content(self, key: str, value: Any) -> str | None:
        return content_text(self._runtime, key, value, self.role)

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
        arguments = None
        if self.early:
            arguments = CallArguments(self.parameters, args, kwargs)
            try:
                scope._before_start(arguments)
            except Exception:
                _internal_error(f"reading arguments of {self.name}")
        scope.start()
        if scope._span is not None:
            # What the call records (arguments now, the result at the end) reaches the span
            # in one set_attributes at its end, not one per record.
            scope._pending = {}
            if self.reads_arguments:
                try:
                    scope._on_call(arguments or CallArguments(self.parameters, args, kwargs))
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
        """Call a sync ``func`` with the scope current; end the scope with its outcome.

        A plain function that returns a coroutine (an async API behind a sync decorator, as
        the OpenAI SDK's ``create`` is) is traced until that coroutine is done."""
        scope._attach()
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            scope._detach()
            scope.end(exc)
            raise
        if type(result) is types.CoroutineType:
            scope._detach()
            return self._awaited(scope, result)
        self.finish(scope, result)
        scope._detach()
        scope.end()
        return result

    async def _awaited(self, scope: _Scope, coroutine: Any) -> Any:
        scope._attach()
        try:
            result = await coroutine
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


def _safe_attributes(attributes: dict[str, Any], role: str = "a span") -> dict[str, Any]:
    """Drop attributes named like secrets; keep OTel-compatible values, JSON-encode others
    (a value that cannot be encoded becomes the marker of agenttrace.instrument.field_values)."""
    clean: dict[str, Any] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or is_secret_name(key) or value is None:
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
            try:
                text = codec.dumps(value, redact_secrets=True)
            except Exception as exc:
                text = unencodable_text(role, f"attributes[{key!r}]", value, exc)
            clean[key] = text
    return clean
