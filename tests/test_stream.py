"""The streaming grouping: each episode written as soon as it is complete, memory bounded."""

from __future__ import annotations

import random

from agenttrace import semconv as sc
from agenttrace.trajectory import SpanRecord, StreamingAssembler, assemble


def _copy(records: list[SpanRecord], number: int) -> list[SpanRecord]:
    """The run again under fresh trace and episode ids (as a longer run would give)."""
    out = []
    for record in records:
        attributes = dict(record.attributes)
        if sc.EPISODE_ID in attributes:
            attributes[sc.EPISODE_ID] = f"{attributes[sc.EPISODE_ID]}-{number}"
        out.append(record._replace(trace_id=record.trace_id ^ number, attributes=attributes))
    return out


def _episode_span(records: list[SpanRecord], episode_id: str) -> SpanRecord:
    (span,) = [
        r for r in records if r.name == sc.EPISODE and r.attributes[sc.EPISODE_ID] == episode_id
    ]
    return span


def test_each_episode_comes_out_right_after_its_episode_span(cartpole_run) -> None:
    live, records = cartpole_run
    assembler = StreamingAssembler(grace=0)
    came_out: dict[str, int] = {}
    for position, record in enumerate(records):
        for trajectory in assembler.add(record):
            came_out[trajectory.episode_id] = position
            assert trajectory == next(t for t in live if t.episode_id == trajectory.episode_id)
    assert assembler.finish() == []
    assert set(came_out) == {t.episode_id for t in live}
    for trajectory in live:
        episode_span = _episode_span(records, trajectory.episode_id)
        assert records[came_out[trajectory.episode_id]] is episode_span
    assert assembler.counts.complete == 3 and assembler.counts.incomplete == 0


def test_grace_holds_an_episode_for_that_many_more_records(cartpole_run) -> None:
    live, records = cartpole_run
    first = live[0].episode_id
    position = records.index(_episode_span(records, first))
    assembler = StreamingAssembler(grace=5)
    out_at = None
    for index, record in enumerate(records):
        if any(t.episode_id == first for t in assembler.add(record)):
            out_at = index
    assert out_at == position + 5


def test_open_episodes_stay_bounded_over_a_long_input(cartpole_run) -> None:
    _, records = cartpole_run
    assembler = StreamingAssembler(grace=10)
    most_open = written = 0
    for number in range(1, 41):
        for record in _copy(records, number):
            written += len(assembler.add(record))
            most_open = max(most_open, assembler.open_episodes)
    written += len(assembler.finish())
    assert written == 120
    assert most_open <= 2  # the episode being read, and one within its grace window


def test_episodes_that_never_complete_come_out_at_the_end_as_incomplete(cartpole_run) -> None:
    live, records = cartpole_run
    no_end = live[0].episode_id
    gap = live[1].episode_id
    kept = [
        r
        for r in records
        if not (r.name == sc.EPISODE and r.attributes.get(sc.EPISODE_ID) == no_end)
        and not (
            r.attributes.get(sc.EPISODE_ID) == gap and r.attributes.get(sc.TIMESTEP_INDEX) == 4
        )
    ]
    assembler = StreamingAssembler(grace=0)
    early = [t for record in kept for t in assembler.add(record)]
    assert [t.episode_id for t in early] == [live[2].episode_id]
    late = assembler.finish()
    assert [t.episode_id for t in late] == [no_end, gap]  # in order of first appearance
    assert all(t.status == sc.STATUS_INCOMPLETE for t in late)
    assert late[1].missing_steps == [4]
    assert assembler.counts.incomplete == 2 and assembler.counts.complete == 1


def test_duplicates_are_ignored_and_late_records_counted(cartpole_run) -> None:
    live, records = cartpole_run
    doubled = [r for record in records for r in (record, record)]
    assembler = StreamingAssembler(grace=0)
    got = list(assembler.feed(doubled))
    assert got == live
    # A copy of an episode span arrives after its episode was written (grace 0): late.
    assert assembler.counts.late == 3
    assert assembler.counts.duplicates == len(records) - 3


