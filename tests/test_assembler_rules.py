"""The assembler's rules for an episode's own fields and where model and tool calls go
(agenttrace/trajectory/assembler.py, call_placement.py), each on span records written by hand
and checked against what the rule says."""

from __future__ import annotations

from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.assembler import EpisodeAssembly, build_trajectory
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


# --- how a step is put together ---------------------------------------------------------------


def test_what_each_step_acted_on_is_its_own_else_what_the_step_before_returned() -> None:
    records = [
        _episode(),
        _span(sc.ENV_RESET, 5, 1, 2, **{sc.OBSERVATION: "[0]", sc.INFO: '{"seed": 3}'}),
        _step(sc.ENV_STEP, 10, 0, 3, 4, **{sc.OBSERVATION: "[1]"}),  # acted on the reset's
        _step(sc.ENV_STEP, 11, 1, 5, 6, **{sc.OBSERVATION: "[2]"}),  # on step 0's
        _step(sc.TIMESTEP, 12, 2, 7, 10, **{sc.OBSERVATION: "[20]"}),  # its timestep's own
        _step(sc.AGENT_ACT, 13, 2, 8, 9, **{sc.OBSERVATION: "[21]"}),  # agent.act wins
        _step(sc.STEP_RECORD, 14, 3, 11, 12, **{sc.OBSERVATION: "[30]"}),
        _step(sc.AGENT_ACT, 15, 3, 11, 12, **{sc.OBSERVATION: "[31]"}),  # the record wins
        _step(sc.ENV_STEP, 16, 5, 13, 14, **{sc.OBSERVATION: "[5]"}),  # (step 4 missing)
        _step(sc.ENV_STEP, 17, 6, 15, 16),  # step 5 returned [5]; step 6 returned nothing
    ]
    trajectory = build_trajectory(records)
    assert [s.observation for s in trajectory.steps] == [[0], [1], [21], [30], None, [5]]
    assert trajectory.final_observation is None
    assert trajectory.reset_info == {"seed": 3}
    assert build_trajectory(records[:-1]).final_observation == [5]


def test_the_latest_reset_gives_the_first_observation() -> None:
    records = [
        _episode(),
        _span(sc.ENV_RESET, 5, 1, 2, **{sc.OBSERVATION: "[0]"}),
        _span(sc.ENV_RESET, 6, 3, 4, **{sc.OBSERVATION: "[9]"}),
        _span(sc.ENV_RESET, 7, 3, 4, **{sc.OBSERVATION: "[8]"}),  # (same start: the later)
        _step(sc.ENV_STEP, 10, 0, 5, 6),
    ]
    assert build_trajectory(records).steps[0].observation == [8]
    assert build_trajectory([records[0], records[2], records[1], records[4]]).steps[
        0
    ].observation == [9]
    assert (
        build_trajectory([_episode(), _step(sc.ENV_STEP, 10, 0, 5, 6)]).steps[0].observation is None
    )


def test_outcome_fields_come_from_the_record_then_env_step_then_act_then_timestep() -> None:
    def step(*parts: tuple[str, dict]) -> Any:
        records = [_episode()]
        for number, (name, attributes) in enumerate(parts):
            records.append(_step(name, 10 + number, 0, 1, 2, **attributes))
        return build_trajectory(records).steps[0]

    timestep = (sc.TIMESTEP, {sc.REWARD: 1.0, sc.ACTION: "1", sc.DISCOUNT: 0.5})
    act = (sc.AGENT_ACT, {sc.REWARD: 2.0, sc.ACTION: "2"})
    env_step = (sc.ENV_STEP, {sc.REWARD: 3.0})
    recorded = (sc.STEP_RECORD, {sc.REWARD: 4.0, sc.DISCOUNT: 0.25})
    assert (step(timestep).reward, step(timestep).action, step(timestep).discount) == (1.0, 1, 0.5)
    assert (step(timestep, act).reward, step(act, timestep).action) == (2.0, 2)
    assert step(recorded, env_step, act, timestep).reward == 4.0
    assert step(env_step, act, timestep).reward == 3.0
    whole = step(recorded, env_step, act, timestep)
    assert (whole.action, whole.discount) == (2, 0.25)
    assert step(env_step).action is None and step(env_step).discount is None


