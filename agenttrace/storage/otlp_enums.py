"""OTLP's enums and flag bits, as both span encodings spell them.

The OTLP/JSON encoder writes span kinds and status codes as these numbers; the OTLP/JSON and
OTLP/protobuf decoders read them (and JSON's enum names) back into the names a
:class:`~agenttrace.trajectory.records.SpanRecord` holds. A span's ``flags`` carry whether
its parent is remote and the W3C trace flags.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FLAG_PARENT_IS_REMOTE",
    "FLAGS_REMOTE_PARENT",
    "KIND_CODE",
    "KIND_NAME",
    "STATUS_CODE",
    "STATUS_NAME",
    "is_sampled",
]

#: Span kind name -> its number on the wire.
KIND_CODE = {"UNSPECIFIED": 0, "INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4,
             "CONSUMER": 5}  # fmt: skip
#: Status code name -> its number on the wire.
STATUS_CODE = {"UNSET": 0, "OK": 1, "ERROR": 2}

#: A span kind as read (number, name, or the enum's full name) -> the record's name. An
#: unspecified kind is INTERNAL, which is what the SDK assumes when none is given.
KIND_NAME: dict[Any, str] = {}
for _name, _code in KIND_CODE.items():
    KIND_NAME[_code] = _name
    KIND_NAME[_name] = _name
    KIND_NAME["SPAN_KIND_" + _name] = _name
for _key in (0, "UNSPECIFIED", "SPAN_KIND_UNSPECIFIED"):
    KIND_NAME[_key] = "INTERNAL"
#: A status code as read (number, name, or the enum's full name) -> the record's name.
STATUS_NAME: dict[Any, str] = {}
for _name, _code in STATUS_CODE.items():
    STATUS_NAME[_code] = _name
    STATUS_NAME[_name] = _name
    STATUS_NAME["STATUS_CODE_" + _name] = _name
del _name, _code, _key

#: SPAN_FLAGS_CONTEXT_IS_REMOTE: the span's parent came from another process.
FLAG_PARENT_IS_REMOTE = 0x200
#: What the encoder writes for a remote parent: HAS_IS_REMOTE | IS_REMOTE, and the W3C trace
#: flags in the low byte (1: sampled).
FLAGS_REMOTE_PARENT = 0x300


def is_sampled(flags: int) -> bool:
    """Whether a span with these ``flags`` was sampled. Exported spans are; writers such as the
    Python SDK leave the trace-flag byte at 0, so only a byte that is set but lacks the sampled
    bit says "not sampled"."""
    return not (flags & 0xFF) or bool(flags & 0x01)
