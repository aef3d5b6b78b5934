"""Configuration mistakes fail loudly, once: configure() raises, implicit use says one line.

Each case runs a real script with python3 and the variables set, as a user would.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from conftest import run_script

import agenttrace as at
from agenttrace import config

#: A training script that never calls configure(): the first span configures agenttrace.
#: It checks what a user relies on: results come back, its own exception reaches it.
TRAIN = textwrap.dedent(
    """
    from opentelemetry import trace
    import agenttrace as at

    @at.env_step
    def step(action):
        return {"pos": action}, 1.0, action >= 2, False, {}

    @at.episode
    def play(seed):
        made = trace.get_current_span().get_span_context().is_valid
        total = 0.0
        for action in range(3):
            with at.timestep():
                total += step(action)[1]
        return total, made

    class Boom(Exception):
        pass

    @at.agent_act
    def explode():
        raise Boom("the user's own error")

    results = [play(seed) for seed in range(3)]
    print("returns", [total for total, _ in results])
    print("spans made", any(made for _, made in results))
    try:
        explode()
    except Boom as exc:
        print("caught", exc)
    print("done")
    """
)
TRAIN_OUTPUT_UNTRACED = [
    "returns [3.0, 3.0, 3.0]",
    "spans made False",
    "caught the user's own error",
    "done",
]


def made_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "script.py")


# --- implicit configuration: one line, tracing off, the program runs on ------------------------


def test_bad_setting_under_implicit_configuration_says_one_line_and_runs_untraced(tmp_path):
    done = run_script(tmp_path, TRAIN, AGENTTRACE_SINKS="parqet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == TRAIN_OUTPUT_UNTRACED
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "AGENTTRACE_SINKS" in lines[0] and "'parqet'" in lines[0]
    assert "choose from jsonl, parquet, steps, minari, jsondir, otlp" in lines[0]
    assert "did you mean 'parquet'" in lines[0]
    assert "tracing is off" in lines[0]
    assert "Traceback" not in done.stderr
    assert made_files(tmp_path) == []  # no agenttrace_runs folder


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("AGENTTRACE_ENABLED", "maybe", "expected true or false"),
        ("AGENTTRACE_MAX_OPEN_EPISODES", "lots", "expected a whole number greater than 0"),
        ("AGENTTRACE_WRITER", "proces", "choose from auto, process, thread"),
    ],
)
def test_other_bad_settings_name_variable_value_and_accepted_values(
    tmp_path, variable, value, accepted
):
    done = run_script(tmp_path, TRAIN, **{variable: value})
    assert done.returncode == 0
    assert done.stdout.splitlines() == TRAIN_OUTPUT_UNTRACED
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert variable in lines[0] and repr(value) in lines[0] and accepted in lines[0]
    assert made_files(tmp_path) == []


def test_no_line_when_tracing_is_switched_off_anyway(tmp_path):
    done = run_script(tmp_path, TRAIN, AGENTTRACE_SINKS="parqet", AGENTTRACE_ENABLED="false")
    assert done.returncode == 0
    assert done.stdout.splitlines() == TRAIN_OUTPUT_UNTRACED
    assert done.stderr == ""
    assert made_files(tmp_path) == []


def test_output_folder_that_is_a_file_under_implicit_configuration(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    done = run_script(tmp_path, TRAIN, AGENTTRACE_OUT=str(blocker))
    assert done.returncode == 0
    assert done.stdout.splitlines() == TRAIN_OUTPUT_UNTRACED
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert str(blocker) in lines[0] and "AGENTTRACE_OUT" in lines[0]
    assert "Not a directory" in lines[0] or "File exists" in lines[0]
    assert "Traceback" not in done.stderr
    assert made_files(tmp_path) == ["runs"] and blocker.read_text() == "not a folder"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write to read-only folders"
)
def test_read_only_output_folder_under_implicit_configuration(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        done = run_script(tmp_path, TRAIN, AGENTTRACE_OUT=str(locked))
    finally:
        locked.chmod(0o755)
    assert done.returncode == 0
    assert done.stdout.splitlines() == TRAIN_OUTPUT_UNTRACED
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert str(locked) in lines[0] and "Permission denied" in lines[0]
    assert list(locked.iterdir()) == []


# --- explicit configure(): ConfigError -------------------------------------------------------

CONFIGURE = textwrap.dedent(
    """
    import agenttrace as at

    try:
        at.configure()
    except at.ConfigError as exc:
        print("ConfigError:", exc, "| OSError:", isinstance(exc, OSError))
    else:
        print("configured")
    """
)


def test_configure_raises_config_error_for_a_bad_setting(tmp_path):
    done = run_script(tmp_path, CONFIGURE, AGENTTRACE_SINKS="parqet")
    assert done.returncode == 0
    assert "ConfigError: AGENTTRACE_SINKS='parqet'" in done.stdout
    assert "choose from jsonl, parquet, steps, minari, jsondir, otlp" in done.stdout
    assert done.stderr == ""
    assert made_files(tmp_path) == []


def test_configure_raises_config_error_for_an_output_folder_that_is_a_file(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("")
    done = run_script(tmp_path, CONFIGURE, AGENTTRACE_OUT=str(blocker))
    assert done.returncode == 0
    assert done.stdout.startswith("ConfigError: cannot write to the output folder")
    assert str(blocker) in done.stdout and "AGENTTRACE_OUT" in done.stdout
    assert "Errno" in done.stdout  # the OS error
    assert "| OSError: True" in done.stdout  # callers handling file errors still catch it
    assert done.stderr == ""


def test_configure_out_argument_that_is_a_file_names_out(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("")
    with pytest.raises(at.ConfigError) as caught:
        at.configure(out=str(blocker), run_name="r")
    message = str(caught.value)
    assert str(blocker) in message and "out=" in message and "Errno" in message
    assert isinstance(caught.value, OSError)
    assert blocker.is_file()


def test_configure_checks_the_output_folder_is_writable(tmp_path, monkeypatch):
    """A folder that exists but refuses new files fails configure(), not the first episode."""
    from agenttrace import pipeline

    def refuse(folder):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(pipeline, "_check_writable", refuse)
    with pytest.raises(config.OutputFolderError, match="Permission denied"):
        at.configure(out=str(tmp_path), run_name="r")


# --- misspelt variables ---------------------------------------------------------------------

TWICE = textwrap.dedent(
    """
    import agenttrace as at
    from agenttrace.instrument.auto import targets_from_environment

    targets_from_environment()  # what the auto-instrumentor reads
    at.configure(out="runs", exit_report=False)
    at.configure(out="runs", exit_report=False)
    with at.episode():
        pass
    at.shutdown()
    print("done")
    """
)


def test_misspelt_variables_get_one_warning_each_with_the_closest_name(tmp_path):
    done = run_script(
        tmp_path,
        TWICE,
        AGENTTRACE_SINK="parquet",
        AGENTTRACE_TARGET="pkg.env:Env.step=env.step",
        # read outside SETTINGS: never flagged
        AGENTTRACE_EXPORT_TOKEN="t",
        AGENTTRACE_EXPORT_HEADERS="a=b",
        AGENTTRACE_UID="1000",
        AGENTTRACE_GID="1000",
        AGENTTRACE_SPANS_DIR="/tmp/spans",
        AGENTTRACE_REQUIRE_PROMETHEUS="1",
        AGENTTRACE_REQUIRE_NODE="1",
        AGENTTRACE_TRAJECTORIES_DIR="/tmp/trajectories",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    sink, target = sorted(lines)
    assert "AGENTTRACE_SINK " in sink and "did you mean AGENTTRACE_SINKS?" in sink
    assert "AGENTTRACE_TARGET " in target and "did you mean AGENTTRACE_TARGETS?" in target


def test_unknown_variables_keeps_settings_and_variables_read_elsewhere() -> None:
    environ = {setting.env: "x" for setting in config.SETTINGS}
    environ.update({name: "x" for name in config.OTHER_VARIABLES})
    environ.update({"HOME": "/root", "AGENTTRACE_OUTT": "x", "AGENTTRACE_COLOUR": "x"})
    found = config.unknown_variables(environ)
    assert sorted(found) == ["AGENTTRACE_COLOUR", "AGENTTRACE_OUTT"]
    assert "did you mean AGENTTRACE_OUT?" in found["AGENTTRACE_OUTT"]
    assert "docs/configuration.md" in found["AGENTTRACE_COLOUR"]


def test_unknown_configure_argument_suggests_the_setting() -> None:
    with pytest.raises(at.ConfigError, match=r"run_nam \(did you mean 'run_name'\?\)"):
        at.configure(run_nam="x")
