"""The README's Quickstart, exactly as printed, on a copy of the repository.

Its first command makes a venv in the clone, installs agenttrace there and runs the demo; on a
fresh machine that is the user's first contact, so it runs here from a new terminal's
environment (none of the test interpreter's packages or scripts reachable).
"""

from __future__ import annotations

import re

import pytest
from fresh_venv import REPO, copy_repository, run_script, shell_environment

from agenttrace.sinks import load_trajectories

pytestmark = pytest.mark.slow


def quickstart_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)]


def test_the_quickstart_has_two_commands_and_the_second_is_ci():
    commands = quickstart_commands()
    assert len(commands) == 2
    assert commands[1] == "./.ci/run"
    assert "agenttrace demo" in commands[0]


def test_the_first_quickstart_command_runs_the_demo_from_a_fresh_clone(tmp_path):
    clone = copy_repository(tmp_path / "clone")
    command = quickstart_commands()[0]
    done = run_script(command, clone, shell_environment(), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nothing lost" in done.stdout
    (folder,) = (clone / "agenttrace_runs").iterdir()
    assert folder.name.startswith("demo-")  # what the README says it writes
    trajectories = load_trajectories(folder)
    assert len(trajectories) == 50
    assert f"trajectories: agenttrace_runs/{folder.name}/trajectories.jsonl" in done.stdout
