"""Span records bucketed on disk: what the read tasks of ``agenttrace export --engine ray``
hand to its rebuild tasks.

A read task writes one shard file for its chunk of the input: a segment per bucket, each a
run of frames (a frame is one line's records of that bucket, with the line's number), each
frame pickled, compressed and behind its 4-byte length. The task returns where each segment
is, so a rebuild task reads only its own segment of each shard, one frame at a time: its
memory holds a frame, never a bucket.

Pickle, because a frame must come back exactly as the decoder made it (tuples stay tuples,
numbers keep their type) and the shards are written and read by the same program within one
run, in its own temporary folder; they are read from nowhere else. Compressed at the fastest
level, with zstd when the zstandard package is there (spans compress tenfold or more, for about
5 % of the rebuild's time), else zlib (twice that time): the shards of a large export would
fill disks, and cross the network to shared storage.
"""

from __future__ import annotations

import array
import io
import os
import pickle
import zlib
from collections.abc import Iterator
from typing import Any

_LENGTH = 4
_ZSTD, _ZLIB = b"s", b"z"  # (a frame's first byte: how it is compressed)


def _codec() -> tuple[Any, Any]:
    try:
        import zstandard
    except ImportError:
        return lambda data: _ZLIB + zlib.compress(data, 1), None
    compress = zstandard.ZstdCompressor(level=1).compress
    return lambda data: _ZSTD + compress(data), zstandard.ZstdDecompressor().decompress


def _decompress(data: bytes, zstd: Any) -> bytes:
    if data[:1] == _ZLIB:
        return zlib.decompress(data[1:])
    if zstd is None:
        raise OSError("a shard frame is zstd data, and the zstandard package is missing")
    return zstd(data[1:])


class Segments:
    """Where each segment of a shard file is: ``segments[i]`` is its (offset, length), the
    boundaries kept in one array (the driver holds these of every chunk of a large input)."""

    __slots__ = ("bounds",)

    def __init__(self, bounds: array.array | None = None) -> None:
        self.bounds = bounds if bounds is not None else array.array("q", [0])

    def __getitem__(self, index: int) -> tuple[int, int]:
        start = self.bounds[index]
        return start, self.bounds[index + 1] - start

    def __len__(self) -> int:
        return len(self.bounds) - 1


class ShardWriter:
    """Frames into the segments of one shard file, written whole at :meth:`close`."""

    def __init__(self, path: str | os.PathLike, segments: int) -> None:
        self.path = path
        self._buffers: list[io.BytesIO | None] = [None] * segments
        self._compress = _codec()[0]

    def add(self, segment: int, frame: Any) -> None:
        data = self._compress(pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL))
        buffer = self._buffers[segment]
        if buffer is None:
            buffer = self._buffers[segment] = io.BytesIO()
        buffer.write(len(data).to_bytes(_LENGTH, "big"))
        buffer.write(data)

    def close(self) -> Segments:
        """Write the file (none when every segment is empty); where each segment is."""
        bounds = array.array("q", [0])
        if not any(self._buffers):
            bounds.extend([0] * len(self._buffers))
            return Segments(bounds)
        with open(self.path, "wb") as out:
            for buffer in self._buffers:
                if buffer is not None:
                    out.write(buffer.getbuffer())
                bounds.append(bounds[-1] + (0 if buffer is None else buffer.tell()))
        self._buffers = [None] * len(self._buffers)
        return Segments(bounds)


def read_segment(path: str | os.PathLike, offset: int, length: int) -> Iterator[Any]:
    """The frames of one segment, in the order they were added."""
    if not length:
        return
    zstd = _codec()[1]
    with open(path, "rb") as stream:
        stream.seek(offset)
        left = length
        while left > 0:
            size = int.from_bytes(stream.read(_LENGTH), "big")
            data = stream.read(size)
            if len(data) != size:
                at = offset + length - left
                raise OSError(f"shard {os.fspath(path)} ends inside the frame at byte {at}")
            left -= _LENGTH + size
            yield pickle.loads(_decompress(data, zstd))
