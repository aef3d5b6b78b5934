"""``agenttrace view``'s index, queries and HTTP API, on a real server on 127.0.0.1, checked
against the trajectories as agenttrace.reading loads them (the page itself is driven in a real
browser by tests/test_view_browser.py)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import clean_environ, wait_until

from agenttrace.reading import load_trajectories
from agenttrace.trajectory.model import EpisodeError, Step, Trajectory
from agenttrace.view.queries import Filters, first_difference, plots
from agenttrace.view.server import ViewServer

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(300)


def get(url: str, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def episode(episode_id: str, rewards: list[float], **fields) -> Trajectory:
    steps = [
        Step(
            index=n,
            observation=fields.get("observations", list(range(len(rewards))))[n],
            action=fields.get("actions", [0] * len(rewards))[n],
            reward=reward,
            terminated=n == len(rewards) - 1,
            start_time=1_000 + n * 1_000_000,
            end_time=1_000 + n * 1_000_000 + 500_000,
        )
        for n, reward in enumerate(rewards)
    ]
    return Trajectory(
        episode_id=episode_id,
        task_id=fields.get("task_id", "task"),
        status=fields.get("status", "completed"),
        error=fields.get("error"),
        return_=float(sum(rewards)),
        length=len(rewards),
        steps=steps,
        start_time=fields.get("start_time"),
        end_time=fields.get("end_time"),
        attributes=fields.get("attributes", {}),
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("view") / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "agenttrace", "demo", "--out", str(runs)],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return runs


@pytest.fixture
def serve():
    servers = []

    def start(sources, **options) -> ViewServer:
        server = ViewServer([str(s) for s in sources], **options).start()
        servers.append(server)
        assert server.index.wait_idle(60)
        return server

    yield start
    for server in servers:
        server.stop()


def test_episodes_filters_sorting_pages_and_counts_equal_the_loaded_trajectories(
    demo_run, serve
) -> None:
    truth = load_trajectories(demo_run)
    server = serve([demo_run])
    api = server.url + "api/"
    status, info = get(api + "info")
    assert status == 200 and info["episodes"] == len(truth) and not info["indexing"]
    assert info["statuses"] == sorted({t.status for t in truth})
    # errored, as the page's filter asks for them
    _, errored = get(api + "episodes?status=errored&limit=1000")
    assert {row["episode_id"] for row in errored["rows"]} == {
        t.episode_id for t in truth if t.status == "errored"
    }
    for row in errored["rows"]:
        trajectory = next(t for t in truth if t.episode_id == row["episode_id"])
        assert row["error"] == f"{trajectory.error.type}: {trajectory.error.message}"
    # sorted by return, highest first, read page by page: every episode once, in order
    seen = []
    for offset in range(0, len(truth), 7):
        _, page = get(api + f"episodes?sort=return&order=desc&offset={offset}&limit=7")
        assert page["total"] == len(truth)
        seen += page["rows"]
    assert [row["return"] for row in seen] == sorted((t.return_ for t in truth), reverse=True)
    assert sorted(row["episode_id"] for row in seen) == sorted(t.episode_id for t in truth)
    # counts by status and the histogram
    _, summary = get(api + "summary")
    counts = Counter(t.status for t in truth)
    assert {s: v["count"] for s, v in summary["by_status"].items()} == dict(counts)
    for status_name, entry in summary["by_status"].items():
        returns = [t.return_ for t in truth if t.status == status_name]
        assert entry["mean_return"] == pytest.approx(np.mean(returns))
        assert sum(summary["histogram"]["counts"][status_name]) == len(returns)
    edges = summary["histogram"]["edges"]
    assert edges[0] == min(t.return_ for t in truth) and edges[-1] == max(t.return_ for t in truth)
    # other filters: task, return range, text, errors only
    task = truth[5].task_id
    _, by_task = get(api + f"episodes?task={task}&limit=1000")
    assert {r["episode_id"] for r in by_task["rows"]} == {
        t.episode_id for t in truth if t.task_id == task
    }
    _, ranged = get(api + "episodes?min_return=0&max_return=0.6&limit=1000")
    assert {r["episode_id"] for r in ranged["rows"]} == {
        t.episode_id for t in truth if 0 <= t.return_ <= 0.6
    }
    _, errors_only = get(api + "episodes?errors=1&limit=1000")
    assert errors_only["total"] == sum(t.error is not None for t in truth)
    _, found = get(api + f"episodes?q={truth[7].episode_id[:12]}")
    assert truth[7].episode_id in {r["episode_id"] for r in found["rows"]}


def test_an_opened_episode_is_the_trajectory_in_the_file(demo_run, serve) -> None:
    truth = {t.episode_id: t for t in load_trajectories(demo_run)}
    server = serve([demo_run], trace_url="http://127.0.0.1:16686/trace/{trace_id}")
    _, page = get(server.url + "api/episodes?limit=1000")
    for row in page["rows"][:10]:
        status, found = get(server.url + f"api/episode/{row['key']}")
        assert status == 200
        trajectory = Trajectory.from_dict(found["trajectory"])
        assert trajectory == truth[row["episode_id"]]
        assert found["trace_link"] == f"http://127.0.0.1:16686/trace/{trajectory.trace_id}"
        assert found["source"].endswith("trajectories.jsonl")
    assert get(server.url + "api/episode/100000")[0] == 404
    assert get(server.url + "api/episode/x")[0] == 400


def test_plots_follow_the_returns_in_start_order(tmp_path, serve) -> None:
    rng = np.random.default_rng(7)
    returns = rng.normal(size=120).round(3)
    lines = [
        episode(f"e{n}", [float(r)], start_time=10_000 + n, end_time=20_000 + n).to_json()
        for n, r in enumerate(returns)
    ]
    order = rng.permutation(len(lines))  # written out of start order
    (tmp_path / "trajectories.jsonl").write_text("\n".join(lines[i] for i in order) + "\n")
    server = serve([tmp_path], follow=False)
    _, found = get(server.url + "api/plots")
    assert found["return"] == pytest.approx(list(returns))
    window = found["window"]
    assert window == 6  # a twentieth of 120
    for n in (0, 5, 50, 119):
        chunk = returns[max(0, n - window + 1) : n + 1]
        assert found["return_mean"][n] == pytest.approx(chunk.mean())
        assert found["return_p10"][n] == pytest.approx(np.percentile(chunk, 10))
        assert found["return_p50"][n] == pytest.approx(np.percentile(chunk, 50))
        assert found["return_p90"][n] == pytest.approx(np.percentile(chunk, 90))
    # more episodes than points: buckets of consecutive episodes
    many = rng.normal(size=4500)
    rows = plots(
        [
            _row(n, float(r))
            for n, r in enumerate(many)  # (rows as the index makes them)
        ],
        Filters(),
    )
    assert rows["downsampled"] and len(rows["x"]) <= 2000
    size = rows["window"]
    assert rows["return"][3] == pytest.approx(many[3 * size : 4 * size].mean())
    assert rows["return_p90"][3] == pytest.approx(np.percentile(many[3 * size : 4 * size], 90))


def _row(n: int, value: float):
    from agenttrace.view.index import make_row

    return make_row(episode(f"e{n}", [value], start_time=n, end_time=n + 1), n, "run", 0, n)


def test_groups_spread(tmp_path, serve) -> None:
    returns = {"g1": [1.0, 2.0, 4.0], "g2": [0.5, 0.5]}
    lines = [
        episode(f"{g}-{n}", [r], attributes={"rl.group.id": g}).to_json()
        for g, values in returns.items()
        for n, r in enumerate(values)
    ]
    (tmp_path / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    server = serve([tmp_path], follow=False)
    _, found = get(server.url + "api/plots")
    by_id = {g["group_id"]: g for g in found["groups"]}
    for group_id, values in returns.items():
        assert by_id[group_id]["mean"] == pytest.approx(np.mean(values))
        assert by_id[group_id]["std"] == pytest.approx(np.std(values))
        assert by_id[group_id]["count"] == len(values)
    _, rows = get(server.url + "api/episodes?group=g2")
    assert {r["episode_id"] for r in rows["rows"]} == {"g2-0", "g2-1"}


def test_two_episodes_compared_mark_the_first_step_that_differs(tmp_path, serve) -> None:
    base = [0.0, 1.0, 0.0, 1.0, 0.0, 2.0]
    same = episode("a", base, actions=[0, 1, 0, 1, 0, 1])
    twin = episode("b", base, actions=[0, 1, 0, 1, 0, 1])
    other = episode("c", base, actions=[0, 1, 0, 2, 0, 1])  # differs at step 3
    longer = episode("d", [*base, 1.0], actions=[0, 1, 0, 1, 0, 1, 1])
    assert first_difference(same, twin) == (None, [])
    assert first_difference(same, other) == (3, ["action"])
    assert first_difference(same, longer) == (5, ["terminated"])  # (its step 5 is not its last)
    cut = Trajectory(episode_id="cut", steps=same.steps[:4])
    assert first_difference(cut, same) == (4, ["length"])
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in (same, twin, other, longer)))
    server = serve([path], follow=False)
    _, found = get(server.url + "api/compare/episodes?a=0&b=2")
    assert (found["first_difference"], found["differs_in"]) == (3, ["action"])
    assert found["a"]["trajectory"]["episode_id"] == "a" and found["same_task"]
    _, found = get(server.url + "api/compare/episodes?a=0&b=1")
    assert found["first_difference"] is None
    assert get(server.url + "api/compare/episodes?a=0&b=9")[0] == 404


def test_two_runs_compared_by_task(tmp_path, serve) -> None:
    for run, outcomes in (("run-a", [True, True, False]), ("run-b", [False, False, True])):
        folder = tmp_path / run
        folder.mkdir()
        lines = [
            episode(
                f"{run}-{n}",
                [1.0 if ok else 0.0],
                task_id=f"t{n % 2}",
                status="completed" if ok else "truncated",
            ).to_json()
            for n, ok in enumerate(outcomes)
        ]
        (folder / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    server = serve([tmp_path], follow=False)
    _, info = get(server.url + "api/info")
    assert sorted(info["runs"]) == ["run-a", "run-b"]
    _, found = get(server.url + "api/compare/runs?a=run-a&b=run-b")
    assert found["a"]["by_task"]["t0"] == {"episodes": 2, "success": 1, "rate": 0.5}
    assert found["a"]["by_task"]["t1"] == {"episodes": 1, "success": 1, "rate": 1.0}
    assert found["b"]["by_task"]["t0"]["success"] == 1 and found["b"]["returns"] == [0, 0, 1]
    status, missing = get(server.url + "api/compare/runs?a=run-a&b=nope")
    assert status == 404 and "run-a" in missing["error"]


def _events(url: str, seen: list, stop: threading.Event) -> None:
    with urllib.request.urlopen(url + "events", timeout=30) as stream:
        name = None
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: ") and name == "indexed":
                seen.append(json.loads(line[len("data: ") :]))
            if stop.is_set():
                return


def test_a_run_being_written_gains_episodes_and_scores_live(tmp_path, serve) -> None:
    run = tmp_path / "run"
    run.mkdir()
    path = run / "trajectories.jsonl"
    first = [episode(f"e{n}", [1.0, float(n)]) for n in range(3)]
    path.write_text("".join(t.to_json() + "\n" for t in first))
    server = serve([tmp_path], poll=0.05)
    seen: list = []
    stop = threading.Event()
    listener = threading.Thread(target=_events, args=(server.url, seen, stop), daemon=True)
    listener.start()
    assert wait_until(lambda: seen, 10) and seen[0]["episodes"] == 3
    # a line written in two parts: nothing until it is whole, then one more row
    text = episode("e3", [2.0, 2.0]).to_json() + "\n"
    with path.open("a") as handle:
        handle.write(text[:40])
        handle.flush()
        wait_until(lambda: False, 0.5)  # several polls see the half line
        assert get(server.url + "api/info")[1]["episodes"] == 3
        assert server.index.problem_count == 0  # a line being written is not an error
        handle.write(text[40:])
    assert wait_until(lambda: get(server.url + "api/info")[1]["episodes"] == 4, 10)
    assert wait_until(lambda: seen and seen[-1]["episodes"] == 4, 10)
    # a late score (agenttrace score / at.score) lands on its episode's row and trajectory
    score = {"type": "score", "episode_id": "e1", "name": "reward", "value": 5.0, "time": 1}
    (run / "scores.jsonl").write_text(json.dumps(score) + "\n")
    assert wait_until(lambda: get(server.url + "api/episodes?q=e1")[1]["rows"][0]["return"] == 7.0)
    _, found = get(server.url + "api/episode/1")
    assert found["trajectory"]["return"] == 7.0 and found["trajectory"]["scores"]["reward"] == 5
    # a new run folder appears
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "trajectories.jsonl").write_text(episode("f0", [1.0]).to_json() + "\n")
    assert wait_until(lambda: "run2" in get(server.url + "api/info")[1]["runs"], 10)
    stop.set()


def test_every_format_the_loaders_read_and_bad_lines_cost_only_themselves(tmp_path, serve):
    pytest.importorskip("pyarrow")
    from agenttrace.sinks import ParquetSink

    truth = [
        episode(
            f"p{n}",
            [0.5] * (n + 1),
            status="errored" if n == 2 else "completed",
            error=EpisodeError(type="ValueError", message="bad") if n == 2 else None,
            observations=[np.zeros((4, 4), dtype=np.uint8) + n] * (n + 1),
        )
        for n in range(4)
    ]
    folder = tmp_path / "parquet"
    sink = ParquetSink(folder / "trajectories.parquet")
    for trajectory in truth:
        sink.write(trajectory)
    sink.close()
    gz = tmp_path / "gz" / "trajectories.jsonl.gz"
    gz.parent.mkdir()
    with gzip.open(gz, "wt") as handle:
        for trajectory in truth:
            handle.write(trajectory.to_json() + "\n")
    bad = tmp_path / "bad" / "trajectories.jsonl"
    bad.parent.mkdir()
    bad.write_text(truth[0].to_json() + "\n{not json\n" + truth[3].to_json() + "\n")
    for source, expected in ((folder, truth), (gz, truth), (bad, [truth[0], truth[3]])):
        server = serve([source], follow=False)
        _, page = get(server.url + "api/episodes?limit=100")
        assert [row["episode_id"] for row in page["rows"]] == [t.episode_id for t in expected]
        for row, trajectory in zip(page["rows"], expected, strict=True):
            _, found = get(server.url + f"api/episode/{row['key']}")
            assert Trajectory.from_dict(found["trajectory"]) == trajectory
    _, info = get(server.url + "api/info")
    assert info["problems"] == 1
    assert "trajectories.jsonl:2: not valid JSON" in info["first_problems"][0]


def test_read_only_and_loopback_unless_exposed_with_a_token(tmp_path, serve) -> None:
    path = tmp_path / "trajectories.jsonl"
    path.write_text(episode("e0", [1.0]).to_json() + "\n")
    with pytest.raises(ValueError, match="--expose"):
        ViewServer([str(path)], "0.0.0.0", 0)
    with pytest.raises(ValueError, match="token"):
        ViewServer([str(path)], "0.0.0.0", 0, exposed=True)
    server = serve([path], token="s3cret")  # (on loopback, a token still guards it)
    assert get(server.url + "api/info")[0] == 401
    assert get(server.url + "api/info?token=wrong")[0] == 401
    assert get(server.url + "api/info?token=s3cret")[0] == 200
    assert get(server.url + "api/info", {"Authorization": "Bearer s3cret"})[0] == 200
    # the page opened with ?token= keeps it as a cookie for its own requests
    with urllib.request.urlopen(server.url + "?token=s3cret", timeout=10) as answer:
        cookie = answer.headers["Set-Cookie"].split(";")[0]
    assert cookie == "agenttrace_view_token=s3cret"
    assert get(server.url + "api/info", {"Cookie": cookie})[0] == 200
    assert get(server.url + "api/info", {"Cookie": "agenttrace_view_token=x"})[0] == 401
    request = urllib.request.Request(server.url + "api/info", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code in (401, 405)
    with pytest.raises(FileNotFoundError):
        ViewServer([str(tmp_path / "nothing-here")])


def test_the_command_prints_its_link_and_rebuilds_span_files(demo_run, tmp_path) -> None:
    spans = next(demo_run.glob("*/spans.jsonl"))
    truth = {t.episode_id: t for t in load_trajectories(demo_run)}
    process = subprocess.Popen(
        [sys.executable, "-m", "agenttrace", "view", str(spans), "--no-follow"],
        env=clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("agenttrace view: http://127.0.0.1:"), line
        url = line.split()[-1]
        assert wait_until(lambda: get(url + "api/info")[1]["episodes"] == len(truth), 60)
        _, page = get(url + "api/episodes?limit=1000")
        for row in page["rows"]:
            assert row["return"] == pytest.approx(truth[row["episode_id"]].return_)
            assert row["status"] == truth[row["episode_id"]].status
    finally:
        process.terminate()
        assert process.wait(30) == 0
    refused = subprocess.run(
        [sys.executable, "-m", "agenttrace", "view", str(spans), "--listen", "0.0.0.0:0"],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--expose" in refused.stderr


def test_step_tables_are_shown_as_the_trajectories_they_hold(tmp_path, serve) -> None:
    pytest.importorskip("pyarrow")
    from agenttrace.reading.step_tables import step_table_trajectories
    from agenttrace.sinks import StepTablesSink

    truth = [
        episode(
            f"s{n}",
            [0.25 * n] * 3,
            status="errored" if n == 1 else "completed",
            error=EpisodeError(type="ValueError", message="bad") if n == 1 else None,
            observations=[np.full((2, 3), n + i, dtype=np.float32) for i in range(3)],
            actions=[np.int64(i) for i in range(3)],
            attributes={"rl.group.id": "g"},
        )
        for n in range(3)
    ]
    tables = tmp_path / "tables"
    sink = StepTablesSink(tables)
    for trajectory in truth:
        sink.write(trajectory)
    sink.close()
    assert list(step_table_trajectories(tables)) == truth  # what the tables hold, whole
    server = serve([tables], follow=False)
    _, page = get(server.url + "api/episodes?limit=100")
    assert [row["episode_id"] for row in page["rows"]] == ["s0", "s1", "s2"]
    assert [row["run"] for row in page["rows"]] == ["tables"] * 3
    assert page["rows"][1]["error"] == "ValueError: bad" and page["rows"][0]["group_id"] == "g"
    _, found = get(server.url + f"api/episode/{page['rows'][2]['key']}")
    assert Trajectory.from_dict(found["trajectory"]) == truth[2]


def test_a_trace_backend_is_rebuilt_first_as_export_does(cartpole_run, tmp_path) -> None:
    from backend_servers import BackendServer, jaeger_v3_route
    from conftest import SERVICE

    live, records = cartpole_run
    jaeger = BackendServer(jaeger_v3_route(records))
    source = jaeger.url.replace("http://", "jaeger+http://")
    process = subprocess.Popen(
        [sys.executable, "-m", "agenttrace", "view", source, "--service", SERVICE,
         "--since", "6h", "--no-follow"],
        env=clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        url = process.stdout.readline().split()[-1]
        assert wait_until(lambda: get(url + "api/info")[1]["episodes"] == len(live), 60)
        _, info = get(url + "api/info")
        assert info["runs"] == [f"jaeger-127.0.0.1-{jaeger.url.rsplit(':', 1)[1]}"]
        _, page = get(url + "api/episodes?limit=100")
        for row in page["rows"]:
            _, found = get(url + f"api/episode/{row['key']}")
            truth = next(t for t in live if t.episode_id == row["episode_id"])
            assert Trajectory.from_dict(found["trajectory"]) == truth
        assert jaeger.requests[0]["query"]["query.service_name"] == [SERVICE]
    finally:
        process.terminate()
        process.wait(30)
        jaeger.stop()
