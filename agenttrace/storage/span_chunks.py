"""Span files cut into pieces that separate processes read: the parallel reading of
``agenttrace export --engine ray``.

A source is what ``--from`` takes for files (a path, a folder or a glob) or an fsspec URL
(``file://``, ``s3://``, ``gs://`` ..., with that filesystem's package installed). Its files
are found as :func:`agenttrace.storage.sources.span_files` finds them (a folder gives its span
files only, told by their first bytes, in rotation order) and cut into :class:`SpanChunk` s:

* an OTLP/JSON lines file, into byte ranges of ``chunk_bytes``. A range holds the lines that
  *start* in it, so every line is read once, whole, by one chunk;
* any other file (gzip, the Collector's protobuf or zstd, one pretty-printed document) is one
  chunk, read by the reader of whole files.

:class:`ChunkReader` gives a range's lines as they are (for the caller to decode with
:func:`~agenttrace.storage.otlp_json_lines.line_records`, here or elsewhere) and a whole file's
records a line (frame, document) at a time. Lines are numbered from 1 within the chunk: the
number of a line in its file is known once the chunks before it have counted theirs
(``lines``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from agenttrace._version import install_hint
from agenttrace.storage.errors import ErrorHandler, ReadPosition, SpanFormatError
from agenttrace.storage.sources import SourceError, read_span_file, span_files
from agenttrace.storage.span_paths import (
    NOT_SPANS,
    SNIFF_BYTES,
    UNREADABLE,
    ZSTD_MAGIC,
    FileKind,
    in_folder,
    is_length_prefixed,
    not_spans_message,
    rotation_order,
    sniff_head,
)
from agenttrace.trajectory.records import SpanRecord

#: Bytes of a span file one read task takes (``--chunk-bytes``).
CHUNK_BYTES = 64 * 1024 * 1024
_READ_BUFFER = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"

__all__ = ["CHUNK_BYTES", "ChunkReader", "SpanChunk", "is_url", "plan_chunks"]


@dataclass(frozen=True)
class SpanChunk:
    """A piece of a span file: bytes ``start`` to ``end``, or the whole file (``end`` None)."""

    index: int  # in reading order over the whole source
    url: str  # a local path or an fsspec URL
    name: str  # the file, as messages name it
    file_index: int
    start: int = 0
    end: int | None = None


def is_url(text: str) -> bool:
    """Whether ``--from`` names files through fsspec (``PROTOCOL://...``)."""
    return "://" in text


def plan_chunks(text: str, chunk_bytes: int = CHUNK_BYTES) -> tuple[str, list[SpanChunk]]:
    """(description, chunks) of the span files ``text`` names, in reading order.

    Raises FileNotFoundError when it names none, SourceError for a file named directly that
    holds something else (trajectories, say), ImportError without fsspec for a URL.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk size must be at least 1 byte, got {chunk_bytes}")
    if is_url(text):
        fs, root = _filesystem(text)
        files = [fs.unstrip_protocol(path) for path in _remote_files(fs, root, text)]
    else:
        files = [str(path) for path in span_files(text)]
    chunks: list[SpanChunk] = []
    for number, url in enumerate(files):
        with _open(url) as stream:
            head = stream.read(SNIFF_BYTES)
            size = stream.seek(0, os.SEEK_END)
        if not _cuttable(head, url):
            chunks.append(SpanChunk(len(chunks), url, url, number))
            continue
        for start in range(0, size, chunk_bytes):
            end = min(size, start + chunk_bytes)
            chunks.append(SpanChunk(len(chunks), url, url, number, start, end))
    count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    return f"{text} ({count})", chunks


class ChunkReader:
    """What one chunk holds, a line at a time, as ``(line, item)``, the line numbered within
    the chunk: for a range, each line's bytes as they are (``item`` is bytes); for a whole
    file, each line's (frame's, document's) records (``item`` is a list). Problems of a whole
    file go to ``report``, located at the file and line; ``lines`` is the chunk's count of
    lines once read."""

    def __init__(self, chunk: SpanChunk, report: ErrorHandler) -> None:
        self.chunk = chunk
        self.report = report
        self.lines = 0

    def __iter__(self) -> Iterator[tuple[int, bytes | list[SpanRecord]]]:
        if self.chunk.end is None:
            return self._whole()
        return self._range()

    def _range(self) -> Iterator[tuple[int, bytes | list[SpanRecord]]]:
        chunk = self.chunk
        assert chunk.end is not None
        with _open(chunk.url) as stream:
            at = chunk.start
            if at:  # the line running across the start belongs to the chunk before
                stream.seek(at - 1)
                at += len(stream.readline()) - 1
            while at < chunk.end:
                line = stream.readline()
                if not line:
                    break
                at += len(line)
                self.lines += 1
                yield self.lines, line

    def _whole(self) -> Iterator[tuple[int, bytes | list[SpanRecord]]]:
        chunk = self.chunk
        with _local_copy(chunk.url) as path:
            report = self.report
            if str(path) != chunk.name:  # (a copy: its problems are named at the URL)
                report = _renamed(self.report, str(path), chunk.name)
            position = ReadPosition()
            line, batch = 0, []
            for record in read_span_file(path, report, position):
                if position.line != line and batch:
                    yield line, batch
                    batch = []
                line = position.line or 0
                batch.append(record)
            if batch:
                yield line, batch
            self.lines = position.line or 0


def _renamed(report: ErrorHandler, old: str, new: str) -> ErrorHandler:
    def located(error: SpanFormatError) -> None:
        report(error.located(new, error.line) if error.source == old else error)

    return located


def _cuttable(head: bytes, name: str) -> bool:
    """Whether a file is OTLP/JSON lines that can be read from any line on: not compressed,
    not length-prefixed, not one pretty-printed document (as read_otlp_json tells them)."""
    if name.lower().endswith(".gz") or head[:2] == _GZIP_MAGIC or head[:4] == ZSTD_MAGIC:
        return False
    if is_length_prefixed(head):
        return False
    return head.split(b"\n", 1)[0].strip() not in (b"{", b"[")


# --- files through fsspec ---------------------------------------------------------------------


def _filesystem(text: str) -> tuple[Any, str]:
    try:
        import fsspec.core
    except ImportError as exc:
        raise ImportError(
            f"reading span files from {text!r} needs fsspec: {install_hint('ray')}"
        ) from exc
    return fsspec.core.url_to_fs(text)


def _open(url: str) -> IO[bytes]:
    if is_url(url):
        import fsspec

        return fsspec.open(url, "rb", block_size=_READ_BUFFER * 8).open()
    return open(url, "rb", buffering=_READ_BUFFER)  # (the caller closes it)


@contextlib.contextmanager
def _local_copy(url: str) -> Iterator[Path]:
    """The local path of a file: its own, or a temporary copy of a remote one."""
    if not is_url(url):
        yield Path(url)
        return
    fs, path = _filesystem(url)
    if getattr(fs, "local_file", False):  # (a local filesystem: no copy needed)
        yield Path(path)
        return
    folder = tempfile.mkdtemp(prefix="agenttrace-span-file-")
    try:
        copy = Path(folder) / PurePosixPath(path).name
        fs.get_file(path, str(copy))
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _remote_files(fs: Any, root: str, text: str) -> list[str]:
    """The span files an fsspec path names, found as span_files finds local ones."""
    if any(char in root for char in "*?["):
        found: dict[str, None] = {}
        for match in sorted(fs.glob(root)):
            if fs.isdir(match):
                found.update(dict.fromkeys(_remote_folder(fs, match)))
            elif _remote_kind(fs, match).kind not in NOT_SPANS:
                found[match] = None
        if not found:
            raise FileNotFoundError(f"no span files match {text!r}")
        return sorted(found, key=_order)
    if fs.isdir(root):
        files = _remote_folder(fs, root)
        if not files:
            raise FileNotFoundError(f"no span files in folder {text}")
        return files
    if fs.isfile(root):
        kind = _remote_kind(fs, root)
        if kind.kind in NOT_SPANS:
            raise SourceError(not_spans_message(text, kind))
        return [root]
    raise FileNotFoundError(f"no such span file or folder: {text}")


def _remote_folder(fs: Any, folder: str) -> list[str]:
    names = [
        entry["name"]
        for entry in fs.ls(folder, detail=True)
        if entry.get("type") == "file" and not PurePosixPath(entry["name"]).name.startswith(".")
    ]
    kept = [n for n in names if in_folder(PurePosixPath(n), _remote_kind(fs, n))]  # type: ignore[arg-type]
    return sorted(kept, key=_order)


def _order(name: str) -> tuple:
    return rotation_order(PurePosixPath(name))  # type: ignore[arg-type]


def _remote_kind(fs: Any, path: str) -> FileKind:
    """What a file holds, from its first bytes (decompressed when it is gzip), as sniff."""
    try:
        with fs.open(path, "rb") as stream:
            head = stream.read(SNIFF_BYTES)
        if head[:2] == _GZIP_MAGIC:
            head = zlib.decompressobj(wbits=31).decompress(head, SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        return FileKind(UNREADABLE, str(exc))
    return sniff_head(head)
