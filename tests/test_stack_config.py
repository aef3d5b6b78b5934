"""The compose stack's wiring, checked without Docker (docker compose cannot run here or in CI).

Every file of the stack is parsed and cross-checked: images pinned, mounts that exist,
collector pipelines whose components are all defined, used and known to the pinned collector
release, endpoints that name a compose service on a port that service's own config listens
on, Grafana data sources and dashboards that agree on uids, the tail-sampling variant keeping
whole failed episodes while span metrics still count everything. Prometheus's config goes
through the real ``promtool`` and is loaded by a real ``prometheus`` on loopback.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from prometheus_server import PrometheusServer, prometheus_binary

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
TAIL_SAMPLING_OVERRIDE = ROOT / "docker-compose.tail-sampling.yml"
COLLECTOR_CONFIG = ROOT / "collectors" / "otelcol.yaml"
TAIL_SAMPLING_CONFIG = ROOT / "collectors" / "otelcol-tail-sampling.yaml"
COLLECTOR_CONFIGS = [COLLECTOR_CONFIG, TAIL_SAMPLING_CONFIG]
PROMETHEUS_CONFIG = ROOT / "stack" / "prometheus.yml"
DATASOURCES = ROOT / "dashboards" / "provisioning" / "datasources" / "datasources.yaml"
DASHBOARD_PROVIDERS = ROOT / "dashboards" / "provisioning" / "dashboards" / "dashboards.yaml"


#: The repo file each service must run, and the image whose version its header must name.
SERVICE_CONFIGS = {
    "otel-collector": COLLECTOR_CONFIG,
    "jaeger": ROOT / "stack" / "jaeger.yaml",
    "tempo": ROOT / "stack" / "tempo.yaml",
    "prometheus": PROMETHEUS_CONFIG,
}
CONFIG_IMAGES = {
    COLLECTOR_CONFIG: "otel-collector",
    TAIL_SAMPLING_CONFIG: "otel-collector",
    ROOT / "stack" / "jaeger.yaml": "jaeger",
    ROOT / "stack" / "tempo.yaml": "tempo",
    PROMETHEUS_CONFIG: "prometheus",
    DATASOURCES: "grafana",
    DASHBOARD_PROVIDERS: "grafana",
}
#: Data source uids the dashboards are written against (a contract with dashboards/*.json).
DATASOURCE_UIDS = {"prometheus": "prometheus", "tempo": "tempo", "jaeger": "jaeger"}
#: Grafana's built-in pseudo data sources, valid in any dashboard.
GRAFANA_BUILTIN_UIDS = {"grafana", "-- Grafana --", "-- Mixed --", "-- Dashboard --"}

# --- what the pinned collector release provides -------------------------------------------
# The collector cannot run here, so the component *types* (the part of an id before "/") are
# checked against the distribution of the pinned image. Confirmed for otelcol-contrib 0.145.0:
# * the contrib distribution's manifest (open-telemetry/opentelemetry-collector-releases,
#   distributions/otelcol-contrib/manifest.yaml) lists otlpreceiver, batchprocessor,
#   memorylimiterprocessor, tailsamplingprocessor, otlpexporter, fileexporter,
#   prometheusexporter, debugexporter, forwardconnector and spanmetricsconnector;
# * the OTLP gRPC exporter's type is `otlp_grpc` from core v1.50.0 / contrib v0.144.0
#   (open-telemetry/opentelemetry-collector PR 14403, "rename to otlp_grpc with deprecated
#   alias otlp"; `otlphttp` likewise became `otlp_http`, PR 14397);
# * the `logging` exporter was removed in favour of `debug`, and span metrics moved from the
#   deprecated spanmetrics processor to the spanmetrics connector.
# This is a subset: extend it, after checking the release, before using another component.
COLLECTOR_RELEASE = "0.145.0"
KNOWN_COMPONENTS = {
    "receivers": {"otlp", "prometheus", "hostmetrics", "filelog", "jaeger", "zipkin", "nop"},
    "processors": {
        "batch",
        "memory_limiter",
        "tail_sampling",
        "probabilistic_sampler",
        "attributes",
        "resource",
        "filter",
        "transform",
        "groupbytrace",
    },
    "exporters": {
        "otlp_grpc",
        "otlp_http",
        "debug",
        "nop",
        "file",
        "prometheus",
        "prometheusremotewrite",
        "zipkin",
        "loadbalancing",
    },
    "connectors": {"forward", "spanmetrics", "servicegraph", "count", "routing", "failover"},
}
#: Names that load (with a warning) or used to exist, and what replaces them.
DEPRECATED_COMPONENTS = {
    ("exporters", "otlp"): "otlp_grpc (otlp is a deprecated alias since 0.144.0)",
    ("exporters", "otlphttp"): "otlp_http (otlphttp is a deprecated alias since 0.144.0)",
    ("exporters", "logging"): "debug (the logging exporter was removed)",
    ("processors", "spanmetrics"): "the spanmetrics connector (the processor was removed)",
}
#: Connector types and the (exporter-side, receiver-side) signals they join.
CONNECTOR_SIGNALS = {
    "spanmetrics": {("traces", "metrics")},
    "forward": {("traces", "traces"), ("metrics", "metrics"), ("logs", "logs")},
}
SPANMETRICS_DIMENSIONS = {
    "rl.episode.status",
    "rl.env.name",
    "rl.task.id",
    "gen_ai.request.model",
    "gen_ai.operation.name",
}
FAILED_EPISODE_STATUSES = {"errored", "aborted", "cancelled", "incomplete"}
ALL_INTERFACES = {"0.0.0.0", "", "::", "[::]"}


# --- reading the files ----------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    with open(path) as handle:
        return yaml.safe_load(handle)


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(text: str) -> str:
    """Compose's ``${NAME:-default}`` with the defaults (the machine's environment ignored)."""

    def default(match: re.Match[str]) -> str:
        assert match.group(2) is not None, f"{match.group(0)} has no default in {text!r}"
        return match.group(2)

    return _VARIABLE.sub(default, text)


def mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, is_bind) of each volume of a service, short or long syntax."""
    result = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            source, target = str(volume.get("source", "")), str(volume["target"])
            bind = volume.get("type") == "bind"
        else:
            parts = interpolate(str(volume)).split(":")
            source, target = parts[0], parts[1]
            bind = source.startswith((".", "/", "~"))
        result.append((interpolate(source), target, bind))
    return result


