"""Context propagation: keep spans in their episode and step across threads, processes and hosts.

agenttrace finds the episode and the step index of a new span in the current OpenTelemetry
context (its span, plus agenttrace's frame). That context lives in ``contextvars``, so it is
lost wherever work changes hands without copying them:

* threads and thread pools, and ``loop.run_in_executor`` (asyncio copies the context into
  tasks and ``asyncio.to_thread``, but not into executors): wrap the callable with
  :func:`in_context`, use :class:`ContextThreadPoolExecutor`, or :func:`run_in_executor`;
* HTTP hops: :func:`inject` the context into the request headers on the client (or let
  :func:`inject_into_httpx` do it for every request), and enter :func:`remote_context` with
  the request headers on the server (or install :func:`aiohttp_middleware`);
* Ray tasks and actors: pass ``trace_context=inject()`` to a method decorated with
  :func:`accepts_trace_context`.

What crosses a hop is W3C Trace Context (``traceparent``/``tracestate``) and W3C Baggage with
``rl.episode.id`` and ``rl.timestep.index``. On the receiving side the baggage becomes a frame,
so ``at.env_step()`` there joins the caller's episode and step. The trajectory is still
written by the process where the episode span runs; the other side's spans go to its own span
file (see docs/context-propagation.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace.instrument.episode_state import _FRAME_KEY, _EpisodeState, _Frame

logger = logging.getLogger("agenttrace")

T = TypeVar("T")

#: Keyword argument that carries the W3C context into functions decorated with
#: :func:`accepts_trace_context` (Ray tasks and actor methods).
TRACE_CONTEXT_ARG = "trace_context"

# Always W3C, whatever the global propagator is: both sides of a hop are agenttrace.
_W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


# --- threads, thread pools, executors ---------------------------------------------------------


def in_context(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` bound to the current context: it runs in a copy of it, wherever it is called.

    Use it for callables handed to threads (``Thread(target=in_context(work))``), thread
    pools and executors: spans made inside join the episode and step that were current here.
    Each call runs in its own copy, so concurrent calls and context changes made inside do
    not leak into each other or back into the caller.
    """
    if not callable(fn):
        raise TypeError(f"in_context needs a callable, got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"in_context({getattr(fn, '__qualname__', fn)!r}): async functions run in the "
            "context of the task that awaits them (asyncio tasks copy it); bind sync callables"
        )
    captured = contextvars.copy_context()

    @functools.wraps(fn)
    def run_in_captured_context(*args: Any, **kwargs: Any) -> T:
        return captured.copy().run(fn, *args, **kwargs)

    return run_in_captured_context


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose ``submit`` and ``map`` run work in the submitter's context.

    A drop-in replacement: the plain executor runs work in the worker thread's own (empty)
    context, so spans made there start new traces outside any episode.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        # ThreadPoolExecutor.map goes through submit, so it is covered too.
        return super().submit(in_context(fn), *args, **kwargs)


def run_in_executor(
    loop: asyncio.AbstractEventLoop | None,
    executor: Executor | None,
    fn: Callable[..., T],
    *args: Any,
) -> Awaitable[T]:
    """``loop.run_in_executor`` that runs ``fn`` in the calling task's context.

    ``loop`` None means the running loop; ``executor`` None, the loop's default executor.
    """
    if loop is None:
        loop = asyncio.get_running_loop()
    return loop.run_in_executor(executor, in_context(fn), *args)


# --- crossing a process or host boundary ------------------------------------------------------


