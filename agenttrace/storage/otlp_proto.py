"""Length-prefixed OTLP span files: the OpenTelemetry Collector ``file`` exporter's binary format.

What the Collector writes (opentelemetry-collector-contrib, ``exporter/fileexporter``):

* ``file_writer.go``, ``exportMessageAsBuffer``: every export is one *frame*, a 4-byte
  big-endian unsigned length (``binary.BigEndian.PutUint32(data, uint32(len(buf)))``) followed
  by that many bytes. ``buildExportFunc`` uses these frames for ``format: proto``, and also for
  ``format: json`` when ``compression`` is set; plain ``format: json`` writes one JSON document
  per line instead (:mod:`agenttrace.storage.otlp_json_files` reads those).
* ``marshaller.go`` / ``codec.go``: the frame's bytes are ``ptrace.ProtoMarshaler`` output (the
  wire form of ``ExportTraceServiceRequest``, which is the same as ``TracesData``) or
  ``ptrace.JSONMarshaler`` output, then, with ``compression: zstd``, one zstd frame of it
  (``zstdCompress``: ``encoder.EncodeAll``). The length counts the compressed bytes.
* With the alpha feature gate ``exporter.file.nativeCompression`` (Collector v0.154.0 on,
  ``compression_writer.go``) the *whole file* is a zstd stream instead (one zstd frame per
  write when rotating) and the payloads inside are not compressed one by one: decompressed, it
  holds length-prefixed frames for ``format: proto`` and JSON lines for ``format: json``.

This module reads all of these: a file that starts with the zstd magic is decompressed as a
stream first; each frame's payload is then sniffed: zstd (``28 B5 2F FD``) is decompressed, text
starting with ``{`` goes to the OTLP/JSON decoder (:mod:`agenttrace.storage.otlp_json_decode`),
anything else is parsed as a protobuf ``ExportTraceServiceRequest`` (:func:`_request_records`,
the one protobuf decoder). Spans become the same
:class:`~agenttrace.trajectory.records.SpanRecord` values the OTLP/JSON reader gives for the
same spans. Reading is frame by frame, so memory is bounded by the largest frame.

zstd needs the optional ``zstandard`` package (the ``zstd`` extra).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from functools import lru_cache
from json.encoder import encode_basestring_ascii as _quote
from pathlib import Path
from typing import Any, BinaryIO

from agenttrace._version import install_hint
from agenttrace.storage.errors import (
    ErrorHandler,
    ReadPosition,
    SpanDecodeError,
    SpanFormatError,
    error_kind,
    reason_of,
    warn,
)
from agenttrace.storage.otlp_enums import (
    FLAG_PARENT_IS_REMOTE,
    KIND_NAME,
    STATUS_NAME,
    is_sampled,
)
from agenttrace.storage.otlp_json_decode import decode_text
from agenttrace.storage.otlp_json_lines import iter_records, safe_lines
from agenttrace.storage.span_checks import check_values
from agenttrace.storage.span_paths import (
    MAX_FRAME_BYTES,
    ZSTD_MAGIC,
    Source,
    is_length_prefixed,
    resolve_span_paths,
    rotation_order,
)
from agenttrace.trajectory.records import SpanEvent, SpanLink, SpanRecord

__all__ = [
    "MAX_FRAME_BYTES",
    "ZSTD_MAGIC",
    "decode_proto",
    "is_length_prefixed",
    "read_otlp_proto",
]

_CHUNK = 1 << 20  # bytes read (or decompressed) at a time
_ZSTD_HINT = install_hint("zstd")
#: File suffixes a directory is always read for; other files only if their first bytes sniff
#: as length-prefixed (the Collector's ``path`` can be anything, ``./traces`` or ``x.json``).
_SUFFIXES = frozenset({".pb", ".proto", ".binpb", ".bin", ".otlp", ".zst", ".zstd"})
# (In rotation order: the Collector renames full files with a timestamp and keeps writing to
# ``path``; agenttrace counts up, spans.pb, spans-00001.pb: span_paths.rotation_order.)


# --------------------------------------------------------------------------------------------
# Payloads
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _request_type() -> Any:
    # Imported on first use: the generated protobuf modules cost import time nobody reading
    # JSON should pay. opentelemetry-proto comes with opentelemetry-exporter-otlp.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return ExportTraceServiceRequest


def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError:
        raise ImportError(
            "these spans are zstd-compressed (the Collector's `compression: zstd`); reading "
            "them needs the zstandard package: " + _ZSTD_HINT
        ) from None
    return zstandard


class _FrameError(Exception):
    """A whole payload that cannot be read (reported once, the frame skipped)."""

    kind: type[SpanFormatError] = SpanFormatError


class _FrameTooDeep(_FrameError):
    """A JSON payload nested past Python's recursion limit (a decode failure, not bad data)."""

    kind = SpanDecodeError


