"""JSON Lines sink: one trajectory per line, appended, rotated by size.

Crash safety: each trajectory is one ``write`` of ``to_json() + "\\n"`` followed by a flush,
so a crash leaves at most one torn last line. Before appending to a file whose last byte is
not a newline (a torn line from an earlier crash), the sink writes a newline first, so the
torn text stays on its own line and never merges with the next record; the reader skips it.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import BinaryIO

from agenttrace.sinks.files import safe_filename
from agenttrace.trajectory.model import Trajectory

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


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
        basename: str = "trajectories",
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

    @property
    def paths(self) -> list[Path]:
        """The files this sink has written to, oldest first."""
        return list(self._paths)

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

    def _open(self) -> None:
        path = self.path_for(self._index)
        handle = open(path, "ab")  # noqa: SIM115 - kept open across writes, closed in close()
        try:
            size = handle.seek(0, os.SEEK_END)
            if size > 0 and not _ends_with_newline(path):
                # An earlier writer stopped mid-line: end that line so it stays apart.
                handle.write(b"\n")
                handle.flush()
                size += 1
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
        # backslashreplace turns a lone surrogate into its JSON escape (see utf8_safe).
        data = (trajectory.to_json() + "\n").encode("utf-8", "backslashreplace")
        if self._file is None:
            self._open()
        if self._size > 0 and self._size + len(data) > self.max_bytes:
            self._close_file()
            self._index += 1
            self._open()
        handle = self._file
        assert handle is not None
        try:
            handle.write(data)
            handle.flush()
        except BaseException:
            # The line may be half written: drop the handle so the next write reopens the
            # file and ends the torn line before appending.
            self._file = None
            with contextlib.suppress(OSError):
                handle.close()
            raise
        self._size += len(data)

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


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
