"""The viewer's index (agenttrace/view/index.py) in-process, without a server: each row
against numbers computed here from the trajectory, the rows against the file they come from
(byte offsets read back by hand), and following a file that grows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import wait_until

from agenttrace.semconv import GROUP_ID
from agenttrace.trajectory.model import EpisodeError, LLMCall, Step, Trajectory
from agenttrace.view import index as view_index
from agenttrace.view.index import ColumnValues, EpisodeIndex, make_row


def trajectory(episode_id: str, rewards: list[float], **fields) -> Trajectory:
    steps = [
        Step(index=n, observation=n, action=n, reward=reward, terminated=n == len(rewards) - 1)
        for n, reward in enumerate(rewards)
    ]
    return Trajectory(
        episode_id=episode_id,
        task_id=fields.get("task_id", "task"),
        status=fields.get("status", "completed"),
        return_=float(sum(rewards)),
        length=len(rewards),
        steps=steps,
        attributes=fields.get("attributes", {}),
    )


def write_jsonl(path: Path, trajectories: list[Trajectory], extra: str = "") -> list[int]:
    """Writes the file; returns each line's byte offset, counted here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets, text = [], ""
    for t in trajectories:
        offsets.append(len(text.encode()))
        text += t.to_json() + "\n"
    path.write_text(text + extra)
    return offsets


def read_all(sources, **options) -> EpisodeIndex:
    index = EpisodeIndex([str(s) for s in sources], follow=False, **options).start()
    assert index.wait_idle(60)
    index.stop()
    return index


# --- one row -------------------------------------------------------------------------------


def test_a_row_holds_the_trajectorys_numbers() -> None:
    ms = 1_000_000
    steps = [
        Step(
            index=0,
            reward=1.0,
            start_time=10 * ms,
            end_time=14 * ms,  # 4 ms
            llm_calls=[
                LLMCall(
                    name="chat",
                    start_time=10 * ms,
                    end_time=12 * ms,
                    input_tokens=7,
                    output_tokens=3,
                ),
                LLMCall(
                    name="chat",
                    start_time=None,
                    end_time=13 * ms,
                    input_tokens=None,
                    output_tokens=5,
                ),
            ],
        ),
        Step(index=1, reward=2.0, start_time=20 * ms, end_time=30 * ms),  # 10 ms
        Step(index=2, reward=0.5, start_time=None, end_time=31 * ms),  # no duration
        Step(
            index=3,
            reward=0.0,
            start_time=40 * ms,
            end_time=None,
            llm_calls=[LLMCall(name="chat", start_time=40 * ms, end_time=46 * ms, input_tokens=11)],
        ),
    ]
    t = Trajectory(
        episode_id="e-1",
        task_id="maze",
        status="errored",
        error=EpisodeError(type="ValueError", message="bad move"),
        return_=3.5,
        length=4,
        steps=steps,
        start_time=2_000_000_000,
        end_time=5_500_000_000,
        trace_id="ab" * 16,
        scores={"success": 1.0, "nan": float("nan"), "inf": float("inf"), "judge": 0.25},
        attributes={GROUP_ID: 17},
    )
    row = make_row(t, 9, "run-a", 2, 345)
    assert (row.key, row.run, row.file, row.offset) == (9, "run-a", 2, 345)
    assert (row.episode_id, row.status, row.task_id) == ("e-1", "errored", "maze")
    assert row.group_id == "17"  # as text, whatever type it was recorded with
    assert row.return_ == 3.5 and row.length == 4
    assert row.start_time == 2_000_000_000
    assert row.duration_s == pytest.approx(3.5)
    assert row.error == "ValueError: bad move"
    assert row.scores == {"success": 1.0, "judge": 0.25}  # what JSON cannot carry left out
    assert row.trace_id == "ab" * 16
    assert row.step_ms == pytest.approx((4 + 10) / 2)  # the two steps with both times
    assert row.llm_ms == pytest.approx((2 + 6) / 2)  # the two calls with both times
    assert (row.input_tokens, row.output_tokens) == (7 + 11, 3 + 5)
    as_json = row.to_json()
    assert as_json == {
        "key": 9,
        "episode_id": "e-1",
        "run": "run-a",
        "status": "errored",
        "return": 3.5,
        "length": 4,
        "task_id": "maze",
        "group_id": "17",
        "start_time": 2_000_000_000,
        "duration_s": row.duration_s,
        "error": "ValueError: bad move",
        "scores": {"success": 1.0, "judge": 0.25},
        "trace_id": "ab" * 16,
    }
    json.dumps(as_json, allow_nan=False)


