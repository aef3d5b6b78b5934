"""Long episodes: rebuilt a stretch at a time, whole, the same live and offline, memory bounded."""

from __future__ import annotations

import itertools
import pickle

import pytest
from conftest import exported, read_run

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.assembler import EpisodeAssembly
from agenttrace.trajectory.records import SpanRecord
from agenttrace.trajectory.spill import SpilledSteps

STEPS = 240


def _play_agent_episode(steps: int) -> dict:
    """An episode with LLM calls (one nested in another), tools, calls between steps and a
    foreign span around a stretch of steps; returns what was played (the independent truth)."""
    foreign = at.get_default().provider.get_tracer("some.llm.library")
    truth: dict = {"rewards": [], "calls": []}
    with at.episode(task_id="long-agent") as episode:
        truth["episode_id"] = episode.id
        with at.env_reset() as reset:
            reset.record_result(({"t": 0}, {"seed": 7}))
        for t in range(steps):
            calls = 0
            if t % 5 == 0:  # a model call under no step span: it belongs to the next step
                with foreign.start_as_current_span(
                    "chat between", attributes={sc.GEN_AI_OPERATION_NAME: "chat"}
                ):
                    pass
                calls += 1
            with at.timestep():
                with at.agent_act() as act:
                    if t % 3 == 0:
                        with at.llm_call(model="outer"):
                            with foreign.start_as_current_span(
                                "chat inner", attributes={sc.GEN_AI_OPERATION_NAME: "chat"}
                            ):
                                pass
                        calls += 1
                    if t % 4 == 0:
                        with foreign.start_as_current_span(
                            "execute_tool search",
                            attributes={sc.GEN_AI_OPERATION_NAME: "execute_tool"},
                        ):
                            pass
                    act.record(observation={"t": t}, action=f"a{t}")
                with at.env_step() as step:
                    reward = None if t % 7 == 0 else float(t % 3)
                    step.record_result(({"t": t + 1}, reward, t == steps - 1, False, {"i": t}))
            truth["rewards"].append(reward)
            truth["calls"].append(calls)
    return truth


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> tuple[at.Trajectory, list, dict]:
    """One long agent episode traced live: (live trajectory, its span records, the truth)."""
    out = tmp_path_factory.mktemp("long")
    runtime = at.configure(out=str(out), run_name="long", sinks=["jsonl"], spans=["file"])
    truth = _play_agent_episode(STEPS)
    result = read_run(runtime)
    at.shutdown()
    (live,) = result.live
    return live, list(read_otlp_json(runtime.span_paths)), truth


def _check_against_truth(trajectory: at.Trajectory, truth: dict) -> None:
    assert trajectory.status == sc.STATUS_COMPLETED
    assert trajectory.episode_id == truth["episode_id"]
    assert len(trajectory.steps) == trajectory.length == STEPS
    assert [s.index for s in trajectory.steps] == list(range(STEPS))
    assert [s.observation for s in trajectory.steps] == [{"t": t} for t in range(STEPS)]
    assert [s.action for s in trajectory.steps] == [f"a{t}" for t in range(STEPS)]
    assert [s.reward for s in trajectory.steps] == truth["rewards"]
    assert [len(s.llm_calls) for s in trajectory.steps] == truth["calls"]
    assert [len(s.tool_calls) for s in trajectory.steps] == [int(t % 4 == 0) for t in range(STEPS)]
    assert trajectory.final_observation == {"t": STEPS}
    assert trajectory.return_ == sum(r for r in truth["rewards"] if r is not None)


def test_the_live_rebuild_matches_what_was_played(agent_run) -> None:
    live, _, truth = agent_run
    _check_against_truth(live, truth)


def _as_stored(records: list, line: int) -> list:
    """Records in the order a span file gives them back: lines of ``line`` spans in the order
    they ended, each grouped by instrumentation scope (agenttrace's first)."""
    ordered = sorted(records, key=lambda r: r.end_time)
    stored = []
    for start in range(0, len(ordered), line):
        chunk = ordered[start : start + line]
        stored += sorted(chunk, key=lambda r: r.scope_name != "agenttrace")
    return stored


@pytest.mark.parametrize("max_bytes", [80_000, 300_000, 10**7])
@pytest.mark.parametrize("batch", [1, 13, 500])
@pytest.mark.parametrize("line", [1, 20])
def test_a_rebuild_in_stretches_equals_the_one_shot_rebuild(
    agent_run, max_bytes, batch, line
) -> None:
    live, records, truth = agent_run
    assembly = EpisodeAssembly(max_bytes=max_bytes)
    iterator = iter(_as_stored(records, line))
    while chunk := list(itertools.islice(iterator, batch)):
        assembly.add(chunk)
        assert assembly.retained_bytes <= 2 * max_bytes + 2_000 * batch
    trajectory = assembly.trajectory()
    if max_bytes < 10**7:
        assert isinstance(trajectory.steps, SpilledSteps)  # it did go in stretches
    assert assembly.late == 0
    _check_against_truth(trajectory, truth)
    assert trajectory == at.build_trajectory(records) == live


def test_spans_that_come_too_late_for_their_stretch_are_counted(agent_run) -> None:
    """All other libraries' spans after all of agenttrace's (one huge storage line): the
    stretches are finished before they come, so they are left out and counted."""
    _, records, truth = agent_run
    assembly = EpisodeAssembly(max_bytes=40_000)
    for record in _as_stored(records, len(records)):
        assembly.add([record])
    trajectory = assembly.trajectory()
    assert assembly.late > 0
    assert len(trajectory.steps) == STEPS
    assert sum(len(s.llm_calls) for s in trajectory.steps) < sum(truth["calls"])


