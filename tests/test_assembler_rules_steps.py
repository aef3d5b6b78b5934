"""More of the assembler's rules for how a step is put together (agenttrace/trajectory/
assembler.py): which spans make a step, agent turns marked on their model calls, text from
a trusted scope, a step's error, the episode's length, and the problems it reports. Span
records are written by hand and each expectation is worked out from the rule, not from
another rebuild."""

from __future__ import annotations

from typing import Any

import pytest

from agenttrace import semconv as sc
from agenttrace.trajectory.assembler import EpisodeAssembly, build_trajectory
from agenttrace.trajectory.codec import RawJSON
from agenttrace.trajectory.model import raw_content
from agenttrace.trajectory.records import INDEX_LIMIT, SpanEvent, SpanRecord

TRACE = 0xABC


def _span(
    name: str, span_id: int, start: int, end: int | None, parent: int = 1, **attributes: Any
) -> SpanRecord:
    return SpanRecord(TRACE, span_id, parent, name, start, end, attributes)


def _episode(start: int = 0, end: int | None = 100, **attributes: Any) -> SpanRecord:
    return _span(sc.EPISODE, 1, start, end, 0, **{sc.EPISODE_ID: "ep", **attributes})


def _step(name: str, span_id: int, index: Any, start: int, end: int, parent: int = 1, **attrs: Any):
    return _span(name, span_id, start, end, parent, **{sc.TIMESTEP_INDEX: index, **attrs})


def _chat(span_id: int, start: int, end: int | None, parent: int = 1, **attributes: Any):
    attributes = {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m", **attributes}
    return _span("chat m", span_id, start, end, parent, **attributes)


def _turn(span_id: int, index: Any, start: int, end: int | None, **attributes: Any):
    """A model call agenttrace marked as (part of) the agent turn ``index``."""
    return _chat(
        span_id, start, end, **{sc.TIMESTEP_INDEX: index, sc.TIMESTEP_TURN: True, **attributes}
    )


def _failed(record: SpanRecord, message: str) -> SpanRecord:
    return record._replace(status_code="ERROR", status_message=message)


class _Count(int):
    """An int subclass (what a library's own integer type can be)."""


class _Text(str):
    """A str subclass."""


# --- which spans make a step ------------------------------------------------------------------


def test_a_step_span_without_a_parent_makes_its_step() -> None:
    root = _step(sc.ENV_STEP, 10, 0, 1, 2, parent=0, **{sc.REWARD: 1.5})
    (step,) = build_trajectory([root]).steps
    assert (step.index, step.reward) == (0, 1.5)


def test_of_two_spans_of_one_role_and_step_the_later_read_counts() -> None:
    records = [
        _episode(),
        _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 1.0}),
        _step(sc.ENV_STEP, 11, 0, 3, 4, **{sc.REWARD: 2.0}),
    ]
    (step,) = build_trajectory(records).steps
    assert step.reward == 2.0
    (step,) = build_trajectory([records[0], records[2], records[1]]).steps
    assert step.reward == 1.0


def test_an_index_of_an_int_subclass_makes_its_step() -> None:
    records = [
        _episode(),
        _step(sc.ENV_STEP, 10, _Count(0), 1, 2, **{sc.REWARD: 1.0}),
        _step(sc.ENV_STEP, 11, _Count(1), 3, 4, **{sc.REWARD: 2.0}),
    ]
    steps = build_trajectory(records).steps
    assert [(s.index, s.reward) for s in steps] == [(0, 1.0), (1, 2.0)]


def test_a_step_span_without_an_index_joins_the_timestep_around_it() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 1, 9),
        _span(sc.ENV_STEP, 11, 2, 3, 10, **{sc.REWARD: 2.0, sc.OBSERVATION: "[7]"}),
        _step(sc.TIMESTEP, 12, 1, 10, 19),
        # (an index of its own that is no count: it makes no step, nor joins one)
        _step(sc.ENV_STEP, 13, "1", 11, 12, parent=12, **{sc.REWARD: 5.0}),
        # (under no step: in none)
        _span(sc.ENV_STEP, 14, 20, 21, 1, **{sc.REWARD: 6.0}),
        _span(sc.ENV_STEP, 15, 22, 23, 0, **{sc.REWARD: 7.0}),
    ]
    trajectory = build_trajectory(records)
    assert [(s.index, s.reward) for s in trajectory.steps] == [(0, 2.0), (1, None)]
    assert trajectory.steps[1].observation == [7]  # (what step 0 returned)
    assert trajectory.return_ == 2.0


