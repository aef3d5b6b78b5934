"""Fresh virtual environments for the install tests: only what a documented command installs.

The tests run in an interpreter that has the ``test`` extra, which installs far more than any
one extra or example needs (httpx, aiohttp, ray, ...), so a missing dependency never shows
there. :func:`venv_for` makes a new ``python3 -m venv``, activates it the way ``activate``
would, and runs one install command in it, from the root of a copy of this repository (the
working tree's files as git sees them: tracked and untracked, not ignored). Each command's
venv is made once per test session and shared by every test that asks for the same command.

Commands run under ``bash`` from a copy rather than from the repository itself because the
documented commands write there: editable and regular installs leave ``*.egg-info`` and
``build/``, and the examples write ``agenttrace_runs/`` and their records into the folder
they are run from. A copy keeps the checkout clean and lets test sessions run side by side.

Network: pip reaches the package index (its configuration is the machine's, as for any
venv); pip's cache makes that quick once ``.ci/run`` has installed the ``test`` extra.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The two runs of an example test: in this interpreter, and as its README says in a fresh venv
#: (slow: an install). ``@pytest.fixture(params=HERE_AND_README)``.
HERE_AND_README = [
    "here",
    pytest.param("readme", marks=[pytest.mark.slow, pytest.mark.timeout(900)]),
]
INSTALL_TIMEOUT = 900.0  # seconds; an install from a warm pip cache takes 20-60

#: Variables of the caller that would leak its interpreter, its packages or its settings into
#: the venv's processes (the install tests set what they need themselves).
_DROPPED = {"PYTHONPATH", "PYTHONHOME", "PYTHON", "VIRTUAL_ENV", "PYTHONSTARTUP"}
_DROPPED_PREFIXES = ("AGENTTRACE_", "OTEL_")
#: Console scripts of the test interpreter: a folder holding one of them is left off PATH, so
#: a script the venv lacks is not found there instead.
_FOREIGN_SCRIPTS = ("opentelemetry-instrument", "agenttrace")


@dataclass
class Venv:
    path: Path
    install: str  # the command that was run in it
    log: str = field(default="", repr=False)  # the install's output

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def environment(self, **extra: str) -> dict[str, str]:
        """The caller's environment with this venv activated, less the variables that would
        leak the test interpreter in, plus ``extra``."""
        env = shell_environment(VIRTUAL_ENV=str(self.path), **extra)
        env["PATH"] = os.pathsep.join([str(self.bin), env["PATH"]])
        return env

    def run(
        self,
        script: str,
        cwd: Path,
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        kill_group: bool = False,
    ) -> subprocess.CompletedProcess:
        """``bash -euo pipefail -c script`` in this venv. Its process group is killed on a
        timeout, or always with ``kill_group`` (a server a command left behind)."""
        return run_script(script, cwd, env or self.environment(), timeout, kill_group)


def shell_environment(**extra: str) -> dict[str, str]:
    """The caller's environment less the variables and PATH entries that would leak the test
    interpreter in (what a new terminal on this machine would have), plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)
    }
    env["PATH"] = os.pathsep.join(_foreign_free_path())
    env.update(extra)
    return env


def run_script(
    script: str, cwd: Path, env: dict[str, str], timeout: float, kill_group: bool = False
) -> subprocess.CompletedProcess:
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so everything it started can go
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"timed out after {timeout} s: {script}\n{stderr[-3000:]}")
    finally:
        if kill_group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _foreign_free_path() -> list[str]:
    """The caller's PATH without the test interpreter's script folders."""
    own = {Path(sys.executable).parent.resolve(), Path(sysconfig.get_path("scripts")).resolve()}
    kept = []
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry:
            continue
        folder = Path(entry)
        if folder.resolve() in own or any((folder / s).exists() for s in _FOREIGN_SCRIPTS):
            continue
        kept.append(entry)
    return kept


#: Left out of a copy when git cannot list the files (a source tree without .git).
_IGNORED = shutil.ignore_patterns(
    ".git", "__pycache__", "*.egg-info", "build", "dist", "agenttrace_runs", ".pytest_cache",
    ".ruff_cache", ".hypothesis", "*.sqlite", ".venv", "venv",
)  # fmt: skip


