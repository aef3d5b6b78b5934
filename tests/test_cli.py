"""The agenttrace command line: demo runs and writes everything, inspect summarizes files."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_same_episodes, exported

import agenttrace as at
from agenttrace.cli import demo
from agenttrace.cli.main import main
from agenttrace.cli.summary import summarize
from agenttrace.sinks import ParquetSink, TrajectoryLoadError, load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.model import LLMCall, Step, Trajectory

#: With this seed the 12-episode demo has every outcome: 8 completed, 3 truncated, 1 errored.
SEED = 30
EPISODES = 12


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_demo(capsys, out: Path, name: str = "run", *extra: str) -> tuple[int, str, Path]:
    code, stdout, stderr = run(
        capsys,
        "demo",
        "--episodes",
        str(EPISODES),
        "--concurrency",
        "4",
        "--out",
        str(out),
        "--run-name",
        name,
        "--seed",
        str(SEED),
        *extra,
    )
    assert code == 0, stdout + stderr
    return code, stdout, out / name


def strict_load(source) -> list[Trajectory]:
    def fail(error: TrajectoryLoadError) -> None:
        raise error

    return load_trajectories(source, on_error=fail)


def status_rows(text: str) -> dict[str, int]:
    """Episode counts per status (and "all") from the printed "Episodes" table."""
    table = text[text.index("Episodes") : text.index("Steps")]
    return {
        match.group(1): int(match.group(2))
        for match in re.finditer(r"^│ (\w+)\s+│\s+(\d+) │", table, re.MULTILINE)
    }


def summary_block(text: str) -> str:
    """The printed summary: from the "Episodes" title to the end of the "Steps" table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Episodes"))
    steps = next(i for i, line in enumerate(lines) if line.startswith("Steps"))
    end = next(i for i in range(steps, len(lines)) if lines[i].startswith("└"))
    return "\n".join(lines[start : end + 1])


# --- demo ------------------------------------------------------------------------------------


def test_demo_writes_every_episode_once_with_llm_calls(tmp_path, capsys):
    _, out, run_dir = run_demo(capsys, tmp_path)
    trajectories_file = run_dir / "trajectories.jsonl"
    spans_file = run_dir / "spans.jsonl"
    assert trajectories_file.is_file() and spans_file.is_file()
    assert str(trajectories_file) in out and str(spans_file) in out
    assert "nothing lost" in out

    trajectories = strict_load(trajectories_file)
    assert len(trajectories) == EPISODES
    assert len({t.episode_id for t in trajectories}) == EPISODES
    # One trajectory per episode index: none lost, none merged into another.
    assert sorted(t.attributes["demo.episode_index"] for t in trajectories) == list(range(EPISODES))
    statuses = [t.status for t in trajectories]
    assert statuses.count("completed") == 8
    assert statuses.count("truncated") == 3
    assert statuses.count("errored") == 1

    for trajectory in trajectories:
        assert trajectory.length >= 1
        assert [s.index for s in trajectory.steps] == list(range(trajectory.length))
        assert trajectory.missing_steps == []
        for step in trajectory.steps:
            assert len(step.llm_calls) == 1
            call = step.llm_calls[0]
            assert call.model == demo.MODEL and call.provider == demo.PROVIDER
            assert [m["role"] for m in call.input_messages] == ["system", "user"]
            assert f"value is {step.observation['value']}" in call.input_messages[1]["content"]
            assert call.output_messages[0]["role"] == "assistant"
            assert call.finish_reasons == ["stop"]
            assert call.input_tokens > 0 and call.output_tokens > 0
            if step.action is not None:  # the errored step never got to act
                assert call.output_messages[0]["content"].endswith(f"ACTION: {step.action}")
        last = trajectory.steps[-1]
        rewards = [s.reward for s in trajectory.steps if s.reward is not None]
        assert math.isclose(trajectory.return_, sum(rewards))
        if trajectory.status == "completed":
            assert last.terminated and not last.truncated
            assert trajectory.final_observation["value"] == trajectory.final_observation["target"]
        elif trajectory.status == "truncated":
            assert last.truncated and trajectory.length == demo.MAX_STEPS
        else:
            assert (
                trajectory.error is not None
                and trajectory.error.type == "agenttrace.cli.demo.ToolFailure"
            )
            assert last.action is None and last.reward is None


