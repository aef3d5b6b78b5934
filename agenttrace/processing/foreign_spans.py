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
