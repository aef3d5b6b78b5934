"""Validation of what is read: the checks ``Trajectory.from_dict`` makes as it builds.

Every loader goes through ``from_dict``; a record that breaks a rule raises
:class:`TrajectoryFormatError` naming the field (``steps[3].llm_calls[0].finish_reasons``).
The rules, which records are skipped and which values are coerced, are in
docs/trajectory-format.md, "Validation".
"""

from __future__ import annotations

import math
import re
import reprlib
import sys
from typing import Any, NoReturn

import numpy as np

from agenttrace.trajectory.codec import ValueDecodeError, decode


class TrajectoryFormatError(ValueError):
    """A trajectory document does not follow the schema (the message says where).

    ``field`` is the path of the field that broke a rule (``length``, ``steps[3].index``,
    ``steps[0].llm_calls[1].finish_reasons``), None when the record as a whole is wrong.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple:
        return (_rebuild_format_error, (str(self), self.field))


def _rebuild_format_error(message: str, field: str | None) -> TrajectoryFormatError:
    return TrajectoryFormatError(message, field=field)


# --- validation: the checks ``from_dict`` makes as it builds (docs/trajectory-format.md) ------

#: Integer fields (times, lengths, indices, token counts) must fit a signed 64-bit integer:
#: the Parquet columns are int64.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Integers beyond this have no float64 value (returns, rewards, discounts are float64).
_FLOAT_INT_MAX = int(sys.float_info.max)
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_shown_repr = reprlib.Repr()
_shown_repr.maxlevel = 3
_shown_repr.maxstring = 60
_shown_repr.maxother = 60
_shown_repr.maxlist = _shown_repr.maxtuple = 6
_shown_repr.maxdict = 4


def _shown(value: Any) -> str:
    """A bad value in an error message, short, by its JSON kind (never the whole of it)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is str:
        return "the string " + _shown_repr.repr(value)
    if type(value) is float:
        if value != value:
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return f"the number {value!r}"
    if type(value) is int:
        if value.bit_length() > 64:
            return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
        return f"the integer {value}"
    if type(value) is list:
        return "the list " + _shown_repr.repr(value)
    if type(value) is dict:
        return "the object " + _shown_repr.repr(value)
    try:
        return f"a {type(value).__name__} " + _shown_repr.repr(value)
    except Exception:  # a decoded object with a broken repr
        return f"a {type(value).__name__}"


def _fail(where: str, expected: str, value: Any) -> NoReturn:
    raise TrajectoryFormatError(f"{where}: expected {expected}, got {_shown(value)}", field=where)


def _integer(value: Any, where: str, minimum: int, what: str) -> int:
    """The slow path of an integer field (the callers test the common case inline): a float
    with an integral value is taken as that integer; anything else breaks the rule."""
    if type(value) is float and value.is_integer():  # (False for NaN and infinities)
        value = int(value)
    if type(value) is int and minimum <= value <= INT64_MAX:
        return value
    if type(value) is int:
        what += " of at most 64 bits"
    _fail(where, what, value)


def _time(value: Any, where: str) -> int | None:
    """A time: integer nanoseconds (64-bit), or null."""
    if value is None or (type(value) is int and INT64_MIN <= value <= INT64_MAX):
        return value
    return _integer(value, where, INT64_MIN, "an integer (nanoseconds) or null")


def _count(value: Any, where: str) -> int | None:
    """A token count: an integer, or null."""
    if value is None or (type(value) is int and INT64_MIN <= value <= INT64_MAX):
        return value
    return _integer(value, where, INT64_MIN, "an integer or null")


def _text(value: Any, where: str) -> str | None:
    """A string or null."""
    if value is None or type(value) is str:
        return value
    _fail(where, "a string or null", value)


def _flag(value: Any, where: str) -> bool:
    """true or false (absent: false)."""
    if value is True or value is False:
        return value
    _fail(where, "true or false", value)


def _content(value: Any, where: str) -> Any:
    """A value in the codec's encoding, decoded; a malformed tag breaks the rule."""
    try:
        return decode(value)
    except ValueDecodeError as exc:
        raise TrajectoryFormatError(f"{where}: {exc}", field=where) from exc
    except RecursionError:
        raise TrajectoryFormatError(
            f"{where}: nested too deeply to decode (over Python's recursion limit)", field=where
        ) from None
    except Exception as exc:  # what a tag's body made numpy or float() raise ({"$float": 1e400})
        raise TrajectoryFormatError(
            f"{where}: malformed value: {type(exc).__name__}: {exc}", field=where
        ) from exc


