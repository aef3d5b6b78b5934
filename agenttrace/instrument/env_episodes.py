"""Episodes an environment delimits itself: for env targets called outside any episode.

Classic RL loops have no "play one episode" function: an episode is whatever happens between
an env's ``reset()`` and its terminal ``step()``, often inside a library (an evaluation
helper, a vector env's autoreset). With targets on the env's ``reset`` and ``step`` only,
each env *instance* (the object the method is called on) gets its own episodes:

* ``reset()`` outside any episode opens one for that env (one still open on it ends
  ``abandoned``), with the reset's ``seed``;
* ``step()`` outside any episode joins the one open on its env; the step whose result is
  terminated or truncated ends it ``completed`` / ``truncated``; an exception ends it
  ``errored``;
* a ``step()`` with no episode open on its env (before the first reset) stays outside any
  episode, and is counted for the warning at exit (``step_scopes.steps_outside_episodes``).

Inside an ``episode`` span (a target, a decorator, a ``with``) nothing changes. The auto-
instrumentor uses these scopes for env.reset/env.step targets unless
``AGENTTRACE_ENV_EPISODES=false``. The spans are the ones :class:`~agenttrace.instrument.
wrappers.TracedEnv` writes, minus the ``timestep`` around each ``env.step``.
"""

from __future__ import annotations

import numbers
from typing import Any

from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace.instrument.arguments import CallArguments
from agenttrace.instrument.episode_scope import EpisodeScope
from agenttrace.instrument.episode_state import _is_cancel, current_episode_id
from agenttrace.instrument.step_scopes import EnvResetScope, EnvStepScope


class EnvEpisodeResetScope(EnvResetScope):
    """An env.reset target's scope: outside any episode, it opens one for its env."""

    _opened: EpisodeScope | None = None

    def _before_start(self, arguments: CallArguments) -> None:
        env = _env_outside_episodes(self)
        if env is None:
            return
        runtime = self._resolve_runtime()
        if not runtime.enabled:
            return
        seed = arguments.get("seed")
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            seed = None
        episode = EpisodeScope(env=env, seed=seed, runtime=runtime).start()
        self._opened = episode
        self._parent = episode._context

    def end(self, exc: BaseException | None = None) -> None:
        super().end(exc)
        episode = self._opened
        if episode is not None and exc is not None:  # the reset failed: so did the episode
            _end_episode(episode, _failed(exc), exc)


class EnvEpisodeStepScope(EnvStepScope):
    """An env.step target's scope: outside any episode, it joins the one open on its env and
    ends it with the terminal step."""

    _joined: EpisodeScope | None = None

    def _before_start(self, arguments: CallArguments) -> None:
        env = _env_outside_episodes(self)
        if env is None:
            return
        runtime = self._resolve_runtime()
        with runtime.env_lock:
            state = runtime.open_episodes_by_env.get(id(env))
        episode = state.handle if state is not None else None
        if episode is None or episode._context is None:
            return  # outside any episode (counted by EnvStepScope)
        self._joined = episode
        self._parent = episode._context

    def end(self, exc: BaseException | None = None) -> None:
        super().end(exc)
        episode = self._joined
        if episode is None:
            return
        if exc is not None:
            _end_episode(episode, _failed(exc), exc)
            return
        # The flags this step recorded (the episode keeps the newest step's): a terminal step
        # ends the episode.
        state = self._frame.episode if self._frame is not None else None
        last = state.last_flags if state is not None else None
        if last is not None and last[0] == self.index and (last[2] or last[3]):
            _end_episode(episode, sc.STATUS_COMPLETED if last[2] else sc.STATUS_TRUNCATED)


def _env_outside_episodes(scope: EnvResetScope) -> Any:
    """The env a target's call is made on, when it is made outside any episode; else None."""
    env = scope._receiver
    if env is None or current_episode_id() is not None:
        return None
    return env


def _failed(exc: BaseException) -> str:
    return sc.STATUS_CANCELLED if _is_cancel(exc) else sc.STATUS_ERRORED


def _end_episode(episode: EpisodeScope, status: str, exc: BaseException | None = None) -> None:
    try:
        episode.end_as(status, exc)
    except Exception:
        _internal_error("ending an env's episode")


#: The scope an env.reset/env.step target uses when its env delimits episodes.
ENV_EPISODE_SCOPES: dict[type, type] = {
    EnvResetScope: EnvEpisodeResetScope,
    EnvStepScope: EnvEpisodeStepScope,
}