def test_demo_summary_matches_the_file(tmp_path, capsys):
    _, out, run_dir = run_demo(capsys, tmp_path)
    trajectories = strict_load(run_dir / "trajectories.jsonl")
    expected: dict[str, int] = {}
    for trajectory in trajectories:
        expected[trajectory.status] = expected.get(trajectory.status, 0) + 1
    assert status_rows(out) == {**expected, "all": EPISODES}
    steps = sum(len(t.steps) for t in trajectories)
    assert re.search(rf"│ steps\s+│\s+{steps} │", out)
    assert re.search(rf"│ LLM calls\s+│\s+{steps} │", out)


def test_demo_episodes_run_concurrently_up_to_the_limit(tmp_path, capsys):
    _, _, run_dir = run_demo(capsys, tmp_path)
    trajectories = strict_load(run_dir / "trajectories.jsonl")
    events = sorted(
        [(t.start_time, 1) for t in trajectories] + [(t.end_time, -1) for t in trajectories]
    )
    open_now = most_open = 0
    for _, change in events:
        open_now += change
        most_open = max(most_open, open_now)
    assert most_open == 4  # --concurrency 4: episodes overlapped, never more than 4 at once


def test_demo_trajectories_equal_the_ones_rebuilt_from_spans(tmp_path, capsys):
    _, _, run_dir = run_demo(capsys, tmp_path)
    live = {t.episode_id: t for t in strict_load(run_dir / "trajectories.jsonl")}
    offline = {t.episode_id: t for t in at.assemble(read_otlp_json(run_dir / "spans.jsonl"))}
    assert set(live) == set(offline)
    for episode_id, trajectory in live.items():
        assert trajectory == offline[episode_id], episode_id
    for name in ("exported.jsonl", "exported.parquet"):
        assert_same_episodes(list(live.values()), exported(run_dir, tmp_path / name))


def test_demo_is_deterministic_given_the_seed(tmp_path, capsys):
    def outcomes(run_dir: Path) -> list[tuple]:
        trajectories = strict_load(run_dir / "trajectories.jsonl")
        by_index = sorted(trajectories, key=lambda t: t.attributes["demo.episode_index"])
        return [
            (t.task_id, t.status, t.return_, t.length, [s.action for s in t.steps])
            for t in by_index
        ]

    _, out_a, first = run_demo(capsys, tmp_path, "a")
    _, out_b, second = run_demo(capsys, tmp_path, "b")
    assert outcomes(first) == outcomes(second)
    assert status_rows(out_a) == status_rows(out_b)
    code, _, _ = run(
        capsys, "demo", "-n", str(EPISODES), "--out", str(tmp_path), "--run-name", "c"
    )  # no seed: a random one
    assert code == 0
    assert outcomes(tmp_path / "c") != outcomes(first)