def test_a_step_span_in_a_timestep_whose_index_is_no_count_makes_no_step() -> None:
    for index in (INDEX_LIMIT, True):
        records = [
            _episode(),
            _step(sc.TIMESTEP, 10, index, 1, 9),
            _span(sc.ENV_STEP, 11, 2, 3, 10, **{sc.REWARD: 2.0}),
            _step(sc.ENV_STEP, 12, 0, 10, 11),
        ]
        trajectory = build_trajectory(records)
        assert [(s.index, s.reward) for s in trajectory.steps] == [(0, None)], index


# --- agent turns marked on their model calls --------------------------------------------------


def test_a_turns_model_calls_make_its_step_from_the_first_start_to_the_last_end() -> None:
    """A turn's fields come from its first call to start and its last to end (the last one's
    winning), below every step span's; the step spans their times."""
    first = _turn(20, 1, 30, 40, **{sc.REWARD: 1.0, sc.INFO: '{"a": 1}', sc.DISCOUNT: 0.5})
    last = _turn(21, 1, 35, 60, **{sc.REWARD: 2.0, sc.INFO: '{"b": 2}', sc.TERMINATED: True})
    middle = _turn(22, 1, 36, 50, **{sc.REWARD: 9.0, sc.INFO: '{"c": 3}'})
    timestep = _step(sc.TIMESTEP, 10, 0, 10, 20)
    for records in ([timestep, last, middle, first], [timestep, first, middle, last]):
        trajectory = build_trajectory([_episode(), *records])
        assert [s.index for s in trajectory.steps] == [0, 1]
        step = trajectory.steps[1]
        assert (step.start_time, step.end_time) == (30, 60)
        assert (step.reward, step.discount, step.terminated) == (2.0, 0.5, True)
        assert step.info == {"a": 1, "b": 2}
        assert [c.start_time for c in step.llm_calls] == [30, 35, 36]
        assert trajectory.length == 2 and trajectory.return_ == 2.0


def test_a_turn_of_one_model_call_is_that_call() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 20),
        _turn(20, 1, 30, 40, **{sc.REWARD: 3.0}),
    ]
    step = build_trajectory(records).steps[1]
    assert (step.index, step.start_time, step.end_time, step.reward) == (1, 30, 40, 3.0)


def test_of_turn_calls_that_start_or_end_together_the_first_read_counts() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 20),
        _turn(20, 1, 30, 50, **{sc.REWARD: 1.0}),
        _turn(21, 1, 30, 45, **{sc.REWARD: 2.0, sc.DISCOUNT: 0.5}),  # (starts with 20: not first)
        _turn(22, 1, 40, 50, **{sc.REWARD: 3.0}),  # (ends with 20: 20 is the last)
    ]
    step = build_trajectory(records).steps[1]
    assert (step.reward, step.discount) == (1.0, None)  # (the first is the last: 20 alone)
    assert (step.start_time, step.end_time) == (30, 50)


def test_an_open_turn_call_ends_before_any_that_ended() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 10, 20),
        _turn(20, 1, 30, None, **{sc.REWARD: 1.0}),
        _turn(21, 1, 31, 1, **{sc.REWARD: 2.0}),  # (ended, at 1: still after the open one)
        _turn(22, 1, 32, None, **{sc.REWARD: 3.0}),  # (open: not after 21)
    ]
    step = build_trajectory(records).steps[1]
    assert step.reward == 2.0
    open_only = [_episode(), _step(sc.TIMESTEP, 10, 0, 10, 20), records[2], records[4]]
    step = build_trajectory(open_only).steps[1]
    assert step.reward == 1.0 and step.end_time is None  # (the first open one read)


