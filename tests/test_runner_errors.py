"""A runner's boolean ``error`` attribute means "failed", not the message "true" (issue 30,
section 9).

Runner-style spans (the ``runner`` preset: ``episode``, ``env.reset``, ``timestep``,
``env.step`` with plain attribute names) are made with the real OpenTelemetry SDK. The runner
catches the exception that ended an ``env.reset`` or ``env.step`` span (the SDK records it on
that span as an ``exception`` event, status ERROR) and sets ``error=True`` on its episode
span. The truth is the exception the test raised: its type named as OpenTelemetry names it
(``module.QualName``), its message, its traceback. Each case is checked live, rebuilt from the
span file, and through ``agenttrace export``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import exported
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.conventions import conventions_from_value
from agenttrace.trajectory.outcome import UNKNOWN_ERROR
from agenttrace.trajectory.stream import assemble


class ResetRefused(Exception):
    """What the environment raised on reset."""


class StepCrashed(RuntimeError):
    """What the environment raised on a step."""


class RunnerGaveUp(Exception):
    """What the runner recorded on its own episode span."""


@dataclass
class Truth:
    """The exception a case raised, and what the trajectory must say of it."""

    exception: BaseException | None

    @property
    def type(self) -> str | None:  # OpenTelemetry's exception.type: module.QualName
        if self.exception is None:
            return None
        kind = type(self.exception)
        return f"{kind.__module__}.{kind.__qualname__}"

    @property
    def message(self) -> str:
        return UNKNOWN_ERROR if self.exception is None else str(self.exception)


def raising(exception: BaseException) -> None:
    raise exception


def run_episode(
    tracer: Tracer, fail_reset: bool, fail_at: int | None, own: BaseException | None
) -> Truth:
    """One episode the way a runner with its own tracer writes it; returns what failed."""
    failure: BaseException | None = None
    with tracer.start_as_current_span("episode", attributes={"task_id": "t"}) as episode:
        try:
            with tracer.start_as_current_span("env.reset"):
                if fail_reset:
                    raising(ResetRefused("reset refused: seed 7 is out of range"))
            for index in range(3):
                with tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
                    with tracer.start_as_current_span("env.step") as step:
                        if index == fail_at:
                            raising(StepCrashed(f"physics blew up at step {index}"))
                        step.set_attribute("reward", 1.0)
                        step.set_attribute("done", index == 2)
        except Exception as exc:  # the runner catches it and flags its episode
            failure = exc
            episode.set_attribute("error", True)
        if own is not None:  # the runner's own error, recorded on its episode span
            try:
                raising(own)
            except Exception as exc:
                episode.record_exception(exc)
                episode.set_attribute("error", True)
    return Truth(own if own is not None else failure)


CASES: dict[str, tuple[bool, int | None, BaseException | None]] = {
    "reset fails": (True, None, None),
    "step 1 fails": (False, 1, None),
    "the episode's own exception wins": (True, None, RunnerGaveUp("gave up after retries")),
    "flag without any exception": (False, None, None),
}


def traced(tmp_path: Path, play: Callable[[Tracer], Truth]) -> tuple[Truth, at.AgentTrace]:
    provider = TracerProvider()
    runtime = at.configure(
        tracer_provider=provider,
        out=str(tmp_path / "runs"),
        run_name="runner",
        sinks=["jsonl"],
        spans=["file"],
        conventions="runner",
        exit_report=False,
    )
    try:
        truth = play(provider.get_tracer("runner"))
    finally:
        runtime.shutdown()
        provider.shutdown()
    return truth, runtime


@pytest.mark.parametrize("case", list(CASES))
def test_a_flagged_episode_has_the_error_that_caused_it_live_and_offline(tmp_path, case) -> None:
    fail_reset, fail_at, own = CASES[case]
    if case == "flag without any exception":

        def play(tracer: Tracer) -> Truth:
            with tracer.start_as_current_span("episode", attributes={"task_id": "t"}) as span:
                with tracer.start_as_current_span("env.reset"):
                    pass
                span.set_attribute("error", True)
            return Truth(None)

    else:

        def play(tracer: Tracer) -> Truth:
            return run_episode(tracer, fail_reset, fail_at, own)

    truth, runtime = traced(tmp_path, play)
    (live,) = load_trajectories(runtime.trajectory_paths)
    offline = assemble(
        read_otlp_json(runtime.span_paths), conventions=conventions_from_value("runner")
    )
    (span_file,) = runtime.span_paths
    cli = exported(str(span_file), tmp_path / "export.jsonl", "--conventions", "runner")
    assert offline == [live] and cli == [live]

    assert live.status == sc.STATUS_ERRORED
    assert (live.error.type, live.error.message) == (truth.type, truth.message)
    assert live.error.message != "true"
    if truth.exception is None:
        assert live.error.stack is None
    else:  # the traceback of the exception raised: its innermost frame (the raise) and line
        expected = "".join(traceback.format_exception(truth.exception)[-2:])
        assert live.error.stack.startswith("Traceback") and live.error.stack.endswith(expected)
        assert "in raising" in expected
    if fail_at is not None:
        assert [s.index for s in live.steps] == list(range(fail_at + 1))
        assert live.steps[fail_at].error == f"{truth.type}: {truth.message}"


def test_an_error_flag_that_is_false_or_text_keeps_its_meaning(tmp_path) -> None:
    """False: no error. Text: the message (no type), as before."""

    def play(tracer: Tracer) -> Truth:
        with tracer.start_as_current_span("episode", attributes={"task_id": "ok"}) as span:
            with tracer.start_as_current_span("env.reset"):
                pass
            span.set_attribute("error", False)
        with tracer.start_as_current_span("episode", attributes={"task_id": "text"}) as span:
            with tracer.start_as_current_span("env.reset"):
                pass
            span.set_attribute("error", "runner says: out of budget")
        return Truth(None)

    _, runtime = traced(tmp_path, play)
    by_task = {t.task_id: t for t in load_trajectories(runtime.trajectory_paths)}
    assert by_task["ok"].error is None and by_task["ok"].status == sc.STATUS_COMPLETED
    text = by_task["text"]
    assert text.status == sc.STATUS_ERRORED
    assert (text.error.type, text.error.message) == (None, "runner says: out of budget")
    offline = assemble(
        read_otlp_json(runtime.span_paths), conventions=conventions_from_value("runner")
    )
    assert sorted(offline, key=lambda t: t.task_id) == [by_task["ok"], by_task["text"]]
