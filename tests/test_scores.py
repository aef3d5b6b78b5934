"""Late rewards and scores: given after the episode, from another process, by file; merged by
loaders and by ``agenttrace export`` from the same spans; never by rewriting a file.

The truth is the arithmetic of the rewards the episodes recorded plus the scores given, worked
out here from the inputs, not read back from agenttrace.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import run_script

import agenttrace as at
from agenttrace.cli.main import main
from agenttrace.reading.step_tables import read_step_tables
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory.scores import apply_scores, checked_score

REWARDS = {"ep-a": [0.0, 0.0, 0.0], "ep-b": [1.0, 0.0], "ep-c": [0.5]}


def play(folder: Path, **sinks: list[str]) -> Path:
    """Three episodes; ep-a gets a judge score while it is still open. The run folder."""
    runtime = at.configure(
        out=str(folder), run_name="play", sinks=sinks.get("sinks", ["jsonl"]), spans=["file"]
    )
    for episode_id, rewards in REWARDS.items():
        with at.episode(episode_id=episode_id, task_id="t"):
            for index, reward in enumerate(rewards):
                with at.env_step() as step:
                    step.record(action=index, reward=reward)
            if episode_id == "ep-a":
                at.score("ep-a", 0.75, name="judge", comment="in time")
    runtime.shutdown()
    return folder / "play"


GRADER = """
import sys
import agenttrace as at

