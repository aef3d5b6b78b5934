"""AgentTraceInstrumentor: unmodified user code traced through targets only.

The user code lives in ``tests/instrumented_pkg`` and never imports agenttrace (except the
custom extractor in ``readers.py``). Spans are checked with an ``InMemorySpanExporter`` on the
real SDK; whole runs go through the real ``opentelemetry-instrument`` console script and a real
local Ray, in subprocesses, and their trajectory files are read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from conftest import read_run
from instrumented_pkg import shapes
from instrumented_pkg.runner import Played, Runner, Task
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument import auto
from agenttrace.instrument.auto import AgentTraceInstrumentor, targets_from_environment
from agenttrace.instrument.targets import Target, TargetError, parse_target
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory import codec

# tests/ is on sys.path (pytest adds it for conftest); subprocesses get it through PYTHONPATH.
TESTS = Path(__file__).parent

S = "instrumented_pkg.shapes"
RUNNER_TARGETS = (
    "instrumented_pkg.runner:Runner.play_episode=episode[task_id=task.name,seed=task.seed,"
    "env=self.env];gymnasium.core:Env.reset=env.reset;gymnasium.core:Env.step=env.step;"
    "instrumented_pkg.runner:Agent.act=agent.act"
)


# --- fixtures and helpers -----------------------------------------------------------------------


@dataclass
class Mem:
    runtime: at.AgentTrace
    exporter: InMemorySpanExporter

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name in (None, s.name)]

    def one(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def clear(self) -> None:
        self.exporter.clear()


@pytest.fixture
def mem(tmp_path) -> Mem:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = at.configure(
        tracer_provider=provider, out=str(tmp_path), run_name="auto", writer="thread"
    )
    return Mem(runtime, exporter)


@pytest.fixture
def instrumentor() -> Iterator[AgentTraceInstrumentor]:
    instrumentor = AgentTraceInstrumentor()
    try:
        yield instrumentor
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def namespace(obj: Any) -> dict[str, Any]:
    return dict(vars(obj))


def assert_same_namespace(obj: Any, before: dict[str, Any]) -> None:
    """Every attribute is the very object it was (identity), none added or removed."""
    now = vars(obj)
    assert set(now) == set(before), set(now) ^ set(before)
    changed = [key for key, value in before.items() if now[key] is not value]
    assert not changed, changed


def content(value: Any) -> str:
    return codec.dumps(value)


# --- registration ------------------------------------------------------------------------------


def test_entry_point_loads_the_instrumentor() -> None:
    (entry,) = [
        e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "agenttrace"
    ]
    cls = entry.load()
    assert cls is AgentTraceInstrumentor
    assert cls() is AgentTraceInstrumentor()  # BaseInstrumentor singleton
    assert list(cls().instrumentation_dependencies()) == []


# --- same per-call logic as the decorators ------------------------------------------------------


def _comparable(span: ReadableSpan) -> tuple:
    ids = (sc.EPISODE_ID, sc.GEN_AI_CONVERSATION_ID)
    attributes = {k: v for k, v in (span.attributes or {}).items() if k not in ids}
    return span.name, attributes, span.status.status_code, [e.name for e in span.events]


@pytest.mark.parametrize(
    ("target", "decorator", "call"),
    [
        (f"{S}:step=env.step", at.env_step, lambda f: f(4)),
        (f"{S}:play=episode", at.episode, lambda f: f("t-7", 2)),
        (f"{S}:Agent.act=agent.act", at.agent_act, lambda f: f(shapes.Agent(), "obs")),
        (f"{S}:Env.fail=env.step", at.env_step, lambda f: f(shapes.Env(), 5)),
    ],
    ids=["env.step", "episode", "agent.act-method", "exception"],
)
def test_a_target_records_what_the_decorator_records(
    mem, instrumentor, target, decorator, call
) -> None:
    """The same function, decorated and instrumented, gives spans with equal attributes."""
    parsed = parse_target(target)
    owner, _, name = parsed.qualname.rpartition(".")
    holder = getattr(shapes, owner) if owner else shapes
    raw = vars(holder)[name]

    def run(function: Any) -> None:
        outer = at.episode() if parsed.role != sc.EPISODE else contextlib.nullcontext()
        with outer, contextlib.suppress(ValueError):
            call(function)

    run(decorator(raw))
    decorated = _comparable(mem.one(parsed.role))
    assert decorated[1], "the role records attributes"
    mem.clear()
    instrumentor.instrument(targets=[target])
    run(getattr(holder, name))
    assert _comparable(mem.one(parsed.role)) == decorated


# --- kinds of callables ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "call"),
    [
        ("Env.step", lambda: shapes.Env().step(3)),
        ("Env.step", lambda: shapes.Env.step(shapes.Env(), 3)),
        ("Env.static_step", lambda: shapes.Env().static_step(3)),
        ("Env.static_step", lambda: shapes.Env.static_step(action=3)),
        ("Env.class_step", lambda: shapes.Env.class_step(3)),
        ("Env.class_step", lambda: shapes.Inherits().class_step(3)),
        ("Env.odd_step", lambda: shapes.Env().odd_step(3)),
        ("Env.step", lambda: shapes.Inherits().step(3)),
        ("Inherits.step", lambda: shapes.Inherits().step(3)),
        ("step", lambda: shapes.step(3)),
    ],
)
def test_functions_and_methods_of_every_kind_record_the_action_not_self(
    mem, instrumentor, target, call
) -> None:
    instrumentor.instrument(targets=[f"{S}:{target}=env.step"])
    with at.episode():
        result = call()
    assert result == shapes.outcome(3)
    span = mem.one(sc.ENV_STEP)
    assert span.attributes[sc.ACTION] == content(3)
    assert span.attributes[sc.REWARD] == 1.5
    assert span.attributes[sc.TERMINATED] is True
    assert span.attributes[sc.OBSERVATION] == content({"echo": 3})


async def test_async_methods_and_async_generators(mem, instrumentor) -> None:
    instrumentor.instrument(
        targets=[f"{S}:Env.async_step=env.step", f"{S}:Agent.astream=llm"],
    )
    assert asyncio.iscoroutinefunction(shapes.Env().async_step)
    with at.episode():
        assert await shapes.Env().async_step(2) == shapes.outcome(2)
        words = [word async for word in shapes.Agent().astream(prompt="a b c")]
        stream = shapes.Agent().astream("x y")
        assert await stream.__anext__() == "x"
        await stream.aclose()  # closed early: not an error
    assert words == ["a", "b", "c"]
    assert mem.one(sc.ENV_STEP).attributes[sc.REWARD] == 1.0
    llm_spans = [s for s in mem.spans() if s.attributes.get(sc.GEN_AI_OPERATION_NAME)]
    assert len(llm_spans) == 2
    assert all(s.status.status_code is not StatusCode.ERROR for s in llm_spans)
    assert llm_spans[0].attributes[sc.GEN_AI_INPUT_MESSAGES] == content("a b c")


def test_generators_stay_generators_and_close_early_cleanly(mem, instrumentor) -> None:
    instrumentor.instrument(targets=[f"{S}:Agent.stream=llm", f"{S}:Agent.act=agent.act"])
    agent = shapes.Agent()
    with at.episode():
        assert list(agent.stream("one two")) == ["one", "two"]
        partial = agent.stream("x y z")
        assert next(partial) == "x"
        partial.close()
        assert agent.act("abc") == 3
    spans = [s for s in mem.spans() if s.attributes.get(sc.GEN_AI_OPERATION_NAME)]
    assert len(spans) == 2
    assert all(s.end_time is not None for s in spans)
    assert all(s.status.status_code is not StatusCode.ERROR for s in spans)
    assert mem.one(sc.AGENT_ACT).attributes[sc.OBSERVATION] == content("abc")


def test_suppressed_instrumentation_calls_straight_through(mem, instrumentor) -> None:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    instrumentor.instrument(targets=[f"{S}:step=env.step"])
    with at.episode():
        with suppress_instrumentation():
            assert shapes.step(1) == shapes.outcome(1)
        shapes.step(2)
    assert [s.attributes[sc.ACTION] for s in mem.spans(sc.ENV_STEP)] == [content(2)]


def test_user_exceptions_pass_through_unchanged(mem, instrumentor) -> None:
    instrumentor.instrument(targets=[f"{S}:Env.fail=env.step"])
    shapes.RAISED.clear()
    with pytest.raises(ValueError) as caught:
        with at.episode():
            shapes.Env().fail(9)
    assert caught.value is shapes.RAISED[0]
    span = mem.one(sc.ENV_STEP)
    assert span.status.status_code is StatusCode.ERROR
    assert mem.one(sc.EPISODE).attributes[sc.EPISODE_STATUS] == sc.STATUS_ERRORED


# --- classes: overrides, subclasses, wrappers ---------------------------------------------------


def test_overrides_and_later_subclasses_are_traced_exactly_once(mem, instrumentor) -> None:
    owners = (shapes.Env, shapes.Overrides, shapes.Replaces, shapes.Inherits, shapes.Wrapper)
    before = {cls: namespace(cls) for cls in owners}
    instrumentor.instrument(targets=[f"{S}:Env.step=env.step"])

    class LaterOverride(shapes.Env):  # defined after instrument(): patched when created
        def step(self, action: Any) -> tuple:
            obs, reward, *rest = super().step(action)
            return (obs, reward + 1, *rest)

    class LaterInherits(shapes.Overrides):
        pass

    later_step = vars(LaterOverride)["step"]
    calls = {
        "Env": (lambda: shapes.Env().step(1), 0.5),
        "Overrides (super)": (lambda: shapes.Overrides().step(1), 10.5),
        "Replaces": (lambda: shapes.Replaces().step(1), 100.0),
        "Inherits": (lambda: shapes.Inherits().step(1), 0.5),
        "Wrapper(Overrides)": (lambda: shapes.Wrapper(shapes.Overrides()).step(1), 10.5),
        "LaterOverride": (lambda: LaterOverride().step(1), 1.5),
        "LaterInherits": (lambda: LaterInherits().step(1), 10.5),
    }
    for label, (call, reward) in calls.items():
        mem.clear()
        with at.episode():
            assert call()[1] == reward, label
        spans = mem.spans(sc.ENV_STEP)
        assert len(spans) == 1, label
        assert spans[0].attributes[sc.REWARD] == reward, label  # the outermost call's result

    instrumentor.uninstrument()
    for cls, names in before.items():
        assert_same_namespace(cls, names)
    assert vars(LaterOverride)["step"] is not later_step
    assert getattr(vars(LaterOverride)["step"], "__wrapped__", None) is None
    mem.clear()
    with at.episode():
        for call, _ in calls.values():
            call()
    assert mem.spans(sc.ENV_STEP) == []


def test_uninstrument_restores_every_original_and_instrument_works_again(mem, instrumentor) -> None:
    targets = [
        f"{S}:step=env.step",
        f"{S}:play=episode",
        f"{S}:Env.static_step=env.step",
        f"{S}:Env.class_step=env.step",
        f"{S}:Env.async_step=env.step",
        f"{S}:Inherits.odd_step=env.step",  # inherited: set on Inherits, later deleted
        f"{S}:Agent.stream=llm",
    ]
    owners = (shapes, shapes.Env, shapes.Inherits, shapes.Agent, shapes.Overrides)
    before = {id(o): namespace(o) for o in owners}
    for round_ in range(2):
        instrumentor.instrument(targets=targets)
        assert type(vars(shapes.Env)["static_step"]) is not staticmethod
        assert "odd_step" in vars(shapes.Inherits)
        mem.clear()
        with at.episode():
            shapes.play("t", 2)
            shapes.Inherits().odd_step(1)
        assert len(mem.spans(sc.ENV_STEP)) == 3, round_
        instrumentor.uninstrument()
        for owner in owners:
            assert_same_namespace(owner, before[id(owner)])
        mem.clear()
        with at.episode():
            shapes.play("t", 2)
        assert mem.spans(sc.ENV_STEP) == []


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("no_such_module_xyz:f=env.step", "cannot be imported"),
        (f"{S}:Env.missing=env.step", "has no attribute 'missing'"),
        (f"{S}:Missing.step=env.step", "has no attribute 'Missing'"),
        (f"{S}:LIMIT=env.step", "not callable"),
        (f"{S}:Env=env.step", "is a class"),
        (f"{S}:LIMIT.real=env.step", "not a class or a module"),
        (f"{S}:step=env.stepp", "unknown role"),
        (f"{S}.step=env.step", "expected"),
        (f"{S}:step=env.step[extractor=no_such]", "extractor"),
        (f"{S}:step=env.step[extractor=no_such_module_xyz:read]", "cannot be imported"),
        (f"{S}:step=agent.act[extractor=gymnasium]", "takes no extractor"),
        (f"{S}:step=env.step[task_id=x]", "no option 'task_id'"),
        (f"{S}:step_request=env.step[action=req.action]", "no argument 'req'"),
        (f"{S}:step=env.step[action]", "not key=value"),
        (f"{S}:Overrides.step=env.step", "also covered"),
    ],
)
def test_bad_targets_in_code_raise_naming_them_and_patch_nothing(instrumentor, bad, says) -> None:
    good = f"{S}:Env.step=env.step"
    before = namespace(shapes.Env), namespace(shapes)
    with pytest.raises(TargetError) as caught:
        instrumentor.instrument(targets=[good, bad])
    message = str(caught.value)
    assert says in message
    assert bad.split("=")[0].split("[")[0] in message or bad.split(":")[0] in message
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert_same_namespace(shapes.Env, before[0])
    assert_same_namespace(shapes, before[1])


def test_environment_targets_log_each_bad_one_and_trace_the_others(
    mem, instrumentor, monkeypatch, caplog
) -> None:
    monkeypatch.setenv(
        "AGENTTRACE_TARGETS",
        f" {S}:step=env.step ;\n no_such_module_xyz:f=episode; {S}:Env.missing=env.step;"
        f"{S}:Agent.act=agent.act[observation=observation]",
    )
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        instrumentor.instrument()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1  # (a module not importable yet waits for its import: see below)
    assert any("Env.missing" in e for e in errors)
    with at.episode():
        shapes.step(1)
        shapes.Agent().act("o")
    assert len(mem.spans(sc.ENV_STEP)) == 1
    assert len(mem.spans(sc.AGENT_ACT)) == 1


def test_disabled_instrumentations_variable_turns_it_off(instrumentor, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests, agenttrace")
    before = namespace(shapes)
    instrumentor.instrument(targets=[f"{S}:step=env.step"])
    assert_same_namespace(shapes, before)
    instrumentor.uninstrument()
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests")
    instrumentor.instrument(targets=[f"{S}:step=env.step"])
    assert vars(shapes)["step"] is not before["step"]


# --- target syntax, files, options ----------------------------------------------------------------


def test_text_targets_parse_to_targets() -> None:
    text = (
        f"{S}:step_request=env.step[extractor=instrumented_pkg.readers:read_score, "
        "action=request.action]"
    )
    assert parse_target(text) == Target(
        f"{S}:step_request",
        "env.step",
        extractor="instrumented_pkg.readers:read_score",
        arguments={"action": "request.action"},
    )
    assert str(parse_target(text)) == text.replace(" ", "")


def test_targets_file_in_toml_and_json(tmp_path, monkeypatch) -> None:
    toml = tmp_path / "targets.toml"
    toml.write_text(
        textwrap.dedent(
            f"""
            targets = [
                "{S}:step=env.step[extractor=gymnasium]",
                {{ path = "{S}:play", role = "episode", arguments = {{ task_id = "task_id" }} }},
            ]
            """
        )
    )
    json_file = tmp_path / "targets.json"
    json_file.write_text(
        json.dumps(
            {
                "targets": [
                    {"path": f"{S}:step", "role": "env.step", "extractor": "gymnasium"},
                    f"{S}:play=episode[task_id=task_id]",
                ]
            }
        )
    )
    expected = [
        Target(f"{S}:step", "env.step", extractor="gymnasium"),
        Target(f"{S}:play", "episode", arguments={"task_id": "task_id"}),
    ]
    for file in (toml, json_file):
        monkeypatch.setenv("AGENTTRACE_TARGETS_FILE", str(file))
        assert targets_from_environment() == (expected, [])

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"targets": [{"path": f"{S}:step", "role": "env.step", "x": 1}]}))
    monkeypatch.setenv("AGENTTRACE_TARGETS_FILE", str(bad))
    monkeypatch.setenv("AGENTTRACE_TARGETS", f"{S}:play=episode")
    found, errors = targets_from_environment()
    assert found == [Target(f"{S}:play", "episode")]
    assert len(errors) == 1 and "bad.json" in str(errors[0]) and "'x'" in str(errors[0])


def test_custom_extractor_and_argument_options(mem, instrumentor) -> None:
    instrumentor.instrument(
        targets=[
            f"{S}:step_request=env.step[extractor=instrumented_pkg.readers:read_score,"
            "action=request.action]",
            f"{S}:play=episode[task_id=task_id]",
        ]
    )
    with at.episode():
        assert shapes.step_request(shapes.Request(4))["score"] == 4
    span = mem.one(sc.ENV_STEP)
    assert span.attributes[sc.ACTION] == content(4)  # request.action, not the request
    assert span.attributes[sc.REWARD] == 4.0
    assert span.attributes[sc.TERMINATED] is True
    assert span.attributes[sc.OBSERVATION] == content(8)
    mem.clear()
    shapes.play("task-9", 1)
    assert mem.one(sc.EPISODE).attributes[sc.TASK_ID] == "task-9"


def test_unmodified_gymnasium_runner_gives_the_trajectory_it_played(mem, instrumentor) -> None:
    """gymnasium's own Env.step and Env.reset as targets: every wrapper layer overrides step
    and calls the env inside, yet each step is one env.step span."""
    instrumentor.instrument(targets=[RUNNER_TARGETS])
    runner = Runner()
    played = [runner.play_episode(Task(f"task-{seed}", seed)) for seed in range(3)]
    result = read_run(mem.runtime)
    assert result.live == result.offline
    check_trajectories(result.live, played)
    assert all(t.attributes[sc.ENV_NAME] == "FrozenLake-v1" for t in result.live)
    assert len(mem.spans(sc.ENV_STEP)) == sum(len(p.actions) for p in played)


def check_trajectories(trajectories: list[at.Trajectory], played: list[Any]) -> None:
    """Trajectories equal what the runner itself saw, matched by task name."""
    by_task = {t.task_id: t for t in trajectories}
    assert sorted(by_task) == sorted(_get(p, "task") for p in played)
    for episode in played:
        trajectory = by_task[_get(episode, "task")]
        assert trajectory.status == sc.STATUS_COMPLETED
        assert [int(s.observation) for s in trajectory.steps] == _get(episode, "observations")
        assert [int(s.action) for s in trajectory.steps] == _get(episode, "actions")
        assert [s.reward for s in trajectory.steps] == _get(episode, "rewards")
        assert trajectory.steps[-1].terminated is _get(episode, "terminated")
        assert trajectory.return_ == sum(_get(episode, "rewards"))
        assert int(trajectory.final_observation) == _get(episode, "final_observation")
        assert trajectory.attributes[sc.EPISODE_SEED] == int(_get(episode, "task").split("-")[1])


def _get(played: Played | dict, name: str) -> Any:
    return played[name] if isinstance(played, dict) else getattr(played, name)


# --- pickling: classes shipped by value keep their tracing ----------------------------------


def test_traced_functions_and_methods_pickle(mem, instrumentor) -> None:
    """A traced function pickles by reference like the function; a traced method pickles as
    "this function, traced as this target" (cloudpickle ships classes that way, e.g. Ray
    actor classes) and is traced again where it is unpickled."""
    from ray import cloudpickle

    instrumentor.instrument(
        targets=[f"{S}:step=env.step", f"{S}:Env.step=env.step", f"{S}:Env.static_step=env.step"]
    )
    assert pickle.loads(pickle.dumps(shapes.step)) is shapes.step
    assert cloudpickle.loads(cloudpickle.dumps(shapes.step)) is shapes.step
    for name in ("step", "static_step"):
        method = vars(shapes.Env)[name]
        copy = cloudpickle.loads(cloudpickle.dumps(method))
        assert type(copy) is type(method) and copy is not method
        assert copy.__wrapped__ is not method.__wrapped__  # the function travelled by value
        elsewhere = type("Elsewhere", (), {name: copy})
        mem.clear()
        with at.episode():
            assert getattr(elsewhere(), name)(2) == shapes.outcome(2)
        assert mem.one(sc.ENV_STEP).attributes[sc.ACTION] == content(2), name


# --- real processes: opentelemetry-instrument and Ray -----------------------------------------


def subprocess_env(out: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.update(
        PYTHONPATH=str(TESTS),
        AGENTTRACE_OUT=str(out),
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        RAY_USAGE_STATS_ENABLED="0",
        **extra,
    )
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def opentelemetry_instrument() -> str:
    found = shutil.which("opentelemetry-instrument")
    assert found, "the opentelemetry-instrument console script is installed with the package"
    return found


def test_opentelemetry_instrument_traces_an_unmodified_script(tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("from instrumented_pkg.runner import main\n\nmain()\n")
    targets = RUNNER_TARGETS + ";no_such_module_xyz:play=episode"
    out = tmp_path / "runs"
    done = run(
        [opentelemetry_instrument(), sys.executable, str(script)],
        subprocess_env(out, AGENTTRACE_TARGETS=targets),
        tmp_path,
    )
    played = json.loads(done.stdout)
    assert "no_such_module_xyz:play" in done.stderr  # logged, and the program went on
    (run_dir,) = out.iterdir()
    check_trajectories(load_trajectories(run_dir / "trajectories.jsonl"), played)

    off = tmp_path / "off"
    done = run(
        [opentelemetry_instrument(), sys.executable, str(script)],
        subprocess_env(
            off,
            AGENTTRACE_TARGETS=targets,
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="agenttrace",
        ),
        tmp_path,
    )
    assert json.loads(done.stdout) == played
    assert not off.exists()


RAY_EPISODE_TARGET = (
    "instrumented_pkg.ray_runner:RayRunner.play_episode=episode[task_id=task.name,"
    "seed=task.seed,env=self.env]"
)
STEP_TARGETS = (
    "gymnasium.core:Env.reset=env.reset;gymnasium.core:Env.step=env.step;"
    "instrumented_pkg.runner:Agent.act=agent.act"
)


def check_ray_run(out: Path, stdout: str) -> None:
    """Each actor process wrote its own run folder, holding exactly the episodes it played."""
    report = json.loads(stdout.strip().splitlines()[-1])
    actor_pids = report["actor_pids"]
    assert len(set(actor_pids)) == 2 and report["driver_pid"] not in actor_pids
    folders = {int(folder.name.rsplit("-", 1)[1]): folder for folder in out.iterdir()}
    assert sorted(folders) == sorted(actor_pids)
    for pid, folder in folders.items():
        mine = [p for p in report["played"] if p["pid"] == pid]
        check_trajectories(load_trajectories(folder / "trajectories.jsonl"), mine)


def test_ray_actor_traced_zero_code_under_opentelemetry_instrument(tmp_path) -> None:
    """Targets only in the environment: the actor class carries its traced method into the
    actor processes, and the workers (which inherit AGENTTRACE_TARGETS and the
    sitecustomize path) trace gymnasium and the agent there."""
    out = tmp_path / "runs"
    done = run(
        [opentelemetry_instrument(), sys.executable, str(TESTS / "instrumented_pkg/ray_driver.py")],
        subprocess_env(
            out,
            AGENTTRACE_TARGETS=f"{RAY_EPISODE_TARGET};{STEP_TARGETS}",
        ),
        tmp_path,
    )
    check_ray_run(out, done.stdout)


def test_ray_actor_traced_from_code_with_the_worker_setup_hook(tmp_path) -> None:
    """The driver instruments the actor method in code; Ray's worker_process_setup_hook
    instruments each worker from AGENTTRACE_TARGETS given in runtime_env env_vars."""
    out = tmp_path / "runs"
    done = run(
        [sys.executable, str(TESTS / "instrumented_pkg/ray_driver.py"), "code", RAY_EPISODE_TARGET],
        subprocess_env(out, WORKER_TARGETS=STEP_TARGETS),
        tmp_path,
    )
    check_ray_run(out, done.stdout)


def test_suppressed_instrumentation_calls_the_original_untraced(pipeline) -> None:
    from instrumented_pkg import shapes
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    instrumentor = AgentTraceInstrumentor()
    instrumentor.instrument(targets=["instrumented_pkg.shapes:step=env.step"])
    try:
        with at.episode():
            with suppress_instrumentation():
                shapes.step(1)
            shapes.step(2)
    finally:
        instrumentor.uninstrument()
    result = read_run(pipeline)
    assert [s.index for s in result.live[0].steps] == [0]  # only the unsuppressed call


LATE_MODULE = """
import agenttrace  # noqa: F401 - (the module itself is plain code)

