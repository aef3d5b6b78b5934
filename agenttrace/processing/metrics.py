"""Episode metrics through the OpenTelemetry metrics API, from the rebuilt trajectories.

Dashboards want rates and percentiles (episodes by status, return, length, step and LLM
latency, tokens) that traces answer only one search at a time. The writer already rebuilds each
finished episode, so every figure comes from the trajectory, never from a second reading of
the spans: what a dashboard shows is what the training data holds.

The writer may run in a helper process (:mod:`agenttrace.processing.writer_process`), while
the user's MeterProvider lives in this one. So the writer only boils each trajectory down to
an :data:`EpisodeSummary` (plain data that crosses the pipe), and :class:`EpisodeMetrics`
records summaries here. Names follow the OpenTelemetry conventions: ``rl.*`` for episodes and
steps, the GenAI client metrics (``gen_ai.client.operation.duration``,
``gen_ai.client.token.usage``) for model calls.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from agenttrace import semconv as sc
from agenttrace._version import __version__
from agenttrace.export_queue import call_bounded, short_reason, watch_exporter_logs
from agenttrace.trajectory.model import Trajectory

logger = logging.getLogger("agenttrace")

# --- metric names (docs/metrics.md) ----------------------------------------------------------
EPISODES = "rl.episodes"
#: Returns are often negative, and OpenTelemetry histograms take no negative values (the SDK
#: drops them). So the return distribution is a counter of cumulative buckets, with the bound
#: as the attribute ``le``: exactly what Prometheus' histogram_quantile reads. Plus the running
#: sum of returns (an up-down counter), for the mean.
EPISODE_RETURNS = "rl.episode.returns"
EPISODE_RETURN_SUM = "rl.episode.return.sum"
BUCKET_BOUND = "le"
EPISODE_LENGTH = "rl.episode.length"
EPISODE_DURATION = "rl.episode.duration"
#: Scores given to episodes (agenttrace.trajectory.scores), by rl.score.name: how many, and
#: their running sum (scores may be negative, so no histogram; the mean is sum / count).
SCORES = "rl.scores"
SCORE_SUM = "rl.score.sum"
STEP_DURATION = "rl.step.duration"
GEN_AI_OPERATION_DURATION = "gen_ai.client.operation.duration"
GEN_AI_TOKEN_USAGE = "gen_ai.client.token.usage"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"

#: Histogram bucket boundaries, given to the SDK as advice (a user's View still wins).
#: Seconds: from a fast env step (0.1 ms) to a long LLM-agent episode (1 h).
SECONDS_BUCKETS = (
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
#: Returns may be negative; roughly symmetric, finer near zero.
RETURN_BUCKETS = (
    -1000.0, -500.0, -200.0, -100.0, -50.0, -20.0, -10.0, -5.0, -2.0, -1.0, -0.5, 0.0,
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
)  # fmt: skip
LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 100000)
#: The GenAI semantic conventions' advice for these two metrics.
GEN_AI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GEN_AI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

#: One model call: (duration s or None, operation, provider, model, input tokens,
#: output tokens, error type or None).
LLMCallSummary = tuple[
    float | None, str, str | None, str | None, int | None, int | None, str | None
]
#: One episode: (status, env name, return, length, duration s or None, step durations,
#: model calls). Plain tuples and lists, so marshal carries it from the helper process.
EpisodeSummary = tuple[str, str | None, float, int, float | None, list[float], list[LLMCallSummary]]


def summarize(trajectory: Trajectory) -> EpisodeSummary:
    """What the metrics need from one trajectory."""
    env_name = trajectory.attributes.get(sc.ENV_NAME)
    step_durations = []
    llm_calls: list[LLMCallSummary] = []
    for step in trajectory.steps:
        duration = _seconds(step.start_time, step.end_time)
        if duration is not None:
            step_durations.append(duration)
        for call in step.llm_calls:
            llm_calls.append(
                (
                    _seconds(call.start_time, call.end_time),
                    str(call.attributes.get(sc.GEN_AI_OPERATION_NAME) or sc.GEN_AI_OPERATION_CHAT),
                    call.provider,
                    call.model,
                    call.input_tokens,
                    call.output_tokens,
                    _error_type(call.error),
                )
            )
    return (
        trajectory.status,
        None if env_name is None else str(env_name),
        float(trajectory.return_),
        int(trajectory.length),
        _seconds(trajectory.start_time, trajectory.end_time),
        step_durations,
        llm_calls,
    )


class CountingMetricExporter:
    """A MetricExporter (the SDK's OTLP one, say) that counts its exports, so the exit line
    says "sent" only of what was sent. The periodic reader reads its preferences and calls
    ``export``, ``force_flush`` and ``shutdown``: they are the inner exporter's.

    What the inner exporter logs while exporting is kept as ``last_error`` (agenttrace's exit
    line reports it). Once ``closing`` is set, its first line stops it: a refused or failing
    endpoint does not hold the exit for the exporter's whole retry window.
    """

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter
        self._preferred_temporality = exporter._preferred_temporality
        self._preferred_aggregation = exporter._preferred_aggregation
        self.exported = 0  # exports the endpoint accepted
        self.failed = 0  # exports that failed or raised
        self.last_error = ""
        self.closing = False
        self._stopped = False

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        try:
            with watch_exporter_logs(self._exporter_said):
                result = self.exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            self.failed += 1
            raise
        if getattr(result, "name", None) == "SUCCESS":
            self.exported += 1
            self.last_error = ""
        else:
            self.failed += 1
        return result

    def _exporter_said(self, message: str) -> None:
        self.last_error = self.last_error or short_reason(message)
        if self.closing and not self._stopped:
            self._stopped = True
            call_bounded(self.exporter.shutdown, 0.5)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.exporter.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        if not self._stopped:
            self._stopped = True
            self.exporter.shutdown(*args, **kwargs)


class EpisodeMetrics:
    """Records episode summaries on the instruments of one MeterProvider.

    Never raises: a metrics failure is logged once and costs nothing else.
    """

    def __init__(self, meter_provider: Any) -> None:
        meter = meter_provider.get_meter(sc.INSTRUMENTATION_SCOPE, __version__)
        self.episodes = meter.create_counter(
            EPISODES, unit="{episode}", description="Episodes finished, by status."
        )
        self.episode_returns = meter.create_counter(
            EPISODE_RETURNS,
            unit="{episode}",
            description="Finished episodes whose undiscounted return is at most the bound le "
            "(cumulative buckets, for histogram_quantile).",
        )
        self.episode_return_sum = meter.create_up_down_counter(
            EPISODE_RETURN_SUM,
            unit="1",
            description="Sum of the undiscounted returns of finished episodes.",
        )
        self.episode_length = meter.create_histogram(
            EPISODE_LENGTH,
            unit="{step}",
            description="Steps in each finished episode.",
            explicit_bucket_boundaries_advisory=LENGTH_BUCKETS,
        )
        self.episode_duration = meter.create_histogram(
            EPISODE_DURATION,
            unit="s",
            description="Wall-clock duration of each finished episode.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.step_duration = meter.create_histogram(
            STEP_DURATION,
            unit="s",
            description="Duration of each timestep (agent act and environment step).",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.llm_duration = meter.create_histogram(
            GEN_AI_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=GEN_AI_DURATION_BUCKETS,
        )
        self.token_usage = meter.create_histogram(
            GEN_AI_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=GEN_AI_TOKEN_BUCKETS,
        )
        self.scores = meter.create_counter(
            SCORES, unit="{score}", description="Scores given to episodes, by name."
        )
        self.score_sum = meter.create_up_down_counter(
            SCORE_SUM, unit="1", description="Sum of the scores given to episodes, by name."
        )
        self.failures = 0
        self._return_series: set[tuple[str, str | None]] = set()  # (status, env) seen

    def record_score(self, name: str, value: float) -> None:
        """A score, counted where it is given (once, whenever its episode was written)."""
        try:
            attributes = {sc.SCORE_NAME: name}
            self.scores.add(1, attributes)
            self.score_sum.add(value, attributes)
        except Exception:
            self.failures += 1
            if self.failures == 1:
                logger.exception("agenttrace: could not record a score metric; counting on")

    def record(self, summary: EpisodeSummary) -> None:
        try:
            self._record(summary)
        except Exception:
            self.failures += 1
            if self.failures == 1:
                logger.exception("agenttrace: could not record episode metrics; counting on")

    def _record(self, summary: EpisodeSummary) -> None:
        status, env_name, return_, length, duration, step_durations, llm_calls = summary
        env = {} if env_name is None else {sc.ENV_NAME: env_name}
        episode = {sc.EPISODE_STATUS: status, **env}
        self.episodes.add(1, episode)
        self.episode_return_sum.add(return_, episode)
        add_return = self.episode_returns.add
        series = (status, env_name)
        first = series not in self._return_series  # every bucket exists from the start, so
        self._return_series.add(series)  # histogram_quantile sees the empty ones below too
        for bound, label in _RETURN_BOUNDS:
            if return_ <= bound:
                add_return(1, {**episode, BUCKET_BOUND: label})
            elif first:
                add_return(0, {**episode, BUCKET_BOUND: label})
        self.episode_length.record(length, episode)
        if duration is not None:
            self.episode_duration.record(duration, episode)
        step_record = self.step_duration.record
        for step_duration in step_durations:
            step_record(step_duration, env)
        for call_duration, operation, provider, model, tokens_in, tokens_out, error in llm_calls:
            call = {sc.GEN_AI_OPERATION_NAME: operation}
            if provider:
                call[sc.GEN_AI_PROVIDER_NAME] = provider
            if model:
                call[sc.GEN_AI_REQUEST_MODEL] = model
            if call_duration is not None:
                failed = {**call, ERROR_TYPE: error} if error else call
                self.llm_duration.record(call_duration, failed)
            for token_type, count in (("input", tokens_in), ("output", tokens_out)):
                if count is not None:
                    self.token_usage.record(count, {**call, GEN_AI_TOKEN_TYPE: token_type})


#: Each return bucket's bound and its ``le`` text, ending with +Inf (every episode).
_RETURN_BOUNDS = (*((bound, repr(bound)) for bound in RETURN_BUCKETS), (math.inf, "+Inf"))


def _seconds(start: int | None, end: int | None) -> float | None:
    if start is None or end is None or end < start:
        return None
    return (end - start) / 1e9


def _error_type(error: str | None) -> str | None:
    """A low-cardinality ``error.type``: the exception's type name from ``"Type: message"``."""
    if not error:
        return None
    kind = error.split(":", 1)[0].strip()
    return kind if kind.replace(".", "").replace("_", "").isalnum() else "_OTHER"
