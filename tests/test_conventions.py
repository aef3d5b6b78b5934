"""Conventions mappings: trajectories from the spans a program's own tracer emits.

A small runner traces itself with its own OpenTelemetry tracer in the reference runner's
style (``episode`` with ``task_id``, ``timestep`` with ``timestep_idx``, ``env.step`` with
plain ``reward`` and ``done``) and returns its own record of each episode: the independent
truth every rebuild is checked against. It plays episodes with unrated steps (reward None), a
reset that raises and a step that raises mid-episode, both caught by the runner.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_same_episodes, exported, run_instrumented
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.config import ConfigError
from agenttrace.sinks import load_trajectories
from agenttrace.storage import OtlpJsonLinesWriter, read_otlp_json
from agenttrace.trajectory.conventions import (
    PRESETS,
    Conventions,
    ConventionsError,
    SpanRule,
    conventions_from_table,
    conventions_from_value,
    derived_episode_id,
    read_conventions_file,
)
from agenttrace.trajectory.records import SpanRecord, record_from_span
from agenttrace.trajectory.stream import assemble

# --- a runner with its own tracer ------------------------------------------------------------


class ResetFailed(RuntimeError):
    pass


class StepFailed(RuntimeError):
    pass


@dataclass
class Task:
    task_id: str
    rewards: list[float | None]  # per step; the last step is done
    fail_reset: bool = False
    fail_at: int | None = None  # the step index whose env.step raises
    reset_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Record:
    """What the runner returns: its own trajectory record."""

    task_id: str
    episode_id: str
    rewards: list[float | None]
    dones: list[bool]
    reset_kwargs: dict[str, Any]
    error: tuple[str, str] | None


TASKS = [
    Task("plain", [0.5, None, 1.0], reset_kwargs={"seed": 1, "level": "easy"}),
    Task("unrated", [None, None], reset_kwargs={"seed": 2}),
    Task("reset-fails", [], fail_reset=True, reset_kwargs={"seed": 3}),
    Task("step-fails", [0.25, 0.25, 9.0, 1.0], fail_at=2, reset_kwargs={"seed": 4}),
    Task("long", [0.1] * 6, reset_kwargs={"seed": 5, "nested": {"a": [1, 2]}}),
]


def _qualified(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def play(tracer: Any, task: Task, number: int) -> Record:
    """The runner: its episode id comes from the environment after the loop."""
    attributes = {"task_id": task.task_id, "reset_kwargs": json.dumps(task.reset_kwargs)}
    rewards: list[float | None] = []
    dones: list[bool] = []
    error = None
    with tracer.start_as_current_span("episode", attributes=attributes) as episode:
        try:
            with tracer.start_as_current_span("env.reset"):
                if task.fail_reset:
                    raise ResetFailed(f"cannot reset {task.task_id}")
            for index, reward in enumerate(task.rewards):
                done = index == len(task.rewards) - 1
                with tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
                    with tracer.start_as_current_span("get_tool_schemas"):
                        pass
                    with tracer.start_as_current_span("env.step") as step:
                        if index == task.fail_at:
                            raise StepFailed(f"env died at step {index}")
                        if reward is not None:
                            step.set_attribute("reward", reward)
                        step.set_attribute("done", done)
                rewards.append(reward)
                dones.append(done)
        except Exception as exc:  # the runner catches every failure and reports it
            error = (_qualified(exc), str(exc))
        episode_id = f"{task.task_id}-run-{number}"
        episode.set_attribute("episode_id", episode_id)
    return Record(task.task_id, episode_id, rewards, dones, task.reset_kwargs, error)


def play_all(tracer: Any) -> list[Record]:
    return [play(tracer, task, number) for number, task in enumerate(TASKS)]


@dataclass
class Run:
    records: list[Record]
    live: list[at.Trajectory]
    stored: list[SpanRecord]  # the spans as the runner's own exporter stored them
    folder: Path


@pytest.fixture
def runner_run(tmp_path) -> Run:
    """The runner on a provider of its own, with agenttrace and the runner preset on it."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    runtime = at.configure(
        tracer_provider=provider, out=str(tmp_path), conventions="runner", exit_report=False
    )
    records = play_all(provider.get_tracer("runner"))
    runtime.shutdown()
    stored = [_unstamped(record_from_span(span)) for span in memory.get_finished_spans()]
    live = load_trajectories(str(runtime.run_dir / "trajectories*.jsonl"))
    return Run(records, live, stored, runtime.run_dir)