def host_path(service: dict[str, Any], container_path: str) -> Path | None:
    """The repo/host file behind a container path, through the service's bind mounts."""
    wanted = PurePosixPath(container_path)
    best: tuple[int, Path] | None = None
    for source, target, bind in mounts(service):
        target_path = PurePosixPath(target)
        if bind and (wanted == target_path or target_path in wanted.parents):
            depth = len(target_path.parts)
            path = (COMPOSE_FILE.parent / source / wanted.relative_to(target_path)).resolve()
            if best is None or depth > best[0]:
                best = (depth, path)
    return best[1] if best else None


def command_list(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return command.split() if isinstance(command, str) else [str(part) for part in command]


_CONFIG_FLAGS = ("--config=", "-config.file=", "--config.file=")


def config_argument(service: dict[str, Any]) -> str:
    """The config file path a service's command line names."""
    for part in command_list(service):
        for flag in _CONFIG_FLAGS:
            if part.startswith(flag):
                return part[len(flag) :]
    raise AssertionError(f"no config flag in command {command_list(service)}")


def image_tag(service_name: str) -> str:
    return str(services()[service_name]["image"])


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (or ``http://host:port/...``) as (host, port)."""
    if "://" in endpoint:
        endpoint = endpoint.split("://", 1)[1]
    endpoint = endpoint.split("/", 1)[0]
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def listening_ports(service_name: str) -> set[int]:
    """Ports a service listens on for other containers, from its own config or defaults."""
    service = services()[service_name]
    ports: set[int] = set()

    def add(endpoint: Any) -> None:
        if isinstance(endpoint, str):
            host, port = split_endpoint(endpoint)
            if host in ALL_INTERFACES:
                ports.add(port)

    if service_name in ("otel-collector", "jaeger"):
        config = load_yaml(SERVICE_CONFIGS[service_name])
        for receiver in (config.get("receivers") or {}).values():
            for protocol in ((receiver or {}).get("protocols") or {}).values():
                add((protocol or {}).get("endpoint"))
        for exporter_id, exporter in (config.get("exporters") or {}).items():
            if exporter_id.split("/")[0] == "prometheus":
                add(exporter["endpoint"])
        for extension in (config.get("extensions") or {}).values():
            for server in ("http", "grpc"):
                add(((extension or {}).get(server) or {}).get("endpoint"))
    elif service_name == "tempo":
        config = load_yaml(SERVICE_CONFIGS["tempo"])
        server = config.get("server", {})
        if server.get("http_listen_address", "") in ALL_INTERFACES:
            ports.add(int(server.get("http_listen_port", 80)))
        for receiver in config["distributor"]["receivers"].values():
            for protocol in ((receiver or {}).get("protocols") or {}).values():
                add((protocol or {}).get("endpoint"))
    elif service_name == "prometheus":
        address = "0.0.0.0:9090"
        for part in command_list(service):
            if part.startswith("--web.listen-address="):
                address = part.split("=", 1)[1]
        add(address)
    elif service_name == "agenttrace-collect":  # agenttrace collect --http A --grpc B
        words = " ".join(command_list(service)).split()
        for flag in ("--http", "--grpc"):
            add(words[words.index(flag) + 1] if flag in words else None)
    elif service_name == "grafana":
        ports.add(int((service.get("environment") or {}).get("GF_SERVER_HTTP_PORT", 3000)))
    return ports


def components(config: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(kind, id) of every component defined in a collector config."""
    for kind in ("receivers", "processors", "exporters", "connectors"):
        for component_id in config.get(kind) or {}:
            yield kind, component_id


def pipelines(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return config["service"]["pipelines"]


def signal(pipeline_id: str) -> str:
    return pipeline_id.split("/")[0]


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """A Go duration string (``2500ms``, ``1h30m``) in seconds."""
    parts = _DURATION_PART.findall(text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Go duration: {text!r}"
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


# --- compose ----------------------------------------------------------------------------------


def test_every_image_is_pinned_to_an_exact_version() -> None:
    for name, service in services().items():
        image = service.get("image")
        assert image, f"service {name} has no image (a build would not be pinned)"
        repository, _, tag = str(image).rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest", f"{name}: {image} floats"
        # (a variant suffix names the same release: python:3.11.7-slim)
        assert re.fullmatch(r"v?\d+\.\d+\.\d+(-[a-z]+)?", tag), (
            f"{name}: {image} is not a full version"
        )


def test_every_bind_mounted_host_path_exists_in_the_repo() -> None:
    for name, service in services().items():
        for source, target, bind in mounts(service):
            if bind:
                path = (COMPOSE_FILE.parent / source).resolve()
                assert path.exists(), f"{name}: {source} (mounted at {target}) does not exist"
                assert ROOT in (path, *path.parents), f"{name}: {source} is outside the repo"


def test_named_volumes_are_declared_and_all_used() -> None:
    declared = set((compose().get("volumes") or {}).keys())
    used = {
        source
        for service in services().values()
        for source, _, bind in mounts(service)
        if not bind and source
    }
    assert used <= declared, f"undeclared named volumes: {used - declared}"
    assert declared <= used, f"declared but unused volumes: {declared - used}"
    # Data that should survive a restart lives on a named volume.
    for name, path in [
        ("tempo", "/var/tempo"),
        ("jaeger", "/badger"),
        ("prometheus", "/prometheus"),
        ("grafana", "/var/lib/grafana"),
    ]:
        targets = {target for source, target, bind in mounts(services()[name]) if not bind}
        assert path in targets, f"{name} keeps {path} in the container only"


@pytest.mark.parametrize("name", sorted(SERVICE_CONFIGS))
def test_each_service_runs_the_repo_config(name: str) -> None:
    service = services()[name]
    path = host_path(service, config_argument(service))
    assert path == SERVICE_CONFIGS[name].resolve(), (
        f"{name} runs {config_argument(service)}, which is {path}, not "
        f"{SERVICE_CONFIGS[name].relative_to(ROOT)}"
    )


def test_published_ports_are_ports_the_services_listen_on() -> None:
    published: dict[str, set[int]] = {}
    for name, service in services().items():
        for mapping in service.get("ports", []):
            container_port = int(str(mapping).split(":")[-1].split("/")[0])
            published.setdefault(name, set()).add(container_port)
            assert container_port in listening_ports(name), (
                f"{name} publishes {container_port} but listens on {listening_ports(name)}"
            )
    expected = {
        "otel-collector": {4317, 4318},
        "jaeger": {16686},
        "tempo": {3200},
        "prometheus": {9090},
        "grafana": {3000},
    }
    for name, ports in expected.items():
        assert ports <= published.get(name, set()), f"{name} does not publish {ports}"


@pytest.mark.parametrize("path", sorted(CONFIG_IMAGES), ids=lambda p: p.name)
def test_config_header_names_the_pinned_image(path: Path) -> None:
    """Bumping an image without revisiting its config (keys change between releases) fails."""
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    image = image_tag(CONFIG_IMAGES[path])
    assert image in "\n".join(header), f"{path.relative_to(ROOT)}'s header does not name {image}"


def test_dependents_wait_for_the_volume_owner_fix() -> None:
    fixed = {source for source, _, bind in mounts(services()["volume-init"]) if not bind}
    for name in ("jaeger", "tempo"):
        depends = services()[name].get("depends_on") or {}
        assert depends.get("volume-init", {}).get("condition") == (
            "service_completed_successfully"
        ), f"{name} may start before its volume belongs to uid 10001"
        volumes = {source for source, _, bind in mounts(services()[name]) if not bind}
        assert volumes <= fixed, f"volume-init does not fix {volumes - fixed}"
    command = " ".join(command_list(services()["volume-init"]))
    for _, target, _ in mounts(services()["volume-init"]):
        assert target in command, f"volume-init mounts {target} but does not chown it"


# --- collector --------------------------------------------------------------------------------


@pytest.fixture(params=COLLECTOR_CONFIGS, ids=lambda p: p.name)
def collector(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load_yaml(request.param)


def test_collector_image_is_the_release_the_component_list_was_checked_for() -> None:
    assert image_tag("otel-collector") == (
        f"otel/opentelemetry-collector-contrib:{COLLECTOR_RELEASE}"
    ), "re-check KNOWN_COMPONENTS and the config keys against the new release, then bump"


def test_pipeline_components_are_all_defined(collector: dict[str, Any]) -> None:
    for pipeline_id, pipeline in pipelines(collector).items():
        for key, kinds in [
            ("receivers", ("receivers", "connectors")),
            ("processors", ("processors",)),
            ("exporters", ("exporters", "connectors")),
        ]:
            for component_id in pipeline.get(key, []):
                assert any(component_id in (collector.get(kind) or {}) for kind in kinds), (
                    f"pipeline {pipeline_id} uses undefined {key[:-1]} {component_id}"
                )


def test_every_defined_component_is_used(collector: dict[str, Any]) -> None:
    used = {
        component_id
        for pipeline in pipelines(collector).values()
        for key in ("receivers", "processors", "exporters")
        for component_id in pipeline.get(key, [])
    }
    unused = {component_id for _, component_id in components(collector)} - used
    assert not unused, f"defined but in no pipeline (the collector warns or fails): {unused}"


def test_connectors_join_two_pipelines_of_the_right_signals(collector: dict[str, Any]) -> None:
    def using(connector_id: str, key: str) -> list[str]:
        return [p for p, spec in pipelines(collector).items() if connector_id in spec.get(key, [])]

    for connector_id in collector.get("connectors") or {}:
        sources, sinks = using(connector_id, "exporters"), using(connector_id, "receivers")
        assert sources and sinks, f"{connector_id} must export from a pipeline and feed another"
        allowed = CONNECTOR_SIGNALS[connector_id.split("/")[0]]
        for source in sources:
            for sink in sinks:
                assert source != sink, f"{connector_id} loops in {source}"
                assert (signal(source), signal(sink)) in allowed, (
                    f"{connector_id} cannot join {source} to {sink}"
                )


def test_component_types_exist_in_the_pinned_release(collector: dict[str, Any]) -> None:
    for kind, component_id in components(collector):
        component_type = component_id.split("/")[0]
        replacement = DEPRECATED_COMPONENTS.get((kind, component_type))
        assert replacement is None, f"{kind[:-1]} {component_id}: use {replacement}"
        assert component_type in KNOWN_COMPONENTS[kind], (
            f"{kind[:-1]} type {component_type!r} is not known for contrib {COLLECTOR_RELEASE}"
        )


def test_otlp_receiver_binds_all_interfaces(collector: dict[str, Any]) -> None:
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert split_endpoint(protocols["grpc"]["endpoint"]) == ("0.0.0.0", 4317)
    assert split_endpoint(protocols["http"]["endpoint"]) == ("0.0.0.0", 4318)


def test_exporter_endpoints_name_services_listening_there(collector: dict[str, Any]) -> None:
    targets = {}
    for exporter_id, exporter in collector["exporters"].items():
        endpoint = (exporter or {}).get("endpoint")
        if not endpoint:
            continue
        host, port = split_endpoint(endpoint)
        if host in ALL_INTERFACES:  # a listening exporter (prometheus), not a client
            continue
        assert host in services(), f"{exporter_id} sends to {host}, not a compose service"
        assert port in listening_ports(host), (
            f"{exporter_id} sends to {host}:{port}; {host} listens on {listening_ports(host)}"
        )
        assert (exporter.get("tls") or {}).get("insecure") is True, (
            f"{exporter_id}: the backends serve plain gRPC inside the compose network"
        )
        targets[exporter_id] = host
    assert set(targets.values()) == {"jaeger", "tempo", "agenttrace-collect"}, targets


def test_file_exporter_writes_into_the_mounted_span_folder(collector: dict[str, Any]) -> None:
    file_exporter = collector["exporters"]["file"]
    assert file_exporter.get("format", "json") == "json", "agenttrace reads OTLP/JSON lines"
    assert "compression" not in file_exporter
    assert "rotation" in file_exporter, "an unrotated span file grows without bound"
    path = PurePosixPath(file_exporter["path"])
    assert path.suffix == ".jsonl", "a folder export reads *.json, *.jsonl and *.ndjson files"
    collector_service = services()["otel-collector"]
    host = host_path(collector_service, str(path))
    assert host is not None, f"{path} is not inside a folder bind-mounted into the collector"
    assert host.parent == (ROOT / "stack-data" / "spans").resolve(), host


def test_metrics_pipeline_takes_otlp_and_span_metrics_to_prometheus(
    collector: dict[str, Any],
) -> None:
    metrics = pipelines(collector)["metrics"]
    assert set(metrics["receivers"]) == {"otlp", "spanmetrics"}, (
        "agenttrace's own metrics arrive over OTLP, span metrics from the connector"
    )
    assert metrics["exporters"] == ["prometheus"]
    exporter = collector["exporters"]["prometheus"]
    assert exporter.get("add_metric_suffixes", True) is True, "dashboards query *_total names"
    assert not (exporter.get("resource_to_telemetry_conversion") or {}).get("enabled", False)


def test_span_metrics_dimensions_and_buckets(collector: dict[str, Any]) -> None:
    spanmetrics = collector["connectors"]["spanmetrics"]
    dimensions = {dimension["name"] for dimension in spanmetrics["dimensions"]}
    assert dimensions == SPANMETRICS_DIMENSIONS
    buckets = [go_duration(bucket) for bucket in spanmetrics["histogram"]["explicit"]["buckets"]]
    assert buckets == sorted(buckets) and len(set(buckets)) == len(buckets)
    assert buckets[0] <= 0.001, "LLM calls and steps need millisecond buckets"
    assert buckets[-1] >= 3600, "whole episodes need buckets up to an hour and more"
    assert spanmetrics["histogram"].get("unit") == "s", "duration in seconds, as rl_* metrics"


def test_prometheus_scrapes_the_collector_exporter_port() -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    collector_job = jobs["otel-collector"]
    assert collector_job.get("honor_labels") is True, "keep job = service.name of the run"
    targets = [t for static in collector_job["static_configs"] for t in static["targets"]]
    for collector_config in COLLECTOR_CONFIGS:
        _, port = split_endpoint(load_yaml(collector_config)["exporters"]["prometheus"]["endpoint"])
        assert f"otel-collector:{port}" in targets, f"{collector_config.name} serves :{port}"
    for target in (t for job in jobs.values() for s in job["static_configs"] for t in s["targets"]):
        host, port = split_endpoint(target)
        if host != "localhost":
            assert host in services() and port in listening_ports(host), target
    assert "prometheus" in jobs, "Prometheus scrapes itself"


# --- tail sampling ----------------------------------------------------------------------------


def test_tail_sampling_keeps_failed_episodes_and_a_share_of_the_rest() -> None:
    sampling = load_yaml(TAIL_SAMPLING_CONFIG)["processors"]["tail_sampling"]
    policies = {policy["type"]: policy for policy in sampling["policies"]}
    status = policies["string_attribute"]["string_attribute"]
    assert status["key"] == "rl.episode.status"
    assert set(status["values"]) >= FAILED_EPISODE_STATUSES
    assert not status.get("invert_match", False)
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    share = policies["probabilistic"]["probabilistic"]["sampling_percentage"]
    assert 0 < share < 100
    assert go_duration(sampling["decision_wait"]) >= 60, "episodes outlast the 30 s default"


def test_span_metrics_and_span_files_see_the_unsampled_stream() -> None:
    config = load_yaml(TAIL_SAMPLING_CONFIG)
    by_exporter: dict[str, list[str]] = {}
    for pipeline_id, pipeline in pipelines(config).items():
        for exporter in pipeline.get("exporters", []):
            by_exporter.setdefault(exporter, []).append(pipeline_id)

    def sampled(pipeline_id: str) -> bool:
        return "tail_sampling" in pipelines(config)[pipeline_id].get("processors", [])

    for unsampled in ("spanmetrics", "file", "otlp_grpc/agenttrace"):
        for pipeline_id in by_exporter[unsampled]:
            assert not sampled(pipeline_id), f"{unsampled} is fed after sampling"
            assert "otlp" in pipelines(config)[pipeline_id]["receivers"]
    for backend in ("otlp_grpc/jaeger", "otlp_grpc/tempo"):
        assert by_exporter[backend] and all(sampled(p) for p in by_exporter[backend]), backend


def test_tail_sampling_variant_differs_only_by_sampling() -> None:
    plain, variant = load_yaml(COLLECTOR_CONFIG), load_yaml(TAIL_SAMPLING_CONFIG)
    assert variant["receivers"] == plain["receivers"]
    assert variant["exporters"] == plain["exporters"]
    assert variant["connectors"]["spanmetrics"] == plain["connectors"]["spanmetrics"]
    extra = {k: v for k, v in variant["processors"].items() if k not in plain["processors"]}
    assert set(extra) == {"tail_sampling"}
    assert pipelines(variant)["metrics"] == pipelines(plain)["metrics"]


def test_tail_sampling_override_selects_the_variant() -> None:
    override = load_yaml(TAIL_SAMPLING_OVERRIDE)
    assert set(override["services"]) == {"otel-collector"}
    merged = {**services()["otel-collector"], **override["services"]["otel-collector"]}
    assert host_path(merged, config_argument(merged)) == TAIL_SAMPLING_CONFIG.resolve()
    for key in override["services"]["otel-collector"]:
        assert key == "command", f"the override changes {key}, not just the config"


# --- backends ---------------------------------------------------------------------------------


def test_jaeger_stores_on_its_volume_and_queries_that_store() -> None:
    config = load_yaml(SERVICE_CONFIGS["jaeger"])
    backends = config["extensions"]["jaeger_storage"]["backends"]
    assert config["extensions"]["jaeger_query"]["storage"]["traces"] in backends
    assert config["exporters"]["jaeger_storage_exporter"]["trace_storage"] in backends
    assert set(config["service"]["extensions"]) == set(config["extensions"])
    for backend in backends.values():
        badger = backend.get("badger")
        if badger is not None and not badger.get("ephemeral", True):
            for directory in badger["directories"].values():
                volumes = [t for s, t, bind in mounts(services()["jaeger"]) if not bind]
                assert any(PurePosixPath(t) in PurePosixPath(directory).parents for t in volumes), (
                    f"badger writes {directory} outside a named volume"
                )
    pipeline = config["service"]["pipelines"]["traces"]
    for key in ("receivers", "processors", "exporters"):
        assert set(pipeline[key]) <= set(config[key]), key


def test_tempo_stores_on_its_volume() -> None:
    config = load_yaml(SERVICE_CONFIGS["tempo"])
    trace = config["storage"]["trace"]
    assert trace["backend"] == "local"
    volumes = [t for s, t, bind in mounts(services()["tempo"]) if not bind]
    for path in (trace["wal"]["path"], trace["local"]["path"]):
        assert any(PurePosixPath(t) in PurePosixPath(path).parents for t in volumes), path


# --- Grafana ----------------------------------------------------------------------------------


def test_datasources_have_the_contract_uids_and_reach_their_services() -> None:
    datasources = load_yaml(DATASOURCES)["datasources"]
    by_uid = {ds["uid"]: ds for ds in datasources}
    assert set(by_uid) == set(DATASOURCE_UIDS), set(by_uid)
    for uid, type_ in DATASOURCE_UIDS.items():
        assert by_uid[uid]["type"] == type_
        host, port = split_endpoint(by_uid[uid]["url"])
        assert host in services(), f"{uid}: {host} is not a compose service"
        assert port in listening_ports(host), f"{uid}: {host} does not listen on {port}"
    for ds in datasources:  # cross-links between data sources name provisioned uids
        for link in (ds.get("jsonData") or {}).values():
            if isinstance(link, dict) and "datasourceUid" in link:
                assert link["datasourceUid"] in by_uid, (ds["uid"], link)


def _dashboard_files() -> list[Path]:
    return sorted((ROOT / "dashboards").glob("*.json"))


def _datasource_references(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for value in node.values():
            yield from _datasource_references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _datasource_references(value)


def test_dashboards_use_only_provisioned_datasources() -> None:
    files = _dashboard_files()
    assert files, "no dashboards/*.json: the provisioned folder is empty (dashboards/generate.py)"
    for path in files:
        dashboard = json.loads(path.read_text())
        variables = {
            v["name"]
            for v in (dashboard.get("templating") or {}).get("list", [])
            if v.get("type") == "datasource"
        }
        references = list(_datasource_references(dashboard))
        assert references, f"{path.name} refers to no data source"
        for reference in references:
            if reference is None:
                continue  # panel default: the default data source (prometheus)
            uid = reference.get("uid") if isinstance(reference, dict) else reference
            if isinstance(uid, str) and uid.startswith("$"):
                assert uid.strip("${}") in variables, f"{path.name}: {uid} is no variable"
                continue
            assert uid in DATASOURCE_UIDS or uid in GRAFANA_BUILTIN_UIDS, (
                f"{path.name} uses data source {reference!r}, not one of {sorted(DATASOURCE_UIDS)}"
            )


def test_grafana_mounts_the_provisioning_and_dashboard_folders() -> None:
    grafana = services()["grafana"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning/datasources/datasources.yaml")
    assert provisioning == DATASOURCES.resolve()
    providers = load_yaml(DASHBOARD_PROVIDERS)["providers"]
    assert providers and all(p["type"] == "file" for p in providers)
    for provider in providers:
        folder = host_path(grafana, provider["options"]["path"])
        assert folder == (ROOT / "dashboards").resolve(), folder
    home = grafana["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        path = host_path(grafana, home)
        assert path is not None and path.is_file(), f"home dashboard {home} is not in the repo"


# --- Prometheus, for real ---------------------------------------------------------------------


def test_promtool_accepts_the_prometheus_config() -> None:
    promtool = prometheus_binary("promtool")
    result = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"promtool check config failed:\n{result.stdout}{result.stderr}"
    assert "SUCCESS" in result.stdout + result.stderr


def _on_loopback(config: dict[str, Any], port: int) -> str:
    """Our scrape config with every target pointed at the test server itself, every second."""
    config = json.loads(json.dumps(config))  # deep copy
    config.setdefault("global", {}).update(scrape_interval="1s", evaluation_interval="1s")
    for job in config["scrape_configs"]:
        job["scrape_interval"] = "1s"
        for static in job["static_configs"]:
            static["targets"] = [f"127.0.0.1:{port}"]
    return yaml.safe_dump(config)


def test_prometheus_runs_our_scrape_config() -> None:
    prometheus_binary("prometheus")
    config = load_yaml(PROMETHEUS_CONFIG)
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    with PrometheusServer(lambda port: _on_loopback(config, port)) as prometheus:
        prometheus.wait_for(f"count(up == 1) >= {len(jobs)}", timeout=30)
        up = prometheus.query("up")
        assert {row["metric"]["job"] for row in up} == jobs
        assert all(row["value"][1] == "1" for row in up), up
