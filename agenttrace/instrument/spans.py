"""The tracing API: episode, env.reset, timestep, agent.act, env.step and LLM call spans.

Each of :func:`episode`, :func:`env_reset`, :func:`timestep`, :func:`agent_act`,
:func:`env_step` and :func:`llm_call` returns a single-use *scope* that is

* a context manager (``with at.timestep() as step: ...``) yielding a handle with
  ``record(...)`` helpers, and
* a decorator (``@at.env_step`` or ``@at.env_step(extractor="dm_env")``) for sync and async
  functions, generators and async generators. Decorated functions record their argument and
  return value the way the role suggests (env.step: the action in, the step result out).

The user's exceptions pass through unchanged (and mark the span and the episode errored);
``asyncio.CancelledError`` and ``KeyboardInterrupt`` mark the episode ``cancelled``. A failure
inside agenttrace is logged and never reaches the user's code. The span machinery the roles
share is in :mod:`agenttrace.instrument.scope`.
"""

from __future__ import annotations

import math
import operator
import threading
import uuid
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Status, StatusCode

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._logging import warn_once as _warn_once
from agenttrace._secrets import is_secret_name
from agenttrace.instrument.arguments import CallArguments
from agenttrace.instrument.calls import LLMCallScope, ToolCallScope
from agenttrace.instrument.env_identity import env_id, env_spec_json
from agenttrace.instrument.episode_fields import LATE_FIELDS, error_parts
from agenttrace.instrument.extractors import _UNSET, EXTRACTORS, batch_size, extract_reset
from agenttrace.instrument.field_values import number_value, step_flags, warn_nonfinite
from agenttrace.instrument.scope import (
    _EpisodeState,
    _Frame,
    _is_cancel,
    _Scope,
    content_text,
    current_episode_id,
)
from agenttrace.trajectory.scores import checked_score

# --- step-like scopes: record observation, action, reward, termination ----------------------


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


# --- episode -------------------------------------------------------------------------------


