"""``episode[attributes.NAME=ARG]``: a whole argument (a runner's ``reset_kwargs``) kept as an
episode attribute, through the content policy, secrets redacted, size bounded."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import run_instrumented

from agenttrace.instrument.targets import TargetError, parse_target
from agenttrace.sinks import load_trajectories

RUNNER = """
import sys

def play_episode(task, reset_kwargs):
    return len(task)

play_episode("sum", {"seed": 7, "task": "1 + 2", "task_unique_id": "t-1", "api_key": "sk-123"})
play_episode("long", {"blob": "x" * 70000})
play_episode("plain", 42)
"""


def run(tmp_path, **settings: str) -> list:
    run_instrumented(
        tmp_path,
        textwrap.dedent(RUNNER),
        name="runner.py",
        AGENTTRACE_TARGETS=(
            "runner:play_episode=episode[task_id=task,attributes.reset_kwargs=reset_kwargs]"
        ),
        AGENTTRACE_OUT=str(tmp_path / "runs"),
        **settings,
    )
    return sorted(load_trajectories(tmp_path / "runs"), key=lambda t: t.start_time)


def test_an_argument_dict_becomes_an_episode_attribute_with_secrets_redacted(tmp_path) -> None:
    first, too_long, plain = run(tmp_path)
    assert first.task_id == "sum"
    kept = json.loads(first.attributes["reset_kwargs"])
    assert kept == {"seed": 7, "task": "1 + 2", "task_unique_id": "t-1", "api_key": "[REDACTED]"}
    assert "reset_kwargs" not in too_long.attributes  # 70,000 characters: left out, warned
    assert plain.attributes["reset_kwargs"] == 42


def test_with_content_off_argument_dicts_are_withheld(tmp_path) -> None:
    first, _, plain = run(tmp_path, AGENTTRACE_CONTENT="none")
    assert "reset_kwargs" not in first.attributes
    assert plain.attributes["reset_kwargs"] == 42  # (a number is no content)


@pytest.mark.parametrize(
    "target",
    ["m:f=env.step[attributes.x=a]", "m:f=episode[attributes.=a]", "m:f=episode[attributes.1x=a]"],
)
def test_attribute_options_exist_only_on_episodes_with_a_name(target) -> None:
    with pytest.raises(TargetError, match="has no option"):
        parse_target(target)
