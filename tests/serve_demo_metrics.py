"""Serve a live agenttrace run's episode metrics for Prometheus to scrape (a test's helper).

``python tests/serve_demo_metrics.py PORT SECONDS OUT``: listens on 127.0.0.1:PORT and plays
the demo's episodes in small batches through the real agenttrace pipeline, with its metrics
on an SDK MeterProvider read by ``opentelemetry-exporter-prometheus``. Each batch adds one
episode whose model call fails, so failure series exist too. Exits after SECONDS at most;
the test that starts it stops it sooner.
"""

from __future__ import annotations

import asyncio
import sys
import time

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

import agenttrace as at
from agenttrace.cli.demo import run_episodes


class ModelTimeout(Exception):
    pass


def main() -> None:
    port, seconds, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    server, _thread = start_http_server(port, addr="127.0.0.1")
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    runtime = at.configure(out=out, meter_provider=provider)
    deadline = time.monotonic() + seconds
    batch = 0
    while time.monotonic() < deadline:
        asyncio.run(run_episodes(6, 3, seed=batch))
        try:
            with at.episode(task_id=f"failing-{batch}", env_name="failing-env"):
                with at.timestep(), at.llm_call(model="flaky-model", provider="test"):
                    raise ModelTimeout("the model did not answer")
        except ModelTimeout:
            pass
        runtime.force_flush()  # every finished episode counted before the next scrape
        print(f"batch {batch} done", flush=True)
        batch += 1
        time.sleep(0.5)
    runtime.shutdown()
    server.shutdown()


if __name__ == "__main__":
    main()
