"""The Grafana dashboard as code (dashboards/generate.py) and its committed JSON.

Checks what Grafana cannot check for us before someone opens the dashboard: the JSON is what
the generator writes, every query names a provisioned data source, PromQL parses (promtool) and
uses only agenttrace's metric and label names, and TraceQL uses only names agenttrace emits.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import dashboard_generator
from prometheus_server import prometheus_binary

from agenttrace import semconv as sc

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "dashboards" / "generate.py"
JSON_FILE = ROOT / "dashboards" / "agent-episodes.json"


gen = dashboard_generator()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    """The committed dashboard: what Grafana loads."""
    return json.loads(JSON_FILE.read_text(encoding="utf-8"))


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict in a JSON tree."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _promql(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(title, q) for title, uid, q in gen.queries(dashboard) if uid == "prometheus"]


def _traceql(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(title, q) for title, uid, q in gen.queries(dashboard) if uid == "tempo"]


# --- reproducible ------------------------------------------------------------------------------
def test_committed_json_is_what_the_generator_writes(dashboard: dict[str, Any]) -> None:
    text = gen.render(gen.build_dashboard())
    assert text == gen.render(gen.build_dashboard()), "two builds differ"
    assert text.endswith("}\n")
    assert JSON_FILE.read_text(encoding="utf-8") == text, (
        "dashboards/agent-episodes.json is stale: run python dashboards/generate.py"
    )
    assert dashboard == gen.build_dashboard()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_check_flags_a_modified_or_missing_file(tmp_path: Path) -> None:
    copy = tmp_path / "agent-episodes.json"
    written = _run("--out", str(copy))
    assert written.returncode == 0, written.stderr
    assert copy.read_text(encoding="utf-8") == gen.render(gen.build_dashboard())
    assert _run("--check", "--out", str(copy)).returncode == 0

    model = json.loads(copy.read_text(encoding="utf-8"))
    model["panels"][0]["title"] = "Edited by hand"
    copy.write_text(json.dumps(model, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    stale = _run("--check", "--out", str(copy))
    assert stale.returncode == 1
    assert "out of date" in stale.stderr

    copy.unlink()
    missing = _run("--check", "--out", str(copy))
    assert missing.returncode == 1
    assert "missing" in missing.stderr


def test_dashboard_identity(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "agent-episodes"
    assert dashboard["title"] == "Agent episodes"
    assert 39 <= dashboard["schemaVersion"] <= 41
    assert dashboard["time"] == {"from": "now-1h", "to": "now"}
    assert dashboard["refresh"] == "30s"
    assert "agenttrace" in dashboard["tags"]


# --- data sources ------------------------------------------------------------------------------
def test_every_datasource_is_a_provisioned_one(dashboard: dict[str, Any]) -> None:
    refs = [node["datasource"] for node in _walk(dashboard) if "datasource" in node]
    assert refs, "no data source references at all"
    for ref in refs:
        assert isinstance(ref, dict), f"data source by name, not {{type, uid}}: {ref!r}"
        assert ref["uid"] in {"prometheus", "tempo", "jaeger"}, ref
        assert ref["type"] == ref["uid"], ref  # the provisioned uids are the plugin types


def test_query_languages_match_their_datasource(dashboard: dict[str, Any]) -> None:
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
            if "expr" in target:
                assert target["datasource"]["uid"] == "prometheus", panel["title"]
            else:
                assert target["datasource"]["uid"] == "tempo", panel["title"]
                assert target["queryType"] == "traceql", panel["title"]
                assert target["tableType"] in {"traces", "spans"}, panel["title"]
                assert panel["type"] == "table", panel["title"]
    assert _traceql(dashboard), "no TraceQL panel"
    assert len(_promql(dashboard)) > 10


# --- TraceQL -----------------------------------------------------------------------------------
def _semconv_strings() -> set[str]:
    """Every string constant of agenttrace.semconv (inside tuples, sets and dicts too)."""
    found: set[str] = set()

    def collect(value: Any) -> None:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, (tuple, list, set, frozenset)):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                collect(key)
                collect(item)

    for name, value in vars(sc).items():
        if not name.startswith("_"):
            collect(value)
    return found


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SCOPED = re.compile(r"\b(span|resource|event|link)\.([A-Za-z_][\w.]*)")
_UNSCOPED = re.compile(r"(?<![\w.])\.([A-Za-z_][\w.]*)")
_SPAN_NAME = re.compile(r'\bname\s*(=~|!=|=)\s*"([^"]*)"')
_NUMERIC = re.compile(
    r"(?:\b(?:span|resource)|(?<![\w.]))\.(rl\.[\w.]+)\s*(<=|>=|!=|=|<|>)\s*"
    r"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
)
#: rl.* attributes agenttrace writes as doubles / as ints (agenttrace/instrument/spans.py).
DOUBLE_ATTRIBUTES = {sc.EPISODE_RETURN, sc.REWARD, sc.DISCOUNT}
INT_ATTRIBUTES = {sc.EPISODE_LENGTH, sc.TIMESTEP_INDEX}


def traceql_names(query: str) -> tuple[set[str], set[str], set[str]]:
    """(span attributes, resource attributes, span names) a TraceQL query refers to."""
    names = set()
    for op, value in _SPAN_NAME.findall(query):
        names.update(value.split("|") if op == "=~" else [value])
    code = _STRING.sub('""', query)
    span_attrs = {attr for scope, attr in _SCOPED.findall(code) if scope == "span"}
    resource_attrs = {attr for scope, attr in _SCOPED.findall(code) if scope == "resource"}
    unscoped = set(_UNSCOPED.findall(code))
    return span_attrs | unscoped, resource_attrs | unscoped, names


def numeric_literal_problems(query: str) -> list[str]:
    """Comparisons of numeric rl.* attributes with a literal of the wrong kind.

    Tempo compares a double attribute with an integer literal as never equal (and the other way
    round), so `span.rl.episode.return < 0` silently finds nothing: it must be `< 0.0`.
    """
    problems = []
    for attr, op, literal in _NUMERIC.findall(_STRING.sub('""', query)):
        is_float = any(c in literal for c in ".eE")
        if attr in DOUBLE_ATTRIBUTES and not is_float:
            problems.append(f"{attr} {op} {literal}: use a float literal ({literal}.0)")
        if attr in INT_ATTRIBUTES and is_float:
            problems.append(f"{attr} {op} {literal}: use an integer literal")
    return problems


def test_traceql_uses_only_names_agenttrace_emits(dashboard: dict[str, Any]) -> None:
    known = _semconv_strings()
    seen_attrs: set[str] = set()
    for title, query in _traceql(dashboard):
        span_attrs, resource_attrs, span_names = traceql_names(query)
        assert span_names, f"{title}: no span name filter in {query}"
        assert span_names <= known, f"{title}: unknown span names {span_names - known}"
        assert span_attrs <= known, f"{title}: unknown span attributes {span_attrs - known}"
        unknown = resource_attrs - known - {"service.name"}
        assert not unknown, f"{title}: unknown resource attributes {unknown}"
        seen_attrs |= span_attrs
    shown = {sc.EPISODE_ID, sc.TASK_ID, sc.EPISODE_RETURN, sc.EPISODE_STATUS}
    assert shown <= seen_attrs


def test_traceql_name_check_catches_a_typo() -> None:
    known = _semconv_strings()
    span_attrs, _, names = traceql_names('{ name = "episodes" && span.rl.episode.statuss = "x" }')
    assert "rl.episode.statuss" in span_attrs - known
    assert "episodes" in names - known


def test_traceql_numeric_comparisons_use_the_attribute_type(dashboard: dict[str, Any]) -> None:
    for title, query in _traceql(dashboard):
        assert numeric_literal_problems(query) == [], title
    # The check itself: it must catch what Tempo would silently match nothing with.
    assert numeric_literal_problems("{ span.rl.episode.return < 0 }")
    assert numeric_literal_problems('{ .rl.episode.return >= -5 && name = "episode" }')
    assert numeric_literal_problems("{ span.rl.episode.length > 10.0 }")
    assert not numeric_literal_problems('{ span.rl.episode.return < -1.5 && name = "x.0" }')
    assert not numeric_literal_problems("{ span.rl.episode.length >= 10 }")


def test_failed_episodes_table_filters_failed_statuses(dashboard: dict[str, Any]) -> None:
    failed = [q for title, q in _traceql(dashboard) if title.startswith("Failed")]
    assert len(failed) == 1
    for status in (sc.STATUS_ERRORED, sc.STATUS_ABORTED, sc.STATUS_CANCELLED):
        assert status in failed[0]
    assert f'name = "{sc.EPISODE}"' in failed[0]


# --- PromQL ------------------------------------------------------------------------------------
def _as_promql(query: str) -> str:
    """A variable's label_values(selector, label) checks as its selector; the rest as is."""
    selector = gen.label_values_selector(query)
    return selector[0] if selector else query