def test_only_a_model_call_marked_a_turn_with_a_count_makes_a_step() -> None:
    timestep = _step(sc.TIMESTEP, 10, 1, 10, 20)
    turn_zero = _turn(20, 0, 5, 8, **{sc.REWARD: 4.0})
    trajectory = build_trajectory([_episode(), timestep, turn_zero])
    assert [(s.index, s.start_time, s.end_time, s.reward) for s in trajectory.steps] == [
        (0, 5, 8, 4.0),
        (1, 10, 20, None),
    ]
    not_turns = [
        _chat(21, 30, 40, **{sc.TIMESTEP_INDEX: 2, sc.TIMESTEP_TURN: 1}),  # (not True)
        _chat(22, 30, 40, **{sc.TIMESTEP_INDEX: 3}),  # (no mark)
        _turn(23, INDEX_LIMIT, 30, 40),
        _turn(24, True, 30, 40),
        _span(
            "execute_tool search",
            25,
            30,
            40,
            1,
            **{
                sc.GEN_AI_OPERATION_NAME: "execute_tool",
                sc.GEN_AI_TOOL_NAME: "search",
                sc.TIMESTEP_INDEX: 4,
                sc.TIMESTEP_TURN: True,
            },
        ),
    ]
    for call in not_turns:
        trajectory = build_trajectory([_episode(), timestep, call])
        assert [s.index for s in trajectory.steps] == [1], call.span_id
        assert trajectory.length == 2 and trajectory.missing_steps == [0], call.span_id


def test_a_turn_counts_towards_the_steps_seen() -> None:
    assembly = EpisodeAssembly()
    assembly.add([_episode(**{sc.EPISODE_LENGTH: 2}), _step(sc.TIMESTEP, 10, 0, 1, 9)])
    assert assembly.ended and not assembly.complete
    assembly.add([_turn(20, 1, 30, 40)])
    assert assembly.complete
    unmarked = EpisodeAssembly()
    unmarked.add([_episode(**{sc.EPISODE_LENGTH: 2}), _step(sc.TIMESTEP, 10, 0, 1, 9)])
    unmarked.add([_chat(20, 30, 40, **{sc.TIMESTEP_INDEX: 1, sc.TIMESTEP_TURN: 1})])
    assert not unmarked.complete


def test_a_call_marked_a_turn_but_no_turn_is_no_step_seen() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 1, 9),
        _chat(20, 30, 40, **{sc.TIMESTEP_INDEX: 5, sc.TIMESTEP_TURN: False}),
    ]
    trajectory = build_trajectory(records)
    assert [s.index for s in trajectory.steps] == [0]
    assert (trajectory.length, trajectory.missing_steps) == (1, [])


def test_turns_past_the_stated_length_lengthen_the_episode() -> None:
    """Model calls after the last step make turns that no span counted: the length is the
    last step's index + 1."""
    records = [
        _episode(**{sc.EPISODE_LENGTH: 2}),
        _step(sc.ENV_STEP, 10, 0, 1, 2),
        _step(sc.ENV_STEP, 11, 1, 3, 4),
        _chat(20, 10, 20),
    ]
    trajectory = build_trajectory(records)
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    assert (trajectory.length, trajectory.missing_steps) == (3, [])


# --- text from a trusted scope ----------------------------------------------------------------


def _trusted(records: list[SpanRecord], scope: str = "mine") -> list[SpanRecord]:
    return [r._replace(scope_name=scope) for r in records]


