"""Getting spans out of code you do not edit: auto-instrumentation, env wrappers, propagation.

Names are imported on first use, so ``import agenttrace`` stays light (the wrappers import
gymnasium, the instrumentor opentelemetry-instrumentation)::

    from agenttrace.instrument import AgentTraceInstrumentor, TracedEnv, inject, remote_context

docs/auto-instrumentation.md, docs/env-wrappers.md and docs/context-propagation.md explain each.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    # auto-instrumentation (docs/auto-instrumentation.md)
    "AgentTraceInstrumentor": "agenttrace.instrument.auto",
    "instrument_from_environment": "agenttrace.instrument.auto",
    "Target": "agenttrace.instrument.targets",
    "TargetError": "agenttrace.instrument.targets",
    # environment wrappers (docs/env-wrappers.md)
    "TracedEnv": "agenttrace.instrument.wrappers",
    "TracedDmEnv": "agenttrace.instrument.wrappers",
    "TrajectoryCollectingEnvironment": "agenttrace.instrument.wrappers",
    "instrument_gymnasium": "agenttrace.instrument.wrappers",
    "uninstrument_gymnasium": "agenttrace.instrument.wrappers",
    # context propagation (docs/context-propagation.md)
    "ContextThreadPoolExecutor": "agenttrace.instrument.propagation",
    "accepts_trace_context": "agenttrace.instrument.propagation",
    "aiohttp_middleware": "agenttrace.instrument.propagation",
    "extract": "agenttrace.instrument.propagation",
    "in_context": "agenttrace.instrument.propagation",
    "inject": "agenttrace.instrument.propagation",
    "inject_into_httpx": "agenttrace.instrument.propagation",
    "remote_context": "agenttrace.instrument.propagation",
    "run_in_executor": "agenttrace.instrument.propagation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agenttrace.instrument' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