class EpisodeScope(_Scope):
    """Handle of an episode span: id, running return and length, status and early ends."""

    role = sc.EPISODE

    def __init__(
        self,
        *,
        episode_id: str | None = None,
        task_id: str | None = None,
        env: Any = None,
        env_name: str | None = None,
        agent_name: str | None = None,
        policy_version: str | None = None,
        seed: int | None = None,
        group_id: str | None = None,
        group_size: int | None = None,
        attributes: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        self._episode_id = episode_id
        self._env = env
        if group_size is not None and _group_size(group_size) is None:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        for key, value in (
            (sc.TASK_ID, task_id),
            (sc.ENV_NAME, env_name),
            (sc.AGENT_NAME, agent_name),
            (sc.POLICY_VERSION, policy_version),
            (sc.EPISODE_SEED, seed),
            (sc.GROUP_ID, group_id),
            (sc.GROUP_SIZE, group_size),
        ):
            if value is not None:
                self._attributes[key] = value if isinstance(value, (int, float)) else str(value)
        if env is not None and sc.ENV_NAME not in self._attributes:
            name = env_id(env)
            if name:
                self._attributes[sc.ENV_NAME] = name
                spec = env_spec_json(env)
                if spec:
                    self._attributes.setdefault(sc.ENV_SPEC, spec)

    def _clone(self) -> EpisodeScope:
        clone = super()._clone()
        assert isinstance(clone, EpisodeScope)
        clone._episode_id = None  # each call of a decorated function is its own episode
        clone._reported_error = None
        return clone

    #: Options a single call can give its own episode, before the span starts (the
    #: auto-instrumentor reads them from the call's arguments: ``episode_id=run.id``).
    PER_CALL_OPTIONS = (
        "episode_id",
        "policy_version",
        "agent_name",
        "env_name",
        "group_id",
        "group_size",
    )

    def _set_per_call(self, option: str, value: Any) -> None:
        """This call's ``option`` (one of PER_CALL_OPTIONS); before ``start()``, None ignored.

        The id must be known when the span starts: the trajectory processor tracks the
        episode under it from then on. Other clones of the template are not affected.
        """
        if value is None or self._span is not None:
            return
        if option.startswith("attributes."):
            self._set_argument_attribute(option[len("attributes.") :], value)
            return
        if option == "episode_id":
            text = str(value)
            if text:
                self._episode_id = text
            return
        if option == "group_size":
            size = _group_size(value)
            if size is None:
                _warn_once(
                    f"group_size:{type(value).__name__}",
                    "agenttrace: an episode's group_size %r is not a positive int; left out",
                    value,
                )
                return
            self._attributes = {**self._attributes, sc.GROUP_SIZE: size}
            return
        key = {
            "group_id": sc.GROUP_ID,
            "policy_version": sc.POLICY_VERSION,
            "agent_name": sc.AGENT_NAME,
            "env_name": sc.ENV_NAME,
        }[option]
        scalar = isinstance(value, (int, float)) and not isinstance(value, bool)
        self._attributes = {**self._attributes, key: value if scalar else str(value)}

    def _set_argument_attribute(self, name: str, value: Any) -> None:
        """A whole argument (``reset_kwargs``) as the episode's attribute ``name``: numbers
        and text as they are, anything else as JSON text through the content policy (secrets
        redacted, the redact hook, withheld with content off), at most
        :data:`ARGUMENT_ATTRIBUTE_MAX` characters."""
        text = self._attribute_value(name, value)
        if text is not None:
            self._attributes = {**self._attributes, name: text}

    def _attribute_value(self, name: str, value: Any) -> Any:
        """What :meth:`_set_argument_attribute` records for ``value`` (None: nothing)."""
        if is_secret_name(name):
            return None
        if isinstance(value, (str, bool, int, float)):
            text: Any = value
        else:
            text = content_text(self._resolve_runtime(), name, value, self.role)
            if text is None:  # (content is not captured)
                return None
        if isinstance(text, str) and len(text) > ARGUMENT_ATTRIBUTE_MAX:
            _warn_once(
                f"argument attribute:{name}",
                "agenttrace: the episode attribute %r is %d characters, more than %d; it is "
                "left out",
                name,
                len(text),
                ARGUMENT_ATTRIBUTE_MAX,
            )
            return None
        return text

    #: An error the runner reported without raising (``error=return.error_info``), set by
    #: :meth:`_set_late`; the episode ends errored with it unless an exception came first.
    _reported_error: Any = None

    def _set_late(self, option: str, value: Any) -> None:
        """A field known only after the span started (agenttrace.instrument.episode_fields):
        ``episode_id`` (the id the user's code gives it, ``rl.episode.external_id``; rl.episode.id
        never changes), ``task_id``, ``error`` or ``attributes.NAME``; None is ignored, and so
        is anything once the episode ended."""
        if value is None or self._span is None or self._ended:
            return
        if option == "error":
            state = self._frame.episode if self._frame else None
            # (an exception the episode already errored with, or an earlier report, is kept)
            if self._reported_error is None and state is not None and state.caught_error is None:
                self._reported_error = value if value else None
            return
        if option.startswith("attributes."):
            name = option[len("attributes.") :]
            text = self._attribute_value(name, value)
        elif option in ("episode_id", "task_id"):
            scalar = option == "task_id" and isinstance(value, int) and not isinstance(value, bool)
            name = sc.EPISODE_EXTERNAL_ID if option == "episode_id" else sc.TASK_ID
            text = value if scalar else self._attribute_value(name, str(value)) or None
        else:
            raise ValueError(f"an episode field set late is one of {LATE_FIELDS}, not {option!r}")
        if text is not None:
            self._write({name: text})

    def _record_reported_error(self, value: Any) -> None:
        """The reported error on the span as an ``exception`` event and an ERROR status."""
        span = self._span
        assert span is not None
        if isinstance(value, BaseException):
            span.record_exception(value)
            message = str(value)
        else:
            kind, message = error_parts(value, ARGUMENT_ATTRIBUTE_MAX)
            event = {sc.EXCEPTION_MESSAGE: message}
            if kind:
                event[sc.EXCEPTION_TYPE] = kind
            span.add_event(sc.EXCEPTION_EVENT, event)
        span.set_status(Status(StatusCode.ERROR, message or "episode errored"))

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        episode_id = self._episode_id or uuid.uuid4().hex
        attributes[sc.EPISODE_ID] = episode_id
        settings = runtime.settings
        if settings.group_id is not None and sc.GROUP_ID not in attributes:
            attributes[sc.GROUP_ID] = settings.group_id  # (AGENTTRACE_GROUP_ID)
            if settings.group_size is not None and sc.GROUP_SIZE not in attributes:
                attributes[sc.GROUP_SIZE] = settings.group_size
        attributes.setdefault(sc.GEN_AI_CONVERSATION_ID, episode_id)
        state = _EpisodeState(episode_id, runtime)
        state.handle = self
        return _Frame(state, None)

    def _started(self) -> None:
        if self._env is not None:
            self._register_env(self._env)

    def _register_env(self, env: Any) -> None:
        """Remember the episode's env, ending an episode still open on it as abandoned."""
        if self._frame is None or self._frame.episode is None:
            return
        state = self._frame.episode
        runtime = state.runtime
        state.env_key = id(env)
        with runtime.env_lock:
            previous = runtime.open_episodes_by_env.get(state.env_key)
            runtime.open_episodes_by_env[state.env_key] = state
        if previous is not None and previous.handle is not None:
            previous.handle.end_as(sc.STATUS_ABANDONED)

    def _on_call(self, arguments: CallArguments) -> None:
        for name, key in (("task_id", sc.TASK_ID), ("seed", sc.EPISODE_SEED)):
            value = arguments.get(name)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                self.set_attribute(key, value)
        env = arguments.get("env")
        if self._env is None and env is not None and hasattr(env, "step"):
            self._env = env
            name = env_id(env)
            if name and sc.ENV_NAME not in self._attributes:
                self.set_attribute(sc.ENV_NAME, name)
                spec = env_spec_json(env)
                if spec and sc.ENV_SPEC not in self._attributes:
                    self.set_attribute(sc.ENV_SPEC, spec)
            self._register_env(env)

    @property
    def id(self) -> str | None:
        return self.episode_id

    @property
    def return_(self) -> float:
        frame = self._frame
        return frame.episode.return_ if frame and frame.episode else 0.0

    @property
    def length(self) -> int:
        frame = self._frame
        return frame.episode.length if frame and frame.episode else 0

    def set_status(self, status: str) -> None:
        """Override the status the episode ends with (one of semconv.EPISODE_STATUSES)."""
        if status not in sc.EPISODE_STATUSES or status == sc.STATUS_INCOMPLETE:
            raise ValueError(
                f"unknown episode status {status!r}; use one of "
                f"{', '.join(s for s in sc.EPISODE_STATUSES if s != sc.STATUS_INCOMPLETE)}"
            )
        if self._frame is not None and self._frame.episode is not None:
            self._frame.episode.status = status

    def end_as(self, status: str, exc: BaseException | None = None) -> None:
        """End the episode now with ``status`` (e.g. abandoned, aborted); later ends no-op."""
        self.set_status(status)
        self.end(exc)

    def _finishing(self, exc: BaseException | None) -> None:
        state = self._frame.episode if self._frame else None
        if state is None or self._span is None:
            return
        if state.env_key is not None:
            runtime = state.runtime
            with runtime.env_lock:
                if runtime.open_episodes_by_env.get(state.env_key) is state:
                    del runtime.open_episodes_by_env[state.env_key]
        status = state.status
        if status is None:
            if exc is not None and _is_cancel(exc):
                status = sc.STATUS_CANCELLED
            elif isinstance(exc, Exception):
                status = sc.STATUS_ERRORED
            elif state.caught_error is not None:
                # An env.reset, env.step, agent.act or model call raised and the runner caught
                # it (returning a shorter trajectory with its error, say): one rule, the
                # episode errored with that exception (docs/tracing-api.md, Errors).
                status = sc.STATUS_ERRORED
                error = state.caught_error
                self._span.record_exception(error)
                self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            elif self._reported_error is not None:
                status = sc.STATUS_ERRORED  # (recorded below)
            else:
                terminated, _ = state.last_step_flags()
                if terminated or state.length == 0:
                    status = sc.STATUS_COMPLETED
                else:
                    status = sc.STATUS_TRUNCATED
        if status == sc.STATUS_ERRORED and exc is None and state.caught_error is None:
            if self._reported_error is not None:
                self._record_reported_error(self._reported_error)
            else:
                self._span.set_status(Status(StatusCode.ERROR, "episode errored"))
        self._span.set_attributes(
            {
                sc.EPISODE_STATUS: status,
                sc.EPISODE_RETURN: state.return_,
                sc.EPISODE_LENGTH: state.length,
            }
        )


# --- public constructors ---------------------------------------------------------------------


def _bare_or_configured(factory: Callable[..., _Scope], args: tuple, kwargs: dict) -> Any:
    """Support ``@at.env_step`` as well as ``@at.env_step(...)`` and ``with at.env_step():``."""
    if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], int):
        return factory()(args[0])
    return factory(*args, **kwargs)


