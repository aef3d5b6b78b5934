"""The built-in demo: a toy task played by a scripted "LLM" agent, traced with agenttrace.

The task, *reach the target*: the environment holds a number ``value`` (1-5 at the start) and
names a ``target`` (10-40). Each step the agent picks one operation from :data:`OPS`
(``"+1"``, ``"+2"``, ``"+3"``, ``"*2"``, ``"-1"``) and the environment applies it. Every step
costs -0.1; the step that makes ``value == target`` earns +1.0 more and terminates the
episode; after :data:`MAX_STEPS` steps without hitting it the episode is truncated.

The agent asks a "model" for each action: the model is a local function (greedy, with some
random exploration) wrapped in a GenAI ``chat scripted-agent-1`` span carrying the chat
messages, finish reason and token counts (word counts), so trajectories look like those of a
real LLM agent. In 4% of episodes the agent's calculator tool is set to fail at one of the
first three steps (:class:`ToolFailure`): the exception escapes the episode, which is recorded
``errored``, and the runner catches it and goes on. Over many episodes about 79% complete, 17%
are truncated and 3.9% error (the rest of the 4% finished before their failing step).
Everything is local and, given the seed, deterministic: episode *i* uses its own RNG, so the
results do not depend on how episodes interleave.

:func:`play_episode` is written the way a user would instrument their own loop; the rest is
the runner (K episodes at a time on asyncio) around it.
"""

from __future__ import annotations

import asyncio
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import agenttrace as at

#: The operations the agent can apply to the value.
OPS = ("+1", "+2", "+3", "*2", "-1")
#: Steps after which an episode that has not hit the target is truncated.
MAX_STEPS = 10
STEP_PENALTY = -0.1
TARGET_BONUS = 1.0
#: Chance per step that the agent explores (takes a random operation instead of the best one).
EXPLORE = 0.2
#: Chance per episode that the agent's tool fails at some step (the episode then errors).
TOOL_FAILURE_RATE = 0.04

MODEL = "scripted-agent-1"
PROVIDER = "agenttrace.demo"
ENV_NAME = "agenttrace.demo/ReachTarget-v0"
SYSTEM_PROMPT = (
    "You play 'reach the target'. Each turn pick one operation from "
    + ", ".join(OPS)
    + " to apply to the value. Answer with a short reason and a last line 'ACTION: <op>'."
)


class ToolFailure(RuntimeError):
    """The simulated failure of the agent's calculator tool."""


def apply_op(value: int, op: str) -> int:
    """The value after applying ``op`` (one of OPS)."""
    amount = int(op[1:])
    if op[0] == "+":
        return value + amount
    if op[0] == "-":
        return value - amount
    return value * amount


def episode_seed(run_seed: int, index: int) -> int:
    """The seed of episode ``index`` of a run: stable across Python versions and processes."""
    return zlib.crc32(f"agenttrace-demo:{run_seed}:{index}".encode())


class ReachTarget:
    """The environment: gymnasium-style ``reset()`` and ``step(op)`` on dict observations."""

    def __init__(self, start: int, target: int, max_steps: int = MAX_STEPS) -> None:
        self.start, self.target, self.max_steps = start, target, max_steps
        self.value, self.t = start, 0

    def _observation(self) -> dict[str, int]:
        return {"target": self.target, "value": self.value, "step": self.t}

    def reset(self) -> tuple[dict[str, int], dict[str, Any]]:
        self.value, self.t = self.start, 0
        return self._observation(), {"max_steps": self.max_steps, "ops": list(OPS)}

    def step(self, op: str) -> tuple[dict[str, int], float, bool, bool, dict[str, Any]]:
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}")
        self.value = apply_op(self.value, op)
        self.t += 1
        terminated = self.value == self.target
        reward = STEP_PENALTY + (TARGET_BONUS if terminated else 0.0)
        truncated = not terminated and self.t >= self.max_steps
        return (
            self._observation(),
            reward,
            terminated,
            truncated,
            {"distance": abs(self.target - self.value)},
        )


def _tokens(text: str) -> int:
    return len(text.split())


