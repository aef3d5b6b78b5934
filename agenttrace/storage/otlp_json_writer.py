"""Writing span files: batches of span records appended to ``spans.jsonl`` as OTLP/JSON lines
(:mod:`agenttrace.storage.otlp_json_encode`), rotated by size, a torn last line cut before
appending.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path

from agenttrace.storage.otlp_json_encode import encode_lines
from agenttrace.storage.span_paths import PathLike
from agenttrace.trajectory.records import SpanRecord

__all__ = ["OtlpJsonLinesWriter"]


def _cut_torn_tail(file: io.BufferedWriter, path: Path, size: int) -> int:
    """Cut the bytes after the last newline of the file ``file`` appends to (a line torn by a
    writer that died mid-write); returns how many were cut, and logs it when any were."""
    if not size:
        return 0
    end = size
    with open(path, "rb") as check:
        while end > 0:  # back to the last newline, 64 KiB at a time
            start = max(0, end - (1 << 16))
            check.seek(start)
            newline = check.read(end - start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
    cut = size - end
    if cut:
        import logging

        file.flush()
        os.ftruncate(file.fileno(), end)
        file.seek(0, os.SEEK_END)
        logging.getLogger("agenttrace").warning(
            "agenttrace: %s ended with a torn line of %d byte(s) (a writer stopped mid-write); "
            "cut it before appending",
            path,
            cut,
        )
    return cut


class OtlpJsonLinesWriter:
    """Append batches of records to ``spans.jsonl`` as OTLP/JSON lines, rotating by size.

    ``path_or_folder`` is a folder (created if needed; files are ``<basename>.jsonl``, then
    ``<basename>-00001.jsonl``, ``-00002`` ... once each reaches ``max_bytes``) or a file path
    ending in a suffix such as ``.jsonl`` (rotated names derive from it). Files are never
    renamed, so a reader may follow them while they grow. Each batch is one line, written with
    one write and flushed, so a crash can tear at most the last line; before appending to a
    file whose last byte is not a newline, the writer cuts that torn line (logging the bytes
    cut, counted in ``torn_lines_cut`` / ``torn_bytes_cut``), so a torn line never ends up in
    the middle of a file. Restarting resumes the newest file. Thread-safe; independent of the
    OpenTelemetry SDK.
    """

    def __init__(
        self,
        path_or_folder: PathLike,
        *,
        basename: str = "spans",
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive, got %r" % max_bytes)
        path = Path(path_or_folder)
        if path.is_dir() or (not path.exists() and not path.suffix):
            self._folder, self._stem, self._suffix = path, basename, ".jsonl"
        else:
            if path.suffix.lower() == ".gz":
                raise ValueError("OtlpJsonLinesWriter writes plain text; gzip files afterwards")
            self._folder, self._stem, self._suffix = path.parent, path.stem, path.suffix
        self._folder.mkdir(parents=True, exist_ok=True)
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._paths: list[Path] = []
        self._file: io.BufferedWriter | None = None
        self._size = 0
        self.torn_lines_cut = 0
        self.torn_bytes_cut = 0
        self._index = self._newest_index()
        self._open()

    def path_for(self, index: int) -> Path:
        """File number ``index`` of the series (0 is the plain name)."""
        return self._path(index)

    @property
    def position(self) -> tuple[int, int]:
        """``(file number, offset)``: where the next batch goes. Everything written after this
        call is in that file from that offset on, or in later-numbered files."""
        with self._lock:
            return self._index, self._size

    def _path(self, index: int) -> Path:
        if index == 0:
            return self._folder / (self._stem + self._suffix)
        return self._folder / ("%s-%05d%s" % (self._stem, index, self._suffix))

    def _newest_index(self) -> int:
        pattern = re.compile(re.escape(self._stem) + r"-(\d+)" + re.escape(self._suffix))
        numbers = [
            int(m.group(1)) for p in self._folder.iterdir() if (m := pattern.fullmatch(p.name))
        ]
        return max(numbers, default=0)

    def _open(self) -> None:
        path = self._path(self._index)
        file = open(path, "ab")  # noqa: SIM115 - kept open across writes, closed in close()
        try:
            size = file.tell()
            cut = _cut_torn_tail(file, path, size)  # the previous writer died mid-line
        except BaseException:
            file.close()
            raise
        if cut:
            self.torn_lines_cut += 1
            self.torn_bytes_cut += cut
            size -= cut
        self._file, self._size = file, size
        self._paths.append(path)
        if size >= self._max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._index += 1
        self._open()

    @property
    def paths(self) -> list[Path]:
        """The files this writer has written to (or opened to append), oldest first."""
        return list(self._paths)

    @property
    def path(self) -> Path:
        """The file the next batch goes to (unless it rotates first)."""
        return self._paths[-1]

    def write(self, records: Iterable[SpanRecord]) -> int:
        """Append ``records`` as one line; returns the bytes written (0 for no records)."""
        records = records if isinstance(records, (list, tuple)) else list(records)
        if not records:
            return 0
        data = (encode_lines(records) + "\n").encode("utf-8")
        with self._lock:
            if self._file is None:
                raise ValueError("OtlpJsonLinesWriter is closed")
            if self._size and self._size + len(data) > self._max_bytes:
                self._rotate()
            self._file.write(data)
            self._file.flush()
            self._size += len(data)
        return len(data)

    def flush(self) -> None:
        """Push everything written to the operating system (each write already does)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        """Flush and close; later writes raise. Safe to call twice."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> OtlpJsonLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
