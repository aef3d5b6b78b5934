"""Bad values in a record call: each field is read on its own, and a bad one costs only itself.

The handles' ``record(...)`` (and what decorated calls, extractors and wrappers record through
it) read every field separately: observation, action, info, messages, tool arguments and
results (content), reward and discount (numbers), terminated/truncated/done (flags), token
counts and ids. A value that cannot be recorded costs its own field, never the others, never
the user's program; it is said once per role, field, type and problem, on the ``agenttrace``
logger, in the form ``agenttrace: env.step: the info value (dict) cannot be recorded
(RecursionError: ...); recorded as a $unserializable marker`` (docs/tracing-api.md, "Bad
values"):

* **content** whose encoding fails (a list that contains itself, nesting past the stack) is
  recorded as the codec's fallback object with the error in place of a repr:
  ``{"$unserializable": {"type": "builtins:list", "error": "RecursionError: ..."}}``. There
  is no repr: the value's repr may be as broken as its encoding, and would show what the
  encoder redacts (values of keys named like secrets).
* content whose encoding would not read back (a dict key or set item that is not itself
  recordable: an object whose ``__repr__`` raises, any ``$unserializable`` object) is
  recorded with those keys and items as text: their ``repr()``, or
  ``<unrepresentable key of type module:QualName>`` when that raises (``#2``, ``#3`` ... after
  one that would collide). Every recorded text reads back with
  :func:`agenttrace.trajectory.codec.loads`.
* **numbers** (reward, discount): a float, int, bool (1.0/0.0), numpy number or 0-d array, or
  anything ``float()`` takes (``Decimal``, ``Fraction``, a 0-d tensor) is recorded silently;
  a numeric string (``"1.0"``) and a one-element list, tuple or array of a number are
  recorded as that number with a warning; anything else (``"lots"``, ``10**400``, a complex
  number, a longer list) is left out (None) with a warning.
* **flags**: bools, numbers and numpy bools as ``bool()`` reads them; a one-element list or
  array as its item, with a warning; text (``"False"`` would read as true) and anything
  ``bool()`` refuses are left out with a warning.

Nothing here runs for the common values on the hot path: the callers test ``type(x) is
float`` (or ``bool``) first; content encoding wraps ``codec.dumps`` in ``try`` and looks for
a ``$dict``/``$set``/``$frozenset`` tag in text longer than 10 characters (not in the text of
a numeric array) before :func:`readable_text` checks the keys. The codec's own work (its
fallback, its nesting limit) is left to it: this module only handles what it raises or what
would not read back.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from typing import Any

import numpy as np

from agenttrace import semconv as sc
from agenttrace._logging import warn_once
from agenttrace.trajectory import codec

#: The longest error text a marker or warning keeps.
ERROR_LIMIT = 200
#: The longest key text a key that would not read back becomes.
KEY_LIMIT = 200
#: The longest piece of a value a warning quotes.
QUOTE_LIMIT = 60

_FIELD_NAMES = {
    sc.OBSERVATION: "observation",
    sc.ACTION: "action",
    sc.INFO: "info",
    sc.GEN_AI_INPUT_MESSAGES: "input_messages",
    sc.GEN_AI_OUTPUT_MESSAGES: "output_messages",
    sc.GEN_AI_TOOL_DEFINITIONS: "tool_definitions",
    sc.GEN_AI_TOOL_CALL_ARGUMENTS: "arguments",
    sc.GEN_AI_TOOL_CALL_RESULT: "result",
}

_marker_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def field_name(key: str) -> str:
    """The record() keyword of a content attribute (the attribute key itself for others)."""
    return _FIELD_NAMES.get(key, key)


def type_path(value: Any) -> str:
    """``module:QualName`` of the value's type: the codec's spelling (``builtins:list``)."""
    cls = type(value)
    return f"{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', cls.__name__)}"


def type_label(value: Any) -> str:
    """The value's type for a warning: ``dict`` for builtins, else ``module.QualName``."""
    cls = type(value)
    module = getattr(cls, "__module__", "?")
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module == "builtins" else f"{module}.{name}"