def _decompress(data: bytes | memoryview, limit: int) -> bytes:
    zstandard = _zstandard()
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as error:
        raise _FrameError("not a readable zstd frame: %s" % error) from None
    if size > limit:
        raise _FrameError("zstd payload would decompress to %d bytes, over the limit" % size)
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            while chunk := reader.read(_CHUNK):
                out += chunk
                if len(out) > limit:
                    raise _FrameError("zstd payload decompresses to more than %d bytes" % limit)
    except zstandard.ZstdError as error:
        raise _FrameError("corrupt zstd payload: %s" % error) from None
    if size >= 0 and len(out) < size:  # python-zstandard ends a cut frame without an error
        raise _FrameError("zstd payload is cut short (%d of %d bytes)" % (len(out), size))
    return bytes(out)


def _payload_records(
    payload: bytes | memoryview, report: ErrorHandler, limit: int
) -> list[SpanRecord]:
    """Records of one frame's payload; a bad span goes to ``report``, a bad payload raises
    :class:`_FrameError`."""
    data = bytes(payload)
    if data[:4] == ZSTD_MAGIC:
        data = _decompress(data, limit)
    # JSON starts with "{" (or blanks, but not "\n": 0x0A is protobuf's field 1, and a
    # ResourceSpans of 123 bytes would follow it with "{").
    if data[:1] == b"{" or (data[:1] in (b" ", b"\t", b"\r") and data.lstrip()[:1] == b"{"):
        try:
            records = decode_text(data, report)
        except ValueError as error:
            raise _FrameError("invalid JSON payload: %s" % error) from None
        except RecursionError:
            raise _FrameTooDeep("invalid JSON payload: nested too deeply") from None
        return check_values(records, report)
    request = _request_type()()
    try:
        request.ParseFromString(data)
    except Exception as error:  # google.protobuf.message.DecodeError and kin
        other = _other_signal(data)
        if other:
            return []
        raise _FrameError("not a protobuf ExportTraceServiceRequest: %s" % error) from None
    errors: list[SpanFormatError] = []
    records = _request_records(request, errors.append)
    if errors and not records and _other_signal(data):
        return []  # logs or metrics sharing the exporter: not ours to read, as in OTLP/JSON
    for error in errors:
        report(error)
    return check_values(records, report)


def _other_signal(data: bytes) -> str | None:
    """``"logs"`` or ``"metrics"`` when ``data`` is exactly such an export request.

    One Collector ``file`` exporter can serve several pipelines; their requests share the
    trace request's first field number, so they cannot be told apart by their first bytes.
    Only called when ``data`` did not read as spans; exact means: parses, holds records and has
    no field the other signal's schema does not know.
    """
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    for name, message_type, field, inner, leaf in (
        ("logs", ExportLogsServiceRequest, "resource_logs", "scope_logs", "log_records"),
        ("metrics", ExportMetricsServiceRequest, "resource_metrics", "scope_metrics", "metrics"),
    ):
        message = message_type()
        try:
            message.ParseFromString(data)
            size = message.ByteSize()
            message.DiscardUnknownFields()
            if message.ByteSize() != size:
                continue
        except Exception:
            continue
        if any(getattr(s, leaf) for r in getattr(message, field) for s in getattr(r, inner)):
            return name
    return None


