"""Where model and tool calls go, and what a turn takes from them
(agenttrace/trajectory/call_placement.py), on span records written by hand and checked
against what each rule says (docs/llm-calls.md)."""

from __future__ import annotations

import json
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.assembler import build_trajectory
from agenttrace.trajectory.call_placement import attach_genai_calls, final_answer_request
from agenttrace.trajectory.model import Step
from agenttrace.trajectory.records import SpanRecord

TRACE = 0xABC


def _span(name: str, span_id: int, start: int, parent: int = 1, **attributes: Any) -> SpanRecord:
    return SpanRecord(TRACE, span_id, parent, name, start, start + 1, attributes)


def _episode() -> SpanRecord:
    return SpanRecord(TRACE, 1, 0, sc.EPISODE, 0, 10_000, {sc.EPISODE_ID: "ep"})


def _chat(span_id: int, start: int, parent: int = 1, **attributes: Any) -> SpanRecord:
    return _span(
        "chat m", span_id, start, parent, **{sc.GEN_AI_OPERATION_NAME: "chat", **attributes}
    )


def _tool(span_id: int, start: int, parent: int = 1, name: str | None = "search", **more: Any):
    attributes = {sc.GEN_AI_OPERATION_NAME: "execute_tool", **more}
    if name is not None:
        attributes[sc.GEN_AI_TOOL_NAME] = name
    return _span(f"execute_tool {name}", span_id, start, parent, **attributes)


def _timestep(span_id: int, index: int, start: int) -> SpanRecord:
    return _span(sc.TIMESTEP, span_id, start, **{sc.TIMESTEP_INDEX: index})._replace(
        end_time=start + 9
    )


def _asks(*calls: tuple[str | None, str, Any], content: Any = None) -> str:
    """Output messages: one assistant reply asking for these tool calls (id, name, arguments;
    arguments None: not recorded)."""
    requests = []
    for call_id, name, arguments in calls:
        function: dict[str, Any] = {"name": name}
        if arguments is not None:
            function["arguments"] = json.dumps(arguments)
        request: dict[str, Any] = {"type": "function", "function": function}
        if call_id is not None:
            request["id"] = call_id
        requests.append(request)
    return json.dumps([{"role": "assistant", "content": content, "tool_calls": requests}])


def _steps(*records: SpanRecord) -> list[Step]:
    return build_trajectory([_episode(), *records]).steps


def _calls(step: Step) -> list[tuple[Any, ...]]:
    return [(t.name, t.call_id, t.arguments) for t in step.tool_calls]


# --- one call seen twice ----------------------------------------------------------------------


def _chain(outer: SpanRecord, inner_id: int, hops: int, inner: Any) -> list[SpanRecord]:
    """``outer``, then ``hops - 1`` spans of other work, then the inner call ``hops`` parents
    below it."""
    records = [outer]
    parent = outer.span_id
    for number in range(hops - 1):
        records.append(_span("work", 1000 + number, outer.start_time + 1, parent))
        parent = 1000 + number
    records.append(inner(inner_id, outer.start_time + 2, parent))
    return records


def test_a_call_up_to_256_spans_below_the_same_call_is_that_call() -> None:
    step = _timestep(10, 0, 5)
    for hops, expected in ((1, 1), (2, 1), (256, 1), (257, 2)):
        records = _chain(_chat(20, 10, 10), 30, hops, _chat)
        (only,) = _steps(step, *records)
        assert len(only.llm_calls) == expected, hops
        records = _chain(_tool(20, 10, 10), 30, hops, _tool)
        (only,) = _steps(step, *records)
        assert len(only.tool_calls) == expected, hops


def test_a_tool_is_named_by_its_attribute_else_by_its_span_name() -> None:
    step = _timestep(10, 0, 5)
    outer = _tool(20, 10, 10, name="web search")
    by_span_name = _tool(21, 11, 20, name=None)._replace(name="execute_tool web search")
    (only,) = _steps(step, outer, by_span_name)
    assert _calls(only) == [("web search", None, None)]  # one call
    empty = _tool(21, 11, 20, name="")._replace(name="execute_tool web search")
    (only,) = _steps(step, outer, empty)
    assert len(only.tool_calls) == 1
    other = _tool(21, 11, 20, name=None)._replace(name="execute_tool web fetch")
    (only,) = _steps(step, outer, other)
    assert len(only.tool_calls) == 2  # a tool that runs another tool
    numbered = _tool(21, 11, 20, name=None, **{sc.GEN_AI_TOOL_NAME: 7})
    (only,) = _steps(step, _tool(20, 10, 10, name="7"), numbered)
    assert len(only.tool_calls) == 1  # (the attribute's value, as text)


def test_calls_after_a_nested_one_are_still_placed() -> None:
    records = [
        _timestep(10, 0, 5),
        _timestep(11, 1, 50),
        _chat(20, 20),
        _chat(21, 21, 20),  # nested in 20
        _chat(22, 30),
        _chat(23, 60),
    ]
    first, second = _steps(*records)
    assert [c.start_time for c in first.llm_calls] == []
    assert [c.start_time for c in second.llm_calls] == [20, 30, 60]