def play(n):
    return [step(i) for i in range(n)]

def step(action):
    return {"observation": action, "reward": 1.0, "terminated": False}
"""


def test_a_target_whose_module_comes_later_is_instrumented_when_it_is_imported(
    mem, instrumentor, monkeypatch, tmp_path, caplog
) -> None:
    """A launcher puts the code on sys.path after instrumentation started: the targets wait
    for the import instead of being dropped; one whose module never comes is named at exit."""
    module_name = "late_runner_pkg_xyz"
    monkeypatch.setenv(
        "AGENTTRACE_TARGETS",
        f"{module_name}:play=episode;{module_name}:step=env.step[extractor=mapping];"
        "never_imported_pkg_xyz:run=episode",
    )
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        instrumentor.instrument()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    (tmp_path / f"{module_name}.py").write_text(LATE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))  # what the launcher does at run time
    module = importlib.import_module(module_name)
    try:
        module.play(3)
        (trajectory,) = read_run(mem.runtime).live
        assert [s.observation for s in trajectory.steps] == [None, 0, 1]  # (no reset)
        assert trajectory.final_observation == 2
        assert trajectory.return_ == 3.0
        with caplog.at_level(logging.ERROR, logger="agenttrace"):
            auto._warn_uncalled(instrumentor)  # what runs at exit
        (never,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert "never_imported_pkg_xyz:run=episode never took effect" in never
        assert "was never imported later" in never
    finally:
        sys.modules.pop(module_name, None)


def test_an_instrumentation_that_failed_to_load_is_named_at_exit(tmp_path) -> None:
    """opentelemetry-instrument skips an instrumentor that cannot be imported with a debug
    line only. Here every installed openai instrumentor fails as openai-v2 does without
    httpx: the program uses openai, and the exit says why nothing traced it."""
    shadows = tmp_path / "shadows"
    for module in ("httpx", "openinference"):
        (shadows / module).mkdir(parents=True)
        (shadows / module / "__init__.py").write_text(
            f'raise ModuleNotFoundError("No module named {module!r}", name={module!r})\n'
        )
    script = tmp_path / "chat.py"
    script.write_text("import openai\n\nprint(openai.OpenAI)\n")
    env = subprocess_env(tmp_path / "runs", AGENTTRACE_TARGETS="chat:nothing=episode")
    env["PYTHONPATH"] = os.pathsep.join([str(shadows), env["PYTHONPATH"]])
    done = run([opentelemetry_instrument(), sys.executable, str(script)], env, tmp_path)
    assert "agenttrace: no OpenTelemetry instrumentation of openai is active" in done.stderr
    assert "opentelemetry.instrumentation.openai_v2:OpenAIInstrumentor cannot be loaded" in (
        done.stderr
    )
    assert "No module named 'httpx'" in done.stderr

    # Turned off on purpose: nothing to say.
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "openai"
    done = run([opentelemetry_instrument(), sys.executable, str(script)], env, tmp_path)
    assert "instrumentation of openai" not in done.stderr
