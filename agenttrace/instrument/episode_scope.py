"""The episode span: its id, running return and length, late fields, and how it ends.

:class:`EpisodeScope` opens the episode's bookkeeping (:mod:`agenttrace.instrument.
episode_state`) that every span below it shares, takes its options from its keywords or a
call's arguments, remembers the env it is played on (a new episode on that env ends the old
one ``abandoned``), and at its end writes the status, return and length the rebuilt
trajectory will have. Fields known only later (an id the runner returns, a reported error)
are set through :meth:`EpisodeScope._set_late` (:mod:`agenttrace.instrument.episode_fields`).
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Status, StatusCode

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import warn_once as _warn_once
from agenttrace._secrets import is_secret_name
from agenttrace.instrument.arguments import CallArguments
from agenttrace.instrument.env_identity import env_id, env_spec_json
from agenttrace.instrument.episode_state import _EpisodeState, _Frame, _is_cancel
from agenttrace.instrument.scope import _Scope, content_text
from agenttrace.trajectory import codec

#: The fields an ``episode.fields`` call, or an episode's return value, can set (besides
#: ``attributes.NAME``): what may change after the episode's span started.
LATE_FIELDS = ("episode_id", "task_id", "error")


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


def error_parts(value: Any, limit: int) -> tuple[str | None, str]:
    """(type, message) of an error a runner reported as a value, not an exception: an
    object's or mapping's ``type`` and ``message``, else the value as text (a mapping as JSON,
    secrets redacted), at most ``limit`` characters each."""
    if isinstance(value, Mapping):
        kind, message = value.get("type"), value.get("message")
        known = "type" in value and "message" in value
    else:
        kind, message = getattr(value, "type", None), getattr(value, "message", None)
        known = hasattr(value, "type") and hasattr(value, "message")
    if not known:
        if isinstance(value, str):
            kind, message = None, value
        elif isinstance(value, Mapping):
            kind, message = None, codec.dumps(value, redact_secrets=True)
        else:
            kind, message = None, str(value)
    kind_text = None if kind is None or kind == "" else str(kind)[:limit]
    return kind_text, ("" if message is None else str(message))[:limit]
