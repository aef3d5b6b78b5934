"""agenttrace's background threads: born with SIGTERM and SIGINT blocked.

The kernel delivers a signal sent to the process to any thread that does not block it.
Python runs its handler only in the main thread, when that thread next runs Python code: a
main thread blocked in C (a process pool worker waiting on its task queue) would never run
agenttrace's SIGTERM handler if the signal went to one of agenttrace's threads, and the
process would hang instead of ending. A thread that blocks the signals itself, as its first
line, is too late: it waits for the GIL before that line runs, and a signal in that window
is lost the same way. So the signals are blocked in the starting thread around
``Thread.start()``; the new thread inherits the mask from birth, and the starting thread gets
its own mask back (a signal that came meanwhile is delivered then).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT") if hasattr(signal, name)
)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Threads started inside (by agenttrace or a library it calls) never take SIGTERM/SIGINT."""
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    except (AttributeError, OSError, ValueError):  # not POSIX
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def start_daemon(target: Callable[..., Any], name: str, *args: Any) -> threading.Thread:
    """Start a daemon thread that leaves the process's signals to the main thread.

    Raises RuntimeError like ``Thread.start`` (no new threads at interpreter shutdown).
    """
    thread = threading.Thread(target=target, name=name, args=args, daemon=True)
    with signals_blocked():
        thread.start()
    return thread
