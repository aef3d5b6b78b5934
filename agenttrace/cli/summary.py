"""One summary of a set of trajectories, shared by ``agenttrace demo`` and ``agenttrace inspect``.

:func:`summarize` reads trajectories as a stream (any iterable, e.g. ``iter_trajectories``), so
a file of any size is summarized in bounded memory: counters, plus up to
:data:`STEP_TIME_SAMPLES` step durations for the percentiles (exact below that many steps, a
uniform reservoir sample above). :func:`render_summary` prints it as rich tables. Both are
pure, so the two commands print the same numbers for the same file.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agenttrace import semconv as sc
from agenttrace.sinks.files import utf8_safe
from agenttrace.trajectory.model import Trajectory

#: Step durations kept for the p50/p95 step time; beyond this a uniform sample is kept.
STEP_TIME_SAMPLES = 100_000

#: Display order of the known statuses; unknown ones follow alphabetically.
_STATUS_ORDER = {status: rank for rank, status in enumerate(sc.EPISODE_STATUSES)}


@dataclass
class StatusSummary:
    """Figures for the episodes of one status."""

    episodes: int = 0
    return_sum: float = 0.0
    returns_counted: int = 0
    returns_nan: int = 0
    length_sum: int = 0

    @property
    def mean_return(self) -> float | None:
        return self.return_sum / self.returns_counted if self.returns_counted else None

    @property
    def mean_length(self) -> float | None:
        return self.length_sum / self.episodes if self.episodes else None


@dataclass
class GroupSummary:
    """Returns of one rollout group (``rl.group.id``): running mean and variance (Welford's
    update: no list of returns is kept), and the extremes, which tell an all-equal group."""

    episodes: int = 0
    returns_counted: int = 0
    mean_return: float = 0.0
    _m2: float = 0.0
    min_return: float | None = None
    max_return: float | None = None
    size: int | None = None  # rl.group.size, when the episodes said

    def add(self, value: float | None) -> None:
        self.episodes += 1
        if value is None:
            return
        self.returns_counted += 1
        delta = value - self.mean_return
        self.mean_return += delta / self.returns_counted
        self._m2 += delta * (value - self.mean_return)
        self.min_return = value if self.min_return is None else min(self.min_return, value)
        self.max_return = value if self.max_return is None else max(self.max_return, value)

    @property
    def std_return(self) -> float | None:
        """Population standard deviation (GRPO normalises by it); None without returns."""
        return math.sqrt(self._m2 / self.returns_counted) if self.returns_counted else None

    @property
    def zero_variance(self) -> bool:
        """Every return the same: a group that teaches GRPO nothing (2+ episodes)."""
        return self.returns_counted >= 2 and self.min_return == self.max_return


@dataclass
class Summary:
    """What a set of trajectories amounts to; see the field comments for the exact meaning."""

    #: Trajectories read.
    episodes: int = 0
    #: Per status (completed, truncated, errored, ...), in display order.
    by_status: dict[str, StatusSummary] = field(default_factory=dict)
    #: Mean of ``return`` over episodes whose return is a number (NaN/missing ones excluded).
    mean_return: float | None = None
    #: Episodes whose return is NaN or missing (not part of ``mean_return``).
    returns_nan: int = 0
    #: ``length`` (steps the episode took) statistics.
    mean_length: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    #: Steps present in the trajectories (sum of ``len(steps)``).
    total_steps: int = 0
    #: LLM calls over all steps, and their token counts where recorded.
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: Steps with both start and end time, and percentiles of their duration in milliseconds.
    timed_steps: int = 0
    step_time_p50_ms: float | None = None
    step_time_p95_ms: float | None = None
    #: Rollout groups (rl.group.id), in the order first seen; episodes without one are not in
    #: any group.
    groups: dict[str, GroupSummary] = field(default_factory=dict)

    @property
    def zero_variance_groups(self) -> int:
        """Groups of 2+ episodes whose returns are all equal (no GRPO advantage)."""
        return sum(group.zero_variance for group in self.groups.values())

    @property
    def statuses(self) -> dict[str, int]:
        """Episode count per status."""
        return {status: row.episodes for status, row in self.by_status.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``agenttrace inspect --json``)."""
        return {
            "episodes": self.episodes,
            "statuses": self.statuses,
            "mean_return": self.mean_return,
            "returns_nan": self.returns_nan,
            "mean_return_by_status": {s: r.mean_return for s, r in self.by_status.items()},
            "mean_length": self.mean_length,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "total_steps": self.total_steps,
            "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "timed_steps": self.timed_steps,
            "step_time_p50_ms": self.step_time_p50_ms,
            "step_time_p95_ms": self.step_time_p95_ms,
            "groups": {
                group_id: {
                    "episodes": group.episodes,
                    "size": group.size,
                    "mean_return": group.mean_return if group.returns_counted else None,
                    "std_return": group.std_return,
                    "zero_variance": group.zero_variance,
                }
                for group_id, group in self.groups.items()
            },
            "zero_variance_groups": self.zero_variance_groups,
        }


