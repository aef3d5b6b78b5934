"""A traced call's arguments by parameter name, without binding them to the signature.

``inspect.Signature.bind_partial`` (or building ``BoundArguments``) on every call of a traced
function costs more than everything else a role reads from its arguments. The signature is
read once per traced function into :class:`Parameters` (where each named argument sits);
each call then gets a :class:`CallArguments` that only holds the call's ``args`` and
``kwargs`` and looks a name up when a role asks for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from agenttrace._secrets import is_secret_name
from agenttrace.instrument.extractors import _UNSET

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class Parameters:
    """Where a function's named arguments sit in a call, worked out once per function."""

    __slots__ = ("_lookups", "first", "keywords", "positions", "var_keyword", "var_positional")

    def __init__(self, signature: inspect.Signature | None) -> None:
        #: Position of each parameter that can be passed positionally.
        self.positions: dict[str, int] = {}
        #: The first such parameter that is not ``self``/``cls`` or named like a secret: the
        #: argument a role falls back to when none has one of the names it looks for.
        self.first: str | None = None
        self.var_positional: str | None = None
        self.var_keyword: str | None = None
        #: Parameters a keyword argument binds to (the rest go to ``**var_keyword``).
        self.keywords: frozenset[str] = frozenset()
        self._lookups: dict[tuple[str, ...], tuple[int, ...]] = {}
        if signature is None:
            return
        keywords = []
        for param in signature.parameters.values():
            if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                keywords.append(param.name)
            if param.kind in _POSITIONAL:
                self.positions[param.name] = len(self.positions)
                if (
                    self.first is None
                    and param.name not in ("self", "cls")
                    and not is_secret_name(param.name)
                ):
                    self.first = param.name
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                self.var_positional = param.name
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                self.var_keyword = param.name
        self.keywords = frozenset(keywords)

    def positions_of(self, names: tuple[str, ...]) -> tuple[int, ...]:
        """Positions of the parameters :meth:`CallArguments.first` tries, in its order."""
        found = self._lookups.get(names)
        if found is None:
            tried = [name for name in names if name in self.positions]
            if self.first is not None:
                tried.append(self.first)
            found = self._lookups[names] = tuple(self.positions[name] for name in tried)
        return found

    @classmethod
    def of(cls, func: Any, *, skip_receiver: bool = False) -> Parameters:
        """The parameters of ``func``; ``skip_receiver`` leaves out the first positional one
        (the object or class a method is bound to), so it is never taken for an argument."""
        try:
            signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            signature = None
        if skip_receiver and signature is not None:
            parameters = list(signature.parameters.values())
            if parameters and parameters[0].kind in _POSITIONAL:
                signature = signature.replace(parameters=parameters[1:])
        return cls(signature)


class CallArguments:
    """One call's arguments, looked up by parameter name on demand.

    ``overrides`` (name -> value) come first: the auto-instrumentor presents the values a
    target names (``task_id=task.id``) under the names a role reads.
    """

    __slots__ = ("args", "kwargs", "overrides", "parameters")

    def __init__(
        self,
        parameters: Parameters,
        args: tuple,
        kwargs: Mapping[str, Any],
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.parameters = parameters
        self.args = args
        self.kwargs = kwargs
        self.overrides = overrides

    def get(self, name: str) -> Any:
        """The argument named ``name`` (also one in ``**kwargs``), ``_UNSET`` when absent."""
        if self.overrides and name in self.overrides:
            return self.overrides[name]
        parameters = self.parameters
        position = parameters.positions.get(name)
        if position is not None and position < len(self.args):
            return self.args[position]
        if name in self.kwargs:
            return self.kwargs[name]
        if name == parameters.var_positional and len(self.args) > len(parameters.positions):
            return self.args[len(parameters.positions) :]
        if name == parameters.var_keyword:
            extra = {k: v for k, v in self.kwargs.items() if k not in parameters.keywords}
            return extra if extra else _UNSET
        return _UNSET

    def first(self, names: tuple[str, ...]) -> Any:
        """The argument named one of ``names``, else the first positional one (not ``self``,
        not a secret); ``_UNSET`` when there is none."""
        if not self.kwargs and not self.overrides:  # the usual call: positions worked out once
            count = len(self.args)
            for position in self.parameters.positions_of(names):
                if position < count:
                    return self.args[position]
            if self.parameters.var_positional is None or count <= len(self.parameters.positions):
                return _UNSET
        for name in names:
            value = self.get(name)
            if value is not _UNSET:
                return value
        fallback = self.parameters.first
        return self.get(fallback) if fallback is not None else _UNSET

    def flat(self) -> dict[str, Any]:
        """Every named argument and every keyword one (``**kwargs`` spread out), by name."""
        values = {
            name: self.args[position]
            for name, position in self.parameters.positions.items()
            if position < len(self.args)
        }
        values.update(self.kwargs)
        if self.overrides:
            values.update(self.overrides)
        return values

    def with_overrides(self, overrides: Mapping[str, Any]) -> CallArguments:
        return CallArguments(self.parameters, self.args, self.kwargs, overrides)
