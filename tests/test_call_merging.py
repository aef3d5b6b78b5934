"""The rules for one call seen twice and for tool calls without their id (docs/llm-calls.md
"One call seen twice"), on span records built here: each rule, and where it must not apply.

The framework tests (test_agent_framework.py, test_framework_*.py) check the same rules
against real frameworks; these pin down the edges those runs do not reach.
"""

from __future__ import annotations

import json
from itertools import count

from agenttrace import semconv as sc
from agenttrace.trajectory.records import SpanRecord
from agenttrace.trajectory.stream import assemble

TRACE = 0xABC
_ids = count(2)


def span(
    name: str, parent: int, start: int, attributes: dict, scope: str = "framework"
) -> SpanRecord:
    return SpanRecord(
        trace_id=TRACE,
        span_id=next(_ids),
        parent_span_id=parent,
        name=name,
        start_time=start,
        end_time=start + 50,
        attributes=attributes,
        scope_name=scope,
    )


def episode(start: int = 0) -> SpanRecord:
    return SpanRecord(
        trace_id=TRACE,
        span_id=1,
        parent_span_id=0,
        name=sc.EPISODE,
        start_time=start,
        end_time=10_000,
        attributes={sc.EPISODE_ID: "e1"},
        scope_name=sc.INSTRUMENTATION_SCOPE,
    )