def _unstamped(record: SpanRecord) -> SpanRecord:
    """The span as the runner's exporter would have stored it without agenttrace: agenttrace
    stamps rl.episode.id on the spans it sees start (the only change it makes)."""
    attributes = {k: v for k, v in record.attributes.items() if k != sc.EPISODE_ID}
    return record._replace(attributes=attributes)


def assert_equals_runner(trajectories: list[at.Trajectory], records: list[Record]) -> None:
    """Every field the runner returned, from the rebuilt trajectories."""
    by_id = {t.episode_id: t for t in trajectories}
    assert sorted(by_id) == sorted(r.episode_id for r in records)
    for record in records:
        trajectory = by_id[record.episode_id]
        assert trajectory.task_id == record.task_id
        assert json.loads(trajectory.attributes["reset_kwargs"]) == record.reset_kwargs
        done_steps = [s for s in trajectory.steps if s.error is None]
        assert [s.reward for s in done_steps] == record.rewards
        assert [s.terminated for s in done_steps] == record.dones
        assert trajectory.return_ == pytest.approx(sum(r for r in record.rewards if r))
        if record.error is None:
            assert trajectory.error is None
            assert trajectory.status == sc.STATUS_COMPLETED
            assert len(trajectory.steps) == len(record.rewards)
        else:
            assert trajectory.status == sc.STATUS_ERRORED
            assert (trajectory.error.type, trajectory.error.message) == record.error


# --- the runner preset --------------------------------------------------------------------------


def test_live_trajectories_equal_what_the_runner_returned(runner_run) -> None:
    assert_equals_runner(runner_run.live, runner_run.records)


def test_the_raising_step_is_kept_and_marked_and_earns_nothing(runner_run) -> None:
    (trajectory,) = [t for t in runner_run.live if t.task_id == "step-fails"]
    assert [s.index for s in trajectory.steps] == [0, 1, 2]
    failed = trajectory.steps[2]
    assert failed.error == f"{__name__}.StepFailed: env died at step 2"
    assert failed.reward is None and failed.terminated is False
    assert trajectory.steps[0].error is None and trajectory.steps[1].error is None
    (reset_failed,) = [t for t in runner_run.live if t.task_id == "reset-fails"]
    assert reset_failed.steps == [] and reset_failed.error.message == "cannot reset reset-fails"


def test_unrated_steps_keep_their_done_flags(runner_run) -> None:
    (trajectory,) = [t for t in runner_run.live if t.task_id == "unrated"]
    assert [(s.reward, s.terminated) for s in trajectory.steps] == [(None, False), (None, True)]
    assert trajectory.return_ == 0.0 and trajectory.status == sc.STATUS_COMPLETED


def test_offline_from_the_runners_own_stored_spans_equals_live(runner_run, tmp_path) -> None:
    """Spans recorded before agenttrace was installed: no rl.* key anywhere."""
    assert not any(k.startswith("rl.") for r in runner_run.stored for k in r.attributes)
    rebuilt = assemble(runner_run.stored, conventions=PRESETS["runner"])
    assert_equals_runner(rebuilt, runner_run.records)
    assert_same_episodes(runner_run.live, rebuilt)
    # the same through the CLI, from an OTLP/JSON file as a collector would write it
    source = tmp_path / "stored.jsonl"
    writer = OtlpJsonLinesWriter(source)
    writer.write(runner_run.stored)
    writer.close()
    assert_same_episodes(
        runner_run.live, exported(str(source), tmp_path / "out.jsonl", "--conventions", "runner")
    )


def test_without_the_mapping_the_runners_steps_are_not_read(runner_run) -> None:
    """What the issue saw: its spans alone give episodes with no steps (ours by name only)."""
    rebuilt = assemble(runner_run.stored)
    assert rebuilt == [] or all(not t.steps for t in rebuilt)


def test_the_span_file_holds_the_translated_spans(runner_run) -> None:
    spans = list(read_otlp_json(str(runner_run.folder / "spans*.jsonl")))
    assert_same_episodes(runner_run.live, assemble(spans))  # no mapping needed any more
    steps = [s for s in spans if s.name == sc.ENV_STEP and sc.REWARD in s.attributes]
    assert steps and all("reward" not in s.attributes for s in steps)
    tools = [s for s in spans if s.name == "get_tool_schemas"]
    assert tools and all(s.attributes.get(sc.EPISODE_ID) for s in tools)  # unmapped: as is


