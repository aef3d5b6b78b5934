"""The Ray actor that plays episodes and returns its own trajectory record.

``play_episode(task)`` is the actor's entry point. It never raises: when the environment
cannot be reset, it returns an empty trajectory whose ``error_info`` says why, and when a
step fails it returns the timesteps played so far with that error. The episode id is the
environment's (``env.get_episode_id()``, asked after the loop). The episode itself is played
by ``rollout``: reset, ``agent.init_after_reset``, then one ``run_timestep`` per turn (tool
schemas on offer, one model call, one ``env.step``) until the environment says done or the
task's timestep budget runs out. With ``RUNNER_TRACING=1`` the runner traces itself with its
own tracer (``tracing.py``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import ray

from ray_runner.agent import ScriptedLLM, ToolAgent
from ray_runner.env import ArithmeticEnv
from ray_runner.tracing import runner_tracer


@dataclass
class Task:
    task_id: str
    reset_kwargs: dict[str, Any]
    max_timesteps: int = 8


@dataclass
class TimeStep:
    """One turn: the conversation the model answered (its reply last), and the outcome."""

    chats: list[dict[str, Any]]
    reward: float | None  # None: the environment did not rate the step
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
        self.tracer = runner_tracer()
        self.llm = ScriptedLLM(model, self.tracer)
        self.env = ArithmeticEnv()

    def play_episode(self, task: Task) -> Trajectory:
        reset_kwargs = dict(task.reset_kwargs)
        attributes = {"task_id": task.task_id, "reset_kwargs": json.dumps(reset_kwargs)}
        with self.tracer.start_as_current_span("episode", attributes=attributes) as span:
            timesteps: list[TimeStep] = []
            error = None
            try:
                self.rollout(task, timesteps)
            except Exception as exc:  # a failed reset or step: the trajectory says why
                error = ErrorInfo(f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))
                span.set_attribute("error_info", json.dumps(dataclasses.asdict(error)))
            episode_id = self.env.get_episode_id() or ""
            span.set_attribute("episode_id", episode_id)
        return Trajectory(timesteps, reset_kwargs, error, episode_id)

    def rollout(self, task: Task, timesteps: list[TimeStep]) -> None:
        with self.tracer.start_as_current_span("env.reset"):
            observation = self.env.reset(**task.reset_kwargs)
        agent = ToolAgent(self.llm)
        with self.tracer.start_as_current_span("agent.init_after_reset"):
            agent.init_after_reset(observation)
        for index in range(task.max_timesteps):
            timestep = self.run_timestep(agent, index)
            timesteps.append(timestep)
            if timestep.done:
                break

    def run_timestep(self, agent: ToolAgent, index: int) -> TimeStep:
        with self.tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
            with self.tracer.start_as_current_span("get_tool_schemas"):
                tools = self.env.get_tool_schemas()
            reply = agent.act(tools)
            chats = list(agent.chats)
            with self.tracer.start_as_current_span("env.step") as span:
                outcome = self.env.step(reply["tool_calls"][0])
                if outcome.reward is not None:
                    span.set_attribute("reward", outcome.reward)
                span.set_attribute("done", outcome.done)
            agent.observe(outcome.observation)
            return TimeStep(chats, outcome.reward, outcome.done, tools)
