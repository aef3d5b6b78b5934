"""Each bad setting is reported once, in one line, and the program runs on (issue 22, part 4).

Every setting of ``config.SETTINGS`` gets a bad value of its kind (from its parser: numbers,
true/false, choices, lists, import paths, conventions, the blob store URL):

- in the environment of a small program that uses the tracing API without ``configure()``
  (also after ``shutdown()`` and in a forked worker): it exits 0, prints what it always
  prints, and stderr holds exactly one line, naming the variable and the value, and no
  traceback. A setting the pipeline reads turns tracing off (nothing written); one only the
  auto-instrumentor reads keeps its default (tracing goes on);
- as a ``configure()`` argument: ConfigError naming the setting, and after it tracing is off,
  with no default pipeline or run folder made behind the program's back.

A broken AGENTTRACE_TARGETS_FILE (nested 100,000 deep, bad TOML, unreadable) never stops the
good AGENTTRACE_TARGETS from being instrumented under opentelemetry-instrument, and the other
way round. The subprocesses run a few at a time (a thread pool) to keep the module quick.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import textwrap
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_instrumented, run_script

import agenttrace as at
from agenttrace import config, pipeline
from agenttrace.instrument import targets as targets_module
from agenttrace.instrument.auto import targets_from_environment
from agenttrace.sinks import load_trajectories

# --- bad values, by the kind of setting -------------------------------------------------------

#: Bad text for a numeric variable: each numeric setting gets one, in turn (all are used).
BAD_NUMBER_TEXTS = ("nan", "inf", "-1", "0", "1e30", "abc", "-inf", "1e400", "0x10", "10" * 20)

#: Settings whose every non-empty text is a valid value in the environment, and why.
ANY_TEXT = {
    "out": "a folder; one that cannot be written: tests/test_config_mistakes.py",
    "run_name": "made safe for a file name",
    "service_name": "an empty variable is unset (the OTEL_* rule); configure('') is tested",
    "group_id": "any id",
    "minari_dataset_id": "checked when the minari sink starts (docs/minari.md)",
    "targets": "each target is checked on its own: the targets-file tests below",
    "targets_file": "a broken file: the targets-file tests below",
}


def bad_environment_values() -> list[tuple[str, str]]:
    """(variable, bad text): one per setting, from its kind, and the issue's own cases."""
    numbers = itertools.cycle(BAD_NUMBER_TEXTS)
    found = []
    for setting in config.SETTINGS:
        kind = setting.kind
        if kind == "number":
            value = next(numbers)
        elif kind == "bool":
            value = "maybe"
        elif kind in ("choice", "callable", "conventions"):
            value = "nope"
        elif kind == "list":
            value = ",,,"
        elif setting.name == "blob_store":
            value = "nope://x"
        elif setting.name == "collect":
            value = "localhost:4318"  # no scheme: not the service's URL
        else:
            assert setting.name in ANY_TEXT, f"{setting.name}: which text is bad? ({kind})"
            continue
        found.append((setting.env, value))
    found += [
        ("AGENTTRACE_IDLE_TIMEOUT", "nan"),
        ("AGENTTRACE_QUEUE_SIZE", "1" + "0" * 30),
        ("AGENTTRACE_EXIT_TIMEOUT", "inf"),
        ("AGENTTRACE_SINKS", " , "),
        ("AGENTTRACE_BLOB_STORE", "s3://"),
        ("AGENTTRACE_EXPORT_MAX_BYTES", "10"),
    ]
    return list(dict.fromkeys(found))


BAD_ENVIRONMENT = bad_environment_values()
BY_ENV = {setting.env: setting for setting in config.SETTINGS}

#: A program that never calls configure(); the first span configures agenttrace.
PROGRAM = textwrap.dedent(
    """
    import os
    import warnings

    import agenttrace as at

    warnings.simplefilter("ignore", DeprecationWarning)  # (fork in a threaded process)

    @at.env_step
    def step(action):
        return action, 1.0, action >= 2, False, {}

    def play(seed):
        total = 0.0
        with at.episode(seed=seed):
            for action in range(3):
                with at.timestep():
                    total += step(action)[1]
        return total

    totals = [play(0)]
    at.shutdown()  # the next span configures again: the line must not come again
    totals.append(play(1))
    if hasattr(os, "fork"):
        pid = os.fork()
        if pid == 0:  # a forked worker: not again there either
            play(2)
            at.shutdown()
            os._exit(0)
        os.waitpid(pid, 0)
    print("totals", totals)
    """
)
PROGRAM_OUTPUT = "totals [3.0, 3.0]\n"


# --- the subprocesses, a few at a time ---------------------------------------------------------