def test_derived_episode_ids_are_the_same_live_and_offline(runner_run) -> None:
    episodes = [r for r in runner_run.stored if r.name == "episode"]
    translated = [PRESETS["runner"].translate(r)[0] for r in episodes]
    assert [t.attributes[sc.EPISODE_ID] for t in translated] == [
        derived_episode_id(r.trace_id, r.span_id) for r in episodes
    ]
    spans = list(read_otlp_json(str(runner_run.folder / "spans*.jsonl")))
    live_ids = {s.attributes[sc.EPISODE_ID] for s in spans if s.name == sc.EPISODE}
    assert live_ids == {t.attributes[sc.EPISODE_ID] for t in translated}


# --- translation rules --------------------------------------------------------------------------


def _record(name: str, attributes: dict[str, Any], *, parent: int = 0, **more: Any) -> SpanRecord:
    return SpanRecord(
        trace_id=7,
        span_id=more.pop("span_id", 11),
        parent_span_id=parent,
        name=name,
        start_time=1,
        end_time=2,
        attributes=attributes,
        scope_name=more.pop("scope_name", "user"),
        **more,
    )


def test_agenttraces_own_and_unmatched_spans_pass_untouched() -> None:
    runner = PRESETS["runner"]
    own = _record("env.step", {"reward": 1.0}, scope_name=sc.INSTRUMENTATION_SCOPE)
    other = _record("http GET", {"reward": 1.0})
    assert runner.translate(own) == [own] and runner.translate(own)[0] is own
    assert runner.translate(other)[0] is other


def test_hostile_values_are_left_out_and_the_rest_kept() -> None:
    runner = PRESETS["runner"]
    for bad in ("lots", float("nan"), float("inf"), [1.0], True and "yes"):
        (step,) = runner.translate(_record("env.step", {"reward": bad, "done": True}))
        assert sc.REWARD not in step.attributes and step.attributes["reward"] is bad
        assert step.attributes[sc.DONE] is True
    for bad in (-1, "x", 1.5, True):
        (step,) = runner.translate(_record("timestep", {"timestep_idx": bad, "done": 0}))
        assert sc.TIMESTEP_INDEX not in step.attributes and step.attributes[sc.DONE] is False
    (step,) = runner.translate(_record("timestep", {"timestep_idx": "3", "reward": "0.5"}))
    assert step.attributes[sc.TIMESTEP_INDEX] == 3 and step.attributes[sc.REWARD] == 0.5


def test_agenttraces_own_keys_win_over_mapped_ones() -> None:
    (step,) = PRESETS["runner"].translate(
        _record("env.step", {"reward": 5.0, sc.REWARD: 1.0, sc.TIMESTEP_INDEX: 0})
    )
    assert step.attributes[sc.REWARD] == 1.0 and step.attributes["reward"] == 5.0


def test_translation_is_idempotent() -> None:
    runner = PRESETS["runner"]
    (once,) = runner.translate(_record("episode", {"task_id": "t", "episode_id": "e"}))
    assert runner.translate(once) == [once]
    assert once.attributes[sc.TASK_ID] == "t" and once.attributes[sc.EPISODE_EXTERNAL_ID] == "e"


def test_a_mapped_error_fails_the_span_with_its_type_and_message() -> None:
    error = json.dumps({"type": "pkg.Boom", "message": "it broke"})
    (episode,) = PRESETS["runner"].translate(_record("episode", {"error_info": error}))
    assert episode.status_code == "ERROR"
    (trajectory,) = assemble([episode])
    assert trajectory.status == sc.STATUS_ERRORED
    assert (trajectory.error.type, trajectory.error.message) == ("pkg.Boom", "it broke")
    (plain,) = PRESETS["runner"].translate(_record("episode", {"error_info": "just text"}))
    (trajectory,) = assemble([plain])
    assert (trajectory.error.type, trajectory.error.message) == (None, "just text")


def test_root_only_rules_skip_nested_spans() -> None:
    genai = PRESETS["genai"]
    attributes = {sc.GEN_AI_OPERATION_NAME: "invoke_agent"}
    (root,) = genai.translate(_record("invoke_agent planner", attributes))
    (nested,) = genai.translate(_record("invoke_agent helper", attributes, parent=3))
    (remote,) = genai.translate(
        _record("invoke_agent worker", attributes, parent=3, parent_is_remote=True)
    )
    assert root.name == sc.EPISODE and remote.name == sc.EPISODE
    assert nested.name == "invoke_agent helper" and sc.EPISODE_ID not in nested.attributes
    assert root.attributes["agenttrace.span.name"] == "invoke_agent planner"


# --- mapping files and settings -----------------------------------------------------------------

MAPPING = """\
[conventions]
presets = ["agentlightning"]

[[conventions.spans]]
role = "episode"
name = "rollout"

[[conventions.spans]]
role = "env.step"
name_prefix = "turn"

[conventions.fields]
reward = ["r", "score"]
done = "finished"
timestep_index = "step_no"
task_id = "task"
"attributes.difficulty" = "level"
"""


