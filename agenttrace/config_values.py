"""How each kind of setting value is read from text: flags, lists, numbers in a range,
import paths, blob stores and conventions (the parsers of agenttrace.config.SETTINGS)."""

from __future__ import annotations

import importlib
import math
import numbers
import os
from collections.abc import Callable
from typing import Any


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _parse_list(text: str) -> tuple[str, ...]:
    """``"jsonl, Parquet"`` -> ``("jsonl", "parquet")``; ``",,,"`` -> ``()``, which
    :func:`_check_names_something` rejects: a text that names nothing is a mistake."""
    return tuple(part.strip().lower() for part in text.split(",") if part.strip())


def _parse_blob_store(text: str) -> str:
    """A folder or URL a blob store can be opened at (checked now, not at the first write)."""
    from agenttrace.storage.blobs import check_blob_store

    check_blob_store(text)
    return text


def _parse_callable(text: str) -> Callable[..., Any]:
    module_name, _, attr = text.partition(":")
    if not module_name or not attr:
        raise ValueError("expected an import path like 'package.module:function'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{text} is not callable")
    return obj


def _parse_conventions(value: Any) -> Any:
    """Presets and mapping files (``runner,openinference``, ``my.toml``), or a Conventions."""
    from agenttrace.trajectory.conventions import Conventions, conventions_from_value

    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, (list, tuple)):
        value = [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
        wrong = [v for v in value if not isinstance(v, str)]
    else:
        wrong = [] if isinstance(value, (str, Conventions)) else [value]
    if wrong:
        raise ValueError(
            "expected presets and mapping files (a comma-separated string or a list of "
            f"them) or a Conventions, got {type(wrong[0]).__name__}"
        )
    if isinstance(value, str) and not any(part.strip() for part in value.split(",")):
        raise ValueError("it names no presets or files")
    conventions = conventions_from_value(value)
    return conventions if conventions else None


class Number:
    """The parser of a numeric setting: a whole number (``int``) or a number (``float``) from
    ``minimum`` to ``maximum``, both included; NaN and infinities never. Takes the text of an
    environment variable or, given to ``configure()``, a number (``True`` is not one)."""

    def __init__(self, kind: type, minimum: float, maximum: float, unit: str = "") -> None:
        self.kind = kind
        self.minimum = minimum
        self.maximum = maximum
        self.unit = unit  # shown after the maximum: "1 day", "1 GiB"

    def describe(self) -> str:
        """``a whole number greater than 0 and at most 10000000``: what is accepted."""
        noun = "a whole number" if self.kind is int else "a number"
        low = (
            "greater than 0"
            if self.kind is int and self.minimum == 1
            else f"at least {_plain(self.minimum)}"
        )
        unit = f" ({self.unit})" if self.unit else ""
        return f"{noun} {low} and at most {_plain(self.maximum)}{unit}"

    def __call__(self, value: Any) -> Any:
        expected = f"expected {self.describe()}"
        if isinstance(value, str):
            try:
                number: Any = self.kind(value.strip())
            except (ValueError, OverflowError):
                raise ValueError(expected) from None
        elif isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{expected}, got {type(value).__name__}")
        else:
            number = value
        try:
            if not math.isfinite(number):
                raise ValueError(expected)
            if self.kind is int:
                if not float(number).is_integer():
                    raise ValueError(expected)
                number = int(number)
            else:
                number = float(number)
        except OverflowError:  # an int too large for a float
            raise ValueError(expected) from None
        if not self.minimum <= number <= self.maximum:
            raise ValueError(expected)
        return number


def _plain(number: float) -> str:
    """``86400``, ``0.001``: a bound as one would type it."""
    return str(int(number)) if float(number).is_integer() else repr(number)


#: Ranges of the numeric settings (docs/configuration.md shows each with its setting).
MAX_COUNT = 10_000_000  # episodes held open, queue capacity, tokens per call, group size
MAX_SECONDS = 86_400.0  # timeouts and intervals: one day
MIN_SECONDS = 0.001  # below a millisecond a timeout or tick is a busy loop
GIB = 2**30
TIB = 2**40


def _count() -> Number:
    return Number(int, 1, MAX_COUNT)


def _seconds() -> Number:
    return Number(float, MIN_SECONDS, MAX_SECONDS, "1 day")


def _bytes(minimum: int = 1, maximum: int = TIB) -> Number:
    return Number(int, minimum, maximum, "1 TiB" if maximum == TIB else "1 GiB")