def test_promql_parses(dashboard: dict[str, Any], tmp_path: Path) -> None:
    promtool = prometheus_binary("promtool")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": gen.substitute_variables(_as_promql(q))}
        for i, (_, q) in enumerate(_promql(dashboard))
    ]
    # JSON is YAML: promtool reads it as a rules file.
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout + result.stderr


_SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENTIFIER = re.compile(r"([a-zA-Z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}


def promql_names(expr: str) -> tuple[list[tuple[str, dict[str, str]]], set[str], set[str]]:
    """(selectors as (metric, {label: op+value}), other metric names, label names) of expr."""
    selectors = []
    labels: set[str] = set()
    for metric, body in _SELECTOR.findall(expr):
        matchers = {label: op + value for label, op, value in _MATCHER.findall(body)}
        selectors.append((metric, matchers))
        labels |= set(matchers)
    rest = _SELECTOR.sub(" ", expr)
    for group in _GROUPING.findall(rest):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    rest = _GROUPING.sub(" ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", _STRING.sub(" ", rest))  # ranges and strings
    bare = {
        name
        for name, call in _IDENTIFIER.findall(rest)
        if not call and name not in _KEYWORDS and name not in {"Inf", "NaN"}
    }
    return selectors, bare, labels


def test_promql_uses_only_agenttrace_metrics(dashboard: dict[str, Any]) -> None:
    for title, query in _promql(dashboard):
        selectors, bare, labels = promql_names(_as_promql(query))
        assert selectors, f"{title}: no selector in {query}"
        assert not bare, f"{title}: metric names outside a selector {bare}: {query}"
        for metric, matchers in selectors:
            assert metric in gen.METRIC_NAMES, f"{title}: unknown metric {metric!r}"
            assert matchers.get("otel_scope_name") == "=agenttrace", f"{title}: {query}"
            if title != "variable job":  # the variable that defines $job
                assert matchers.get("job") == "=~$job", f"{title}: {query}"
        assert labels <= gen.LABEL_NAMES, f"{title}: unknown labels {labels - gen.LABEL_NAMES}"


def test_promql_name_check_catches_a_stray_metric() -> None:
    selectors, bare, labels = promql_names(
        'sum by (le, model) (rate(rl_episode_returns_bucket{job=~"$job"}[5m])) / up'
    )
    assert selectors[0][0] not in gen.METRIC_NAMES
    assert bare == {"up"}
    assert labels == {"le", "model", "job"}


def test_rates_use_the_rate_interval(dashboard: dict[str, Any]) -> None:
    """rate() needs two samples in its window: Grafana's $__rate_interval guarantees that."""
    for title, query in _promql(dashboard):
        for window in re.findall(r"\[([^\]]+)\]", query):
            assert window in {"$__rate_interval", "$__range"}, f"{title}: [{window}]"


_RANGE_FUNCTION = re.compile(r"\b(\w+)\(\s*([a-zA-Z_:][\w:]*)\s*\{[^}]*\}\s*\[")


def test_counters_are_rated_and_gauges_deltaed(dashboard: dict[str, Any]) -> None:
    """rate() reads a gauge that falls (a running sum of negative returns) as counter resets;
    delta() of a counter ignores its resets. So counters are rated, gauges deltaed."""
    seen = set()
    for title, query in _promql(dashboard):
        for function, metric in _RANGE_FUNCTION.findall(query):
            if metric in gen.GAUGES:
                assert function == "delta", f"{title}: {function}({metric}...)"
            else:
                assert metric in gen.COUNTERS, f"{title}: {metric}"
                assert function in {"rate", "increase"}, f"{title}: {function}({metric}...)"
            seen.add(metric)
    assert seen >= gen.GAUGES and gen.EPISODES in seen


def test_no_expression_mixes_rates_with_totals(dashboard: dict[str, Any]) -> None:
    """A total over a rate is off by the window in seconds: delta/increase, or rate, not both."""
    for title, query in _promql(dashboard):
        functions = {function for function, _ in _RANGE_FUNCTION.findall(query)}
        assert not ({"rate"} & functions and {"delta", "increase"} & functions), (title, query)


def test_error_rates_read_zero_without_errors(dashboard: dict[str, Any]) -> None:
    """A share of failures has no failing series to sum when nothing failed: `or vector(0)`."""
    shares = [q for _, q in _promql(dashboard) if 'error_type!=""' in q or "errored" in q]
    assert len(shares) == 4  # stat and time series, for episodes and for LLM calls
    for query in shares:
        assert "or vector(0)) / sum(" in query, query


def test_substitute_variables() -> None:
    expr = 'rate(x{job=~"$job", a="${service}", b="[[job]]"}[$__rate_interval]) [$__range]'
    assert gen.substitute_variables(expr) == ('rate(x{job=~".*", a="agenttrace", b=".*"}[1m]) [1h]')
    assert gen.substitute_variables("x[$__interval]", {"__interval": "15s"}) == "x[15s]"
    with pytest.raises(KeyError):
        gen.substitute_variables("x{a=~'$nope'}")
    for _, _, query in gen.queries():
        assert "$" not in gen.substitute_variables(query)


# --- layout and links --------------------------------------------------------------------------
def test_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert ids == list(range(1, len(panels) + 1))
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        title = panel.get("title")
        assert title, f"panel {panel['id']} has no title"
        assert panel.get("description"), title
        assert panel.get("datasource", {}).get("uid"), title
        assert panel["targets"], title
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{title} overlaps {cells[(x, y)]}"
                cells[(x, y)] = title
    for panel in panels:
        if panel["type"] in {"timeseries", "stat"}:
            assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]