def test_spilled_steps_read_back_like_a_list(agent_run) -> None:
    live, _, _ = agent_run
    steps = SpilledSteps(live.steps)
    assert len(steps) == STEPS
    assert steps[5] == live.steps[5] and steps[-1] == live.steps[-1]
    assert steps[10:13] == live.steps[10:13]
    assert list(steps) == live.steps and steps == live.steps
    assert steps != live.steps[:-1]
    with pytest.raises(IndexError):
        steps[STEPS]
    assert pickle.loads(pickle.dumps(steps)) == live.steps  # as a plain list
    texts = list(steps.json_texts())
    assert texts == [step.to_json() for step in live.steps]
    assert steps.nbytes == sum(len(text.encode()) + 1 for text in texts)


def test_a_record_for_a_finished_stretch_is_left_out_and_counted(agent_run) -> None:
    _, records, _ = agent_run
    step_zero = [
        r for r in records if r.name == sc.ENV_STEP and r.attributes[sc.TIMESTEP_INDEX] == 0
    ]
    assembly = EpisodeAssembly(max_bytes=40_000)
    for record in _as_stored(records, 1):
        assembly.add([record])
    assembly.add(step_zero)  # again, after step 0 was finished and let go
    assert assembly.late == 1
    assert len(assembly.trajectory().steps) == STEPS


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_live_and_exported_long_episodes_are_the_same_line(tmp_path, writer) -> None:
    """Both rebuild in stretches (the live writer and ``agenttrace export``) and write the
    trajectory's line a piece at a time; the two lines are byte for byte the same."""
    runtime = at.configure(
        out=str(tmp_path), run_name="long", writer=writer, max_episode_bytes=60_000
    )
    truth = _play_agent_episode(STEPS)
    runtime.shutdown()
    (live_path,) = runtime.trajectory_paths
    (live,) = load_trajectories(live_path)
    _check_against_truth(live, truth)
    assert runtime.stats()["spans_too_late_for_step"] == 0
    spans = str(tmp_path / "long" / "spans*.jsonl")
    (offline,) = exported(spans, tmp_path / "rebuilt.jsonl", "--max-episode-bytes", "60000")
    assert offline == live
    assert (tmp_path / "rebuilt.jsonl").read_bytes() == live_path.read_bytes()


def _synthetic_episode(steps: int) -> list[SpanRecord]:
    """Spans as another tool writes them, in the order they end: no agent.act, observations
    only in what env.reset and env.step return, no return or length on the episode span,
    and text the storage cut (not JSON any more) in step 3's info."""
    trace = 0xABC
    records = [
        SpanRecord(trace, 2, 1, sc.ENV_RESET, 10, 11, {sc.EPISODE_ID: "e", sc.OBSERVATION: "[0]"})
    ]
    for t in range(steps):
        start = 100 + 10 * t
        step_id, env_id = 1000 + t, 5000 + t
        info = '{"cut": tr' if t == 3 else '{"t": %d}' % t
        attributes = {
            sc.EPISODE_ID: "e",
            sc.TIMESTEP_INDEX: t,
            sc.OBSERVATION: "[%d]" % (t + 1),
            sc.REWARD: float(t % 4),
            sc.TERMINATED: t == steps - 1,
            sc.INFO: info,
        }
        records.append(
            SpanRecord(trace, env_id, step_id, sc.ENV_STEP, start + 1, start + 8, attributes)
        )
        records.append(
            SpanRecord(
                trace, step_id, 1, sc.TIMESTEP, start, start + 9,
                {sc.EPISODE_ID: "e", sc.TIMESTEP_INDEX: t},
                lossy={"@times": "kept to the microsecond"} if t == 5 else {},
            )
        )  # fmt: skip
    records.append(SpanRecord(trace, 1, 0, sc.EPISODE, 5, 100 + 10 * steps, {sc.EPISODE_ID: "e"}))
    return records


@pytest.mark.parametrize("max_bytes", [3_000, 8_000])
def test_a_stretched_rebuild_carries_observations_returns_and_losses_across_stretches(
    max_bytes,
) -> None:
    records = _synthetic_episode(60)
    assembly = EpisodeAssembly(max_bytes=max_bytes)
    for record in records:
        assembly.add([record])
    trajectory = assembly.trajectory()
    assert isinstance(trajectory.steps, SpilledSteps)
    whole = at.build_trajectory(records)
    assert trajectory == whole
    # the independent truth: what _synthetic_episode wrote
    assert [s.observation for s in trajectory.steps] == [[t] for t in range(60)]
    assert trajectory.final_observation == [60]
    assert trajectory.return_ == float(sum(t % 4 for t in range(60)))
    assert trajectory.status == sc.STATUS_COMPLETED and trajectory.length == 60
    assert trajectory.lossy.keys() == {"steps[3].info", "times"}  # (the timestep's mark)
    assert "cut by the trace storage" in trajectory.lossy["steps[3].info"]


def test_every_late_record_is_counted_once() -> None:
    records = _synthetic_episode(60)
    assembly = EpisodeAssembly(max_bytes=3_000)
    for record in records[:-1]:
        assembly.add([record])
    early = [r for r in records if r.attributes.get(sc.TIMESTEP_INDEX) in (0, 1, 2)]
    assembly.add(early[:2])
    assembly.add(early[2:])
    assembly.add(records[-1:])
    assert assembly.late == len(early) == 6
    assert len(assembly.trajectory().steps) == 60
