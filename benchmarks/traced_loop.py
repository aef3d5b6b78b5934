"""The CartPole loop written with agenttrace's tracing API, shared by the benchmarks that run
agenttrace's full pipeline (overhead.py, collector_export.py): one episode span, a reset, and
per step a timestep with an agent.act and an env.step; and counting the spans it wrote."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from cartpole_plain import policy

import agenttrace as at


def play_traced(
    env: Any,
    steps: int,
    *,
    longest: list[float] | None = None,
    ends: dict[str, float] | None = None,
) -> tuple[int, int]:
    """Play whole episodes until at least ``steps`` steps; (steps played, episodes).

    ``longest``, when given, gets the longest single step in seconds (timed around each
    timestep) appended; ``ends`` gets each episode's id -> the wall time (time.time()) its
    episode span ended.
    """
    done_steps = episodes = 0
    slowest = 0.0
    clock = time.perf_counter
    while done_steps < steps:
        with at.episode(env=env) as episode:
            with at.env_reset() as reset:
                obs, _info = reset.record_result(env.reset(seed=episodes))
            done = False
            while not done:
                started = clock()
                with at.timestep():
                    with at.agent_act() as act:
                        action = policy(obs)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        obs, _reward, terminated, truncated, _info = step.record_result(
                            env.step(action)
                        )
                slowest = max(slowest, clock() - started)
                done = terminated or truncated
                done_steps += 1
            episode_id = episode.episode_id
        if ends is not None:
            ends[episode_id] = time.time()
        episodes += 1
    if longest is not None:
        longest.append(slowest)
    return done_steps, episodes


def count_spans(paths: list[Path]) -> int:
    """Spans in OTLP/JSON span files (the run folder's spans*.jsonl)."""
    total = 0
    for path in paths:
        with open(path) as handle:
            for line in handle:
                for resource in json.loads(line)["resourceSpans"]:
                    for scope in resource["scopeSpans"]:
                        total += len(scope["spans"])
    return total


def configure_full_pipeline(out: Path, writer: str, **options: Any) -> at.AgentTrace:
    """agenttrace as the benchmarks measure it: JSONL and Parquet trajectories and the span
    file, a run folder of its own per round, no exit line (the benchmark reports itself)."""
    return at.configure(
        out=str(out),
        run_name=uuid.uuid4().hex,
        sinks=["jsonl", "parquet"],
        spans=["file"],
        writer=writer,
        exit_report=False,
        **options,
    )
