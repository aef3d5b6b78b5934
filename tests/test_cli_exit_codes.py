"""Every command follows one exit-code table, and says a failure in one line.

The table (agenttrace.cli.exits, docs/cli.md, ``agenttrace --help``): 0 ok, 1 failed, 2 usage,
3 partial. Each case runs the real command in a fresh process, as a user would: good input
exits 0; bad usage exits 2 with one line on stderr; a failure exits 1 with one line, never a
traceback; a missing optional package (made missing for real: a ``sitecustomize`` on the
path makes its import fail) exits 1 with one line naming the package and the pip extra;
some bad records or rows, the rest written, exit 3.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import clean_environ

import agenttrace as at
from agenttrace.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE
from agenttrace.instrument.wrappers import TracedEnv
from agenttrace.sinks import load_trajectories

#: Makes ``import NAME`` fail for each NAME in $BLOCK_IMPORTS, as if it were not installed.
BLOCKER = """\
import os
import sys

_BLOCKED = set(filter(None, os.environ.get("BLOCK_IMPORTS", "").split(",")))


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


@dataclass
class Done:
    code: int
    out: str
    err: str

    def one_line(self) -> str:
        """The single line on stderr (and no traceback)."""
        assert "Traceback" not in self.err, self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


def agenttrace(cwd: Path, *argv: str, blocked: tuple[str, ...] = (), **env: str) -> Done:
    """``python -m agenttrace ARGV`` in ``cwd``, from a clean environment plus ``env``; with
    ``blocked``, those packages cannot be imported."""
    if blocked:
        folder = cwd / "not-installed"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(BLOCKER)
        path = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**env, "PYTHONPATH": os.pathsep.join(path), "BLOCK_IMPORTS": ",".join(blocked)}
    done = subprocess.run(
        [sys.executable, "-m", "agenttrace", *argv],
        cwd=cwd,
        env=clean_environ(MINARI_DATASETS_PATH=str(cwd / "minari"), **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return Done(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A demo run folder (the demo exits 0), with its trajectories also as Parquet."""
    out = tmp_path_factory.mktemp("runs")
    done = agenttrace(out, "demo", "-n", "4", "--seed", "2", "--out", ".", "--run-name", "r")
    assert done.code == EXIT_OK, done.err
    assert done.err == ""
    run = out / "r"
    parquet = run / "trajectories.parquet"
    done = agenttrace(out, "export", "--from", str(run / "spans.jsonl"), "--out", str(parquet))
    assert done.code == EXIT_OK, done.err
    return run


@pytest.fixture
def cwd(tmp_path) -> Path:
    return tmp_path


# --- 0: ok ------------------------------------------------------------------------------------


def test_each_command_with_good_input_exits_0(run, cwd) -> None:
    spans, trajectories = str(run / "spans.jsonl"), str(run / "trajectories.jsonl")
    done = agenttrace(cwd, "export", "--from", spans, "--out", "t.jsonl")
    assert (done.code, done.err) == (EXIT_OK, ""), done.err
    assert "wrote 4 episodes to t.jsonl" in done.out
    done = agenttrace(cwd, "inspect", trajectories)
    assert (done.code, done.err) == (EXIT_OK, ""), done.err
    assert "agenttrace inspect: 4 episodes from" in done.out
    episode = load_trajectories(trajectories)[0].episode_id
    (cwd / "grades.csv").write_text(f"episode_id,value\n{episode},1.0\n")
    done = agenttrace(cwd, "score", "--from", "grades.csv", AGENTTRACE_OUT=str(cwd / "scores"))
    assert done.code == EXIT_OK, done.err
    assert "agenttrace score: 1 score recorded from grades.csv" in done.out  # (singular)
    for argv in (["--version"], ["--help"], ["export", "--help"], ["score", "--help"]):
        done = agenttrace(cwd, *argv)
        assert (done.code, done.err) == (EXIT_OK, ""), argv


# --- 2: usage ---------------------------------------------------------------------------------

USAGE = [
    ([], "agenttrace: error: no command given: choose one of demo, inspect, export, score"),
    (["frobnicate"], "agenttrace: error: argument COMMAND: invalid choice: 'frobnicate'"),
    (["demo", "--episodes", "0"], "agenttrace demo: error: argument --episodes/-n: must be"),
    (["export", "--out", "t.jsonl"], "agenttrace export: error: the following arguments are"),
    (
        ["export", "--from", "{spans}", "--out", "t.jsonl", "--format", "parquet"],
        "'parquet' is a file format: the suffix of --out chooses it (--out trajectories.parquet)",
    ),
    (["export", "--from", "{spans}", "--out", "t.csv"], "agenttrace export: error: "),
    (["export", "--from", "{spans}", "--out", "t.jsonl", "--since", "soon"], "'soon' is neither"),
    (["export", "--from", "{trajectories}", "--out", "t.jsonl"], "is a trajectories file"),
    (["export", "--from", "{spans}", "--format", "minari"], "needs --dataset-id"),
    (["inspect"], "agenttrace inspect: error: the following arguments are required: FILE"),
    (["inspect", "{trajectories}", "--status", "nope"], "unknown status nope"),
    (["score"], "agenttrace score: error: the following arguments are required: --from"),
]


@pytest.mark.parametrize(("argv", "said"), USAGE, ids=[" ".join(a) or "none" for a, _ in USAGE])
def test_bad_usage_exits_2_in_one_line(run, cwd, argv, said) -> None:
    paths = {"spans": run / "spans.jsonl", "trajectories": run / "trajectories.jsonl"}
    done = agenttrace(cwd, *(word.format(**paths) for word in argv))
    assert done.code == EXIT_USAGE, done.err
    assert said in done.one_line()
    assert done.out == ""
    assert list(cwd.iterdir()) == []  # nothing written


def test_a_bad_setting_exits_2_in_one_line(cwd) -> None:
    done = agenttrace(cwd, "demo", AGENTTRACE_QUEUE_SIZE="lots")
    assert done.code == EXIT_USAGE
    assert "AGENTTRACE_QUEUE_SIZE='lots'" in done.one_line()


# --- 1: failed --------------------------------------------------------------------------------


def test_failures_exit_1_in_one_line(run, cwd) -> None:
    (cwd / "empty").mkdir()
    (cwd / "empty" / "notes.txt").write_text("no spans here")
    for argv, said in (
        (["export", "--from", "missing.jsonl", "--out", "t.jsonl"], "no such span file"),
        (["export", "--from", "empty", "--out", "t.jsonl"], "no span files in folder empty"),
        (["inspect", "missing.jsonl"], "'missing.jsonl' does not exist"),
        (["inspect", str(run / "spans.jsonl")], "this is a span file (OTLP/JSON lines)"),
        (["score", "--from", "missing.csv"], "agenttrace score: error: missing.csv does not exist"),
        (["demo", "--out", "empty/notes.txt"], "cannot create the run folder"),
    ):
        done = agenttrace(cwd, *argv)
        assert done.code == EXIT_FAILURE, (argv, done.err)
        line = done.one_line() if argv[0] != "demo" else done.err.strip().splitlines()[-1]
        assert said in line, argv
        assert line.startswith(f"agenttrace {argv[0]}: error: ")
        assert not (cwd / "t.jsonl").exists()


def test_minari_export_failures_are_one_line(run, cwd) -> None:
    spans = str(run / "spans.jsonl")
    argv = ["export", "--from", spans, "--format", "minari", "--dataset-id", "test/demo-v0"]
    done = agenttrace(cwd, *argv, "--env", "NoSuchEnv-v0")
    assert done.code == EXIT_USAGE
    line = done.one_line()  # (and none of gymnasium's own words)
    assert line.startswith("agenttrace export: error: gymnasium does not know the environment")
    assert "--env PACKAGE:NoSuchEnv-v0" in line
    assert not (cwd / "minari" / "test" / "demo-v0").exists()
    # Text is a gymnasium space (Text): the demo's text episodes are a dataset.
    done = agenttrace(cwd, *argv)
    assert done.code == EXIT_OK, done.err
    assert (cwd / "minari" / "test" / "demo-v0" / "data").is_dir()


MISSING = [
    ("pyarrow", "parquet", ["export", "--from", "{spans}", "--out", "t.parquet"]),
    ("pyarrow", "parquet", ["export", "--from", "{spans}", "--format", "steps", "--out", "tab"]),
    ("pyarrow", "parquet", ["inspect", "{parquet}"]),
    (
        "minari",
        "minari",
        ["export", "--from", "{spans}", "--format", "minari", "--dataset-id", "a/b-v0"],
    ),
]


@pytest.mark.parametrize(
    ("package", "extra", "argv"), MISSING, ids=[f"{p}-{a[0]}-{a[-1]}" for p, _, a in MISSING]
)
def test_a_missing_optional_package_exits_1_naming_it_and_its_extra(
    run, cwd, package, extra, argv
) -> None:
    paths = {"spans": run / "spans.jsonl", "parquet": run / "trajectories.parquet"}
    done = agenttrace(cwd, *(word.format(**paths) for word in argv), blocked=(package,))
    assert done.code == EXIT_FAILURE, done.err
    line = done.one_line()
    assert line.startswith(f"agenttrace {argv[0]}: error: missing optional package {package} ")
    assert f"(the {extra!r} extra)" in line
    assert f"pip install -e '.[{extra}]'" in line
    assert done.out == ""
    assert sorted(p.name for p in cwd.iterdir()) == ["not-installed"]  # nothing written


# --- 3: partial -------------------------------------------------------------------------------


def test_export_with_an_undecodable_value_exits_3_and_writes_the_rest(run, cwd) -> None:
    text = (run / "spans.jsonl").read_text()
    reward = '{"key":"rl.reward","value":{"doubleValue":-0.1}}'
    assert reward in text
    bad = cwd / "spans.jsonl"
    bad.write_text(text.replace(reward, '{"key":"rl.reward","value":{"stringValue":"lots"}}', 1))
    done = agenttrace(cwd, "export", "--from", "spans.jsonl", "--out", "t.jsonl")
    assert done.code == EXIT_PARTIAL, done.err
    assert "Traceback" not in done.err
    assert "1 line or value could not be decoded and was left out" in done.err
    assert "rl.reward was a string ('lots')" in done.err
    assert len(load_trajectories(cwd / "t.jsonl")) == 4


def test_score_with_a_bad_row_exits_3_and_records_the_rest(run, cwd) -> None:
    episode = load_trajectories(run / "trajectories.jsonl")[0].episode_id
    (cwd / "grades.csv").write_text(f"episode_id,value\n{episode},1.0\n{episode},lots\n")
    done = agenttrace(cwd, "score", "--from", "grades.csv", AGENTTRACE_OUT=str(cwd / "scores"))
    assert done.code == EXIT_PARTIAL, done.err
    assert "grades.csv:3:" in done.err and "Traceback" not in done.err
    assert "1 score recorded from grades.csv, 1 bad row skipped" in done.out


def test_demo_that_counts_lost_episodes_exits_3(cwd) -> None:
    done = agenttrace(
        cwd, "demo", "-n", "6", "-k", "3", "--seed", "1", "--out", ".", "--run-name", "r",
        AGENTTRACE_MAX_OPEN_EPISODES="1",
    )  # fmt: skip
    assert done.code == EXIT_PARTIAL, done.out + done.err
    assert "problem: episodes_dropped_open_limit = " in done.out
    assert "Traceback" not in done.err
    assert done.err.splitlines()[-1].startswith("agenttrace demo: partial: ")


def test_minari_own_warnings_do_not_reach_the_user(cwd) -> None:
    runtime = at.configure(out=str(cwd / "runs"), run_name="r", sinks=["jsonl"], spans=["file"])
    env = TracedEnv(gym.make("CartPole-v1", max_episode_steps=10))
    for seed in range(3):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    runtime.shutdown()
    spans = str(runtime.span_paths[0])
    argv = ["export", "--from", spans, "--format", "minari", "--dataset-id", "test/cartpole-v0"]
    done = agenttrace(cwd, *argv)
    assert done.code == EXIT_OK, done.err
    assert done.err == ""  # Minari's notes about author, code_permalink, ... are not shown
    assert "wrote 3 episodes (" in done.out and "into a Minari dataset" in done.out