def test_done_stands_in_only_when_neither_flag_is_given() -> None:
    def flags(**attributes: Any) -> tuple[bool, bool]:
        records = [_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2, **attributes)]
        (step,) = build_trajectory(records).steps
        return step.terminated, step.truncated

    assert flags() == (False, False)
    assert flags(**{sc.DONE: True}) == (True, False)
    assert flags(**{sc.DONE: True, sc.TRUNCATED: True}) == (False, True)
    assert flags(**{sc.DONE: True, sc.TERMINATED: False}) == (False, False)
    assert flags(**{sc.TERMINATED: 1, sc.TRUNCATED: 0}) == (True, False)


def test_rewards_and_discounts_that_are_no_numbers_are_left_out_and_said() -> None:
    records = [
        _episode(),
        _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 2, sc.DISCOUNT: True}),
        _step(sc.ENV_STEP, 11, 1, 3, 4, **{sc.REWARD: "lots", sc.DISCOUNT: "x"}),
    ]
    trajectory = build_trajectory(records)
    first, second = trajectory.steps
    assert (first.reward, first.discount) == (2.0, 1.0)
    assert type(first.reward) is float and type(first.discount) is float
    assert (second.reward, second.discount) == (None, None)
    assert trajectory.lossy == {
        "steps[1].reward": (
            "rl.reward was a string ('lots'), not a number; left out (read as absent)"
        ),
        "steps[1].discount": (
            "rl.discount was a string ('x'), not a number; left out (read as absent)"
        ),
    }
    assert trajectory.return_ == 2.0


def test_a_steps_times_are_its_timesteps_else_those_of_its_spans() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 20),
        _step(sc.ENV_STEP, 11, 0, 5, 25),  # (outside its timestep: the timestep's times)
        _step(sc.AGENT_ACT, 12, 1, 30, 33),
        _step(sc.ENV_STEP, 13, 1, 31, 38),
        _step(sc.ENV_STEP, 14, 2, 40, None),
        _step(sc.AGENT_ACT, 15, 3, 50, 0),  # (an end of 0 is no end)
        _step(sc.ENV_STEP, 16, 3, 45, 52),
    ]
    steps = build_trajectory(records).steps
    assert [(s.start_time, s.end_time) for s in steps] == [
        (10, 20),
        (30, 38),
        (40, None),
        (45, 52),
    ]


def test_infos_of_several_spans_are_merged_later_roles_winning() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 1, 9, **{sc.INFO: '{"a": 1, "b": 1}'}),
        _step(sc.ENV_STEP, 11, 0, 2, 3, **{sc.INFO: '{"b": 2}'}),
        _step(sc.TIMESTEP, 12, 1, 10, 19, **{sc.INFO: '{"a": 1}'}),
        _step(sc.ENV_STEP, 13, 1, 11, 12, **{sc.INFO: "[2]"}),  # not both dicts: the last
        _step(sc.ENV_STEP, 14, 2, 20, 21, **{sc.INFO: "[3]"}),
        _step(sc.ENV_STEP, 15, 3, 22, 23, **{sc.INFO: ("x", "y")}),  # (a sequence: a list)
    ]
    steps = build_trajectory(records).steps
    assert [s.info for s in steps] == [{"a": 1, "b": 2}, [2], [3], ["x", "y"]]


def test_text_that_is_no_json_stays_text_unless_its_scope_is_trusted() -> None:
    attributes = {sc.ACTION: "left", sc.OBSERVATION: "[1, 2]"}
    step = _step(sc.ENV_STEP, 10, 0, 1, 2, **attributes)._replace(scope_name="mine")
    (untrusted,) = build_trajectory([_episode(), step]).steps
    assert untrusted.action == "left" and untrusted.observation is None
    assert build_trajectory([_episode(), step]).final_observation == [1, 2]
    trusted = build_trajectory([_episode(), step], trusted_scope="mine")
    assert type(trusted.steps[0].__dict__["_action"]).__name__ == "RawJSON"
    other = build_trajectory([_episode(), step], trusted_scope="theirs")
    assert other.steps[0].__dict__["_action"] == "left"
    assert type(other.steps[0].__dict__["_action"]) is str


