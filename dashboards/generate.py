"""The Grafana "Agent episodes" dashboard, built as code.

Plain Python dicts (no Grafana SDK) so the JSON is reviewable, reproducible and testable:
``python dashboards/generate.py`` writes ``dashboards/agent-episodes.json``; ``--check`` exits 1
when the committed file differs from what this script would write (CI and tests use it).

Metric names are the Prometheus names of agenttrace's OpenTelemetry metrics
(``agenttrace/processing/metrics.py``, meter scope ``agenttrace``); TraceQL attribute and span
names come from :mod:`agenttrace.semconv`, so the dashboard cannot drift from what agenttrace
emits. Data source uids (``prometheus``, ``tempo``, ``jaeger``) are fixed by the provisioning
in ``dashboards/provisioning/``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    from agenttrace import semconv as sc
except ImportError:  # run from a checkout without agenttrace installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from agenttrace import semconv as sc

HERE = Path(__file__).resolve().parent
OUT = HERE / "agent-episodes.json"

UID = "agent-episodes"
TITLE = "Agent episodes"
SCHEMA_VERSION = 39  # Grafana 11.0; Grafana 11.x and 12 migrate it on load

PROMETHEUS = {"type": "prometheus", "uid": "prometheus"}
TEMPO = {"type": "tempo", "uid": "tempo"}
JAEGER = {"type": "jaeger", "uid": "jaeger"}
DATASOURCE_UIDS = frozenset({PROMETHEUS["uid"], TEMPO["uid"], JAEGER["uid"]})

JAEGER_URL_DEFAULT = "http://localhost:16686"

#: Every agenttrace series: agenttrace's own scope (the openai-v2 instrumentation emits the
#: same gen_ai names), and the job the user picked (in the Collector setup ``job`` carries
#: service.name).
SCOPE = f'otel_scope_name="{sc.INSTRUMENTATION_SCOPE}", job=~"$job"'
RATE = "$__rate_interval"
RANGE = "$__range"

#: Episode statuses counted as failures by the error-rate panels and the Tempo table.
FAILED_STATUSES = (sc.STATUS_ERRORED, sc.STATUS_ABORTED, sc.STATUS_CANCELLED)
FAILED_RE = "|".join(FAILED_STATUSES)

# Prometheus names of agenttrace's metrics (agenttrace/processing/metrics.py, as the
# OpenTelemetry Prometheus exporters name them).
EPISODES = "rl_episodes_total"
#: Returns may be negative, which OpenTelemetry histograms refuse: agenttrace counts episodes
#: in cumulative return buckets (a counter labelled ``le``, read by histogram_quantile like a
#: histogram's _bucket series) and keeps the running sum of returns in an up-down counter,
#: which Prometheus sees as a gauge: delta() it, never rate() (returns can make it fall).
RETURN_BUCKETS = "rl_episode_returns_total"
RETURN_SUM = "rl_episode_return_sum"
# OpenTelemetry histograms: _bucket, _sum and _count series.
LENGTH = "rl_episode_length"
EPISODE_DURATION = "rl_episode_duration_seconds"
STEP_DURATION = "rl_step_duration_seconds"
LLM_DURATION = "gen_ai_client_operation_duration_seconds"
TOKENS = "gen_ai_client_token_usage"
HISTOGRAMS = (LENGTH, EPISODE_DURATION, STEP_DURATION, LLM_DURATION, TOKENS)

#: Metrics that only go up (rate/increase them).
COUNTERS = frozenset(
    {EPISODES, RETURN_BUCKETS}
    | {f"{base}_{suffix}" for base in HISTOGRAMS for suffix in ("bucket", "sum", "count")}
)
#: Metrics that may go down (delta them).
GAUGES = frozenset({RETURN_SUM})
#: Every metric name a query may use.
METRIC_NAMES = COUNTERS | GAUGES
#: Every label name a query may use (beyond the metric name).
LABEL_NAMES = frozenset(
    {
        "job",
        "instance",
        "le",
        "otel_scope_name",
        "rl_episode_status",
        "rl_env_name",
        "gen_ai_operation_name",
        "gen_ai_request_model",
        "gen_ai_provider_name",
        "gen_ai_token_type",
        "error_type",
    }
)

#: Variables Grafana fills in, with values that make each query runnable outside Grafana.
DEFAULT_VARIABLES = {
    "job": ".*",
    "service": "agenttrace",
    "jaeger_url": JAEGER_URL_DEFAULT,
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
}


# --- PromQL ------------------------------------------------------------------------------------
def sel(metric: str, *matchers: str) -> str:
    """``metric{scope matchers, extra matchers}``: every series filtered to agenttrace's."""
    return f"{metric}{{{', '.join((SCOPE, *matchers))}}}"