def test_a_call_takes_the_step_its_nested_record_knew() -> None:
    # the outer call is under no step and names none: its first inner record that names one
    # says where it goes (the next to start would be step 1)
    records = [
        _timestep(10, 0, 5),
        _timestep(11, 1, 50),
        _timestep(12, 2, 80),
        _chat(20, 20),
        _chat(21, 21, 20, **{sc.TIMESTEP_INDEX: 2}),
        _chat(22, 22, 20),
    ]
    steps = _steps(*records)
    assert [len(s.llm_calls) for s in steps] == [0, 0, 1]
    no_index = [*records[:4], _chat(21, 21, 20), _chat(22, 22, 20, **{sc.TIMESTEP_INDEX: 2})]
    assert [len(s.llm_calls) for s in _steps(*no_index)] == [0, 0, 1]
    # an outer call that names its step keeps it, whatever its inner records say
    named = [*records[:3], _chat(20, 20, **{sc.TIMESTEP_INDEX: 0}), records[4]]
    assert [len(s.llm_calls) for s in _steps(*named)] == [1, 0, 0]


def test_a_call_starting_with_a_step_goes_to_that_step() -> None:
    steps = _steps(_timestep(10, 0, 20), _timestep(11, 1, 40), _chat(20, 20), _chat(21, 40))
    assert [[c.start_time for c in s.llm_calls] for s in steps] == [[20], [40]]


def test_attach_places_nothing_without_steps_or_turns() -> None:
    call = _chat(20, 5, **{sc.TIMESTEP_INDEX: 3})
    assert attach_genai_calls([], [call], {20: call}, None) == {}
    assert attach_genai_calls([Step(index=3)], [], {}, None) == {}
    assert attach_genai_calls([Step(index=3)], [call], {20: call}, None) == {20: 3}


def test_a_step_without_a_start_comes_first() -> None:
    unstarted, later = Step(index=0), Step(index=1, start_time=5)
    call = _chat(20, 1)
    assert attach_genai_calls([unstarted, later], [call], {20: call}, None) == {20: 1}
    assert [len(later.llm_calls), len(unstarted.llm_calls)] == [1, 0]
    call = _chat(21, 0)
    assert attach_genai_calls([unstarted, later], [call], {21: call}, None) == {21: 0}


def test_a_tool_call_before_any_turn_is_in_no_step_and_the_next_model_call_is_a_turn() -> None:
    (turn,) = _steps(_tool(20, 5), _chat(21, 10))
    assert (turn.index, turn.tool_calls, len(turn.llm_calls)) == (0, [], 1)


# --- tool calls without their id or their arguments' names --------------------------------------


def test_a_request_without_an_id_or_a_reply_that_is_no_message_is_passed_over() -> None:
    output = json.loads(_asks((None, "search", {"q": 1}), ("c2", "search", {"q": 2})))
    output[0]["tool_calls"].insert(0, "not a request")
    output.append("not a message")
    records = [
        _timestep(10, 0, 5),
        _chat(20, 6, 10, **{sc.GEN_AI_OUTPUT_MESSAGES: json.dumps(output)}),
        _tool(21, 7, 10),
    ]
    (step,) = _steps(*records)
    assert _calls(step) == [("search", "c2", None)]