def test_content_nested_past_the_depth_limit_is_kept_as_its_text_and_said() -> None:
    deep = "[" * 300 + "]" * 300
    records = [
        _episode(),
        _span(sc.ENV_RESET, 5, 1, 2, **{sc.INFO: deep}),
        _step(sc.ENV_STEP, 10, 0, 3, 4, **{sc.ACTION: deep, sc.OBSERVATION: deep}),
        _chat(20, 3, 4, parent=10, **{sc.GEN_AI_INPUT_MESSAGES: deep}),
        _tool(21, 3, 4, parent=10),
    ]
    trajectory = build_trajectory(records)
    said = (
        'nested deeper than 256 levels of lists and objects: kept as its JSON text, {"$json": text}'
    )
    assert trajectory.lossy == {
        "steps[0].action": said,
        "steps[0].observation": said,
        "steps[0].llm_calls[0].input_messages": said,
        "final_observation": said,
        "reset_info": said,
    }
    assert trajectory.steps[0].action == {"$json": deep}


# --- the episode span, its statuses and its scores --------------------------------------------


def test_the_earliest_episode_span_is_the_episode_and_the_others_fill_it_in() -> None:
    outer = _episode(0, 100, **{"a": 1, sc.EPISODE_RETURN: 99.0, sc.EPISODE_LENGTH: 9})
    inner = _span(sc.EPISODE, 2, 5, 90, 1, **{sc.EPISODE_ID: "in", "a": 2, "b": 3})
    later = _span(sc.EPISODE, 3, 6, 80, 1, **{sc.EPISODE_ID: "in2", "b": 4, "c": 5})
    steps = [_step(sc.ENV_STEP, 10, 0, 7, 8, **{sc.REWARD: 1.0, sc.TERMINATED: True})]
    trajectory = build_trajectory([later, inner, outer, *steps])
    assert trajectory.episode_id == "ep" and trajectory.start_time == 0
    assert trajectory.attributes == {"a": 1, "b": 3, "c": 5}
    assert (trajectory.return_, trajectory.length) == (1.0, 1)  # (counted from the steps)
    assert trajectory.status == sc.STATUS_COMPLETED


def test_an_inner_episode_span_that_failed_fails_the_episode() -> None:
    outer = _episode(0, 100, **{sc.EPISODE_STATUS: sc.STATUS_COMPLETED})
    inner = _span(sc.EPISODE, 2, 5, 90, 1, **{sc.EPISODE_ID: "in"})._replace(
        status_code="ERROR", status_message="boom"
    )
    step = _step(sc.ENV_STEP, 10, 0, 7, 8, **{sc.TERMINATED: True})
    trajectory = build_trajectory([outer, inner, step])
    assert trajectory.status == sc.STATUS_ERRORED
    assert trajectory.error is not None and trajectory.error.message == "boom"
    cancelled = _episode(0, 100, **{sc.EPISODE_STATUS: sc.STATUS_CANCELLED})
    assert build_trajectory([cancelled, inner, step]).status == sc.STATUS_CANCELLED


def test_a_failed_step_span_errs_an_ended_episode_span_that_says_no_status() -> None:
    failed = _step(sc.ENV_STEP, 10, 0, 7, 8)._replace(status_code="ERROR", status_message="bad")
    trajectory = build_trajectory([_episode(), failed])
    assert trajectory.status == sc.STATUS_ERRORED and trajectory.error.message == "bad"
    stated = build_trajectory([_episode(**{sc.EPISODE_STATUS: "truncated"}), failed])
    assert stated.status == "truncated"
    bad_status = build_trajectory(
        [_episode(**{sc.EPISODE_STATUS: 5}), _step(sc.ENV_STEP, 10, 0, 7, 8)]
    )
    assert bad_status.status == sc.STATUS_TRUNCATED  # (left out: derived)
    assert bad_status.lossy == {
        "status": "rl.episode.status was an integer (5), not a string; left out (read as absent)"
    }


