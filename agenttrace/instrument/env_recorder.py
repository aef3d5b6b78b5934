"""One wrapped environment's episodes: an episode from each reset, spans for each call.

An env wrapper (:mod:`agenttrace.instrument.wrappers`) holds one :class:`_Recorder`. It
opens an ``episode`` at each reset (one still open ends ``abandoned``) and traces each call
of the wrapped environment in a :class:`_TracedCall`: ``env.reset``, or ``timestep`` with its
``env.step``. An episode spans many calls, so no context is held between them: each call
makes its spans current while it runs and restores the caller's context before it returns.
The episode ends with the terminal step (``completed``), a truncated one (``truncated``), an
exception from the environment (``errored``; it passes through unchanged) or a cancellation
(``cancelled``).
"""

from __future__ import annotations

import numbers
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace.instrument.episode_scope import EpisodeScope
from agenttrace.instrument.extractors import _UNSET, EXTRACTORS
from agenttrace.instrument.field_values import read_flag
from agenttrace.instrument.step_scopes import EnvResetScope, EnvStepScope, TimestepScope
from agenttrace.instrument.wrapper_options import Collector, _collector_for


def _episode_context(episode: EpisodeScope) -> Context | None:
    """The context that makes ``episode`` current for its children.

    The scopes have no public way to make a started scope current without ending it on exit;
    this reads the scope's context (see docs/env-wrappers.md, "internals").
    """
    context = getattr(episode, "_context", None)
    return context if isinstance(context, Context) else None


def _is_cancel(exc: BaseException) -> bool:
    return not isinstance(exc, Exception)


class _Recorder:
    """One wrapper's episodes: opened at reset, one step per call, each ended exactly once."""

    def __init__(
        self,
        owner: Any,
        *,
        extractor: str,
        episode_options: dict[str, Any],
        collector: Collector | None,
    ) -> None:
        self.owner = owner
        self.extract = EXTRACTORS[extractor]
        self.extractor = extractor
        self.episode_options = episode_options
        self.collector = collector
        self.runtime: pipeline.AgentTrace | None = None
        self.episode: EpisodeScope | None = None
        self.recording = False  # whether the open episode's span records (not sampled out)
        self.last_episode_id: str | None = None
        self.active = True  # False under an outer TracedEnv of the same stack

    def open_episode(self) -> EpisodeScope | None:
        """The open episode; None when there is none or it was ended elsewhere."""
        episode = self.episode
        if episode is None:
            return None
        if self.recording and not episode.span.is_recording():
            self.episode = None  # ended by at.env_closed(env) or a previous failure
            return None
        return episode

    def begin(self, seed: Any = None) -> None:
        """Open a new episode; one still open ends ``abandoned``."""
        self.end_open(sc.STATUS_ABANDONED)
        try:
            runtime = pipeline.get_default()
            self.runtime = runtime
            if not runtime.enabled:
                return
            if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
                seed = int(seed)
            else:
                seed = None
            episode = EpisodeScope(
                env=self.owner, seed=seed, runtime=runtime, **self.episode_options
            ).start()
            self.episode = episode
            self.recording = episode.span.is_recording()
            self.last_episode_id = episode.id
            if self.collector is not None and episode.id and self.recording:
                _collector_for(runtime.provider).watch(episode.id, self.collector)
        except Exception:
            _internal_error("opening an episode in an env wrapper")

    def end(self, status: str, exc: BaseException | None = None) -> None:
        episode, self.episode = self.episode, None
        if episode is None:
            return
        try:
            episode.end_as(status, exc)
        except Exception:
            _internal_error("ending an episode in an env wrapper")

    def end_open(self, status: str) -> None:
        if self.open_episode() is not None:
            self.end(status)

    def deactivate(self) -> None:
        """An outer wrapper traces this stack now: stop producing spans."""
        self.active = False
        self.end_open(sc.STATUS_ABANDONED)

    def reset_call(self, seed: Any = None) -> _TracedCall:
        """Open an episode and trace the reset call in it."""
        self.begin(seed)
        return _TracedCall(self, reset=True)

    def step_call(self, action: Any) -> _TracedCall | None:
        """Trace one step of the open episode; None when no episode is open."""
        if self.open_episode() is None:
            return None
        return _TracedCall(self, reset=False, action=action)

    def ending_status(self, result: Any) -> str | None:
        """completed/truncated when ``result`` ends the episode, else None."""
        found = self.extract(result)
        if found is None:
            return None
        if read_flag(found.terminated):  # (a flag that is not a bool: as record() reads it)
            return sc.STATUS_COMPLETED
        if read_flag(found.truncated):
            return sc.STATUS_TRUNCATED
        return None


class _TracedCall:
    """One call of the wrapped environment, its spans current only while it runs.

    Entered around the call: attaches the episode's context and starts ``env.reset`` (or
    ``timestep`` and ``env.step``); on exit ends them, restores the caller's context and then
    ends the episode if the call ended it (children end before the episode span).
    """

    __slots__ = ("_action", "_ending", "_recorder", "_reset", "_scopes", "_token")

    def __init__(self, recorder: _Recorder, *, reset: bool, action: Any = _UNSET) -> None:
        self._recorder = recorder
        self._reset = reset
        self._action = action
        self._scopes: list[Any] = []
        self._token: object | None = None
        self._ending: str | None = None

    def __enter__(self) -> _TracedCall:
        recorder = self._recorder
        episode = recorder.episode
        if episode is None:
            return self
        try:
            context = _episode_context(episode)
            if context is not None:
                self._token = otel_context.attach(context)
            elif recorder.recording:  # the call's spans would miss the episode: say so
                raise RuntimeError("the episode scope has no context to make current")
            runtime = recorder.runtime
            if self._reset:
                scopes: tuple[Any, ...] = (EnvResetScope(runtime=runtime),)
            else:
                scopes = (
                    TimestepScope(runtime=runtime),
                    EnvStepScope(extractor=recorder.extractor, runtime=runtime),
                )
            for scope in scopes:
                scope.__enter__()
                self._scopes.append(scope)
            if self._action is not _UNSET:
                scopes[-1].record(action=self._action)
        except Exception:
            _internal_error("starting a traced env call")
        return self

    def record(self, result: Any) -> None:
        """Record what the environment returned (and whether it ended the episode)."""
        if not self._scopes:
            return
        try:
            self._scopes[-1].record_result(result)
            if not self._reset:
                self._ending = self._recorder.ending_status(result)
        except Exception:
            _internal_error("recording an env result")

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            for scope in reversed(self._scopes):
                scope.__exit__(exc_type, exc, tb)
        except Exception:
            _internal_error("ending a traced env call")
        finally:
            self._scopes.clear()
            token, self._token = self._token, None
            if token is not None:
                otel_context.detach(token)
        recorder = self._recorder
        if recorder.episode is None:
            return
        if exc is not None:
            recorder.end(sc.STATUS_CANCELLED if _is_cancel(exc) else sc.STATUS_ERRORED, exc)
        elif self._ending is not None:
            recorder.end(self._ending)
