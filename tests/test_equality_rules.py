"""values_equal (agenttrace/trajectory/equality.py), the oracle of trajectories' ``==`` and of
the tests: False for unlike values, True for like ones, each pair chosen by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from agenttrace.trajectory.equality import values_equal


@dataclasses.dataclass
class Pair:
    a: object
    b: object = None


class Unequal:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    __hash__ = object.__hash__


def _objects(*items: object) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = list(items)
    return array


_UNLIKE = [
    (1, 2),
    (1.0, 1.5),
    ("a", "b"),
    (True, 1),  # a bool is no number here
    (False, 0.0),
    (None, 0),
    ([1], [2]),
    ([1, 2], [1]),
    ([1], (1,)),  # a list is no tuple
    ((1,), (1, 2)),
    ({"a": 1}, {"a": 2}),
    ({"a": 1}, {"b": 1}),
    ({"a": 1}, {"a": 1, "b": 2}),
    ({"a": [1]}, {"a": [1.5]}),
    (math.nan, 1.0),
    (math.nan, np.float64("nan")),  # NaN of another type
    (np.array([1]), [1]),
    ([1], np.array([1])),
    (np.array([1], dtype="<i8"), np.array([1.0])),
    (np.array([1, 2]), np.array([[1, 2]])),
    (np.array([1.0, 2.0]), np.array([1.0, 3.0])),
    (np.array([math.nan]), np.array([0.0])),
    (_objects((1,), None), _objects((2,), None)),
    (Pair(1), Pair(2)),
    (Pair([np.array([1])]), Pair([np.array([2])])),
    (Unequal(), Unequal()),
    ("1", 1),
    ({1}, {2}),
]


@pytest.mark.parametrize(("a", "b"), _UNLIKE, ids=[f"{a!r}-{b!r}"[:40] for a, b in _UNLIKE])
def test_unlike_values_are_not_equal(a, b) -> None:
    assert values_equal(a, b) is False
    assert values_equal(b, a) is False


_LIKE = [
    (1, 1.0),  # numbers of either kind
    (math.nan, math.nan),
    ([math.nan, {"a": (1, math.nan)}], [math.nan, {"a": (1, math.nan)}]),
    (np.array([1.0, math.nan]), np.array([1.0, math.nan])),
    (np.array([1 + 1j, complex(math.nan, 0)]), np.array([1 + 1j, complex(math.nan, 0)])),
    (_objects((1,), np.array([2])), _objects((1,), np.array([2]))),
    (Pair(np.array([1]), [math.nan]), Pair(np.array([1]), [math.nan])),
    ({"a": [1, 2]}, {"a": [1, 2]}),
    ({1, 2}, {2, 1}),
    ("x", "x"),
]


@pytest.mark.parametrize(("a", "b"), _LIKE, ids=[f"{a!r}"[:40] for a, _ in _LIKE])
def test_like_values_are_equal(a, b) -> None:
    assert values_equal(a, b) is True
    assert values_equal(b, a) is True


def test_a_value_is_equal_to_itself_even_when_its_eq_raises() -> None:
    value = Unequal()
    assert values_equal(value, value) is True