class ScriptedAgent:
    """Greedy with exploration; "talks" like a chat model so its calls look like real ones."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        failing = rng.random() < TOOL_FAILURE_RATE
        self.fail_at_step = rng.randrange(3) if failing else None

    def messages(self, observation: dict[str, int]) -> list[dict[str, str]]:
        """The chat request for one turn, built from the observation."""
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {
                "role": "user",
                "content": f"Step {observation['step']}: the value is {observation['value']} "
                f"and the target is {observation['target']}. Which operation?",
            },
        ]

    def reply(self, observation: dict[str, int]) -> tuple[str, str]:
        """The model's answer (text naming the action) and the action itself."""
        value, target = observation["value"], observation["target"]
        if self.rng.random() < EXPLORE:
            op = self.rng.choice(OPS)
            reason = "Let me try something different."
        else:
            op = min(OPS, key=lambda o: abs(target - apply_op(value, o)))
            reason = f"{value} {op[0]} {op[1:]} = {apply_op(value, op)} is closest to {target}."
        return f"{reason}\nACTION: {op}", op

    async def act(self, observation: dict[str, int]) -> str:
        """One turn: a (traced) model call, then the calculator tool, which may fail."""
        request = self.messages(observation)
        with at.llm_call(model=MODEL, provider=PROVIDER) as call:
            await asyncio.sleep(0)  # waiting for the "model": other episodes run meanwhile
            text, op = self.reply(observation)
            call.record(
                input_messages=request,
                output_messages=[{"role": "assistant", "content": text}],
                finish_reasons=["stop"],
                input_tokens=sum(_tokens(m["content"]) for m in request),
                output_tokens=_tokens(text),
                response_model=MODEL,
            )
        if self.fail_at_step == observation["step"]:
            raise ToolFailure("calculator tool timed out (simulated failure)")
        return op


async def play_episode(index: int, seed: int, episode_ids: set[str] | None = None) -> str:
    """Play one episode, instrumented as a user would; returns how it ended.

    The episode's id is added to ``episode_ids`` as soon as it starts. Raises
    :class:`ToolFailure` when the agent's tool fails (the episode is then recorded errored).
    """
    rng = random.Random(seed)
    env = ReachTarget(start=rng.randint(1, 5), target=rng.randint(10, 40))
    agent = ScriptedAgent(rng)
    with at.episode(
        task_id=f"reach-{env.target}-from-{env.start}",
        env_name=ENV_NAME,
        agent_name="scripted-agent",
        policy_version=MODEL,
        seed=seed,
        attributes={"demo.episode_index": index},
    ) as episode:
        if episode_ids is not None and episode.id is not None:
            episode_ids.add(episode.id)
        with at.env_reset() as reset:
            observation, info = env.reset()
            reset.record(observation=observation, info=info)
        terminated = truncated = False
        while not (terminated or truncated):
            with at.timestep():
                with at.agent_act() as act:
                    action = await agent.act(observation)
                    act.record(observation=observation, action=action)
                with at.env_step() as step:
                    observation, reward, terminated, truncated, info = env.step(action)
                    step.record(
                        observation=observation,
                        reward=reward,
                        terminated=terminated,
                        truncated=truncated,
                        info=info,
                    )
            await asyncio.sleep(0)  # let the other episodes take a turn
    return "completed" if terminated else "truncated"


@dataclass
class RunOutcome:
    """What the runner saw, counted independently of agenttrace to check the files against."""

    outcomes: dict[str, int] = field(default_factory=dict)
    episode_ids: set[str] = field(default_factory=set)


async def run_episodes(
    episodes: int,
    concurrency: int,
    seed: int,
    on_done: Callable[[str], None] | None = None,
    result: RunOutcome | None = None,
) -> RunOutcome:
    """Play ``episodes`` episodes, ``concurrency`` at a time (one worker task per slot).

    A :class:`ToolFailure` ends only its own episode (counted ``errored``); ``on_done`` is
    called with each finished episode's outcome, e.g. to advance a progress bar. Counts go
    into ``result`` (a new RunOutcome if not given) as episodes finish.
    """
    result = RunOutcome() if result is None else result
    indices = iter(range(episodes))  # shared by the workers; next() never awaits

    async def worker() -> None:
        for index in indices:
            try:
                outcome = await play_episode(index, episode_seed(seed, index), result.episode_ids)
            except ToolFailure:
                outcome = "errored"
            result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
            if on_done is not None:
                on_done(outcome)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, episodes))))
    return result
