"""The viewer's queries (agenttrace/view/queries.py) rule by rule, on rows made from
trajectories, against values computed here another way (numpy, plain loops)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agenttrace.trajectory.model import EpisodeError, LLMCall, Step, Trajectory
from agenttrace.view.index import EpisodeRow, make_row
from agenttrace.view.queries import (
    Filters,
    compare_episodes,
    compare_runs,
    first_difference,
    page,
    plots,
    succeeded,
    summary,
)


def row(
    n: int,
    *,
    ret: float | None = 0.0,
    status: str = "completed",
    task: str | None = "t",
    group: str | None = None,
    run: str = "run",
    start: int | None = None,
    error: str | None = None,
    scores: dict | None = None,
    length: int = 1,
) -> EpisodeRow:
    return EpisodeRow(
        key=n,
        episode_id=f"ep-{n}",
        run=run,
        status=status,
        return_=ret,
        length=length,
        task_id=task,
        group_id=group,
        start_time=start,
        duration_s=None if start is None else float(n),
        error=error,
        scores=scores or {},
        trace_id=None,
        step_ms=None,
        llm_ms=None,
        input_tokens=0,
        output_tokens=0,
        file=0,
        offset=n,
    )


def ids(result: dict) -> list[str]:
    return [r["episode_id"] for r in result["rows"]]


# --- filters ---------------------------------------------------------------------------------


def test_filters_from_the_query_string() -> None:
    filters = Filters.from_query(
        {"run": "a,b", "status": "errored", "task": "t1,", "group": "g", "q": "  Ep-1 ",
         "min_return": "-1.5", "max_return": "2", "errors": "1"}
    )  # fmt: skip
    assert filters.runs == {"a", "b"} and filters.statuses == {"errored"}
    assert filters.tasks == {"t1"} and filters.groups == {"g"} and filters.text == "ep-1"
    assert (filters.min_return, filters.max_return, filters.errors_only) == (-1.5, 2.0, True)
    assert Filters.from_query({}) == Filters()
    for yes in ("1", "true", "yes"):
        assert Filters.from_query({"errors": yes}).errors_only
    assert not Filters.from_query({"errors": "0"}).errors_only
    with pytest.raises(ValueError, match=r"^min_return must be a number, not 'x'$"):
        Filters.from_query({"min_return": "x"})
    with pytest.raises(ValueError, match=r"^max_return must be a number, not 'y'$"):
        Filters.from_query({"max_return": "y"})
    with pytest.raises(ValueError, match=r"^max_return must be a number, not NaN$"):
        Filters.from_query({"max_return": "nan"})
    # an empty box is no bound
    assert Filters.from_query({"min_return": "", "max_return": ""}) == Filters()


def test_each_filter_keeps_exactly_its_rows() -> None:
    rows = [
        row(0, ret=-1.0, status="errored", error="ValueError: x", run="a", task="t1"),
        row(1, ret=0.0, run="a", task="t2", group="g1"),
        row(2, ret=1.0, run="b", task="t1", group="g2"),
        row(3, ret=None, status="incomplete", run="b", task=None),
        row(4, ret=2.0, run="b", task="t2", group="g1"),
    ]

    def kept(**query: str) -> list[int]:
        filters = Filters.from_query(query)
        return [r.key for r in rows if filters.keeps(r)]

    assert kept() == [0, 1, 2, 3, 4]
    assert kept(run="a") == [0, 1]
    assert kept(status="errored,incomplete") == [0, 3]
    assert kept(task="t1") == [0, 2]
    assert kept(group="g1") == [1, 4]
    assert kept(errors="1") == [0]
    assert kept(min_return="0") == [1, 2, 4]  # (bounds included; no return: left out)
    assert kept(max_return="1") == [0, 1, 2]
    assert kept(min_return="0", max_return="1") == [1, 2]
    assert kept(q="EP-2") == [2]
    assert kept(q="ep-1 t2") == [1]  # (the fields are searched as one text, space-joined)
    assert kept(q="x") == [0]  # no field's missing value matches anything
    assert kept(q="valueerror") == [0]  # the error text is searched
    assert kept(q="g2") == [2] and kept(q="t2") == [1, 4]
    assert Filters.from_query({"run": "a"}).apply(rows) == rows[:2]


# --- pages -----------------------------------------------------------------------------------


def test_pages_sort_by_each_column_missing_values_last_ties_in_index_order() -> None:
    rows = [
        row(0, ret=1.0, status="b", task="y", start=30),
        row(1, ret=None, status="a", task=None, start=None),
        row(2, ret=3.0, status="c", task="x", start=10),
        row(3, ret=1.0, status="a", task="z", start=20),
    ]
    assert ids(page(rows, Filters(), sort="return")) == ["ep-0", "ep-3", "ep-2", "ep-1"]
    assert ids(page(rows, Filters(), sort="return", descending=True)) == [
        "ep-2", "ep-0", "ep-3", "ep-1"
    ]  # fmt: skip
    assert ids(page(rows, Filters(), sort="task_id")) == ["ep-2", "ep-0", "ep-3", "ep-1"]
    assert ids(page(rows, Filters(), sort="start_time")) == ["ep-2", "ep-3", "ep-0", "ep-1"]
    assert ids(page(rows, Filters(), sort="status")) == ["ep-1", "ep-3", "ep-0", "ep-2"]
    assert ids(page(rows, Filters())) == ["ep-0", "ep-1", "ep-2", "ep-3"]
    assert ids(page(rows, Filters(), descending=True)) == ["ep-3", "ep-2", "ep-1", "ep-0"]


def test_pages_sort_by_a_score_and_refuse_unknown_columns() -> None:
    rows = [
        row(0, scores={"judge": 0.5}),
        row(1),
        row(2, scores={"judge": 0.9, "other": 1.0}),
        row(3, scores={"judge": 0.1}),
    ]
    assert ids(page(rows, Filters(), sort="score:judge")) == ["ep-3", "ep-0", "ep-2", "ep-1"]
    assert ids(page(rows, Filters(), sort="score:judge", descending=True)) == [
        "ep-2", "ep-0", "ep-3", "ep-1"
    ]  # fmt: skip
    with pytest.raises(ValueError) as refused:
        page(rows, Filters(), sort="bogus")
    assert str(refused.value) == (
        "cannot sort by 'bogus': one of key, return, length, duration_s, start_time, status, "
        "task_id, group_id, episode_id, run or score:NAME"
    )


def test_pages_are_windows_of_the_kept_rows() -> None:
    rows = [row(n, ret=float(n), status="completed" if n % 3 else "errored") for n in range(10)]
    result = page(rows, Filters(statuses=frozenset({"completed"})), offset=2, limit=3)
    assert result["total"] == 6 and (result["offset"], result["limit"]) == (2, 3)
    assert ids(result) == ["ep-4", "ep-5", "ep-7"]
    assert page(rows, Filters(), offset=20)["rows"] == []
    assert page(rows, Filters(), limit=1000)["total"] == 10
    assert page(rows, Filters(), limit=1)["rows"] == [rows[0].to_json()]
    for bad in ({"offset": -1}, {"limit": 0}, {"limit": 1001}):
        with pytest.raises(ValueError, match=r"^offset must be >= 0 and limit between 1 and 1000$"):
            page(rows, Filters(), **bad)
    many = [row(n) for n in range(60)]
    assert page(many, Filters())["limit"] == 50 and len(page(many, Filters())["rows"]) == 50


# --- summary ---------------------------------------------------------------------------------


def test_summary_counts_means_and_histogram_by_status() -> None:
    rng = np.random.default_rng(3)
    returns = rng.normal(size=200).round(3)
    statuses = rng.choice(["completed", "truncated", "errored"], size=200)
    rows = [
        row(n, ret=float(r), status=str(s), length=n % 7 + 1)
        for n, (r, s) in enumerate(zip(returns, statuses, strict=True))
    ]
    rows.append(row(200, ret=None, status="incomplete", length=3))
    found = summary(rows, Filters())
    assert found["total"] == 201
    assert list(found["by_status"]) == sorted(found["by_status"])
    for status in ("completed", "truncated", "errored"):
        mine = returns[statuses == status]
        lengths = [n % 7 + 1 for n in range(200) if statuses[n] == status]
        entry = found["by_status"][status]
        assert entry["count"] == len(mine)
        assert entry["mean_return"] == pytest.approx(mine.mean())
        assert entry["mean_length"] == pytest.approx(np.mean(lengths))
        counts, edges = np.histogram(mine, bins=30, range=(returns.min(), returns.max()))
        assert found["histogram"]["counts"][status] == list(counts)
    assert found["histogram"]["edges"] == pytest.approx(list(edges))
    assert found["by_status"]["incomplete"] == {"count": 1, "mean_return": None, "mean_length": 3}
    assert found["histogram"]["counts"]["incomplete"] == [0] * 30
    only = summary(rows, Filters(statuses=frozenset({"errored"})))
    assert list(only["by_status"]) == ["errored"]


def test_summary_of_one_return_and_of_none() -> None:
    found = summary([row(0, ret=2.0), row(1, ret=2.0)], Filters())
    assert found["histogram"]["edges"][0] == 1.5 and found["histogram"]["edges"][-1] == 2.5
    assert sum(found["histogram"]["counts"]["completed"]) == 2
    assert summary([], Filters()) == {
        "total": 0,
        "by_status": {},
        "histogram": {"edges": [], "counts": {}},
    }


# --- plots -----------------------------------------------------------------------------------


def _rolling(values: np.ndarray, window: int, n: int) -> np.ndarray:
    return values[max(0, n - window + 1) : n + 1]


def test_plots_in_start_order_with_a_rolling_band() -> None:
    rng = np.random.default_rng(11)
    returns = rng.normal(size=300)
    starts = rng.permutation(300)
    rows = [row(n, ret=float(returns[n]), start=int(starts[n]), length=n) for n in range(300)]
    found = plots(rows, Filters())
    order = np.argsort(starts)
    ordered = returns[order]
    assert not found["downsampled"] and found["window"] == 15 and found["x"][:3] == [1, 2, 3]
    assert found["return"] == pytest.approx(list(ordered))
    assert found["length"] == [float(n) for n in order]
    for n in (0, 7, 14, 15, 200, 299):
        band = _rolling(ordered, 15, n)
        assert found["return_mean"][n] == pytest.approx(band.mean())
        for q in (10, 50, 90):
            assert found[f"return_p{q}"][n] == pytest.approx(np.percentile(band, q))
    few = plots(rows[:40], Filters())
    assert few["window"] == 5  # at least 5
    # episodes with no start time come after those with one, in index order
    mixed = [row(0, ret=1.0), row(1, ret=2.0, start=50), row(2, ret=3.0), row(3, ret=4.0, start=9)]
    assert plots(mixed, Filters())["return"] == [4.0, 2.0, 1.0, 3.0]
    # a window of episodes without a return has no band
    blank = [row(n, ret=None, start=n) for n in range(6)] + [row(6, ret=1.0, start=6)]
    found = plots(blank, Filters())
    assert found["return_p50"][:6] == [None] * 6 and found["return_mean"][0] is None
    assert found["return_p50"][6] == 1.0
    # exactly as many episodes as points: one episode a point still
    exact = plots([row(n, ret=float(n), start=n) for n in range(2000)], Filters())
    assert not exact["downsampled"] and len(exact["x"]) == 2000


def test_plots_of_many_episodes_are_bucketed() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(size=5001)
    rows = [row(n, ret=float(values[n]), start=n) for n in range(5001)]
    rows[10].return_ = None  # a missing return is left out of its bucket
    found = plots(rows, Filters())
    size = math.ceil(5001 / 2000)
    assert found["downsampled"] and found["window"] == size == 3
    assert len(found["x"]) == math.ceil(5001 / size) and found["x"][-1] == 5001.0
    for b in (0, 3, 100, len(found["x"]) - 1):
        bucket = [values[i] for i in range(b * size, min(5001, (b + 1) * size)) if i != 10]
        assert found["return"][b] == pytest.approx(np.mean(bucket))
        assert found["return_mean"][b] == pytest.approx(np.mean(bucket))
        assert found["return_p90"][b] == pytest.approx(np.percentile(bucket, 90))
        assert found["return_p10"][b] == pytest.approx(np.percentile(bucket, 10))
    assert found["return"][3] == pytest.approx(np.mean([values[9], values[11]]))


def test_plots_of_latency_tokens_and_groups_come_from_the_steps() -> None:
    def trajectory(n: int, group: str, ret: float) -> Trajectory:
        steps = [
            Step(
                index=i,
                reward=ret if i == 0 else 0.0,
                start_time=i * 10_000_000,
                end_time=i * 10_000_000 + (i + 1) * 1_000_000,  # 1, 2, 3 ms
                llm_calls=[
                    LLMCall(
                        name="c",
                        input_tokens=10 * (i + 1),
                        output_tokens=i,
                        start_time=0,
                        end_time=4_000_000 * (i + 1),  # 4, 8, 12 ms
                    )
                ],
            )
            for i in range(3)
        ]
        return Trajectory(
            episode_id=f"e{n}",
            return_=ret,
            length=3,
            steps=steps,
            start_time=n,
            end_time=n + 2_000_000_000,
            attributes={"rl.group.id": group},
        )

    rows = [make_row(trajectory(n, f"g{n % 2}", float(n)), n, "r", 0, n) for n in range(6)]
    rows.append(row(6, ret=7.0))  # no group: in no group's spread
    rows.append(row(7, ret=None, group="g0"))  # no return: not counted in its group
    assert rows[0].step_ms == pytest.approx(2.0) and rows[0].llm_ms == pytest.approx(8.0)
    assert (rows[0].input_tokens, rows[0].output_tokens) == (60, 3)
    assert rows[3].duration_s == pytest.approx(2.0) and rows[3].group_id == "g1"
    found = plots(rows, Filters())
    assert found["step_ms"][:6] == pytest.approx([2.0] * 6) and found["llm_ms"][:6] == [8.0] * 6
    assert found["input_tokens"][:6] == [60.0] * 6 and found["output_tokens"][:6] == [3.0] * 6
    assert found["step_ms"][6:] == [None, None] and found["input_tokens"][6:] == [0.0, 0.0]
    groups = {g["group_id"]: g for g in found["groups"]}
    for name, members in (("g0", [0.0, 2.0, 4.0]), ("g1", [1.0, 3.0, 5.0])):
        assert groups[name]["count"] == 3
        assert groups[name]["mean"] == pytest.approx(np.mean(members))
        assert groups[name]["std"] == pytest.approx(np.std(members))
        assert (groups[name]["min"], groups[name]["max"]) == (min(members), max(members))
    assert [g["group_id"] for g in found["groups"]] == ["g0", "g1"]


def test_a_row_keeps_what_json_can_carry() -> None:
    trajectory = Trajectory(
        episode_id="e",
        task_id="t",
        status="errored",
        error=EpisodeError(type="KeyError", message="'id'"),
        return_=float("nan"),
        scores={"ok": 1.0, "bad": float("inf")},
        trace_id="abc",
    )
    made = make_row(trajectory, 7, "run", 2, 99)
    assert made.return_ is None and made.scores == {"ok": 1.0}
    assert made.error == "KeyError: 'id'" and made.duration_s is None
    assert (made.step_ms, made.llm_ms, made.input_tokens) == (None, None, 0)
    assert made.to_json() == {
        "key": 7, "episode_id": "e", "run": "run", "status": "errored", "return": None,
        "length": 0, "task_id": "t", "group_id": None, "start_time": None, "duration_s": None,
        "error": "KeyError: 'id'", "scores": {"ok": 1.0}, "trace_id": "abc",
    }  # fmt: skip


# --- comparisons ------------------------------------------------------------------------------


def test_success_is_a_success_score_or_completion() -> None:
    assert succeeded(row(0))
    assert not succeeded(row(0, status="truncated"))
    assert succeeded(row(0, status="truncated", scores={"success": 1.0}))
    assert not succeeded(row(0, scores={"success": 0.0}))
    rows = [
        row(0, run="a", task="t1"),
        row(1, run="a", task="t1", status="errored", ret=None),
        row(2, run="a", task=None, ret=2.0),
        row(3, run="b", task="t1", scores={"success": 1.0}, status="truncated", ret=5.0),
    ]
    found = compare_runs(rows, "a", "b")
    assert found["a"]["episodes"] == 3 and found["a"]["returns"] == [0.0, 2.0]
    assert found["a"]["by_task"] == {
        "": {"episodes": 1, "success": 1, "rate": 1.0},
        "t1": {"episodes": 2, "success": 1, "rate": 0.5},
    }
    assert found["b"] == {
        "run": "b",
        "episodes": 1,
        "returns": [5.0],
        "by_task": {"t1": {"episodes": 1, "success": 1, "rate": 1.0}},
    }


def test_the_first_difference_names_each_field_that_differs() -> None:
    def steps(**change):
        made = [Step(index=i, observation=[i], action=i, reward=1.0) for i in range(4)]
        for name, value in change.items():
            setattr(made[2], name, value)
        return Trajectory(episode_id="x", task_id="t", steps=made)

    same = steps()
    assert first_difference(same, steps()) == (None, [])
    for name, value in (
        ("observation", [9]),
        ("action", 9),
        ("reward", 2.0),
        ("terminated", True),
        ("truncated", True),
    ):
        assert first_difference(same, steps(**{name: value})) == (2, [name])
    assert first_difference(same, steps(observation=[9], action=9)) == (
        2,
        ["observation", "action"],
    )
    # dicts compare by content, whatever their key order
    a = Trajectory(episode_id="a", steps=[Step(index=0, observation={"x": 1, "y": 2})])
    b = Trajectory(episode_id="b", steps=[Step(index=0, observation={"y": 2, "x": 1})])
    assert first_difference(a, b) == (None, [])
    shorter = Trajectory(episode_id="s", task_id="u", steps=same.steps[:2])
    assert first_difference(shorter, same) == (2, ["length"])
    assert first_difference(same, shorter) == (2, ["length"])
    assert compare_episodes(same, shorter) == {
        "first_difference": 2,
        "differs_in": ["length"],
        "same_task": False,
    }
    assert compare_episodes(same, steps())["same_task"]