def test_demo_refuses_a_run_folder_that_holds_a_run(tmp_path, capsys):
    run_demo(capsys, tmp_path, "same")
    code, _, err = run(capsys, "demo", "--out", str(tmp_path), "--run-name", "same")
    assert code == 2
    assert "already holds a run" in err
    assert len(strict_load(tmp_path / "same" / "trajectories.jsonl")) == EPISODES


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--episodes", "0"], "--episodes/-n: must be at least 1, got 0"),
        (["demo", "--episodes", "-3"], "must be at least 1, got -3"),
        (["demo", "--episodes", "many"], "expected a whole number, got 'many'"),
        (["demo", "--concurrency", "0"], "--concurrency/-k: must be at least 1, got 0"),
        (["demo", "--seed", "-1"], "must be 0 or more"),
        (["inspect"], "the following arguments are required: FILE"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "no command given: choose one of demo, inspect, export, score"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert list(tmp_path.iterdir()) == []  # nothing was run or written


def test_bad_settings_exit_2_naming_the_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AGENTTRACE_QUEUE_SIZE", "lots")
    code, _, err = run(capsys, "demo", "--out", str(tmp_path))
    assert code == 2
    assert "AGENTTRACE_QUEUE_SIZE='lots'" in err


def test_demo_with_tracing_switched_off_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AGENTTRACE_ENABLED", "false")
    code, _, err = run(capsys, "demo", "--out", str(tmp_path))
    assert code == 2
    assert "AGENTTRACE_ENABLED" in err
    assert list(tmp_path.iterdir()) == []


def test_demo_out_that_is_a_file_exits_1(tmp_path, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code, _, err = run(capsys, "demo", "--out", str(blocker), "--run-name", "r")
    assert code == 1
    assert "cannot create the run folder" in err and str(blocker) in err


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"agenttrace {at.__version__}"


# --- inspect ---------------------------------------------------------------------------------


def test_inspect_prints_the_same_summary_as_the_demo(tmp_path, capsys):
    _, demo_out, run_dir = run_demo(capsys, tmp_path)
    code, out, err = run(capsys, "inspect", str(run_dir / "trajectories.jsonl"))
    assert code == 0 and err == ""
    assert f"{EPISODES} episodes" in out
    assert summary_block(out) == summary_block(demo_out)
    # A folder and a glob name the same file.
    for source in (str(run_dir), str(tmp_path / "*" / "trajectories.jsonl")):
        code, again, _ = run(capsys, "inspect", source)
        assert code == 0
        assert summary_block(again) == summary_block(demo_out)


def test_inspect_json_gives_the_numbers(tmp_path, capsys):
    _, _, run_dir = run_demo(capsys, tmp_path)
    trajectories = strict_load(run_dir / "trajectories.jsonl")
    code, out, _ = run(capsys, "inspect", "--json", str(run_dir / "trajectories.jsonl"))
    assert code == 0
    data = json.loads(out)
    assert data["episodes"] == EPISODES
    assert data["statuses"] == {"completed": 8, "truncated": 3, "errored": 1}
    assert data["bad_records"] == 0
    assert data["total_steps"] == data["llm_calls"] == sum(len(t.steps) for t in trajectories)
    assert data["input_tokens"] == sum(
        c.input_tokens for t in trajectories for s in t.steps for c in s.llm_calls
    )
    assert math.isclose(data["mean_return"], sum(t.return_ for t in trajectories) / EPISODES)
    assert data["min_length"] == min(t.length for t in trajectories)
    assert data["max_length"] == max(t.length for t in trajectories)
    assert 0 < data["step_time_p50_ms"] <= data["step_time_p95_ms"]


def test_inspect_reports_a_garbage_line_and_keeps_the_rest(tmp_path, capsys):
    _, _, run_dir = run_demo(capsys, tmp_path)
    lines = (run_dir / "trajectories.jsonl").read_bytes().split(b"\n")
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"\n".join([*lines[:3], b"{this is not json", *lines[3:]]))
    code, out, err = run(capsys, "inspect", str(damaged))
    assert code == 0
    assert f"{EPISODES} episodes" in out
    assert status_rows(out)["all"] == EPISODES
    assert "1 bad record skipped" in err
    assert f"{damaged}:4: not valid JSON" in err


def test_inspect_shows_the_first_bad_records_and_counts_all(tmp_path, capsys):
    _, _, run_dir = run_demo(capsys, tmp_path)
    good = (run_dir / "trajectories.jsonl").read_text(encoding="utf-8")
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("[1]\n" * 8 + good, encoding="utf-8")
    code, out, err = run(capsys, "inspect", str(damaged))
    assert code == 0
    assert status_rows(out)["all"] == EPISODES
    assert "8 bad records skipped (first 5 shown)" in err
    assert f"{damaged}:5:" in err and f"{damaged}:6:" not in err


def test_inspect_of_a_spans_file_fails_with_a_hint(tmp_path, capsys):
    _, _, run_dir = run_demo(capsys, tmp_path)
    code, _, err = run(capsys, "inspect", str(run_dir / "spans.jsonl"))
    assert code == 1
    assert "no trajectory could be read" in err
    assert "agenttrace export --from" in err


def test_inspect_missing_file_exits_1_naming_it(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "trajectories.jsonl"
    code, out, err = run(capsys, "inspect", str(missing))
    assert code == 1
    assert out == ""
    assert str(missing) in err and "does not exist" in err


def test_inspect_reads_parquet(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    _, demo_out, run_dir = run_demo(capsys, tmp_path)
    sink = ParquetSink(tmp_path / "parquet")
    for trajectory in strict_load(run_dir / "trajectories.jsonl"):
        sink.write(trajectory)
    sink.close()
    code, out, _ = run(capsys, "inspect", str(tmp_path / "parquet"))
    assert code == 0
    assert summary_block(out) == summary_block(demo_out)


def test_console_script_in_a_subprocess(tmp_path):
    result = subprocess.run(
        [
            *(sys.executable, "-m", "agenttrace.cli.main", "demo", "-n", "5", "-k", "2"),
            *("--out", str(tmp_path), "--run-name", "sub", "--seed", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "nothing lost" in result.stdout
    assert len(strict_load(tmp_path / "sub" / "trajectories.jsonl")) == 5
    missing = subprocess.run(
        [sys.executable, "-m", "agenttrace", "inspect", str(tmp_path / "absent.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1
    assert "absent.jsonl" in missing.stderr


# --- summarize -------------------------------------------------------------------------------


def _trajectory(status: str, return_: float, step_ms: list[float], tokens: int = 0) -> Trajectory:
    steps = [
        Step(
            index=i,
            start_time=1_000_000_000,
            end_time=1_000_000_000 + round(ms * 1e6),
            llm_calls=[LLMCall(name="chat m", input_tokens=tokens, output_tokens=1)],
        )
        for i, ms in enumerate(step_ms)
    ]
    return Trajectory(
        episode_id=f"{status}-{return_}-{len(steps)}",
        status=status,
        return_=return_,
        length=len(steps),
        steps=steps,
    )


def test_summarize_counts_ignores_nan_returns_and_takes_percentiles():
    durations = [float(ms) for ms in range(1, 101)]  # 1..100 ms
    trajectories = [
        _trajectory("completed", 1.0, durations[:60], tokens=3),
        _trajectory("completed", 2.0, durations[60:90]),
        _trajectory("truncated", float("nan"), durations[90:]),
        _trajectory("errored", -1.0, []),
    ]
    summary = summarize(iter(trajectories))
    assert summary.episodes == 4
    assert summary.statuses == {"completed": 2, "truncated": 1, "errored": 1}
    assert list(summary.by_status) == ["completed", "truncated", "errored"]
    assert summary.mean_return == pytest.approx((1.0 + 2.0 - 1.0) / 3)
    assert summary.returns_nan == 1
    assert summary.by_status["truncated"].mean_return is None
    assert summary.by_status["completed"].mean_return == pytest.approx(1.5)
    assert (summary.min_length, summary.max_length) == (0, 60)
    assert summary.mean_length == pytest.approx(25.0)
    assert summary.total_steps == summary.llm_calls == summary.timed_steps == 100
    assert (summary.input_tokens, summary.output_tokens) == (180, 100)
    assert summary.step_time_p50_ms == pytest.approx(50.5)
    assert summary.step_time_p95_ms == pytest.approx(95.05)


def test_summarize_nothing():
    summary = summarize([])
    assert summary.episodes == 0 and summary.statuses == {}
    assert summary.mean_return is None and summary.step_time_p50_ms is None
