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
inside agenttrace is logged and never reaches the user's code.

This module is the API only: the scopes it returns are the roles' (the episode in
:mod:`~agenttrace.instrument.episode_scope`, the step-like spans in
:mod:`~agenttrace.instrument.step_scopes`, model and tool calls in
:mod:`~agenttrace.instrument.calls`), on the base all of them share
(:mod:`agenttrace.instrument.scope`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace.instrument.calls import LLMCallScope, ToolCallScope
from agenttrace.instrument.episode_scope import EpisodeScope
from agenttrace.instrument.episode_state import current_episode_id
from agenttrace.instrument.scope import _Scope
from agenttrace.instrument.step_scopes import (
    AgentActScope,
    EnvResetScope,
    EnvStepScope,
    TimestepScope,
)
from agenttrace.trajectory.scores import checked_score


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
