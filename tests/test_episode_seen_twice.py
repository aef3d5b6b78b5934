"""One episode seen by two instrumentations is one episode.

A runner with its own tracer writes runner-style spans (``episode`` with ``task_id``,
``env.reset``, ``timestep`` with ``timestep_idx``, ``env.step`` with ``reward`` and flags);
the ``runner`` preset reads them. An ``episode`` target on the runner's own method also makes
an agenttrace episode span around the runner's. Both describe one episode: it must come out
once, with the runner's steps and fields, live and rebuilt from the span file. The truth is
what the runner returned (the rewards gymnasium gave it, and the error it caught).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import exported, run_instrumented

from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories

RUNNER = '''
"""A runner that traces itself, runner style."""
import json

import gymnasium as gym
from opentelemetry import trace

tracer = trace.get_tracer("my.runner")


class Runner:
    def run_episode(self, task_id, seed, fail_reset=False):
        with tracer.start_as_current_span("episode", attributes={"task_id": task_id}) as span:
            env = gym.make("CartPole-v1")
            try:
                with tracer.start_as_current_span("env.reset") as reset:
                    if fail_reset:
                        raise ConnectionError(f"env server for {task_id} is down")
                    observation, _ = env.reset(seed=seed)
                    reset.set_attribute("observation", json.dumps(observation.tolist()))
            except ConnectionError as exc:
                span.set_attribute("error", True)  # the runner's flag; the reset span has why
                return {"task_id": task_id, "error": [type(exc).__name__, str(exc)]}
            rewards = []
            for index in range(500):
                with tracer.start_as_current_span("timestep", attributes={"timestep_idx": index}):
                    action = 1 if observation[2] > 0 else 0
                    with tracer.start_as_current_span("env.step") as step:
                        observation, reward, terminated, truncated, _ = env.step(action)
                        step.set_attributes(
                            {
                                "action": action,
                                "reward": float(reward),
                                "terminated": terminated,
                                "truncated": truncated,
                            }
                        )
                rewards.append(float(reward))
                if terminated or truncated:
                    break
            return {"task_id": task_id, "rewards": rewards, "terminated": terminated}
'''
MAIN = """
import json
import sys

from runner_lib import Runner

runner = Runner()
print(json.dumps([
    runner.run_episode("balance-0", seed=0),
    runner.run_episode("balance-1", seed=1, fail_reset=True),
    runner.run_episode("balance-2", seed=2),
]))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], list, Path]:
    tmp = tmp_path_factory.mktemp("seen_twice")
    (tmp / "runner_lib.py").write_text(RUNNER)
    done = run_instrumented(
        tmp,
        MAIN,
        AGENTTRACE_TARGETS="runner_lib:Runner.run_episode=episode",
        AGENTTRACE_CONVENTIONS="runner",
        AGENTTRACE_OUT=str(tmp / "runs"),
        # the runner's tracer is the global provider's: an SDK one, which agenttrace joins
        OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider",
    )
    live = load_trajectories(sorted((tmp / "runs").glob("*/trajectories.jsonl")))
    return json.loads(done.stdout), live, tmp / "runs"


def by_task(trajectories: list) -> dict:
    tasks = [t.task_id for t in trajectories]
    assert len(tasks) == len(set(tasks)), f"an episode came out twice: {tasks}"
    return {t.task_id: t for t in trajectories}


def assert_equal_to_the_runner(truth: list[dict], trajectories: list) -> None:
    found = by_task(trajectories)
    assert set(found) == {episode["task_id"] for episode in truth}
    for episode in truth:
        trajectory = found[episode["task_id"]]
        if "error" in episode:
            kind, message = episode["error"]
            assert trajectory.status == sc.STATUS_ERRORED
            assert trajectory.error.type.rsplit(".", 1)[-1] == kind
            assert trajectory.error.message == message
            assert trajectory.steps == []
            continue
        assert [step.reward for step in trajectory.steps] == episode["rewards"]
        assert trajectory.return_ == sum(episode["rewards"])
        assert trajectory.steps[-1].terminated == episode["terminated"]
        assert trajectory.status == sc.STATUS_COMPLETED
        assert trajectory.error is None


def test_one_trajectory_per_episode_live(run) -> None:
    truth, live, _ = run
    assert len(live) == len(truth)
    assert_equal_to_the_runner(truth, live)


def test_one_trajectory_per_episode_rebuilt_from_the_span_file(run, tmp_path) -> None:
    truth, live, runs = run
    rebuilt = exported(str(runs / "*" / "spans*.jsonl"), tmp_path / "out.jsonl")
    assert_equal_to_the_runner(truth, rebuilt)
    assert by_task(rebuilt) == by_task(live)


def test_the_runner_span_joins_the_target_episode(run) -> None:
    """The runner's span carries the target episode's id (so every reader groups them
    alike) and no second episode id was made from it."""
    _, live, runs = run
    ids = {t.episode_id for t in live}
    (spans,) = runs.glob("*/spans.jsonl")
    runner_episode_ids = set()
    for line in spans.read_text().splitlines():
        for resource in json.loads(line).get("resourceSpans", []):
            for scope in resource["scopeSpans"]:
                if scope["scope"]["name"] != "my.runner":
                    continue
                for span in scope["spans"]:
                    if span["name"] == "episode":
                        attrs = {a["key"]: a["value"] for a in span["attributes"]}
                        runner_episode_ids.add(attrs[sc.EPISODE_ID]["stringValue"])
    assert runner_episode_ids == ids
