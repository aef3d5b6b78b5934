"""Arguments of traced calls, looked up by name without binding (agenttrace.instrument.arguments).

``inspect.Signature.bind_partial`` is the oracle: for every call shape a function accepts,
each named argument is found where binding would put it.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from agenttrace.instrument.arguments import CallArguments, Parameters
from agenttrace.instrument.extractors import _UNSET


def plain(obs, action=None): ...
def keyword_only(obs, *, action, seed=0): ...
def positional_only(obs, /, action): ...
def var_positional(obs, *rest, action=None): ...
def var_keyword(obs, **options): ...
def everything(a, /, b, *rest, c, **options): ...


CALLS: list[tuple[Any, tuple, dict]] = [
    (plain, (1,), {}),
    (plain, (1, 2), {}),
    (plain, (1,), {"action": 2}),
    (plain, (), {"obs": 1, "action": 2}),
    (plain, (), {"action": 2}),
    (keyword_only, (1,), {"action": 2}),
    (keyword_only, (), {"obs": 1, "action": 2, "seed": 3}),
    (positional_only, (1, 2), {}),
    (positional_only, (1,), {"action": 2}),
    (var_positional, (1, 2, 3), {"action": 4}),
    (var_positional, (1,), {}),
    (var_keyword, (1,), {"temperature": 0.5, "model": "m"}),
    (var_keyword, (), {"obs": 1}),
    (everything, (1, 2, 3, 4), {"c": 5, "d": 6}),
    (everything, (1,), {"b": 2, "c": 3}),
]


@pytest.mark.parametrize(("func", "args", "kwargs"), CALLS)
def test_every_named_argument_is_where_binding_puts_it(func, args, kwargs) -> None:
    signature = inspect.signature(func)
    bound = signature.bind_partial(*args, **kwargs).arguments
    call = CallArguments(Parameters(signature), args, kwargs)
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            for key, value in bound.get(param.name, {}).items():
                assert call.get(key) == value  # a ``**options`` entry by its own name
            expected = bound.get(param.name) or _UNSET
        else:
            expected = bound.get(param.name, _UNSET)
        assert call.get(param.name) == expected, param.name
    assert call.get("not_an_argument") is _UNSET


def test_first_prefers_the_names_given_then_the_first_positional_argument() -> None:
    parameters = Parameters.of(plain)
    assert CallArguments(parameters, (1, 2), {}).first(("action", "act")) == 2
    assert CallArguments(parameters, (1,), {"action": 2}).first(("action",)) == 2
    assert CallArguments(parameters, (1,), {}).first(("action",)) == 1  # fallback: obs
    assert CallArguments(parameters, (), {}).first(("action",)) is _UNSET
    # the same names again use the positions worked out the first time
    assert CallArguments(parameters, (7, 8), {}).first(("action", "act")) == 8


def test_the_fallback_is_never_self_or_a_secret() -> None:
    def step(self, api_key, observation_like): ...

    call = CallArguments(Parameters.of(step), ("me", "sk-123", "obs"), {})
    assert call.first(("observation",)) == "obs"
    receiver_skipped = CallArguments(Parameters.of(step, skip_receiver=True), ("sk", "o"), {})
    assert receiver_skipped.first(("observation",)) == "o"
    assert receiver_skipped.get("self") is _UNSET


def test_overrides_come_first_and_flat_spreads_keywords() -> None:
    call = CallArguments(Parameters.of(var_keyword), (1,), {"model": "m"})
    assert call.with_overrides({"obs": 9}).get("obs") == 9
    assert call.get("obs") == 1
    assert call.flat() == {"obs": 1, "model": "m"}


def test_a_function_without_a_signature_reads_keywords_only() -> None:
    call = CallArguments(Parameters.of(print), (1,), {"sep": ","})  # builtins may lack one
    assert call.get("sep") == ","