def test_stated_returns_that_are_no_numbers_are_computed_and_said() -> None:
    steps = [_step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 1.5})]
    assert build_trajectory([_episode(**{sc.EPISODE_RETURN: 3}), *steps]).return_ == 3.0
    assert build_trajectory([_episode(**{sc.EPISODE_RETURN: 2.5}), *steps]).return_ == 2.5
    text = build_trajectory([_episode(**{sc.EPISODE_RETURN: "7"}), *steps])
    assert text.return_ == 1.5
    assert text.lossy == {
        "return": "rl.episode.return was a string ('7'), not a number; left out (read as absent)"
    }


def test_scores_apply_to_the_episode_and_a_malformed_one_is_left_out() -> None:
    score = _span(sc.SCORE, 30, 50, 60, 1, **{sc.SCORE_VALUE: 2.0, sc.SCORE_NAME: "reward"})
    bad = _span(sc.SCORE, 31, 50, 61, 1, **{sc.SCORE_VALUE: "x"})
    step = _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 1.0})
    trajectory = build_trajectory([_episode(0, 40), step, score, bad], "ep")
    assert trajectory.return_ == 3.0 and trajectory.steps[0].reward == 3.0
    assert trajectory.end_time == 40  # (a score is no part of the episode's time span)
    assert build_trajectory([_episode(0, 40), step, score]).return_ == 1.0  # (no id to join)


def test_an_assemblys_state_as_records_arrive() -> None:
    assembly = EpisodeAssembly()
    assert assembly.empty and not assembly.ended and not assembly.complete
    assert not assembly.only_scores
    assembly.add([_span(sc.SCORE, 30, 50, 60, 1, **{sc.SCORE_VALUE: 2.0})])
    assert assembly.empty and assembly.only_scores
    step = _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 1.0, "k": "abc"})
    assembly.add([step])
    assert not assembly.empty and not assembly.only_scores and not assembly.ended
    assert assembly.retained_bytes == 560 + 90 * 3 + 3  # (a fixed cost, per key, its text)
    assembly.add([_episode(0, None, **{sc.EPISODE_LENGTH: 2})])
    assert not assembly.ended and not assembly.complete and assembly.has_span(1)
    assert not assembly.has_span(10)
    assembly.add([_episode(0, 100, **{sc.EPISODE_LENGTH: 2})._replace(span_id=2)])
    assert not assembly.ended  # (the first of two spans at one start stays the episode's)
    ended = EpisodeAssembly()
    ended.add([_episode(0, 100, **{sc.EPISODE_LENGTH: 2}), step])
    assert ended.ended and not ended.complete
    ended.add([_step(sc.ENV_STEP, 11, 1, 3, 4)])
    assert ended.complete
    unstated = EpisodeAssembly()
    unstated.add([_episode(0, 100)])
    assert unstated.complete


def test_indices_that_are_no_counts_make_no_step() -> None:
    records = [
        _episode(),
        _step(sc.ENV_STEP, 10, True, 1, 2),
        _step(sc.ENV_STEP, 11, -1, 3, 4),
        _step(sc.ENV_STEP, 12, 1 << 63, 5, 6),
        _step(sc.ENV_STEP, 13, 0, 7, 8),
    ]
    trajectory = build_trajectory(records)
    assert [s.index for s in trajectory.steps] == [0]
    assert trajectory.length == 1 and trajectory.missing_steps == []


# --- an episode rebuilt a stretch at a time ---------------------------------------------------


