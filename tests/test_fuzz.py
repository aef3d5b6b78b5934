"""Property-based fuzzing, bounded for CI: 2,000 generated cases per target.

The targets are span lines (read, rebuilt, re-saved), trajectory lines (loaded, re-saved,
summarised) and settings (resolved from the environment). The cases come from the same
seeded mutations as the on-demand harness (tests/fuzz_cases.py, ``python
tests/fuzz_cases.py --cases 10000``). hypothesis draws the seeds and shrinks a failure to a
seed, which replays it. Each property is the contract of issue 22. Nothing raises but the
documented errors, problems are reported, and whatever is read can be written and read back.
"""

from __future__ import annotations

import io
import json
import math
import random
import warnings
from typing import Any

import pytest
from fuzz_cases import SPANS, TRAJECTORIES, CleanRun, hostile_value, make_case, make_clean_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from agenttrace import Trajectory, config
from agenttrace.cli.summary import render_summary, summarize
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.stream import assemble

EXAMPLES = 2_000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases on every run: CI never flakes on a new seed
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


_state: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _clean_run(tmp_path_factory) -> None:
    """One clean demo run for the module (kept out of the tests' arguments, which hypothesis
    prints in full on a failure)."""
    _state["clean"] = make_clean_run(tmp_path_factory.mktemp("fuzz-clean"))
    _state["work"] = tmp_path_factory.mktemp("fuzz-work")


def _clean() -> CleanRun:
    return _state["clean"]


def _damaged_lines(kind: str, seed: int, clean_bytes: bytes) -> bytes:
    """Only the lines a case damaged (cheaper than the whole file, same code paths)."""
    case = make_case(kind, seed, clean_bytes)
    clean_lines = clean_bytes.splitlines(keepends=True)
    lines = case.data.splitlines(keepends=True)
    kept = [line for line in lines if line not in clean_lines]
    return b"".join(kept) or b"\n"


@FUZZ
@given(seed=st.integers(0, 2**32 - 1))
def test_a_damaged_span_line_is_read_rebuilt_and_saved_without_raising(seed):
    path = _state["work"] / "spans.jsonl"
    path.write_bytes(_damaged_lines(SPANS, seed, _clean().spans.read_bytes()))
    problems = []
    records = list(read_otlp_json(path, on_error=problems.append))
    for trajectory in assemble(records):
        text = trajectory.to_json()
        assert Trajectory.from_json(text) == trajectory
    for problem in problems:
        assert str(problem)  # a message that says what and where


@FUZZ
@given(seed=st.integers(0, 2**32 - 1))
def test_a_damaged_trajectory_line_loads_or_is_reported_and_saves(seed):
    path = _state["work"] / "trajectories.jsonl"
    path.write_bytes(_damaged_lines(TRAJECTORIES, seed, _clean().trajectories.read_bytes()))
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_trajectories(path, on_error=problems.append)
    for trajectory in loaded:
        assert Trajectory.from_json(trajectory.to_json()) == trajectory
    render_summary(summarize(loaded), Console(file=io.StringIO(), width=120))
    assert loaded or problems or path.read_bytes().strip() == b""


def _setting_values() -> st.SearchStrategy:
    """Values of the kinds people mistype, and hostile ones."""
    numbers = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e30", "1e400", "0x10", "abc", ""])
    return st.one_of(
        numbers,
        st.text(max_size=30),
        st.integers(0, 2**32 - 1).map(
            lambda seed: json.dumps(hostile_value(random.Random(seed)))[:200]
        ),
        st.sampled_from([",,,", " , ", "true", "maybe", "ftp://x", "file:///tmp/x", "s3://"]),
    )


@FUZZ
@given(
    setting=st.sampled_from([s for s in config.SETTINGS if s.name != "redact"]),
    value=_setting_values(),
)
def test_a_setting_from_the_environment_is_accepted_or_a_config_error(setting, value):
    if "\x00" in value:
        return  # (no environment variable can hold NUL)
    try:
        resolved = config.resolve({setting.env: value})
    except config.ConfigError as error:
        assert setting.env in str(error)
        return
    chosen = getattr(resolved, setting.name)
    if isinstance(chosen, float):
        assert math.isfinite(chosen)