def episode(*args: Any, **kwargs: Any) -> Any:
    """An ``episode`` span. Keywords: episode_id, task_id, env, env_name, agent_name,
    policy_version, seed, group_id and group_size (rollouts of one task: GRPO, best-of-n),
    attributes, tracer_provider."""
    return _bare_or_configured(EpisodeScope, args, kwargs)


def env_reset(*args: Any, **kwargs: Any) -> Any:
    """An ``env.reset`` span; record the initial observation and info on it."""
    return _bare_or_configured(EnvResetScope, args, kwargs)


def timestep(*args: Any, **kwargs: Any) -> Any:
    """A ``timestep`` span; the index counts up per episode unless given."""
    return _bare_or_configured(TimestepScope, args, kwargs)


def agent_act(*args: Any, **kwargs: Any) -> Any:
    """An ``agent.act`` span: the observation the agent acted on and the action it chose."""
    return _bare_or_configured(AgentActScope, args, kwargs)


def env_step(*args: Any, **kwargs: Any) -> Any:
    """An ``env.step`` span: the action in; observation, reward and termination out."""
    return _bare_or_configured(EnvStepScope, args, kwargs)


def llm_call(*args: Any, **kwargs: Any) -> Any:
    """A GenAI ``chat {model}`` span. Keywords: model, provider, operation, attributes,
    extractor; final_on, final_reward, final_terminated, final_truncated (what a call whose
    finish reason is one of final_on means: the episode's last turn, docs/tracing-api.md)."""
    return _bare_or_configured(LLMCallScope, args, kwargs)


