"""How an episode ended, rule by rule (agenttrace/trajectory/outcome.py): step indices in any
order, the bound on missing steps, the status and error of an episode span, each against
values worked out by hand."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agenttrace import semconv as sc
from agenttrace.trajectory.assembler import build_trajectory
from agenttrace.trajectory.model import EpisodeError, Step
from agenttrace.trajectory.outcome import (
    MISSING_STEPS_FLOOR,
    UNKNOWN_ERROR,
    StepIndices,
    derived_status,
    episode_error,
    is_failure,
    span_error,
    step_error,
)
from agenttrace.trajectory.records import SpanEvent, SpanRecord


def _record(name: str, span_id: int, start: int | None = None, **attributes: Any) -> SpanRecord:
    parent = 0 if name == sc.EPISODE else 1
    start = span_id if start is None else start
    attributes = {sc.EPISODE_ID: "e", **attributes}
    return SpanRecord(7, span_id, parent, name, start, start + 1, attributes)


def _failed(
    name: str, start: int, message: str | None = None, events: tuple[SpanEvent, ...] = ()
) -> SpanRecord:
    return SpanRecord(7, start, 1, name, start, start + 1, {}, events, "ERROR", message)


def _exception(kind: str, message: str, stack: str | None = None) -> SpanEvent:
    attributes = {sc.EXCEPTION_TYPE: kind, sc.EXCEPTION_MESSAGE: message}
    if stack is not None:
        attributes[sc.EXCEPTION_STACKTRACE] = stack
    return SpanEvent(sc.EXCEPTION_EVENT, 5, attributes)


# --- step indices in any order ----------------------------------------------------------------

_ORDERS = {
    "index order": lambda ids: ids,
    "reversed": lambda ids: ids[::-1],
    "shuffled": lambda ids: random.Random(31).sample(ids, len(ids)),
    "far first": lambda ids: [ids[-1], *ids[:-1]],
    "far first, then reversed": lambda ids: [ids[-1], *ids[-2::-1]],
}


@pytest.mark.parametrize("order", list(_ORDERS))
def test_every_step_seen_in_any_order_is_a_completed_episode(order) -> None:
    """5,001 steps (0..5000) with every span there: completed, nothing missing, whatever
    order the spans come in (step 5000 first is far beyond an empty bitmap)."""
    indices = _ORDERS[order](list(range(5001)))
    records = [_record(sc.ENV_STEP, 10 + i, 10 + i, **{sc.TIMESTEP_INDEX: i}) for i in indices]
    last = next(r for r in records if r.attributes[sc.TIMESTEP_INDEX] == 5000)
    records[records.index(last)] = last._replace(
        attributes={**last.attributes, sc.TERMINATED: True}
    )
    episode = _record(sc.EPISODE, 1, 0, **{sc.EPISODE_LENGTH: 5001})
    trajectory = build_trajectory([episode, *records])
    assert trajectory.missing_steps == []
    assert trajectory.status == sc.STATUS_COMPLETED
    assert trajectory.length == 5001 and len(trajectory.steps) == 5001


@pytest.mark.parametrize("order", list(_ORDERS))
def test_step_indices_count_each_index_once_in_any_order(order) -> None:
    indices = [*range(0, 3000), 5000, 9000, 20_000]
    seen = StepIndices()
    for index in _ORDERS[order](indices):
        seen.add(index)
    for index in _ORDERS[order](indices):  # (each again: still counted once)
        seen.add(index)
    assert len(seen) == 3003
    assert seen.highest == 20_000
    assert all(i in seen for i in indices)
    assert 3000 not in seen and 4999 not in seen and 19_999 not in seen and 20_001 not in seen
    assert seen.covers(3000) and not seen.covers(3001)
    assert seen.count_below(5000) == 3000 and seen.count_below(5001) == 3001
    assert seen.count_below(20_001) == 3003
    assert seen.missing_below(5003, 4) == [3000, 3001, 3002, 3003]
    assert seen.missing_below(9001, 10_000) == [*range(3000, 5000), *range(5001, 9000)]


def test_a_far_index_first_then_the_dense_ones_up_to_it() -> None:
    seen = StepIndices()
    seen.add(5000)  # far beyond an empty bitmap
    for index in range(5000):
        seen.add(index)
    assert len(seen) == 5001 and seen.covers(5001) and seen.missing_below(5001, 10) == []
    assert seen.count_below(5001) == 5001 and seen.count_below(5000) == 5000


def test_step_indices_of_nothing() -> None:
    seen = StepIndices()
    assert len(seen) == 0 and seen.highest == -1 and 0 not in seen
    assert seen.covers(0) and not seen.covers(1)
    assert seen.missing_below(3, 10) == [0, 1, 2]
    assert seen.missing_below(0, 10) == [] and seen.count_below(10) == 0


def test_missing_below_stops_at_its_limit_in_the_bitmap_and_past_it() -> None:
    seen = StepIndices()
    for index in (0, 2, 4):
        seen.add(index)
    assert seen.missing_below(10, 2) == [1, 3]  # (both in the bitmap)
    assert seen.missing_below(10, 3) == [1, 3, 5]
    assert seen.missing_below(3, 10) == [1]  # (nothing at or past the length)
    assert seen.missing_below(5, 10) == [1, 3]
    assert seen.missing_below(10, 0) == []
    far = StepIndices()
    far.add(10_000)  # the bitmap stays empty: every index below is past it
    assert far.missing_below(10_001, 3) == [0, 1, 2]
    assert far.missing_below(3, 3) == [0, 1, 2] and far.count_below(10_000) == 0
    assert far.count_below(10_001) == 1


def test_the_bitmap_grows_near_indices_and_keeps_far_ones_apart() -> None:
    seen = StepIndices()
    seen.add(4095)  # 0 + 4096 is the first far index: 4095 is dense
    assert seen.missing_below(4096, 5000) == list(range(4095))
    near = StepIndices()
    near.add(0)
    near.add(4097)  # within 2 * 1 + 4096 of a bitmap of one
    assert near.count_below(4098) == 2 and near.missing_below(4098, 5000) == list(range(1, 4097))


# --- how many steps may be missing ------------------------------------------------------------


def test_allowance_is_the_steps_seen_or_the_floor() -> None:
    assert MISSING_STEPS_FLOOR == 1024
    seen = StepIndices()
    for index in range(3):
        seen.add(index)
    assert seen.allowance() == 1024
    many = StepIndices()
    for index in range(2000):
        many.add(index)
    assert many.allowance() == 2000


def test_credible_lengths_by_hand() -> None:
    seen = StepIndices()
    for index in (0, 1, 9):  # three steps, highest index 9
        seen.add(index)
    assert seen.credible(10) and seen.credible(5)  # up to highest + 1
    assert seen.credible(3 + 1024)  # 1024 missing: at the bound
    assert not seen.credible(3 + 1025)  # one past it


def _steps(count: int) -> list[SpanRecord]:
    return [_record(sc.ENV_STEP, 10 + i, **{sc.TIMESTEP_INDEX: i}) for i in range(count)]


def test_missing_steps_up_to_the_bound_are_all_listed() -> None:
    """Three steps and a claimed length of 3 + 1,024: exactly 1,024 missing, all listed."""
    episode = _record(sc.EPISODE, 1, **{sc.EPISODE_LENGTH: 3 + 1024})
    trajectory = build_trajectory([episode, *_steps(3)])
    assert trajectory.length == 1027
    assert trajectory.missing_steps == list(range(3, 1027))
    assert trajectory.status == sc.STATUS_INCOMPLETE
    assert "missing_steps" not in trajectory.lossy and "length" not in trajectory.lossy


def test_a_length_one_past_the_bound_is_left_out() -> None:
    episode = _record(sc.EPISODE, 1, **{sc.EPISODE_LENGTH: 3 + 1025})
    trajectory = build_trajectory([episode, *_steps(3)])
    assert trajectory.length == 3 and trajectory.missing_steps == []
    assert trajectory.lossy["length"] == (
        "rl.episode.length was an integer (1028), far beyond the 3 step(s) the spans show "
        "(highest index 2); left out (read as absent)"
    )


def test_missing_steps_past_the_bound_are_cut_and_said() -> None:
    """Steps 0..2 and one at 2000: 1,997 missing, the first 1,024 listed."""
    records = [*_steps(3), _record(sc.ENV_STEP, 99, **{sc.TIMESTEP_INDEX: 2000})]
    trajectory = build_trajectory([_record(sc.EPISODE, 1), *records])
    assert trajectory.length == 2001
    assert trajectory.missing_steps == list(range(3, 3 + 1024))
    assert trajectory.lossy["missing_steps"] == (
        "the first 1024 of the 1997 steps without a span are listed (at most as many as have "
        "spans, or 1024)"
    )


def test_exactly_the_bound_missing_is_not_said_to_be_cut() -> None:
    records = [*_steps(3), _record(sc.ENV_STEP, 99, **{sc.TIMESTEP_INDEX: 3 + 1024})]
    trajectory = build_trajectory([_record(sc.EPISODE, 1), *records])
    assert trajectory.missing_steps == list(range(3, 1027))
    assert "missing_steps" not in trajectory.lossy


def test_a_bad_length_claim_is_left_out_and_the_steps_say() -> None:
    problems: dict[str, str] = {}
    seen = StepIndices()
    for index in (0, 1):
        seen.add(index)
    assert seen.length("3", problems) == (None, [])
    assert problems == {
        "length": "rl.episode.length was a string ('3'), not a whole number from 0 to 2^63-1; "
        "left out (read as absent)"
    }
    problems.clear()
    assert seen.length(4, problems) == (4, [2, 3]) and problems == {}
    assert seen.length(None, problems) == (None, []) and problems == {}


# --- the status and error of an episode -------------------------------------------------------


def _step(index: int, terminated: bool = False, truncated: bool = False) -> Step:
    return Step(index=index, terminated=terminated, truncated=truncated)


@pytest.mark.parametrize(
    ("status_code", "last", "expected"),
    [
        ("ERROR", _step(3, terminated=True), sc.STATUS_ERRORED),
        ("UNSET", None, sc.STATUS_COMPLETED),  # no steps: nothing says it was cut
        ("OK", _step(3, terminated=True), sc.STATUS_COMPLETED),
        ("UNSET", _step(3, terminated=True, truncated=True), sc.STATUS_COMPLETED),
        ("UNSET", _step(3, truncated=True), sc.STATUS_TRUNCATED),
        ("UNSET", _step(3), sc.STATUS_TRUNCATED),  # ended without its last step saying done
    ],
)
def test_the_status_of_an_episode_span_that_states_none(status_code, last, expected) -> None:
    span = SpanRecord(7, 1, 0, sc.EPISODE, 0, 9, {}, (), status_code)
    assert derived_status(span, last) == expected


def test_an_ended_episode_span_without_a_status_gets_one_from_its_steps() -> None:
    done = _record(sc.ENV_STEP, 10, **{sc.TIMESTEP_INDEX: 0, sc.TERMINATED: True})
    assert build_trajectory([_record(sc.EPISODE, 1), done]).status == sc.STATUS_COMPLETED
    cut = _record(sc.ENV_STEP, 10, **{sc.TIMESTEP_INDEX: 0})
    assert build_trajectory([_record(sc.EPISODE, 1), cut]).status == sc.STATUS_TRUNCATED
    stated = _record(sc.EPISODE, 1, **{sc.EPISODE_STATUS: sc.STATUS_CANCELLED})
    assert build_trajectory([stated, cut]).status == sc.STATUS_CANCELLED


def test_an_episode_span_still_open_is_incomplete_with_its_own_status_kept() -> None:
    episode = _record(sc.EPISODE, 1, **{sc.EPISODE_STATUS: sc.STATUS_COMPLETED})
    open_episode = episode._replace(end_time=None)
    done = _record(sc.ENV_STEP, 10, **{sc.TIMESTEP_INDEX: 0, sc.TERMINATED: True})
    trajectory = build_trajectory([open_episode, done])
    assert trajectory.status == sc.STATUS_INCOMPLETE
    assert trajectory.attributes[sc.EPISODE_STATUS] == sc.STATUS_COMPLETED
    assert trajectory.end_time == 11  # (no episode end: the last span's)


def test_span_error_takes_the_last_exception_else_the_status_message() -> None:
    first, last = _exception("KeyError", "k"), _exception("ValueError", "v", "Traceback ...")
    span = _failed(sc.ENV_STEP, 3, "status text", events=(first, last))
    assert span_error(span) == EpisodeError(type="ValueError", message="v", stack="Traceback ...")
    other = SpanEvent("log", 4, {sc.EXCEPTION_TYPE: "Nope"})
    assert span_error(_failed(sc.ENV_STEP, 3, "said", events=(other,))) == EpisodeError(
        type=None, message="said"
    )


def test_episode_error_by_hand() -> None:
    assert episode_error(None) is None
    fine = SpanRecord(7, 1, 0, sc.EPISODE, 0, 9, {})
    assert episode_error(fine) is None
    assert episode_error(fine, _failed(sc.ENV_STEP, 3, "boom")) is None  # (the span did not fail)
    flagged = fine._replace(status_code="ERROR")
    assert episode_error(flagged) == EpisodeError(type=None, message=UNKNOWN_ERROR)
    failure = _failed(sc.ENV_STEP, 3, events=(_exception("OSError", "disk"),))
    assert episode_error(flagged, failure) == EpisodeError(type="OSError", message="disk")
    said = flagged._replace(status_message="out of time")
    assert episode_error(said, failure) == EpisodeError(type=None, message="out of time")
    raised = fine._replace(events=(_exception("RuntimeError", "bad"),))  # status UNSET
    assert episode_error(raised) == EpisodeError(type="RuntimeError", message="bad")
    typed_only = fine._replace(events=(SpanEvent(sc.EXCEPTION_EVENT, 5, {sc.EXCEPTION_TYPE: "E"}),))
    assert episode_error(typed_only, failure) == EpisodeError(type="E", message=None)
    empty = flagged._replace(status_message="")
    assert episode_error(empty, failure) == EpisodeError(type="OSError", message="disk")


@pytest.mark.parametrize("name", [sc.ENV_RESET, sc.ENV_STEP, sc.AGENT_ACT])
def test_a_failed_step_role_is_a_failure_the_first_time(name) -> None:
    earlier, later = _failed(name, 3), _failed(name, 5)
    assert is_failure(later, None)
    assert is_failure(earlier, later)  # (earlier than the first so far)
    assert not is_failure(later, earlier) and not is_failure(later, later)


def test_what_is_no_failure_of_its_episode() -> None:
    assert not is_failure(_failed(sc.TIMESTEP, 3), None)
    assert not is_failure(_failed(sc.STEP_RECORD, 3), None)
    assert not is_failure(_failed("my.function", 3), None)
    call = _failed("chat gpt", 3)._replace(
        attributes={sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m"}
    )
    assert is_failure(call, None)
    assert not is_failure(call._replace(name=sc.EPISODE), None)


def test_step_error_is_the_first_failed_span_given() -> None:
    ok = SpanRecord(7, 2, 1, sc.ENV_STEP, 2, 3, {})
    first = _failed(sc.ENV_STEP, 3, events=(_exception("ValueError", "x"),))
    second = _failed(sc.AGENT_ACT, 4, events=(_exception("KeyError", "y"),))
    assert step_error(None, ok) is None and step_error() is None
    assert step_error(None, ok, first, second) == "ValueError: x"
    assert step_error(second, first) == "KeyError: y"


def test_a_length_up_to_the_highest_index_is_credible_however_sparse() -> None:
    seen = StepIndices()
    seen.add(0)
    seen.add(1_000_000)  # two steps; far more than 1,024 between them
    assert seen.credible(1_000_001) and seen.credible(1_000_000)
    assert not seen.credible(1_000_002)  # one past: 999,999 + 1 missing, over the bound
    assert seen.missing_below(1_000_001, 3) == [1, 2, 3]
    assert seen.count_below(1_000_001) == 2 and seen.count_below(1_000_000) == 1
