"""Which files a span source names, and what a file is.

Every reader of span files (:func:`~agenttrace.storage.otlp_json_files.read_otlp_json`,
:func:`~agenttrace.storage.otlp_proto.read_otlp_proto` and the ``--from`` sources of
``agenttrace export``) resolves its source with :func:`resolve_span_paths`, which reads each
file for what it holds, from its first bytes (:func:`sniff`):

* a **folder** gives its span files only: agenttrace's ``spans*.jsonl`` parts and the
  Collector ``file`` exporter's files (OTLP/JSON lines or length-prefixed protobuf, rotated,
  whatever their names). The trajectories, step tables, scores, chat rows and other outputs
  that share a run folder with them are left alone, without a word;
* a **glob** the same, over the files it matches;
* a **file** named directly is read as it is (a reader reports each line it cannot read).
  ``--from`` (:func:`agenttrace.storage.sources.span_files`) first refuses one that holds one
  of those outputs instead, in one line saying what it is and what reads it
  (:func:`not_spans_message`).

``agenttrace inspect`` uses :func:`sniff` too, to say what a file that holds no trajectory is.
:func:`is_length_prefixed` tells the Collector's length-prefixed files from text lines.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PathLike = str | os.PathLike[str]
Source = PathLike | Sequence[PathLike]

#: Bytes read to tell what a file is.
SNIFF_BYTES = 64 * 1024
#: agenttrace names its span files ``spans.jsonl``, ``spans-00001.jsonl``, ...
SPAN_FILE_PREFIX = "spans"

# What sniff() finds.
SPANS = "spans"  # OTLP/JSON lines (the first record is an OTLP export request)
SPANS_PROTO = "spans-proto"  # the Collector's length-prefixed protobuf (zstd too)
TRAJECTORIES = "trajectories"  # agenttrace trajectories (JSON lines or Parquet)
CHAT = "chat"  # rows of 'agenttrace export --format chat'
SCORES = "scores"  # score records (scores.jsonl, <name>.scores.jsonl)
TABLE = "table"  # a Parquet file of another kind (step tables, token rows, ...)
JSON = "json"  # JSON of another kind
TEXT = "text"  # text that is not JSON
BINARY = "binary"
EMPTY = "empty"
UNREADABLE = "unreadable"  # could not be opened or decompressed: the reader says why
UNSURE = "unsure"  # JSON whose first record could not be read whole (too long, too deep)

#: Kinds that are certainly not spans: a folder or glob leaves them out, --from refuses them.
NOT_SPANS = frozenset({TRAJECTORIES, CHAT, SCORES, TABLE, JSON})
#: The first keys of an OTLP/JSON document (logs and metrics may share a Collector's file).
_OTLP_KEYS = frozenset(
    {
        "resourceSpans",
        "resource_spans",
        "batches",  # Tempo before 2.6
        "resourceLogs",
        "resourceMetrics",
        "resourceProfiles",
        "resource_logs",
        "resource_metrics",
    }
)
_FIRST_KEY = re.compile(r'\A\s*\[?\s*\{\s*"([^"\\]{1,60})"\s*:')
_ANY_KEY = re.compile(r'"([^"\\]{1,60})"\s*:')
_GZIP_MAGIC = b"\x1f\x8b"
#: The first bytes of every zstd frame.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Frames (and decompressed payloads) larger than this are taken for corruption, not data.
MAX_FRAME_BYTES = 1 << 30
# The Collector's rotation (lumberjack, timberjack) renames full files with a timestamp
# (``spans-2024-05-01T10-00-00.000.pb``, timberjack may add a reason or put it last) and keeps
# writing to ``path``: backups are older than the file without a timestamp.
_BACKUP_TIME = re.compile(r"-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)(?:-[a-z]+)?")
# agenttrace's own rotation counts up instead: spans.jsonl, spans-00001.jsonl, ... (oldest first).
_COUNTER = re.compile(r"(.+?)-(\d+)((?:\.[A-Za-z0-9]+)*)")


def is_length_prefixed(head: bytes, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> bool:
    """Whether a file whose first bytes are ``head`` is for
    :func:`~agenttrace.storage.otlp_proto.read_otlp_proto` (the Collector's length-prefixed
    frames: a 4-byte big-endian length, then that many bytes).

    True for a zstd stream (the Collector's native compression) and for a plausible 4-byte
    big-endian length (not zero, at most ``max_frame_bytes``) whose payload starts like an
    export request: protobuf field 1 (``0x0A``), a zstd frame, or ``{``. OTLP/JSON lines,
    gzip and empty files give False. Pass at least 8 bytes (16 is plenty); never raises.
    """
    head = bytes(head[:64])
    if head[:4] == ZSTD_MAGIC:
        return True
    if head[:2] == _GZIP_MAGIC:
        return False
    position = 0
    while position + 4 < len(head):  # a length and at least one byte of its payload
        length = int.from_bytes(head[position : position + 4], "big")
        if length == 0:  # an empty export request: look at the next frame
            position += 4
            continue
        if length > max_frame_bytes:
            return False
        first = head[position + 4 : position + 8]
        return first[:1] in (b"\x0a", b"{") or ZSTD_MAGIC.startswith(first)
    return False


@dataclass(frozen=True)
class FileKind:
    """What :func:`sniff` found: ``kind`` (one of the constants above) and, for the kinds
    that are not spans, ``detail``: what the file looks like, in words."""

    kind: str
    detail: str = ""
    #: A Parquet file's columns (the first few), when they could be read.
    columns: tuple[str, ...] = ()

    @property
    def is_spans(self) -> bool:
        return self.kind in (SPANS, SPANS_PROTO)


def sniff(path: PathLike) -> FileKind:
    """What the file at ``path`` holds, from its first :data:`SNIFF_BYTES` (decompressed when
    it is gzip). Never raises: a file that cannot be read is :data:`UNREADABLE`."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
        if head[:2] == _GZIP_MAGIC:
            with gzip.open(path, "rb") as handle:
                head = handle.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        return FileKind(UNREADABLE, str(exc))
    return sniff_head(head, lambda: _parquet(path))


def sniff_head(head: bytes, parquet: Callable[[], FileKind] | None = None) -> FileKind:
    """What a file whose first (decompressed) bytes are ``head`` holds, as :func:`sniff`
    says; for files read through another filesystem (fsspec). ``parquet`` tells a Parquet
    file's kind from its schema (default: a table of unknown columns)."""
    if head.startswith(b"PAR1"):
        return parquet() if parquet is not None else FileKind(TABLE, "a Parquet file")
    if is_length_prefixed(head):
        return FileKind(SPANS_PROTO)
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if not text:
        return FileKind(EMPTY)
    first = text.split("\n", 1)[0]
    if text[0] not in "{[":
        if "\x00" in text[:512] or "\ufffd" in text[:512]:
            return FileKind(BINARY, "binary data, not JSON lines")
        return FileKind(TEXT, f"not JSON: it starts with {first[:40]!r}")
    match = _FIRST_KEY.match(text)
    if match and match.group(1) in _OTLP_KEYS:
        return FileKind(SPANS)
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):  # a line longer than the bytes read, a document over
        record = None  # several lines, or nesting past the stack: the keys are looked for
    if isinstance(record, list) and record:  # a .json file holding a list
        record = record[0]
    if record is not None and not isinstance(record, dict):
        return FileKind(JSON, f"JSON whose records are not objects (the first is {first[:40]!r})")
    keys = list(record) if record is not None else _ANY_KEY.findall(text)
    if _OTLP_KEYS.intersection(keys):
        return FileKind(SPANS)
    if not keys:
        return FileKind(TEXT, f"not JSON: it starts with {first[:40]!r}")
    found = _json_kind(record, keys)
    if record is None and found.kind == JSON:  # not sure: the first record was not read whole
        return FileKind(UNSURE, found.detail)
    return found


def _json_kind(record: dict[str, Any] | None, keys: list[str]) -> FileKind:
    from agenttrace.trajectory.model import SCHEMA, SCHEMA_NAME

    schema = record.get("schema") if record is not None else None
    if "schema" in keys and (record is None or str(schema).startswith(SCHEMA_NAME + "/")):
        return FileKind(TRAJECTORIES)
    if record is not None and record.get("type") == "score":
        return FileKind(SCORES)
    if "messages" in keys and ("reward" in keys or "return" in keys):
        return FileKind(CHAT)
    if schema is not None:
        return FileKind(JSON, f"JSON with the schema tag {schema!r}, not {SCHEMA!r}")
    return FileKind(
        JSON,
        f'JSON without the trajectory schema tag ("schema": "{SCHEMA}"); its first record '
        f"has the keys {', '.join(keys[:8])}",
    )


def _parquet(path: PathLike) -> FileKind:
    try:
        import pyarrow.parquet as pq

        keys = pq.read_schema(path).names
    except Exception:  # no pyarrow, or a damaged file
        return FileKind(TABLE, "a Parquet file")
    if "schema" in keys and "episode_id" in keys:
        return FileKind(TRAJECTORIES)
    if "messages" in keys:
        return FileKind(CHAT)
    if "type" in keys and "value" in keys and "episode_id" in keys:
        return FileKind(SCORES)
    columns = tuple(keys[:8])
    return FileKind(TABLE, f"a Parquet file (its columns: {', '.join(columns)})", columns)


#: What each kind of file that is not spans is, and what reads it (not_spans_message).
_WHAT_READS = {
    TRAJECTORIES: "a trajectories file (episodes agenttrace already rebuilt), not spans: "
    "read it with: agenttrace inspect {path} (in Python: load_trajectories)",
    CHAT: "an export in chat format (one row per model call), not spans",
    SCORES: "a scores file (late scores, which loaders merge with the trajectories beside "
    "it), not spans",
    TABLE: "{detail}, not spans (span files are OTLP/JSON lines or the Collector's protobuf)",
    JSON: "{detail}, not OTLP spans (no resourceSpans)",
}


def not_spans_message(path: PathLike, found: FileKind) -> str:
    """``PATH is ...``: one line saying what a file that is not spans is, and what reads it."""
    what = _WHAT_READS[found.kind].format(path=shlex.quote(os.fspath(path)), detail=found.detail)
    return f"{os.fspath(path)} is {what}"


def rotation_order(path: Path) -> tuple[str, str, int, str, int]:
    """Sort key of rotated span files: each series' timestamped backups (the Collector's,
    oldest first), then its file without one, then agenttrace-style counters (``-00001``)."""
    name = path.name
    match = _BACKUP_TIME.search(name)
    if match:
        series = name[: match.start()] + name[match.end() :]
        return (str(path.parent), series, 0, match.group(1), 0)
    match = _COUNTER.fullmatch(name)
    if match:
        return (str(path.parent), match.group(1) + match.group(3), 1, "", int(match.group(2)))
    return (str(path.parent), name, 1, "", -1)


def in_folder(path: Path, found: FileKind) -> bool:
    """Whether a folder's (or a glob's) file is read as spans: span files (by content), files
    that cannot be opened (the reader says why), and agenttrace's own ``spans*`` parts even
    when their start is damaged. Never an output of another kind, or an empty file."""
    if found.is_spans or found.kind == UNREADABLE:
        return True
    return path.name.startswith(SPAN_FILE_PREFIX) and found.kind in (TEXT, BINARY, UNSURE)


def resolve_span_paths(
    source: Source,
    *,
    folder_files: Callable[[Path], list[Path]],
    order: Callable[[Path], Any] = rotation_order,
    kind: str,
) -> list[Path]:
    """The span files ``source`` names: a file, a folder (those of ``folder_files`` of it that
    hold spans), a glob (the same), or a list of these, each file once, in rotation ``order``.
    ``kind`` names the files in the errors; FileNotFoundError when there are none. A file
    named directly is returned as it is, whatever it holds."""
    if isinstance(source, (list, tuple)):
        paths: dict[Path, None] = {}  # ordered, each file once
        for item in source:
            paths.update(
                dict.fromkeys(
                    resolve_span_paths(item, folder_files=folder_files, order=order, kind=kind)
                )
            )
        return list(paths)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError("span source must be a path, a glob or a list of them, got %r" % source)
    path = Path(source)
    if path.is_dir():
        candidates = folder_files(path)
        files = [p for p in candidates if in_folder(p, sniff(p))]
        if not files:
            raise FileNotFoundError(_no_span_files(path, kind, candidates))
        return files
    if path.is_file():
        return [path]
    if isinstance(source, str) and any(c in source for c in "*?["):
        import glob

        found: dict[Path, None] = {}
        passed = 0  # files matched (or in folders matched) that hold something else
        for match in sorted(glob.glob(source, recursive=True)):
            if os.path.isdir(match):
                files = [p for p in folder_files(Path(match)) if in_folder(p, sniff(p))]
            else:
                files = [Path(match)] if sniff(match).kind not in NOT_SPANS else []
                passed += not files
            found.update(dict.fromkeys(files))
        if not found:
            verb = "is" if passed == 1 else "are"
            left = f" (it matches {_count(passed, 'file')} that {verb} not spans)" if passed else ""
            raise FileNotFoundError("no span files match %r%s" % (source, left))
        return sorted(found, key=order)
    raise FileNotFoundError("no such span file or folder: %s" % os.fspath(source))


def _no_span_files(folder: Path, kind: str, candidates: list[Path]) -> str:
    """Why a folder gave no span file: what it holds instead, or where span files are."""
    message = "no %s in folder %s" % (kind, folder)
    others = [p for p in candidates if sniff(p).kind == TRAJECTORIES]
    if others:
        message += " (%s is a trajectories file: 'agenttrace inspect' reads it)" % others[0].name
    elif next(folder.glob("*/%s*" % SPAN_FILE_PREFIX), None) is not None:
        message += "; its subfolders are not searched: name them, e.g. '%s'" % (
            os.path.join(folder, "*", SPAN_FILE_PREFIX + "*")
        )
    return message


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def all_files(folder: Path) -> list[Path]:
    """Every regular file in ``folder`` but hidden ones (``--from`` folders: the kind of each
    is told by its content), in rotation order."""
    try:
        files = [p for p in folder.iterdir() if not p.name.startswith(".") and p.is_file()]
    except OSError:
        return []
    return sorted(files, key=rotation_order)
