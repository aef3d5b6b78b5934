"""Vector environments: one episode per sub-environment run, from the batched calls.

A ``gymnasium.vector.VectorEnv`` plays N sub-environments in lockstep and resets each one by
itself when it ends (its *autoreset mode*). No function of the user's loop delimits an
episode, and the batched results mix N of them. :class:`TracedVectorEnv` splits them again::

    envs = TracedVectorEnv(gym.make_vec("CartPole-v1", num_envs=4))
    obs, info = envs.reset(seed=0)  # opens one episode per sub-environment
    ...  # envs.step(actions) as usual

Each sub-environment's reset-to-terminal run is an ``episode`` span (attribute
``rl.env.index``: which sub-environment) with its ``env.reset``. Each ``step()`` call is one
``env.vector_step`` span holding the step of every sub-environment it advanced (``rl.vector.*``
lists, linked to their episodes), read back as one ``env.step`` per sub-environment, so the
trajectories are the same as if each sub-environment had been played alone with
:class:`~agenttrace.instrument.wrappers.TracedEnv`, for one span per call instead of N.
All three autoreset modes are followed (gymnasium's ``AutoresetMode``):

* next-step: a sub-environment that ended is reset by the *next* ``step()`` call, whose
  result for it is the new episode's reset (its action is ignored);
* same-step: the ending step's result already holds the next episode's reset; its own last
  observation and info are in ``info["final_obs"]`` / ``info["final_info"]``;
* disabled: ``reset(options={"reset_mask": mask})`` resets the masked sub-environments.

The vector step span is started before the batched call and ended after it (before the
episodes it ended), so it covers the call; it is not made current. The vector environment itself
runs wherever it runs (sync, async worker processes, a native vector implementation): only
its batched results are read, in this process. :func:`~agenttrace.instrument.wrappers.
instrument_gymnasium` wraps what ``gymnasium.make_vec`` returns.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Link, Status, StatusCode

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._version import install_hint
from agenttrace.instrument.episode_scope import EpisodeScope
from agenttrace.instrument.scope import content_text
from agenttrace.instrument.step_scopes import EnvResetScope, EnvStepScope
from agenttrace.instrument.wrapper_options import (
    _checked_collector,
    _collector_for,
    _episode_options,
)

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode, VectorWrapper
    from gymnasium.vector.utils import iterate
except ImportError:  # TracedVectorEnv then explains what to install
    gymnasium = None  # type: ignore[assignment]
    VectorWrapper = object  # type: ignore[assignment, misc]

_FINAL_KEYS = ("final_obs", "final_info")
#: An entry of a vector step ranks as an env.step span among its step's spans.
_ENV_STEP_PRIORITY = EnvStepScope._priority


class _SubEnv:
    """One sub-environment's open episode (and the key its episode registers under)."""

    __slots__ = ("__weakref__", "episode", "index", "needs_reset")

    def __init__(self, index: int) -> None:
        self.index = index
        self.episode: EpisodeScope | None = None
        self.needs_reset = False  # next-step autoreset: its next step() result is a reset