def _value(value: Any) -> Any:
    """AnyValue -> the Python value the OTLP/JSON decoder gives for its JSON form."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "array_value":
        return tuple([_value(item) for item in value.array_value.values])
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return value.bytes_value
    return None  # an empty AnyValue: OTLP's "no value"


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        value = item.value
        which = value.WhichOneof("value")
        if which == "string_value":  # fast path for the common scalars
            out[item.key] = value.string_value
        elif which == "int_value":
            out[item.key] = value.int_value
        else:
            out[item.key] = _value(value)
    return out


def _id(raw: bytes, size: int, what: str) -> int:
    if len(raw) != size:
        raise SpanFormatError("%s must be %d bytes, got %d" % (what, size, len(raw)))
    return int.from_bytes(raw, "big")


def _span(span: Any, resource: dict[str, Any], scope_name: str, scope_version: str) -> SpanRecord:
    if not span.trace_id:
        raise SpanFormatError("no traceId")
    if not span.span_id:
        raise SpanFormatError("no spanId")
    trace_id = _id(span.trace_id, 16, "traceId")
    span_id = _id(span.span_id, 8, "spanId")
    if not trace_id or not span_id:
        raise SpanFormatError("all-zero traceId or spanId")
    parent = span.parent_span_id
    parent_id = _id(parent, 8, "parentSpanId") if parent else 0
    kind = KIND_NAME.get(span.kind)
    if kind is None:
        raise SpanFormatError("unknown kind %r" % (span.kind,))
    status = span.status
    status_code = STATUS_NAME.get(status.code)
    if status_code is None:
        raise SpanFormatError("unknown status code %r" % (status.code,))
    events = tuple(
        SpanEvent(event.name, event.time_unix_nano, _attributes(event.attributes))
        for event in span.events
    )
    links = tuple(
        SpanLink(
            _id(link.trace_id, 16, "link traceId"),
            _id(link.span_id, 8, "link spanId"),
            _attributes(link.attributes),
        )
        for link in span.links
    )
    flags = span.flags
    return SpanRecord(
        trace_id,
        span_id,
        parent_id,
        span.name,
        span.start_time_unix_nano,
        span.end_time_unix_nano or None,  # 0 for a span that has not ended
        _attributes(span.attributes),
        events,
        status_code,
        status.message or None,  # proto3 has no "absent" string: "" is what absent reads as
        kind,
        resource,
        scope_name,
        scope_version,
        links,
        bool(flags & FLAG_PARENT_IS_REMOTE),
        is_sampled(flags),
    )


def _request_records(request: Any, report: ErrorHandler) -> list[SpanRecord]:
    records: list[SpanRecord] = []
    index = 0  # span index within the request, counted across resources and scopes
    for block in request.resource_spans:
        try:
            resource = _attributes(block.resource.attributes)
        except Exception as error:  # RecursionError from absurd nesting, say
            skipped = sum(len(scope.spans) for scope in block.scope_spans)
            report(
                error_kind(error)(
                    "resource: %s; its %d span(s) skipped" % (reason_of(error), skipped),
                    skipped=skipped,
                )
            )
            index += skipped
            continue
        for scope_block in block.scope_spans:
            scope = scope_block.scope
            for span in scope_block.spans:
                try:
                    records.append(_span(span, resource, scope.name, scope.version))
                except Exception as error:  # one bad span spoils only itself
                    reason = reason_of(error)
                    if span.name:
                        reason = "%s (span %s)" % (reason, _quote(span.name))
                    report(error_kind(error)(reason, span=index))
                index += 1
    return records


def decode_proto(
    payload: bytes, on_error: ErrorHandler | None = None, *, max_bytes: int = MAX_FRAME_BYTES
) -> list[SpanRecord]:
    """Records of one frame's payload: a protobuf ``ExportTraceServiceRequest`` (or
    ``TracesData``), a zstd frame of one, or an OTLP/JSON document.

    A bad span, or a payload that cannot be read at all, goes to ``on_error`` (default: a
    :class:`~agenttrace.storage.errors.SpanFormatWarning`) and the rest is returned. Logs or
    metrics requests give ``[]``. zstd without the zstandard package raises ImportError.
    """
    report = on_error or warn
    try:
        return _payload_records(payload, report, max_bytes)
    except _FrameError as error:
        report(error.kind(str(error)))
        return []


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def _read_up_to(stream: BinaryIO, size: int) -> bytes:
    """``size`` bytes or fewer at the end; in chunks, so a corrupt length costs no memory."""
    if size <= _CHUNK:
        return stream.read(size)
    parts = []
    left = size
    while left:
        chunk = stream.read(min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _frames(
    stream: BinaryIO,
    name: str,
    report: ErrorHandler,
    limit: int,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    frames = 0
    offset = 0
    while True:
        prefix = _read_up_to(stream, 4)
        if not prefix:
            return
        if len(prefix) < 4:
            report(_truncated(name, frames, "a length prefix", offset, 4, len(prefix)))
            return
        length = int.from_bytes(prefix, "big")
        if length > limit:
            report(
                SpanFormatError(
                    "frame %d at byte %d claims %d bytes, over the %d-byte limit: not a "
                    "length-prefixed OTLP file or corrupt; the rest of the file is skipped"
                    % (frames + 1, offset, length, limit),
                    source=name,
                )
            )
            return
        payload = _read_up_to(stream, length)
        if len(payload) < length:
            what = "frame %d" % (frames + 1)
            report(_truncated(name, frames, what, offset + 4, length, len(payload)))
            return
        frames += 1

        def span_error(error: SpanFormatError, number: int = frames) -> None:
            report(error.located(name, number))

        try:
            records = _payload_records(payload, span_error, limit)
        except (_FrameError, ImportError) as error:  # ImportError: zstd without its package
            if isinstance(error, ImportError) and report is warn:
                raise  # (no handler given: the documented ImportError)
            text = "frame %d at byte %d skipped: %s" % (frames, offset, error)
            if isinstance(error, _FrameError):
                report(error.kind(text, source=name))
            else:  # (the frame number as the line, as for a span's error)
                report(SpanDecodeError(text, source=name, line=frames))
            records = []
        offset += 4 + length
        if position is not None:
            position.source, position.line = name, frames
        yield from records


def _truncated(
    name: str, frames: int, what: str, at: int, needed: int, got: int
) -> SpanFormatError:
    return SpanFormatError(
        "truncated after %d frames: %s at byte %d needs %d bytes, the file has %d more (the "
        "writer probably stopped mid-write); the frames before it are kept"
        % (frames, what, at, needed, got),
        source=name,
    )


def _read_file(
    path: Path,
    report: ErrorHandler,
    limit: int,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    name = str(path)
    with open(path, "rb") as raw:
        if raw.peek(4)[:4] != ZSTD_MAGIC:
            yield from _frames(raw, name, report, limit, position)
            return
        # Native compression: the whole file is a zstd stream of frames or JSON lines.
        try:
            zstandard = _zstandard()
        except ImportError as error:  # this file only: the others are still read
            if report is warn:
                raise  # (no handler given: the documented ImportError)
            report(SpanDecodeError("%s; file skipped" % error, source=name))
            return
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        stream = io.BufferedReader(_Decompressed(reader), _CHUNK)
        try:
            head = stream.peek(1)[:1]
            if head in (b"{", b" ", b"\t", b"\r", b"\n"):
                yield from iter_records(
                    safe_lines(stream, name, report, (Exception,)),  # zstandard.ZstdError
                    source=name,
                    on_error=report,
                    position=position,
                )
            else:
                yield from _frames(stream, name, report, limit, position)  # type: ignore[arg-type]
        except zstandard.ZstdError as error:
            report(SpanFormatError("zstd stream breaks off: %s" % error, source=name))


class _Decompressed(io.RawIOBase):
    """A zstd reader that hands over each piece as soon as it is decompressed.

    ``readinto`` of python-zstandard's reader fills the whole buffer, so an error in a later
    zstd frame would lose the good frames decompressed with it; ``readinto1`` returns at the
    first output (and empty only at the end).
    """

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._reader.readinto1(buffer)


def _sniff(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return is_length_prefixed(file.read(16))
    except OSError:
        return False


def _directory_files(folder: Path) -> list[Path]:
    found = []
    for path in folder.iterdir():
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix.lower() in _SUFFIXES or _sniff(path):
            found.append(path)
    return sorted(found, key=rotation_order)


def _resolve(source: Source) -> list[Path]:
    return resolve_span_paths(
        source,
        folder_files=_directory_files,
        order=rotation_order,
        kind="length-prefixed span files (%s, or any file that starts like one)"
        % ", ".join("*" + s for s in sorted(_SUFFIXES)),
    )


def read_otlp_proto(
    source: Source,
    *,
    on_error: ErrorHandler | None = None,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    """Stream the span records of the Collector ``file`` exporter's length-prefixed files.

    ``source`` is a file, a directory (its ``*.pb``, ``*.proto``, ``*.binpb``, ``*.bin``,
    ``*.otlp``, ``*.zst`` files and any other file that starts like a length-prefixed one, in
    rotation order: the Collector's timestamped backups oldest first, then the file it writes
    to), a glob, or a list of these. Frames are read one at a time. A bad span, a frame that
    cannot be read (skipped: its length says where the next one starts), a length over
    ``max_frame_bytes`` (the rest of that file is skipped) and a file cut off mid-frame (the
    frames before are kept) each go to ``on_error`` as one
    :class:`~agenttrace.storage.errors.SpanFormatError` naming the file; span errors carry
    the frame number as ``line``. Raises FileNotFoundError at once if nothing matches, and
    ImportError at the first zstd data if the zstandard package is missing, unless
    ``on_error`` is given: then that frame (or that whole zstd file) is skipped and reported
    to it as a :class:`~agenttrace.storage.errors.SpanDecodeError`, the rest still read.
    ``position`` (a ReadPosition) is kept at the file and frame of the records handed out last.
    """
    paths = _resolve(source)  # eagerly, so a wrong path fails here and not at first next()
    return _read_paths(paths, on_error or warn, max_frame_bytes, position)


def _read_paths(
    paths: list[Path],
    report: ErrorHandler,
    limit: int,
    position: ReadPosition | None = None,
) -> Iterator[SpanRecord]:
    for path in paths:
        yield from _read_file(path, report, limit, position)