def inject(
    headers: MutableMapping[str, str] | None = None,
    *,
    context: otel_context.Context | None = None,
) -> MutableMapping[str, str]:
    """Add the current trace context and episode/step baggage to ``headers``; return them.

    Sets ``traceparent`` (+ ``tracestate``) and ``baggage`` with ``rl.episode.id`` and, inside
    a step, ``rl.timestep.index``, keeping any baggage already in the context. With no
    ``headers`` a new dict is returned (a plain carrier for Ray, queues, job specs).
    """
    if headers is None:
        headers = {}
    elif not isinstance(headers, MutableMapping) and not (
        hasattr(headers, "__setitem__") and hasattr(headers, "keys")
    ):
        raise TypeError(
            f"inject needs a mutable mapping of headers (or None), got {type(headers).__name__}"
        )
    try:
        ctx = context if context is not None else otel_context.get_current()
        frame = ctx.get(_FRAME_KEY)
        if isinstance(frame, _Frame) and frame.episode is not None:
            ctx = baggage.set_baggage(sc.EPISODE_ID, frame.episode.episode_id, ctx)
            if frame.index is not None:
                ctx = baggage.set_baggage(sc.TIMESTEP_INDEX, str(frame.index), ctx)
            else:  # not inside a step: no index, not even one received from upstream
                ctx = baggage.remove_baggage(sc.TIMESTEP_INDEX, ctx)
        _W3C.inject(headers, context=ctx)
    except Exception:
        _internal_error("inject")
    return headers


def extract(
    headers: Mapping[str, Any] | None,
    *,
    context: otel_context.Context | None = None,
) -> otel_context.Context:
    """The context a remote caller injected into ``headers``, ready to attach or pass on.

    Header names match case-insensitively. The remote span becomes the parent of spans
    started in the returned context, and the ``rl.*`` baggage becomes agenttrace's frame, so
    step spans there carry the caller's episode id and step index. Headers without a trace
    context give back ``context`` (default: the current one) unchanged.
    """
    base = context if context is not None else otel_context.get_current()
    if headers is None:
        return base
    if not hasattr(headers, "get") or not hasattr(headers, "keys"):
        raise TypeError(f"extract needs a mapping of headers, got {type(headers).__name__}")
    try:
        ctx = _W3C.extract(headers, context=base, getter=_HEADER_GETTER)
        frame = _frame_from_baggage(ctx)
        if frame is not None:
            return otel_context.set_value(_FRAME_KEY, frame, ctx)
        if trace.get_current_span(ctx).get_span_context().is_remote:
            # A remote parent outside any episode: a local frame must not claim its spans.
            return otel_context.set_value(_FRAME_KEY, None, ctx)
        return ctx
    except Exception:
        _internal_error("extract")
        return base


@contextmanager
def remote_context(headers: Mapping[str, Any] | None) -> Iterator[otel_context.Context]:
    """Run the block in the context a remote caller injected (see :func:`extract`).

    The server side of an HTTP hop, or the body of a Ray task: spans started inside are
    children of the caller's span and join its episode and step.
    """
    ctx = extract(headers)
    token = otel_context.attach(ctx)
    try:
        yield ctx
    finally:
        otel_context.detach(token)


def _frame_from_baggage(ctx: otel_context.Context) -> _Frame | None:
    episode_id = baggage.get_baggage(sc.EPISODE_ID, ctx)
    if not isinstance(episode_id, str) or not episode_id:
        return None
    index = _step_index(baggage.get_baggage(sc.TIMESTEP_INDEX, ctx))
    # The episode's bookkeeping (return, length, status) lives where its episode span runs;
    # this stand-in only gives local spans the id and index they must carry.
    state = _EpisodeState(episode_id, pipeline.get_default())
    state.next_index = index if index is not None else 0
    return _Frame(state, index)


def _step_index(value: object) -> int | None:
    try:
        index = int(str(value))
    except ValueError:
        return None
    return index if index >= 0 else None


