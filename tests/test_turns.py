"""How turns advance the step index when no timestep span wraps them (docs/tracing-api.md).

Each case plays a sequence of calls inside one episode and says, for every call, the step it
lands on: the table in the docs, checked live and rebuilt from the span file alike.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import assert_same_episodes, read_run

import agenttrace as at
from agenttrace import _logging
from agenttrace import semconv as sc
from agenttrace.instrument.step_scopes import StepRecordScope
from agenttrace.storage import read_otlp_json


def _act(n: int) -> None:
    with at.agent_act() as act:
        act.record(observation=f"o{n}", action=f"a{n}")


def _env(n: int) -> None:
    with at.env_step() as step:
        step.record(reward=float(n))


def _timestep_with_env(n: int) -> None:
    with at.timestep():
        _env(n)


def _asked(n: int) -> list[dict]:
    return [{"role": "user", "content": f"q{n}"}]


def _llm(n: int, finish_reason: str = "stop") -> None:
    with at.llm_call("policy") as call:
        call.record(
            input_messages=_asked(n),
            output_messages=[{"role": "assistant", "content": f"r{n}"}],
            finish_reasons=[finish_reason],
        )


def _cut(n: int) -> None:
    _llm(n, "length")


@StepRecordScope()
def _record(info: dict, terminated: bool = False) -> None:
    """A runner's own record call, read as a step.record span (its arguments: the fields)."""


def _rec(n: int) -> None:
    _record({"record": n})


def _tool(n: int) -> None:
    with at.tool_call("lookup") as call:
        call.record(call_id=f"c{n}", arguments={"n": n}, result=f"found {n}")


CALLS = {
    "tool": _tool,
    "act": _act,
    "env": _env,
    "timestep": _timestep_with_env,
    "llm": _llm,
    "cut": _cut,
    "record": _rec,
}

# Each case: the calls in order (role, its number), and the step index each call lands on.
CASES = {
    "act then env: one step": ([("act", 0), ("env", 0)], [0, 0]),
    "two acts, one env: the first act is a step of its own": (
        [("act", 0), ("act", 1), ("env", 1)],
        [0, 1, 1],
    ),
    "envs alone: a step each": ([("env", 0), ("env", 1)], [0, 1]),
    "act after the last env: a step of its own": ([("act", 0), ("env", 0), ("act", 1)], [0, 0, 1]),
    "act, then a timestep: the act joins it": ([("act", 0), ("timestep", 0)], [0, 0]),
    "act, timestep, act, env": (
        [("act", 0), ("timestep", 0), ("act", 1), ("env", 1)],
        [0, 0, 1, 1],
    ),
    "llm then env: one step": ([("llm", 0), ("env", 0)], [0, 0]),
    "two llm calls, one env: one turn": ([("llm", 0), ("llm", 1), ("env", 1)], [0, 0, 0]),
    "llm after the last env: a step of its own": ([("llm", 0), ("env", 0), ("llm", 1)], [0, 0, 1]),
    "a cut reply after the last env: a step of its own": (
        [("llm", 0), ("env", 0), ("cut", 1)],
        [0, 0, 1],
    ),
    "llm calls alone: one turn": ([("llm", 0), ("llm", 1)], [0, 0]),
    "act, llm, env: one turn": ([("act", 0), ("llm", 0), ("env", 0)], [0, 0, 0]),
    "llm, act, env: one turn": ([("llm", 0), ("act", 0), ("env", 0)], [0, 0, 0]),
    "llm, act, act: the second act starts the next turn": (
        [("llm", 0), ("act", 0), ("act", 1)],
        [0, 0, 1],
    ),
    "a record ends the turn": ([("llm", 0), ("record", 0), ("llm", 1)], [0, 0, 1]),
    "a record after an env records that step": (
        [("llm", 0), ("env", 0), ("record", 0), ("llm", 1)],
        [0, 0, 0, 1],
    ),
    "a record opens no new step": ([("env", 0), ("env", 1), ("record", 1)], [0, 1, 1]),
    "llm, tool, llm: the tool consumes the turn": (
        [("llm", 0), ("tool", 0), ("llm", 1)],
        [0, 0, 1],
    ),
    "llm, tool, tool, llm: parallel tools in one turn": (
        [("llm", 0), ("tool", 0), ("tool", 1), ("llm", 1)],
        [0, 0, 0, 1],
    ),
    "llm, env, tool: a tool with no turn open joins the last": (
        [("llm", 0), ("env", 0), ("tool", 0)],
        [0, 0, 0],
    ),
    "with timesteps, an llm call outside them goes to the next step": (
        [("timestep", 0), ("llm", 1), ("timestep", 1)],
        [0, 1, 1],
    ),
}