def _percentile(ordered: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def usable_return(value: Any) -> float | None:
    """The return as a float, or None when it is NaN, missing or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def summarize(trajectories: Iterable[Trajectory]) -> Summary:
    """Summarize trajectories in one pass, holding at most STEP_TIME_SAMPLES step durations."""
    summary = Summary()
    by_status: dict[str, StatusSummary] = {}
    return_sum, returns_counted, length_sum = 0.0, 0, 0
    durations: list[int] = []
    sampler = random.Random(0)  # fixed seed: the same file always gives the same figures
    for trajectory in trajectories:
        summary.episodes += 1
        row = by_status.setdefault(trajectory.status, StatusSummary())
        row.episodes += 1
        value = usable_return(trajectory.return_)
        if value is None:
            summary.returns_nan += 1
            row.returns_nan += 1
        else:
            return_sum += value
            returns_counted += 1
            row.return_sum += value
            row.returns_counted += 1
        length = trajectory.length
        length_sum += length
        row.length_sum += length
        if summary.min_length is None or length < summary.min_length:
            summary.min_length = length
        if summary.max_length is None or length > summary.max_length:
            summary.max_length = length
        group_id = trajectory.attributes.get(sc.GROUP_ID)
        if group_id is not None:
            group = summary.groups.setdefault(str(group_id), GroupSummary())
            group.add(value)
            size = trajectory.attributes.get(sc.GROUP_SIZE)
            if type(size) is int:
                group.size = size
        summary.total_steps += len(trajectory.steps)
        for step in trajectory.steps:
            for call in step.llm_calls:
                summary.llm_calls += 1
                summary.input_tokens += call.input_tokens or 0
                summary.output_tokens += call.output_tokens or 0
            if step.start_time is None or step.end_time is None:
                continue
            duration = step.end_time - step.start_time
            summary.timed_steps += 1
            if len(durations) < STEP_TIME_SAMPLES:
                durations.append(duration)
            else:  # reservoir sampling (Algorithm R): every step equally likely to be kept
                slot = sampler.randrange(summary.timed_steps)
                if slot < STEP_TIME_SAMPLES:
                    durations[slot] = duration
    if returns_counted:
        summary.mean_return = return_sum / returns_counted
    if summary.episodes:
        summary.mean_length = length_sum / summary.episodes
    if durations:
        durations.sort()
        summary.step_time_p50_ms = _percentile(durations, 0.50) / 1e6
        summary.step_time_p95_ms = _percentile(durations, 0.95) / 1e6
    summary.by_status = {
        status: by_status[status]
        for status in sorted(by_status, key=lambda s: (_STATUS_ORDER.get(s, len(_STATUS_ORDER)), s))
    }
    return summary


# --- rendering -------------------------------------------------------------------------------


def printable(text: str) -> str:
    """Text read from a file, safe to print: a lone surrogate (valid in JSON, not in UTF-8)
    is shown as its escape ``\\udcff`` instead of failing the write to the terminal."""
    return utf8_safe(text)


_DASH = "-"


def _number(value: float | None, digits: int = 3) -> str:
    return _DASH if value is None else f"{value:.{digits}f}"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else _DASH


def _return_cell(mean: float | None, nan: int) -> str:
    text = _number(mean)
    return f"{text} ({nan} NaN)" if nan else text


def render_summary(summary: Summary, console: Console) -> None:
    """Print the summary: episodes by status, then steps, LLM use and step time."""
    episodes = Table(title="Episodes", title_justify="left")
    episodes.add_column("status")
    episodes.add_column("episodes", justify="right")
    episodes.add_column("share", justify="right")
    episodes.add_column("mean return", justify="right")
    episodes.add_column("mean length", justify="right")
    for status, row in summary.by_status.items():
        episodes.add_row(
            Text(printable(status)),  # as read from the file: never markup
            str(row.episodes),
            _share(row.episodes, summary.episodes),
            _return_cell(row.mean_return, row.returns_nan),
            _number(row.mean_length, 1),
        )
    episodes.add_section()
    episodes.add_row(
        "all",
        str(summary.episodes),
        _share(summary.episodes, summary.episodes),
        _return_cell(summary.mean_return, summary.returns_nan),
        _number(summary.mean_length, 1),
        style="bold",
    )
    console.print(episodes)

    steps = Table(title="Steps", title_justify="left", show_header=False)
    steps.add_column("what")
    steps.add_column("value", justify="right")
    lengths = (
        _DASH
        if summary.min_length is None
        else f"{summary.min_length} / {_number(summary.mean_length, 1)} / {summary.max_length}"
    )
    steps.add_row("steps", str(summary.total_steps))
    steps.add_row("length min / mean / max", lengths)
    steps.add_row("LLM calls", str(summary.llm_calls))
    steps.add_row("tokens in / out", f"{summary.input_tokens} / {summary.output_tokens}")
    steps.add_row("step time p50", _milliseconds(summary.step_time_p50_ms))
    steps.add_row("step time p95", _milliseconds(summary.step_time_p95_ms))
    console.print(steps)
    if summary.groups:
        render_groups(summary, console)


#: Groups listed one by one; more are summed up in the last line.
GROUPS_SHOWN = 20


def render_groups(summary: Summary, console: Console) -> None:
    """Rollout groups: per group the mean and spread of returns, and how many groups have
    returns that are all equal (a GRPO-style advantage is zero for every one of them)."""
    groups = summary.groups
    table = Table(title="Rollout groups (rl.group.id)", title_justify="left")
    table.add_column("group")
    table.add_column("episodes", justify="right")
    table.add_column("mean return", justify="right")
    table.add_column("std return", justify="right")
    table.add_column("", justify="left")
    for group_id, group in list(groups.items())[:GROUPS_SHOWN]:
        of = f" of {group.size}" if group.size is not None else ""
        table.add_row(
            Text(printable(group_id)),
            f"{group.episodes}{of}",
            _number(group.mean_return if group.returns_counted else None),
            _number(group.std_return),
            "all returns equal" if group.zero_variance else "",
        )
    if len(groups) > GROUPS_SHOWN:
        table.add_row(f"... {len(groups) - GROUPS_SHOWN} more", "", "", "", "")
    console.print(table)
    several = sum(group.returns_counted >= 2 for group in groups.values())
    zero = summary.zero_variance_groups
    console.print(
        f"groups: {len(groups)}; with all returns equal: {zero} of the {several} with 2+ "
        f"episodes ({_share(zero, several)}): no learning signal for GRPO"
    )


def _milliseconds(value: float | None) -> str:
    return _DASH if value is None else f"{value:.3f} ms"
