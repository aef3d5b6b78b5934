"""Read reward, termination and observation out of what environments return.

Built-in shapes (``extract_step`` tries them in this order):

* gymnasium ``(obs, reward, terminated, truncated, info)``;
* old gym ``(obs, reward, done, info)`` and ``(obs, reward, done)``;
* dm_env / ARES ``TimeStep(step_type, reward, discount, observation)``: LAST with discount 0
  is terminated, LAST with any other discount is truncated;
* dicts with ``reward`` and ``terminated``/``truncated``/``done``;
* objects with ``reward`` and ``done`` attributes (e.g. a runner's ``TimeStep(chats, reward,
  done, ...)``).

In every shape the reward may be ``None`` (runners allow it): the step is still a step, its
termination flags recorded. Anything else is not a step result (``None``): the value is then
just recorded as content.
Named extractors (``EXTRACTORS``) let auto-instrumentation targets pick one explicitly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_UNSET: Any = object()


@dataclass
class StepResult:
    """What an environment step produced; ``_UNSET`` fields were not in the value.

    Fields hold what the step gave when it is not a plain number or bool (a reward ``"1.0"``,
    a flag ``"False"``): ``record()`` reads each one and says what it made of it."""

    observation: Any = _UNSET
    reward: Any = None
    terminated: bool | None = None
    truncated: bool | None = None
    discount: float | None = None
    info: Any = _UNSET


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) or (
        hasattr(value, "dtype") and getattr(value, "shape", None) == ()
    )


def _is_reward(value: Any) -> bool:
    """A number, or None: a step without a reward is still a step (its flags count)."""
    return value is None or _is_number(value)


def _is_flag(value: Any) -> bool:
    return isinstance(value, bool) or (
        hasattr(value, "dtype") and getattr(value, "dtype", None) == bool  # noqa: E721
    )


def _is_one_flag(value: Any) -> bool:
    """A bool or a numpy bool scalar (not an array of a vector env's flags)."""
    return isinstance(value, bool) or (_is_flag(value) and getattr(value, "shape", None) == ())


def from_gymnasium(result: Any) -> StepResult | None:
    """A 5-tuple with two flags in the middle. Its reward may be anything when both flags
    are single bools and the info a mapping (the shape is unmistakable): record() then says
    what it makes of a reward that is not a number (docs/tracing-api.md, "Bad values")."""
    if isinstance(result, tuple) and len(result) == 5:
        obs, reward, terminated, truncated, info = result
        flags = _is_flag(terminated) and _is_flag(truncated)
        if flags and (
            _is_reward(reward)
            or (_is_one_flag(terminated) and _is_one_flag(truncated) and isinstance(info, Mapping))
        ):
            return StepResult(obs, reward, bool(terminated), bool(truncated), None, info)
    return None


def from_done_tuple(result: Any) -> StepResult | None:
    """``(obs, reward, done)`` and old gym's ``(obs, reward, done, info)`` (whose reward may
    be anything when ``done`` is a single bool and the info a mapping, as in
    :func:`from_gymnasium`)."""
    if isinstance(result, tuple) and len(result) in (3, 4):
        obs, reward, done = result[:3]
        info = result[3] if len(result) == 4 else _UNSET
        if _is_flag(done) and (
            _is_reward(reward) or (_is_one_flag(done) and isinstance(info, Mapping))
        ):
            return StepResult(obs, reward, bool(done), False, None, info)
    return None


def _step_type_name(step_type: Any) -> str:
    name = getattr(step_type, "name", None)
    if isinstance(name, str):
        return name.upper()
    return {0: "FIRST", 1: "MID", 2: "LAST"}.get(int(step_type), "MID")


def from_dm_env(result: Any) -> StepResult | None:
    step_type = getattr(result, "step_type", None)
    if step_type is None or not hasattr(result, "observation"):
        return None
    try:
        kind = _step_type_name(step_type)
    except (TypeError, ValueError):
        return None
    discount = getattr(result, "discount", None)
    number = _float_or_none(discount)
    last = kind == "LAST"
    terminated = last and number == 0.0
    truncated = last and not terminated
    reward = getattr(result, "reward", None)
    # (a discount that is not a number goes to record() as it is: it says so)
    return StepResult(
        result.observation, reward, terminated, truncated, discount if number is None else number
    )


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, str) else float(value)
    except Exception:  # not a number (record() warns about it)
        return None