def rate(metric: str, *matchers: str, window: str = RATE) -> str:
    return f"rate({sel(metric, *matchers)}[{window}])"


def increase(metric: str, *matchers: str, window: str = RANGE) -> str:
    return f"increase({sel(metric, *matchers)}[{window}])"


def quantile(q: float, buckets: str, by: str = "", window: str = RATE, fn: str = "rate") -> str:
    """Quantile ``q`` of cumulative ``le`` buckets over ``window``, overall (or per ``by``)."""
    labels = ", ".join(("le", by)) if by else "le"
    return f"histogram_quantile({q}, sum by ({labels}) ({fn}({sel(buckets)}[{window}])))"


def mean(histogram: str, window: str = RATE, fn: str = "rate") -> str:
    """Mean observation of a histogram: its sum over its count."""
    return (
        f"sum({fn}({sel(histogram + '_sum')}[{window}])) / "
        f"sum({fn}({sel(histogram + '_count')}[{window}]))"
    )


def mean_return(window: str = RATE) -> str:
    """Mean return: how much the returns' running sum moved, over the episodes finished.

    Both over the same window as totals (delta and increase), never a total over a rate.
    """
    return f"sum(delta({sel(RETURN_SUM)}[{window}])) / sum(increase({sel(EPISODES)}[{window}]))"


def share(metric: str, matcher: str, fn: str = "rate", window: str = RATE) -> str:
    """Share of a counter's increase in the series matching ``matcher``.

    ``or vector(0)``: when nothing failed there is no failing series at all, and the share
    must read 0, not "no data".
    """
    return (
        f"(sum({fn}({sel(metric, matcher)}[{window}])) or vector(0)) / "
        f"sum({fn}({sel(metric)}[{window}]))"
    )


EPISODE_ERROR_MATCHER = f'rl_episode_status=~"{FAILED_RE}"'
LLM_ERROR_MATCHER = 'error_type!=""'


# --- TraceQL -----------------------------------------------------------------------------------
def span_attr(name: str) -> str:
    return f"span.{name}"


#: Columns of the Tempo tables: one row per episode span.
EPISODE_COLUMNS = (
    sc.EPISODE_ID,
    sc.TASK_ID,
    sc.ENV_NAME,
    sc.EPISODE_STATUS,
    sc.EPISODE_RETURN,
    sc.EPISODE_LENGTH,
)
SELECT_COLUMNS = f"select({', '.join(span_attr(a) for a in EPISODE_COLUMNS)})"
IS_EPISODE = f'name = "{sc.EPISODE}"'
FAILED_EPISODES_TRACEQL = (
    f'{{ {IS_EPISODE} && {span_attr(sc.EPISODE_STATUS)} =~ "{FAILED_RE}" }} | {SELECT_COLUMNS}'
)
#: TraceQL cannot order by an attribute: the panel sorts the most recent episodes by return.
RECENT_EPISODES_TRACEQL = f"{{ {IS_EPISODE} }} | {SELECT_COLUMNS}"


# --- building blocks ---------------------------------------------------------------------------
def prom_target(
    ref: str, expr: str, legend: str = "__auto", instant: bool = False
) -> dict[str, Any]:
    return {
        "datasource": dict(PROMETHEUS),
        "editorMode": "code",
        "exemplar": False,
        "expr": expr,
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
        "refId": ref,
    }


def tempo_target(query: str, limit: int, spss: int = 3) -> dict[str, Any]:
    return {
        "datasource": dict(TEMPO),
        "filters": [],
        "limit": limit,
        "query": query,
        "queryType": "traceql",
        "refId": "A",
        "spss": spss,
        "tableType": "spans",
    }


