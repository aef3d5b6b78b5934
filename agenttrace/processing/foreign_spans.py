"""agenttrace's privacy rules, applied to spans that other instrumentations recorded.

Spans of opentelemetry-instrumentation-openai-v2, httpx and the like pass through the
trajectory processor into the span file and into trajectories (as LLM calls). What those
instrumentations record is up to their own settings; what agenttrace *writes* follows
agenttrace's: attributes named like secrets are dropped, and message content is dropped
(``content=none``) or passed through the ``redact`` hook, exactly as for agenttrace's own
spans. Other exporters on the same TracerProvider still get the spans as recorded: a span
processor cannot change a finished span for the others (docs/llm-calls.md).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from agenttrace import semconv as sc
from agenttrace._logging import internal_error
from agenttrace._secrets import REDACTED, is_secret_name
from agenttrace.trajectory import codec, foreign_formats
from agenttrace.trajectory.records import SpanRecord

Redact = Callable[[str, Any], Any]


def is_content_key(key: str) -> bool:
    """Whether ``key`` holds message content (flattened formats: only the content leaves, so
    roles, finish reasons and tool names stay): GenAI's, and OpenInference's and OpenLLMetry's
    own (agenttrace.trajectory.foreign_formats)."""
    if key in sc.GEN_AI_CONTENT_ATTRIBUTES:
        return True
    if key.startswith(sc.GEN_AI_CONTENT_PREFIXES) and key.endswith(
        sc.GEN_AI_FLATTENED_CONTENT_LEAVES
    ):
        return True
    return foreign_formats.is_content_key(key)


class ForeignSpanPolicy:
    """Makes a foreign span's record follow the content policy; agenttrace's own pass as is."""

    def __init__(self, *, capture_content: bool = True, redact: Redact | None = None) -> None:
        self.capture_content = capture_content
        self.redact = redact

    def apply(self, record: SpanRecord) -> SpanRecord:
        if record.scope_name == sc.INSTRUMENTATION_SCOPE:
            return record
        attributes = self._clean(record.attributes)
        events = record.events
        if events:
            cleaned = [(event, self._clean(event.attributes)) for event in events]
            if any(new is not event.attributes for event, new in cleaned):
                events = tuple(event._replace(attributes=new) for event, new in cleaned)
        if attributes is record.attributes and events is record.events:
            return record
        return record._replace(attributes=attributes, events=events)

    def _clean(self, attributes: Mapping[str, Any]) -> Mapping[str, Any]:
        """The attributes after the policy; the same object when nothing had to change."""
        changed: dict[str, Any] | None = None
        for key, value in attributes.items():
            if is_secret_name(key):
                new: Any = None
            elif is_content_key(key):
                new = self._content(key, value)
            else:
                continue
            if changed is None:
                changed = dict(attributes)
            if new is None:
                del changed[key]
            else:
                changed[key] = new
        return attributes if changed is None else changed

    def _content(self, key: str, value: Any) -> Any:
        """A content attribute's value under the policy; None drops it."""
        if not self.capture_content:
            return None
        if self.redact is None:
            return value
        decoded, was_json = value, False
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                decoded, was_json = json.loads(value), True  # most formats record JSON text
        try:
            redacted = self.redact(key, decoded)
        except Exception:
            internal_error("the redact hook (content withheld)")
            return REDACTED
        if was_json or not isinstance(redacted, (str, bool, int, float)):
            return codec.dumps(redacted, redact_secrets=True)
        return redacted


class UndecidedSpans:
    """Spans of other tracers that ended before anything above them was an episode.

    Some tracers say what a span is only when it ends: OpenInference's LangChain
    instrumentor sets ``openinference.span.kind`` (``CHAIN``, ``AGENT``, ...) as each run
    ends, so the root span of a LangGraph run becomes an episode under the ``openinference``
    preset only after all its model and tool calls have ended. Offline, those calls join the
    episode through their parents; live, they are held here, by trace, until the span with
    no parent in this process (their local root) ends: :meth:`claim` hands them to the
    episode it turned out to be, or back to the span file when it is not one. Held spans are
    bounded (``max_spans``, the oldest trace given up first) and given up after
    ``idle_timeout`` seconds without a span of their trace.
    """

    def __init__(self, max_spans: int = 65_536) -> None:
        self._max_spans = max_spans
        self._traces: OrderedDict[int, dict[int, SpanRecord]] = OrderedDict()
        self._seen: dict[int, float] = {}  # trace id -> when its last span was held
        self._count = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def hold(self, record: SpanRecord) -> list[SpanRecord]:
        """Keep ``record`` until its local root ends; returns the spans given up to stay
        within ``max_spans`` (the oldest trace's)."""
        given_up: list[SpanRecord] = []
        with self._lock:
            trace = self._traces.get(record.trace_id)
            if trace is None:
                trace = self._traces[record.trace_id] = {}
            else:
                self._traces.move_to_end(record.trace_id)
            if record.span_id not in trace:
                self._count += 1
            trace[record.span_id] = record
            self._seen[record.trace_id] = time.monotonic()
            while self._count > self._max_spans and self._traces:
                oldest, spans = self._traces.popitem(last=False)
                self._seen.pop(oldest, None)
                self._count -= len(spans)
                given_up.extend(spans.values())
        return given_up

    def claim(self, trace_id: int, span_id: int) -> list[SpanRecord]:
        """The held spans below span ``span_id`` (their parents held too, up to it), removed:
        in the order they ended."""
        with self._lock:
            trace = self._traces.get(trace_id)
            if not trace:
                return []
            below: dict[int, bool] = {span_id: True}

            def reaches(current: int) -> bool:
                path = []
                while current not in below:
                    record = trace.get(current)
                    if record is None or record.parent_is_remote or len(path) > 4096:
                        break
                    path.append(current)
                    current = record.parent_span_id
                found = below.get(current, False)
                below.update(dict.fromkeys(path, found))
                return found

            taken = [r for key, r in trace.items() if key != span_id and reaches(key)]
            for record in taken:
                del trace[record.span_id]
            self._count -= len(taken)
            if not trace:
                del self._traces[trace_id]
                self._seen.pop(trace_id, None)
            return taken

    def expire(self, idle_timeout: float) -> list[SpanRecord]:
        """The spans of traces that held nothing new for ``idle_timeout`` seconds, removed
        (their local root never ended here: a span that was not recorded, or a lost one)."""
        cutoff = time.monotonic() - idle_timeout
        given_up: list[SpanRecord] = []
        with self._lock:
            for trace_id in [t for t, seen in self._seen.items() if seen <= cutoff]:
                spans = self._traces.pop(trace_id, {})
                del self._seen[trace_id]
                self._count -= len(spans)
                given_up.extend(spans.values())
        return given_up

    def drain(self) -> list[SpanRecord]:
        """Every held span, removed (at shutdown)."""
        return self.expire(-1.0)
