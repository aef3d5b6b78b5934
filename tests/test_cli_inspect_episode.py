"""``agenttrace inspect --episode / --worst / --status``: episodes step by step.

The episodes are played with the public tracing API (known actions, rewards, messages,
arrays and an exception), written by the pipeline, and the printed values are checked against
what was recorded.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import agenttrace as at
from agenttrace.cli import episode_view
from agenttrace.cli.main import main
from agenttrace.sinks import JsonlSink, load_trajectories
from agenttrace.trajectory.model import Step, ToolCall, Trajectory

LONG_SYSTEM = "S" * 500
BIG_OBSERVATION = np.zeros((84, 84, 3), np.uint8)
SMALL_ACTION = np.array([0.5, -0.25], np.float32)
#: Episode id -> return, as played below (NaN: a step reward that was NaN).
RETURNS = {"ep-a": 1.25, "ep-b": -2.0, "ep-c": 0.5, "ep-d": 3.0, "ep-e": math.nan}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _step(obs, action, reward, *, terminated=False, truncated=False, calls=()) -> None:
    with at.timestep():
        with at.agent_act() as act:
            for messages, answer in calls:
                with at.llm_call(model="m-1", provider="acme") as call:
                    call.record(
                        input_messages=messages,
                        output_messages=[answer],
                        input_tokens=7,
                        output_tokens=3,
                        finish_reasons=["stop"],
                    )
            act.record(observation=obs, action=action)
        with at.env_step() as step:
            step.record(action=action)
            step.record_result((obs, reward, terminated, truncated, {}))


def _play() -> None:
    with at.episode(episode_id="ep-a", task_id="task-a"):
        ask = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "hi"}]
        tool_call = {"id": "c1", "type": "function"}
        tool_call["function"] = {"name": "calculator", "arguments": '{"x": 1}'}
        answer = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
        _step({"v": 1}, "+3", 1.0, calls=[(ask, answer)])
        parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}]
        reply = {"role": "assistant", "content": "line one\nline two"}
        _step({"v": 4}, "*2", 0.5, calls=[([{"role": "user", "content": parts}], reply)])
        _step({"v": 8}, "+1", -0.25, terminated=True)
    with at.episode(episode_id="ep-b", task_id="task-b"):
        _step(BIG_OBSERVATION, SMALL_ACTION, -1.0)
        _step(BIG_OBSERVATION, SMALL_ACTION, -1.0, truncated=True)
    try:
        with at.episode(episode_id="ep-c", task_id="task-c"):
            _step({"v": 0}, "+1", 0.5)
            raise ValueError("boom [x]")
    except ValueError:
        pass
    with at.episode(episode_id="ep-d", task_id="task-d"):
        _step({"v": 2}, "+2", 3.0, terminated=True)
    with at.episode(episode_id="ep-e", task_id="task-e"):
        _step({"v": 3}, "-1", math.nan, truncated=True)


@pytest.fixture
def played(tmp_path) -> tuple[Path, dict[str, Trajectory]]:
    """The trajectories file of the episodes above, and its trajectories by id."""
    runtime = at.configure(out=str(tmp_path), run_name="r", sinks=["jsonl"], writer="thread")
    _play()
    runtime.shutdown()
    (path,) = runtime.trajectory_paths
    by_id = {t.episode_id: t for t in load_trajectories(path)}
    assert set(by_id) == set(RETURNS)
    for episode_id, value in RETURNS.items():  # the file holds what was played
        got = by_id[episode_id].return_
        assert (math.isnan(got) and math.isnan(value)) or got == value
    return path, by_id


def _episode_block(out: str, episode_id: str) -> str:
    """The printed lines of one episode: from its header to the next header or the footer."""
    start = out.index(f"episode {episode_id}  ")
    ends = [out.find(mark, start + 1) for mark in ("\nepisode ", "\nagenttrace inspect:")]
    return out[start : min(end for end in ends if end != -1)]


def test_an_episode_step_by_step(played, capsys):
    path, by_id = played
    code, out, err = run(capsys, "inspect", str(path), "--episode", "ep-a")
    assert code == 0 and err == ""
    block = _episode_block(out, "ep-a")
    lines = block.splitlines()
    assert lines[0] == "episode ep-a  completed"
    assert "  task        task-a" in lines
    assert "  return      1.25   length 3" in lines
    trajectory = by_id["ep-a"]
    assert trajectory.trace_id and f"  trace       {trajectory.trace_id}" in lines
    assert any(line.startswith("  time        ") and " UTC to " in line for line in lines)
    steps = [line for line in lines if line.startswith("step ")]
    expected = [("+3", "1.0", ""), ("*2", "0.5", ""), ("+1", "-0.25", "  terminated")]
    assert len(steps) == 3
    for index, (line, (action, reward, flags)) in enumerate(zip(steps, expected, strict=True)):
        assert line.startswith(f"step {index}  action '{action}'  reward {reward}{flags}  (")
    for value in (1, 4, 8):
        assert f"    observation {{'v': {value}}}" in lines
    # The model calls: header, then each message as role: content.
    assert "    llm chat m-1  (acme, 7 in / 3 out tokens, finish stop, " in block
    assert f"      system: {'S' * 200}… (+300 chars)" in lines
    assert "      user: hi" in lines
    assert '      assistant: calls calculator({"x": 1})' in lines
    assert "      user: look [image_url]" in lines
    assert "      assistant: line one↵line two" in lines
    assert "final observation {'v': 8}" in lines
    assert "error" not in block
    assert "episode ep-b" not in out
    assert out.rstrip().splitlines()[-1] == (
        f"agenttrace inspect: 1 of 5 episodes shown (episode ep-a) from {path}"
    )


def test_max_chars_sets_where_messages_are_cut(played, capsys):
    path, _ = played
    _, out, _ = run(capsys, "inspect", str(path), "--episode", "ep-a", "--max-chars", "50")
    assert f"      system: {'S' * 50}… (+450 chars)\n" in out
    _, out, _ = run(capsys, "inspect", str(path), "--episode", "ep-a", "--max-chars", "0")
    assert f"      system: {LONG_SYSTEM}\n" in out


def test_arrays_are_shown_compactly(played, capsys):
    path, by_id = played
    assert isinstance(by_id["ep-b"].steps[0].observation, np.ndarray)  # decoded, not JSON
    code, out, _ = run(capsys, "inspect", str(path), "--episode", "ep-b")
    assert code == 0
    block = _episode_block(out, "ep-b")
    assert block.splitlines()[0] == "episode ep-b  truncated"
    assert "  return      -2.0   length 2" in block
    assert "    observation ndarray(shape=(84, 84, 3), dtype=uint8)" in block
    assert "step 0  action array([0.5, -0.25], dtype=float32)  reward -1.0  (" in block
    assert "step 1  action array([0.5, -0.25], dtype=float32)  reward -1.0  truncated  (" in block
    assert len(block) < 2000  # 21 168 pixels were not printed


def test_the_error_with_type_message_and_stack(played, capsys):
    path, by_id = played
    code, out, _ = run(capsys, "inspect", str(path), "--episode", "ep-c")
    assert code == 0
    block = _episode_block(out, "ep-c")
    lines = block.splitlines()
    assert lines[0] == "episode ep-c  errored"
    assert "error ValueError: boom [x]" in lines  # brackets kept: printed literally
    stack = by_id["ep-c"].error.stack.rstrip().splitlines()
    assert stack[0] == "Traceback (most recent call last):"
    start = lines.index("  " + stack[0])
    assert lines[start : start + len(stack)] == ["  " + line for line in stack]
    assert 'raise ValueError("boom [x]")' in block


def test_worst_n_are_the_lowest_returns_lowest_first(played, capsys):
    path, _ = played
    code, out, _ = run(capsys, "inspect", str(path), "--worst", "2")
    assert code == 0
    headers = [line for line in out.splitlines() if line.startswith("episode ")]
    assert headers == ["episode ep-b  truncated", "episode ep-c  errored"]
    assert "2 of 5 episodes shown (the 2 lowest returns)" in out
    _, out, _ = run(capsys, "inspect", str(path), "--worst", "10")
    order = [line.split()[1] for line in out.splitlines() if line.startswith("episode ")]
    assert order == ["ep-b", "ep-c", "ep-a", "ep-d", "ep-e"]  # NaN return last
    assert "  return      nan   length 1" in _episode_block(out, "ep-e")


def test_status_worst_episode_and_several_files_combine(played, tmp_path, capsys):
    path, _ = played
    code, out, _ = run(capsys, "inspect", str(path), "--status", "errored")
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("episode ")] == [
        "episode ep-c  errored"
    ]
    _, out, _ = run(capsys, "inspect", str(path), "--status", "completed", "--worst", "1")
    assert "episode ep-a  completed" in out and "episode ep-d" not in out  # 1.25 < 3.0
    _, out, _ = run(capsys, "inspect", str(path), "--status", "completed,truncated", "--worst", "5")
    order = [line.split()[1] for line in out.splitlines() if line.startswith("episode ")]
    assert order == ["ep-b", "ep-a", "ep-d", "ep-e"]
    # The id exists, the status does not match: nothing to show, which is no error.
    code, out, err = run(capsys, "inspect", str(path), "--episode", "ep-a", "--status", "errored")
    assert code == 0 and err == ""
    assert "0 of 5 episodes shown (episode ep-a; status errored)" in out

    # A second file, written directly: the worst episode is looked for across both files.
    other = tmp_path / "other"
    tool = ToolCall(name="calculator", arguments={"x": 1}, result=2)
    step = Step(index=0, action="go", reward=-5.0, tool_calls=[tool])
    sink = JsonlSink(other)
    sink.write(
        Trajectory(
            episode_id="ep-f",
            status="incomplete",
            return_=-5.0,
            length=3,
            steps=[step],
            missing_steps=[1, 2],
            lossy={"steps.0.observation": "cut at 4096 characters"},
        )
    )
    sink.close()
    code, out, _ = run(capsys, "inspect", str(path), str(other), "--worst", "1")
    assert code == 0
    block = _episode_block(out, "ep-f")
    assert block.splitlines()[0] == "episode ep-f  incomplete"
    assert "  return      -5.0   length 3 (1 step recorded)" in block
    assert "  missing     steps 1, 2" in block
    assert "  lossy       steps.0.observation: cut at 4096 characters" in block
    assert "    tool calculator({'x': 1}) -> 2" in block
    assert "1 of 6 episodes shown (the 1 lowest returns)" in out


def test_an_unknown_id_is_named_with_ids_that_exist(played, capsys):
    path, by_id = played
    code, out, err = run(capsys, "inspect", str(path), "--episode", "nope")
    assert code == 1
    assert "episode 'nope' not found among the 5 episodes" in err
    listed = err.split("some ids there: ")[1].split()
    assert listed and {i.rstrip(",") for i in listed} <= set(by_id)
    # An id that is part of real ones: those are suggested; a found id is still shown.
    code, out, err = run(capsys, "inspect", str(path), "--episode", "ep-a", "--episode", "ep")
    assert code == 1
    assert "episode ep-a  completed" in out
    assert "episode 'ep' not found" in err
    assert "ids containing it: ep-a, ep-b, ep-c, ep-d, ep-e" in err


def test_json_prints_the_chosen_trajectories_as_json_lines(played, capsys):
    path, by_id = played
    code, out, err = run(capsys, "inspect", str(path), "--worst", "2", "--json")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert [json.loads(line)["episode_id"] for line in lines] == ["ep-b", "ep-c"]
    for line in lines:
        trajectory = Trajectory.from_json(line)
        assert trajectory == by_id[trajectory.episode_id]


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    """``agenttrace inspect ... --json | head -c 100``: a closed pipe ends the command quietly."""
    sink = JsonlSink(tmp_path)
    for number in range(300):
        sink.write(Trajectory(episode_id=f"e{number}", status="errored", task_id="x" * 2000))
    sink.close()
    for extra in (["--json"], []):
        command = [sys.executable, "-m", "agenttrace", "inspect", str(tmp_path), "--worst", "300"]
        process = subprocess.Popen(
            [*command, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdout.read(100)
        process.stdout.close()  # more than a pipe buffer is still to come
        _, stderr = process.communicate(timeout=120)
        assert b"Traceback" not in stderr, stderr.decode()
        assert process.returncode == 1


def test_bad_selection_arguments_exit_2(played, capsys):
    path, _ = played
    for argv, message in (
        (["--status", "won"], "unknown status won"),
        (["--worst", "0"], "--worst: must be at least 1, got 0"),
        (["--max-chars", "-1"], "--max-chars: must be 0 or more, got -1"),
        (["--episode", "@/nowhere/ids.txt"], "/nowhere/ids.txt"),
    ):
        code, out, err = run(capsys, "inspect", str(path), *argv)
        assert code == 2, argv
        assert message in err and out == ""


def test_without_selection_the_summary_is_printed(played, capsys):
    path, _ = played
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0
    assert out.startswith(f"agenttrace inspect: 5 episodes from {path}\nEpisodes\n")
    assert "step 0" not in out


# --- bounded memory ---------------------------------------------------------------------------


def _stream(count: int, alive: list[weakref.ref], log: list[int]):
    """Trajectories with returns 0, 1, 2, ... (ids t0, t1, ...), each weakly tracked."""
    for number in range(count):
        trajectory = Trajectory(episode_id=f"t{number}", return_=float(number % 97))
        alive.append(weakref.ref(trajectory))
        log.append(sum(1 for ref in alive if ref() is not None))
        yield trajectory
        del trajectory


def test_episodes_chosen_by_id_come_out_as_they_are_read():
    alive: list[weakref.ref] = []
    log: list[int] = []
    seen = episode_view.Selection()
    chosen = episode_view.select(
        _stream(1000, alive, log),
        lambda t: t.episode_id in {"t10", "t500"},
        wanted_ids={"t10", "t500"},
        worst=None,
        seen=seen,
    )
    read_when_shown = []
    for trajectory in chosen:
        read_when_shown.append((trajectory.episode_id, seen.read))
    assert read_when_shown == [("t10", 11), ("t500", 501)]
    assert seen.read == 1000 and seen.found == {"t10", "t500"}
    assert max(log) <= 3  # never more than a couple of trajectories alive at once


def test_worst_keeps_only_n_trajectories():
    alive: list[weakref.ref] = []
    log: list[int] = []
    chosen = list(
        episode_view.select(
            _stream(2000, alive, log),
            lambda t: True,
            wanted_ids=set(),
            worst=3,
            seen=episode_view.Selection(),
        )
    )
    assert [t.return_ for t in chosen] == [0.0, 0.0, 0.0]
    assert [t.episode_id for t in chosen] == ["t0", "t97", "t194"]  # ties: file order
    assert max(log) <= 3 + 2  # the heap, the one being read, the one being compared
