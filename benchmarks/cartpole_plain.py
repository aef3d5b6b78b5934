"""The CartPole loop of benchmarks/auto_overhead.py as plain code, with no agenttrace in it.

auto_overhead.py runs it untraced (the bare reference) and traced through
``AgentTraceInstrumentor`` targets only; its hand-written variant is the same loop written
with ``at.episode`` and friends. ``reset_env`` and ``step_env`` are the small wrappers a
project might have around its environment: a target can name them, or name
``gymnasium.core:Env.reset`` / ``Env.step`` and leave them untraced.
"""

from __future__ import annotations

from typing import Any


def policy(obs: Any) -> int:
    """Push the cart toward the side the pole is falling to."""
    return int(obs[2] + obs[3] > 0)


def reset_env(env: Any, seed: int) -> tuple[Any, dict]:
    return env.reset(seed=seed)


def step_env(env: Any, action: int) -> tuple[Any, float, bool, bool, dict]:
    return env.step(action)


def play_step(env: Any, obs: Any) -> tuple[Any, bool]:
    """One timestep: act, step; returns the next observation and whether the episode ended.

    Returns ``(obs, done)`` rather than the step tuple, so the timestep span records no step
    result of its own (the hand-written loop's ``at.timestep()`` block records none either).
    """
    action = policy(obs)
    obs, _reward, terminated, truncated, _info = step_env(env, action)
    return obs, terminated or truncated


def play_episode(env: Any, seed: int) -> int:
    """Play one episode from ``seed``; returns its number of steps."""
    obs, _info = reset_env(env, seed)
    steps = 0
    done = False
    while not done:
        obs, done = play_step(env, obs)
        steps += 1
    return steps