@dataclass
class Run:
    folder: Path
    returncode: int
    stdout: str
    stderr: str


def _environment_run(folder: Path, variable: str, value: str) -> Run:
    env = {variable: value}
    if variable != "AGENTTRACE_EXIT_REPORT":
        env["AGENTTRACE_EXIT_REPORT"] = "false"  # only the line about the setting
    done = run_script(folder, PROGRAM, **env)
    return Run(folder, done.returncode, done.stdout, done.stderr)


#: A module whose functions AGENTTRACE_TARGETS (or a targets file) makes an episode and steps.
TARGET_MODULE = textwrap.dedent(
    """
    def step(action):
        return action, 1.0, action >= 2, False, {}

    def play(seed):
        return sum(step(action)[1] for action in range(3))
    """
)
TARGETS_PROGRAM = "import isolated_env\nprint('totals', [isolated_env.play(s) for s in range(3)])\n"
GOOD_TARGETS = "isolated_env:play=episode;isolated_env:step=env.step"


def _write_targets_file(folder: Path, case: str) -> str:
    """The broken AGENTTRACE_TARGETS_FILE of ``case``; its path."""
    if case == "deep-json":
        path = folder / "targets.json"
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "deep-toml":
        path = folder / "targets.toml"
        path.write_text("targets = " + "[" * 100_000 + "]" * 100_000 + "\n")
    elif case == "bad-toml":
        path = folder / "targets.toml"
        path.write_text('targets = ["isolated_env:play=episode"\noops = \n')
    elif case == "unreadable":
        path = folder / "missing-targets.toml"
    elif case == "not-utf8":
        path = folder / "targets.json"
        path.write_bytes(b'{"targets": ["\xff\xfe"]}')
    else:  # good file, broken AGENTTRACE_TARGETS
        path = folder / "targets.json"
        path.write_text(json.dumps({"targets": GOOD_TARGETS.split(";")}))
    return path.name


TARGETS_FILE_CASES = ("deep-json", "deep-toml", "bad-toml", "unreadable", "not-utf8")


def _targets_run(folder: Path, case: str) -> Run:
    (folder / "isolated_env.py").write_text(TARGET_MODULE)
    file = _write_targets_file(folder, case)
    targets = GOOD_TARGETS if case != "bad-targets" else "isolated_env:play=epsiode"
    done = run_instrumented(
        folder,
        TARGETS_PROGRAM,
        AGENTTRACE_TARGETS=targets,
        AGENTTRACE_TARGETS_FILE=file,
        AGENTTRACE_EXIT_REPORT="false",
        AGENTTRACE_WARN_UNCALLED_TARGETS="false",
    )
    return Run(folder, done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Future[Run]]:
    """Every subprocess of the module, started at once on a few threads; by case id."""
    workers = max(2, min(8, 2 * (os.cpu_count() or 1)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures: dict[str, Future[Run]] = {}
        for case in (*TARGETS_FILE_CASES, "bad-targets"):  # the slow ones first
            folder = tmp_path_factory.mktemp(f"targets-{case}")
            futures[f"targets:{case}"] = pool.submit(_targets_run, folder, case)
        for index, (variable, value) in enumerate(BAD_ENVIRONMENT):
            folder = tmp_path_factory.mktemp(f"env-{index}")
            futures[f"{variable}={value}"] = pool.submit(_environment_run, folder, variable, value)
        yield futures
        for future in futures.values():
            future.cancel()


def made_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "script.py")


# --- bad variables, without configure() -------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"), BAD_ENVIRONMENT, ids=[f"{v}={x!r}" for v, x in BAD_ENVIRONMENT]
)
def test_a_bad_variable_is_one_line_and_the_program_runs_on(runs, variable, value) -> None:
    run = runs[f"{variable}={value}"].result()
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == PROGRAM_OUTPUT
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[-3000:]
    [line] = lines
    assert line.startswith("agenttrace: ")
    assert variable in line and repr(value) in line, line
    setting = BY_ENV[variable]
    if isinstance(setting.parse, config.Number):
        assert setting.parse.describe() in line  # the allowed range
    if setting.instrumentor_only:  # the pipeline never reads it: tracing goes on
        assert line.endswith(f"; using the default ({config._default_text(setting)})")
        assert made_files(run.folder) == ["agenttrace_runs"]
    else:
        assert line.endswith("; tracing is off for this process")
        assert made_files(run.folder) == []  # nothing written, no run folder


def test_every_setting_gets_a_bad_variable_or_takes_any_text() -> None:
    tried = {variable for variable, _ in BAD_ENVIRONMENT}
    for setting in config.SETTINGS:
        assert (setting.env in tried) != (setting.name in ANY_TEXT), setting.name


