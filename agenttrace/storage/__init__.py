"""Reading and writing stored spans: OTLP/JSON files, and the query APIs of Jaeger and Tempo.

Every reader gives the same neutral span records, which the one assembler
(:func:`agenttrace.assemble`) turns into trajectories.
"""

from agenttrace.storage.http import BackendError
from agenttrace.storage.jaeger import JaegerReader, decode_v1
from agenttrace.storage.otlp_json import (
    OtlpJsonLinesWriter,
    SpanFormatError,
    SpanFormatWarning,
    decode_document,
    decode_line,
    encode_lines,
    iter_records,
    read_otlp_json,
)
from agenttrace.storage.tempo import TempoReader

__all__ = [
    "BackendError",
    "JaegerReader",
    "OtlpJsonLinesWriter",
    "SpanFormatError",
    "SpanFormatWarning",
    "TempoReader",
    "decode_document",
    "decode_line",
    "decode_v1",
    "encode_lines",
    "iter_records",
    "read_otlp_json",
]
