"""Undoing the export content policy on span records read back from trace storage.

Spans that went through :class:`~agenttrace.processing.span_content.ContentPolicyExporter`
carry markers (docs/export-content.md). :func:`restore_content` resolves blob references
back to the original text from a :class:`~agenttrace.storage.blobs.BlobStore`, records what
stays lost (truncated or removed content, a blob that is missing) in ``SpanRecord.lossy``,
and drops the markers, so a rebuilt trajectory equals the live one whenever nothing was
lost, and says exactly what was lost otherwise. It never fails for a missing or damaged
blob: the reference stays in place and the key is flagged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agenttrace import semconv as sc
from agenttrace.storage.blobs import (
    BlobIntegrityError,
    BlobNotFoundError,
    BlobStore,
    parse_blob_reference,
)
from agenttrace.trajectory.records import SpanEvent, SpanRecord

__all__ = ["REASON_REMOVED", "restore_content"]

_TRUNCATED = sc.CONTENT_TRUNCATED
_REMOVED = sc.CONTENT_REMOVED
_BLOBS = sc.CONTENT_BLOBS
REASON_REMOVED = "removed by the export content policy"


def restore_content(
    records: Iterable[SpanRecord], store: BlobStore | None = None
) -> Iterator[SpanRecord]:
    """``records`` with blob references resolved, markers dropped and losses in ``lossy``.

    A record without markers (nearly all of them) passes through as the same object.
    """
    for record in records:
        attributes = record.attributes
        if (
            _TRUNCATED in attributes
            or _REMOVED in attributes
            or _BLOBS in attributes
            or (record.events and _events_marked(record.events))
        ):
            yield _restore(record, store)
        else:
            yield record


def _events_marked(events: tuple[SpanEvent, ...]) -> bool:
    for event in events:
        attributes = event.attributes
        if _TRUNCATED in attributes or _REMOVED in attributes or _BLOBS in attributes:
            return True
    return False


def _restore(record: SpanRecord, store: BlobStore | None) -> SpanRecord:
    lossy = dict(record.lossy)
    attributes = _restore_attributes(record.attributes, store, lossy, "")
    events = record.events
    if events and _events_marked(events):
        events = tuple(
            event._replace(
                attributes=_restore_attributes(
                    event.attributes, store, lossy, f"in event {event.name!r}: "
                )
            )
            for event in events
        )
    return record._replace(attributes=attributes, events=events, lossy=lossy)


def _restore_attributes(
    attributes: Mapping[str, Any], store: BlobStore | None, lossy: dict[str, str], where: str
) -> Mapping[str, Any]:
    if not (_TRUNCATED in attributes or _REMOVED in attributes or _BLOBS in attributes):
        return attributes
    restored = dict(attributes)
    for key in _keys(restored.pop(_TRUNCATED, ())):
        value = restored.get(key)
        size = len(value.encode("utf-8", "replace")) if isinstance(value, str) else None
        reason = (
            f"truncated to {size} bytes by the export content policy"
            if size is not None
            else "truncated by the export content policy"
        )
        _flag(lossy, key, where + reason)
    for key in _keys(restored.pop(_REMOVED, ())):
        _flag(lossy, key, where + REASON_REMOVED)
    for key in _keys(restored.pop(_BLOBS, ())):
        if key not in restored:
            _flag(lossy, key, where + "blob reference missing from the span")
            continue
        text, problem = _resolve(restored[key], store)
        if text is None:
            _flag(lossy, key, where + problem)
        else:
            restored[key] = text
    return restored


def _resolve(value: Any, store: BlobStore | None) -> tuple[str | None, str]:
    """(original text, "") or (None, why it stays a reference)."""
    reference = parse_blob_reference(value)
    if reference is None:
        return None, "listed as a blob reference, but its value is not one"
    ref, size = reference
    if store is None:
        return None, f"content in blob {ref} ({size} bytes); no blob store given to resolve it"
    try:
        data = store.get(ref)
    except BlobNotFoundError as exc:
        return None, str(exc)
    except BlobIntegrityError:
        return None, f"blob {ref} damaged in {store}"
    except Exception as exc:  # the store itself failed (network, permissions)
        return None, f"blob {ref} unreadable from {store}: {type(exc).__name__}: {exc}"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, f"blob {ref} in {store} is not UTF-8 text"


def _keys(marker: Any) -> list[str]:
    """The keys a marker lists: a string array, or its JSON text (Jaeger's v1 API turns
    arrays into strings), or a single key."""
    if isinstance(marker, str):
        if marker.startswith("["):
            try:
                decoded = json.loads(marker)
            except (ValueError, RecursionError):
                return [marker]
            if isinstance(decoded, list):
                return [str(key) for key in decoded]
        return [marker]
    if isinstance(marker, (tuple, list)):
        return [str(key) for key in marker]
    return []


def _flag(lossy: dict[str, str], key: str, reason: str) -> None:
    earlier = lossy.get(key)
    lossy[key] = reason if not earlier or earlier == reason else f"{earlier}; {reason}"