def _is_real(value: Any) -> bool:
    """A real number that has a float64 value (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return False
    try:
        float(value)
    except (OverflowError, TypeError, ValueError):  # an int beyond float64, a complex
        return False
    return True


def _real(value: Any, where: str, *, optional: bool) -> Any:
    """The slow path of a number field (return, reward, discount): an int within the float64
    range, or a tagged number such as ``{"$float": "nan"}`` decoded."""
    if value is None and optional:
        return None
    if type(value) is int and -_FLOAT_INT_MAX <= value <= _FLOAT_INT_MAX:
        return value
    if type(value) is dict:
        decoded = _content(value, where)
        if _is_real(decoded):
            return decoded
    what = "a number within the float64 range" if type(value) is int else "a number"
    _fail(where, what + (" or null" if optional else ""), value)


def _object(value: Any, where: str) -> dict:
    """An object (decoded; its values in the codec's encoding); null is taken as {}."""
    if value is None:
        return {}
    if type(value) is dict:
        decoded = _content(value, where)
        if type(decoded) is dict:
            return decoded
    _fail(where, "an object", value)


def _list(value: Any, where: str, what: str) -> list:
    """A list (null and absent taken as empty)."""
    if type(value) is list:
        return value
    if value is None:
        return []
    _fail(where, what, value)


def _integers(value: Any, where: str, minimum: int) -> list[int]:
    """A list of integers (token ids, missing step indices)."""
    if type(value) is list and (
        not value
        or (set(map(type, value)) == {int} and min(value) >= minimum and max(value) <= INT64_MAX)
    ):
        return value
    bound = " >= 0" if minimum == 0 else ""
    if type(value) is not list:
        _fail(where, "a list of integers" + bound, value)
    # Integral floats are taken as integers, as for one integer.
    return [
        item
        if type(item) is int and minimum <= item <= INT64_MAX
        else _integer(item, f"{where}[{i}]", minimum, "an integer" + bound)
        for i, item in enumerate(value)
    ]


def _finite_numbers(value: Any, where: str) -> list[float]:
    """A list of finite numbers (log probabilities)."""
    if type(value) is list and set(map(type, value)) <= {float, int}:
        try:
            if all(map(math.isfinite, value)):
                return value
        except OverflowError:  # an int beyond float64
            pass
    if type(value) is list:
        for i, item in enumerate(value):
            if type(item) not in (float, int) or not _is_real(item) or not math.isfinite(item):
                _fail(f"{where}[{i}]", "a finite number", item)
    _fail(where, "a list of finite numbers", value)


def _strings(value: Any, where: str) -> list[str] | None:
    """A list of strings, or null (finish reasons)."""
    if value is None or (type(value) is list and set(map(type, value)) <= {str}):
        return value
    if type(value) is list:
        for i, item in enumerate(value):
            if type(item) is not str:
                _fail(f"{where}[{i}]", "a string", item)
    _fail(where, "a list of strings or null", value)


def _text_map(value: Any, where: str) -> dict[str, str]:
    """An object of strings (``lossy``); null is taken as {}."""
    if value is None:
        return {}
    if type(value) is dict:
        for key, text in value.items():
            if type(key) is not str:
                _fail(where, "an object (string keys)", value)
            if type(text) is not str:
                _fail(f"{where}[{key!r}]", "a string", text)
        return dict(value)
    _fail(where, "an object of strings", value)


def _scores(value: Any) -> dict[str, float]:
    """A trajectory's ``scores``: names to finite numbers (null and {} taken as none)."""
    if not value:
        if value is None or type(value) is dict:
            return {}
        _fail("scores", "an object of numbers", value)
    if type(value) is not dict:
        _fail("scores", "an object of numbers", value)
    scores = {}
    for name, number in value.items():
        where = f"scores[{_shown_repr.repr(name)}]"
        if type(name) is not str:
            _fail("scores", "an object (string keys)", value)
        if type(number) not in (int, float) or not _is_real(number) or not math.isfinite(number):
            _fail(where, "a finite number", number)
        scores[name] = float(number)
    return scores


def _require(data: dict, keys: tuple[str, ...], what: str) -> None:
    missing = [key for key in keys if key not in data]
    if missing:
        raise TrajectoryFormatError(f"{what} is missing required key(s): {', '.join(missing)}")


def _named_object(data: Any, where: str) -> str:
    """The ``name`` of a call's object (model or tool call): an object with a string name."""
    if type(data) is not dict:
        _fail(where, "an object", data)
    if "name" not in data:
        raise TrajectoryFormatError(f"{where}: missing required key name", field=where)
    name = data["name"]
    if type(name) is not str:
        _fail(where + ".name", "a string", name)
    return name
