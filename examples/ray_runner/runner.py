"""The Ray actor that plays episodes and returns its own trajectory record.

``play_episode(task)`` is the actor's entry point. It never raises: when the environment
cannot be reset, it returns an empty trajectory whose ``error_info`` says why. The episode
itself is played by ``rollout``: reset, ``agent.init_after_reset``, then one
``run_timestep`` per turn (tool schemas on offer, one model call, one ``env.step``) until
the environment says done or the task's timestep budget runs out.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import ray

from ray_runner.agent import ScriptedLLM, ToolAgent
from ray_runner.env import ArithmeticEnv, EnvResetError


@dataclass
class Task:
    task_id: str
    reset_kwargs: dict[str, Any]
    max_timesteps: int = 8


@dataclass
class TimeStep:
    """One turn: the conversation the model answered (its reply last), and the outcome."""

    chats: list[dict[str, Any]]
    reward: float
    done: bool
    available_tool_schemas: list[dict[str, Any]]


@dataclass
class ErrorInfo:
    type: str
    message: str


@dataclass
class Trajectory:
    timesteps: list[TimeStep] = field(default_factory=list)
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    error_info: ErrorInfo | None = None
    episode_id: str = ""


@ray.remote
class Runner:
    def __init__(self, model: str = "scripted-calculator-1") -> None:
        self.llm = ScriptedLLM(model)
        self.env = ArithmeticEnv()

    def play_episode(self, task: Task) -> Trajectory:
        episode_id = uuid.uuid4().hex
        reset_kwargs = dict(task.reset_kwargs)
        try:
            timesteps = self.rollout(task)
        except EnvResetError as exc:
            error = ErrorInfo(f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))
            return Trajectory([], reset_kwargs, error, episode_id)
        return Trajectory(timesteps, reset_kwargs, None, episode_id)

    def rollout(self, task: Task) -> list[TimeStep]:
        observation = self.env.reset(**task.reset_kwargs)
        agent = ToolAgent(self.llm)
        agent.init_after_reset(observation)
        timesteps: list[TimeStep] = []
        for _ in range(task.max_timesteps):
            timestep = self.run_timestep(agent)
            timesteps.append(timestep)
            if timestep.done:
                break
        return timesteps

    def run_timestep(self, agent: ToolAgent) -> TimeStep:
        tools = self.env.get_tool_schemas()
        reply = agent.act(tools)
        chats = list(agent.chats)
        outcome = self.env.step(reply["tool_calls"][0])
        agent.observe(outcome.observation)
        return TimeStep(chats, outcome.reward, outcome.done, tools)
