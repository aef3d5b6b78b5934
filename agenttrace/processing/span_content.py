"""The export content policy: what of a span's content leaves the process through an exporter.

The trajectory processor always sees full content, and the run folder's spans.jsonl keeps it
(the lossless local copy). Spans sent to a tracing backend go through
:class:`ContentPolicyExporter`, which rewrites their content attributes (observations,
actions, info, LLM messages: :func:`is_export_content_key`) by one of four policies
(docs/export-content.md):

``full``
    unchanged.
``truncate``
    values longer than ``max_bytes`` (UTF-8) become shorter text that is still valid JSON:
    a prefix of an array's items or an object's keys, a cut string ending in ``…``, a
    ``{"$truncated": {"tag", "size"}}`` stand-in for a value of agenttrace's encoding that
    cannot be cut (an array's raw bytes, say). Text that was not JSON is cut as text. The
    span lists the cut keys in ``agenttrace.content.truncated``.
``ref``
    values longer than ``max_bytes`` go to a content-addressed blob store
    (:mod:`agenttrace.storage.blobs`) and are replaced by ``{"$blob": {"ref": "sha256:…",
    "size": N}}``; the keys are listed in ``agenttrace.content.blobs``. When the store
    fails, the value is truncated instead (logged once, counted).
``none``
    content attributes removed, their keys listed in ``agenttrace.content.removed``.

Span events are treated the same way (older GenAI conventions put messages in events), with
the markers on the event. Spans are never changed in place (the trajectory processor shares
them): a span that needs a change is exported as a new ``ReadableSpan``; the others pass as
they are.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence

# json's string quoting (its C implementation where there is one), as json.dumps uses it.
from json.encoder import encode_basestring as _quote_text
from json.encoder import encode_basestring_ascii as _quote_ascii
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenttrace import semconv as sc
from agenttrace._logging import internal_error, warn_once
from agenttrace.storage.blobs import BlobStore, blob_reference

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MIN_MAX_BYTES",
    "POLICIES",
    "ContentPolicyExporter",
    "is_export_content_key",
    "truncate_json_text",
]

logger = logging.getLogger("agenttrace")

POLICIES = ("full", "truncate", "ref", "none")
#: A little under Grafana Tempo's default ``max_attribute_bytes`` (2048), which cuts longer
#: values blindly, leaving broken JSON.
DEFAULT_MAX_BYTES = 2000
#: The smallest limit: room for any stand-in this module writes.
MIN_MAX_BYTES = 64

_CONTENT_KEYS = sc.RL_CONTENT_ATTRIBUTES | sc.GEN_AI_CONTENT_ATTRIBUTES
_MARKERS = frozenset(sc.CONTENT_MARKERS)


def is_export_content_key(key: str) -> bool:
    """Whether the export content policy applies to attribute ``key``: agenttrace's content
    (``rl.observation``, ``rl.action``, ``rl.info``) and GenAI message content, including
    flattened formats (``gen_ai.prompt.0.content``)."""
    if key in _CONTENT_KEYS:
        return True
    return key.startswith(sc.GEN_AI_CONTENT_PREFIXES) and key.endswith(
        sc.GEN_AI_FLATTENED_CONTENT_LEAVES
    )


# --- truncation as valid JSON -----------------------------------------------------------------

_ELLIPSIS = "…"
_TRUNCATED_TAG = "$truncated"
#: Tags of agenttrace's value encoding whose body is a list that stays valid when cut short.
_LIST_TAGS = frozenset({"$tuple", "$set", "$frozenset", "$dict"})
#: Below this much room, a value that does not fit whole is left out instead of being cut.
_MIN_NESTED = 8
#: A value of agenttrace's encoding that cannot be cut, recognised without parsing it; for
#: arrays, dtype and shape (written first by the codec) go into the stand-in.
_ATOMIC_HEAD = re.compile(r'\{"(\$[a-z]+)":')
_ARRAY_HEAD = re.compile(r'\{"\$ndarray":\{"dtype":("[^"\\]{1,32}"),"shape":(\[[0-9,]{0,64}\])')

_NUMBER_TYPES = frozenset({int, float, bool})
_dump_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_dump_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def _utf8_size(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _fits(text: str, limit: int) -> bool:
    """``_utf8_size(text) <= limit``, without encoding when the length settles it."""
    length = len(text)
    if length > limit:
        return False
    if length * 4 <= limit or text.isascii():
        return True
    return len(text.encode("utf-8", "surrogatepass")) <= limit


def truncate_json_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, and whether anything was cut.

    JSON text stays JSON that parses (see the module docstring for how each kind of value is
    cut); other text is cut as text, ending in ``…``. Text that fits comes back as it is; JSON
    whose compact form fits comes back compact (the same value: not a cut). The work is
    bounded by ``max_bytes`` apart from parsing the text once.
    """
    if _fits(text, max_bytes):
        return text, False
    if max_bytes < MIN_MAX_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_MAX_BYTES}, got {max_bytes}")
    head = _ATOMIC_HEAD.match(text)
    if head is not None and head.group(1) not in _LIST_TAGS:
        return _atomic_stand_in(head.group(1), text, max_bytes), True
    try:
        value = json.loads(text)
    except RecursionError:
        return _stand_in(None, _utf8_size(text), max_bytes), True
    except ValueError:
        return _cut_plain_text(text, max_bytes), True
    out: str | None
    try:
        out, complete = _Truncator(ascii=False).fit(value, max_bytes)
        if out is not None and not out.isascii():
            try:
                out.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates (from \ud800 escapes): keep escaped
                out, complete = _Truncator(ascii=True).fit(value, max_bytes)
    except RecursionError:
        out, complete = None, False
    if out is None:
        return _stand_in(None, _utf8_size(text), max_bytes), True
    return out, not complete


