"""How turns advance the step index when no timestep span wraps them (docs/tracing-api.md)."""

from __future__ import annotations

import pytest
from conftest import read_run

import agenttrace as at


def _act(n: int) -> None:
    with at.agent_act() as act:
        act.record(observation=f"o{n}", action=f"a{n}")


def _env(n: int) -> None:
    with at.env_step() as step:
        step.record(reward=float(n))


def _timestep_with_env(n: int) -> None:
    with at.timestep():
        _env(n)


# Each case: the calls in order (role, its number), and the step index each call lands on.
CASES = {
    "act then env: one step": ([("act", 0), ("env", 0)], [0, 0]),
    "two acts, one env: the first act is a step of its own": (
        [("act", 0), ("act", 1), ("env", 1)],
        [0, 1, 1],
    ),
    "envs alone: a step each": ([("env", 0), ("env", 1)], [0, 1]),
    "act after the last env: a step of its own": ([("act", 0), ("env", 0), ("act", 1)], [0, 0, 1]),
    "act, then a timestep: the act joins it": ([("act", 0), ("timestep", 0)], [0, 0]),
    "act, timestep, act, env": (
        [("act", 0), ("timestep", 0), ("act", 1), ("env", 1)],
        [0, 0, 1, 1],
    ),
}
CALLS = {"act": _act, "env": _env, "timestep": _timestep_with_env}


@pytest.mark.parametrize("case", CASES)
def test_turns_outside_timesteps_advance_the_index(tmp_path, case) -> None:
    calls, expected = CASES[case]
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    with at.episode():
        for role, number in calls:
            CALLS[role](number)
    (trajectory,) = read_run(runtime).live
    steps = {step.index: step for step in trajectory.steps}
    assert sorted(steps) == sorted(set(expected))
    assert trajectory.missing_steps == []
    for (role, number), index in zip(calls, expected, strict=True):
        step = steps[index]
        if role == "act":
            assert (step.observation, step.action) == (f"o{number}", f"a{number}")
        else:
            assert step.reward == float(number)