class TracedVectorEnv(VectorWrapper):  # type: ignore[misc, valid-type]
    """A ``gymnasium.vector.VectorWrapper`` that records each sub-environment's episodes.

    Keywords are :class:`~agenttrace.instrument.wrappers.TracedEnv`'s (``task_id``,
    ``env_name``, ``agent_name``, ``policy_version``, ``attributes``, ``collector``), given to
    every sub-environment's episodes. ``close()`` ends the episodes still open ``aborted``.
    """

    def __init__(
        self,
        env: Any,
        *,
        task_id: str | None = None,
        env_name: str | None = None,
        agent_name: str | None = None,
        policy_version: str | None = None,
        attributes: dict[str, Any] | None = None,
        collector: Any = None,
    ) -> None:
        if gymnasium is None:
            raise ImportError("TracedVectorEnv needs gymnasium: " + install_hint("gym"))
        super().__init__(env)
        if env_name is None:
            spec = getattr(env, "spec", None)
            env_name = getattr(spec, "id", None) or type(env.unwrapped).__name__
        self._at_options = _episode_options(
            task_id, env_name, agent_name, policy_version, attributes
        )
        self._at_collector = _checked_collector(collector)
        self._at_subs = [_SubEnv(i) for i in range(env.num_envs)]
        # The process stepping each sub-environment: an AsyncVectorEnv's workers, else here.
        processes = getattr(env.unwrapped, "processes", None)
        pids = [getattr(p, "pid", None) for p in processes or ()]
        if len(pids) != env.num_envs or not all(isinstance(pid, int) for pid in pids):
            pids = [os.getpid()] * env.num_envs
        self._at_workers = pids
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._at_mode = AutoresetMode(mode) if not isinstance(mode, AutoresetMode) else mode

    # --- the gymnasium API ----------------------------------------------------------------

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        mask = (options or {}).get("reset_mask")  # (read first: the vector env pops it)
        result = self.env.reset(seed=seed, options=options)
        try:
            observations, infos = result
            for sub, observation in zip(
                self._at_subs, iterate(self.observation_space, observations), strict=True
            ):
                if mask is None or bool(mask[sub.index]):
                    self._open(sub, observation, _sub_info(infos, sub.index), _seed(seed, sub))
        except Exception:
            _internal_error("recording a vector env reset")
        return result

    def step(self, actions: Any) -> Any:
        step = self._start_step(actions)
        try:
            result = self.env.step(actions)
        except BaseException as exc:
            self._fail(step, exc)
            raise
        try:
            self._finish_step(step, result)
        except Exception:
            _internal_error("recording a vector env step")
        return result

    def close(self, **kwargs: Any) -> Any:
        """Episodes still open end ``aborted``; then the vector environment closes."""
        for sub in self._at_subs:
            self._end(sub, sc.STATUS_ABORTED)
        return self.env.close(**kwargs)

    # --- recording ------------------------------------------------------------------------

    def _open(self, sub: _SubEnv, observation: Any, info: Any, seed: int | None) -> None:
        """A new episode on ``sub``, its reset recorded (one still open ends abandoned)."""
        self._end(sub, sc.STATUS_ABANDONED)
        sub.needs_reset = False
        runtime = pipeline.get_default()
        if not runtime.enabled:
            return
        options = dict(self._at_options)
        options["attributes"] = {
            **(options["attributes"] or {}),
            sc.ENV_INDEX: sub.index,
            sc.ENV_WORKER: self._at_workers[sub.index],
        }
        episode = EpisodeScope(env=sub, seed=seed, runtime=runtime, **options).start()
        sub.episode = episode
        if self._at_collector is not None and episode.id and episode.span.is_recording():
            _collector_for(runtime.provider).watch(episode.id, self._at_collector)
        reset = _started_in(episode, EnvResetScope(runtime=runtime))
        if reset is not None:
            reset.record(observation=observation, info=info)
            reset.end()

    def _start_step(self, actions: Any) -> _VectorStep | None:
        """The env.vector_step span of the sub-environments about to play a step of an
        episode (None when none is, or tracing is off)."""
        try:
            playing = [
                sub
                for sub in self._at_subs
                if sub.episode is not None
                and not sub.needs_reset  # (this call resets it: next-step autoreset)
                and sub.episode.span.is_recording()
            ]
            if not playing:
                return None
            return _VectorStep(playing, list(iterate(self.action_space, actions)))
        except Exception:
            _internal_error("starting a vector env step")
            return None

    def _finish_step(self, step: _VectorStep | None, result: Any) -> None:
        observations, rewards, terminations, truncations, infos = result
        same_step = self._at_mode == AutoresetMode.SAME_STEP
        ended: list[tuple[_SubEnv, bool, Any, Any]] = []
        for sub, observation in zip(
            self._at_subs, iterate(self.observation_space, observations), strict=True
        ):
            i = sub.index
            info = _sub_info(infos, i, skip=_FINAL_KEYS if same_step else ())
            if sub.needs_reset:  # next-step autoreset: this result is the new episode's reset
                self._open(sub, observation, info, None)
                continue
            terminated, truncated = bool(terminations[i]), bool(truncations[i])
            reset_observation = reset_info = None
            if (terminated or truncated) and same_step:  # the result holds the next reset
                final = _sub_info(infos, i).get("final_info", {})
                reset_observation, reset_info = observation, info
                observation, info = infos["final_obs"][i], final
            if step is not None:
                step.outcome(sub, observation, float(rewards[i]), terminated, truncated, info)
            if terminated or truncated:
                ended.append((sub, terminated, reset_observation, reset_info))
        if step is not None:
            step.end()  # before the episodes it stepped end: its steps belong to them
        for sub, terminated, reset_observation, reset_info in ended:
            self._end(sub, sc.STATUS_COMPLETED if terminated else sc.STATUS_TRUNCATED)
            if same_step:
                self._open(sub, reset_observation, reset_info, None)
            elif self._at_mode == AutoresetMode.NEXT_STEP:
                sub.needs_reset = True

    def _fail(self, step: _VectorStep | None, exc: BaseException) -> None:
        """The batched step raised: every sub-environment's episode ends with it."""
        cancelled = not isinstance(exc, Exception)
        if step is not None:
            step.end(exc)
        for sub in self._at_subs:
            self._end(sub, sc.STATUS_CANCELLED if cancelled else sc.STATUS_ERRORED, exc)

    def _end(self, sub: _SubEnv, status: str, exc: BaseException | None = None) -> None:
        episode, sub.episode = sub.episode, None
        if episode is not None:
            try:
                episode.end_as(status, exc)
            except Exception:
                _internal_error("ending a vector env episode")


_ROLE = sc.ENV_VECTOR_STEP  # (what warnings about its values name)


