"""The scope a target's calls run in: its role's scope, with the options the target names.

``AgentTraceInstrumentor`` (agenttrace.instrument.auto) wraps each target with the
decorators' own per-call code; :func:`template` builds the scope every call of a target
clones: the role's scope class (the one its decorator uses), the extractor and settings the
target names, the arguments it reads fields from (``task_id=task.id``), the fields read from
the return value (``episode_id=return.id``), and the context key that stops a nested call of
the same role and name from being traced twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context

from agenttrace import config
from agenttrace.instrument.arguments import CallArguments
from agenttrace.instrument.calls import ToolCallScope
from agenttrace.instrument.env_episodes import ENV_EPISODE_SCOPES
from agenttrace.instrument.episode_fields import (
    EPISODE_FIELDS,
    RETURN,
    EpisodeFieldsScope,
    apply_fields,
    walk,
)
from agenttrace.instrument.episode_fields import pick as _pick
from agenttrace.instrument.episode_scope import EpisodeScope
from agenttrace.instrument.extractors import _UNSET
from agenttrace.instrument.scope import _Scope
from agenttrace.instrument.targets import (
    ATTRIBUTE_OPTION,
    ROLES,
    SETTINGS,
    Target,
    resolve_extractor,
)

_marks: dict[tuple[str, str], str] = {}
_marks_lock = threading.Lock()


def _mark_for(role: str, attribute: str) -> str:
    """The context key that says "a traced <attribute> call of <role> is in progress"."""
    with _marks_lock:
        key = _marks.get((role, attribute))
        if key is None:
            key = otel_context.create_key(f"agenttrace.target.{role}.{attribute}")
            _marks[(role, attribute)] = key
        return key


class _ArgumentFields:
    """Scope mixin: present the arguments a target names (``task_id=task.id``) to ``_on_call``
    under the field names the role's decorator reads (``task_id``)."""

    _fields: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def _on_call(self, arguments: CallArguments) -> None:
        if self._fields:
            picked = {}
            for name, path in self._fields:
                value = _pick(arguments, path, self._receiver)  # type: ignore[attr-defined]
                if value is not _UNSET:
                    picked[name] = value
            arguments = arguments.with_overrides(picked)
        super()._on_call(arguments)  # type: ignore[misc]


_scope_classes: dict[type[_Scope], type[_Scope]] = {}


def _scope_class(base: type[_Scope]) -> type[_Scope]:
    cls = _scope_classes.get(base)
    if cls is None:
        cls = type(f"Instrumented{base.__name__}", (_ArgumentFields, base), {})
        _scope_classes[base] = cls
    return cls


def template(target: Target, tracer_provider: Any) -> _Scope:
    """The scope every call of ``target`` clones: role, extractor, argument fields, mark.

    Without argument options it is the role's own scope class, exactly what the decorator
    uses: no extra ``_on_call`` layer on every call.
    """
    if target.role == EPISODE_FIELDS:  # (no span: FieldsCall sets the episode's fields)
        fields = EpisodeFieldsScope()
        fields._fields = _paths(target, lambda name, path: True)
        return fields
    base = ROLES[target.role]
    options: dict[str, Any] = {"tracer_provider": tracer_provider}
    extractor = resolve_extractor(target)
    if extractor is not None:
        options["extractor"] = extractor
    if target.role == ToolCallScope.role:
        options["name"] = target.attribute  # unless a name= option reads it from the call
    known = SETTINGS.get(target.role, {})
    options.update((known[name][1], value) for name, value in target.settings.items())
    if base in ENV_EPISODE_SCOPES and config.read_setting_or("env_episodes", True):
        base = ENV_EPISODE_SCOPES[base]  # outside any episode, the env delimits its own
    returns = _paths(target, lambda name, path: path[0] == RETURN)
    per_call = _paths(target, lambda name, path: path[0] != RETURN and _is_per_call(name))
    arguments = _paths(target, lambda name, path: path[0] != RETURN and not _is_per_call(name))
    if target.role == ToolCallScope.role and returns:
        base = _ToolResultScope  # (result=return.NAME)
    elif per_call or returns:
        base = _PerCallEpisodeScope
    if not arguments:
        template = base(**options)
    else:
        template = _scope_class(base)(**options)
        template._fields = arguments  # type: ignore[attr-defined]
    if base is _ToolResultScope:
        template._result_path = returns[0][1][1:]  # type: ignore[attr-defined]
    elif per_call or returns:
        template._per_call = per_call  # type: ignore[attr-defined]
        template._returns = returns  # type: ignore[attr-defined]
    template._context_mark = _mark_for(target.role, target.attribute)
    return template


def _is_per_call(name: str) -> bool:
    """An episode option set before its span starts: its id, names, group, attributes."""
    return name in EpisodeScope.PER_CALL_OPTIONS or name.startswith(ATTRIBUTE_OPTION)


def _paths(
    target: Target, wanted: Callable[[str, tuple[str, ...]], bool]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The target's options ``wanted(field, path)``, each path split at dots."""
    paths = ((name, tuple(where.split("."))) for name, where in target.arguments.items())
    return tuple((name, path) for name, path in paths if wanted(name, path))


class _PerCallEpisodeScope(EpisodeScope):
    """An episode whose id, policy version, agent or env name a target takes from each call's
    arguments (``episode_id=run.id``). They are set before the span starts: the trajectory
    processor tracks the episode under its id from then on. Fields read from the return value
    (``episode_id=return.id``, ``error=return.error_info``) are set when the call returns."""

    _per_call: tuple[tuple[str, tuple[str, ...]], ...] = ()
    _returns: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def _before_start(self, arguments: CallArguments) -> None:
        for option, path in self._per_call:
            value = _pick(arguments, path, self._receiver)
            if value is not _UNSET:
                self._set_per_call(option, value)

    def _on_return(self, result: Any) -> None:
        if self._returns:
            apply_fields(self, self._returns, result)


class _ToolResultScope(ToolCallScope):
    """A tool whose framework wraps its result (``result=return.result``): the result is
    read at that path of the return value (the whole value when the path is missing)."""

    _result_path: tuple[str, ...] = ()

    def _on_return(self, result: Any) -> None:
        value = walk(result, self._result_path)
        super()._on_return(result if value is _UNSET else value)


__all__ = ["template"]
