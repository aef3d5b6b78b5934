"""Hand each finished trajectory to a function: a replay buffer, a queue, a trainer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agenttrace.sinks.base import Sink
from agenttrace.trajectory.model import Trajectory


class CallbackSink:
    """Calls ``fn(trajectory)`` for every trajectory, on agenttrace's writer thread.

    ``fn`` runs on the background writer thread, not the caller's: it must be thread-safe
    with respect to whatever it touches (e.g. put into a ``queue.Queue``). An exception it
    raises is logged and counted by the writer and loses only that call.
    """

    def __init__(self, fn: Callable[[Trajectory], Any]) -> None:
        if not callable(fn):
            raise TypeError(f"CallbackSink needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self._closed = False

    def write(self, trajectory: Trajectory) -> None:
        """Call the function with the trajectory."""
        if self._closed:
            raise RuntimeError("CallbackSink is closed; cannot write")
        self.fn(trajectory)

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Later writes raise; the function itself is left alone."""
        self._closed = True

    def __repr__(self) -> str:
        return f"CallbackSink({self.fn!r})"


def as_sink(sink: Sink | Callable[[Trajectory], Any]) -> Sink:
    """A sink object as it is; a plain function wrapped in a :class:`CallbackSink`."""
    if all(hasattr(sink, name) for name in ("write", "flush", "close")):
        return sink  # type: ignore[return-value]
    if callable(sink):
        return CallbackSink(sink)
    raise TypeError(f"not a sink: {sink!r} (needs write/flush/close, or be a callable)")