def grid(x: int, y: int, w: int, h: int) -> dict[str, int]:
    return {"h": h, "w": w, "x": x, "y": y}


def stat(
    title: str,
    description: str,
    expr: str,
    pos: dict[str, int],
    unit: str,
    decimals: int | None = None,
    red_above: float | None = None,
    sparkline: bool = False,
) -> dict[str, Any]:
    """A single figure; instant over the dashboard range unless it has a sparkline."""
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if red_above is not None:
        steps.append({"color": "red", "value": red_above})
    defaults: dict[str, Any] = {
        "color": {"mode": "thresholds"},
        "thresholds": {"mode": "absolute", "steps": steps},
        "unit": unit,
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "datasource": dict(PROMETHEUS),
        "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "gridPos": pos,
        "options": {
            "colorMode": "value",
            "graphMode": "area" if sparkline else "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showPercentChange": False,
            "textMode": "auto",
            "wideLayout": True,
        },
        "targets": [prom_target("A", expr, legend=title, instant=not sparkline)],
        "title": title,
        "type": "stat",
    }


def timeseries(
    title: str,
    description: str,
    targets: list[tuple[str, str]],
    pos: dict[str, int],
    unit: str,
    axis_label: str = "",
    stacked: bool = False,
    min_value: float | None = None,
    max_value: float | None = None,
) -> dict[str, Any]:
    """A time series panel; ``targets`` are (legend, PromQL) pairs, refIds A, B, ..."""
    defaults: dict[str, Any] = {
        "color": {"mode": "palette-classic"},
        "custom": {
            "axisLabel": axis_label,
            "drawStyle": "line",
            "fillOpacity": 30 if stacked else 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stacked else "none"},
        },
        "unit": unit,
    }
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    return {
        "datasource": dict(PROMETHEUS),
        "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "gridPos": pos,
        "options": {
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            prom_target(chr(ord("A") + i), expr, legend) for i, (legend, expr) in enumerate(targets)
        ],
        "title": title,
        "type": "timeseries",
    }


def hide(field: str) -> dict[str, Any]:
    return {
        "matcher": {"id": "byName", "options": field},
        "properties": [{"id": "custom.hidden", "value": True}],
    }


def episode_table(
    title: str, description: str, query: str, pos: dict[str, int], limit: int
) -> dict[str, Any]:
    """A Tempo table of episode spans, lowest return first.

    The spans table (not the traces one) so the selected rl.* attributes are columns. Its
    Span ID column links to the trace in Tempo (Grafana adds that link); the trace id column,
    hidden by Grafana, is shown here with a link to the same trace in Jaeger.
    """
    jaeger_link = {
        "targetBlank": True,
        "title": "Open trace in Jaeger",
        "url": "${jaeger_url}/trace/${__value.raw}",
    }
    return {
        "datasource": dict(TEMPO),
        "description": description,
        "fieldConfig": {
            "defaults": {
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False}
            },
            "overrides": [
                {
                    "matcher": {"id": "byName", "options": "traceIdHidden"},
                    "properties": [
                        {"id": "custom.hidden", "value": False},
                        {"id": "displayName", "value": "Trace ID (Jaeger)"},
                        {"id": "links", "value": [jaeger_link]},
                    ],
                },
                hide("name"),  # always "episode"
                {
                    "matcher": {"id": "byName", "options": sc.EPISODE_RETURN},
                    "properties": [{"id": "decimals", "value": 2}],
                },
            ],
        },
        "gridPos": pos,
        "options": {
            "cellHeight": "sm",
            "footer": {"countRows": False, "fields": "", "reducer": ["sum"], "show": False},
            "showHeader": True,
            "sortBy": [{"desc": False, "displayName": sc.EPISODE_RETURN}],
        },
        "targets": [tempo_target(query, limit)],
        "title": title,
        # Tempo returns attribute values in string-typed columns: sort returns as numbers.
        "transformations": [
            {
                "id": "convertFieldType",
                "options": {
                    "conversions": [
                        {"destinationType": "number", "targetField": sc.EPISODE_RETURN},
                        {"destinationType": "number", "targetField": sc.EPISODE_LENGTH},
                    ],
                    "fields": {},
                },
            }
        ],
        "type": "table",
    }