def test_a_row_of_an_episode_with_nothing_timed() -> None:
    t = trajectory("bare", [1.0, 1.0], task_id=None)
    t.return_ = float("nan")
    t.start_time = 5  # no end: no duration
    row = make_row(t, 0, "r", 0, 0)
    assert row.return_ is None and row.task_id is None and row.group_id is None
    assert row.duration_s is None and row.error is None
    assert row.step_ms is None and row.llm_ms is None
    assert (row.input_tokens, row.output_tokens) == (0, 0)
    t.attributes = None  # a damaged record: no group, no error
    assert make_row(t, 0, "r", 0, 0).group_id is None


@pytest.mark.parametrize(
    "value, expected",
    [
        (1.5, 1.5),
        ("2", 2.0),
        (True, 1.0),
        (0, 0.0),
        (-3, -3.0),
        (None, None),
        ("x", None),
        ([1], None),
        (float("nan"), None),
        (float("inf"), None),
        (float("-inf"), None),
        (1e308, 1e308),
    ],
)
def test_only_numbers_json_can_carry(value, expected) -> None:
    assert view_index._finite(value) == expected


def test_the_mean_of_nothing_is_none() -> None:
    assert view_index._mean([]) is None
    assert view_index._mean([1.0, 2.0, 6.0]) == 3.0


def test_column_values_keep_runs_in_order_and_skip_missing_values() -> None:
    values = ColumnValues()
    for n, (run, task, group) in enumerate(
        [("b", "t1", None), ("a", None, "g1"), ("b", "t2", "g1"), ("c", "t1", "g2")]
    ):
        t = trajectory(f"e{n}", [1.0], task_id=task, status=("completed", "errored")[n % 2])
        if group is not None:
            t.attributes = {GROUP_ID: group}
        t.scores = {f"s{n % 2}": 1.0}
        values.add(make_row(t, n, run, 0, n))
    assert list(values.runs) == ["b", "a", "c"]
    assert values.statuses == {"completed", "errored"}
    assert values.tasks == {"t1", "t2"} and values.groups == {"g1", "g2"}
    assert values.scores == {"s0", "s1"}


def test_the_run_of_a_file_is_its_folder(tmp_path) -> None:
    assert view_index._run_name(tmp_path / "run-1" / "trajectories.jsonl") == "run-1"
    assert view_index._run_name(tmp_path / "run-2" / "episodes" / "e.json") == "run-2"
    tables = tmp_path / "tables"
    tables.mkdir()
    assert view_index._run_name(tables) == "tables"  # step tables: the folder itself
    assert view_index._run_name(Path("/episodes/e.json")) == "episodes"
    assert view_index._run_name(Path("/e.jsonl")) == "/"


# --- the index ------------------------------------------------------------------------------


def test_rows_point_at_their_lines_and_read_back_as_the_file_holds_them(tmp_path) -> None:
    episodes = [trajectory(f"e{n}", [1.0] * (n + 1), task_id=f"t{n % 2}") for n in range(5)]
    path = tmp_path / "run-x" / "trajectories.jsonl"
    offsets = write_jsonl(path, episodes)
    index = read_all([path])
    rows = index.snapshot()
    assert [r.key for r in rows] == list(range(5))
    assert [r.episode_id for r in rows] == [t.episode_id for t in episodes]
    assert [r.offset for r in rows] == offsets
    assert {r.run for r in rows} == {"run-x"} and {r.file for r in rows} == {0}
    for row, expected in zip(rows, episodes, strict=True):
        assert index.trajectory(row.key) == expected
        assert index.source_of(row) == str(path)
    assert index.row(-1) is None and index.row(5) is None and index.row(4) is rows[4]
    assert index.trajectory(5) is None
    assert not index.indexing and index.problem_count == 0 and index.problems == []
    values, count = index.column_values()
    assert count == 5 and values.tasks == {"t0", "t1"} and list(values.runs) == ["run-x"]
    values.tasks.add("changed")  # a copy: the index's own values do not change
    values.runs["other"] = None
    again, _ = index.column_values()
    assert again.tasks == {"t0", "t1"} and list(again.runs) == ["run-x"]
    index.snapshot().clear()
    assert len(index.snapshot()) == 5


def test_every_problem_is_counted_and_the_first_ones_kept(tmp_path) -> None:
    good = trajectory("good", [1.0])
    bad_lines = "".join(f"{{bad {n}\n" for n in range(view_index.MAX_PROBLEMS + 5))
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [good], extra=bad_lines)
    index = read_all([path])
    assert [r.episode_id for r in index.snapshot()] == ["good"]
    assert index.problem_count == view_index.MAX_PROBLEMS + 5
    assert len(index.problems) == view_index.MAX_PROBLEMS
    assert "trajectories.jsonl:2:" in index.problems[0]