def test_a_mapping_file_reads_a_tracer_of_its_own_style(tmp_path) -> None:
    path = tmp_path / "mapping.toml"
    path.write_text(MAPPING)
    conventions = read_conventions_file(path)
    assert conventions.sources == (str(path), "agentlightning")
    records = [
        _record("rollout", {"task": "t1", "level": "hard"}, span_id=1),
        _record("turn 0", {"step_no": 0, "r": 0.5}, span_id=2, parent=1),
        _record("turn 1", {"step_no": 1, "score": 2, "finished": True}, span_id=3, parent=1),
    ]
    (trajectory,) = assemble(records, conventions=conventions)
    assert trajectory.task_id == "t1" and trajectory.attributes["difficulty"] == "hard"
    assert [(s.reward, s.terminated) for s in trajectory.steps] == [(0.5, False), (2.0, True)]
    assert trajectory.episode_id == derived_episode_id(7, 1)
    json_path = tmp_path / "mapping.json"
    json_path.write_text(json.dumps(conventions_table_of(MAPPING)))
    assert read_conventions_file(json_path).spans == conventions.spans


def conventions_table_of(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"spans": [{"role": "episod", "name": "x"}]}, "unknown role 'episod'"),
        ({"spans": [{"role": "episode"}]}, "give name, name_prefix or attribute"),
        ({"spans": [{"role": "llm", "name": "x", "format": "nope"}]}, "unknown format 'nope'"),
        (
            {"spans": [{"role": "tool", "name": "x", "format": "openinference.llm"}]},
            "reads role llm",
        ),
        ({"spans": [{"role": "episode", "name": "x", "color": 1}]}, "unknown key(s) 'color'"),
        ({"spans": {"role": "episode"}}, "spans: expected a list"),
        ({"fields": {"rewardd": "r"}}, "field 'rewardd' is not one agenttrace reads"),
        ({"fields": {"reward": 3}}, "reward must be an attribute name"),
        ({"presets": ["runer"]}, "unknown preset 'runer'"),
        ({"span": []}, "unknown key(s) 'span'"),
        ({"spans": [{"role": "episode", "name": "x", "root_only": "yes"}]}, "root_only"),
    ],
)
def test_mapping_mistakes_are_named(table, message) -> None:
    with pytest.raises(ConventionsError, match=None) as caught:
        conventions_from_table(table)
    assert message in str(caught.value)


