"""The service's own span log: every request it acknowledges, on disk before the answer.

``agenttrace collect`` answers an export request only once its payload is in this log and the
log is synced (``fsync``), so a kill -9 or a power cut never loses what a producer was told
was received. On restart the service replays the log to rebuild the episodes that were open.

The log is a folder of segments, ``segment-000001.log`` and up, each a sequence of frames: a
4-byte big-endian length, then the payload as received (an OTLP protobuf or JSON export
request, the format the Collector's ``file`` exporter writes; :mod:`agenttrace.storage`
reads it). A segment is closed when it passes ``max_segment_bytes``; the service deletes a
closed segment once every episode that has records in it is written. A torn last frame (the
process died mid-write) is cut off when the log is opened again: it was never acknowledged.

Syncing is grouped: requests that arrive while one ``fsync`` runs share the next one.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

__all__ = ["LogPosition", "SpanLog"]

logger = logging.getLogger("agenttrace")

_FRAME_HEADER = struct.Struct(">I")
_SEGMENT = re.compile(r"segment-(\d{6,})\.log")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


class LogPosition(NamedTuple):
    """Where a payload went: its segment's number, and the byte offset just past it."""

    segment: int
    end: int


class SpanLog:
    """Append-only, synced, segmented log of received payloads (see the module doc).

    ``sync=False`` leaves syncing to the operating system: what was acknowledged survives a
    crash of the service (kill -9) but not of the machine.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        max_segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        sync: bool = True,
    ) -> None:
        if max_segment_bytes <= 0:
            raise ValueError(f"max_segment_bytes must be positive, got {max_segment_bytes}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_segment_bytes = max_segment_bytes
        self.sync_writes = sync
        self._lock = threading.Lock()  # appends and rotation
        self._sync_lock = threading.Lock()  # one fsync at a time
        self._file: BinaryIO | None = None
        self._segment = max(self.segments(), default=0)
        self._size = 0
        self._synced = LogPosition(self._segment, 0)
        #: Bytes of torn frames cut when the log was opened.
        self.torn_bytes_cut = 0

    # --- reading ---------------------------------------------------------------------------

    def segments(self) -> list[int]:
        """Numbers of the segments on disk, oldest first."""
        numbers = []
        for entry in self.folder.iterdir():
            match = _SEGMENT.fullmatch(entry.name)
            if match:
                numbers.append(int(match.group(1)))
        return sorted(numbers)

    def path_for(self, segment: int) -> Path:
        return self.folder / f"segment-{segment:06d}.log"

    def replay(self) -> Iterator[tuple[int, bytes]]:
        """``(segment, payload)`` of every whole frame on disk, oldest first. Call before the
        first :meth:`append`: a torn last frame of the newest segment is cut off here."""
        for segment in self.segments():
            yield from self._frames(segment)

    def _frames(self, segment: int) -> Iterator[tuple[int, bytes]]:
        path = self.path_for(segment)
        with open(path, "rb") as handle:
            good = 0
            while True:
                header = handle.read(_FRAME_HEADER.size)
                if not header:
                    break
                if len(header) < _FRAME_HEADER.size:
                    self._cut(path, good)
                    break
                (size,) = _FRAME_HEADER.unpack(header)
                payload = handle.read(size)
                if len(payload) < size:
                    self._cut(path, good)
                    break
                good = handle.tell()
                yield segment, payload

    def _cut(self, path: Path, size: int) -> None:
        """A torn frame (the service died writing it; never acknowledged): cut it off."""
        cut = path.stat().st_size - size
        with open(path, "r+b") as handle:
            handle.truncate(size)
        self.torn_bytes_cut += cut
        logger.warning("agenttrace collect: cut a torn frame of %d bytes off %s", cut, path)

    # --- writing ---------------------------------------------------------------------------

    def append(self, payload: bytes) -> LogPosition:
        """Write one payload (not yet synced: :meth:`sync` the position before answering)."""
        with self._lock:
            handle = self._file
            if handle is None or (self._size and self._size >= self.max_segment_bytes):
                handle = self._rotate()
            handle.write(_FRAME_HEADER.pack(len(payload)))
            handle.write(payload)
            self._size += _FRAME_HEADER.size + len(payload)
            return LogPosition(self._segment, self._size)

    def sync(self, position: LogPosition) -> None:
        """Return once everything up to ``position`` is on disk (one fsync for many callers)."""
        if self._synced >= position:
            return
        with self._sync_lock:
            if self._synced >= position:  # another caller's fsync covered it
                return
            with self._lock:
                handle = self._file
                reached = LogPosition(self._segment, self._size)
                if handle is not None:
                    handle.flush()
            if handle is not None and self.sync_writes:
                os.fsync(handle.fileno())
            self._synced = max(self._synced, reached)

    @property
    def current_segment(self) -> int:
        return self._segment

    def _rotate(self) -> BinaryIO:
        """Close the segment being written (synced) and open the next one."""
        old = self._file
        if old is not None:
            old.flush()
            if self.sync_writes:
                os.fsync(old.fileno())
            old.close()
            self._synced = max(self._synced, LogPosition(self._segment, self._size))
        if old is None and self._segment and self._size == 0:
            # the newest segment on disk after a restart: go on after its frames
            path = self.path_for(self._segment)
            size = path.stat().st_size if path.exists() else 0
            if size < self.max_segment_bytes:
                self._file = open(path, "ab")  # noqa: SIM115 - closed in close() or _rotate()
                self._size = size
                return self._file
        self._segment += 1
        self._size = 0
        self._file = open(self.path_for(self._segment), "ab")  # noqa: SIM115 - as above
        return self._file

    def delete(self, segment: int) -> bool:
        """Delete a closed segment (never the one being written); True if it was there."""
        if segment >= self._segment:
            return False
        try:
            self.path_for(segment).unlink()
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        with self._lock:
            handle, self._file = self._file, None
            if handle is not None:
                handle.flush()
                if self.sync_writes:
                    os.fsync(handle.fileno())
                handle.close()
