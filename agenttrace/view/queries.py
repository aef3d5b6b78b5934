"""What the viewer's pages ask of the index: filtered and sorted pages of rows, counts by
status, the return histogram, the plots' series and the two comparisons.

Everything here works on :class:`~agenttrace.view.index.EpisodeRow` lists and trajectories,
with no HTTP: :mod:`agenttrace.view.server` turns query strings into :class:`Filters` and the
results into JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from agenttrace.trajectory.model import Trajectory
from agenttrace.view.index import EpisodeRow

__all__ = [
    "SORTS",
    "Filters",
    "compare_episodes",
    "compare_runs",
    "first_difference",
    "page",
    "plots",
    "summary",
]

#: Sortable columns (and ``score:NAME``).
SORTS = (
    "key",
    "return",
    "length",
    "duration_s",
    "start_time",
    "status",
    "task_id",
    "group_id",
    "episode_id",
    "run",
)
#: Most points a plot gets: longer series are averaged in buckets.
MAX_POINTS = 2000
HISTOGRAM_BINS = 30


def _listed(value: str | None) -> frozenset[str]:
    return frozenset(part for part in (value or "").split(",") if part)


def _number(value: str | None, name: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {value!r}") from None
    if math.isnan(number):
        raise ValueError(f"{name} must be a number, not NaN")
    return number


@dataclass(frozen=True)
class Filters:
    """Which rows a page shows; from the query string (lists are comma-separated)."""

    runs: frozenset[str] = frozenset()
    statuses: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    text: str = ""
    min_return: float | None = None
    max_return: float | None = None
    errors_only: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        return cls(
            runs=_listed(query.get("run")),
            statuses=_listed(query.get("status")),
            tasks=_listed(query.get("task")),
            groups=_listed(query.get("group")),
            text=(query.get("q") or "").strip().lower(),
            min_return=_number(query.get("min_return"), "min_return"),
            max_return=_number(query.get("max_return"), "max_return"),
            errors_only=query.get("errors") in ("1", "true", "yes"),
        )

    def keeps(self, row: EpisodeRow) -> bool:
        if self.runs and row.run not in self.runs:
            return False
        if self.statuses and row.status not in self.statuses:
            return False
        if self.tasks and row.task_id not in self.tasks:
            return False
        if self.groups and row.group_id not in self.groups:
            return False
        if self.errors_only and row.error is None:
            return False
        if self.min_return is not None and (row.return_ is None or row.return_ < self.min_return):
            return False
        if self.max_return is not None and (row.return_ is None or row.return_ > self.max_return):
            return False
        if self.text:
            haystack = " ".join(
                part or "" for part in (row.episode_id, row.task_id, row.group_id, row.error)
            )
            if self.text not in haystack.lower():
                return False
        return True

    def apply(self, rows: Sequence[EpisodeRow]) -> list[EpisodeRow]:
        if self == Filters():
            return list(rows)
        return [row for row in rows if self.keeps(row)]


def _sorted(rows: list[EpisodeRow], sort: str, descending: bool) -> list[EpisodeRow]:
    """``rows`` by one column, rows without a value last whatever the order."""
    if sort.startswith("score:"):
        name = sort[len("score:") :]
        present = [row for row in rows if name in row.scores]
        missing = [row for row in rows if name not in row.scores]
        present.sort(key=lambda row: row.scores[name], reverse=descending)
        return present + missing
    if sort not in SORTS:
        raise ValueError(f"cannot sort by {sort!r}: one of {', '.join(SORTS)} or score:NAME")
    if sort == "key":
        return rows[::-1] if descending else rows
    value = attrgetter("return_" if sort == "return" else sort)
    present = [row for row in rows if value(row) is not None]
    missing = [row for row in rows if value(row) is None]
    present.sort(key=value, reverse=descending)  # (stable: ties keep the index order)
    return present + missing


def page(
    rows: Sequence[EpisodeRow],
    filters: Filters,
    *,
    sort: str = "key",
    descending: bool = False,
    offset: int = 0,
    limit: int = 50,
) -> dict[str, Any]:
    """One page of the rows the filters keep, sorted (missing values last)."""
    if offset < 0 or not 1 <= limit <= 1000:
        raise ValueError("offset must be >= 0 and limit between 1 and 1000")
    kept = _sorted(filters.apply(rows), sort, descending)
    return {
        "total": len(kept),
        "offset": offset,
        "limit": limit,
        "rows": [row.to_json() for row in kept[offset : offset + limit]],
    }


def summary(rows: Sequence[EpisodeRow], filters: Filters) -> dict[str, Any]:
    """Counts, mean return and length by status, and the return histogram by status."""
    kept = filters.apply(rows)
    by_status: dict[str, dict[str, Any]] = {}
    for row in kept:
        entry = by_status.setdefault(row.status, {"count": 0, "returns": [], "lengths": []})
        entry["count"] += 1
        if row.return_ is not None:
            entry["returns"].append(row.return_)
        entry["lengths"].append(row.length)
    returns = [row.return_ for row in kept if row.return_ is not None]
    edges = _edges(returns)
    counts = {}
    for status, entry in by_status.items():
        counts[status] = _histogram(entry["returns"], edges)
    return {
        "total": len(kept),
        "by_status": {
            status: {
                "count": entry["count"],
                "mean_return": _mean(entry["returns"]),
                "mean_length": _mean(entry["lengths"]),
            }
            for status, entry in sorted(by_status.items())
        },
        "histogram": {"edges": edges, "counts": counts},
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _edges(values: Sequence[float], bins: int = HISTOGRAM_BINS) -> list[float]:
    if not values:
        return []
    low, high = min(values), max(values)
    if low == high:
        low, high = low - 0.5, high + 0.5
    width = (high - low) / bins
    return [low + width * n for n in range(bins)] + [high]


def _histogram(values: Sequence[float], edges: list[float]) -> list[int]:
    if not edges:
        return []
    bins = len(edges) - 1
    counts = [0] * bins
    low, width = edges[0], (edges[-1] - edges[0]) / bins
    for value in values:
        counts[min(bins - 1, max(0, int((value - low) / width)))] += 1
    return counts


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between the two nearest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def plots(rows: Sequence[EpisodeRow], filters: Filters) -> dict[str, Any]:
    """The dashboard's figures from the rows: return (raw, rolling mean, p10/p50/p90), length,
    step and model-call latency and tokens per episode, in start order; per-group spread.

    Up to :data:`MAX_POINTS` episodes each point is one episode and the rolling window is a
    twentieth of them (at least 5); beyond, each point is a bucket of consecutive episodes
    (its mean, and its quantiles for the band).
    """
    kept = sorted(
        filters.apply(rows),
        key=lambda row: (row.start_time is None, row.start_time or 0, row.key),
    )
    series = {
        "return": [row.return_ for row in kept],
        "length": [float(row.length) for row in kept],
        "step_ms": [row.step_ms for row in kept],
        "llm_ms": [row.llm_ms for row in kept],
        "input_tokens": [float(row.input_tokens) for row in kept],
        "output_tokens": [float(row.output_tokens) for row in kept],
    }
    count = len(kept)
    downsampled = count > MAX_POINTS
    if downsampled:
        size = math.ceil(count / MAX_POINTS)
        window = size
        groups = [range(start, min(count, start + size)) for start in range(0, count, size)]
        x = [float(group.stop) for group in groups]
        out = {
            name: [_mean_of(values, group) for group in groups] for name, values in series.items()
        }
        bands = [
            [v for v in (series["return"][i] for i in group) if v is not None] for group in groups
        ]
    else:
        window = max(5, count // 20)
        x = [float(n + 1) for n in range(count)]
        out = dict(series)
        bands = [
            [v for v in series["return"][max(0, n - window + 1) : n + 1] if v is not None]
            for n in range(count)
        ]
    result: dict[str, Any] = {"window": window, "x": x, "downsampled": downsampled, **out}
    for name, q in (("return_p10", 0.1), ("return_p50", 0.5), ("return_p90", 0.9)):
        result[name] = [_quantile(sorted(band), q) if band else None for band in bands]
    result["return_mean"] = [_mean(band) for band in bands]
    result["groups"] = _group_spread(kept)
    return result


def _mean_of(values: list[float | None], indices: range) -> float | None:
    present = [values[i] for i in indices if values[i] is not None]
    return _mean(present)  # type: ignore[arg-type]


def _group_spread(rows: Sequence[EpisodeRow]) -> list[dict[str, Any]]:
    groups: dict[str, list[float]] = {}
    for row in rows:
        if row.group_id is not None and row.return_ is not None:
            groups.setdefault(row.group_id, []).append(row.return_)
    spread = []
    for group_id, returns in sorted(groups.items()):
        mean = sum(returns) / len(returns)
        std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
        spread.append(
            {
                "group_id": group_id,
                "count": len(returns),
                "mean": mean,
                "std": std,
                "min": min(returns),
                "max": max(returns),
            }
        )
    return spread


def succeeded(row: EpisodeRow) -> bool:
    """A ``success`` score above 0 where there is one, else the episode completed."""
    if "success" in row.scores:
        return row.scores["success"] > 0
    return row.status == "completed"


def compare_runs(rows: Sequence[EpisodeRow], run_a: str, run_b: str) -> dict[str, Any]:
    """Two runs side by side: their returns, and success by task."""
    sides = {}
    for side, run in (("a", run_a), ("b", run_b)):
        mine = [row for row in rows if row.run == run]
        by_task: dict[str, dict[str, Any]] = {}
        for row in mine:
            entry = by_task.setdefault(row.task_id or "", {"episodes": 0, "success": 0})
            entry["episodes"] += 1
            entry["success"] += succeeded(row)
        for entry in by_task.values():
            entry["rate"] = entry["success"] / entry["episodes"]
        sides[side] = {
            "run": run,
            "episodes": len(mine),
            "returns": [row.return_ for row in mine if row.return_ is not None],
            "by_task": dict(sorted(by_task.items())),
        }
    return sides


#: Step fields compared, in the order a difference is named.
COMPARED = ("observation", "action", "reward", "terminated", "truncated")


def _canonical(value: Any) -> str:
    """A step field's JSON (already the codec's: plain JSON values), keys in order."""
    return json.dumps(value, sort_keys=True)


def first_difference(a: Trajectory, b: Trajectory) -> tuple[int | None, list[str]]:
    """The first step index where the two episodes differ, and in what; (None, []) when
    they are the same step for step. A step only one of them has is a difference in
    ``length``."""
    steps_a = [step.to_dict() for step in a.steps]
    steps_b = [step.to_dict() for step in b.steps]
    for n in range(max(len(steps_a), len(steps_b))):
        if n >= len(steps_a) or n >= len(steps_b):
            return n, ["length"]
        fields = [
            name
            for name in COMPARED
            if _canonical(steps_a[n].get(name)) != _canonical(steps_b[n].get(name))
        ]
        if fields:
            return n, fields
    return None, []


def compare_episodes(a: Trajectory, b: Trajectory) -> dict[str, Any]:
    step, fields = first_difference(a, b)
    return {"first_difference": step, "differs_in": fields, "same_task": a.task_id == b.task_id}
