"""How an episode and its steps ended: status and errors read from span records.

Part of the one assembler (:mod:`agenttrace.trajectory.assembler`): an episode span that says
its status is taken at its word; one that does not (another tracer's, read through a
conventions mapping) gets a status derived from its spans, with the one rule for caught
errors (docs/tracing-api.md, Errors).
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.trajectory import genai
from agenttrace.trajectory.model import EpisodeError, Step
from agenttrace.trajectory.records import SpanRecord

#: Spans whose exception makes their episode errored, even when the runner caught it.
ERROR_ROLES = frozenset({sc.ENV_RESET, sc.ENV_STEP, sc.AGENT_ACT})


def episode_error(episode_span: SpanRecord | None) -> EpisodeError | None:
    if episode_span is None:
        return None
    if episode_span.status_code == "ERROR" or any(
        event.name == sc.EXCEPTION_EVENT for event in episode_span.events
    ):
        return span_error(episode_span)
    return None


def is_failure(record: SpanRecord, first: SpanRecord | None) -> bool:
    """Whether a failed ``record`` is the first failure of its episode that counts."""
    if first is not None and first.start_time <= record.start_time:
        return False
    name = record.name
    return name in ERROR_ROLES or (
        name != sc.EPISODE and genai.call_kind(record) == genai.MODEL_CALL
    )


def span_error(record: SpanRecord) -> EpisodeError:
    """The error a failed span recorded (its exception event, else its status message)."""
    for event in reversed(record.events):
        if event.name == sc.EXCEPTION_EVENT:
            attrs = event.attributes
            return EpisodeError(
                type=attrs.get(sc.EXCEPTION_TYPE),
                message=attrs.get(sc.EXCEPTION_MESSAGE),
                stack=attrs.get(sc.EXCEPTION_STACKTRACE),
            )
    return EpisodeError(type=None, message=record.status_message)


def derived_status(episode_span: SpanRecord, last: Step | None) -> str:
    """Status of an episode span that did not say (written by another tool)."""
    if episode_span.status_code == "ERROR":
        return sc.STATUS_ERRORED
    if last is not None and last.truncated and not last.terminated:
        return sc.STATUS_TRUNCATED
    if last is None or last.terminated:
        return sc.STATUS_COMPLETED
    return sc.STATUS_TRUNCATED


def step_error(*records: SpanRecord | None) -> str | None:
    """What failed the step: the first of its spans that raised (``"Type: message"``)."""
    for record in records:
        if record is not None and record.status_code == "ERROR":
            return genai.error_text(record)
    return None