def chat(
    parent: int, start: int, output: list[dict], inputs: list[dict] | None = None, **more
) -> SpanRecord:
    attributes = {
        sc.GEN_AI_OPERATION_NAME: "chat",
        sc.GEN_AI_OUTPUT_MESSAGES: json.dumps(output),
        **more,
    }
    if inputs is not None:
        attributes[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(inputs)
    return span("chat m", parent, start, attributes)


def tool(parent: int, start: int, name: str, call_id: str | None = None, **more) -> SpanRecord:
    attributes = {sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.GEN_AI_TOOL_NAME: name, **more}
    if call_id is not None:
        attributes[sc.GEN_AI_TOOL_CALL_ID] = call_id
    return span(f"execute_tool {name}", parent, start, attributes)


def asks(*calls: tuple[str, str, dict]) -> list[dict]:
    """An assistant reply asking for tool calls (id, name, arguments)."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, n, a in calls
            ],
        }
    ]


def steps_of(*records: SpanRecord) -> list:
    (trajectory,) = assemble([episode(), *records])
    return trajectory.steps


def test_a_tool_span_nested_in_a_span_of_the_same_tool_is_one_call() -> None:
    reply = chat(1, 10, asks(("c1", "add", {"a": 1})))
    outer = tool(1, 100, "add", "c1")
    inner = tool(outer.span_id, 110, "add", None, **{sc.GEN_AI_TOOL_CALL_RESULT: "2"})
    (step,) = steps_of(reply, outer, inner)
    (call,) = step.tool_calls
    assert (call.name, call.call_id, call.result) == ("add", "c1", 2)  # filled from the inner


def test_a_tool_that_runs_another_tool_is_two_calls() -> None:
    reply = chat(1, 10, asks(("c1", "plan", {})))
    outer = tool(1, 100, "plan", "c1")
    inner = tool(outer.span_id, 110, "search", "c9")
    (step,) = steps_of(reply, outer, inner)
    assert [(c.name, c.call_id) for c in step.tool_calls] == [("plan", "c1"), ("search", "c9")]


def test_two_tool_spans_with_one_id_are_one_call_and_other_ids_stay_apart() -> None:
    reply = chat(1, 10, asks(("c1", "add", {"a": 1}), ("c2", "add", {"a": 2})))
    first = tool(1, 100, "add", "c1", **{sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"a": 1}'})
    again = tool(1, 101, "add", "c1", **{sc.GEN_AI_TOOL_CALL_RESULT: "2"})
    other = tool(1, 102, "add", "c2", **{sc.GEN_AI_TOOL_CALL_RESULT: "3"})
    (step,) = steps_of(reply, first, again, other)
    assert [(c.call_id, c.arguments, c.result) for c in step.tool_calls] == [
        ("c1", {"a": 1}, 2),
        ("c2", None, 3),
    ]


def test_the_fuller_messages_win_and_the_outer_call_keeps_its_other_fields() -> None:
    question = [{"role": "user", "content": "hi"}]
    tool_turn = [
        *question,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": asks(("c1", "f", {}))[0]["tool_calls"],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    empty_tool_turn = [*tool_turn[:2], {"role": "tool", "tool_call_id": "c1", "content": None}]
    answer = [{"role": "assistant", "content": "42 it is"}]
    outer = chat(1, 10, answer, empty_tool_turn, **{sc.GEN_AI_REQUEST_MODEL: "outer-model"})
    inner = chat(outer.span_id, 11, answer, tool_turn, **{sc.GEN_AI_REQUEST_MODEL: "inner-model"})
    (step,) = steps_of(outer, inner)
    (call,) = step.llm_calls
    assert call.input_messages == tool_turn  # the inner record kept the tool result's text
    assert call.model == "outer-model"
    # on a tie, the outer record's messages
    tie = chat(1, 10, answer, question, **{sc.GEN_AI_REQUEST_MODEL: "a"})
    other = chat(tie.span_id, 11, answer, [{"role": "user", "content": "ho"}])
    (step,) = steps_of(tie, other)
    assert step.llm_calls[0].input_messages == question


def test_an_id_is_recovered_by_name_and_arguments_never_twice() -> None:
    reply = chat(1, 10, asks(("c1", "add", {"a": 1}), ("c2", "add", {"a": 2})))
    second = tool(1, 100, "add", None, **{sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"a": 2}'})
    first = tool(1, 101, "add", None, **{sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"a": 1}'})
    (step,) = steps_of(reply, second, first)
    assert [c.call_id for c in step.tool_calls] == ["c2", "c1"]


def test_an_id_is_recovered_by_name_alone_only_when_one_request_is_left() -> None:
    positional = {sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"args": ["x"], "kwargs": {}}'}
    reply = chat(1, 10, asks(("c1", "add", {"a": 1}), ("c2", "mul", {"a": 2})))
    (step,) = steps_of(reply, tool(1, 100, "mul", None, **positional))
    assert step.tool_calls[0].call_id == "c2"
    # two requests of that name, neither matching the arguments: which one is unknown
    reply = chat(1, 10, asks(("c1", "add", {"a": 1}), ("c2", "add", {"a": 2})))
    (step,) = steps_of(reply, tool(1, 100, "add", None, **positional))
    assert step.tool_calls[0].call_id is None
    # a claimed id is not given again, and a tool the reply did not ask for gets none
    reply = chat(1, 10, asks(("c1", "add", {"a": 1})))
    (step,) = steps_of(reply, tool(1, 100, "add", "c1"), tool(1, 101, "add"), tool(1, 102, "sub"))
    assert [c.call_id for c in step.tool_calls] == ["c1", None, None]


def test_a_final_answer_tool_call_ends_the_run_with_its_answer() -> None:
    for name, arguments, answer in [
        ("final_answer", {"answer": "Paris"}, "Paris"),
        ("final_result", {"city": "Paris", "temp": 21}, {"city": "Paris", "temp": 21}),
        ("final_result_Weather", {"city": "Lima"}, {"city": "Lima"}),
    ]:
        reply = chat(
            1,
            10,
            asks(("c1", name, arguments)),
            **{sc.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",)},
        )
        ran = tool(1, 100, name, "c1")  # the framework runs it: it does not consume the reply
        (trajectory,) = assemble([episode(), reply, ran])
        (step,) = trajectory.steps
        assert (step.action, step.terminated, step.truncated) == (answer, True, False), name
        assert trajectory.status == sc.STATUS_COMPLETED


def test_other_tool_calls_and_several_at_once_are_no_final_answer() -> None:
    for calls in (
        [("c1", "final_answer_draft", {"answer": "x"})],
        [("c1", "final_answer", {"answer": "x"}), ("c2", "search", {"q": "y"})],
    ):
        (trajectory,) = assemble([episode(), chat(1, 10, asks(*calls))])
        (step,) = trajectory.steps
        assert not step.terminated
        assert trajectory.status == sc.STATUS_TRUNCATED


def test_genai_tool_call_finish_reason_reads_as_tool_calls() -> None:
    reply = chat(
        1, 10, asks(("c1", "f", {})), **{sc.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_call",)}
    )
    (step,) = steps_of(reply)
    assert step.llm_calls[0].finish_reasons == ["tool_calls"]


def test_an_empty_call_id_is_filled_from_the_other_record() -> None:
    reply = chat(1, 10, asks(("c9", "other", {})))  # (nothing to recover it from)
    outer = tool(1, 100, "add", "")
    inner = tool(outer.span_id, 110, "add", "c1")
    (step,) = steps_of(reply, outer, inner)
    assert [c.call_id for c in step.tool_calls] == ["c1"]


def test_pydantic_ais_tool_call_response_result_is_the_tool_message_content() -> None:
    """pydantic-ai's own chat spans name a tool result ``result`` (the conventions say
    ``response``): read alone, its tool messages keep their content."""
    parts = [
        {"role": "user", "parts": [{"type": "text", "content": "add 1"}]},
        {
            "role": "user",
            "parts": [{"type": "tool_call_response", "id": "c1", "name": "add", "result": "2"}],
        },
    ]
    reply = span(
        "chat m",
        1,
        10,
        {
            sc.GEN_AI_OPERATION_NAME: "chat",
            sc.GEN_AI_INPUT_MESSAGES: json.dumps(parts),
            sc.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": []}]),
        },
    )
    (step,) = steps_of(reply)
    assert step.llm_calls[0].input_messages[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "2",
    }