class _VectorStep:
    """One ``env.vector_step`` span: the env step of every sub-environment playing an
    episode, as ``rl.vector.*`` lists in one span instead of one span each.

    Each entry is bookkept on its episode as an env.step span would be (index, reward,
    flags, so the episode span's return and length hold); the span links to each episode's
    span, and is read back as one env.step per entry (``split_vector_step``).
    """

    __slots__ = ("_at", "_infos", "_observations", "_rewards", "_runtime", "_span", "_states")

    def __init__(self, playing: list[_SubEnv], actions: list[Any]) -> None:
        episodes = [sub.episode for sub in playing]
        runtime = self._runtime = episodes[0]._runtime  # type: ignore[union-attr]
        states = [episode._frame.episode for episode in episodes]  # type: ignore[union-attr]
        indices = []
        for state in states:
            index = state.next_index
            state.close_turn(index)
            indices.append(index)
        self._states = dict(zip((sub.index for sub in playing), states, strict=True))
        self._at = dict(zip((sub.index for sub in playing), indices, strict=True))
        attributes: dict[str, Any] = {
            sc.VECTOR_EPISODE_IDS: [state.episode_id for state in states],
            sc.VECTOR_ENV_INDICES: [sub.index for sub in playing],
            sc.VECTOR_STEP_INDICES: indices,
        }
        texts = [content_text(runtime, sc.ACTION, actions[sub.index], _ROLE) for sub in playing]
        if None not in texts:
            attributes[sc.VECTOR_ACTIONS] = texts
        links = [Link(episode.span.get_span_context()) for episode in episodes]  # type: ignore[union-attr]
        self._span = runtime.tracer.start_span(
            sc.ENV_VECTOR_STEP, attributes=attributes, links=links
        )
        self._observations: list[str | None] = []
        self._infos: list[str | None] = []
        self._rewards: dict[str, list[Any]] = {
            sc.VECTOR_REWARDS: [],
            sc.VECTOR_TERMINATED: [],
            sc.VECTOR_TRUNCATED: [],
        }

    def outcome(
        self,
        sub: _SubEnv,
        observation: Any,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: Any,
    ) -> None:
        """What sub-environment ``sub`` returned (called in the order it was started)."""
        index = self._at.get(sub.index)
        if index is None:
            return
        state = self._states[sub.index]
        state.record_reward(index, _ENV_STEP_PRIORITY, reward)
        state.record_flags(index, _ENV_STEP_PRIORITY, terminated, truncated)
        self._observations.append(content_text(self._runtime, sc.OBSERVATION, observation, _ROLE))
        self._infos.append(content_text(self._runtime, sc.INFO, info, _ROLE))
        outcome = self._rewards
        outcome[sc.VECTOR_REWARDS].append(reward)
        outcome[sc.VECTOR_TERMINATED].append(terminated)
        outcome[sc.VECTOR_TRUNCATED].append(truncated)

    def end(self, exc: BaseException | None = None) -> None:
        span = self._span
        try:
            if len(self._observations) == len(self._at):  # every entry has its outcome
                outcome: dict[str, Any] = dict(self._rewards)
                for key, texts in (
                    (sc.VECTOR_OBSERVATIONS, self._observations),
                    (sc.VECTOR_INFOS, self._infos),
                ):
                    if None not in texts:
                        outcome[key] = texts
                span.set_attributes(outcome)
            if isinstance(exc, Exception):
                span.record_exception(exc, escaped=True)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        except Exception:
            _internal_error("ending a vector env step")
        finally:
            span.end()


def _started_in(episode: EpisodeScope, scope: Any) -> Any:
    """``scope`` started as a child of ``episode`` (not made current); None when it could not
    be (tracing off, the episode ended elsewhere)."""
    context = episode._context  # the context that makes the episode current for children
    if context is None or not episode.span.is_recording():
        return None
    token = otel_context.attach(context)
    try:
        scope._runtime = episode._runtime
        return scope.start()
    finally:
        otel_context.detach(token)


def _sub_info(infos: Any, index: int, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Sub-environment ``index``'s part of a vector info dict (values with their ``_key``
    mask set for it; nested dicts likewise)."""
    if not isinstance(infos, Mapping):
        return {}
    found: dict[str, Any] = {}
    for key, value in infos.items():
        if not isinstance(key, str) or key.startswith("_") or key in skip:
            continue
        mask = infos.get("_" + key)
        if mask is not None and not bool(mask[index]):
            continue
        if isinstance(value, Mapping):
            found[key] = _sub_info(value, index)
        else:
            try:
                found[key] = value[index]
            except (TypeError, IndexError, KeyError):
                found[key] = value
    return found


def _seed(seed: Any, sub: _SubEnv) -> int | None:
    """The seed sub-environment ``sub`` was reset with (gymnasium: ``seed + i``, or a list)."""
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return int(seed) + sub.index
    if isinstance(seed, (list, tuple)) and sub.index < len(seed):
        value = seed[sub.index]
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
    return None


__all__ = ["TracedVectorEnv"]
