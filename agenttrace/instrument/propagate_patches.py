"""Context propagation by configuration: library patches that apply the propagation helpers.

``AGENTTRACE_PROPAGATE=threads,httpx,aiohttp`` (or ``instrument(propagate=[...])``) makes
:class:`~agenttrace.instrument.auto.AgentTraceInstrumentor` wrap, with wrapt:

* ``threads``: ``concurrent.futures.ThreadPoolExecutor.submit``, so work submitted inside an
  episode runs in the submitter's context (:func:`~.propagation.in_context`). ``map`` and
  ``loop.run_in_executor`` (default executor or a given ThreadPoolExecutor) go through it.
* ``httpx``: ``httpx.Client.send`` and ``httpx.AsyncClient.send`` add ``traceparent`` and the
  episode's baggage (:func:`~.propagation.inject`) to requests sent inside an episode.
* ``aiohttp``: ``aiohttp.web.Application.__init__`` puts
  :func:`~.propagation.aiohttp_middleware` first in every new application's middlewares, so
  handlers run in the context their caller sent.

Only inside an episode (or a handler that joined one) does anything change: elsewhere thread
pools and requests behave exactly as without agenttrace. A library that cannot be imported is
logged as an error naming it, and the others are patched. :meth:`Propagation.undo` puts back
the very objects it replaced.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from agenttrace import config
from agenttrace._logging import internal_error as _internal_error
from agenttrace.instrument.episode_state import current_episode_id
from agenttrace.instrument.propagation import aiohttp_middleware, in_context, inject
from agenttrace.instrument.proxies import PatchProxy

logger = logging.getLogger("agenttrace")

_ABSENT: Any = object()


def _nothing() -> None:
    pass


#: The code of every callable ``in_context`` returns: such a callable is already bound to a
#: context (``ContextThreadPoolExecutor``, or the user's own ``submit(in_context(fn))``).
_BOUND_CODE = getattr(in_context(_nothing), "__code__", None)


# --- the wrapper functions ----------------------------------------------------------------------


class _Hook:
    """A wrapt wrapper function that can be switched off (when it cannot be removed)."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = True


class _SubmitInContext(_Hook):
    """``ThreadPoolExecutor.submit``: inside an episode, the callable runs in a copy of the
    submitter's context (each call its own copy, so nothing leaks back or between calls)."""

    __slots__ = ()

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.active and args and current_episode_id() is not None:
            fn = args[0]
            # Async or not callable (in_context refuses those): submitted as given.
            if _BOUND_CODE is None or getattr(fn, "__code__", None) is not _BOUND_CODE:
                with contextlib.suppress(TypeError):
                    args = (in_context(fn), *args[1:])
        return wrapped(*args, **kwargs)


class _InjectIntoRequest(_Hook):
    """``httpx.Client.send`` / ``AsyncClient.send``: inside an episode, add the trace context
    and the episode baggage to the request's headers, keeping any the caller set."""

    __slots__ = ()

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.active and current_episode_id() is not None and is_instrumentation_enabled():
            request = args[0] if args else kwargs.get("request")
            headers = getattr(request, "headers", None)
            if headers is not None:
                try:
                    _add_missing(headers, inject({}))
                except Exception:
                    _internal_error("adding trace headers to an httpx request")
        return wrapped(*args, **kwargs)


def _add_missing(headers: Any, injected: dict[str, str]) -> None:
    """Set the injected headers the request does not have; append missing baggage members.

    ``traceparent``/``tracestate`` the caller set are theirs to keep. Baggage the caller set
    keeps its members, and gets the episode's (``rl.episode.id``, ...) appended.
    """
    for name, value in injected.items():
        existing = headers.get(name)
        if existing is None:
            headers[name] = value
        elif name == "baggage":
            present = {member.split("=", 1)[0].strip() for member in existing.split(",")}
            extra = [m for m in value.split(",") if m.split("=", 1)[0].strip() not in present]
            if extra:
                headers[name] = ",".join([existing, *extra])


class _AddServerMiddleware(_Hook):
    """``aiohttp.web.Application.__init__``: ``aiohttp_middleware`` first in ``middlewares``
    (outermost, so every handler and the other middlewares run in the caller's context)."""

    __slots__ = ()

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.active:
            try:
                middlewares = tuple(kwargs.get("middlewares") or ())
                if aiohttp_middleware not in middlewares:
                    kwargs["middlewares"] = (aiohttp_middleware, *middlewares)
            except Exception:
                _internal_error("adding the agenttrace middleware to an aiohttp application")
        return wrapped(*args, **kwargs)


# --- what each choice patches ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Site:
    module: str  # imported to find the class; its absence is reported by name
    qualname: str  # the class in it
    attribute: str
    hook: type[_Hook]