def error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception, at most :data:`ERROR_LIMIT` characters."""
    try:
        message = str(exc)
    except Exception:  # an exception whose __str__ raises
        message = ""
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text[:ERROR_LIMIT]


def _quote(value: Any) -> str:
    try:
        text = repr(value[: QUOTE_LIMIT + 1] if isinstance(value, str) else value)
    except Exception:
        return "?"
    return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 3] + "..."


def _warn(role: str, field: str, value: Any, problem: str, message: str, *args: Any) -> None:
    """One warning per role, field, value type and problem (through ``warn_once``)."""
    warn_once(
        f"bad value:{role}:{field}:{type_path(value)}:{problem}",
        "agenttrace: %s: the %s value (%s) " + message,
        role,
        field,
        type_label(value),
        *args,
    )


# --- content ---------------------------------------------------------------------------------


def marker(value: Any, exc: BaseException) -> dict[str, Any]:
    """The marker a content value whose encoding raised ``exc`` is recorded as (decoded, it
    is itself, like every ``$unserializable`` object)."""
    return {"$unserializable": {"type": type_path(value), "error": error_text(exc)}}


def unencodable_text(role: str, key: str, value: Any, exc: BaseException) -> str:
    """JSON text of :func:`marker` for content ``value`` of attribute ``key``, warned once."""
    body = marker(value, exc)
    _warn(
        role,
        field_name(key),
        value,
        "unencodable",
        "cannot be recorded (%s); recorded as a $unserializable marker",
        body["$unserializable"]["error"],
    )
    return _marker_json(body)


def readable_text(role: str, key: str, value: Any, text: str) -> str:
    """``text`` (``codec.dumps`` of ``value``) when it reads back; else ``value`` encoded
    with the dict keys and set items that would not read back written as text (warned);
    else the marker. Only called for text that holds a ``$dict``, ``$set`` or ``$frozenset``:
    nothing else can fail to read back."""
    try:
        _check_readable(json.loads(text))
        return text
    except RecursionError:  # (nesting is the codec's to bound: the text stays as it made it)
        return text
    except Exception:
        pass
    replaced: list[Any] = []
    try:
        fixed = _readable(value, replaced)
        fixed_text = codec.dumps(fixed, redact_secrets=True)
        _check_readable(json.loads(fixed_text))
    except Exception as exc:
        return unencodable_text(role, key, value, exc)
    first = replaced[0] if replaced else None
    _warn(
        role,
        field_name(key),
        value,
        f"unreadable keys:{type_path(first)}",
        "holds dict keys or set items of type %s that would not read back; they are "
        "recorded as their repr() text",
        type_label(first),
    )
    return fixed_text


def _hashable(value: Any) -> Any:  # (as the codec's decoder makes keys and set items)
    return tuple(value) if isinstance(value, list) else value


def _check_readable(data: Any) -> None:
    """Raise if the JSON data's ``$dict`` keys or ``$set``/``$frozenset`` items would not
    decode to something hashable (what :func:`codec.decode` needs of them)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if type(item) is list:
            stack.extend(item)
        elif type(item) is dict:
            if len(item) == 1:
                tag, body = next(iter(item.items()))
                if tag == "$dict":
                    for pair_key, pair_value in body:
                        if type(pair_key) is dict or type(pair_key) is list:  # (not a scalar)
                            hash(_hashable(codec.decode(pair_key)))
                        stack.append(pair_value)
                    continue
                if tag in ("$set", "$frozenset"):
                    for element in body:
                        if type(element) is dict or type(element) is list:
                            hash(_hashable(codec.decode(element)))
                    continue
            stack.extend(item.values())


def _readable(value: Any, replaced: list[Any]) -> Any:
    """``value`` with dict keys and set items that would not read back replaced by text."""
    cls = type(value)
    if cls is dict or (isinstance(value, dict) and not _has_own_encoding(value)):
        out: dict[Any, Any] = {}
        taken: set[str] | None = None
        for key, item in value.items():
            if type(key) is not str and not _reads_back(key):
                if taken is None:
                    taken = {k for k in value if isinstance(k, str)}
                replaced.append(key)
                key = _free_text(_key_text(key), taken)
            out[key] = _readable(item, replaced)
        return out
    if cls is list or (isinstance(value, list) and not _has_own_encoding(value)):
        return [_readable(item, replaced) for item in value]
    if cls is tuple or (isinstance(value, tuple) and not _has_own_encoding(value)):
        return tuple(_readable(item, replaced) for item in value)
    if isinstance(value, (set, frozenset)) and not _has_own_encoding(value):
        items: list[Any] = []
        taken_items: set[str] = {item for item in value if isinstance(item, str)}
        for item in value:
            if type(item) is not str and not _reads_back(item):
                replaced.append(item)
                item = _free_text(_key_text(item), taken_items)
            items.append(item)
        return frozenset(items) if isinstance(value, frozenset) else set(items)
    return value