@pytest.mark.parametrize(
    "setting", [s for s in config.SETTINGS if s.kind == "number"], ids=lambda s: s.name
)
def test_numbers_are_finite_and_in_range(setting) -> None:
    number = setting.parse
    assert isinstance(number, config.Number)
    for text in (*BAD_NUMBER_TEXTS, str(number.maximum * 2), "1.5" if number.kind is int else ""):
        if not text:
            continue
        with pytest.raises(config.ConfigError) as caught:
            config.resolve({setting.env: text})
        message = str(caught.value)
        assert setting.env in message and repr(text) in message
        assert number.describe() in message
    top = config.resolve({setting.env: str(number.maximum)})
    assert getattr(top, setting.name) == number.maximum
    low = config.resolve({setting.env: str(number.minimum)})
    assert getattr(low, setting.name) == number.minimum
    assert number.describe() in config.settings_table_markdown()  # the range in the docs


def test_numeric_defaults_are_in_their_ranges() -> None:
    for setting in config.SETTINGS:
        if setting.kind == "number" and setting.default is not None:
            assert setting.parse(setting.default) == setting.default, setting.name


# --- bad configure() arguments ------------------------------------------------------------------

EXPLICIT_BAD = {
    "number": [float("nan"), float("inf"), -1, 0, 10**30, 1e30, "abc", True, [1], 2.5],
    "bool": ["maybe", 1, "", [True]],
    "choice": ["nope", 5, "", b"full"],
    "list": [",,,", " , ", "", 5, [5], b"x", {"a": 1}],
    "callable": [5, "nope", "no_such_module_xyz:scrub"],
    "conventions": ["nope", 5, b"x", ",,,", [5]],
    "string": [5, b"x", "", "  ", 3.5, ["x"], "a\x00b"],
}


def explicit_cases() -> list[tuple[str, object]]:
    cases = []
    for setting in config.SETTINGS:
        for value in EXPLICIT_BAD[setting.kind]:
            if setting.kind == "number" and value == 2.5 and setting.parse.kind is float:
                continue  # (a fine number of seconds)
            cases.append((setting.name, value))
    cases += [("blob_store", "nope://x"), ("blob_store", "s3://"), ("sinks", ["jsonl", 5])]
    return cases


EXPLICIT = explicit_cases()


def _play_one() -> None:
    @at.env_step
    def step(action):
        return action, 1.0, True, False, {}

    with at.episode():
        with at.timestep():
            step(0)


@pytest.mark.parametrize(("name", "value"), EXPLICIT, ids=[f"{n}={v!r}" for n, v in EXPLICIT])
def test_a_bad_argument_raises_and_leaves_tracing_off(tmp_path, monkeypatch, name, value) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(at.ConfigError) as caught:
        at.configure(**{name: value})
    assert f"{name}" in str(caught.value)
    assert "\n" not in str(caught.value)
    _play_one()  # the tracing API after it: no pipeline from the environment, no files
    assert not pipeline.get_default().enabled
    assert list(tmp_path.iterdir()) == []


def test_a_failed_configure_ends_the_previous_pipeline_and_records_nothing(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="first", exit_report=False)
    _play_one()
    with pytest.raises(at.ConfigError, match="run_name"):
        at.configure(out=str(tmp_path), run_name=5)
    _play_one()  # recorded nowhere
    assert runtime._shut_down  # the previous run's files are complete
    assert [t.length for t in load_trajectories(runtime.trajectory_paths)] == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["first"]
    again = at.configure(out=str(tmp_path), run_name="second", exit_report=False)
    _play_one()  # a configure() that succeeds sets tracing up again
    again.shutdown()
    assert len(load_trajectories(again.trajectory_paths)) == 1


def test_good_arguments_of_other_types_are_taken(tmp_path) -> None:
    settings = config.resolve(
        {},
        out=tmp_path,  # a path
        sinks="jsonl, Parquet",  # a comma-separated string
        spans=("file",),
        queue_size=1e3,  # a whole float
        idle_timeout=2,  # an int number of seconds
        enabled="yes",
        blob_store=tmp_path / "blobs",
        conventions=["runner"],
    )
    assert settings.out == str(tmp_path) and settings.blob_store == str(tmp_path / "blobs")
    assert settings.sinks == ("jsonl", "parquet") and settings.spans == ("file",)
    assert settings.queue_size == 1000 and type(settings.queue_size) is int
    assert settings.idle_timeout == 2.0 and settings.enabled is True
    runtime = at.configure(out=str(tmp_path), sinks=[], run_name="spans-only")
    assert runtime.settings.sinks == ()  # an empty list in code: spans only, a choice


