"""Reading and writing stored spans: span files (OTLP/JSON, the Collector's protobuf), the query
APIs of Jaeger, Tempo and Phoenix, and the blob store of the export content policy.

Every reader gives the same neutral span records, which the one assembler
(:func:`agenttrace.assemble`) turns into trajectories.
"""

from agenttrace.storage.blobs import BlobNotFoundError, BlobStore, open_blob_store
from agenttrace.storage.content import restore_content
from agenttrace.storage.errors import (
    ReadPosition,
    SpanDecodeError,
    SpanFormatError,
    SpanFormatWarning,
)
from agenttrace.storage.http import BackendError
from agenttrace.storage.jaeger import JaegerReader, decode_v1
from agenttrace.storage.otlp_json_decode import decode_document, decode_line
from agenttrace.storage.otlp_json_encode import encode_lines
from agenttrace.storage.otlp_json_files import read_otlp_json
from agenttrace.storage.otlp_json_lines import iter_records
from agenttrace.storage.otlp_json_writer import OtlpJsonLinesWriter
from agenttrace.storage.otlp_proto import decode_proto, read_otlp_proto
from agenttrace.storage.phoenix import PhoenixReader
from agenttrace.storage.sources import SourceError, SourceOptions, SpanSource, open_source
from agenttrace.storage.span_paths import is_length_prefixed
from agenttrace.storage.tempo import TempoReader

__all__ = [
    "BackendError",
    "BlobNotFoundError",
    "BlobStore",
    "JaegerReader",
    "OtlpJsonLinesWriter",
    "PhoenixReader",
    "ReadPosition",
    "SourceError",
    "SourceOptions",
    "SpanDecodeError",
    "SpanFormatError",
    "SpanFormatWarning",
    "SpanSource",
    "TempoReader",
    "decode_document",
    "decode_line",
    "decode_proto",
    "decode_v1",
    "encode_lines",
    "is_length_prefixed",
    "iter_records",
    "open_blob_store",
    "open_source",
    "read_otlp_json",
    "read_otlp_proto",
    "restore_content",
]