def test_listeners_hear_each_batch_and_a_failing_one_stops_nothing(tmp_path) -> None:
    episodes = [trajectory(f"e{n}", [0.5]) for n in range(1_200)]
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, episodes)
    heard: list[int] = []
    index = EpisodeIndex([str(path)], follow=False)
    index.listen(lambda added: 1 / 0)
    index.listen(heard.append)
    index.start()
    assert index.wait_idle(60)
    index.stop()
    assert sum(heard) == 1_200 and len(index.snapshot()) == 1_200
    assert heard[0] <= view_index.FIRST_PAGE  # the first page goes out before the rest
    assert max(heard) <= 500 and len(heard) >= 1_200 // 500


def test_waiting_for_an_index_that_never_starts_times_out(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("e", [1.0])])
    index = EpisodeIndex([str(path)], follow=False)
    assert index.indexing
    assert index.wait_idle(0.05) is False


def test_a_missing_source_fails_at_once(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        EpisodeIndex([str(tmp_path / "nowhere")])


def test_following_reads_only_whole_appended_lines_and_new_files(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    first = [trajectory("a", [1.0]), trajectory("b", [2.0])]
    offsets = write_jsonl(path, first)
    index = EpisodeIndex([str(tmp_path)], follow=True, poll=0.02).start()
    try:
        assert index.wait_idle(30)
        assert [r.episode_id for r in index.snapshot()] == ["a", "b"]
        line = trajectory("c", [3.0]).to_json() + "\n"
        size = path.stat().st_size
        with path.open("a") as handle:
            handle.write(line[:30])
            handle.flush()
            assert wait_until(lambda: index.files[0].size == -1 or index.files[0].read_to == size)
            assert [r.episode_id for r in index.snapshot()] == ["a", "b"]
            handle.write(line[30:])
        assert wait_until(lambda: len(index.snapshot()) == 3)
        third = index.snapshot()[2]
        assert (third.episode_id, third.offset) == ("c", size)
        assert index.trajectory(2).return_ == 3.0 and offsets == [0, offsets[1]]
        other = tmp_path / "run-2" / "trajectories.jsonl"
        write_jsonl(other, [trajectory("d", [4.0])])
        assert wait_until(lambda: len(index.snapshot()) == 4)
        last = index.snapshot()[3]
        assert (last.run, last.file, last.offset) == ("run-2", 1, 0)
        assert index.problem_count == 0
    finally:
        index.stop()


def test_late_scores_redo_their_rows_and_removed_ones_undo_them(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("a", [1.0, 1.0]), trajectory("b", [2.0])])
    changes: list[int] = []
    index = EpisodeIndex([str(tmp_path)], follow=True, poll=0.02)
    index.listen(changes.append)
    index.start()
    try:
        assert index.wait_idle(30)
        scores = path.parent / "scores.jsonl"
        record = {"type": "score", "episode_id": "b", "name": "reward", "value": 5.0, "time": 1}
        judge = {"type": "score", "episode_id": "b", "name": "judge", "value": 0.5, "time": 2}
        scores.write_text(json.dumps(record) + "\n" + json.dumps(judge) + "\n")
        assert wait_until(lambda: index.row(1).return_ == 7.0)
        row = index.row(1)
        assert row.scores == {"reward": 5.0, "judge": 0.5} and row.key == 1
        assert (row.file, row.offset, row.run) == (0, index.snapshot()[1].offset, "run")
        assert index.row(0).return_ == 2.0 and index.row(0).scores == {}
        assert index.trajectory(1).scores == {"reward": 5.0, "judge": 0.5}
        assert "judge" in index.column_values()[0].scores
        assert 0 in changes  # rows changed, none added: the page is told
        scores.unlink()
        assert wait_until(lambda: index.row(1).return_ == 2.0)
        assert index.row(1).scores == {} and index.trajectory(1).scores == {}
    finally:
        index.stop()


def test_mean_step_time_matches_an_independent_sum() -> None:
    ms = 1_000_000
    steps = [Step(index=n, start_time=n * ms, end_time=n * ms + (n + 1) * ms) for n in range(6)]
    t = Trajectory(episode_id="x", steps=steps, length=6)
    assert make_row(t, 0, "r", 0, 0).step_ms == pytest.approx(math.fsum(range(1, 7)) / 6)


# --- every format, its problems, opening an episode again -----------------------------------


def test_json_and_gzipped_files_are_read_once_whole_and_opened_by_ordinal(tmp_path) -> None:
    import gzip

    episodes = [trajectory(f"j{n}", [float(n)] * (n + 1)) for n in range(3)]
    items = [json.loads(t.to_json()) for t in episodes]
    listed = tmp_path / "run-j" / "episodes.json"
    listed.parent.mkdir()
    # a bad item between good ones: counted, and the ordinals are those of the good ones
    listed.write_text(json.dumps([items[0], {"steps": "not a list"}, items[1], items[2]]))
    single = tmp_path / "run-s" / "one.json"
    single.parent.mkdir()
    single.write_text(json.dumps(items[2]))
    gz = tmp_path / "run-g" / "trajectories.jsonl.gz"
    gz.parent.mkdir()
    with gzip.open(gz, "wt") as handle:
        handle.write(episodes[0].to_json() + "\n{broken\n" + episodes[1].to_json() + "\n")
    index = read_all([listed, single, gz])
    rows = index.snapshot()
    assert [(r.episode_id, r.run, r.offset) for r in rows] == [
        ("j0", "run-j", 0),
        ("j1", "run-j", 1),
        ("j2", "run-j", 2),
        ("j2", "run-s", 0),
        ("j0", "run-g", 0),
        ("j1", "run-g", len(episodes[0].to_json()) + 1 + len("{broken\n")),
    ]
    for row in rows:
        assert index.trajectory(row.key) == episodes[int(row.episode_id[1])]
    assert index.problem_count == 2
    assert "episodes.json" in index.problems[0] and "item 1" in index.problems[0]
    assert "trajectories.jsonl.gz:2" in index.problems[1]
    # read once: a changed file is not read again, a gone one costs nothing
    for number, entry in enumerate(index.files):
        assert entry.read_to == 1
        entry.path.write_text("[]")
        assert index._read_file(number, entry) == 0
        entry.path.unlink()
        assert index._read_file(number, entry) == 0
    assert len(index.snapshot()) == 6
    assert index.trajectory(0) is None  # the file is gone: nothing to open


def test_a_jsonl_file_not_grown_is_not_read_again(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("a", [1.0])])
    index = read_all([path])
    entry = index.files[0]
    assert (entry.read_to, entry.size) == (path.stat().st_size, path.stat().st_size)
    assert index._read_file(0, entry) == 0
    with path.open("a") as handle:
        handle.write(trajectory("b", [2.0]).to_json() + "\n")
    assert index._read_file(0, entry) == 1
    assert [r.episode_id for r in index.snapshot()] == ["a", "b"]


