"""The Collector config that spreads episodes over several ``agenttrace collect`` instances
(collectors/otelcol-loadbalancing.yaml), checked without Docker as the stack's configs are
(tests/test_stack_config.py): known components of the pinned release, every component used,
routing by trace id (an episode lives in one trace), and endpoints that are collect's gRPC
port."""

from __future__ import annotations

from test_stack_config import (
    ROOT,
    components,
    image_tag,
    load_yaml,
    pipelines,
    split_endpoint,
)
from test_stack_config import (
    test_component_types_exist_in_the_pinned_release as check_component_types,
)
from test_stack_config import test_every_defined_component_is_used as check_all_used
from test_stack_config import test_pipeline_components_are_all_defined as check_all_defined

from agenttrace.collect.service import DEFAULT_GRPC

CONFIG = ROOT / "collectors" / "otelcol-loadbalancing.yaml"


def test_the_config_names_the_pinned_collector_release() -> None:
    head = CONFIG.read_text().split("\n\n", 1)[0]
    assert image_tag("otel-collector") in head


def test_its_components_are_known_defined_and_used() -> None:
    config = load_yaml(CONFIG)
    assert {kind for kind, _ in components(config)} == {"receivers", "processors", "exporters"}
    check_all_defined(config)
    check_all_used(config)
    check_component_types(config)


def test_spans_are_routed_by_trace_to_collect_instances() -> None:
    config = load_yaml(CONFIG)
    exporter = config["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "traceID"
    otlp = exporter["protocol"]["otlp"]
    assert otlp["tls"]["insecure"] is True
    assert otlp["retry_on_failure"]["enabled"] is True, "collect's UNAVAILABLE must be retried"
    hostnames = exporter["resolver"]["static"]["hostnames"]
    assert len(hostnames) >= 2
    collect_port = split_endpoint(DEFAULT_GRPC)[1]
    for hostname in hostnames:
        host, port = split_endpoint(hostname)
        assert host.startswith("agenttrace-collect") and port == collect_port
    (traces,) = [p for p in pipelines(config).values() if "loadbalancing" in p["exporters"]]
    assert traces["receivers"] == ["otlp"]
    assert "batch" not in traces.get("processors", []), "the exporter batches per backend"