def copy_repository(destination: Path) -> Path:
    """The working tree's files (tracked and untracked, not git-ignored) copied to
    ``destination``: what a fresh clone with the same changes would hold."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO, destination, ignore=_IGNORED)
        return destination
    destination.mkdir(parents=True)
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        source = REPO / name
        if not source.is_file():  # deleted in the working tree, or a submodule
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return destination


_venvs: dict[str, Venv] = {}
_failures: dict[str, str] = {}
_trees: dict[str, Path] = {}


def install_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's copy of the repository that every install command runs from (editable
    installs point into it)."""
    if "install" not in _trees:
        _trees["install"] = copy_repository(tmp_path_factory.mktemp("repo") / "agenttrace")
    return _trees["install"]


def venv_for(install: str, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A new venv in which ``install`` (a shell command such as ``python3 -m pip install -e
    '.[openai]'``) ran with the venv activated, from the root of :func:`install_tree`.
    Made once per command per session; a failed install fails every test that asks again."""
    if install in _failures:
        pytest.fail(_failures[install])
    if install in _venvs:
        return _venvs[install]
    tree = install_tree(tmp_path_factory)
    folder = tmp_path_factory.mktemp("venv") / "venv"
    # From a venv, ``-m venv`` makes a venv of the base interpreter: no test packages in it.
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(folder)], capture_output=True, text=True
    )
    if made.returncode != 0:
        _failures[install] = f"python3 -m venv failed:\n{made.stderr[-3000:]}"
        pytest.fail(_failures[install])
    venv = Venv(folder, install)
    done = venv.run(install, tree, timeout=INSTALL_TIMEOUT)
    venv.log = done.stdout + done.stderr
    if done.returncode != 0:
        _failures[install] = f"{install!r} failed ({done.returncode}):\n{venv.log[-4000:]}"
        pytest.fail(_failures[install])
    _venvs[install] = venv
    if len(_venvs) == 1:  # a few hundred MB each: gone when the session ends
        atexit.register(_remove_venvs)
    return venv


def _remove_venvs() -> None:
    for venv in _venvs.values():
        shutil.rmtree(venv.path, ignore_errors=True)


# --- an example's README ----------------------------------------------------------------------

_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass
class ReadmeCommands:
    install: str  # the one install command, the first code block after the title
    run: str  # every later sh/bash block, in order, as one script


def readme_commands(readme: Path) -> ReadmeCommands:
    """The commands an example's README prints. Its first lines after the title are the
    install command (one ``python3 -m pip install`` line in an sh block); its later sh and bash
    blocks are run in one shell, in order, from the repository root."""
    text = readme.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# "), f"{readme}: starts with its title"
    blocks = list(_BLOCK.finditer(text))
    assert blocks, f"{readme}: no code block"
    first = blocks[0]
    between = text[len(lines[0]) : first.start()].strip()
    assert len(between.splitlines()) <= 2, f"{readme}: the install command comes first"
    assert first.group(1) == "sh", f"{readme}: the install block is an sh block"
    install = first.group(2).strip()
    assert "\n" not in install and install.startswith("python3 -m pip install "), install
    scripts = [m.group(2) for m in blocks[1:] if m.group(1) in ("sh", "bash")]
    assert scripts, f"{readme}: no commands to run"
    return ReadmeCommands(install, "\n".join(scripts))


def run_readme(
    example: str,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    timeout: float,
    kill_group: bool = False,
    **env: str,
) -> tuple[Path, subprocess.CompletedProcess]:
    """examples/EXAMPLE/README.md followed to the letter: its run commands in a fresh venv
    where only its install command ran, from the root of a new copy of the repository (the
    example writes its output there). ``env``: variables of the user's shell (an API key).
    The copy's root and the finished commands; they must have succeeded."""
    commands = readme_commands(REPO / "examples" / example / "README.md")
    venv = venv_for(commands.install, tmp_path_factory)
    root = copy_repository(tmp_path_factory.mktemp(f"{example}-readme") / "agenttrace")
    done = venv.run(
        commands.run, root, timeout=timeout, env=venv.environment(**env), kill_group=kill_group
    )
    assert done.returncode == 0, f"{commands.run}\n{done.stderr[-3000:]}"
    return root, done
