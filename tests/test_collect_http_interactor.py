"""examples/http_interactor through ``agenttrace collect``: two processes, one service.

The Interactor and its env server (a second process) both send their spans to a collect
service this test starts on 127.0.0.1 (``AGENTTRACE_COLLECT``), and write their span files too
(``AGENTTRACE_SPANS=file``). The service meets both sides of every episode live, so its
trajectories must equal the offline rebuild from both span files, the env server's content
included, and carry the example's own SQLite rows (the independent truth).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_same_episodes, wait_until
from test_examples_http_interactor import (
    EPISODES,
    POLICY_VERSION,
    example_environment,
    read_rows,
    run_example,
)

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.collect import CollectService, CollectSettings
from agenttrace.reading import load_trajectories
from agenttrace.storage import read_otlp_json

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(300)


def test_collect_rebuilds_both_processes_episodes_as_the_offline_rebuild_does(
    tmp_path: Path,
) -> None:
    settings = CollectSettings(out=tmp_path / "collected", grace_seconds=1.0)
    service = CollectService(settings, http="127.0.0.1:0", grpc=None).start()
    try:
        env = example_environment(tmp_path / "runs")
        env.update(
            AGENTTRACE_COLLECT=f"http://127.0.0.1:{service.http_port}",
            AGENTTRACE_SPANS="file",
        )
        db = tmp_path / "rollouts.sqlite"
        args = ["--episodes", str(EPISODES), "--policy-version", POLICY_VERSION, "--db", str(db)]
        done = run_example(args, env)
        assert done.returncode == 0, done.stderr[-3000:]

        def collected() -> list[at.Trajectory]:
            files = sorted((tmp_path / "collected").glob("trajectories*.jsonl"))
            return load_trajectories(files) if files else []

        assert wait_until(lambda: len(collected()) == EPISODES, timeout=60)
        health = service.collector.health()
    finally:
        service.stop()
    trajectories = collected()
    span_files = sorted((tmp_path / "runs").glob("*/spans*.jsonl"))
    assert len({path.parent for path in span_files}) == 2, "the Interactor and the env server"
    assert not list((tmp_path / "runs").glob("*/trajectories*.jsonl")), "no local rebuild"
    offline = at.assemble(read_otlp_json(span_files))
    assert_same_episodes(offline, trajectories)
    assert health["late_spans"] == 0 and health["spans_rejected"] == 0
    # the example's own record: each step's row, and the env server's side of each step
    sessions, rows = read_rows(db)
    by_task = {t.task_id: t for t in trajectories}
    assert sorted(by_task) == sorted(sessions)
    for task_id, task_rows in rows.items():
        trajectory = by_task[task_id]
        assert trajectory.status != sc.STATUS_INCOMPLETE and not trajectory.missing_steps
        assert [s.index for s in trajectory.steps] == [r["step_id"] for r in task_rows]
        assert trajectory.return_ == pytest.approx(sum(r["step_reward"] for r in task_rows))
        for step, row in zip(trajectory.steps, task_rows, strict=True):
            assert step.reward == row["step_reward"]
            assert step.observation == json.loads(row["messages"])
            if row["is_trainable"]:  # the env played it: its env.step span (the server's)
                assert step.action == row["response"]
                env_state = None if row["env_state"] is None else json.loads(row["env_state"])
                assert step.info["env_state"] == env_state