def test_unreadable_mapping_files_say_why(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[conventions\n")
    with pytest.raises(ConventionsError, match="not valid TOML"):
        read_conventions_file(bad)
    with pytest.raises(ConventionsError, match="cannot be read"):
        read_conventions_file(tmp_path / "missing.toml")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConventionsError, match="not valid JSON"):
        read_conventions_file(deep)


def test_the_setting_takes_presets_files_and_objects(tmp_path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(MAPPING)
    assert conventions_from_value(f"runner, {path}").sources == (
        "runner",
        str(path),
        "agentlightning",
    )
    own = Conventions((SpanRule("episode", name="run"),))
    assert (
        at.configure(out=str(tmp_path), conventions=own, exit_report=False).settings.conventions
        is own
    )
    with pytest.raises(ConfigError, match="neither a preset"):
        at.configure(out=str(tmp_path), conventions="runnr")
    assert conventions_from_value("") == Conventions()


# --- a program whose only spans are its own ----------------------------------------------------

PROGRAM = textwrap.dedent(
    """
    import sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    if sys.argv[1] == "before":  # the provider exists before its tracer is asked for
        trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("runner")
    if sys.argv[1] == "after":  # ... or only once the program gets going
        trace.set_tracer_provider(TracerProvider())
    for number in range(3):
        with tracer.start_as_current_span("episode", attributes={"task_id": f"t{number}"}):
            for index in range(number + 1):
                with tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
                    with tracer.start_as_current_span("env.step") as step:
                        step.set_attribute("reward", 1.0)
                        step.set_attribute("done", index == number)
    """
)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_program_with_only_its_own_tracer_gets_trajectories_with_no_targets(
    tmp_path, when
) -> None:
    out = tmp_path / "runs"
    run_instrumented(
        tmp_path, PROGRAM, when, AGENTTRACE_OUT=str(out), AGENTTRACE_CONVENTIONS="runner"
    )
    trajectories = load_trajectories(str(out / "*" / "trajectories*.jsonl"))
    assert sorted((t.task_id, t.length, t.return_, t.status) for t in trajectories) == [
        ("t0", 1, 1.0, sc.STATUS_COMPLETED),
        ("t1", 2, 2.0, sc.STATUS_COMPLETED),
        ("t2", 3, 3.0, sc.STATUS_COMPLETED),
    ]


def test_an_episode_known_only_by_attributes_set_after_its_start(tmp_path) -> None:
    """traceloop-sdk sets its span kind just after the span starts: the span becomes the
    episode when its first child starts, so live equals offline whatever the order."""
    conventions = Conventions(
        (
            SpanRule("episode", attribute="kind", values=("workflow",), root_only=True),
            SpanRule("env.step", name="step"),
        ),
        {"reward": ("r",), "done": ("finished",), "timestep_index": ("i",)},
    )
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    runtime = at.configure(
        tracer_provider=provider, out=str(tmp_path), conventions=conventions, exit_report=False
    )
    tracer = provider.get_tracer("late")
    for number in range(2):
        with tracer.start_as_current_span(f"run {number}") as root:
            root.set_attribute("kind", "workflow")  # after the start
            for index in range(3):
                with tracer.start_as_current_span("step") as step:
                    step.set_attributes({"i": index, "r": float(number), "finished": index == 2})
    runtime.shutdown()
    live = load_trajectories(str(runtime.run_dir / "trajectories*.jsonl"))
    assert sorted((t.length, t.return_, t.status) for t in live) == [
        (3, 0.0, sc.STATUS_COMPLETED),
        (3, 3.0, sc.STATUS_COMPLETED),
    ]
    stored = [_unstamped(record_from_span(span)) for span in memory.get_finished_spans()]
    assert_same_episodes(live, assemble(stored, conventions=conventions))


def test_a_rule_matches_on_each_of_its_conditions() -> None:
    by_prefix = SpanRule("env.step", name_prefix="turn")
    assert by_prefix.matches("turn 3", {}, False) and not by_prefix.matches("tur", {}, False)
    named = SpanRule("timestep", name="step", attribute="kind")
    assert named.matches("step", {"kind": 0}, False)
    assert not named.matches("step", {}, False) and not named.matches("steps", {"kind": 0}, False)
    valued = SpanRule("llm", attribute="kind", values=("LLM", "CHAT"))
    assert valued.matches("x", {"kind": "CHAT"}, False)
    assert not valued.matches("x", {"kind": "TOOL"}, False) and not valued.matches("x", {}, False)
    rooted = SpanRule("episode", name="run", root_only=True)
    assert rooted.matches("run", {}, True) and not rooted.matches("run", {}, False)
    conventions = Conventions((valued, rooted))
    assert conventions.starts_episode("run", {}, True)
    assert not conventions.starts_episode("run", {}, False)
    assert not conventions.starts_episode("x", {"kind": "LLM"}, True)


def test_llm_and_tool_roles_without_a_format_get_their_operation() -> None:
    conventions = Conventions(
        (SpanRule("llm", name="generate"), SpanRule("tool", name="search")),
        {"task_id": ("task",)},
    )
    (llm,) = conventions.translate(_record("generate", {"task": "t"}))
    (tool,) = conventions.translate(_record("search", {}))
    assert llm.name == "generate" and tool.name == "search"  # they keep their names
    assert llm.attributes[sc.GEN_AI_OPERATION_NAME] == sc.GEN_AI_OPERATION_CHAT
    assert tool.attributes[sc.GEN_AI_OPERATION_NAME] == sc.GEN_AI_OPERATION_EXECUTE_TOOL
    assert "agenttrace.span.name" not in llm.attributes and sc.EPISODE_ID not in llm.attributes
    (already,) = PRESETS["runner"].translate(_record("episode", {}, status_code="ERROR"))
    assert already.status_code == "ERROR" and already.events == ()
    (empty,) = PRESETS["runner"].translate(_record("episode", {"error_info": ""}))
    assert empty.status_code == "UNSET" and empty.events == ()


def test_combined_mappings_keep_both_keys_in_order() -> None:
    first = Conventions((SpanRule("episode", name="a"),), {"reward": ("r1", "shared")}, ("one",))
    second = Conventions((SpanRule("episode", name="b"),), {"reward": ("shared", "r2")}, ("two",))
    both = first.combined(second)
    assert both.fields["reward"] == ("r1", "shared", "r2")
    assert [rule.name for rule in both.spans] == ["a", "b"]
    assert both.sources == ("one", "two") and both.describe() == "one, two"
    assert Conventions().describe() == "(empty)" and not Conventions()