def test_scores_present_before_the_index_starts_are_in_the_first_rows(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("a", [1.0]), trajectory("b", [2.0])])
    records = [
        {"type": "score", "episode_id": "a", "name": "reward", "value": 0.5, "time": 1},
        {"type": "score", "episode_id": "gone", "name": "judge", "value": 1.0, "time": 1},
    ]
    lines = "".join(json.dumps(r) + "\n" for r in records) + "{bad score\n"
    (path.parent / "scores.jsonl").write_text(lines)
    index = read_all([tmp_path])
    a, b = index.snapshot()
    assert (a.return_, a.scores) == (1.5, {"reward": 0.5})
    assert (b.return_, b.scores) == (2.0, {})
    assert index.trajectory(0).steps[-1].reward == 1.5
    # the bad score line is one problem; a score of an episode not indexed is none
    assert index.problem_count == 1 and "scores.jsonl:3" in index.problems[0]


def test_a_failed_pass_is_a_problem_and_reading_goes_on(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("a", [1.0])])
    index = EpisodeIndex([str(path)], follow=True, poll=0.01)
    real_pass, failures = index._one_pass, []

    def once_failing() -> int:
        if not failures:
            failures.append(1)
            raise OSError("disk gone")
        return real_pass()

    index._one_pass = once_failing
    index.start()
    try:
        assert wait_until(lambda: len(index.snapshot()) == 1)
        assert index.wait_idle(30)
        assert index.problems == ["reading stopped for a moment: OSError: disk gone"]
        assert index.problem_count == 1
    finally:
        index.stop()


def test_a_followed_file_that_goes_away_keeps_its_rows(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("a", [1.0])])
    index = EpisodeIndex([str(path)], poll=0.01).start()
    try:
        assert index.follow and index.wait_idle(30)
        path.unlink()
        wait_until(lambda: False, 0.2)  # a few polls over the missing file
        assert [r.episode_id for r in index.snapshot()] == ["a"]
        assert index.problem_count == 0 and not index.indexing
    finally:
        index.stop()


def test_stopping_an_index_never_started_is_harmless(tmp_path) -> None:
    path = tmp_path / "run" / "trajectories.jsonl"
    write_jsonl(path, [trajectory("a", [1.0])])
    index = EpisodeIndex([str(path)])
    assert (index.follow, index.poll) == (True, 0.5)  # the defaults the command relies on
    index.stop()
    assert index.snapshot() == []