def tool_call(*args: Any, **kwargs: Any) -> Any:
    """A GenAI ``execute_tool {name}`` span: record the call id, arguments and result on it;
    a decorated function's arguments and return value are recorded. Keywords: name,
    attributes."""
    return _bare_or_configured(ToolCallScope, args, kwargs)


def score(
    episode_id: str,
    value: float,
    *,
    name: str = "reward",
    step: int | None = None,
    comment: str | None = None,
    tracer_provider: Any = None,
) -> None:
    """Give episode ``episode_id`` a score, now or long after it ended, in this process or
    any other: only the id is needed (a verifier, an LLM judge, a human label).

    A ``score`` span, so it travels with the other spans. A score named ``reward`` is also
    added to step ``step``'s reward (default: the last step) and to the return; any other
    name is kept in the trajectory's ``scores``. The episode's own rebuild applies it if it
    is still open; otherwise it is kept as a score record (``scores.jsonl`` beside the
    trajectories) that loaders and ``agenttrace export`` merge. Bad values raise ValueError
    naming the field.
    """
    checked = checked_score(episode_id, value, name, step, comment)
    runtime = pipeline.get_default()
    if not runtime.enabled:
        return
    try:
        attributes: dict[str, Any] = {
            sc.EPISODE_ID: checked.episode_id,
            sc.SCORE_NAME: checked.name,
            sc.SCORE_VALUE: checked.value,
        }
        if checked.step is not None:
            attributes[sc.SCORE_STEP] = checked.step
        if checked.comment is not None:
            attributes[sc.SCORE_COMMENT] = checked.comment
        tracer = (
            tracer_provider.get_tracer(sc.INSTRUMENTATION_SCOPE)
            if tracer_provider is not None
            else runtime.tracer
        )
        # In the episode's trace when it is the current one; a trace of its own otherwise.
        here = current_episode_id() == checked.episode_id
        context = None if here else otel_context.Context()
        tracer.start_span(sc.SCORE, context=context, attributes=attributes).end()
        if runtime.metrics is not None:
            runtime.metrics.record_score(checked.name, checked.value)
    except Exception:
        _internal_error("recording a score")


def env_closed(env: Any) -> None:
    """Tell agenttrace ``env`` was closed: an episode still open on it ends ``aborted``."""
    runtime = pipeline.get_default()
    with runtime.env_lock:
        state = runtime.open_episodes_by_env.pop(id(env), None)
    if state is not None and state.handle is not None:
        state.handle.end_as(sc.STATUS_ABORTED)


#: The longest argument kept as an episode attribute (``attributes.NAME=ARG``), in characters.
ARGUMENT_ATTRIBUTE_MAX = 65_536


def _group_size(value: Any) -> int | None:
    """A group size as a positive int (an int or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    try:
        size = int(value) if isinstance(value, (int, str)) else operator.index(value)
    except (TypeError, ValueError):
        return None
    return size if size > 0 else None