def _has_own_encoding(value: Any) -> bool:
    """A container subclass the codec encodes as something else (a dataclass, a model)."""
    return dataclasses.is_dataclass(value) or hasattr(value, "model_dump")


def _reads_back(key: Any) -> bool:
    """Whether a dict key (or set item) encodes to something that decodes hashable."""
    try:
        hash(_hashable(codec.decode(json.loads(codec.dumps(key)))))
    except Exception:
        return False
    return True


def _key_text(key: Any) -> str:
    try:
        text = repr(key)
    except Exception:
        return f"<unrepresentable key of type {type_path(key)}>"
    if not isinstance(text, str):
        return f"<unrepresentable key of type {type_path(key)}>"
    return text[:KEY_LIMIT]


def _free_text(text: str, taken: set[str]) -> str:
    """``text``, or ``text #2``, ``#3``... the first not in ``taken`` (then taken)."""
    candidate, number = text, 2
    while candidate in taken:
        candidate = f"{text} #{number}"
        number += 1
    taken.add(candidate)
    return candidate


# --- numbers ---------------------------------------------------------------------------------

_NUMBER_KINDS = frozenset("biuf")


def number_value(value: Any, role: str, field: str) -> float | None:
    """A reward or discount that is not a float, as a float; None: left out (warned).

    The rules are in the module docstring (and docs/tracing-api.md, "Bad values")."""
    try:
        number, note = _number(value)
    except Exception as exc:
        _warn(role, field, value, "not a number", "is not a number (%s); left out", error_text(exc))
        return None
    if note == "text":
        _warn(
            role,
            field,
            value,
            "text",
            "is text (%s); recorded as the number it spells, %r",
            _quote(value),
            number,
        )
    elif note == "one":
        _warn(
            role,
            field,
            value,
            "one",
            "holds one number; recorded as that number, %r",
            number,
        )
    return number


def _number(value: Any) -> tuple[float, str | None]:
    """``(number, note)``: note "text" (parsed from text), "one" (the item of a one-element
    container) or None; raises when ``value`` is not a number agenttrace records."""
    if isinstance(value, (bool, np.bool_)):
        return (1.0 if value else 0.0), None
    if isinstance(value, int):
        return float(value), None  # (OverflowError past 1.8e308)
    if isinstance(value, str):
        return float(value), "text"  # (ValueError for "lots")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError("bytes, not a number")
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMBER_KINDS:
            raise TypeError(f"an array of dtype {value.dtype}, not of numbers")
        if value.size != 1:
            raise TypeError(f"an array of shape {value.shape}, not one number")
        return float(value.reshape(-1)[0]), (None if value.ndim == 0 else "one")
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise TypeError(f"a {type(value).__name__} of {len(value)} items, not one number")
        item = value[0]
        if isinstance(item, (str, bytes, list, tuple, dict, set, np.ndarray)):
            raise TypeError(f"a {type(value).__name__} of one {type(item).__name__}")
        return _number(item)[0], "one"
    if isinstance(value, np.generic):
        if value.dtype.kind not in _NUMBER_KINDS:
            raise TypeError(f"a numpy {value.dtype} scalar, not a real number")
        return float(value), None
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise TypeError("a complex number")
    return float(value), None  # Decimal, Fraction, a 0-d tensor; TypeError for the rest


# --- flags -----------------------------------------------------------------------------------


def flag_value(value: Any, role: str, field: str) -> bool | None:
    """A terminated/truncated/done value that is not a bool, as a bool; None: left out
    (warned)."""
    try:
        flag, one = _flag(value)
    except Exception as exc:
        _warn(role, field, value, "not a flag", "is not a flag (%s); left out", error_text(exc))
        return None
    if one:
        _warn(role, field, value, "one", "holds one flag; recorded as that flag, %r", flag)
    return flag


