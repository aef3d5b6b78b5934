"""Rollout groups (rl.group.id / rl.group.size) and the dataset selections of ``agenttrace
export``: whole groups, no duplicates, reproducible splits; ``agenttrace inspect``'s group
figures checked against numpy over the same returns."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import run_instrumented, run_script

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.cli.main import main
from agenttrace.cli.selection import Splitter
from agenttrace.sinks import load_trajectories

# (episode, group, size, task, actions, rewards): g-full is whole, g-short misses one
# episode, g-open has no size (whole at the end), "solo" is in no group.
EPISODES = [
    ("a1", "g-full", 3, "t1", [1, 0], [1.0, 0.0]),
    ("a2", "g-full", 3, "t1", [1, 1], [1.0, 1.0]),
    ("a3", "g-full", 3, "t1", [0, 0], [0.0, 0.0]),
    ("b1", "g-short", 3, "t2", [1], [1.0]),
    ("b2", "g-short", 3, "t2", [0], [1.0]),
    ("c1", "g-open", None, "t3", [2, 2], [0.5, 0.5]),
    ("c2", "g-open", None, "t3", [2, 2], [0.5, 0.5]),  # the same task and actions as c1
    ("solo", None, None, "t4", [3], [2.0]),
]


def record(folder: Path) -> Path:
    """The episodes above through the tracing API; the run folder."""
    runtime = at.configure(out=str(folder), run_name="groups", sinks=["jsonl"], spans=["file"])
    for episode_id, group, size, task, actions, rewards in EPISODES:
        with at.episode(episode_id=episode_id, task_id=task, group_id=group, group_size=size):
            for action, reward in zip(actions, rewards, strict=True):
                with at.env_step() as step:
                    step.record(action=action, observation=[action], reward=reward)
    runtime.shutdown()
    return folder / "groups"


@pytest.fixture
def run(tmp_path) -> Path:
    return record(tmp_path)


def export(run: Path, out: Path, *options: str) -> list[at.Trajectory]:
    code = main(
        ["export", "--from", str(run / "spans.jsonl"), "--out", str(out), "--quiet", *options]
    )
    assert code == 0
    return load_trajectories(out)


def test_the_api_records_group_id_and_size(run) -> None:
    trajectories = {t.episode_id: t for t in load_trajectories(run)}
    assert trajectories["a1"].attributes[sc.GROUP_ID] == "g-full"
    assert trajectories["a1"].attributes[sc.GROUP_SIZE] == 3
    assert sc.GROUP_SIZE not in trajectories["c1"].attributes
    assert sc.GROUP_ID not in trajectories["solo"].attributes
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        at.episode(group_id="g", group_size=0)


def test_the_environment_and_a_target_option_set_groups(tmp_path) -> None:
    done = run_script(
        tmp_path,
        textwrap.dedent(
            """
            import agenttrace as at
            with at.episode(task_id="x"):
                pass
            with at.episode(group_id="mine"):
                pass
            """
        ),
        AGENTTRACE_OUT=str(tmp_path / "env"),
        AGENTTRACE_GROUP_ID="launcher-7",
        AGENTTRACE_GROUP_SIZE="8",
    )
    assert done.returncode == 0, done.stderr
    groups = sorted(
        (t.attributes[sc.GROUP_ID], t.attributes.get(sc.GROUP_SIZE))
        for t in load_trajectories(tmp_path / "env")
    )
    assert groups == [("launcher-7", 8), ("mine", None)]  # an episode's own group wins

    run_instrumented(
        tmp_path,
        textwrap.dedent(
            """
            class Task:
                def __init__(self, name, n):
                    self.name, self.n = name, n

            def rollout(task, k):
                return k

            for k in range(3):
                rollout(Task("sort-list", 3), k)
            rollout(Task("bad-size", "many"), 0)
            """
        ),
        name="rollouts.py",
        AGENTTRACE_TARGETS="rollouts:rollout=episode[group_id=task.name,group_size=task.n]",
        AGENTTRACE_OUT=str(tmp_path / "targets"),
    )
    found = sorted(
        (t.attributes[sc.GROUP_ID], t.attributes.get(sc.GROUP_SIZE))
        for t in load_trajectories(tmp_path / "targets")
    )
    assert found == [("bad-size", None), ("sort-list", 3), ("sort-list", 3), ("sort-list", 3)]


def test_group_complete_keeps_whole_groups_only(run, tmp_path) -> None:
    kept = export(run, tmp_path / "whole.jsonl", "--group-complete")
    assert sorted(t.episode_id for t in kept) == ["a1", "a2", "a3", "c1", "c2", "solo"]
    # A filter that leaves out one episode of a group makes that group incomplete too.
    kept = export(run, tmp_path / "rewarded.jsonl", "--group-complete", "--min-return", "0.5")
    assert sorted(t.episode_id for t in kept) == ["c1", "c2", "solo"]


def test_dedupe_keeps_the_first_of_the_same_task_and_actions(run, tmp_path) -> None:
    kept = export(run, tmp_path / "unique.jsonl", "--dedupe")
    assert sorted(t.episode_id for t in kept) == ["a1", "a2", "a3", "b1", "b2", "c1", "solo"]


def test_split_is_reproducible_and_keeps_groups_together(run, tmp_path, capsys) -> None:
    def parts(out: Path, *options: str) -> dict[str, list[str]]:
        main(["export", "--from", str(run / "spans.jsonl"), "--out", str(out), "--quiet", *options])
        found = {}
        for part in ("train", "test"):
            path = out.with_name(f"{out.stem}.{part}{out.suffix}")
            found[part] = (
                sorted(t.episode_id for t in load_trajectories(path)) if path.exists() else []
            )
        return found

    first = parts(tmp_path / "one.jsonl", "--split", "train=0.5,test=0.5", "--seed", "3")
    again = parts(tmp_path / "two.jsonl", "--split", "train=0.5,test=0.5", "--seed", "3")
    assert first == again
    assert sorted(first["train"] + first["test"]) == sorted(e[0] for e in EPISODES)
    # The same assignment from the splitter alone: a hash of seed and id, nothing else.
    splitter = Splitter.parse("train=0.5,test=0.5", seed=3)
    expected = {e[0]: splitter.part_of(at.Trajectory(episode_id=e[0])) for e in EPISODES}
    assert first["train"] == sorted(k for k, v in expected.items() if v == "train")
    by_group = parts(tmp_path / "g.jsonl", "--split", "train=0.5,test=0.5", "--split-by", "group")
    for group in ("g-full", "g-short", "g-open"):
        members = {e[0] for e in EPISODES if e[1] == group}
        assert members <= set(by_group["train"]) or members <= set(by_group["test"])
    # Over many ids the fractions hold.
    splitter = Splitter.parse("a=0.8,b=0.2", seed=1)
    shares = [splitter.part_of(at.Trajectory(episode_id=str(i))) for i in range(20_000)]
    assert shares.count("a") / len(shares) == pytest.approx(0.8, abs=0.01)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("train=0.9", "add up to 0.9, not 1"),
        ("train=0.5,train=0.5", "names a part twice"),
        ("train:0.5,test=0.5", "is not NAME=FRACTION"),
        ("train=x,test=0.5", "is not a number"),
        ("train=0,test=1", "must be in (0, 1]"),
    ],
)
def test_bad_split_specs_are_usage_errors(run, tmp_path, capsys, spec, message) -> None:
    code = main(
        [
            "export",
            "--from",
            str(run / "spans.jsonl"),
            "--out",
            str(tmp_path / "x.jsonl"),
            "--split",
            spec,
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.glob("x*")) == []


def test_inspect_shows_each_groups_mean_std_and_the_zero_variance_share(run, capsys) -> None:
    assert main(["inspect", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    returns: dict[str, list[float]] = {}
    for _, group, _, _, _, rewards in EPISODES:
        if group is not None:
            returns.setdefault(group, []).append(sum(rewards))
    assert set(summary["groups"]) == set(returns)
    for group, values in returns.items():
        figures = summary["groups"][group]
        assert figures["episodes"] == len(values)
        assert figures["mean_return"] == pytest.approx(np.mean(values))
        assert figures["std_return"] == pytest.approx(np.std(values))
        assert figures["zero_variance"] == (len(values) >= 2 and np.std(values) == 0)
    assert summary["zero_variance_groups"] == 2  # g-short (1.0, 1.0) and g-open (1.0, 1.0)
    assert main(["inspect", str(run)]) == 0
    text = capsys.readouterr().out
    assert "Rollout groups" in text
    assert "with all returns equal: 2 of the 3 with 2+ episodes (66.7%)" in text
