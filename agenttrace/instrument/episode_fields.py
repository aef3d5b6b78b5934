"""Episode fields known only later: from the episode function's return value, or another call.

A runner often learns its episode's id (``self.env.get_episode_id()``) or error only after
the loop, and returns them in its own record (``Trajectory(..., error_info, episode_id)``).
Two kinds of target options read them (docs/auto-instrumentation.md):

* on an ``episode`` target, an option whose path starts with ``return`` reads the call's
  return value at its end, before the span ends: ``episode_id=return.episode_id``,
  ``error=return.error_info``, ``attributes.reset_kwargs=return.reset_kwargs``;
* a target of role ``episode.fields`` makes no span: at the return of each call it sets the
  fields of the episode open in the caller's context (``episode_id=return``), and does
  nothing outside any episode.

The fields are set by :meth:`EpisodeScope._set_late` (an external id, a task id, an error,
attributes). ``return`` is a Python keyword, so it never names a parameter. A call that
raises sets nothing; its exception passes through unchanged, as does every result.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.instrumentation.utils import (
    _SUPPRESS_INSTRUMENTATION_KEY,
    _SUPPRESS_INSTRUMENTATION_KEY_PLAIN,
)

from agenttrace._logging import internal_error as _internal_error
from agenttrace._logging import warn_once as _warn_once
from agenttrace._secrets import is_secret_name
from agenttrace.instrument.arguments import CallArguments, Parameters
from agenttrace.instrument.episode_scope import EpisodeScope
from agenttrace.instrument.episode_state import _FRAME_KEY, _Frame
from agenttrace.instrument.extractors import _UNSET
from agenttrace.instrument.scope import _Scope

#: The role of a target that sets fields of the episode it is called in, without a span.
EPISODE_FIELDS = "episode.fields"
#: An option path's head naming the call's return value (``episode_id=return.id``).
RETURN = "return"
#: An option path's head naming the object (or class) a method is called on.
RECEIVER_NAME = "self"

Fields = tuple[tuple[str, tuple[str, ...]], ...]


def walk(value: Any, parts: tuple[str, ...]) -> Any:
    """``value.a.b`` (or ``value["a"]["b"]`` for mappings), ``_UNSET`` when a part is missing."""
    for part in parts:
        try:
            value = value[part] if isinstance(value, Mapping) else getattr(value, part)
        except Exception:
            return _UNSET
    return value


def pick(arguments: CallArguments, path: tuple[str, ...], receiver: Any) -> Any:
    """The value at ``argument.attr.key...`` of a call, ``_UNSET`` when any part is missing.

    ``self`` names the object (or class) a traced method was called on.
    """
    head = path[0]
    value = arguments.get(head)
    if value is _UNSET:
        if head != RECEIVER_NAME or receiver is None:
            return _UNSET
        value = receiver
    return walk(value, path[1:])


def apply_fields(
    episode: EpisodeScope,
    fields: Fields,
    result: Any,
    arguments: CallArguments | None = None,
    receiver: Any = None,
) -> None:
    """Set ``fields`` (field name, path) of ``episode`` from a call's return value (paths
    starting with ``return``) or arguments; missing and None values are left out, and so are
    values whose path names a secret (``return.api_key``)."""
    for name, path in fields:
        try:
            if path[0] == RETURN:
                value = walk(result, path[1:])
            elif arguments is not None:
                value = pick(arguments, path, receiver)
            else:
                continue
            if value is _UNSET or value is None:
                continue
            if any(is_secret_name(part) for part in path if part not in (RETURN, RECEIVER_NAME)):
                _warn_once(
                    f"secret field:{'.'.join(path)}",
                    "agenttrace: %s=%s names a secret; it is never recorded",
                    name,
                    ".".join(path),
                )
                continue
            episode._set_late(name, value)
        except Exception:
            _internal_error(f"setting the episode field {name}")


class EpisodeFieldsScope(_Scope):
    """The ``episode.fields`` role's entry in ``targets.ROLES``: it carries a target's options
    (``_fields``) and never starts a span; :class:`FieldsCall` does the per-call work."""

    role = EPISODE_FIELDS
    _fields: Fields = ()

    def start(self) -> EpisodeFieldsScope:
        return self


class FieldsCall:
    """The wrapt wrapper function of an ``episode.fields`` target.

    Outside any episode (or with instrumentation suppressed, or the patch withdrawn) the call
    goes straight through, after one context lookup. Inside one, the call runs unchanged and,
    when it returns (a coroutine: when it is done; a generator: when it is exhausted), its
    fields are set on that episode; a call that raises sets nothing.
    """

    __slots__ = ("active", "called", "fields", "generator", "name", "parameters", "receiver")

    def __init__(self, template: _Scope, function: Callable[..., Any], receiver: bool) -> None:
        self.active = True
        self.called = False  # for the at-exit report of targets never called
        self.fields: Fields = getattr(template, "_fields", ())
        self.receiver = receiver
        self.name = getattr(function, "__qualname__", None) or repr(function)
        self.generator = inspect.isgeneratorfunction(function)
        reads_arguments = any(path[0] != RETURN for _, path in self.fields)
        self.parameters = (
            Parameters.of(function, skip_receiver=receiver) if reads_arguments else None
        )

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        self.called = True
        current = otel_context.get_current()
        frame = current.get(_FRAME_KEY)
        if (
            not self.active
            or not isinstance(frame, _Frame)
            or frame.episode is None
            or frame.episode.handle is None
            or current.get(_SUPPRESS_INSTRUMENTATION_KEY)
            or current.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN)
        ):
            return wrapped(*args, **kwargs)
        episode = frame.episode.handle
        result = wrapped(*args, **kwargs)  # (an exception passes through: nothing is set)
        kind = type(result)
        if kind is types.CoroutineType:
            return self._awaited(episode, instance, args, kwargs, result)
        if kind is types.GeneratorType and self.generator:
            return self._exhausted(episode, instance, args, kwargs, result)
        self._apply(episode, instance, args, kwargs, result)
        return result

    def _apply(self, episode: Any, instance: Any, args: tuple, kwargs: dict, result: Any) -> None:
        try:
            arguments = receiver = None
            if self.parameters is not None:
                if self.receiver and instance is not None:  # obj.method(a): wrapt split it off
                    receiver = instance
                elif self.receiver and args:  # Class.method(obj, a)
                    receiver, args = args[0], args[1:]
                arguments = CallArguments(self.parameters, args, kwargs)
            apply_fields(episode, self.fields, result, arguments, receiver)
        except Exception:
            _internal_error(f"setting episode fields from {self.name}")

    async def _awaited(
        self, episode: Any, instance: Any, args: tuple, kwargs: dict, coroutine: Any
    ) -> Any:
        result = await coroutine
        self._apply(episode, instance, args, kwargs, result)
        return result

    def _exhausted(
        self, episode: Any, instance: Any, args: tuple, kwargs: dict, generator: Any
    ) -> Any:
        result = yield from generator
        self._apply(episode, instance, args, kwargs, result)
        return result