def test_blob_store_is_checked_at_start(tmp_path) -> None:
    for bad in ("nope://x", "s3://", "file://elsewhere/blobs"):
        with pytest.raises(config.ConfigError, match="AGENTTRACE_BLOB_STORE"):
            config.resolve({"AGENTTRACE_BLOB_STORE": bad})
    for good in (str(tmp_path / "blobs"), (tmp_path / "b").as_uri(), "memory://agenttrace-x"):
        assert config.resolve({"AGENTTRACE_BLOB_STORE": good}).blob_store == good


# --- one line per process, never a traceback ----------------------------------------------------


def test_an_unexpected_setup_failure_is_one_line_once(monkeypatch, caplog, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError(f"no writer today {tmp_path.name}")

    monkeypatch.setattr(pipeline, "_make_writer", broken)
    with caplog.at_level(logging.DEBUG, logger="agenttrace"):
        for _ in range(3):
            _play_one()
            at.shutdown()  # the next span sets up again; the line is not repeated
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None
    assert "RuntimeError: no writer today" in errors[0].getMessage()
    assert errors[0].getMessage().endswith("tracing is off for this process")


def test_a_setting_read_by_the_instrumentor_and_the_pipeline_is_reported_once(
    monkeypatch, caplog
) -> None:
    value = f"threads,nope-{os.getpid()}"
    monkeypatch.setenv("AGENTTRACE_PROPAGATE", value)
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        assert config.read_setting("propagate") is None  # the auto-instrumentor's reading
        assert config.resolve().propagate is None  # the pipeline's
        assert config.read_setting("propagate") is None
    [record] = caplog.records
    assert "AGENTTRACE_PROPAGATE" in record.getMessage() and repr(value) in record.getMessage()
    assert record.getMessage().endswith("; using the default (none)")


# --- targets files -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", TARGETS_FILE_CASES)
def test_a_broken_targets_file_leaves_the_good_targets_instrumented(runs, case) -> None:
    run = runs[f"targets:{case}"].result()
    assert run.stdout == "totals [3.0, 3.0, 3.0]\n"
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert "targets file" in lines[0] and "targets." in lines[0]  # names the file
    assert "not instrumented (the other targets are)" in lines[0]
    trajectories = load_trajectories(run.folder / "agenttrace_runs")
    assert sorted(t.length for t in trajectories) == [3, 3, 3]


def test_a_broken_target_leaves_the_targets_file_instrumented(runs) -> None:
    run = runs["targets:bad-targets"].result()
    assert run.stdout == "totals [3.0, 3.0, 3.0]\n"
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr[-3000:]
    assert "AGENTTRACE_TARGETS" in lines[0] and "epsiode" in lines[0]
    trajectories = load_trajectories(run.folder / "agenttrace_runs")
    assert sorted(t.length for t in trajectories) == [3, 3, 3]


def test_read_targets_file_never_raises(tmp_path, monkeypatch) -> None:
    cases = {
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "deep.toml": "targets = " + "[" * 100_000 + "]" * 100_000,
        "bad.toml": "targets = [\n",
        "bad.json": "{",
        "entries.json": json.dumps({"targets": [5, {"path": "m:f"}, "m:f=episode"]}),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    for name in (*cases, "binary.json", "missing.toml", "."):
        found, errors = targets_module.read_targets_file(tmp_path / name)
        assert errors, name
        assert all(str(tmp_path / name) in str(e) or name == "." for e in errors)
        if name == "entries.json":
            assert len(found) == 1 and len(errors) == 2  # the good entry still counts
    monkeypatch.setattr(targets_module, "TARGETS_FILE_MAX_BYTES", 10)
    (tmp_path / "big.json").write_text(json.dumps({"targets": ["m:f=episode"] * 3}))
    found, [error] = targets_module.read_targets_file(tmp_path / "big.json")
    assert found == [] and "larger than" in str(error)


def test_targets_from_environment_keeps_each_source_apart(tmp_path, monkeypatch) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setenv("AGENTTRACE_TARGETS_FILE", str(tmp_path / "deep.json"))
    monkeypatch.setenv("AGENTTRACE_TARGETS", "m:f=episode")
    found, [error] = targets_from_environment()
    assert [t.path for t in found] == ["m:f"]
    assert "deep.json" in str(error) and "nested too deeply" in str(error)


def test_nan_never_resolves() -> None:
    """The fuzz contract (tests/test_fuzz.py) in brief: floats that resolve are finite."""
    for setting in config.SETTINGS:
        if setting.kind == "number":
            for text in ("nan", "inf", "-inf", "1e400"):
                with pytest.raises(config.ConfigError):
                    config.resolve({setting.env: text})
    assert math.isfinite(config.resolve({}).idle_timeout)