def test_every_content_field_of_a_trusted_scope_is_taken_as_json() -> None:
    """Text from the trusted scope is kept as JSON text unchecked (RawJSON); from any other
    scope, text that is no JSON stays a string."""
    records = [
        _episode(),
        _span(sc.ENV_RESET, 5, 1, 2, **{sc.OBSERVATION: "r0", sc.INFO: "ri"}),
        _step(sc.ENV_STEP, 10, 0, 3, 4, **{sc.OBSERVATION: "e0", sc.INFO: "i0", sc.ACTION: "a0"}),
        _step(sc.STEP_RECORD, 11, 1, 5, 6, **{sc.OBSERVATION: "s1"}),
        _step(sc.AGENT_ACT, 12, 2, 7, 8, **{sc.OBSERVATION: "p2", sc.ACTION: _Text("t2")}),
        _step(sc.TIMESTEP, 13, 3, 9, 12, **{sc.OBSERVATION: "o3"}),
        _step(sc.ENV_STEP, 14, 3, 10, 11, **{sc.OBSERVATION: "e3"}),
        _step(sc.ENV_STEP, 15, 4, 13, 14),
        _chat(20, 10, 11, parent=13, **{sc.GEN_AI_INPUT_MESSAGES: "q"}),
    ]
    fields = [
        (0, "observation", "r0"),
        (0, "action", "a0"),
        (0, "info", "i0"),
        (1, "observation", "s1"),
        (2, "observation", "p2"),
        (2, "action", "t2"),
        (3, "observation", "o3"),
        (4, "observation", "e3"),  # (what step 3 returned)
    ]
    trusted = build_trajectory(_trusted(records), trusted_scope="mine")
    untrusted = build_trajectory(_trusted(records), trusted_scope="theirs")
    stored = build_trajectory(records)
    for index, name, text in fields:
        value = raw_content(trusted.steps[index], name)
        assert type(value) is RawJSON and value == text, (index, name)
        for other in (untrusted, stored):
            value = raw_content(other.steps[index], name)
            assert value == text and type(value) is not RawJSON, (index, name)
    for name, text in (("reset_info", "ri"),):
        assert type(raw_content(trusted, name)) is RawJSON
        assert raw_content(untrusted, name) == text
        assert type(raw_content(untrusted, name)) is not RawJSON
    call = trusted.steps[3].llm_calls[0]
    assert type(raw_content(call, "input_messages")) is RawJSON
    other_call = untrusted.steps[3].llm_calls[0]
    assert type(raw_content(other_call, "input_messages")) is not RawJSON


def test_trusted_json_text_reads_as_its_value() -> None:
    records = _trusted([_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.ACTION: "[1, 2]"})])
    (step,) = build_trajectory(records, trusted_scope="mine").steps
    assert step.action == [1, 2]
    text = [_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.ACTION: _Text("[3]")})]
    assert build_trajectory(text).steps[0].action == [3]


def test_a_step_is_trusted_only_when_all_its_spans_are() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 1, 9, **{sc.ACTION: "go"})._replace(scope_name="mine"),
        _step(sc.ENV_STEP, 11, 0, 2, 3)._replace(scope_name="theirs"),
    ]
    (step,) = build_trajectory(records, trusted_scope="mine").steps
    assert type(raw_content(step, "action")) is not RawJSON and step.action == "go"


# --- a step's error ---------------------------------------------------------------------------


def test_a_steps_error_is_its_record_then_env_step_then_act_then_timestep() -> None:
    roles = [
        (sc.STEP_RECORD, "recorded"),
        (sc.ENV_STEP, "stepped"),
        (sc.AGENT_ACT, "acted"),
        (sc.TIMESTEP, "timed"),
    ]
    for first in range(len(roles)):
        records = [_episode()]
        for number, (name, message) in enumerate(roles[first:]):
            records.append(_failed(_step(name, 10 + number, 0, 1, 2), message))
        (step,) = build_trajectory(records).steps
        assert step.error == roles[first][1]
    fine = [_episode(), *(_step(name, 10 + n, 0, 1, 2) for n, (name, _) in enumerate(roles))]
    assert build_trajectory(fine).steps[0].error is None


def test_an_episode_span_that_failed_unsaid_takes_the_first_failed_span_s_error() -> None:
    episode = _failed(_episode(), "")
    later = _failed(_step(sc.ENV_STEP, 11, 1, 20, 30), "later")
    earlier = _failed(_step(sc.ENV_STEP, 10, 0, 5, 10), "earlier")
    for records in ([episode, later, earlier], [episode, earlier, later]):
        trajectory = build_trajectory(records)
        assert trajectory.error is not None and trajectory.error.message == "earlier"
        assert trajectory.status == sc.STATUS_ERRORED


# --- what it reports --------------------------------------------------------------------------


def test_problems_are_told_as_they_are_found() -> None:
    told: list[tuple[str, str]] = []
    assembly = EpisodeAssembly(on_problem=lambda path, reason: told.append((path, reason)))
    assembly.add([_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: "lots"})])
    assembly.trajectory()
    assert told == [
        (
            "steps[0].reward",
            "rl.reward was a string ('lots'), not a number; left out (read as absent)",
        )
    ]


