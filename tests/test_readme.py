"""The README's snippets work exactly as printed.

Its Python blocks run one after the other in one fresh interpreter, as a reader pastes them;
what they print and write is checked against CartPole played here without agenttrace. Every
``agenttrace ...`` command in its shell blocks must parse, and every local link must resolve.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import run_script

from agenttrace.cli.main import build_parser
from agenttrace.sinks import load_trajectories

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def cartpole_truth(seed: int) -> tuple[list[np.ndarray], list[int], list[float]]:
    """Observations acted on, actions and rewards of one episode, with no tracing at all."""
    env = gym.make("CartPole-v1")
    observation, _ = env.reset(seed=seed)
    observations, actions, rewards = [], [], []
    done = False
    while not done:
        action = int(observation[2] > 0)
        observations.append(observation)
        actions.append(action)
        observation, reward, terminated, truncated, _ = env.step(action)
        rewards.append(float(reward))
        done = terminated or truncated
    return observations, actions, rewards


def test_the_python_snippets_run_as_printed(tmp_path):
    blocks = fenced_blocks(README.read_text(), "python")
    assert len(blocks) >= 3
    result = run_script(tmp_path, "\n\n".join(blocks), name="readme_snippets.py")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    seeds = (0, 1, 2)  # the context-manager episode, then play() with seeds 1 and 2
    truths = [cartpole_truth(seed) for seed in seeds]
    printed = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert len(printed) == len(seeds)
    for (_, status, episode_return, steps, *_), (_, _, rewards) in zip(
        printed, truths, strict=True
    ):
        assert status == "completed"
        assert float(episode_return) == sum(rewards)
        assert int(steps) == len(rewards)

    # One line at exit says where the episodes went; the file it names holds them.
    (report,) = [line for line in result.stderr.splitlines() if line.startswith("agenttrace:")]
    match = re.fullmatch(r"agenttrace: 3 episodes -> (\S+trajectories\.jsonl)", report)
    assert match, report
    trajectories = load_trajectories(tmp_path / match.group(1))
    for trajectory, (observations, actions, rewards) in zip(trajectories, truths, strict=True):
        assert trajectory.task_id == "balance"
        assert [s.action for s in trajectory.steps] == actions
        assert [s.reward for s in trajectory.steps] == rewards
        for step, observation in zip(trajectory.steps, observations, strict=True):
            np.testing.assert_array_equal(step.observation, observation)
            assert step.observation.dtype == observation.dtype
    # play() asks the model once per step: each step holds its LLM call.
    for trajectory in trajectories[1:]:
        assert all(len(step.llm_calls) == 1 for step in trajectory.steps)
        assert trajectory.steps[0].llm_calls[0].output_messages


def shell_commands(text: str) -> list[str]:
    """The command lines of the shell blocks, continuation lines joined."""
    commands = []
    for block in fenced_blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("   #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def test_every_agenttrace_command_in_the_readme_parses():
    commands = shell_commands(README.read_text())
    parser = build_parser()
    checked = 0
    for command in commands:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        parts: list[list[str]] = [[]]
        for token in lexer:
            if token in ("&&", ";", "|", "||"):
                parts.append([])
            else:
                parts[-1].append(token)
        for words in parts:
            part = " ".join(words)
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value prefixes
                words = words[1:]
            if words[:1] == ["agenttrace"]:
                try:
                    parser.parse_args(words[1:])
                except SystemExit as exc:  # argparse's way to reject a command line
                    pytest.fail(f"README command does not parse: {part!r} ({exc})")
                checked += 1
    assert checked >= 6


def test_every_local_link_resolves():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
    for needed in ("docs/tracing-api.md", "examples/README.md"):
        assert needed in local
