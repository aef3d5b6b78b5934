"""Deep equality of decoded values: what ``==`` cannot say of numpy arrays and NaN.

Trajectories compare equal by it (``Trajectory.__eq__``), and so do the tests' oracles.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def values_equal(a: Any, b: Any) -> bool:
    """Deep equality that understands numpy arrays (dtype, shape, data) and NaN."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "O":
            return all(values_equal(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return type(a) is type(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if type(a) is not type(b) and not (_is_number(a) and _is_number(b)):
        return False
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return all(
            values_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    try:
        return bool(a == b)
    except Exception:
        return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
