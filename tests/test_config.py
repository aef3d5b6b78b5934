"""Settings resolve explicit > AGENTTRACE_* > default, and bad values name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

import agenttrace as at
from agenttrace import config


def test_defaults_without_environment() -> None:
    settings = config.resolve(environ={})
    assert settings.out == "agenttrace_runs"
    assert settings.sinks == ("jsonl",)
    assert settings.content == "full"
    assert settings.enabled is True


def test_environment_overrides_defaults_and_arguments_override_environment() -> None:
    env = {
        "AGENTTRACE_OUT": "/data/runs",
        "AGENTTRACE_SINKS": "jsonl, Parquet",
        "AGENTTRACE_IDLE_TIMEOUT": "2.5",
        "AGENTTRACE_ENABLED": "no",
    }
    settings = config.resolve(environ=env)
    assert settings.out == "/data/runs"
    assert settings.sinks == ("jsonl", "parquet")
    assert settings.idle_timeout == 2.5
    assert settings.enabled is False
    explicit = config.resolve(environ=env, out="/elsewhere", sinks=["otlp"], enabled=True)
    assert (explicit.out, explicit.sinks, explicit.enabled) == ("/elsewhere", ("otlp",), True)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("AGENTTRACE_SINKS", "jsonl,csv", "csv"),
        ("AGENTTRACE_MAX_OPEN_EPISODES", "-3", "max_open_episodes"),
        ("AGENTTRACE_IDLE_TIMEOUT", "soon", "idle_timeout"),
        ("AGENTTRACE_ENABLED", "maybe", "enabled"),
        ("AGENTTRACE_CONTENT", "some", "content"),
        ("AGENTTRACE_REDACT", "no_such_module_xyz:scrub", "redact"),
    ],
)
def test_bad_environment_values_raise_naming_the_variable(variable, value, named) -> None:
    with pytest.raises(config.ConfigError) as caught:
        config.resolve(environ={variable: value})
    assert variable in str(caught.value)
    assert named in str(caught.value)


def test_bad_explicit_values_and_unknown_settings() -> None:
    with pytest.raises(config.ConfigError, match="queue_size"):
        config.resolve(environ={}, queue_size=0)
    with pytest.raises(config.ConfigError, match="unknown setting"):
        config.resolve(environ={}, colour="blue")
    with pytest.raises(config.ConfigError, match="redact"):
        config.resolve(environ={}, redact="not callable")


def test_redact_hook_from_import_path() -> None:
    settings = config.resolve(environ={"AGENTTRACE_REDACT": "operator:add"})
    assert settings.redact("rl.", "observation") == "rl.observation"


def test_configure_reads_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTTRACE_OUT", str(tmp_path))
    monkeypatch.setenv("AGENTTRACE_RUN_NAME", "from-env")
    runtime = at.configure()
    with at.episode():
        pass
    runtime.shutdown()
    assert runtime.run_dir == tmp_path / "from-env"
    assert (tmp_path / "from-env" / "trajectories.jsonl").exists()
    assert (tmp_path / "from-env" / "spans.jsonl").exists()


def test_disabled_pipeline_makes_no_spans_and_no_files(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), enabled=False)
    calls = []

    @at.env_step
    def step(action):
        calls.append(action)
        return action, 1.0, False, False, {}

    with at.episode() as episode:
        assert step(3) == (3, 1.0, False, False, {})
    runtime.shutdown()
    assert calls == [3]
    assert not episode.span.is_recording()
    assert list(tmp_path.iterdir()) == []


def test_run_name_cannot_escape_the_output_folder(tmp_path) -> None:
    out = tmp_path / "out"
    runtime = at.configure(out=str(out), run_name="../../etc/evil")
    with at.episode():
        pass
    runtime.shutdown()
    assert runtime.run_dir is not None
    assert runtime.run_dir.resolve().parent == out.resolve()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_docs_configuration_table_is_current() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert config.settings_table_markdown() in doc
