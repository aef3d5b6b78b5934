"""The assembler's rules for an episode's own fields and where model and tool calls go
(agenttrace/trajectory/assembler.py, call_placement.py), each on span records written by hand
and checked against what the rule says."""

from __future__ import annotations

from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.assembler import build_trajectory
from agenttrace.trajectory.records import SpanRecord

TRACE = 0xABC


def _span(
    name: str,
    span_id: int,
    start: int,
    end: int | None,
    parent: int = 1,
    **attributes: Any,
) -> SpanRecord:
    return SpanRecord(TRACE, span_id, parent, name, start, end, attributes)


def _episode(start: int = 0, end: int | None = 100, **attributes: Any) -> SpanRecord:
    return _span(sc.EPISODE, 1, start, end, 0, **{sc.EPISODE_ID: "ep", **attributes})


def _chat(span_id: int, start: int, end: int, parent: int = 1, **attributes: Any) -> SpanRecord:
    attributes = {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m", **attributes}
    return _span("chat m", span_id, start, end, parent, **attributes)


def _tool(span_id: int, start: int, end: int, parent: int = 1) -> SpanRecord:
    attributes = {sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.GEN_AI_TOOL_NAME: "search"}
    return _span("execute_tool search", span_id, start, end, parent, **attributes)


def _step(name: str, span_id: int, index: int, start: int, end: int, **attributes: Any):
    return _span(name, span_id, start, end, 1, **{sc.TIMESTEP_INDEX: index, **attributes})


# --- the episode's own fields -----------------------------------------------------------------


def test_start_and_end_time_are_the_episode_spans() -> None:
    records = [_episode(5, 90), _step(sc.ENV_STEP, 10, 0, 2, 95)]  # (a step past the end)
    trajectory = build_trajectory(records)
    assert (trajectory.start_time, trajectory.end_time) == (5, 90)


def test_without_an_ended_episode_span_the_times_are_its_spans() -> None:
    records = [
        _episode(5, None),
        _step(sc.ENV_STEP, 10, 0, 3, 40),
        _step(sc.ENV_STEP, 11, 1, 41, 70),
        _span("other", 12, 50, None),  # (still open: no end to take)
    ]
    trajectory = build_trajectory(records)
    assert (trajectory.start_time, trajectory.end_time) == (5, 70)
    no_episode = build_trajectory(records[1:], "given")
    assert (no_episode.start_time, no_episode.end_time) == (3, 70)
    assert no_episode.episode_id == "given"


def test_the_fallback_episode_id() -> None:
    step = _span(sc.ENV_STEP, 10, 1, 2, 0, **{sc.TIMESTEP_INDEX: 0})
    assert build_trajectory([step]).episode_id == format(TRACE, "032x")
    assert build_trajectory([step]).trace_id == format(TRACE, "032x")
    named = step._replace(attributes={**step.attributes, sc.EPISODE_ID: 12})
    assert build_trajectory([named]).episode_id == "12"  # (its rl.episode.id, as text)
    assert build_trajectory([_episode(), step]).episode_id == "ep"
    assert build_trajectory([_episode(), step], "given").episode_id == "given"
    external = _episode(**{sc.EPISODE_EXTERNAL_ID: "mine"})
    assert build_trajectory([external, step], "given").episode_id == "mine"
    assert "rl.episode.external_id" not in build_trajectory([external, step]).attributes
    empty_external = _episode(**{sc.EPISODE_EXTERNAL_ID: ""})
    assert build_trajectory([empty_external, step]).episode_id == "ep"


def test_return_length_and_task_by_hand() -> None:
    steps = [
        _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 1.5}),
        _step(sc.ENV_STEP, 11, 1, 3, 4, **{sc.REWARD: 2}),
        _step(sc.ENV_STEP, 12, 2, 5, 6, **{sc.REWARD: True, sc.TERMINATED: True}),
    ]
    trajectory = build_trajectory([_episode(**{sc.TASK_ID: 7}), *steps])
    assert trajectory.return_ == 4.5 and type(trajectory.return_) is float
    assert [s.reward for s in trajectory.steps] == [1.5, 2.0, 1.0]
    assert trajectory.length == 3 and trajectory.task_id == "7"
    stated = _episode(**{sc.EPISODE_RETURN: 10, sc.EPISODE_LENGTH: 3})
    assert build_trajectory([stated, *steps]).return_ == 10.0
    as_flag = _episode(**{sc.EPISODE_RETURN: True})  # (a bool is no return: computed)
    assert build_trajectory([as_flag, *steps]).return_ == 4.5