def from_mapping(result: Any) -> StepResult | None:
    if not isinstance(result, Mapping) or "reward" not in result:
        return None
    if not any(key in result for key in ("terminated", "truncated", "done")):
        return None
    terminated = result.get("terminated")
    truncated = result.get("truncated")
    if terminated is None and truncated is None:
        terminated = result.get("done")
    return StepResult(
        result.get("observation", result.get("obs", _UNSET)),
        result["reward"],
        _flag(terminated),
        _flag(truncated),
        result.get("discount"),
        result.get("info", _UNSET),
    )


def _flag(value: Any) -> Any:
    """A flag read from a mapping or object: a bool, numpy bool or int as a bool; None as
    None; anything else as it is, for record() to read and warn about (``bool("False")``
    would be true)."""
    if value is None or type(value) is bool:
        return value
    if isinstance(value, int) or (_is_flag(value) and getattr(value, "shape", None) == ()):
        return bool(value)
    return value


def from_reward_done_object(result: Any) -> StepResult | None:
    if isinstance(result, (tuple, Mapping)) or not hasattr(result, "reward"):
        return None
    if not hasattr(result, "done") and not hasattr(result, "terminated"):
        return None
    terminated = getattr(result, "terminated", None)
    truncated = getattr(result, "truncated", None)
    if terminated is None and truncated is None:
        terminated = getattr(result, "done", None)
    return StepResult(
        getattr(result, "observation", _UNSET),
        result.reward,
        _flag(terminated),
        _flag(truncated),
        getattr(result, "discount", None),
        getattr(result, "info", _UNSET),
    )


_AUTO = (from_gymnasium, from_dm_env, from_done_tuple, from_mapping, from_reward_done_object)


def extract_step(result: Any) -> StepResult | None:
    """The step result in ``result``, whatever built-in shape it has; None if none fits."""
    if result is None or (type(result) is tuple and len(result) not in (3, 4, 5)):
        return None  # nothing, or a plain tuple no built-in shape has (checked cheaply first)
    for extractor in _AUTO:
        found = extractor(result)
        if found is not None:
            return found
    return None


def extract_reset(result: Any) -> tuple[Any, Any]:
    """``(observation, info)`` from gymnasium ``(obs, info)``, dm_env FIRST, or a bare obs."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping):
        return result[0], result[1]
    if getattr(result, "step_type", None) is not None and hasattr(result, "observation"):
        return result.observation, _UNSET
    return result, _UNSET


def batch_size(result: Any) -> int | None:
    """How many sub-environments a batched step result holds (a vector env's
    ``(observations, rewards, terminations, truncations, infos)`` or a 4-tuple with ``dones``:
    rewards and flags are 1-d arrays), None for anything else. No extractor reads one as a
    step: it is N steps of N episodes."""
    if not isinstance(result, tuple) or len(result) not in (4, 5):
        return None
    rewards = result[1]
    shape = getattr(rewards, "shape", None)
    if shape is None or len(shape) != 1 or not hasattr(result[2], "shape"):
        return None
    return int(shape[0])


EXTRACTORS: dict[str, Callable[[Any], StepResult | None]] = {
    "auto": extract_step,
    "gymnasium": from_gymnasium,
    "done_tuple": from_done_tuple,
    "dm_env": from_dm_env,
    "mapping": from_mapping,
    "reward_done": from_reward_done_object,
}
