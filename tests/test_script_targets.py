"""Zero-code on the script you run: targets naming the script itself.

``opentelemetry-instrument python train.py`` with ``AGENTTRACE_TARGETS='train:Runner...'``
(the script's file name as module) or ``__main__:...`` traces the classes and functions the
script defines as it runs, without importing it a second time. The script keeps its own
record of every step; the trajectories must say the same. Misspelled targets are reported
once, at start; targets never called are reported once, at exit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import clean_environ, run_script

from agenttrace.instrument.auto import AgentTraceInstrumentor
from agenttrace.instrument.script import running_script, why_never_defined
from agenttrace.instrument.targets import TargetError, parse_target
from agenttrace.sinks import load_trajectories

#: A single-file training script with no ``__main__`` guard: its loop runs at import.
UNGUARDED = textwrap.dedent(
    """
    import json
    import sys

    print("script body runs", flush=True)


    class LineEnv:
        def __init__(self, goal):
            self.goal = goal
            self.position = 0

        def reset(self, seed=None):
            self.position = 0
            return {"position": 0, "goal": self.goal}, {}

        def step(self, action):
            self.position += action
            done = self.position >= self.goal
            reward = 1.0 if done else -0.1 * action
            return {"position": self.position, "goal": self.goal}, reward, done, False, {}


    class Runner:
        def __init__(self):
            self.record = []

        def act(self, observation):
            return 2 if observation["goal"] - observation["position"] > 1 else 1

        def play_episode(self, task_id, goal):
            env = LineEnv(goal)
            observation, _ = env.reset(seed=goal)
            steps = []
            done = False
            while not done:
                action = self.act(observation)
                after, reward, terminated, truncated, _ = env.step(action)
                steps.append([observation, action, reward, terminated])
                observation, done = after, terminated or truncated
            self.record.append({"task_id": task_id, "steps": steps})


    runner = Runner()
    for number, goal in enumerate([3, 5, 4]):
        runner.play_episode(f"task-{number}", goal)
    with open(sys.argv[1], "w") as handle:
        json.dump(runner.record, handle)
    """
)

TARGETS = (
    "{m}:Runner.play_episode=episode[task_id=task_id];{m}:LineEnv.reset=env.reset;"
    "{m}:Runner.act=agent.act;{m}:LineEnv.step=env.step[extractor=gymnasium]"
)


def run_instrumented(
    folder: Path, command: list[str], targets: str, **extra: str
) -> subprocess.CompletedProcess:
    env = clean_environ(
        AGENTTRACE_TARGETS=targets,
        AGENTTRACE_OUT=str(folder / "runs"),
        AGENTTRACE_WRITER="thread",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        PYTHONPATH=str(folder),
        **extra,
    )
    instrument = shutil.which("opentelemetry-instrument")
    assert instrument, "opentelemetry-instrument comes with opentelemetry-instrumentation"
    return subprocess.run(
        [instrument, sys.executable, *command],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_equal_to_record(folder: Path, record_file: Path) -> None:
    record = json.loads(record_file.read_text())
    trajectories = load_trajectories(folder / "runs")
    assert [t.task_id for t in trajectories] == [r["task_id"] for r in record]
    for trajectory, episode in zip(trajectories, record, strict=True):
        assert trajectory.status == "completed"
        assert len(trajectory.steps) == len(episode["steps"])
        for step, (observation, action, reward, terminated) in zip(
            trajectory.steps, episode["steps"], strict=True
        ):
            assert step.observation == observation
            assert step.action == action
            assert step.reward == pytest.approx(reward)
            assert step.terminated is terminated
        assert trajectory.return_ == pytest.approx(sum(s[2] for s in episode["steps"]))


def agenttrace_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "agenttrace" in line]


@pytest.fixture
def unguarded(tmp_path) -> Path:
    (tmp_path / "train.py").write_text(UNGUARDED)
    return tmp_path


def test_an_unguarded_script_named_by_its_file_name_runs_once_and_is_traced(unguarded):
    result = run_instrumented(unguarded, ["train.py", "record.json"], TARGETS.format(m="train"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("script body runs") == 1  # not imported a second time
    assert "Traceback" not in result.stderr
    assert_equal_to_record(unguarded, unguarded / "record.json")
    assert not [line for line in agenttrace_lines(result.stderr) if "target" in line]


def test_main_targets_and_python_dash_m(unguarded):
    result = run_instrumented(
        unguarded, ["-m", "train", "record.json"], TARGETS.format(m="__main__")
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("script body runs") == 1
    assert_equal_to_record(unguarded, unguarded / "record.json")


def test_module_level_functions_of_a_guarded_script(tmp_path):
    (tmp_path / "loop.py").write_text(
        textwrap.dedent(
            """
            import json, sys

            def step(state, action):
                state["t"] += 1
                return state["t"], float(action), state["t"] >= 3, False, {}

            def play(task_id):
                state = {"t": 0}
                rewards = [step(state, a)[1] for a in (1, 2, 3)]
                return rewards

            if __name__ == "__main__":
                record = [{"task_id": "only", "rewards": play("only")}]
                json.dump(record, open(sys.argv[1], "w"))
            """
        )
    )
    result = run_instrumented(
        tmp_path,
        ["loop.py", "record.json"],
        "loop:play=episode[task_id=task_id];__main__:step=env.step[extractor=gymnasium]",
    )
    assert result.returncode == 0, result.stderr
    (trajectory,) = load_trajectories(tmp_path / "runs")
    record = json.loads((tmp_path / "record.json").read_text())
    assert trajectory.task_id == "only"
    assert [s.reward for s in trajectory.steps] == record[0]["rewards"]
    assert [s.action for s in trajectory.steps] == [1, 2, 3]
    assert [s.terminated for s in trajectory.steps] == [False, False, True]


def test_a_misspelled_target_is_reported_once_naming_it_and_the_rest_works(unguarded):
    targets = TARGETS.format(m="train") + ";train:Runner.play_episodes=episode"
    result = run_instrumented(unguarded, ["train.py", "record.json"], targets)
    assert result.returncode == 0, result.stderr
    mentions = [line for line in result.stderr.splitlines() if "play_episodes" in line]
    assert len(mentions) == 1, result.stderr
    assert "train:Runner.play_episodes=episode" in mentions[0]
    assert "never take effect" in mentions[0]
    assert "'play_episode'" in mentions[0]  # the name it probably meant
    assert "Traceback" not in result.stderr
    assert_equal_to_record(unguarded, unguarded / "record.json")


def test_a_target_never_called_is_reported_at_exit_unless_silenced(unguarded):
    (unguarded / "train.py").write_text(
        UNGUARDED + "\nclass Unused:\n    def run(self):\n        return 1\n"
    )
    targets = "train:Runner.play_episode=episode;train:Unused.run=episode"
    result = run_instrumented(unguarded, ["train.py", "record.json"], targets)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "never called" in line]
    assert len(lines) == 1, result.stderr
    assert "train:Unused.run=episode" in lines[0]
    assert "play_episode" not in lines[0]
    assert "AGENTTRACE_WARN_UNCALLED_TARGETS" in lines[0]

    quiet = run_instrumented(
        unguarded, ["train.py", "record.json"], targets, AGENTTRACE_WARN_UNCALLED_TARGETS="0"
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "never called" not in quiet.stderr


def test_a_target_naming_an_undefined_script_function_at_top_level_never_waits(tmp_path):
    (tmp_path / "train.py").write_text("print('ran')\n")
    result = run_instrumented(tmp_path, ["train.py"], "train:main=episode")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "train:main" in line]
    assert "train.py defines no 'main'" in line


def test_instrument_in_code_from_the_running_script(tmp_path):
    """Called by the script itself before it defines the class: bound when it does."""
    selfie = textwrap.dedent(
        """
            import agenttrace as at
            from agenttrace.instrument.auto import AgentTraceInstrumentor
            from agenttrace.instrument.targets import TargetError

            try:
                AgentTraceInstrumentor().instrument(targets=["__main__:Nope.run=episode"])
            except TargetError as exc:
                print("refused:", exc)
            AgentTraceInstrumentor().instrument(
                targets=["__main__:Game.play=episode", "__main__:Game.move=env.step"]
            )

            class Game:
                def play(self):
                    return [self.move(a) for a in (1, 2)]

                def move(self, action):
                    return {"observation": action, "reward": action / 2, "terminated": action == 2}

            Game().play()
            at.shutdown()
            (t,) = at.sinks.load_trajectories(at.get_default().settings.out)
            print("rewards", [s.reward for s in t.steps])
            """
    )
    result = run_script(
        tmp_path,
        selfie,
        name="selfie.py",
        AGENTTRACE_OUT=str(tmp_path / "runs"),
        AGENTTRACE_EXIT_REPORT="false",
    )
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "defines no 'Nope'" in result.stdout
    assert "rewards [0.5, 1.0]" in result.stdout


# --- the pieces ------------------------------------------------------------------------------


def test_running_script_names(tmp_path):
    assert running_script(["python", "train.py", "x"]).names == {"__main__", "train"}
    assert running_script(["python", "-u", "-X", "dev", "dir/run.py"]).names == {
        "__main__",
        "run",
    }
    assert running_script(["python", "-m", "pkg.train"]).names == {"__main__", "pkg.train"}
    assert running_script(["python", "-c", "pass"]).names == {"__main__"}
    (tmp_path / "app").mkdir()
    folder = running_script(["python", str(tmp_path / "app")])
    assert folder.names == {"__main__"} and folder.path == tmp_path / "app" / "__main__.py"


@pytest.mark.parametrize(
    ("qualname", "expected"),
    [
        ("Runner.play_episode", None),
        ("Runner.act", None),
        ("LineEnv.step", None),
        ("runner", None),  # a module-level assignment
        ("json", None),  # an import
        ("Runner.play_episodes", "defines no 'play_episodes' (did you mean 'play_episode'?)"),
        ("Runer.act", "defines no 'Runer' (did you mean 'Runner'"),
        ("missing", "defines no 'missing'"),
    ],
)
def test_why_never_defined(qualname, expected):
    target = parse_target(f"train:{qualname}=episode")
    why = why_never_defined(target, UNGUARDED, "train.py")
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why


def test_why_never_defined_trusts_inherited_and_star_imported_names():
    source = "from base import *\nclass Sub(Base):\n    pass\n"
    assert why_never_defined(parse_target("m:Sub.play=episode"), source, "m.py") is None
    assert why_never_defined(parse_target("m:anything=episode"), source, "m.py") is None
    assert why_never_defined(parse_target("m:x=episode"), "if True:\n    x = 1\n", "m.py") is None


def test_in_code_a_script_target_the_source_never_defines_raises():
    running = running_script()
    assert "__main__" in running.names
    with pytest.raises(TargetError, match="never take effect"):
        AgentTraceInstrumentor().instrument(targets=["__main__:surely_not_defined=episode"])
    assert not AgentTraceInstrumentor().is_instrumented_by_opentelemetry
