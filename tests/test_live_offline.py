"""The central promise: trajectories written live equal those rebuilt from the span file."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import numpy as np
from conftest import read_run

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.trajectory.equality import values_equal


@dataclasses.dataclass
class Board:
    cells: np.ndarray
    to_move: str


def _rich_episode(seed: int, fail: bool = False) -> None:
    rng = np.random.default_rng(seed)
    with at.episode(
        task_id=f"task-{seed}",
        env_name="toy",
        agent_name="scripted",
        policy_version="v7",
        seed=seed,
        attributes={"team": "rl"},
    ):
        with at.env_reset() as reset:
            board = Board(rng.integers(0, 3, size=(3, 3), dtype=np.int8), "x")
            reset.record(observation=board, info={"seed": seed, "level": (1, 2)})
        for i in range(4):
            with at.timestep():
                with at.agent_act() as act:
                    with at.llm_call(model="scripted-1", provider="local") as llm:
                        llm.record(
                            input_messages=[{"role": "user", "content": f"move {i}?"}],
                            output_messages=[{"role": "assistant", "content": "b2"}],
                            finish_reasons=["stop"],
                            input_tokens=5 + i,
                            output_tokens=2,
                        )
                    act.record(action={"cell": (i, i % 3), "raw": b"\x00\x01"})
                with at.env_step() as step:
                    if fail and i == 2:
                        raise RuntimeError("env crashed")
                    reward = float("nan") if i == 1 and seed % 2 else float(rng.normal())
                    step.record(
                        observation=Board(rng.integers(0, 3, (3, 3), dtype=np.int8), "o"),
                        reward=reward,
                        terminated=i == 3,
                        discount=0.99,
                        info={"legal": np.arange(i + 1), 3: "int key"},
                    )


def _assert_equal_field_by_field(live: at.Trajectory, offline: at.Trajectory) -> None:
    for field in dataclasses.fields(at.Trajectory):
        if field.name == "steps":
            continue
        assert values_equal(getattr(live, field.name), getattr(offline, field.name)), field.name
    assert len(live.steps) == len(offline.steps)
    for a, b in zip(live.steps, offline.steps, strict=True):
        for field in dataclasses.fields(at.Step):
            assert values_equal(getattr(a, field.name), getattr(b, field.name)), (
                a.index,
                field.name,
            )
    assert live == offline


def test_live_trajectories_equal_offline_rebuild_field_by_field(pipeline) -> None:
    for seed in range(6):
        with contextlib.suppress(RuntimeError):  # seed 5 crashes its env on purpose
            _rich_episode(seed, fail=seed == 5)
    result = read_run(pipeline)
    assert len(result.live) == 6
    offline = {t.episode_id: t for t in result.offline}
    for live in result.live:
        _assert_equal_field_by_field(live, offline[live.episode_id])
    first = result.live[0]
    assert first.attributes == {
        sc.ENV_NAME: "toy",
        sc.AGENT_NAME: "scripted",
        sc.POLICY_VERSION: "v7",
        sc.EPISODE_SEED: 0,
        "team": "rl",
        sc.GEN_AI_CONVERSATION_ID: first.episode_id,
    }
    assert isinstance(first.steps[0].observation, Board)
    assert first.steps[1].observation.to_move == "o"  # step 1 acts on what step 0 returned
    assert first.steps[1].observation.cells.dtype == np.int8
    assert first.steps[0].action == {"cell": (0, 0), "raw": b"\x00\x01"}
    assert first.steps[0].llm_calls[0].input_tokens == 5
    errored = result.live[5]
    assert errored.status == "errored" and errored.error.type == "RuntimeError"
    assert [s.index for s in errored.steps] == [0, 1, 2]


def test_observation_alignment_rewards_sit_with_their_action(pipeline) -> None:
    observations = [np.array([i], dtype=np.int64) for i in range(5)]
    with at.episode():
        with at.env_reset() as reset:
            reset.record(observation=observations[0])
        for i in range(4):
            with at.timestep():
                with at.env_step() as step:
                    step.record(
                        action=i * 10,
                        observation=observations[i + 1],
                        reward=i + 0.5,
                        terminated=i == 3,
                    )
    (trajectory,) = read_run(pipeline).live
    for i, step in enumerate(trajectory.steps):
        assert values_equal(step.observation, observations[i])  # what the agent acted on
        assert step.action == i * 10
        assert step.reward == i + 0.5  # earned by that action
    assert values_equal(trajectory.final_observation, observations[4])


def test_span_file_is_collector_format(pipeline) -> None:
    _rich_episode(1)
    read_run(pipeline)
    for line in pipeline.span_paths[0].read_text().splitlines():
        batch = json.loads(line)
        for resource in batch["resourceSpans"]:
            assert any(a["key"] == "service.name" for a in resource["resource"]["attributes"])
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
                    assert isinstance(span["startTimeUnixNano"], str)


def test_info_recorded_on_several_spans_of_a_step_is_merged(pipeline) -> None:
    with at.episode():
        with at.timestep() as step:
            step.record(info={"is_trainable": False, "source": "runner"})
            with at.env_step() as env_step:
                env_step.record(reward=1.0, terminated=True, info={"source": "env", "x": 1})
    result = read_run(pipeline)
    for trajectory in (result.live[0], result.offline[0]):
        assert trajectory.steps[0].info == {"is_trainable": False, "source": "env", "x": 1}
