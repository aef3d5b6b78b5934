"""The keywords every env wrapper takes, and what they become.

:class:`~agenttrace.instrument.wrappers.TracedEnv`, :class:`~agenttrace.instrument.wrappers.
TracedDmEnv`, :class:`~agenttrace.instrument.wrappers.TrajectoryCollectingEnvironment` and
:class:`~agenttrace.instrument.vector.TracedVectorEnv` take the same keywords. ``task_id``,
``env_name``, ``agent_name``, ``policy_version`` and ``attributes`` become the options of
each episode they open (:func:`_episode_options`). ``collector`` is called with each finished
:class:`Trajectory` of that wrapper, on the thread that ended the episode, right when it
ended: the same trajectory the sinks get, rebuilt by the one assembler from the same span
records, which a small span processor (added once per TracerProvider) keeps for watched
episodes only.
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace.processing.writer import AGENTTRACE_SCOPE
from agenttrace.trajectory import Trajectory, build_trajectory, record_from_span
from agenttrace.trajectory.records import SpanRecord

logger = logging.getLogger("agenttrace")

Collector = Callable[[Trajectory], Any]


def _episode_options(
    task_id: str | None,
    env_name: str | None,
    agent_name: str | None,
    policy_version: str | None,
    attributes: dict[str, Any] | None,
) -> dict[str, Any]:
    """The options of each episode a wrapper opens, from its keywords (``attributes``: a
    dict or None, else TypeError)."""
    if attributes is not None and not isinstance(attributes, dict):
        raise TypeError(f"attributes must be a dict, got {type(attributes).__name__}")
    return {
        "task_id": task_id,
        "env_name": env_name,
        "agent_name": agent_name,
        "policy_version": policy_version,
        "attributes": attributes,
    }


# --- the collector: finished trajectories of watched episodes ---------------------------------


class _EpisodeCollector(SpanProcessor):
    """Keeps span records of watched episodes; hands each finished episode to its callback.

    Unwatched spans cost one dict lookup. The callback runs in ``on_end`` of the episode span,
    on the thread that ended it; its failures are logged, never raised into ``span.end()``.
    """

    def __init__(self) -> None:
        self._watched: dict[str, tuple[list[SpanRecord], Collector]] = {}

    def watch(self, episode_id: str, callback: Collector) -> None:
        self._watched[episode_id] = ([], callback)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not self._watched:
            return
        try:
            attributes = span.attributes
            episode_id = attributes.get(sc.EPISODE_ID) if attributes else None
            if episode_id is None:
                return
            episode_id = str(episode_id)
            entry = self._watched.get(episode_id)
            if entry is None:
                return
            records, callback = entry
            records.append(record_from_span(span))
            if span.name != sc.EPISODE:
                return
            self._watched.pop(episode_id, None)
        except Exception:
            _internal_error("collecting spans for a collector")
            return
        _deliver(episode_id, records, callback)

    def shutdown(self) -> None:
        self._watched.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _deliver(episode_id: str, records: list[SpanRecord], callback: Collector) -> None:
    try:
        trajectory = build_trajectory(records, episode_id, trusted_scope=AGENTTRACE_SCOPE)
    except Exception:
        _internal_error("rebuilding a trajectory for a collector")
        return
    try:
        callback(trajectory)
    except Exception:
        logger.exception(
            "agenttrace: the collector %r failed on episode %s; that trajectory is lost to it "
            "(the sinks still have it)",
            callback,
            episode_id,
        )


_collectors: weakref.WeakKeyDictionary[TracerProvider, _EpisodeCollector] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def _collector_for(provider: TracerProvider) -> _EpisodeCollector:
    with _collectors_lock:
        collector = _collectors.get(provider)
        if collector is None:
            collector = _EpisodeCollector()
            provider.add_span_processor(collector)
            _collectors[provider] = collector
        return collector


def _checked_collector(collector: Any) -> Collector | None:
    if collector is None:
        return None
    if not callable(collector):
        raise TypeError(f"collector must be callable, got {type(collector).__name__}")
    # a coroutine function, or an object whose __call__ is one
    if inspect.iscoroutinefunction(collector) or inspect.iscoroutinefunction(
        type(collector).__call__
    ):
        raise TypeError(
            "collector must be a plain function called with each finished Trajectory; "
            f"{collector!r} is a coroutine function (e.g. use queue.put_nowait instead)"
        )
    return collector
