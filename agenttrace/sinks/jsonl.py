"""JSON Lines sink: one trajectory per line, appended, rotated by size.

Crash safety: each trajectory is one ``write`` of ``to_json() + "\\n"`` followed by a flush,
so a crash leaves at most one torn last line. Before appending to a file whose last byte is
not a newline (a torn line from a writer that died mid-write), the sink cuts the file back to
its last complete line, logging how many bytes it cut: a torn line is never left in the middle
of a file, and every complete line is kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from agenttrace.sinks.files import safe_filename
from agenttrace.sinks.names import TRAJECTORIES_BASENAME
from agenttrace.trajectory.model import Trajectory

DEFAULT_MAX_BYTES = 256 * 1024 * 1024

logger = logging.getLogger("agenttrace")


def check_basename(basename: str) -> str:
    """A sink's file stem must be a plain, safe name: it is used as given."""
    if not basename or safe_filename(basename) != basename:
        raise ValueError(
            f"basename {basename!r} is not a plain file name "
            "(use lower-case letters, digits, '.', '_' or '-'; no leading dot)"
        )
    return basename


class JsonlSink:
    """Appends trajectories to ``folder/<basename>.jsonl``, then ``<basename>-00001.jsonl``, ...

    A new file is started when adding a line would make the current one larger than
    ``max_bytes`` (a single larger line still gets a file of its own). A sink opened on a
    folder that already has these files continues the newest one.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        basename: str = TRAJECTORIES_BASENAME,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.folder = Path(folder)
        self.basename = check_basename(basename)
        self.max_bytes = int(max_bytes)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index = self._newest_index()
        self._file: BinaryIO | None = None
        self._size = 0
        self._paths: list[Path] = []
        self._closed = False
        #: Torn last lines cut from files before appending to them, and their bytes.
        self.torn_lines_cut = 0
        self.torn_bytes_cut = 0

    @property
    def paths(self) -> list[Path]:
        """The files this sink has written to, oldest first."""
        return list(self._paths)

    @property
    def position(self) -> tuple[int, int]:
        """``(file number, offset)``: where this sink's next line goes. Everything written
        after this call is in that file from that offset on, or in later-numbered files."""
        if self._file is not None:
            return self._index, self._size
        return self._index, complete_size(self.path_for(self._index))

    def path_for(self, index: int) -> Path:
        """File number ``index``: the plain name for 0, ``-00001`` style after that."""
        if index == 0:
            return self.folder / f"{self.basename}.jsonl"
        return self.folder / f"{self.basename}-{index:05d}.jsonl"

    def _newest_index(self) -> int:
        pattern = re.compile(re.escape(self.basename) + r"-(\d{5,})\.jsonl")
        numbers = [
            int(match.group(1))
            for entry in self.folder.iterdir()
            if (match := pattern.fullmatch(entry.name))
        ]
        return max(numbers, default=0)

    def resume(self) -> None:
        """Open the newest file now if it exists (cutting a torn last line), not at the first
        write: a writer taking over from one that died leaves no torn line behind."""
        if self._file is None and not self._closed and self.path_for(self._index).exists():
            self._open()

    def _open(self) -> None:
        path = self.path_for(self._index)
        handle = open(path, "ab")  # noqa: SIM115 - kept open across writes, closed in close()
        try:
            size = handle.seek(0, os.SEEK_END)
            cut = cut_torn_tail(handle, path, size)
            if cut:
                self.torn_lines_cut += 1
                self.torn_bytes_cut += cut
                size -= cut
        except BaseException:
            handle.close()
            raise
        self._file = handle
        self._size = size
        if path not in self._paths:
            self._paths.append(path)

    def _close_file(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            try:
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                handle.close()

    def write(self, trajectory: Trajectory) -> None:
        """Append one line; rotates first when the line would overflow the current file."""
        if self._closed:
            raise RuntimeError(f"JsonlSink({str(self.folder)!r}) is closed; cannot write")
        if type(trajectory.steps) is list:
            # backslashreplace turns a lone surrogate into its JSON escape (see utf8_safe).
            pieces: Iterable[bytes] = [
                (trajectory.to_json() + "\n").encode("utf-8", "backslashreplace")
            ]
            expected = len(pieces[0])  # type: ignore[index]
        else:  # steps held on disk (a long episode): written a piece at a time
            pieces = line_pieces(trajectory)
            expected = getattr(trajectory.steps, "nbytes", 0)
        if self._file is None:
            self._open()
        if self._size > 0 and self._size + expected > self.max_bytes:
            self._close_file()
            self._index += 1
            self._open()
        handle = self._file
        assert handle is not None
        written = 0
        try:
            for data in pieces:
                handle.write(data)
                written += len(data)
            handle.flush()
        except BaseException:
            # The line may be half written: drop the handle so the next write reopens the
            # file and cuts the torn line before appending.
            self._file = None
            with contextlib.suppress(OSError):
                handle.close()
            raise
        self._size += written

    def flush(self) -> None:
        """Push written lines to the disk (fsync)."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Flush and close the current file; later writes raise."""
        if self._closed:
            return
        self._closed = True
        self._close_file()

    def __repr__(self) -> str:
        return f"JsonlSink({str(self.folder)!r}, basename={self.basename!r})"


def line_pieces(trajectory: Trajectory) -> Iterator[bytes]:
    """The trajectory's JSONL line (newline included) in pieces of about a MiB each: a long
    episode's steps on disk are copied through, never held whole."""
    batch: list[str] = []
    size = 0
    for part in trajectory.json_parts():
        batch.append(part)
        size += len(part)
        if size >= 1 << 20:
            yield "".join(batch).encode("utf-8", "backslashreplace")
            batch, size = [], 0
    batch.append("\n")
    yield "".join(batch).encode("utf-8", "backslashreplace")


def complete_size(path: str | os.PathLike) -> int:
    """The size of ``path`` up to and including its last newline (0 if it does not exist):
    where a writer appending to it would start, once a torn last line is cut."""
    try:
        with open(path, "rb") as handle:
            return _last_line_end(handle, handle.seek(0, os.SEEK_END))
    except FileNotFoundError:
        return 0


def cut_torn_tail(handle: BinaryIO, path: str | os.PathLike, size: int) -> int:
    """Cut a torn last line (bytes after the last newline) from the file ``handle`` has open
    for appending; returns the bytes cut (0 when the file is empty or ends with a newline).

    A writer that dies mid-write leaves such a line; cutting it before appending means it is
    never left in the middle of the file. Each cut is logged.
    """
    if size == 0:
        return 0
    with open(path, "rb") as reader:
        end = _last_line_end(reader, size)
    cut = size - end
    if cut:
        handle.flush()
        os.ftruncate(handle.fileno(), end)
        handle.seek(0, os.SEEK_END)
        logger.warning(
            "agenttrace: %s ended with a torn line of %d byte(s) (a writer stopped mid-write); "
            "cut it before appending",
            path,
            cut,
        )
    return cut


_SCAN = 1 << 16


def _last_line_end(reader: BinaryIO, size: int) -> int:
    """The offset just after the last newline in the first ``size`` bytes (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - _SCAN)
        reader.seek(start)
        chunk = reader.read(end - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0