def test_the_episode_spans_attributes_stay_but_the_lifted_ones() -> None:
    episode = _episode(**{"user": (1, 2), sc.TASK_ID: "t", sc.EPISODE_STATUS: "completed"})
    trajectory = build_trajectory([episode, _step(sc.ENV_STEP, 10, 0, 1, 2)])
    assert trajectory.attributes == {"user": [1, 2]}
    assert trajectory.status == "completed"


# --- where model and tool calls go ------------------------------------------------------------


def test_a_model_call_after_the_last_timestep_joins_that_step() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 20),
        _step(sc.TIMESTEP, 11, 1, 30, 40),
        _chat(20, 50, 60),  # after every step, under none: the last one's
        _chat(21, 25, 28),  # between steps 0 and 1: the next to start
        _chat(22, 5, 8),  # before the first: the first
    ]
    trajectory = build_trajectory(records)
    assert [s.index for s in trajectory.steps] == [0, 1]  # (no turn of its own)
    assert [c.start_time for c in trajectory.steps[0].llm_calls] == [5]
    assert [c.start_time for c in trajectory.steps[1].llm_calls] == [25, 50]


def test_a_call_under_a_step_span_or_naming_its_step_goes_there() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 20),
        _step(sc.TIMESTEP, 11, 1, 30, 40),
        _chat(20, 12, 13, parent=10),
        _chat(21, 50, 55, **{sc.TIMESTEP_INDEX: 0}),  # names step 0
        _tool(22, 32, 33, parent=11),
    ]
    trajectory = build_trajectory(records)
    assert [c.start_time for c in trajectory.steps[0].llm_calls] == [12, 50]
    assert [t.start_time for t in trajectory.steps[1].tool_calls] == [32]
    assert trajectory.steps[1].llm_calls == []


def test_a_first_tool_call_in_an_episode_without_timesteps() -> None:
    """No timesteps: calls after every step make agent turns. A tool call that comes before
    any model call has no turn to join: with a step before it, it joins that step; with
    none, it is in no step."""
    alone = build_trajectory([_episode(), _tool(20, 5, 6)])
    assert alone.steps == []
    with_step = build_trajectory([_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2), _tool(20, 5, 6)])
    assert [s.index for s in with_step.steps] == [0]
    assert [t.name for t in with_step.steps[0].tool_calls] == ["search"]


def test_model_calls_after_every_step_are_turns_and_tool_calls_join_them() -> None:
    records = [
        _episode(),
        _chat(20, 10, 20),  # turn 0
        _tool(21, 21, 22),  # joins turn 0
        _chat(22, 30, 40),  # turn 0 used a tool: turn 1
        _chat(23, 41, 50),  # turn 1 has no tool call yet: still turn 1
        _tool(24, 51, 52),
    ]
    trajectory = build_trajectory(records)
    assert [s.index for s in trajectory.steps] == [0, 1]
    first, second = trajectory.steps
    assert [c.start_time for c in first.llm_calls] == [10]
    assert [t.start_time for t in first.tool_calls] == [21]
    assert [c.start_time for c in second.llm_calls] == [30, 41]
    assert [t.start_time for t in second.tool_calls] == [51]
    assert (first.start_time, first.end_time) == (10, 22)
    assert (second.start_time, second.end_time) == (30, 52)


def test_a_model_call_nested_in_another_is_one_call() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 90),
        _chat(20, 11, 80, parent=10),
        _chat(21, 12, 70, parent=20, **{sc.GEN_AI_USAGE_INPUT_TOKENS: 9}),
    ]
    (step,) = build_trajectory(records).steps
    assert len(step.llm_calls) == 1
    assert step.llm_calls[0].start_time == 11 and step.llm_calls[0].input_tokens == 9