#: Per ``propagate`` choice: the library it needs and the attributes it wraps.
CHOICES: dict[str, tuple[str, tuple[_Site, ...]]] = {
    "threads": (
        "concurrent.futures",
        (_Site("concurrent.futures", "ThreadPoolExecutor", "submit", _SubmitInContext),),
    ),
    "httpx": (
        "httpx",
        (
            _Site("httpx", "Client", "send", _InjectIntoRequest),
            _Site("httpx", "AsyncClient", "send", _InjectIntoRequest),
        ),
    ),
    "aiohttp": (
        "aiohttp",
        (_Site("aiohttp.web", "Application", "__init__", _AddServerMiddleware),),
    ),
}
assert tuple(CHOICES) == config.PROPAGATE_CHOICES


class PropagationWrapper(PatchProxy):
    """What agenttrace puts in place of a patched library attribute (recognisable as ours);
    pickled and copied as the attribute it wraps (:mod:`agenttrace.instrument.proxies`)."""


@dataclass
class _Patch:
    owner: type
    attribute: str
    previous: Any  # the class's own value before, or _ABSENT
    installed: PropagationWrapper
    hook: _Hook

    @property
    def label(self) -> str:
        return f"{self.owner.__module__}.{self.owner.__qualname__}.{self.attribute}"


class Propagation:
    """The propagation patches one ``instrument()`` applied; :meth:`undo` removes them."""

    def __init__(self) -> None:
        self.patches: list[_Patch] = []
        self.choices: list[str] = []

    def undo(self, since: int = 0) -> None:
        """Put back every replaced attribute (the same object), newest first; ``since`` keeps
        the first patches.

        An attribute someone else replaced after us is left alone (with a warning); our
        wrapper inside it stops doing anything.
        """
        patches, self.patches = self.patches[since:], self.patches[:since]
        if since == 0:
            self.choices = []
        for patch in reversed(patches):
            patch.hook.active = False
            try:
                if vars(patch.owner).get(patch.attribute, _ABSENT) is not patch.installed:
                    logger.warning(
                        "agenttrace: %s was replaced after agenttrace wrapped it for context "
                        "propagation; left as is (the agenttrace wrapper inside no longer acts)",
                        patch.label,
                    )
                elif patch.previous is _ABSENT:
                    delattr(patch.owner, patch.attribute)
                else:
                    setattr(patch.owner, patch.attribute, patch.previous)
            except Exception:
                logger.exception("agenttrace: could not restore %s", patch.label)


def requested(value: Any = None) -> tuple[str, ...]:
    """The ``propagate`` choices: ``value`` if given (a bad one raises ConfigError naming it),
    else ``AGENTTRACE_PROPAGATE`` (a bad one is logged as an error; nothing is patched)."""
    if value is not None:
        return tuple(config.parse_setting("propagate", value) or ())
    try:
        return tuple(config.read_setting("propagate") or ())
    except config.ConfigError as exc:
        logger.error("agenttrace: %s; no context propagation is patched", exc)
        return ()


def apply(choices: Iterable[str]) -> Propagation:
    """Patch the libraries of ``choices`` (see :data:`CHOICES`); never raises for a library
    that is missing or fails to patch: that one is logged and skipped."""
    applied = Propagation()
    for choice in dict.fromkeys(choices):
        if choice not in CHOICES:  # requested() checked; direct callers get told
            logger.error(
                "agenttrace: unknown propagate choice %r; use %s", choice, ", ".join(CHOICES)
            )
            continue
        library, sites = CHOICES[choice]
        try:
            owners = [(_import_class(site), site) for site in sites]
        except ImportError as exc:
            logger.error(
                "agenttrace: propagate=%s needs %s, which cannot be imported (%s: %s); %s "
                "context propagation is off (the other choices apply)",
                choice,
                library,
                type(exc).__name__,
                exc,
                choice,
            )
            continue
        done = len(applied.patches)
        try:
            for owner, site in owners:
                _wrap(applied, owner, site.attribute, site.hook())
        except Exception:
            logger.exception("agenttrace: patching %s for context propagation failed", choice)
            applied.undo(since=done)
            continue
        applied.choices.append(choice)
    if applied.choices:
        logger.debug("agenttrace: context propagation on for %s", ", ".join(applied.choices))
    return applied


def _import_class(site: _Site) -> type:
    obj: Any = importlib.import_module(site.module)
    for part in site.qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _wrap(applied: Propagation, owner: type, attribute: str, hook: _Hook) -> None:
    current = vars(owner).get(attribute, _ABSENT)
    if isinstance(current, PropagationWrapper):
        name = f"{owner.__module__}.{owner.__qualname__}.{attribute}"
        logger.warning("agenttrace: %s already propagates context; not wrapped again", name)
        return
    original = current if current is not _ABSENT else getattr(owner, attribute)
    installed = PropagationWrapper(original, hook)
    setattr(owner, attribute, installed)
    applied.patches.append(_Patch(owner, attribute, current, installed, hook))


__all__ = ["CHOICES", "Propagation", "PropagationWrapper", "apply", "requested"]