def _long_episode(steps: int) -> list[SpanRecord]:
    """Spans in the order they end: a reset, then per step a model call, an env.step and
    the timestep around them (step t: observation [t], reward t % 3, one call), the episode
    span last."""
    records = [_span(sc.ENV_RESET, 2, 1, 2, **{sc.OBSERVATION: "[0]"})]
    for t in range(steps):
        start = 100 * (t + 1)
        step_id = 1000 + t
        records.append(_chat(3000 + t, start + 1, start + 2, parent=step_id))
        attributes = {sc.OBSERVATION: "[%d]" % (t + 1), sc.REWARD: float(t % 3)}
        if t == steps - 1:
            attributes[sc.TERMINATED] = True
        records.append(_span(sc.ENV_STEP, 2000 + t, start + 3, start + 4, step_id, **{
            sc.TIMESTEP_INDEX: t, **attributes}))  # fmt: skip
        records.append(_step(sc.TIMESTEP, step_id, t, start, start + 5))
    records.append(_episode(0, 100 * (steps + 1)))
    return records


def test_a_long_episode_rebuilt_in_stretches_is_what_was_played() -> None:
    let_go: list[SpanRecord] = []
    assembly = EpisodeAssembly(max_bytes=4_000, on_let_go=let_go.extend)
    records = _long_episode(40)
    for record in records:
        assembly.add([record])
    trajectory = assembly.trajectory()
    assert assembly.late == 0 and len(let_go) > 40
    assert {r.name for r in let_go} == {sc.TIMESTEP, sc.ENV_STEP, "chat m"}
    assert [s.index for s in trajectory.steps] == list(range(40))
    assert [s.observation for s in trajectory.steps] == [[t] for t in range(40)]
    assert trajectory.final_observation == [40]
    assert [s.reward for s in trajectory.steps] == [float(t % 3) for t in range(40)]
    assert trajectory.return_ == float(sum(t % 3 for t in range(40)))
    assert [[c.start_time for c in s.llm_calls] for s in trajectory.steps] == [
        [100 * (t + 1) + 1] for t in range(40)
    ]
    assert [(s.start_time, s.end_time) for s in trajectory.steps][:2] == [(100, 105), (200, 205)]
    assert (trajectory.status, trajectory.length, trajectory.missing_steps) == (
        sc.STATUS_COMPLETED,
        40,
        [],
    )
    assert (trajectory.start_time, trajectory.end_time) == (0, 4100)


def test_settling_finishes_the_older_half_and_keeps_the_last_two() -> None:
    assembly = EpisodeAssembly(max_bytes=10**9)
    records = _long_episode(10)
    assembly.add(records[:-1])  # (steps 0..9 held)
    assert assembly.settle() == 5  # (steps 0..4: half of the 10 past none)
    assert assembly.settle() == 2  # (steps 5 and 6: half of the 5 past step 4)
    assert assembly.settle() == 1  # (step 7: never one of the last two seen)
    assert assembly.settle() == 0  # (steps 8 and 9 stay)
    held = {r.attributes.get(sc.TIMESTEP_INDEX) for r in assembly.records if r.name != "chat m"}
    assert held == {None, 8, 9}  # (None: the reset)
    assembly.add(records[-1:])
    trajectory = assembly.trajectory()
    assert [s.observation for s in trajectory.steps] == [[t] for t in range(10)]
    assert [len(s.llm_calls) for s in trajectory.steps] == [1] * 10
    assert trajectory.return_ == float(sum(t % 3 for t in range(10)))


def test_records_of_finished_steps_are_left_out_and_counted() -> None:
    assembly = EpisodeAssembly(max_bytes=10**9)
    records = _long_episode(10)
    assembly.add(records[:-1])
    assembly.settle()  # (steps 0..4 finished)
    late_call = _chat(3999, 301, 302)  # (under no step, started before step 4's start)
    assembly.add([records[1], records[2], records[3], late_call, records[-1]])
    assert assembly.late == 2  # (step 0's env.step and timestep; calls count when placed)
    trajectory = assembly.trajectory()
    assert assembly.late == 4  # (step 0's call, and the call under no step)
    assert [len(s.llm_calls) for s in trajectory.steps] == [1] * 10
