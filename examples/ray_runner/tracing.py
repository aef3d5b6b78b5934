"""The runner's own tracer, as the reference runner has one (user code: no agenttrace).

Off unless ``RUNNER_TRACING=1``. On, it uses the process's global TracerProvider, setting an
SDK one when there is none yet (sending each span over OTLP/HTTP as it ends when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set: Ray ends actor processes without running exit
handlers, so a batching processor could lose its last spans), and the runner writes its
spans with its own names: ``episode`` (``task_id``, ``reset_kwargs``, and at the end
``episode_id`` and ``error_info``), ``env.reset``, ``agent.init_after_reset``, ``timestep``
(``timestep_idx``), ``get_tool_schemas``, the model call (``chat <model>``, OpenTelemetry
GenAI attributes, as an instrumented LLM client writes it) and ``env.step`` (``reward``,
``done``).
"""

from __future__ import annotations

import os

from opentelemetry import trace


def runner_tracer() -> trace.Tracer:
    """The tracer the runner writes its spans with (a no-op one when tracing is off)."""
    if os.environ.get("RUNNER_TRACING") != "1":
        return trace.NoOpTracer()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(resource=Resource.create({"service.name": "ray-runner"}))
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor

            provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    return trace.get_tracer("ray_runner")