class _HeaderGetter(Getter[Mapping[str, Any]]):
    """Reads headers from any mapping, names matched case-insensitively, bytes decoded."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            wanted = key.lower()
            for name in carrier:
                if isinstance(name, (str, bytes)) and _text(name).lower() == wanted:
                    value = carrier[name]
                    break
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            return [_text(v) for v in value]
        return [_text(value)]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [_text(name) for name in carrier]


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


_HEADER_GETTER = _HeaderGetter()


# --- Ray tasks and actor methods ----------------------------------------------------------------


def accepts_trace_context(fn: Callable[..., T]) -> Callable[..., T]:
    """Give ``fn`` a ``trace_context=`` keyword; the call runs inside that remote context.

    For Ray tasks and actor methods (put ``@ray.remote`` above this decorator)::

        @ray.remote
        class Runner:
            @accepts_trace_context
            def play(self, seed): ...

        runner.play.remote(seed, trace_context=inject())

    The signature Ray inspects includes the new keyword. Without it the call runs as usual.
    """
    if not callable(fn):
        raise TypeError(f"accepts_trace_context needs a function, got {type(fn).__name__}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"accepts_trace_context({fn.__qualname__}): generator functions are not supported; "
            "enter remote_context(trace_context) inside the generator instead"
        )
    signature = inspect.signature(fn)
    if TRACE_CONTEXT_ARG in signature.parameters:
        raise TypeError(
            f"{fn.__qualname__} already has a parameter named {TRACE_CONTEXT_ARG!r}; "
            "use remote_context() inside it instead"
        )
    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper(*args: Any, trace_context: Mapping[str, Any] | None = None, **kw: Any):
            with remote_context(trace_context):
                return await fn(*args, **kw)

    else:

        @functools.wraps(fn)
        def wrapper(*args: Any, trace_context: Mapping[str, Any] | None = None, **kw: Any):
            with remote_context(trace_context):
                return fn(*args, **kw)

    wrapper.__signature__ = _with_trace_context_parameter(signature)  # type: ignore[attr-defined]
    # Ray unwraps ``__wrapped__`` chains to read a method's signature; it must see this one.
    del wrapper.__wrapped__
    return wrapper


def _with_trace_context_parameter(signature: inspect.Signature) -> inspect.Signature:
    params = list(signature.parameters.values())
    extra = inspect.Parameter(TRACE_CONTEXT_ARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    position = len(params)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        position -= 1
    return signature.replace(parameters=[*params[:position], extra, *params[position:]])


# --- thin HTTP integrations (optional dependencies, imported only when used) -------------------


def inject_into_httpx(client: Any) -> Any:
    """Make an ``httpx.Client`` or ``httpx.AsyncClient`` inject on every request; returns it.

    Adds a request event hook (once) that calls :func:`inject` on the request headers, in the
    context of the code that sends the request.
    """
    import httpx

    if isinstance(client, httpx.AsyncClient):
        hook: Callable[..., Any] = _inject_request_async
    elif isinstance(client, httpx.Client):
        hook = _inject_request
    else:
        raise TypeError(
            f"inject_into_httpx needs an httpx.Client or httpx.AsyncClient, "
            f"got {type(client).__name__}"
        )
    hooks = {name: list(found) for name, found in client.event_hooks.items()}
    request_hooks = hooks.setdefault("request", [])
    if hook not in request_hooks:
        request_hooks.append(hook)
    client.event_hooks = hooks
    return client


def _inject_request(request: Any) -> None:
    inject(request.headers)


async def _inject_request_async(request: Any) -> None:
    inject(request.headers)


async def aiohttp_middleware(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """aiohttp server middleware: each handler runs in the context its client injected.

    ``web.Application(middlewares=[aiohttp_middleware])``.
    """
    with remote_context(request.headers):
        return await handler(request)


# What ``aiohttp.web.middleware`` sets; done by hand so this module never imports aiohttp.
aiohttp_middleware.__middleware_version__ = 1  # type: ignore[attr-defined]


__all__ = [
    "TRACE_CONTEXT_ARG",
    "ContextThreadPoolExecutor",
    "accepts_trace_context",
    "aiohttp_middleware",
    "extract",
    "in_context",
    "inject",
    "inject_into_httpx",
    "remote_context",
    "run_in_executor",
]
