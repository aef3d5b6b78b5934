"""The step-like spans: env.reset, timestep, agent.act, env.step and a runner's step.record.

Each records what its role sees of one step (observation, action, reward, termination) and
places it: a timestep, agent.act or env.step takes the step index of the span it runs in, else
the episode's next one, and tells the episode (:mod:`agenttrace.instrument.episode_state`)
what it recorded, ranked by role (:attr:`StepScope._priority`), so the episode span's return
and status agree with the rebuilt trajectory. The span machinery is the base's
(:mod:`agenttrace.instrument.scope`).
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable
from typing import Any

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._logging import warn_once as _warn_once
from agenttrace.instrument.arguments import CallArguments
from agenttrace.instrument.episode_state import _EpisodeState, _Frame
from agenttrace.instrument.extractors import _UNSET, EXTRACTORS, batch_size, extract_reset
from agenttrace.instrument.field_values import number_value, step_flags, warn_nonfinite
from agenttrace.instrument.scope import _Scope

_counts_lock = threading.Lock()
#: env.step spans started outside any episode in this process: no trajectory holds them
#: (the auto-instrumentor names them at exit).
steps_outside_episodes = 0


def _count_step_outside() -> None:
    global steps_outside_episodes
    with _counts_lock:
        steps_outside_episodes += 1


class StepScope(_Scope):
    """Handle of env.reset, timestep, agent.act and env.step spans."""

    #: Rank of this role's reward/termination for the step (0: not part of a step).
    _priority = 0

    def __init__(
        self,
        index: int | None = None,
        *,
        extractor: str | Callable[[Any], Any] = "auto",
        attributes: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        self._index = index
        if isinstance(extractor, str):
            if extractor not in EXTRACTORS:
                raise ValueError(
                    f"unknown extractor {extractor!r}; built-in: {', '.join(EXTRACTORS)}"
                )
            extractor = EXTRACTORS[extractor]
        self._extractor = extractor

    @property
    def index(self) -> int | None:
        return self._frame.index if self._frame is not None else None

    def record(
        self,
        *,
        observation: Any = _UNSET,
        action: Any = _UNSET,
        reward: Any = _UNSET,
        terminated: Any = _UNSET,
        truncated: Any = _UNSET,
        done: Any = _UNSET,
        discount: Any = _UNSET,
        info: Any = _UNSET,
    ) -> None:
        """Record what this span saw; only the given fields are set. Each field is read on
        its own: a bad value costs only its field (docs/tracing-api.md, "Bad values")."""
        span = self._span
        if span is None:
            return
        try:
            attrs: dict[str, Any] = self._encoded(
                ((sc.OBSERVATION, observation), (sc.ACTION, action), (sc.INFO, info))
            )
            episode = self._frame.episode if self._frame else None
            index = self.index
            if reward is not _UNSET and reward is not None:
                if type(reward) is not float:
                    reward = number_value(reward, self.role, "reward")
                if reward is not None:
                    if not math.isfinite(reward):
                        warn_nonfinite(episode, index, reward)
                    attrs[sc.REWARD] = reward
                    if episode is not None and index is not None and self._priority:
                        episode.record_reward(index, self._priority, reward)
            if terminated is not _UNSET or truncated is not _UNSET or done is not _UNSET:
                flags = step_flags(self.role, terminated, truncated, done, _UNSET)
                if flags is not None:
                    attrs.update(flags)
                    term, trunc = flags.get(sc.TERMINATED, False), flags.get(sc.TRUNCATED, False)
                    attrs[sc.DONE] = term or trunc
                    if episode is not None and index is not None and self._priority:
                        episode.record_flags(index, self._priority, term, trunc)
            if discount is not _UNSET and discount is not None:
                if type(discount) is not float:
                    discount = number_value(discount, self.role, "discount")
                if discount is not None:
                    attrs[sc.DISCOUNT] = discount
            self._write(attrs)
        except Exception:
            _internal_error(f"recording on the {self.role} span")

    def _record_content(self, key: str, value: Any) -> None:
        """``record()`` of one content field (observation, action), without its other work:
        what a decorated call records from its argument or return value."""
        if self._span is None:
            return
        try:
            text = self._content(key, value)
            if text is None:
                return
            if self._pending is not None:
                self._pending[key] = text
            else:
                self._set_built(self._span, {key: text})
        except Exception:
            _internal_error(f"recording on the {self.role} span")

    def record_result(self, result: Any) -> Any:
        """Record an environment step result of any built-in shape; returns it unchanged."""
        if self._span is None:
            return result
        try:
            found = self._extractor(result)
        except Exception:
            _internal_error("the step extractor")
            found = None
        if found is None:
            batch = batch_size(result)
            if batch is not None:
                _warn_once(
                    "batched step",
                    "agenttrace: an env.step returned the results of %d sub-environments at "
                    "once (a vector env): no extractor reads that as a step, so it is recorded "
                    "as one observation. Record each sub-environment's episodes with "
                    "AGENTTRACE_GYMNASIUM=1 or TracedVectorEnv (docs/env-wrappers.md)",
                    batch,
                )
            self.record(observation=result)
            return result
        self.record(
            observation=found.observation,
            reward=found.reward,
            terminated=found.terminated if found.terminated is not None else _UNSET,
            truncated=found.truncated if found.truncated is not None else _UNSET,
            discount=found.discount if found.discount is not None else _UNSET,
            info=found.info,
        )
        return result

    def _step_frame(self, frame: _Frame | None, index: int, attributes: dict[str, Any]) -> _Frame:
        attributes[sc.TIMESTEP_INDEX] = index
        if frame is not None and frame.index == index:
            return frame  # inside its timestep: children see the same frame
        return _Frame(frame.episode if frame else None, index)


class EnvResetScope(StepScope):
    role = sc.ENV_RESET

    def _on_call(self, arguments: CallArguments) -> None:
        seed = arguments.get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            self.set_attribute(sc.EPISODE_SEED, seed)

    def record_result(self, result: Any) -> Any:
        observation, info = extract_reset(result)
        self.record(observation=observation, info=info)
        return result

    def _on_return(self, result: Any) -> None:
        self.record_result(result)

    _notes_errors = True


class TimestepScope(StepScope):
    role = sc.TIMESTEP
    _priority = 2

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        episode = frame.episode if frame else None
        index = self._index
        if index is None:
            index = episode.next_index if episode else 0
        if episode is not None:
            episode.has_timesteps = True
            episode.close_turn(index)  # (an agent.act before it took this index: it joins)
        return self._step_frame(frame, index, attributes)

    def _on_return(self, result: Any) -> None:
        if self._extractor(result) is not None:
            self.record_result(result)


class AgentActScope(StepScope):
    role = sc.AGENT_ACT
    _priority = 3
    _notes_errors = True

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        index = self._index
        episode = frame.episode if frame else None
        if index is None:
            if frame is not None and frame.index is not None:
                index = frame.index
            elif episode is not None:
                index = episode.turn_index(self.role)  # a turn outside any step span
            else:
                index = 0
        elif episode is not None:
            episode.length = max(episode.length, index + 1)
        return self._step_frame(frame, index, attributes)

    def _on_call(self, arguments: CallArguments) -> None:
        observation = arguments.first(("observation", "obs", "state", "messages"))
        if observation is not _UNSET:
            self._record_content(sc.OBSERVATION, observation)

    def _on_return(self, result: Any) -> None:
        self._record_content(sc.ACTION, result)


class EnvStepScope(StepScope):
    role = sc.ENV_STEP
    _priority = 4
    _notes_errors = True

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        episode = frame.episode if frame else None
        index = self._index
        in_timestep = frame is not None and frame.index is not None
        if index is None:
            index = frame.index if in_timestep else (episode.next_index if episode else 0)
        if episode is not None and not in_timestep:
            episode.close_turn(index)
        elif episode is None:
            _count_step_outside()
        return self._step_frame(frame, index, attributes)

    def _on_call(self, arguments: CallArguments) -> None:
        action = arguments.first(("action", "actions", "act"))
        if action is not _UNSET:
            self._record_content(sc.ACTION, action)

    def _on_return(self, result: Any) -> None:
        self.record_result(result)


class StepRecordScope(StepScope):
    """A runner's own record of a step (``data_manager.record_step(session, step_id, ...)``).

    Traced through a target, it reads the step's fields from the call's *arguments* (the
    target maps them: ``index=step_id, reward=step_reward``) and writes them onto the step
    with that index in the current episode, where they win over what the step's other spans
    said. Without an index it records the current step: the one whose span it runs in, else
    the open turn, else the last step. It ends the turn: the next call starts the next step.
    """

    role = sc.STEP_RECORD
    _priority = 5
    #: The call arguments it reads (under these names, or the names a target maps to them).
    FIELDS = (
        "index",
        "observation",
        "action",
        "reward",
        "terminated",
        "truncated",
        "done",
        "discount",
        "info",
    )

    def __init__(
        self,
        index: int | None = None,
        *,
        index_base: int = 0,
        attributes: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(
            index, attributes=attributes, tracer_provider=tracer_provider, runtime=runtime
        )
        self._index_base = index_base

    def _on_call(self, arguments: CallArguments) -> None:
        values = {name: arguments.get(name) for name in self.FIELDS}
        frame = self._frame
        episode = frame.episode if frame else None
        index = self._step_index(values.pop("index"), frame, episode)
        if index is None:
            return
        self._frame = _Frame(episode, index)
        self.set_attribute(sc.TIMESTEP_INDEX, index)
        if episode is not None:
            episode.close_turn(index)
        self.record(**{name: value for name, value in values.items() if value is not _UNSET})

    def _step_index(
        self, given: Any, frame: _Frame | None, episode: _EpisodeState | None
    ) -> int | None:
        if given is not _UNSET and given is not None:
            try:
                number = operator.index(given) if not isinstance(given, str) else int(given)
            except (TypeError, ValueError):
                number = None
            if number is None or isinstance(given, bool) or number - self._index_base < 0:
                _warn_once(
                    f"step.record index:{type(given).__name__}",
                    "agenttrace: a step.record call's index %r is not a step number of "
                    "base %d (an int >= %d); the call is not recorded",
                    given,
                    self._index_base,
                    self._index_base,
                )
                return None
            return number - self._index_base
        if self._index is not None:
            return self._index
        if frame is not None and frame.index is not None:
            return frame.index
        if episode is None:
            return 0
        if episode.turn_open is not None:
            return episode.next_index
        return max(episode.next_index - 1, 0)

    def set_attribute(self, key: str, value: Any) -> None:
        if self._pending is not None:
            self._pending[key] = value
        else:
            super().set_attribute(key, value)