def test_a_live_rebuild_reports_only_values_its_spans_should_not_have_had() -> None:
    records = _trusted([_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.DISCOUNT: "x"})])
    trajectory = build_trajectory(records, trusted_scope="mine")
    assert trajectory.lossy == {
        "steps[0].discount": (
            "rl.discount was a string ('x'), not a number; left out (read as absent)"
        )
    }
    clean = build_trajectory(
        _trusted([_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2)]), trusted_scope="mine"
    )
    assert not clean.lossy


def test_a_stored_rebuild_reports_what_its_records_lost_under_the_fields_names() -> None:
    episode = _episode(**{sc.EPISODE_RETURN: 2.0})._replace(
        lossy={sc.EPISODE_RETURN: "cut by the store"}
    )
    step = _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 2.0})._replace(
        lossy={sc.REWARD: "cut by the store"}
    )
    trajectory = build_trajectory([episode, step])
    assert trajectory.lossy == {"return": "cut by the store", "steps[0].reward": "cut by the store"}


def test_several_records_in_one_batch_after_a_score() -> None:
    assembly = EpisodeAssembly()
    score = _span(sc.SCORE, 30, 50, 60, 1, **{sc.SCORE_VALUE: 2.0})
    assembly.add([score, _episode(), _step(sc.ENV_STEP, 10, 0, 1, 2)])
    assert [s.index for s in assembly.trajectory().steps] == [0]


def test_no_records_is_no_episode() -> None:
    with pytest.raises(ValueError) as raised:
        build_trajectory([])
    assert str(raised.value) == "build_trajectory needs at least one span record"
    with pytest.raises(ValueError) as raised:
        EpisodeAssembly().trajectory()
    assert str(raised.value) == "an episode needs at least one span record besides scores"


def test_a_step_after_a_missing_one_acted_on_nothing_known() -> None:
    records = [
        _episode(),
        _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.OBSERVATION: "[1]"}),
        _step(sc.ENV_STEP, 11, 2, 3, 4),  # (step 1 missing: what it returned is unknown)
    ]
    assert [s.observation for s in build_trajectory(records).steps] == [None, None]


def test_of_several_infos_not_all_dicts_the_last_roles_counts() -> None:
    records = [
        _episode(),
        _step(sc.TIMESTEP, 10, 0, 1, 9, **{sc.INFO: "[1]"}),
        _step(sc.ENV_STEP, 11, 0, 2, 3, **{sc.INFO: "[2]"}),
        _step(sc.STEP_RECORD, 12, 0, 4, 5, **{sc.INFO: "[3]"}),
    ]
    assert build_trajectory(records).steps[0].info == [3]


def test_no_task_id_is_none() -> None:
    trajectory = build_trajectory([_episode(), _step(sc.ENV_STEP, 10, 0, 1, 2)])
    assert trajectory.task_id is None


def test_deep_content_of_every_step_and_tool_call_is_said() -> None:
    deep = "[" * 300 + "]" * 300
    tool = {
        sc.GEN_AI_OPERATION_NAME: "execute_tool",
        sc.GEN_AI_TOOL_NAME: "search",
        sc.GEN_AI_TOOL_CALL_ARGUMENTS: deep,
    }
    records = [
        _episode(),
        _step(sc.ENV_STEP, 10, 0, 1, 4, **{sc.ACTION: deep}),
        _span("execute_tool search", 20, 2, 3, 10, **tool),
        _step(sc.ENV_STEP, 11, 1, 5, 6, **{sc.ACTION: deep}),
    ]
    lossy = build_trajectory(records).lossy
    assert sorted(lossy) == [
        "steps[0].action",
        "steps[0].tool_calls[0].arguments",
        "steps[1].action",
    ]


def test_an_inner_episode_spans_attributes_the_earliest_first() -> None:
    outer = _episode(0, 100)
    early = _span(sc.EPISODE, 3, 5, 90, 1, **{sc.EPISODE_ID: "a", "b": 3})
    late = _span(sc.EPISODE, 2, 6, 80, 1, **{sc.EPISODE_ID: "b", "b": 4})
    step = _step(sc.ENV_STEP, 10, 0, 7, 8)
    assert build_trajectory([outer, early, late, step]).attributes == {"b": 3}
    assert build_trajectory([late, step, early, outer]).attributes == {"b": 3}


