"""Every PromQL expression of the dashboards answers with data from a real agenttrace run.

A real Prometheus (Debian's package; .ci/run installs it) on 127.0.0.1 scrapes the episode
metrics of a live run every second; the run is the demo's agent through the full pipeline,
with metrics on an SDK MeterProvider served by ``opentelemetry-exporter-prometheus``, the same
names the Collector's prometheus exporter gives (docs/metrics.md). Each dashboard query,
Grafana variables filled in, must return at least one series and no NaN.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import dashboard_generator
from prometheus_server import PrometheusServer, free_port, prometheus_binary

HERE = Path(__file__).resolve().parent
SCRAPE_CONFIG = """
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: agenttrace-live
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""
#: Window of rate()/increase(): a few scrapes of a short run.
RATE_WINDOW = "30s"

gen = dashboard_generator()


@pytest.fixture(scope="module")
def live_prometheus(tmp_path_factory) -> Iterator[PrometheusServer]:
    binary = prometheus_binary("prometheus")
    port = free_port()
    out = tmp_path_factory.mktemp("live-run")
    run = subprocess.Popen(
        [sys.executable, str(HERE / "serve_demo_metrics.py"), str(port), "120", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with PrometheusServer(SCRAPE_CONFIG.replace("{port}", str(port)), binary=binary) as prom:
            prom.wait_for("sum(rl_episodes_total) >= 20", timeout=60)
            time.sleep(3)  # a few more scrapes, so every rate window holds two samples
            yield prom
    finally:
        run.terminate()
        try:
            _, stderr = run.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            run.kill()
            _, stderr = run.communicate()
        if run.returncode not in (0, -15):
            pytest.fail(f"the metrics run failed ({run.returncode}):\n{stderr[-3000:]}")


def _promql() -> list[tuple[str, str]]:
    """(title, PromQL) of every Prometheus query; a variable's label_values as its selector."""
    found = []
    for title, uid, query in gen.queries():
        if uid != "prometheus":
            continue
        selector = gen.label_values_selector(query)
        found.append((title, selector[0] if selector else query))
    return found


def test_the_dashboards_have_promql_to_check() -> None:
    titles = {title for title, _ in _promql()}
    assert len(titles) >= 10  # throughput, return, length, latency, LLM, errors, variables


@pytest.mark.parametrize(("title", "expr"), _promql(), ids=[t for t, _ in _promql()])
def test_every_dashboard_query_returns_data(live_prometheus, title, expr) -> None:
    filled = gen.substitute_variables(
        expr, {"__rate_interval": RATE_WINDOW, "__interval": RATE_WINDOW, "__range": "10m"}
    )
    result = live_prometheus.query(filled)
    assert result, f"{title}: no data for {filled}"
    values = [float(item["value"][1]) for item in result]
    assert not any(math.isnan(v) for v in values), f"{title}: NaN from {filled}: {result}"


def test_the_live_figures_are_the_runs(live_prometheus) -> None:
    """Not just any data: statuses include the failing episodes, the failed model calls carry
    their error type, and the median return lies within the buckets."""
    statuses = {
        item["metric"]["rl_episode_status"]
        for item in live_prometheus.query("sum by (rl_episode_status) (rl_episodes_total)")
    }
    assert {"completed", "errored"} <= statuses
    failed = live_prometheus.query(
        'sum by (error_type) (gen_ai_client_operation_duration_seconds_count{error_type!=""})'
    )
    # The exception's qualified class name, as the conventions ask for error.type.
    assert [item["metric"]["error_type"] for item in failed] == ["__main__.ModelTimeout"]
    median = live_prometheus.query(
        "histogram_quantile(0.5, sum by (le) (rl_episode_returns_total))"
    )
    assert -1000.0 <= float(median[0]["value"][1]) <= 1000.0
