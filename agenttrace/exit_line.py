"""The parts of the exit line (``agenttrace: 12 episodes -> ..., 3 spans lost``) that say
what was lost or not sent, from a pipeline's ``stats()``: one wording for every count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Counters of what was lost, for the exit report: (label, counters summed).
LOSS_LABELS = (
    (
        "episode",
        (
            "episodes_dropped_open_limit",
            "episodes_dropped_queue_full",
            "episodes_failed_assembly",
            "episodes_lost_writer_crash",
        ),
    ),
    (
        "span",
        (
            "spans_dropped",  # queue full, failed write
            "late_spans",
            "spans_undecided_given_up",  # held for an episode that never came (conventions)
            "spans_too_late_for_step",
            "spans_lost_writer_crash",
        ),
    ),
)

#: Why spans did not reach the OTLP endpoint: (counter, label).
EXPORT_REASONS = (
    ("spans_not_exported_export_failed", "export failed"),
    ("spans_not_exported_endpoint_down", "endpoint down"),
    ("spans_not_exported_queue_full", "queue full"),
    ("spans_not_exported_at_shutdown", "still queued at the exit deadline"),
)


def _count(stats: Mapping[str, Any], key: str) -> int:
    return int(stats.get(key, 0) or 0)


def losses(stats: Mapping[str, Any]) -> list[str]:
    """``["3 episodes lost", "2 errors"]``: the non-zero loss and error counts."""
    found = []
    for label, keys in LOSS_LABELS:
        count = sum(_count(stats, key) for key in keys)
        if count:
            found.append(f"{count} {label}{'' if count == 1 else 's'} lost")
    errors = (
        sum((stats.get("sink_errors") or {}).values())
        + _count(stats, "metrics_failures")
        + _count(stats, "export_content_blob_failures")
        + _count(stats, "internal_errors")
    )
    if errors:
        found.append(f"{errors} error{'' if errors == 1 else 's'}")
    return found


def not_sent(stats: Mapping[str, Any], *, kept_in_file: bool) -> list[str]:
    """What did not reach the OTLP endpoints: spans (with why) and trajectories sent as
    OTLP logs. ``kept_in_file``: the run has a span file (that holds every span)."""
    found = []
    spans = _count(stats, "spans_not_exported")
    if spans:
        reasons = ", ".join(
            f"{label}: {_count(stats, key):,}" for key, label in EXPORT_REASONS if stats.get(key)
        )
        error = stats.get("span_export_error")
        reasons += f"; {error}" if error else ""
        kept = " (all in the span file)" if kept_in_file else ""
        found.append(
            f"{spans:,} span{'' if spans == 1 else 's'} not sent to the OTLP endpoint "
            f"({reasons}){kept}"
        )
    trajectories = _count(stats, "trajectories_not_exported")
    if trajectories:
        found.append(
            f"{trajectories:,} trajector{'y' if trajectories == 1 else 'ies'} not sent to the "
            "OTLP logs endpoint"
        )
    return found


def metrics_not_sent(reason: str) -> str:
    """The episode metrics' last export did not reach the endpoint (or was not confirmed)."""
    return "episode metrics not sent to the OTLP endpoint" + (f" ({reason})" if reason else "")