def _foreign(parent: SpanRecord, span_id: int, name: str = "chat policy-v1") -> SpanRecord:
    """A span of another instrumentation: no rl.episode.id, only its parent links it."""
    return SpanRecord(
        trace_id=parent.trace_id,
        span_id=span_id,
        parent_span_id=parent.span_id,
        name=name,
        start_time=parent.start_time + 1,
        end_time=parent.end_time - 1,
        attributes={sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "policy-v1"},
        scope_name="opentelemetry.instrumentation.openai_v2",
    )


def test_spans_of_other_instrumentations_wait_for_their_parent(cartpole_run) -> None:
    """Children end (and are stored) before their parents: an LLM call under agent.act, and
    an HTTP span under that call, arrive before agent.act and still join step 2."""
    live, records = cartpole_run
    episode = live[0].episode_id
    act = next(
        r
        for r in records
        if r.name == sc.AGENT_ACT
        and r.attributes[sc.EPISODE_ID] == episode
        and r.attributes[sc.TIMESTEP_INDEX] == 2
    )
    call = _foreign(act, 0xC0FFEE)
    http = _foreign(call, 0xBEEF, name="POST")._replace(attributes={"http.method": "POST"})
    position = records.index(act)
    reordered = [*records[:position], http, call, *records[position:]]
    assembler = StreamingAssembler(grace=0)
    got = {t.episode_id: t for t in assembler.feed(reordered)}
    (llm_call,) = got[episode].steps[2].llm_calls
    assert llm_call.model == "policy-v1"
    assert sum(len(s.llm_calls) for t in got.values() for s in t.steps) == 1
    assert assembler.counts.unrelated == 0


def test_unrelated_spans_and_parent_cycles_are_counted_not_kept(cartpole_run) -> None:
    live, records = cartpole_run
    root = SpanRecord(7, 1, 0, "GET /health", 1, 2, {})
    lost = SpanRecord(7, 2, 99, "child of nothing", 1, 2, {})
    cycle_a = SpanRecord(8, 1, 2, "a", 1, 2, {})
    cycle_b = SpanRecord(8, 2, 1, "b", 1, 2, {})
    assembler = StreamingAssembler(grace=0)
    got = list(assembler.feed([root, lost, cycle_a, *records, cycle_b]))
    assert got == live
    assert assembler.counts.unrelated == 4


def test_orphans_wait_at_most_orphan_window_records(cartpole_run) -> None:
    _, records = cartpole_run
    lost = SpanRecord(7, 2, 99, "child of nothing", 1, 2, {})
    assembler = StreamingAssembler(grace=0, orphan_window=10)
    for record in [lost, *records[:20]]:
        assembler.add(record)
    assert assembler.counts.unrelated == 1  # given up on before the end of the input


def test_any_order_gives_the_same_trajectories_as_assemble(cartpole_run) -> None:
    live, records = cartpole_run
    shuffled = list(records)
    random.Random(7).shuffle(shuffled)
    by_id = {t.episode_id: t for t in StreamingAssembler(grace=None).feed(shuffled)}
    assert by_id == {t.episode_id: t for t in live}
    assert {t.episode_id: t for t in assemble(shuffled)} == by_id


def test_a_record_repeating_another_episodes_span_is_a_duplicate(cartpole_run) -> None:
    live, records = cartpole_run
    impostor = records[0]._replace(attributes={sc.EPISODE_ID: "someone-else"})
    assembler = StreamingAssembler(grace=0)
    assert list(assembler.feed([*records, impostor])) == live
    assert assembler.counts.duplicates + assembler.counts.late == 1
    assembler = StreamingAssembler(grace=None)
    assert list(assembler.feed([records[0], impostor, *records[1:]])) == live
    assert assembler.counts.duplicates == 1