at.configure(out=sys.argv[1], run_name=sys.argv[2], sinks=["jsonl"])
at.score("ep-a", 1.0)                      # the verifier: a late reward on the last step
at.score("ep-b", 0.5, step=0, comment="partial credit")
at.score("ep-b", 3.0, name="length")       # a named score, not a reward
at.score("ep-b", 4.0, name="length")       # the later one of a name wins
at.shutdown()
"""


def expected() -> dict[str, tuple[float, list[float], dict[str, float]]]:
    """(return, rewards, scores) per episode, from REWARDS and the scores given."""
    a = [0.0, 0.0, 1.0]
    b = [1.5, 0.0]
    return {
        "ep-a": (sum(a), a, {"judge": 0.75, "reward": 1.0}),
        "ep-b": (sum(b), b, {"reward": 0.5, "length": 4.0}),
        "ep-c": (0.5, [0.5], {}),
    }


def check(trajectories: list[at.Trajectory]) -> None:
    found = {t.episode_id: t for t in trajectories}
    assert sorted(found) == sorted(REWARDS)
    for episode_id, (total, rewards, scores) in expected().items():
        trajectory = found[episode_id]
        assert trajectory.return_ == pytest.approx(total), episode_id
        assert [s.reward for s in trajectory.steps] == pytest.approx(rewards), episode_id
        assert trajectory.scores == scores, episode_id


@pytest.fixture(params=["grader", "zz-grader"])
def scored(tmp_path, request) -> Path:
    """The run folder of ``play``, then a grader in another process scoring after it. Its run
    folder is read before the play's ("grader": its scores come first, and wait for their
    episodes) or after ("zz-grader": they come after their episodes were written)."""
    run = play(tmp_path)
    lines_before = (run / "trajectories.jsonl").read_bytes()
    done = run_script(
        tmp_path, textwrap.dedent(GRADER), str(tmp_path), request.param, name="grader.py"
    )
    assert done.returncode == 0, done.stderr
    assert "3 late scores" not in done.stderr and "4 late scores -> " in done.stderr
    assert (run / "trajectories.jsonl").read_bytes() == lines_before  # never rewritten
    return tmp_path


def test_a_score_from_another_process_is_merged_by_the_loader(scored) -> None:
    check(load_trajectories(scored))  # the parent folder: both runs, the grader's scores
    (score_file,) = scored.glob("*grader/scores.jsonl")
    records = [json.loads(line) for line in score_file.open()]
    assert [r["episode_id"] for r in records] == ["ep-a", "ep-b", "ep-b", "ep-b"]
    assert records[1]["comment"] == "partial credit" and records[1]["step"] == 0
    # Only the play run: the in-time score, not the grader's.
    alone = {t.episode_id: t for t in load_trajectories(scored / "play")}
    assert alone["ep-a"].scores == {"judge": 0.75} and alone["ep-a"].return_ == 0.0


def test_an_offline_export_of_the_same_spans_merges_them_too(scored, tmp_path) -> None:
    spans = str(scored / "*" / "spans.jsonl")
    out = tmp_path / "all.jsonl"
    assert main(["export", "--from", spans, "--out", str(out), "--quiet", "--grace", "all"]) == 0
    check(load_trajectories(out))
    # Episodes written one span after they look complete: the scores read before them wait
    # for them; those read after them are kept beside the output, and loading merges them.
    out = tmp_path / "late.jsonl"
    assert main(["export", "--from", spans, "--out", str(out), "--quiet", "--grace", "1"]) == 0
    late = scored.glob("zz-grader")
    assert (tmp_path / "late.scores.jsonl").is_file() is bool(list(late))
    check(load_trajectories(out))


def test_step_tables_carry_scores_and_a_scores_table_for_late_ones(scored, tmp_path) -> None:
    spans = str(scored / "*" / "spans.jsonl")
    out = tmp_path / "tables"
    options = ["--format", "steps", "--grace", "1", "--quiet"]
    assert main(["export", "--from", spans, "--out", str(out), *options]) == 0
    _, episodes = read_step_tables(out)
    in_time = dict(
        zip(episodes["episode_id"].to_pylist(), episodes["scores"].to_pylist(), strict=True)
    )
    scores_late = any(scored.glob("zz-grader"))
    ep_a = {"judge": 0.75} if scores_late else {"judge": 0.75, "reward": 1.0}
    assert dict(in_time["ep-a"]) == ep_a
    import pyarrow.parquet as pq

    parts = list((out / "scores").glob("*.parquet"))
    if not scores_late:  # (the scores came first: all in time)
        assert parts == []
        return
    (part,) = parts
    late = pq.read_table(part).to_pylist()
    assert [(r["episode_id"], r["name"], r["value"]) for r in late] == [
        ("ep-a", "reward", 1.0),
        ("ep-b", "reward", 0.5),
        ("ep-b", "length", 3.0),
        ("ep-b", "length", 4.0),
    ]


def test_agenttrace_score_records_a_file_of_scores(tmp_path, capsys) -> None:
    play(tmp_path / "runs")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    grades = inputs / "grades.csv"
    grades.write_text(
        "episode_id,value,name,step,comment\n"
        "ep-a,1,,,\n"
        "ep-b,0.5,,0,partial credit\n"
        "ep-b,three,,,\n"  # bad value
        ",1,,,\n"  # no episode id
        "ep-b,4,length,,\n"
    )
    labels = inputs / "labels.jsonl"
    labels.write_text('{"episode_id": "ep-a", "value": 0.75, "name": "judge"}\nnot json\n')
    code = main(["score", "--from", str(grades)])
    assert code == 3  # partial: some rows were not scores, the others recorded
    captured = capsys.readouterr()
    assert "3 scores recorded" in captured.out and "2 bad rows skipped" in captured.out
    assert "grades.csv:4: score 'reward': value must be a number" in captured.err
    assert "grades.csv:5: a score's episode_id must be a non-empty string" in captured.err
    assert main(["score", "--from", str(labels)]) == 3
    assert "labels.jsonl:2: not JSON" in capsys.readouterr().err
    found = {t.episode_id: t for t in load_trajectories(tmp_path / "runs")}
    assert found["ep-b"].scores == {"reward": 0.5, "length": 4.0}
    assert found["ep-b"].steps[0].reward == 1.5
    assert found["ep-a"].return_ == 1.0 and found["ep-a"].scores["judge"] == 0.75
    empty = inputs / "empty.csv"
    empty.write_text("episode_id,value\n")
    assert main(["score", "--from", str(empty)]) == 1
    assert main(["score", "--from", str(tmp_path / "missing.csv")]) == 1  # failed


@pytest.fixture(autouse=True)
def _scores_go_to_tmp(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTTRACE_OUT", str(tmp_path / "runs"))  # (agenttrace score's run)


def test_bad_scores_name_the_field() -> None:
    with pytest.raises(ValueError, match="episode_id must be a non-empty string"):
        at.score("", 1.0)
    with pytest.raises(ValueError, match="value must be finite"):
        at.score("e", float("nan"))
    with pytest.raises(ValueError, match="step must be an int >= 0"):
        at.score("e", 1.0, step=-1)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        at.score("e", 1.0, name="")


def test_apply_scores_orders_by_time_and_reward_goes_to_the_last_step() -> None:
    trajectory = at.Trajectory(
        episode_id="e",
        steps=[at.Step(index=0, reward=None), at.Step(index=1, reward=1.0)],
        return_=1.0,
    )
    apply_scores(
        trajectory,
        [
            checked_score("e", 2.0, "quality", time=20),
            checked_score("e", 1.0, "quality", time=10),
            checked_score("e", 0.5, time=5),
            checked_score("e", 0.25, step=0, time=6),
        ],
    )
    assert trajectory.scores == {"quality": 2.0, "reward": 0.25}
    assert [s.reward for s in trajectory.steps] == [0.25, 1.5]
    assert trajectory.return_ == 1.75


def test_parquet_runs_keep_scores_and_a_scores_table(tmp_path) -> None:
    """In-time scores in the trajectory row; late ones in the run's Parquet scores table
    (and its scores.jsonl): merged once by the loader."""
    run = play(tmp_path, sinks=["parquet"])
    (trajectory,) = [t for t in load_trajectories(run) if t.episode_id == "ep-a"]
    assert trajectory.scores == {"judge": 0.75}
    runtime = at.configure(out=str(tmp_path), run_name="play", sinks=["parquet"])
    at.score("ep-b", 0.5, step=0)  # the same run folder, later: the episode is written
    runtime.shutdown()
    assert len(list(run.glob("scores-*.parquet"))) == 1 and (run / "scores.jsonl").is_file()
    found = {t.episode_id: t for t in load_trajectories(run)}
    assert found["ep-b"].steps[0].reward == 1.5 and found["ep-b"].return_ == 1.5


def test_scores_are_counted_in_the_metrics_where_they_are_given(tmp_path) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    runtime = at.configure(
        out=str(tmp_path), run_name="m", meter_provider=MeterProvider(metric_readers=[reader])
    )
    at.score("gone-long-ago", 1.0)
    at.score("gone-long-ago", -0.5, name="judge")
    at.score("other", 2.0, name="judge")
    runtime.shutdown()
    points = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points[(metric.name, point.attributes["rl.score.name"])] = point.value
    assert points == {
        ("rl.scores", "reward"): 1,
        ("rl.scores", "judge"): 2,
        ("rl.score.sum", "reward"): 1.0,
        ("rl.score.sum", "judge"): 1.5,
    }


def test_score_records_and_spans_read_back_every_field() -> None:
    from agenttrace import semconv as sc
    from agenttrace.trajectory.records import SpanRecord
    from agenttrace.trajectory.scores import Score, score_from_dict, score_from_record

    record = {"type": "score", "episode_id": "e", "value": 2, "step": 3, "comment": "ok", "time": 5}
    assert score_from_dict(record) == Score("e", "reward", 2.0, 3, "ok", 5)  # name: reward
    assert score_from_dict({**record, "name": "judge"}).name == "judge"
    with pytest.raises(ValueError, match="not a score record"):
        score_from_dict({**record, "type": "trajectory"})
    with pytest.raises(ValueError, match="time must be an int"):
        score_from_dict({**record, "time": "later"})
    with pytest.raises(ValueError, match="comment must be a string"):
        score_from_dict({**record, "comment": 7})
    span = SpanRecord(
        trace_id=1,
        span_id=2,
        parent_span_id=0,
        name=sc.SCORE,
        start_time=10,
        end_time=20,
        attributes={
            sc.EPISODE_ID: "e",
            sc.SCORE_VALUE: 0.5,
            sc.SCORE_STEP: 1,
            sc.SCORE_COMMENT: "why",
        },
    )
    assert score_from_record(span) == Score("e", "reward", 0.5, 1, "why", 20)
    assert score_from_record(span._replace(end_time=None)).time == 10
    named = span._replace(attributes={**span.attributes, sc.SCORE_NAME: "judge"})
    assert score_from_record(named).name == "judge"
