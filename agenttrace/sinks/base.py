"""What every trajectory sink provides.

Sinks are called by agenttrace's writer (a background thread, or the helper process for
built-in sinks; see docs/writer.md), never from the user's thread, one trajectory at a time;
they need no locking of their own. A sink that raises loses
only its own copy of that trajectory: the writer logs the error, counts it, and goes on with
the other sinks and the next trajectory.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agenttrace.trajectory.model import Trajectory


@runtime_checkable
class Sink(Protocol):
    def write(self, trajectory: Trajectory) -> None:
        """Store one finished trajectory."""

    def flush(self) -> None:
        """Make everything written so far durable and readable (e.g. close a Parquet part)."""

    def close(self) -> None:
        """Flush and release files or connections; later writes are an error."""