def step_flags(
    role: str, terminated: Any, truncated: Any, done: Any, unset: Any
) -> dict[str, bool] | None:
    """The terminated/truncated attributes of a record() call's flags (None: none to record).
    ``done`` alone means terminated (and not truncated); ``unset`` marks a flag not given,
    and a flag given as None is not recorded either."""
    if done is not unset and terminated is unset and truncated is unset:
        flag = done if type(done) is bool else flag_value(done, role, "done")
        return None if flag is None else {sc.TERMINATED: flag, sc.TRUNCATED: False}
    flags = {}
    if terminated is not unset and terminated is not None:
        flag = (
            terminated if type(terminated) is bool else flag_value(terminated, role, "terminated")
        )
        if flag is not None:
            flags[sc.TERMINATED] = flag
    if truncated is not unset and truncated is not None:
        flag = truncated if type(truncated) is bool else flag_value(truncated, role, "truncated")
        if flag is not None:
            flags[sc.TRUNCATED] = flag
    return flags or None


def warn_nonfinite(episode: Any, index: int | None, reward: float) -> None:
    """A NaN or infinite reward is recorded as is: said once per episode."""
    warn_once(
        f"nonfinite:{episode.episode_id if episode else ''}",
        "agenttrace: episode %s step %s has a non-finite reward (%r); it is recorded as is "
        "and makes the return %r too",
        episode.episode_id if episode else "?",
        index,
        reward,
        reward,
    )


def read_flag(value: Any) -> bool | None:
    """:func:`flag_value` without a warning (None: not a flag)."""
    try:
        return _flag(value)[0]
    except Exception:
        return None


def _flag(value: Any) -> tuple[bool, bool]:
    """``(flag, from a one-element container)``; raises when ``value`` is not a flag."""
    if isinstance(value, (bool, np.bool_, int, float, np.number)):
        return bool(value), False
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError("text, not a flag (bool('False') is True)")
    if isinstance(value, np.ndarray):
        if value.size != 1 or value.dtype.kind not in _NUMBER_KINDS:
            raise TypeError(f"an array of shape {value.shape} and dtype {value.dtype}")
        return bool(value.reshape(-1)[0]), value.ndim != 0
    if isinstance(value, (list, tuple)):
        if len(value) != 1 or not isinstance(value[0], (bool, np.bool_, int, float, np.number)):
            raise TypeError(f"a {type(value).__name__} of {len(value)} items, not one flag")
        return bool(value[0]), True
    if isinstance(value, (dict, set, frozenset)):
        raise TypeError(f"a {type(value).__name__}, not a flag")
    return bool(value), False  # (a 0-d tensor; TypeError/ValueError from its __bool__)


# --- counts and text -------------------------------------------------------------------------

_COUNT_LIMIT = 2**63


def count_value(value: Any, role: str, field: str) -> int | None:
    """A token count as an int in [0, 2**63); None: left out (warned)."""
    try:
        if isinstance(value, (bool, np.bool_, str, bytes)):
            raise TypeError(f"a {type(value).__name__}, not a count")
        whole = isinstance(value, float) and value.is_integer()
        if not whole and not isinstance(value, (numbers.Integral, np.integer)):
            raise TypeError(f"a {type(value).__name__}, not a whole number")
        count = int(value)
        if not 0 <= count < _COUNT_LIMIT:
            raise ValueError(f"{_quote(count)} is out of range")
    except Exception as exc:
        _warn(role, field, value, "not a count", "is not a count (%s); left out", error_text(exc))
        return None
    return count


def text_value(value: Any, role: str, field: str, *, any_type: bool = False) -> str | None:
    """An id or name: text as it is, a number as its text (with ``any_type``, whatever
    ``str()`` makes of it); None: left out (warned)."""
    if isinstance(value, str):
        return value
    if any_type or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        try:
            text = str(value)
        except Exception as exc:  # a broken __str__, an int past the str conversion limit
            _warn(role, field, value, "not text", "has no text (%s); left out", error_text(exc))
            return None
        if isinstance(text, str):
            return text
    _warn(role, field, value, "not text", "is not text; left out")
    return None


def finish_texts(value: Any, role: str) -> tuple[str, ...] | None:
    """Finish reasons as a tuple of text (one text: one reason); None: left out (warned)."""
    if isinstance(value, str):
        return (value,)
    try:
        return tuple(item if type(item) is str else str(item) for item in value)
    except Exception as exc:
        _warn(
            role,
            "finish_reasons",
            value,
            "not reasons",
            "is not a list of reasons (%s); left out",
            error_text(exc),
        )
        return None