def test_panels_cover_the_issue(dashboard: dict[str, Any]) -> None:
    by_title = {panel["title"]: panel for panel in dashboard["panels"]}
    exprs = {
        title: " ".join(t.get("expr", "") for t in p["targets"]) for title, p in by_title.items()
    }
    assert "rl_episode_status" in exprs["Episode throughput by status"]
    throughput = by_title["Episode throughput by status"]["fieldConfig"]["defaults"]["custom"]
    assert throughput["stacking"]["mode"] == "normal"
    for q in ("0.1", "0.5", "0.9"):
        quantile = f"histogram_quantile({q}, sum by (le) (rate({gen.RETURN_BUCKETS}{{"
        assert quantile in exprs["Episode return"]
    assert f"delta({gen.RETURN_SUM}{{" in exprs["Episode return"]
    assert "histogram_quantile(0.99" in exprs["Step latency"]
    assert "gen_ai_request_model" in exprs["LLM call latency by model"]
    assert "gen_ai_token_type" in exprs["LLM tokens by type"]
    assert by_title["Error rate"]["fieldConfig"]["defaults"]["unit"] == "percentunit"
    stats = [panel["title"] for panel in dashboard["panels"] if panel["type"] == "stat"]
    assert {"Episodes / min", "Episode error rate", "Median return"} <= set(stats)
    assert all(panel["gridPos"]["y"] == 0 for panel in dashboard["panels"][: len(stats)])


def test_jaeger_links(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    jaeger_url = variables["jaeger_url"]
    assert jaeger_url["type"] in {"textbox", "constant"}
    assert jaeger_url["query"] == "http://localhost:16686"
    assert variables["job"]["includeAll"] and variables["job"]["allValue"] == ".*"
    urls = [link["url"] for link in dashboard["links"]]
    assert any(url.startswith("${jaeger_url}/search?service=${service}") for url in urls), urls
    tables = [panel for panel in dashboard["panels"] if panel["type"] == "table"]
    assert tables
    for table in tables:
        links = [
            link
            for override in table["fieldConfig"]["overrides"]
            for prop in override["properties"]
            if prop["id"] == "links"
            for link in prop["value"]
        ]
        assert any(link["url"] == "${jaeger_url}/trace/${__value.raw}" for link in links), table[
            "title"
        ]