def _play(tmp_path, calls: list[tuple[str, int]]) -> at.Trajectory:
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    with at.episode():
        for role, number in calls:
            CALLS[role](number)
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    return trajectory


def _landed(step: at.Step, role: str, number: int) -> bool:
    if role == "act":
        return (step.observation, step.action) == (f"o{number}", f"a{number}")
    if role in ("env", "timestep"):
        return step.reward == float(number)
    if role == "record":
        return step.info == {"record": number}
    if role == "tool":
        return any(call.call_id == f"c{number}" for call in step.tool_calls)
    return any(call.input_messages == _asked(number) for call in step.llm_calls)


@pytest.mark.parametrize("case", CASES)
def test_turns_outside_timesteps_advance_the_index(tmp_path, case) -> None:
    calls, expected = CASES[case]
    trajectory = _play(tmp_path, calls)
    steps = {step.index: step for step in trajectory.steps}
    assert sorted(steps) == sorted(set(expected))
    assert trajectory.length == len(steps)
    assert trajectory.missing_steps == []
    for (role, number), index in zip(calls, expected, strict=True):
        assert _landed(steps[index], role, number), (role, number, index)


def test_a_turn_of_model_calls_is_what_they_were_asked_and_answered(tmp_path) -> None:
    trajectory = _play(tmp_path, [("llm", 0), ("llm", 1), ("env", 1), ("cut", 2)])
    first, last = trajectory.steps
    # The turn's observation: what its first call was asked; its action: the last answer.
    assert (first.observation, first.action) == (_asked(0), "r1")
    assert [call.finish_reasons for call in first.llm_calls] == [["stop"], ["stop"]]
    assert (first.reward, first.terminated, first.truncated) == (1.0, False, False)
    # The cut answer after the last env step: a step of its own, truncated, reward none.
    assert (last.index, last.observation, last.action) == (1, _asked(2), "r2")
    assert (last.reward, last.terminated, last.truncated) == (None, False, True)
    assert trajectory.status == "truncated" and trajectory.return_ == 1.0


