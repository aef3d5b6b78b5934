"""What an episode's spans share through the context: the frame and the episode's bookkeeping.

Every span agenttrace starts puts a :class:`_Frame` in its context (under ``_FRAME_KEY``): the
episode it belongs to and the current step index, which is all a child span needs to know
where it goes. The episode's :class:`_EpisodeState` counts its steps, follows its agent turns
(docs/tracing-api.md, "Agent turns"), and keeps the rewards and flags each role recorded, so
the episode span ends with the same return, length and status the assembler rebuilds.

The scopes that start spans are in :mod:`agenttrace.instrument.scope` (the base) and the role
modules above it; this module imports none of them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry import context as otel_context

from agenttrace import pipeline
from agenttrace import semconv as sc

_FRAME_KEY = otel_context.create_key("agenttrace.frame")


class _EpisodeState:
    """Per-episode bookkeeping shared by the episode's descendant spans."""

    __slots__ = (
        "caught_error",
        "env_key",
        "episode_id",
        "folded_below",
        "folded_return",
        "handle",
        "has_timesteps",
        "last_flags",
        "length",
        "next_index",
        "rewards",
        "runtime",
        "status",
        "turn_open",
    )

    def __init__(self, episode_id: str, runtime: pipeline.AgentTrace) -> None:
        self.episode_id = episode_id
        self.runtime = runtime
        self.next_index = 0
        self.length = 0
        # The role (agent.act or llm) that opened the turn at next_index, outside any step
        # span, that no env.step or step.record has closed yet; None: no turn open.
        self.turn_open: str | None = None
        self.has_timesteps = False
        # Per step index: (priority of the recording role, value). The assembler prefers
        # step.record over env.step over agent.act over timestep over the turn's llm call; so
        # does this, so the return recorded on the episode span equals the sum of the rebuilt
        # steps' rewards.
        # Steps well behind the newest are folded into folded_return, so a million-step
        # episode keeps a few hundred entries (a reward for a folded step is not recorded).
        self.rewards: dict[int, tuple[int, float]] = {}
        self.folded_return = 0.0
        self.folded_below = 0
        # (index, priority, terminated, truncated) of the newest step that recorded flags.
        self.last_flags: tuple[int, int, bool, bool] | None = None
        self.status: str | None = None
        self.env_key: int | None = None
        # The episode's own scope (an EpisodeScope, agenttrace.instrument.episode_scope):
        # what ends it early (abandoned, aborted) and what sets its late fields.
        self.handle: Any = None
        # The first exception that ended an env.reset, env.step, agent.act or llm span of this
        # episode: the episode errored with it, even when the runner caught it.
        self.caught_error: Exception | None = None

    def note_error(self, exc: BaseException | None) -> None:
        """A step-like span of this episode ended with ``exc`` (cancellations aside)."""
        if self.caught_error is None and isinstance(exc, Exception) and not _is_cancel(exc):
            self.caught_error = exc

    @property
    def return_(self) -> float:
        return float(self.folded_return + sum(reward for _, reward in self.rewards.values()))

    def turn_index(self, role: str) -> int:
        """The step index of an agent.act or llm call made outside any step span.

        Calls until the next env.step (or step.record) are one turn, and one step with it,
        except that a second agent.act starts the next turn: an act that nothing consumed was
        a step of its own (docs/tracing-api.md has the table).
        """
        if self.turn_open is not None and role == self.turn_open == sc.AGENT_ACT:
            self.next_index += 1
        if self.turn_open is None or role == sc.AGENT_ACT:
            self.turn_open = role
        index = self.next_index
        # The step exists from here on, even if the env.step it pairs with never comes (the
        # agent was cancelled): it counts in the length. next_index stays, so that the env.step
        # takes this index.
        self.length = max(self.length, index + 1)
        return index

    def close_turn(self, index: int) -> None:
        """A span at ``index`` ended the turn there (an env.step, a step.record, a tool).

        What the turn's model call said of the flags (a final answer) no longer holds: the
        reply was consumed.
        """
        self.next_index = max(self.next_index, index + 1)
        self.length = max(self.length, index + 1)
        self.turn_open = None
        last = self.last_flags
        if last is not None and last[0] == index and last[1] == TURN_CALL_PRIORITY:
            self.last_flags = None

    def tool_index(self) -> int | None:
        """The step index of a tool call made outside any step span: the open turn's (the
        tool consumes its reply and closes it), else the last turn's; None before any."""
        if self.turn_open is not None:
            index = self.next_index
            self.close_turn(index)
            return index
        return self.next_index - 1 if self.next_index > 0 else None

    def record_reward(self, index: int, priority: int, reward: float) -> None:
        """Keep the reward of the highest-priority role that recorded one for step ``index``."""
        rewards = self.rewards
        if index < self.folded_below:
            return
        known = rewards.get(index)
        if known is None or known[0] <= priority:
            rewards[index] = (priority, reward)
        if len(rewards) > _REWARDS_KEPT:
            self.folded_below = max(self.folded_below, self.next_index - _REWARDS_KEPT // 2)
            for old in [i for i in rewards if i < self.folded_below]:
                self.folded_return += rewards.pop(old)[1]

    def record_flags(self, index: int, priority: int, terminated: bool, truncated: bool) -> None:
        last = self.last_flags
        if last is None or index > last[0] or (index == last[0] and priority >= last[1]):
            self.last_flags = (index, priority, terminated, truncated)

    def last_step_flags(self) -> tuple[bool, bool]:
        """(terminated, truncated) of the episode's last step."""
        last = self.last_flags
        if last is None or last[0] != self.length - 1:
            return (False, False)
        return (last[2], last[3])


#: Rank of what a turn's model call says of its step's flags (a final answer, ``final_on``):
#: below every step span's.
TURN_CALL_PRIORITY = 1

#: Step rewards an episode keeps by index before folding the older half into one sum.
_REWARDS_KEPT = 512


class _Frame:
    """What child spans need from the context: the episode and the current step index."""

    __slots__ = ("episode", "index")

    def __init__(self, episode: _EpisodeState | None, index: int | None) -> None:
        self.episode = episode
        self.index = index


def current_episode_id() -> str | None:
    """Id of the episode the current context belongs to (None outside episodes)."""
    frame = otel_context.get_value(_FRAME_KEY)
    if isinstance(frame, _Frame) and frame.episode is not None:
        return frame.episode.episode_id
    return None


def _is_cancel(exc: BaseException) -> bool:
    """A cancellation (``asyncio.CancelledError``, ``KeyboardInterrupt``), not an error: it
    ends the episode ``cancelled``, never ``errored``."""
    return isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
