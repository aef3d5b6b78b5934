"""One ``--from`` string -> the reader for it: span files or a trace backend.

``agenttrace export`` (and anyone scripting the same) names where spans are with one string:

===========================================  ==================================================
``spans/`` ``spans.jsonl`` ``'run*/spans*'``  span files: OTLP/JSON lines (gzip too) or the
                                             Collector's length-prefixed protobuf, told apart
                                             by their first bytes; a folder gives its span
                                             files only (storage.span_paths)
``jaeger+http://host:16686``                  Jaeger query API v3 (``?api=v1`` for the old one)
``tempo+http://host:3200``                    Tempo (TraceQL search, then each trace)
``phoenix+http://host:6006/PROJECT``          Phoenix project ``PROJECT``
===========================================  ==================================================

``+https`` works for each backend. Service and time window are passed down to the backend's
search, so only matching traces are fetched; files are read whole and filtered afterwards.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agenttrace.storage.errors import ErrorHandler, ReadPosition, warn
from agenttrace.storage.otlp_json_files import read_otlp_json
from agenttrace.storage.otlp_proto import read_otlp_proto
from agenttrace.storage.span_checks import check_values
from agenttrace.storage.span_paths import (
    NOT_SPANS,
    all_files,
    is_length_prefixed,
    not_spans_message,
    resolve_span_paths,
    sniff,
)
from agenttrace.trajectory.records import SpanRecord

BACKEND_SCHEMES = ("jaeger", "tempo", "phoenix")


class SourceError(ValueError):
    """A ``--from`` string that names no readable source (the message shows the forms)."""


@dataclass
class SourceOptions:
    """What narrows a search, and how to reach a backend (files use only ``on_error``)."""

    service: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    token: str | None = None
    timeout: float = 30.0
    limit: int = 1000  # traces per backend search
    query: str | None = None  # Tempo: TraceQL instead of the default episode query
    on_error: ErrorHandler = warn
    #: Kept at the file and line (frame) of the records handed out last (backends: the source).
    position: ReadPosition | None = None


@dataclass
class SpanSource:
    """A resolved source: what to call it in messages, and its records (read lazily)."""

    description: str
    open: Callable[[], Iterator[SpanRecord]]
    #: Files it reads (empty for backends), for progress and the summary.
    files: list[Path] = field(default_factory=list)

    def records(self) -> Iterator[SpanRecord]:
        return self.open()


def open_source(text: str, options: SourceOptions | None = None) -> SpanSource:
    """The source ``text`` names; raises SourceError (bad form) or FileNotFoundError."""
    options = options or SourceOptions()
    scheme, plus, rest = text.partition("+")
    if plus and scheme.lower() in BACKEND_SCHEMES:
        return _backend(scheme.lower(), rest, options)
    if "://" in text and not text.lower().startswith("file://"):
        raise SourceError(
            f"unknown source {text!r}: use a path or glob of span files, "
            "jaeger+http://HOST:16686, tempo+http://HOST:3200 or "
            "phoenix+http://HOST:6006/PROJECT"
        )
    if text.lower().startswith("file://"):
        text = urllib.parse.unquote(urllib.parse.urlsplit(text).path)
    return _files(text, options)


def span_files(text: str) -> list[Path]:
    """The span files a path, folder or glob names, in rotation order (FileNotFoundError if
    none; SourceError for a file that holds something else, such as trajectories).

    A folder gives the files in it that hold spans, whatever their names: agenttrace's
    ``spans*.jsonl`` parts, the Collector's OTLP/JSON lines and length-prefixed protobuf
    (gzip, zstd, rotated); never the trajectories, step tables, scores or other outputs
    beside them (:mod:`agenttrace.storage.span_paths`). A file named directly that holds one
    of those is refused in one line saying what it is (SourceError).
    """
    if Path(text).is_file():
        found = sniff(text)
        if found.kind in NOT_SPANS:
            raise SourceError(not_spans_message(text, found))
    return resolve_span_paths(text, folder_files=all_files, kind="span files")


def _files(text: str, options: SourceOptions) -> SpanSource:
    paths = span_files(text)
    report = options.on_error
    position = options.position

    def records() -> Iterator[SpanRecord]:
        for path in paths:
            yield from read_span_file(path, report, position)

    count = f"{len(paths)} file{'s' if len(paths) != 1 else ''}"
    return SpanSource(f"{text} ({count})", records, files=list(paths))


def read_span_file(
    path: Path, report: ErrorHandler, position: ReadPosition | None = None
) -> Iterator[SpanRecord]:
    """The records of one span file, by its reader: the Collector's length-prefixed protobuf
    (zstd too) or OTLP/JSON lines (gzip too), told apart by the first bytes."""
    with open(path, "rb") as stream:
        head = stream.read(16)
    if is_length_prefixed(head):
        return read_otlp_proto(path, on_error=report, position=position)
    return read_otlp_json(path, on_error=report, position=position)


def _backend(scheme: str, url: str, options: SourceOptions) -> SpanSource:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SourceError(
            f"{scheme}+{url!r}: expected {scheme}+http://HOST:PORT (or +https)"
            + ("/PROJECT" if scheme == "phoenix" else "")
        )
    params = dict(urllib.parse.parse_qsl(parts.query))
    path = parts.path.rstrip("/")
    common: dict[str, Any] = {
        "headers": options.headers,
        "token": options.token,
        "timeout": options.timeout,
        "on_error": options.on_error,
    }
    if scheme == "phoenix":
        prefix, _, project = path.rpartition("/")
        if not project:
            raise SourceError(
                f"phoenix+{url!r} names no project: use phoenix+http://HOST:6006/PROJECT"
            )
        from agenttrace.storage.phoenix import PhoenixReader

        base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, prefix, "", ""))
        reader: Any = PhoenixReader(
            base,
            urllib.parse.unquote(project),
            start=options.start,
            end=options.end,
            **common,
        )
        return _checked(f"Phoenix project {project!r} at {base}", reader.records, options)
    base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    if scheme == "jaeger":
        from agenttrace.storage.jaeger import JaegerReader

        api = params.get("api", "v3")
        if api not in ("v3", "v1"):
            raise SourceError(f"jaeger source: api must be v3 or v1, got {api!r}")
        if not options.service:
            raise SourceError("reading from Jaeger needs --service (Jaeger searches by service)")
        reader = JaegerReader(
            base,
            api=api,
            service=options.service,
            start=options.start,
            end=options.end,
            limit=options.limit,
            **common,
        )
        description = f"Jaeger ({api}) at {base}, service {options.service!r}"
        return _checked(description, reader.records, options)
    from agenttrace.storage.tempo import TempoReader

    reader = TempoReader(
        base,
        query=options.query,
        service=options.service,
        start=options.start,
        end=options.end,
        limit=options.limit,
        **common,
    )
    return _checked(f"Tempo at {base}, query {reader.query}", reader.records, options)


def _checked(
    description: str, read: Callable[[], Iterator[SpanRecord]], options: SourceOptions
) -> SpanSource:
    """A backend's source, its records' rl.* values checked (storage.span_checks) and each
    problem reported as the backend's."""
    report, position = options.on_error, options.position

    def records() -> Iterator[SpanRecord]:
        if position is not None:
            position.source, position.line = description, None
        for record in read():
            yield check_values([record], report, description)[0]

    return SpanSource(description, records)


def is_backend(text: str) -> bool:
    scheme, plus, _ = text.partition("+")
    return bool(plus) and scheme.lower() in BACKEND_SCHEMES