def test_an_env_observation_wins_over_what_the_model_was_asked(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    with at.episode():
        with at.env_reset() as reset:
            reset.record(observation="start")
        _llm(0)
        with at.env_step() as step:
            step.record(action="a0", observation="next", reward=0.5)
        _llm(1)
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    seen_and_done = [(s.observation, s.action) for s in trajectory.steps]
    assert seen_and_done == [("start", "a0"), ("next", "r1")]


def test_a_final_turn_takes_the_reward_and_flags_its_llm_scope_gives(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    final = {"final_on": "length", "final_reward": 0.0, "final_terminated": True}
    with at.episode() as episode:
        _llm(0)
        _env(2)
        with at.llm_call("policy", **final) as call:  # cut: the episode's last turn
            call.record(output_messages=[{"role": "assistant", "content": "rambl"}])
            call.record(finish_reasons=["length"])
        with at.llm_call("policy", **final) as call:  # not cut: an ordinary turn after it
            call.record(finish_reasons=["stop"])
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    cut = trajectory.steps[1]
    assert (cut.action, cut.reward, cut.terminated, cut.truncated) == ("rambl", 0.0, True, True)
    # The later call joined the cut one's turn and changed nothing: the flags stand.
    assert len(trajectory.steps) == 2 and len(cut.llm_calls) == 2
    assert trajectory.status == "completed" and trajectory.return_ == 2.0
    assert episode.length == 2


def test_a_record_wins_over_every_other_span_of_its_step(tmp_path) -> None:
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)

    @StepRecordScope(index_base=1)
    def record_step(index, observation, action, reward, terminated, truncated, info):
        pass

    with at.episode():
        with at.timestep() as step:
            step.record(observation="t-obs", reward=5.0, terminated=False)
            with at.env_step() as env:
                env.record(action="env-action", reward=1.0, truncated=True, info={"env": 1})
        record_step(1, ["m"], "recorded", 0.25, True, False, {"mine": 2})
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    (step,) = trajectory.steps
    assert (step.observation, step.action, step.reward) == (["m"], "recorded", 0.25)
    assert (step.terminated, step.truncated) == (True, False)
    assert step.info == {"env": 1, "mine": 2}  # info dicts merge, the record's keys winning
    assert trajectory.return_ == 0.25 and trajectory.status == "completed"


def test_a_record_with_an_index_below_its_base_is_left_out_and_said(
    tmp_path, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(_logging, "_warned", set())  # (said once per process)
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)

    @StepRecordScope(index_base=1)
    def record_step(index, reward):
        return "kept"

    with at.episode():
        _env(1)
        assert record_step(0, 9.0) == "kept"  # the program's own call runs as ever
        assert record_step("x", 9.0) == "kept"
    (trajectory,) = read_run(runtime).live
    assert [s.reward for s in trajectory.steps] == [1.0]
    assert "step.record call's index 0 is not a step number of base 1" in caplog.text


def test_a_call_inside_a_step_whose_spans_never_arrived_goes_with_them(tmp_path) -> None:
    """Only calls made outside any step span are turns of their own: a call inside a timestep
    carries its index too, but with the timestep lost the step is missing, not made up."""
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    with at.episode():
        for n in range(3):
            with at.timestep():
                _llm(n)
                _env(n)
    runtime.shutdown()
    records = list(read_otlp_json(runtime.span_paths))
    lost = [
        r for r in records if r.attributes.get(sc.TIMESTEP_INDEX) == 1 and r.name in sc.STEP_ROLES
    ]
    assert {r.name for r in lost} == {sc.TIMESTEP, sc.ENV_STEP}
    (trajectory,) = at.assemble([r for r in records if r not in lost])
    assert [s.index for s in trajectory.steps] == [0, 2]
    assert trajectory.missing_steps == [1]
    assert [len(s.llm_calls) for s in trajectory.steps] == [1, 1]


def test_an_agent_run_with_tools_ends_completed_with_its_final_answer(tmp_path) -> None:
    """A tool-using agent with no env: model call, tool, model call, tool, final answer."""
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)

    @at.tool_call
    def get_weather(city: str, ctx: object = None) -> str:
        return f"sunny in {city}"

    def ask(n: int, reply: dict, finish: str) -> None:
        with at.llm_call("agent-model") as call:
            call.record(input_messages=_asked(n), output_messages=[reply], finish_reasons=[finish])

    wants_tool = {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]}
    with at.episode() as episode:
        ask(0, wants_tool, "tool_calls")
        get_weather("Paris", ctx=object())
        ask(1, wants_tool, "tool_calls")
        get_weather("Rome")
        ask(2, {"role": "assistant", "content": "Paris and Rome are sunny."}, "stop")
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    first, second, last = trajectory.steps
    assert [t.name for t in first.tool_calls] == ["get_weather"]
    assert (first.tool_calls[0].arguments, first.tool_calls[0].result) == (
        {"city": "Paris"},  # (the run context is not a tool argument)
        "sunny in Paris",
    )
    assert second.tool_calls[0].arguments == {"city": "Rome"}
    assert first.action == wants_tool  # a reply with tool calls is the whole message
    assert not (first.terminated or first.truncated or second.terminated)
    assert (last.action, last.terminated, last.truncated) == (
        "Paris and Rome are sunny.",
        True,
        False,
    )
    assert last.tool_calls == []
    assert trajectory.status == "completed" and episode.length == 3


def _call(asked: Any, answered: Any, finish: str | None) -> None:
    with at.llm_call("policy") as call:
        if asked is not None:
            call.record(input_messages=asked)
        if answered is not None:
            call.record(output_messages=answered)
        if finish is not None:
            call.record(finish_reasons=[finish])