# --- the dashboard -----------------------------------------------------------------------------
def panels() -> list[dict[str, Any]]:
    """All panels, top to bottom; ids are assigned by build_dashboard in this order."""
    failed = ", ".join(FAILED_STATUSES)
    return [
        # Stats: the dashboard range at a glance.
        stat(
            "Episodes",
            "Episodes finished in the dashboard time range (all statuses).",
            f"round(sum({increase(EPISODES)}))",
            grid(0, 0, 4, 4),
            "short",
            decimals=0,
        ),
        stat(
            "Episodes / min",
            "Episodes finished per minute, now (rate over the last few scrapes).",
            f"sum({rate(EPISODES)}) * 60",
            grid(4, 0, 4, 4),
            "short",
            decimals=1,
            sparkline=True,
        ),
        stat(
            "Episode error rate",
            f"Share of the episodes finished in the time range that ended {failed}.",
            share(EPISODES, EPISODE_ERROR_MATCHER, fn="increase", window=RANGE),
            grid(8, 0, 4, 4),
            "percentunit",
            decimals=1,
            red_above=0.05,
        ),
        stat(
            "Median return",
            "Median undiscounted return of the episodes finished in the time range "
            "(interpolated within the return buckets).",
            quantile(0.5, RETURN_BUCKETS, window=RANGE, fn="increase"),
            grid(12, 0, 4, 4),
            "short",
            decimals=2,
        ),
        stat(
            "Mean return",
            "Mean undiscounted return of the episodes finished in the time range.",
            mean_return(window=RANGE),
            grid(16, 0, 4, 4),
            "short",
            decimals=2,
        ),
        stat(
            "LLM call error rate",
            "Share of the model calls made in the time range that failed (error_type set).",
            share(LLM_DURATION + "_count", LLM_ERROR_MATCHER, fn="increase", window=RANGE),
            grid(20, 0, 4, 4),
            "percentunit",
            decimals=1,
            red_above=0.05,
        ),
        # Episodes.
        timeseries(
            "Episode throughput by status",
            "Episodes finished per minute, stacked by rl.episode.status.",
            [("{{rl_episode_status}}", f"sum by (rl_episode_status) ({rate(EPISODES)}) * 60")],
            grid(0, 4, 12, 8),
            "short",
            axis_label="episodes / min",
            stacked=True,
            min_value=0,
        ),
        timeseries(
            "Error rate",
            f"Share of finished episodes that ended {failed}, and share of model calls that "
            "failed (their duration carries error_type).",
            [
                (f"episodes ({failed})", share(EPISODES, EPISODE_ERROR_MATCHER)),
                ("LLM calls", share(LLM_DURATION + "_count", LLM_ERROR_MATCHER)),
            ],
            grid(12, 4, 12, 8),
            "percentunit",
            min_value=0,
            max_value=1,
        ),
        timeseries(
            "Episode return",
            "Undiscounted return of finished episodes: p10, p50 and p90 (interpolated within "
            "the histogram's buckets) and the mean.",
            [
                ("p10", quantile(0.1, RETURN_BUCKETS)),
                ("p50", quantile(0.5, RETURN_BUCKETS)),
                ("p90", quantile(0.9, RETURN_BUCKETS)),
                ("mean", mean_return()),
            ],
            grid(0, 12, 12, 8),
            "short",
            axis_label="return",
        ),
        timeseries(
            "Episode length",
            "Steps per finished episode: p50, p90 and the mean.",
            [
                ("p50", quantile(0.5, LENGTH + "_bucket")),
                ("p90", quantile(0.9, LENGTH + "_bucket")),
                ("mean", mean(LENGTH)),
            ],
            grid(12, 12, 12, 8),
            "short",
            axis_label="steps",
            min_value=0,
        ),
        timeseries(
            "Step latency",
            "Duration of each timestep (agent act and environment step): p50, p90, p99.",
            [
                ("p50", quantile(0.5, STEP_DURATION + "_bucket")),
                ("p90", quantile(0.9, STEP_DURATION + "_bucket")),
                ("p99", quantile(0.99, STEP_DURATION + "_bucket")),
            ],
            grid(0, 20, 12, 8),
            "s",
            min_value=0,
        ),
        timeseries(
            "Episode duration",
            "Wall-clock duration of finished episodes: p50 and p90.",
            [
                ("p50", quantile(0.5, EPISODE_DURATION + "_bucket")),
                ("p90", quantile(0.9, EPISODE_DURATION + "_bucket")),
            ],
            grid(12, 20, 12, 8),
            "s",
            min_value=0,
        ),
        # LLM calls.
        timeseries(
            "LLM call latency by model",
            "Duration of model calls made inside episodes, p50 and p90 per "
            "gen_ai.request.model (failed calls included).",
            [
                (
                    "p50 {{gen_ai_request_model}}",
                    quantile(0.5, LLM_DURATION + "_bucket", "gen_ai_request_model"),
                ),
                (
                    "p90 {{gen_ai_request_model}}",
                    quantile(0.9, LLM_DURATION + "_bucket", "gen_ai_request_model"),
                ),
            ],
            grid(0, 28, 8, 8),
            "s",
            min_value=0,
        ),
        timeseries(
            "LLM calls by model",
            "Model calls per second made inside episodes, per gen_ai.request.model.",
            [
                (
                    "{{gen_ai_request_model}}",
                    f"sum by (gen_ai_request_model) ({rate(LLM_DURATION + '_count')})",
                )
            ],
            grid(8, 28, 8, 8),
            "short",
            axis_label="calls / s",
            min_value=0,
        ),
        timeseries(
            "LLM tokens by type",
            "Tokens per second used by model calls inside episodes, by gen_ai.token.type "
            "(input, output).",
            [("{{gen_ai_token_type}}", f"sum by (gen_ai_token_type) ({rate(TOKENS + '_sum')})")],
            grid(16, 28, 8, 8),
            "short",
            axis_label="tokens / s",
            min_value=0,
        ),
        # Traces.
        episode_table(
            "Failed episodes (Tempo)",
            f"Episode spans that ended {failed}, lowest return first. Span ID opens the trace "
            "in Tempo, Trace ID in Jaeger.",
            FAILED_EPISODES_TRACEQL,
            grid(0, 36, 24, 9),
            limit=50,
        ),
        episode_table(
            "Lowest-return episodes (Tempo)",
            "The most recent episode spans (up to 100) in the time range, lowest return first "
            "(TraceQL cannot sort by an attribute; to cut at a return, add e.g. "
            f"`&& {span_attr(sc.EPISODE_RETURN)} < 0.0`, a float literal). Span ID opens the "
            "trace in Tempo, Trace ID in Jaeger.",
            RECENT_EPISODES_TRACEQL,
            grid(0, 45, 24, 9),
            limit=100,
        ),
    ]


