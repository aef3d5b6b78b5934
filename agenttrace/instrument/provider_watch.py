"""With a conventions mapping on, read the spans of the program's own tracer: no targets needed.

A runner that traces itself sets a global SDK TracerProvider, usually after the
auto-instrumentor ran (``opentelemetry-instrument`` loads agenttrace first). agenttrace
never replaces that provider: it adds its trajectory processor to it, now when it is already
set, else as soon as the program sets it (``opentelemetry.trace.set_tracer_provider`` is
wrapped to be told). The processor then rebuilds trajectories from the program's spans
through the conventions mapping (``AGENTTRACE_CONVENTIONS``; docs/conventions.md).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from agenttrace import config, pipeline
from agenttrace._logging import internal_error
from agenttrace.instrument.proxies import PatchProxy

logger = logging.getLogger("agenttrace")

_lock = threading.Lock()
_attached: list[Any] = []  # providers the trajectory processor was added to (one or two)
_watching = False


def read_own_tracer_spans() -> bool:
    """Attach agenttrace to the program's global provider when conventions are set; returns
    whether it is attached or waiting for the program to set one."""
    global _watching
    if not config.read_setting_or("conventions", None):
        return False
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        _attach(current)
        return True
    with _lock:
        if not _watching:
            # (a PatchProxy: it pickles as the original does, like every agenttrace patch)
            trace.set_tracer_provider = PatchProxy(trace.set_tracer_provider, _after_set)
            _watching = True
    return True


def _after_set(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    result = wrapped(*args, **kwargs)
    try:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            _attach(current)
    except Exception:
        internal_error("adding agenttrace to the program's TracerProvider")
    return result


def _attach(provider: TracerProvider) -> None:
    """The default pipeline on ``provider``: made now on it (it is the global one), or, when
    one was made before on a provider of its own, its trajectory processor added to this one."""
    with _lock:
        if any(known is provider for known in _attached):
            return
        _attached.append(provider)
    runtime = pipeline.get_default()
    processor = runtime.trajectory_processor
    if runtime.provider is not provider and processor is not None:
        provider.add_span_processor(processor)
    conventions = runtime.settings.conventions
    if conventions is not None:
        logger.debug("agenttrace: reading the program's own spans (%s)", conventions.describe())