def test_a_bare_argument_takes_the_name_the_request_gave_it() -> None:
    def arguments(recorded: Any, requested: Any, name: str = "search") -> Any:
        more = {sc.GEN_AI_TOOL_CALL_ID: "c1"}
        if recorded is not None:
            more[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = recorded
        records = [
            _timestep(10, 0, 5),
            _chat(20, 6, 10, **{sc.GEN_AI_OUTPUT_MESSAGES: _asks(("c1", name, requested))}),
            _tool(21, 7, 10, **more),
        ]
        (step,) = _steps(*records)
        return step.tool_calls[0].arguments

    assert arguments("paris", {"city": "paris"}) == {"city": "paris"}
    assert arguments('"paris"', {"city": "paris"}) == {"city": "paris"}
    assert arguments("paris", {"city": "rome"}) == "paris"
    assert arguments("paris", {"city": "paris", "when": "now"}) == "paris"
    assert arguments('["paris"]', {"city": "paris"}) == ["paris"]
    assert arguments('{"to": "paris"}', {"city": "paris"}) == {"to": "paris"}
    assert arguments("paris", ["paris"]) == "paris"  # (a request without named arguments)
    assert arguments("paris", {"city": "paris"}, name="fetch") == "paris"  # another tool's
    assert arguments(None, {}) == {}  # none recorded, none asked for
    assert arguments(None, {"city": "paris"}) is None


def test_a_tool_call_without_an_id_takes_no_arguments_from_a_request() -> None:
    records = [
        _timestep(10, 0, 5),
        _chat(20, 6, 10, **{sc.GEN_AI_OUTPUT_MESSAGES: _asks(("c1", "search", {"q": 1}))}),
        _tool(21, 7, 10, **{sc.GEN_AI_TOOL_CALL_ARGUMENTS: "1", sc.GEN_AI_TOOL_CALL_ID: ""}),
        _tool(22, 8, 10, **{sc.GEN_AI_TOOL_CALL_ARGUMENTS: "1", sc.GEN_AI_TOOL_CALL_ID: "c9"}),
    ]
    (step,) = _steps(*records)
    # the first got the only request's id (by name) and so its arguments; c9 was not asked for
    assert _calls(step) == [("search", "c1", {"q": 1}), ("search", "c9", 1)]


# --- what a turn takes from its model calls -----------------------------------------------------


def _turn(**attributes: Any) -> Step:
    (step,) = _steps(_chat(20, 5, **attributes))
    return step


def test_a_final_answer_tool_call_without_arguments_ends_the_turn_with_no_answer() -> None:
    step = _turn(**{sc.GEN_AI_OUTPUT_MESSAGES: _asks(("c1", "final_answer", None))})
    assert (step.terminated, step.action) == (True, None)
    assert final_answer_request(json.loads(_asks(("c1", "final_answer", None)))) == (True, None)


def test_what_is_no_final_answer() -> None:
    final = json.loads(_asks(("c1", "final_answer", {"answer": 4})))[0]
    assert final_answer_request([final]) == (True, 4)
    assert final_answer_request([final, final]) == (False, None)
    assert final_answer_request([]) == (False, None)
    assert final_answer_request(final) == (False, None)
    assert final_answer_request(["text"]) == (False, None)
    assert final_answer_request(None) == (False, None)


def test_a_turn_whose_answer_was_not_recorded_is_not_ended() -> None:
    step = _turn(**{sc.GEN_AI_INPUT_MESSAGES: '[{"role": "user", "content": "hi"}]'})
    assert (step.observation, step.action) == ([{"role": "user", "content": "hi"}], None)
    assert (step.terminated, step.truncated) == (False, False)


def test_an_empty_answer_is_the_turns_action() -> None:
    step = _turn(**{sc.GEN_AI_OUTPUT_MESSAGES: "[]"})
    assert (step.action, step.terminated) == ([], False)


# --- a call's own step --------------------------------------------------------------------------


def test_a_call_up_to_255_spans_below_its_step_span_is_in_that_step() -> None:
    # step 0's span is the call's ancestor; by its time it would go to step 1, the next to start
    for hops, expected in ((1, [1, 0]), (255, [1, 0]), (256, [0, 1])):
        records = _chain(_timestep(10, 0, 5), 30, hops, lambda i, s, p: _chat(i, s + 10, p))
        steps = _steps(*records, _timestep(11, 1, 50))
        assert [len(s.llm_calls) for s in steps] == expected, hops


def test_the_nearest_step_span_names_the_step_not_an_index_elsewhere() -> None:
    records = [
        _timestep(10, 0, 5),
        _timestep(11, 1, 50),
        _span("work", 12, 6, 10, **{sc.TIMESTEP_INDEX: 1}),  # (no step span)
        _chat(20, 7, 12, **{sc.TIMESTEP_INDEX: 1}),
        _chat(21, 8, **{sc.TIMESTEP_INDEX: "1"}),  # (no index: by its time, step 1)
    ]
    first, second = _steps(*records)
    assert [c.start_time for c in first.llm_calls] == [7]
    assert [c.start_time for c in second.llm_calls] == [8]


def test_a_turn_still_open_has_no_end() -> None:
    (turn,) = _steps(_chat(20, 5)._replace(end_time=None))
    assert (turn.start_time, turn.end_time) == (5, None)


# --- what a turn takes from its model calls, when its spans say more --------------------------


def _indexed_turn(index: int, start: int, **attributes: Any) -> SpanRecord:
    more = {sc.TIMESTEP_INDEX: index, sc.TIMESTEP_TURN: True, **attributes}
    return _chat(20 + index, start, **more)


def test_each_turn_with_a_final_answer_ends_with_it() -> None:
    final = _asks(("c1", "final_answer", {"answer": 4}))
    records = [
        _indexed_turn(0, 5, **{sc.GEN_AI_OUTPUT_MESSAGES: final}),
        _indexed_turn(1, 15, **{sc.GEN_AI_OUTPUT_MESSAGES: final}),
    ]
    assert [(s.action, s.terminated) for s in _steps(*records)] == [(4, True), (4, True)]
    flagged = _indexed_turn(0, 5, **{sc.GEN_AI_OUTPUT_MESSAGES: final, sc.TERMINATED: False})
    (step,) = _steps(flagged)
    assert step.terminated is False  # (its span set the flag)


def test_a_turn_whose_span_set_its_flags_is_not_cut_by_its_finish_reason() -> None:
    records = [
        _indexed_turn(
            0, 5, **{sc.TRUNCATED: False, sc.GEN_AI_RESPONSE_FINISH_REASONS: ("length",)}
        ),
        _indexed_turn(1, 15, **{sc.GEN_AI_RESPONSE_FINISH_REASONS: ("length",)}),
    ]
    assert [s.truncated for s in _steps(*records)] == [False, True]
