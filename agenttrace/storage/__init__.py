"""Reading and writing stored spans (OTLP/JSON files today)."""

from agenttrace.storage.otlp_json import (
    OtlpJsonLinesWriter,
    SpanFormatError,
    SpanFormatWarning,
    decode_line,
    encode_lines,
    iter_records,
    read_otlp_json,
)

__all__ = [
    "OtlpJsonLinesWriter",
    "SpanFormatError",
    "SpanFormatWarning",
    "decode_line",
    "encode_lines",
    "iter_records",
    "read_otlp_json",
]
