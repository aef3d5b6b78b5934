"""The steps of a long episode, kept on disk instead of in memory.

An episode whose retained spans pass ``max_episode_bytes`` is rebuilt a stretch of steps at a
time (:class:`~agenttrace.trajectory.assembler.EpisodeAssembly`); the finished steps go here, one
JSON line each in an unnamed temporary file. :class:`SpilledSteps` is a read-only sequence of
:class:`~agenttrace.trajectory.model.Step`, so every sink and every reader of
``Trajectory.steps`` works unchanged; the JSONL sink copies the stored lines straight into the
trajectory's line (:meth:`SpilledSteps.json_texts`), so writing a million-step episode costs
disk, not memory.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from agenttrace.trajectory.model import Step


class SpilledSteps(Sequence[Step]):
    """Steps appended once, in order, then read back as often as wanted."""

    def __init__(self, steps: Iterable[Step] = ()) -> None:
        # (removed by the OS when closed or when the process ends, however it ends)
        self._file = tempfile.TemporaryFile(prefix="agenttrace-steps-")  # noqa: SIM115
        self._offsets = array("q")
        self._end = 0
        self.extend(steps)

    def append(self, step: Step) -> None:
        line = (step.to_json() + "\n").encode("utf-8", "backslashreplace")
        self._file.seek(self._end)
        self._file.write(line)
        self._offsets.append(self._end)
        self._end += len(line)

    def extend(self, steps: Iterable[Step]) -> None:
        for step in steps:
            self.append(step)

    @property
    def nbytes(self) -> int:
        """Bytes of the steps' JSON (newlines between them included)."""
        return self._end

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> list[Step]: ...

    def __getitem__(self, index: int | slice) -> Step | list[Step]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        offset = self._offsets[index]  # raises IndexError as a list would
        self._file.seek(offset)
        return _step(self._file.readline())

    def __iter__(self) -> Iterator[Step]:
        for line in self._lines():
            yield _step(line)

    def json_texts(self) -> Iterator[str]:
        """Each step's JSON text, as ``Step.to_json`` gave it."""
        for line in self._lines():
            yield line[:-1].decode("utf-8")

    def _lines(self) -> Iterator[bytes]:
        position = 0
        while position < self._end:
            self._file.seek(position)
            chunk = self._file.readlines(1 << 20)  # about a MiB at a time
            yield from chunk
            position += sum(len(line) for line in chunk)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (sent to another process) as the plain list of its steps."""
        return (list, (list(self),))

    def __repr__(self) -> str:
        return f"<SpilledSteps: {len(self)} steps, {self._end} bytes on disk>"

    def close(self) -> None:
        self._file.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._file.close()


def _step(line: bytes) -> Step:
    data: Any = json.loads(line)
    return Step.from_dict(data)
