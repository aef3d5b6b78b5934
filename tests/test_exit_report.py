"""At exit (or explicit shutdown) a traced program says once, on stderr, where it wrote."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from conftest import run_script

import agenttrace as at

#: Traces three two-step episodes, without configure(), and prints nothing of its own.
LOOP = textwrap.dedent(
    """
    import agenttrace as at

    def play(n):
        for seed in range(n):
            with at.episode(task_id=f"t{seed}"):
                for action in range(2):
                    with at.timestep():
                        with at.env_step() as step:
                            step.record_result(({"a": action}, 1.0, action == 1, False, {}))
    """
)


def run_loop(folder: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python3 script.py``: :data:`LOOP`, then ``code``, with only the given AGENTTRACE_*
    variables."""
    return run_script(folder, LOOP + textwrap.dedent(code), **env)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_traced_program_says_where_it_wrote_at_exit(tmp_path):
    # The default writer (a helper process on 2+ CPUs): the line comes after the final flush,
    # so it counts every episode, including the ones the helper had not written yet.
    done = run_loop(tmp_path, "play(3)\n", AGENTTRACE_RUN_NAME="run-a")
    assert done.returncode == 0, done.stderr
    path = Path("agenttrace_runs") / "run-a" / "trajectories.jsonl"
    assert done.stderr.splitlines() == [f"agenttrace: 3 episodes -> {path}"]
    assert count_lines(tmp_path / path) == 3


def test_no_line_when_switched_off_or_nothing_was_traced(tmp_path):
    off = run_loop(tmp_path, "play(2)\n", AGENTTRACE_EXIT_REPORT="false")
    assert off.returncode == 0 and off.stderr == ""
    assert len(list((tmp_path / "agenttrace_runs").iterdir())) == 1  # it did write
    imported = run_loop(tmp_path, "print('untraced')\n")
    assert (imported.stdout, imported.stderr) == ("untraced\n", "")
    configured = run_loop(tmp_path, "at.configure(out='other')\n")
    assert (configured.returncode, configured.stderr) == (0, "")
    disabled = run_loop(tmp_path, "play(2)\n", AGENTTRACE_ENABLED="false")
    assert (disabled.returncode, disabled.stderr) == (0, "")


def test_several_trajectory_files_name_the_run_folder(tmp_path):
    # Rotation after every record: one file per episode.
    done = run_loop(
        tmp_path, "play(3)\n", AGENTTRACE_RUN_NAME="rot", AGENTTRACE_JSONL_MAX_BYTES="1"
    )
    assert done.returncode == 0, done.stderr
    run_dir = Path("agenttrace_runs") / "rot"
    assert len(list((tmp_path / run_dir).glob("trajectories*.jsonl"))) > 1
    assert done.stderr.splitlines() == [f"agenttrace: 3 episodes -> {run_dir}"]


def test_losses_are_mentioned(tmp_path):
    # Two episodes open at once, with room for one: the second is dropped and counted.
    code = """
    at.configure(run_name="lossy", max_open_episodes=1)
    first, second = at.episode(), at.episode()
    first.start()
    second.start()
    second.end()
    first.end()
    """
    done = run_loop(tmp_path, code)
    assert done.returncode == 0, done.stderr
    path = Path("agenttrace_runs") / "lossy" / "trajectories.jsonl"
    last = done.stderr.splitlines()[-1]  # after the processor's own warnings
    assert last == f"agenttrace: 1 episode -> {path}, 1 episode lost (see AgentTrace.stats())"


def test_explicit_shutdown_reports_then_and_not_again_at_exit(tmp_path):
    code = """
    import sys
    play(2)
    at.shutdown()
    print("after shutdown", file=sys.stderr)
    at.configure(run_name="second")
    play(1)
    """
    done = run_loop(tmp_path, code, AGENTTRACE_RUN_NAME="first")
    assert done.returncode == 0, done.stderr
    runs = Path("agenttrace_runs")
    assert done.stderr.splitlines() == [
        f"agenttrace: 2 episodes -> {runs / 'first' / 'trajectories.jsonl'}",
        "after shutdown",
        f"agenttrace: 1 episode -> {runs / 'second' / 'trajectories.jsonl'}",
    ]


def test_configure_replacing_a_pipeline_reports_what_the_first_wrote(tmp_path):
    code = """
    play(2)
    at.configure(run_name="b", exit_report=False)
    play(1)
    """
    done = run_loop(tmp_path, code, AGENTTRACE_RUN_NAME="a")
    assert done.returncode == 0, done.stderr
    path = Path("agenttrace_runs") / "a" / "trajectories.jsonl"
    assert done.stderr.splitlines() == [f"agenttrace: 2 episodes -> {path}"]
    assert count_lines(tmp_path / "agenttrace_runs" / "b" / "trajectories.jsonl") == 1


def test_summary_line_in_process(tmp_path, capsys):
    runtime = at.configure(out=str(tmp_path), run_name="r", writer="thread")
    assert runtime.summary_line() is None  # nothing traced yet
    with at.episode():
        pass
    runtime.shutdown()
    line = f"agenttrace: 1 episode -> {tmp_path / 'r' / 'trajectories.jsonl'}"
    assert runtime.summary_line() == line
    assert capsys.readouterr().err == line + "\n"
    quiet = at.configure(out=str(tmp_path), run_name="q", exit_report=False)
    with at.episode():
        pass
    quiet.shutdown()
    assert capsys.readouterr().err == ""
    quiet_path = tmp_path / "q" / "trajectories.jsonl"
    assert quiet.summary_line() == f"agenttrace: 1 episode -> {quiet_path}"


def test_callback_sink_only(tmp_path, capsys):
    seen = []
    runtime = at.configure(out=str(tmp_path), run_name="cb", sinks=[seen.append], spans=["none"])
    with at.episode():
        pass
    runtime.shutdown()
    assert len(seen) == 1
    assert capsys.readouterr().err == "agenttrace: 1 episode -> your sink\n"


def test_the_demo_prints_where_it_wrote_itself_not_again_at_exit(tmp_path):
    demo = "from agenttrace.cli.main import main\nraise SystemExit(main())\n"
    done = run_script(tmp_path, demo, "demo", "-n", "3", "--seed", "1")
    assert done.returncode == 0, done.stderr
    assert "trajectories: agenttrace_runs" in done.stdout
    assert "episodes ->" not in done.stderr + done.stdout