def job_query() -> str:
    return f'label_values({EPISODES}{{otel_scope_name="{sc.INSTRUMENTATION_SCOPE}"}}, job)'


def service_query() -> str:
    return f"label_values({sel(EPISODES)}, job)"


def templating() -> list[dict[str, Any]]:
    def prom_variable(
        name: str, label: str, query: str, description: str, **extra: Any
    ) -> dict[str, Any]:
        return {
            "current": {},
            "datasource": dict(PROMETHEUS),
            "definition": query,
            "description": description,
            "hide": 0,
            "label": label,
            "name": name,
            "options": [],
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2,  # on time range change
            "regex": "",
            "sort": 1,
            "type": "query",
            **extra,
        }

    return [
        prom_variable(
            "job",
            "Job",
            job_query(),
            "Prometheus job of agenttrace's metrics (service.name in the Collector setup).",
            allValue=".*",
            current={"text": ["All"], "value": ["$__all"]},
            includeAll=True,
            multi=True,
        ),
        prom_variable(
            "service",
            "Jaeger service",
            service_query(),
            "service.name for the Jaeger links: in the Collector setup the job label carries "
            "it; type another name when the job differs.",
            includeAll=False,
            multi=False,
        ),
        {
            "current": {"text": JAEGER_URL_DEFAULT, "value": JAEGER_URL_DEFAULT},
            "description": "Base URL of the Jaeger UI, for the links to traces.",
            "hide": 0,
            "label": "Jaeger URL",
            "name": "jaeger_url",
            "options": [
                {"selected": True, "text": JAEGER_URL_DEFAULT, "value": JAEGER_URL_DEFAULT}
            ],
            "query": JAEGER_URL_DEFAULT,
            "type": "textbox",
        },
    ]


