"""What the auto-instrumentor says at exit, so that data lost quietly is never silent.

One line each: targets whose module was never imported, targets never called, ``env.step``
calls that ran outside any episode, and (under ``opentelemetry-instrument``) a library the
program imported whose OpenTelemetry instrumentors all failed to load.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from agenttrace import config
from agenttrace.instrument import step_scopes

logger = logging.getLogger("agenttrace")

#: The entry point name of agenttrace's own instrumentor (not reported about).
_OWN_ENTRY_POINT = "agenttrace"


def warn(
    uncalled: Callable[[], list[Any]], never_imported: Sequence[Any], disabled: set[str]
) -> None:
    """Log the exit lines; ``uncalled`` gives the targets installed but never called."""
    for target in never_imported:
        logger.error(
            "agenttrace: target %s never took effect: module %r could not be imported when "
            "instrumentation started and was never imported later in this process",
            target,
            target.module,
        )
    for library, why in instrumentors_not_loaded(disabled):
        logger.warning(
            "agenttrace: no OpenTelemetry instrumentation of %s is active (%s): if this "
            "program calls %s, those calls are not traced (docs/llm-calls.md, Setup; "
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=%s says you meant it)",
            library,
            why,
            library,
            library,
        )
    outside = step_scopes.steps_outside_episodes
    if outside:
        logger.warning(
            "agenttrace: %d env.step call%s ran outside any episode, on an env with no episode "
            "open (no reset() traced before them): no trajectory holds them. Add a target on "
            "the env's reset (role env.reset), or on the function that plays an episode (role "
            "episode)",
            outside,
            "" if outside == 1 else "s",
        )
    if not config.read_setting_or("warn_uncalled_targets", True):
        return
    targets = uncalled()
    if targets and started_a_ray_session():
        logger.debug("agenttrace: a Ray driver; targets never called here: %s", targets)
        return
    if targets:
        logger.warning(
            "agenttrace: %d target%s never called in this process: %s. Check that each names "
            "a function your program calls here (code that runs in another process, a Ray "
            "actor or a worker, is not counted); %s=false turns this warning off",
            len(targets),
            " was" if len(targets) == 1 else "s were",
            "; ".join(str(t) for t in targets),
            "AGENTTRACE_WARN_UNCALLED_TARGETS",
        )


def instrumentors_not_loaded(disabled: set[str]) -> list[tuple[str, str]]:
    """(library, why) for each library this program imported that an installed OpenTelemetry
    instrumentor is for, none of which is active. ``opentelemetry-instrument`` skips an
    instrumentor that fails to load with a debug line only (openai-v2 without httpx, say)."""
    if "opentelemetry.instrumentation.auto_instrumentation" not in sys.modules:
        return []  # not under opentelemetry-instrument: instrumenting others is the program's job
    tried: dict[str, list[str]] = {}  # library -> why each of its instrumentors is not active
    active: set[str] = set()
    for entry in importlib.metadata.entry_points(group="opentelemetry_instrumentor"):
        library = entry.name.replace("-", "_")
        if entry.name in disabled or "*" in disabled or entry.name == _OWN_ENTRY_POINT:
            continue
        if library not in sys.modules or library in active:
            continue  # (not used here: never loaded, nothing to say)
        try:
            instrumentor = entry.load()()
        except Exception as exc:
            tried.setdefault(library, []).append(f"{entry.value} cannot be loaded ({exc})")
            continue
        if instrumentor.is_instrumented_by_opentelemetry:
            active.add(library)
        else:
            tried.setdefault(library, []).append(f"{entry.value} did not instrument it")
    return [(lib, "; ".join(why)) for lib, why in sorted(tried.items()) if lib not in active]


def started_a_ray_session() -> bool:
    """True in a Ray driver: its targets run in the actor and task processes, not here."""
    module = sys.modules.get("ray._private.worker")
    worker = getattr(module, "global_worker", None)
    try:  # Ray's own exit handler may have ended the session (mode None) before ours runs
        return worker is not None and (
            worker.mode is not None or getattr(worker, "logger_thread", None) is not None
        )
    except Exception:
        return False
