"""Where the spans of an OTLP/JSON line belong, read without decoding them.

``agenttrace export --engine ray`` rebuilds each trace in one task. The task that reads a line
needs its spans' traces (and, to send scores to their episodes, the episodes it names), not the
spans themselves: :func:`line_places` reads those few fields with msgspec and skips the rest
(about a tenth of the decoder's time), so a line whose spans all go to one task is sent there
whole and decoded once, there, by the one decoder.

Only lines in the plain shape that agenttrace and the Collector write are placed this way:
every span's ``traceId`` in hex (read as the decoder reads it), the episode id as a
``stringValue``, no span that reaches across traces (a vector env step, a score). Anything else
gives None, and the caller decodes the line where it is read: a line that is not JSON, another
field layout (snake_case keys, Tempo's ``batches``, OTLP before 0.15), base64 ids, any value of
an unexpected type.
"""

from __future__ import annotations

import re

import msgspec
from msgspec import Raw, Struct

from agenttrace import semconv as sc

__all__ = ["LinePlaces", "line_places"]

_HEX_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
#: Spans that belong to episodes in other traces: a vector env step (one per sub-environment's
#: episode) and a score (given by episode id).
_ACROSS = frozenset({sc.ENV_VECTOR_STEP, sc.SCORE})
_EPISODE_ID = sc.EPISODE_ID


class _Attribute(Struct, gc=False):
    key: str
    value: Raw = Raw(b"null")


class _Span(Struct, gc=False):
    traceId: str = ""
    name: str = ""
    attributes: list[_Attribute] = []


class _Scope(Struct, gc=False):
    spans: list[_Span] = []


class _Resource(Struct, gc=False):
    scopeSpans: list[_Scope] | None = None
    instrumentationLibrarySpans: Raw | None = None


class _Request(Struct, gc=False):
    resourceSpans: list[_Resource] | None = None


class _Text(Struct, gc=False, forbid_unknown_fields=True):
    stringValue: str


_request = msgspec.json.Decoder(_Request).decode
_text = msgspec.json.Decoder(_Text).decode


class LinePlaces(Struct, gc=False):
    """The traces of a line's spans (as the decoder's ints), the episode ids they name, and
    how many spans the line holds."""

    traces: set[int]
    episodes: set[str]
    spans: int


def line_places(line: bytes) -> LinePlaces | None:
    """Where the spans of ``line`` belong; None when only decoding it can tell (see above)."""
    try:
        request = _request(line)
    except (msgspec.DecodeError, RecursionError):  # (ValidationError is a DecodeError)
        return None
    blocks = request.resourceSpans
    if not blocks:
        return None
    traces: set[int] = set()
    episodes: set[str] = set()
    spans = 0
    seen_ids: set[str] = set()
    try:
        for block in blocks:
            if block.scopeSpans is None or block.instrumentationLibrarySpans is not None:
                return None
            for scope in block.scopeSpans:
                for span in scope.spans:
                    spans += 1
                    if span.name in _ACROSS:
                        return None
                    trace_id = span.traceId
                    if trace_id not in seen_ids:
                        if not _HEX_TRACE_ID.fullmatch(trace_id):
                            return None
                        seen_ids.add(trace_id)
                        traces.add(int(trace_id, 16))
                    for attribute in span.attributes:
                        if attribute.key == _EPISODE_ID:
                            episodes.add(_text(attribute.value).stringValue)
    except (msgspec.DecodeError, RecursionError):
        return None
    return LinePlaces(traces, episodes, spans) if spans else None