def links() -> list[dict[str, Any]]:
    """Dashboard links to Jaeger's search for the selected service's episodes."""
    search = f"${{jaeger_url}}/search?service=${{service}}&operation={sc.EPISODE}"
    # Jaeger's tags parameter is URL-encoded JSON: {"rl.episode.status":"errored"}
    errored = f'{{"{sc.EPISODE_STATUS}":"{sc.STATUS_ERRORED}"}}'
    encoded = "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02X}" for c in errored)

    def link(title: str, url: str, tooltip: str) -> dict[str, Any]:
        return {
            "asDropdown": False,
            "icon": "external link",
            "includeVars": False,
            "keepTime": False,
            "tags": [],
            "targetBlank": True,
            "title": title,
            "tooltip": tooltip,
            "type": "link",
            "url": url,
        }

    return [
        link("Jaeger: episodes", search, "Episode traces of the selected service in Jaeger"),
        link(
            "Jaeger: errored episodes",
            f"{search}&tags={encoded}",
            "Errored episode traces of the selected service in Jaeger",
        ),
    ]


def build_dashboard() -> dict[str, Any]:
    """The dashboard model (Grafana JSON), ids assigned in panel order."""
    numbered = [{"id": i, **panel} for i, panel in enumerate(panels(), start=1)]
    return {
        "annotations": {"list": []},
        "description": "Episodes, returns, step and LLM latency, tokens and failures of "
        "agenttrace-instrumented agents (Prometheus), with failed and low-return episodes "
        "from Tempo and links to Jaeger. Generated by dashboards/generate.py: edit that.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": links(),
        "liveNow": False,
        "panels": numbered,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["agenttrace", "agents", "opentelemetry", "rl"],
        "templating": {"list": templating()},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": TITLE,
        "uid": UID,
        "version": 1,
        "weekStart": "",
    }


def render(dashboard: Mapping[str, Any]) -> str:
    """The file's exact text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --- queries, for tests and live checks --------------------------------------------------------
def _targets(dashboard: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            yield panel, target


def queries(dashboard: Mapping[str, Any] | None = None) -> list[tuple[str, str, str]]:
    """(panel title, data source uid, query) of every PromQL and TraceQL target.

    Template variable queries come last, titled ``variable <name>``; they are Grafana's
    ``label_values(selector, label)`` (see :func:`label_values_selector`), not PromQL.
    """
    dashboard = build_dashboard() if dashboard is None else dashboard
    out = []
    for panel, target in _targets(dashboard):
        uid = (target.get("datasource") or panel["datasource"])["uid"]
        expr = target.get("expr", target.get("query"))
        if isinstance(expr, str):
            out.append((panel["title"], uid, expr))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            out.append((f"variable {variable['name']}", variable["datasource"]["uid"], text))
    return out


_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")


def substitute_variables(expr: str, values: Mapping[str, str] | None = None) -> str:
    """``expr`` with Grafana variables replaced (defaults: :data:`DEFAULT_VARIABLES`).

    Raises KeyError on a variable with no value, so nothing reaches Prometheus half-filled.
    """
    table = {**DEFAULT_VARIABLES, **(values or {})}

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        return table[name]

    return _VARIABLE.sub(value, expr)


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?)\s*,\s*(\w+)\s*\)\s*$", re.DOTALL)


def label_values_selector(query: str) -> tuple[str, str] | None:
    """(series selector, label) of a ``label_values(selector, label)`` variable query."""
    match = _LABEL_VALUES.match(query)
    return (match.group(1), match.group(2)) if match else None


# --- command line ------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"JSON file (default {OUT.name})")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from what would be written"
    )
    args = parser.parse_args(argv)
    text = render(build_dashboard())
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            state = "is missing" if current is None else "is out of date"
            print(
                f"{args.out} {state}: run python dashboards/generate.py to regenerate it",
                file=sys.stderr,
            )
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {args.out} ({len(build_dashboard()['panels'])} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