def test_an_outer_episode_span_that_failed_keeps_its_own_error() -> None:
    outer = _failed(_episode(0, 100), "outer")
    inner = _failed(_span(sc.EPISODE, 2, 5, 90, 1, **{sc.EPISODE_ID: "in"}), "inner")
    step = _step(sc.ENV_STEP, 10, 0, 7, 8)
    trajectory = build_trajectory([outer, inner, step])
    assert trajectory.error is not None and trajectory.error.message == "outer"


def test_an_inner_episode_spans_exception_is_the_episodes_error() -> None:
    event = SpanEvent(
        sc.EXCEPTION_EVENT, 50, {sc.EXCEPTION_TYPE: "ValueError", sc.EXCEPTION_MESSAGE: "bad"}
    )
    inner = _failed(_span(sc.EPISODE, 2, 5, 90, 1, **{sc.EPISODE_ID: "in"}), "")
    inner = inner._replace(events=(event,))
    trajectory = build_trajectory([_episode(0, 100), inner, _step(sc.ENV_STEP, 10, 0, 7, 8)])
    assert trajectory.status == sc.STATUS_ERRORED
    assert (trajectory.error.type, trajectory.error.message) == ("ValueError", "bad")


def test_a_malformed_score_leaves_the_next_one_in() -> None:
    bad = _span(sc.SCORE, 31, 50, 61, 1, **{sc.SCORE_VALUE: "x"})
    score = _span(sc.SCORE, 30, 50, 60, 1, **{sc.SCORE_VALUE: 2.0, sc.SCORE_NAME: "reward"})
    step = _step(sc.ENV_STEP, 10, 0, 1, 2, **{sc.REWARD: 1.0})
    trajectory = build_trajectory([_episode(0, 40), step, bad, score], "ep")
    assert trajectory.return_ == 3.0 and trajectory.steps[0].reward == 3.0


# --- an episode rebuilt a stretch at a time ---------------------------------------------------


def _played(steps: int) -> list[SpanRecord]:
    """Per step t (spans in the order they end): a model call, an env.step (observation
    [t + 1], reward 1.0) and the timestep around them, starting at 100 * (t + 1)."""
    records = [_span(sc.ENV_RESET, 2, 1, 2, **{sc.OBSERVATION: "[0]"})]
    for t in range(steps):
        start, step_id = 100 * (t + 1), 1000 + t
        records.append(_chat(3000 + t, start + 1, start + 2, parent=step_id))
        attributes = {sc.OBSERVATION: "[%d]" % (t + 1), sc.REWARD: 1.0}
        records.append(_step(sc.ENV_STEP, 2000 + t, t, start + 3, start + 4, step_id, **attributes))
        records.append(_step(sc.TIMESTEP, step_id, t, start, start + 5))
    return records


def test_settling_lets_go_of_the_finished_steps_and_what_started_before_the_rest() -> None:
    let_go: list[SpanRecord] = []
    assembly = EpisodeAssembly(max_bytes=10**9, on_let_go=let_go.extend)
    others = [
        _span("other", 5000, 250, 260, 1),  # (under no step, before step 5 started: let go)
        _span("other", 5001, 950, 960, 1),  # (after it: kept)
        _span("other", 5002, 600, 610, 1),  # (as it started: kept)
        _span("other", 5003, 650, 660, 1003),  # (in step 3, if late: let go)
        _chat(5004, 590, 595),  # (under no step, before step 5: a call of step 5, kept)
    ]
    assembly.add([*_played(10), *others])
    assert assembly.settle() == 5  # (steps 0..4)
    finished = [3000 + t for t in range(5)] + [2000 + t for t in range(5)]
    finished += [1000 + t for t in range(5)] + [5000, 5003]
    assert sorted(r.span_id for r in let_go) == sorted(finished)
    kept = {r.span_id for r in assembly.records}
    assert {5001, 5002, 5004, 2} <= kept  # (2: the reset stays)
    assert not kept & set(finished)