def _atomic_stand_in(tag: str, text: str, max_bytes: int) -> str:
    extra: dict[str, Any] = {}
    if tag == "$ndarray":
        array = _ARRAY_HEAD.match(text)
        if array is not None:
            with contextlib.suppress(ValueError):
                extra = {"dtype": json.loads(array.group(1)), "shape": json.loads(array.group(2))}
    return _stand_in(tag, _utf8_size(text), max_bytes, extra)


def _cut_plain_text(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8", "replace")[: max_bytes - len(_ELLIPSIS.encode())]
    return data.decode("utf-8", "ignore") + _ELLIPSIS


def _stand_in(tag: str | None, size: int, room: int, extra: Mapping[str, Any] | None = None) -> str:
    """``{"$truncated": {"tag": …, "size": N}}`` (plus ``extra`` when room allows), or
    ``null`` when not even that fits, so the top level always has a value."""
    body: dict[str, Any] = {"tag": tag, "size": size} if tag else {"size": size}
    for key, value in (extra or {}).items():
        fuller = dict(body, **{key: value})
        if _fits(_dump_text({_TRUNCATED_TAG: fuller}), room):
            body = fuller
    text = _dump_text({_TRUNCATED_TAG: body})
    return text if _fits(text, room) else "null"


_Fitted = tuple[str | None, bool]


class _Truncator:
    """Fits decoded JSON values into a byte budget, visiting only what the budget can hold.

    :meth:`fit` returns ``(text, complete)``: compact JSON of at most ``room`` bytes (None
    when nothing meaningful fits) and whether it is the whole value.
    """

    def __init__(self, *, ascii: bool) -> None:
        self.full = _dump_ascii if ascii else _dump_text
        self.quote = _quote_ascii if ascii else _quote_text

    def dump(self, value: Any) -> str:
        cls = type(value)
        if cls is str:
            return self.quote(value)
        if cls is int:
            return int.__repr__(value)
        if cls is float and value - value == 0.0:  # finite
            return float.__repr__(value)
        if value is None:
            return "null"
        if cls is bool:
            return "true" if value else "false"
        return self.full(value)

    def fit(self, value: Any, room: int) -> _Fitted:
        cls = type(value)
        if cls is str:
            if len(value) <= room:
                text = self.quote(value)
                if _fits(text, room):
                    return text, True
            return self.cut_string(value, room), False
        if cls is list:
            return self.fit_list(value, room, self.fit)
        if cls is dict:
            if len(value) == 1:
                tag = next(iter(value))
                if tag.startswith("$"):
                    return self.fit_tagged(tag, value[tag], room)
            return self.fit_object(value, room)
        text = self.dump(value)  # numbers, booleans, null: whole or not at all
        return (text, True) if _fits(text, room) else (None, False)

    def cut_string(self, value: str, room: int) -> str | None:
        quote = self.quote
        if not _fits(quote(_ELLIPSIS), room):
            return None
        low, high = 0, min(len(value), room)  # every character takes at least one byte
        while low < high:  # the longest prefix whose literal (with the ellipsis) fits
            middle = (low + high + 1) // 2
            if _fits(quote(value[:middle] + _ELLIPSIS), room):
                low = middle
            else:
                high = middle - 1
        return quote(value[:low] + _ELLIPSIS)

    def fit_list(self, items: list, room: int, fit_item: Callable[[Any, int], _Fitted]) -> _Fitted:
        if room < 2:
            return None, False
        if fit_item != self.fit_pair:
            numbers = self.fit_numbers(items, room)
            if numbers is not None:
                return numbers
        parts: list[str] = []
        left = room - 2
        complete = True
        for item in items:
            separator = 1 if parts else 0
            text, whole = fit_item(item, left - separator)
            if text is None or (not whole and left - separator < _MIN_NESTED):
                complete = False
                break
            parts.append(text)
            left -= separator + _utf8_size(text)
            if not whole:
                complete = False
                break
        return "[" + ",".join(parts) + "]", complete

    def fit_numbers(self, items: list, room: int) -> _Fitted | None:
        """A list of numbers, booleans and nulls (observations as plain lists), dumped in a few
        C calls on growing prefixes and cut at a comma; None for any other list."""
        count, checked = min(len(items), max(16, room // 8)), 0
        while True:
            for item in items[checked:count]:
                if type(item) not in _NUMBER_TYPES and item is not None:
                    return None
            checked = count
            text = self.full(items[:count])  # ASCII: characters are bytes
            if len(text) > room or count == len(items):
                break
            count = min(len(items), count * 2)
        if len(text) <= room:
            return text, True
        cut = text.rfind(",", 0, room)
        return ("[" + text[1:cut] + "]" if cut > 0 else "[]"), False

    def fit_object(self, value: dict, room: int) -> _Fitted:
        if room < 2:
            return None, False
        parts: list[str] = []
        left = room - 2
        complete = True
        for key, item in value.items():
            head = self.quote(key) + ":"
            inner = left - (1 if parts else 0) - _utf8_size(head)
            text, whole = self.fit(item, inner) if inner >= 1 else (None, False)
            if text is None or (not whole and inner < _MIN_NESTED):
                complete = False
                break
            parts.append(head + text)
            left -= (1 if len(parts) > 1 else 0) + _utf8_size(head) + _utf8_size(text)
            if not whole:
                complete = False
                break
        return "{" + ",".join(parts) + "}", complete

    def fit_tagged(self, tag: str, body: Any, room: int) -> _Fitted:
        """A value of agenttrace's encoding: list-bodied tags are cut as lists (sets item by
        item, ``$dict`` pair by pair), the others kept whole or replaced by a ``$truncated``
        stand-in, so the result still decodes."""
        head = self.quote(tag)
        inner = room - _utf8_size(head) - 3  # {"tag":…}
        if tag in _LIST_TAGS and type(body) is list:
            if inner < 2:
                return None, False
            if tag == "$tuple":
                fit_item = self.fit
            elif tag == "$dict":
                fit_item = self.fit_pair
            else:
                fit_item = self.fit_whole
            part, complete = self.fit_list(body, inner, fit_item)
            return "{" + head + ":" + part + "}", complete  # type: ignore[operator]
        text = self.full({tag: body})
        if _fits(text, room):
            return text, True
        extra: dict[str, Any] = {}
        if tag == "$ndarray" and type(body) is dict:
            extra = {k: body[k] for k in ("dtype", "shape") if k in body}
        stand_in = _stand_in(tag, _utf8_size(text), room, extra)
        return (None if stand_in == "null" else stand_in), False

    def fit_whole(self, item: Any, room: int) -> _Fitted:
        text = self.dump(item)
        return (text, True) if _fits(text, room) else (None, False)

    def fit_pair(self, pair: Any, room: int) -> _Fitted:
        """One ``[key, value]`` of a ``$dict``: the key whole, the value cut."""
        if type(pair) is not list or len(pair) != 2:
            return self.fit_whole(pair, room)
        key = self.dump(pair[0])
        inner = room - _utf8_size(key) - 3  # [key,…]
        if inner < 1:
            return None, False
        text, whole = self.fit(pair[1], inner)
        if text is None or (not whole and inner < _MIN_NESTED):
            return None, False
        return "[" + key + "," + text + "]", whole


# --- the exporter wrapper ---------------------------------------------------------------------


def _plain(attributes: Any) -> dict[str, Any] | None:
    """The plain dict inside the SDK's (frozen, once the span ended) BoundedAttributes: read
    without the lock its mapping methods take per key. None for anything else."""
    inner = getattr(attributes, "_dict", None)
    return inner if type(inner) is dict else None


class _PolicySpan(ReadableSpan):
    """A copy of a finished span with other attributes and events; keeps the drop counts."""

    def __init__(
        self, original: ReadableSpan, attributes: Mapping[str, Any], events: Sequence[Event]
    ) -> None:
        super().__init__(
            name=original.name,
            context=original.context,
            parent=original.parent,
            resource=original.resource,
            attributes=attributes,
            events=events,
            links=original.links,
            kind=original.kind,
            status=original.status,
            start_time=original.start_time,
            end_time=original.end_time,
            instrumentation_scope=original.instrumentation_scope,
        )
        self._dropped_counts = (
            original.dropped_attributes,
            original.dropped_events,
            original.dropped_links,
        )

    @property
    def dropped_attributes(self) -> int:
        return self._dropped_counts[0]

    @property
    def dropped_events(self) -> int:
        return self._dropped_counts[1]

    @property
    def dropped_links(self) -> int:
        return self._dropped_counts[2]


class _PolicyEvent(Event):
    def __init__(self, original: Event, attributes: Mapping[str, Any]) -> None:
        super().__init__(original.name, attributes, original.timestamp)
        self._dropped_count = original.dropped_attributes

    @property
    def dropped_attributes(self) -> int:
        return self._dropped_count


class ContentPolicyExporter(SpanExporter):
    """A SpanExporter that applies an export content policy, then hands spans to ``exporter``.

    ``policy`` is ``"full"``, ``"truncate"``, ``"ref"`` (needs ``blob_store``) or ``"none"``;
    ``max_bytes`` is the largest content value (UTF-8 bytes) exported inline. The counters
    ``truncated``, ``removed``, ``blobs`` (values) and ``blob_failures`` say what was done.
    Never raises for a span's content: a value the store cannot take is truncated instead.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        policy: str = "truncate",
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        blob_store: BlobStore | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown content policy {policy!r}; choose from {POLICIES}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise TypeError(f"max_bytes must be an int, got {type(max_bytes).__name__}")
        if max_bytes < MIN_MAX_BYTES:
            raise ValueError(f"max_bytes must be at least {MIN_MAX_BYTES}, got {max_bytes}")
        if policy == "ref" and blob_store is None:
            raise ValueError("the 'ref' content policy needs a blob_store")
        self.exporter = exporter
        self.policy = policy
        self.max_bytes = max_bytes
        self.blob_store = blob_store
        self.truncated = 0
        self.removed = 0
        self.blobs = 0
        self.blob_failures = 0
        self._content_keys: dict[str, bool] = {}  # key -> is_export_content_key(key)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.policy != "full":
            spans = [self._apply_guarded(span) for span in spans]
        return self.exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    # --- one span -----------------------------------------------------------------------

    def _apply_guarded(self, span: ReadableSpan) -> ReadableSpan:
        try:
            return self.apply(span)
        except Exception:
            internal_error("the export content policy (content removed from the span)")
        try:
            return self.apply(span, policy="none")
        except Exception:
            return span

    def apply(self, span: ReadableSpan, *, policy: str | None = None) -> ReadableSpan:
        """``span`` after the policy: the same object when nothing changes, else a copy."""
        policy = policy or self.policy
        attributes = _plain(getattr(span, "_attributes", None)) or span.attributes
        new_attributes = self._rewrite(attributes, policy) if attributes else None
        new_events: list[Event] | None = None
        raw_events = getattr(span, "_events", None)
        events = span.events if raw_events is None or raw_events else ()
        for index, event in enumerate(events):
            event_attributes = _plain(event.attributes) or event.attributes
            changed = self._rewrite(event_attributes, policy) if event_attributes else None
            if changed is not None:
                if new_events is None:
                    new_events = list(events)
                new_events[index] = _PolicyEvent(event, changed)
        if new_attributes is None and new_events is None:
            return span
        return _PolicySpan(
            span,
            dict(attributes) if new_attributes is None else new_attributes,
            events if new_events is None else new_events,
        )

    def _rewrite(self, attributes: Mapping[str, Any], policy: str) -> dict[str, Any] | None:
        """New attributes after ``policy``; None when nothing changes."""
        changed: dict[str, Any] | None = None
        marks: dict[str, list[str]] = {}
        limit = self.max_bytes
        known = self._content_keys
        for key, value in attributes.items():
            is_content = known.get(key)
            if is_content is None:
                is_content = is_export_content_key(key)
                if len(known) < 10_000:  # attribute keys are few; stay bounded regardless
                    known[key] = is_content
            if not is_content:
                continue
            marker: str | None
            new: str | None
            if policy == "none":
                marker, new = sc.CONTENT_REMOVED, None
            elif type(value) is not str or _fits(value, limit):
                continue
            elif policy == "ref":
                marker, new = self._to_blob(value)
            else:
                new, cut = truncate_json_text(value, limit)
                marker = sc.CONTENT_TRUNCATED if cut else None
            if changed is None:
                changed = dict(attributes)
            if new is None:
                del changed[key]
            else:
                changed[key] = new
            if marker is not None:
                marks.setdefault(marker, []).append(key)
        if changed is None:
            return None
        for marker, keys in marks.items():
            if marker == sc.CONTENT_TRUNCATED:
                self.truncated += len(keys)
            elif marker == sc.CONTENT_REMOVED:
                self.removed += len(keys)
            else:
                self.blobs += len(keys)
            earlier = changed.get(marker)
            if isinstance(earlier, (tuple, list)):
                keys = [*earlier, *(k for k in keys if k not in earlier)]
            changed[marker] = tuple(keys)
        return changed

    def _to_blob(self, value: str) -> tuple[str | None, str]:
        """(marker, new value) for a value that goes to the blob store, or is truncated when
        the store fails."""
        store = self.blob_store
        assert store is not None
        try:
            data = value.encode("utf-8")
            ref = store.put(data)
        except Exception as exc:
            self.blob_failures += 1
            warn_once(
                "export-content-blob-store",
                "agenttrace: the blob store %s failed (%s: %s); exporting such content "
                "truncated instead. Later failures are counted, not logged.",
                store,
                type(exc).__name__,
                exc,
            )
            logger.debug("agenttrace: blob store failure", exc_info=True)
            new, cut = truncate_json_text(value, self.max_bytes)
            return (sc.CONTENT_TRUNCATED if cut else None), new
        return sc.CONTENT_BLOBS, blob_reference(ref, len(data))