def test_what_a_turn_takes_from_its_model_calls(tmp_path) -> None:
    """The rules of docs/tracing-api.md ("Agent turns"), one case per step of one episode."""
    both = {"role": "assistant", "content": "let me look", "tool_calls": [{"id": "x"}]}
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    with at.episode():
        _env(0)  # step 0: no model call, nothing taken
        _call(_asked(1), [{"role": "assistant", "content": "r1"}], "stop")  # step 1 ...
        _env(1)  # ... consumed by the env: not a final answer
        _call(_asked(2), [both], "tool_calls")  # step 2: text and tool calls: the message
        _tool(2)
        with at.agent_act() as act:  # step 3: described by agent.act, nothing taken
            act.record(observation="o3")
        _call(_asked(3), [{"role": "assistant", "content": "r3"}], "stop")
        _env(3)
        _call(_asked(4), None, "stop")  # step 4: three calls; the answer of the last that ...
        _call(None, [{"role": "assistant", "content": "r4"}], "stop")  # ... answered,
        _call(None, None, "length")  # the finish reason of that one too: stop, not length
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    steps = trajectory.steps
    assert (steps[0].observation, steps[0].action, steps[0].llm_calls) == (None, None, [])
    assert (steps[1].observation, steps[1].action) == (_asked(1), "r1")
    assert (steps[1].terminated, steps[1].truncated) == (False, False)
    assert (steps[2].action, steps[2].terminated) == (both, False)
    assert (steps[3].observation, steps[3].action, steps[3].terminated) == ("o3", None, False)
    assert (steps[4].observation, steps[4].action) == (_asked(4), "r4")
    assert (steps[4].terminated, steps[4].truncated) == (True, False)
    # A turn of calls only lasts from its first call's start to its last call's end.
    calls = steps[4].llm_calls
    assert (steps[4].start_time, steps[4].end_time) == (calls[0].start_time, calls[-1].end_time)
    assert calls[0].end_time < calls[-1].start_time


def test_another_instrumentations_calls_make_the_turns_of_an_episode_without_steps(
    tmp_path,
) -> None:
    """Only the episode is agenttrace's: the model and tool call spans of another
    instrumentation (a framework's own) make the steps, live and rebuilt alike."""
    runtime = at.configure(out=str(tmp_path), run_name="turns", writer="thread", exit_report=False)
    tracer = runtime.provider.get_tracer("some.agent.framework")

    def chat(n: int, reply: dict, finish: str) -> None:
        with tracer.start_as_current_span("chat agent-model") as span:
            span.set_attributes(
                {
                    sc.GEN_AI_OPERATION_NAME: "chat",
                    sc.GEN_AI_INPUT_MESSAGES: json.dumps(_asked(n)),
                    sc.GEN_AI_OUTPUT_MESSAGES: json.dumps([reply]),
                    sc.GEN_AI_RESPONSE_FINISH_REASONS: (finish,),
                }
            )

    def tool(call_id: str) -> None:
        with tracer.start_as_current_span("execute_tool search") as span:
            span.set_attributes(
                {
                    sc.GEN_AI_OPERATION_NAME: "execute_tool",
                    sc.GEN_AI_TOOL_NAME: "search",
                    sc.GEN_AI_TOOL_CALL_ID: call_id,
                }
            )

    wants = {"role": "assistant", "content": None, "tool_calls": [{"id": "s1"}]}
    with at.episode():
        chat(0, wants, "tool_calls")
        tool("s1")
        tool("s2")
        chat(1, wants, "tool_calls")
        chat(2, {"role": "assistant", "content": "done"}, "stop")  # (no tool ran: same turn)
    run = read_run(runtime)
    assert_same_episodes(run.live, run.offline)
    (trajectory,) = run.live
    first, second = trajectory.steps
    assert [c.call_id for c in first.tool_calls] == ["s1", "s2"]
    assert [c.input_messages for c in second.llm_calls] == [_asked(1), _asked(2)]
    assert (second.observation, second.action, second.terminated) == (_asked(1), "done", True)
    assert (trajectory.length, trajectory.missing_steps) == (2, [])
    assert trajectory.status == "completed"
