"""Gymnasium spaces for Minari datasets: which environment, which spaces, and the values laid
out as Minari stores them.

Three questions the Minari sink asks before it writes (docs/minari.md):

- **Which environment?** :func:`environment_spec` finds a gymnasium id the way
  ``gymnasium.make`` does (``module:EnvId`` imports ``module`` first), and for a plain id it
  also imports what registers it: the id's namespace as a module, then gymnasium's plugin
  entry points. Failing that it says, in one line, which package to name.
- **Which spaces?** :func:`infer_space` reads them from the values when no environment is
  known: every Gymnasium space type Minari can store (Box of any dtype and shape, Discrete,
  MultiBinary, Text, Tuple, Dict, nested), and :func:`check_storable` refuses the ones it
  cannot (Sequence, Graph, OneOf: Minari has no serializer for them, and its own
  ``DataCollector`` fails on them too).
- **Which layout?** :func:`stacked` turns one episode's values into the buffer layout of
  Minari's ``DataCollector``: a Dict space's values as a dict of stacked children, a Tuple's
  as a tuple of them, anything else as a list, the way its ``jax.tree_util`` append builds
  them (dict keys sorted, ``None`` holds nothing). Infos use the same layout, so they are
  stored as ``DataCollector(record_infos=True)`` stores them.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import string
from collections.abc import Sequence
from typing import Any

import numpy as np


class MinariDatasetError(ValueError):
    """The dataset as a whole cannot be written (not one episode's fault): one line saying
    why and what to give instead."""


class MinariSpacesError(MinariDatasetError):
    """The dataset's spaces cannot be known or stored: no environment, no spaces given, and
    values no gymnasium space holds, or a space Minari cannot store. Nothing can be written;
    the message says what to give instead."""


class MinariEnvError(MinariDatasetError):
    """A gymnasium environment id that cannot be found or made (one line: what to give)."""


class StructureError(ValueError):
    """Values whose structure changes from step to step (keys, tuple lengths)."""


# --- the environment ---------------------------------------------------------------------------


def environment_spec(name: str) -> Any:
    """The ``EnvSpec`` of a gymnasium id, importing what registers it; MinariEnvError says
    what to give when it cannot be found.

    ``module:EnvId`` imports ``module`` first (as ``gymnasium.make`` does). A plain id that
    gymnasium does not know yet is looked for in its namespace as a module (``ns/Env-v0``:
    ``import ns``) and in gymnasium's plugin entry points (group ``gymnasium.envs``).
    """
    import gymnasium

    module, _, env_id = name.rpartition(":")
    if module:
        _import(module, name)
    try:
        return gymnasium.spec(env_id)
    except gymnasium.error.Error as exc:
        first = exc
    if not module:
        for candidate in _registering_modules(env_id):
            try:
                importlib.import_module(candidate)
            except Exception:  # (a guess: only the name given is reported)
                continue
            try:
                return gymnasium.spec(env_id)
            except gymnasium.error.Error:
                continue
    where = f" after importing {module}" if module else ""
    raise MinariEnvError(
        f"gymnasium does not know the environment {env_id!r}{where} "
        f"({type(first).__name__}: {_first_line(first)}); name the package that registers it: "
        f"--env PACKAGE:{env_id}"
    )


def _import(module: str, name: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as exc:
        raise MinariEnvError(
            f"the environment {name!r}: cannot import {module} "
            f"({type(exc).__name__}: {_first_line(exc)})"
        ) from None


def _registering_modules(env_id: str) -> list[str]:
    """Modules that may register a plain id: its namespace, then gymnasium plugins."""
    candidates = []
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    if namespace:
        candidates += [namespace, namespace.lower(), namespace.lower().replace("-", "_")]
    try:
        from importlib.metadata import entry_points

        for point in entry_points(group="gymnasium.envs"):
            if point.name in ("__root__", namespace):
                candidates.append(point.value.split(":", 1)[0])
    except Exception:  # (broken metadata of some other package)
        pass
    return list(dict.fromkeys(c for c in candidates if c.isidentifier() or "." in c))


def environment_spaces(spec: Any) -> tuple[Any, Any]:
    """(observation space, action space) of the environment ``spec`` makes."""
    import gymnasium

    try:
        env = gymnasium.make(spec)
    except Exception as exc:
        raise MinariEnvError(
            f"cannot make the environment {spec.id!r} to read its spaces "
            f"({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    try:
        return env.observation_space, env.action_space
    finally:
        with contextlib.suppress(Exception):  # (closing is a courtesy here)
            env.close()


def recorded_spec(name: Any, spec_json: Any = None) -> Any:
    """The env spec recorded at run time: ``rl.env.spec`` (the spec itself, which makes the
    env wherever its entry point can be imported), else the ``rl.env.name`` id when this
    process can find it; None otherwise (the values' spaces are inferred instead)."""
    if isinstance(spec_json, str) and spec_json:
        from gymnasium.envs.registration import EnvSpec

        try:
            return EnvSpec.from_json(spec_json)
        except Exception:  # (text from another gymnasium release, say: the id may do)
            pass
    if not isinstance(name, str) or not name:
        return None
    try:
        return environment_spec(name)
    except MinariEnvError:
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().split("\n", 1)[0]
    return text if len(text) <= 200 else text[:197] + "..."


# --- spaces from values --------------------------------------------------------------------------


def infer_space(values: Sequence[Any]) -> Any:
    """A gymnasium space that holds every value (ValueError for values none holds).

    Dicts give ``Dict``, tuples of one length ``Tuple``, text ``Text``, float arrays
    ``Box(-inf, inf)``, uint8 arrays ``Box(0, 255)`` (images, as Minari stores them), other
    integer arrays ``Box(min, max)``, booleans ``MultiBinary``, non-negative integers
    ``Discrete``; each in its dtype and shape.
    """
    from gymnasium import spaces

    first = values[0]
    if isinstance(first, dict):
        keys = list(first)
        if not keys or any(not isinstance(v, dict) or set(v) != set(keys) for v in values):
            raise ValueError(f"cannot infer a space for dicts whose keys change, like {first!r}")
        return spaces.Dict({key: infer_space([v[key] for v in values]) for key in keys})
    if isinstance(first, tuple):
        size = len(first)
        if not size or any(not isinstance(v, tuple) or len(v) != size for v in values):
            raise ValueError(
                f"cannot infer a space for tuples whose length changes, like {_short(first)} "
                "(a Sequence space, which Minari cannot store)"
            )
        return spaces.Tuple([infer_space([v[i] for v in values]) for i in range(size)])
    if isinstance(first, str):
        if not all(isinstance(v, str) for v in values):
            raise ValueError(f"cannot infer a space for mixed text and other values: {first!r}")
        charset = "".join(sorted(set("".join(values)))) or string.ascii_letters
        return spaces.Text(
            max_length=max(1, *(len(v) for v in values)),
            min_length=min(len(v) for v in values),
            charset=charset,
        )
    try:
        array = np.asarray(values)
    except ValueError:  # (ragged arrays)
        array = np.asarray([None])
    if array.dtype.kind in "iu" and array.ndim == 1 and array.min() >= 0:
        return spaces.Discrete(int(array.max()) + 1)
    if array.dtype.kind == "b":
        return spaces.MultiBinary(list(array.shape[1:]) or 1)
    if array.dtype.kind in "iuf":
        shape = array.shape[1:]
        if array.dtype.kind == "f":
            return spaces.Box(-np.inf, np.inf, shape, array.dtype)
        if array.dtype == np.uint8:
            return spaces.Box(0, 255, shape, np.uint8)
        return spaces.Box(array.min(), array.max(), shape, array.dtype)
    raise ValueError(
        f"cannot infer a space for values like {_short(first)}; give the environment id or "
        "the spaces"
    )


def inferred(values: Sequence[Any], what: str, recorded: Any = None) -> Any:
    """:func:`infer_space` of the episodes' ``what``, or MinariSpacesError saying what to give
    (and, when ``recorded`` names an environment this process does not know, which)."""
    try:
        return infer_space(values)
    except ValueError as exc:
        first = values[0] if values else None
        while isinstance(first, dict) and first:  # (the value a Dict space could not hold)
            first = next(iter(first.values()))
        if isinstance(recorded, str) and re.search(r"-v\d+$", recorded):  # (an id, not a class)
            env = (
                f"the episodes' environment {recorded!r} is not registered here: name the "
                f"package that registers it (--env PACKAGE:{recorded.rpartition(':')[2]}, or "
                "env=)"
            )
        else:
            env = "give a registered gymnasium env id (--env ID, or env=)"
        reason = "" if "give the environment" in str(exc) else f" ({exc})"
        raise MinariSpacesError(
            f"Minari needs a gymnasium space for the {what}, and none holds values like "
            f"{_short(first)} ({type(first).__name__}){reason}: {env} or the spaces "
            "(observation_space=, action_space=); text and chat episodes belong in step "
            "tables or chat rows (--format steps, --format chat)"
        ) from None


def check_storable(space: Any, what: str) -> None:
    """MinariSpacesError when Minari cannot store ``space`` (it has no serializer for it)."""
    from minari.serialization import serialize_space

    try:
        serialize_space(space)
    except NotImplementedError:
        kind = _unstorable(space)
        raise MinariSpacesError(
            f"Minari cannot store the {what}' space {kind} (minari has no serializer for "
            f"{type(kind).__name__} spaces; its DataCollector cannot either): write step "
            "tables instead (--format steps, sinks=['steps'])"
        ) from None


def _unstorable(space: Any) -> Any:
    """The innermost space Minari has no serializer for."""
    from gymnasium import spaces

    children: list[Any] = []
    if isinstance(space, spaces.Dict):
        children = list(space.spaces.values())
    elif isinstance(space, spaces.Tuple):
        children = list(space.spaces)
    for child in children:
        try:
            check_storable(child, "")
        except MinariSpacesError:
            return _unstorable(child)
    return space


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --- values in Minari's layout ----------------------------------------------------------------


def stacked(values: Sequence[Any]) -> Any:
    """One episode's values (observations, actions or infos) in ``DataCollector``'s buffer
    layout: dicts as dicts (keys sorted) of stacked children, tuples and lists as tuples and
    lists of them, ``None`` as nothing, any other value as the list of the values.

    StructureError when the structure changes from one value to the next (DataCollector's
    ``jax.tree_util`` append fails there too)."""
    first = values[0]
    if isinstance(first, dict):
        keys = list(first)
        for value in values:
            if not isinstance(value, dict) or value.keys() != first.keys():
                raise StructureError(
                    f"keys {sorted(map(str, keys))} change to "
                    f"{sorted(map(str, value)) if isinstance(value, dict) else _short(value)}"
                )
        with contextlib.suppress(TypeError):  # (keys of mixed types: kept in their order)
            keys = sorted(keys)
        return {key: stacked([value[key] for value in values]) for key in keys}
    if isinstance(first, (tuple, list)):
        kind, size = type(first), len(first)
        for value in values:
            if type(value) is not kind or len(value) != size:
                raise StructureError(
                    f"a {kind.__name__} of {size} items changes to {_short(value)}"
                )
        return kind(stacked([value[i] for value in values]) for i in range(size))
    if first is None:
        if any(value is not None for value in values):
            raise StructureError("a missing value (None) changes to a value")
        return None
    return list(values)


def structure(value: Any) -> Any:
    """The shape of a value's nesting (dict keys, tuple lengths), to compare episodes by."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), structure(v)) for k, v in value.items())))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(structure(v) for v in value))
    return None if value is None else "leaf"


__all__ = [
    "MinariDatasetError",
    "MinariEnvError",
    "MinariSpacesError",
    "StructureError",
    "check_storable",
    "environment_spaces",
    "environment_spec",
    "infer_space",
    "inferred",
    "recorded_spec",
    "stacked",
    "structure",
]