def test_calls_of_finished_steps_that_come_later_are_counted_late() -> None:
    assembly = EpisodeAssembly(max_bytes=10**9)
    records = _played(10)
    assembly.add(records)
    assembly.settle()  # (steps 0..4 finished)
    assembly.add([_step(sc.TIMESTEP, 1004, 4, 500, 505)])  # (step 4's again: late at once)
    assert assembly.late == 1
    assembly.add([records[1]])  # (step 0's call: started before step 4 did)
    assembly.add([_chat(3998, 505, 506, **{sc.TIMESTEP_INDEX: 4})])  # (names step 4)
    assert assembly.settle() == 2  # (steps 5 and 6)
    assert assembly.late == 3
    assembly.add([_chat(3997, 705, 706, **{sc.TIMESTEP_INDEX: 6})])  # (names step 6)
    assembly.add([_chat(3996, 700, 701)])  # (under no step, as step 6 started: its)
    trajectory = assembly.trajectory()
    assert assembly.late == 5
    assert [len(s.llm_calls) for s in trajectory.steps] == [1] * 10
    assert [s.observation for s in trajectory.steps] == [[t] for t in range(10)]


def test_what_a_finished_stretch_lost_is_said() -> None:
    deep = "[" * 300 + "]" * 300
    records = _played(10)
    records[2] = records[2]._replace(lossy={sc.REWARD: "cut by the store"})  # (step 0's)
    records[1] = records[1]._replace(lossy={sc.GEN_AI_INPUT_MESSAGES: "cut"})  # (its call)
    records[28] = records[28]._replace(lossy={sc.GEN_AI_INPUT_MESSAGES: "cut"})  # (step 9's)
    records[5] = records[5]._replace(  # (step 1's env.step)
        attributes={**records[5].attributes, sc.ACTION: deep}
    )
    assembly = EpisodeAssembly(max_bytes=10**9)
    assembly.add(records)
    assert assembly.settle() == 5
    assembly.add([_episode(0, 2000)])
    trajectory = assembly.trajectory()
    said = (
        'nested deeper than 256 levels of lists and objects: kept as its JSON text, {"$json": text}'
    )
    assert trajectory.lossy == {
        "steps[0].reward": "cut by the store",
        "steps[0].llm_calls": "cut",
        "steps[1].action": said,
        "steps[9].llm_calls": "cut",
    }


def test_a_stretch_is_settled_when_its_records_pass_the_limit() -> None:
    """Each timestep of an index alone holds 650 bytes (560, and 90 for its one key). Past
    the limit, the older half is finished, never the last two steps; a settle that finishes
    nothing waits for twice what is held; one that leaves more than 3/4 of the limit held
    waits for twice what it kept, else for the limit again."""
    finished: list[list[int]] = []
    assembly = EpisodeAssembly(
        max_bytes=1000,
        on_let_go=lambda records: finished.append(
            sorted(r.attributes[sc.TIMESTEP_INDEX] for r in records)
        ),
    )
    seen = []
    for t in range(12):
        assembly.add([_step(sc.TIMESTEP, 10 + t, t, 10 * t, 10 * t + 5)])
        seen.append(list(finished))
    assert seen[3] == []  # (at 1300 > 1000 nothing to finish: then at 2 * 1300 = 2600)
    assert seen[4] == [[0, 1]]  # (3250: 0..4 held, half of 5; 1950 kept: next at 3900)
    assert seen[7] == [[0, 1]]  # (3900)
    assert seen[8] == [[0, 1], [2, 3, 4]]  # (4550: 2..8 held; 2600 kept: next at 5200)
    assert seen[11] == [[0, 1], [2, 3, 4]]  # (4550)
    heavy = {"k": "x" * 2000}  # (2740 bytes)
    finished.clear()
    assembly = EpisodeAssembly(
        max_bytes=6000,
        on_let_go=lambda records: finished.append(
            sorted(r.attributes[sc.TIMESTEP_INDEX] for r in records)
        ),
    )
    seen = []
    for t in range(8):
        attributes = heavy if t < 2 else {}
        assembly.add([_step(sc.TIMESTEP, 10 + t, t, 10 * t, 10 * t + 5, **attributes)])
        seen.append(list(finished))
    assert seen[2] == [[0]]  # (6130: step 0 finished; 3390 kept, under 4500: next at 6000)
    assert seen[6] == [[0]]  # (5990)
    assert seen[7] == [[0], [1, 2, 3]]  # (6640)
