"""Per-step cost of agenttrace on gymnasium CartPole-v1, side by side in one run.

Variants, each over the same number of steps with the same scripted policy:

* ``bare``: the plain gymnasium loop;
* ``raw SDK``: OpenTelemetry SDK spans of the same shape and attributes as agenttrace's
  (episode > env.reset, timestep > agent.act + env.step), SimpleSpanProcessor and an exporter
  that does nothing;
* ``raw SDK, batch``: the same spans through a ``BatchSpanProcessor`` (what a production setup
  uses); the spans its full queue drops are counted;
* ``Minari``: Minari's own ``DataCollector`` recording the same loop, then writing its dataset
  (HDF5), for those who record training data without traces;
* ``agenttrace``: the full pipeline with default settings: the tracing API, the
  TrajectoryProcessor writing trajectories.jsonl *and* Parquet, and spans.jsonl (OTLP/JSON);
  the time includes the final flush, so background work is counted. On 2+ CPUs the writer
  runs in a helper process (``writer=auto``, see docs/writer.md); ``--writer thread`` measures
  the in-process writer instead. ``--metrics`` adds episode metrics (docs/metrics.md) on an
  SDK MeterProvider, recorded in this process.

The steps are played in short rounds (``--steps`` split over ``--rounds``); in each round
every variant runs once (raw SDK and agenttrace take turns at going first) and the ratio is
taken within the round. The ratio shown is the median of those per-round ratios: a host
whose speed drifts by 10-20 % within a minute (shared machines do) moves both runs of a round
alike. It then counts spans and trajectories lost by reading the files back. Target (issue
19): ratio agenttrace / raw SDK <= 1.0 and nothing lost. Run::

    python benchmarks/overhead.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
from cartpole_plain import policy
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from rounds import measure, parse_arguments
from traced_loop import configure_full_pipeline, count_spans, play_traced

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory import codec


def run_bare(env, steps: int) -> tuple[int, int]:
    done_steps = episodes = 0
    while done_steps < steps:
        obs, _info = env.reset(seed=episodes)
        done = False
        while not done:
            obs, _reward, terminated, truncated, _info = env.step(policy(obs))
            done = terminated or truncated
            done_steps += 1
        episodes += 1
    return done_steps, episodes


class _NullExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


class _CountingExporter(SpanExporter):
    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans):
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


def run_raw_sdk(env, steps: int, batch: list[int] | None = None) -> tuple[int, int]:
    """The raw SDK loop; with ``batch`` (a list to append to), a BatchSpanProcessor instead of
    a SimpleSpanProcessor, and the number of spans its full queue dropped is appended."""
    counting = _CountingExporter()
    if batch is None:
        processor = SimpleSpanProcessor(_NullExporter())
    else:
        processor = BatchSpanProcessor(counting)
    done_steps, episodes = play_raw_sdk(env, steps, processor)
    if batch is not None:
        batch.append(2 * episodes + 3 * done_steps - counting.exported)  # (dropped spans)
    return done_steps, episodes


def play_raw_sdk(
    env, steps: int, processor: Any, longest: list[float] | None = None
) -> tuple[int, int]:
    """agenttrace's span shape and attributes made with the raw SDK, through ``processor``
    on a provider of its own, shut down at the end; (steps, episodes). ``longest`` gets the
    longest single step in seconds appended."""
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    done_steps = episodes = 0
    slowest = 0.0
    clock = time.perf_counter
    while done_steps < steps:
        episode_id = uuid.uuid4().hex
        ids = {sc.EPISODE_ID: episode_id}
        with tracer.start_as_current_span(sc.EPISODE, attributes=ids) as episode:
            with tracer.start_as_current_span(sc.ENV_RESET, attributes=ids) as span:
                obs, info = env.reset(seed=episodes)
                span.set_attributes({sc.OBSERVATION: codec.dumps(obs), sc.INFO: codec.dumps(info)})
            done = False
            index = total = 0
            while not done:
                started = clock()
                attrs = {sc.EPISODE_ID: episode_id, sc.TIMESTEP_INDEX: index}
                with tracer.start_as_current_span(sc.TIMESTEP, attributes=attrs):
                    with tracer.start_as_current_span(sc.AGENT_ACT, attributes=attrs) as span:
                        action = policy(obs)
                        span.set_attributes(
                            {sc.OBSERVATION: codec.dumps(obs), sc.ACTION: codec.dumps(action)}
                        )
                    with tracer.start_as_current_span(sc.ENV_STEP, attributes=attrs) as span:
                        obs, reward, terminated, truncated, info = env.step(action)
                        span.set_attributes(
                            {
                                sc.OBSERVATION: codec.dumps(obs),
                                sc.INFO: codec.dumps(info),
                                sc.REWARD: float(reward),
                                sc.TERMINATED: terminated,
                                sc.TRUNCATED: truncated,
                                sc.DONE: terminated or truncated,
                            }
                        )
                slowest = max(slowest, clock() - started)
                total += reward
                done = terminated or truncated
                done_steps += 1
                index += 1
            episode.set_attributes(
                {sc.EPISODE_STATUS: "completed", sc.EPISODE_RETURN: total, sc.EPISODE_LENGTH: index}
            )
        episodes += 1
    provider.shutdown()
    if longest is not None:
        longest.append(slowest)
    return done_steps, episodes


def run_minari(env, steps: int, folder: Path, name: str) -> tuple[int, int]:
    """Minari's own DataCollector recording the same loop, then writing its dataset."""
    import os
    import warnings

    from minari import DataCollector

    warnings.filterwarnings("ignore", module="minari")  # (its notes on missing metadata)

    os.environ["MINARI_DATASETS_PATH"] = str(folder)
    collector = DataCollector(env)
    done_steps = episodes = 0
    while done_steps < steps:
        obs, _info = collector.reset(seed=episodes)
        done = False
        while not done:
            obs, _reward, terminated, truncated, _info = collector.step(policy(obs))
            done = terminated or truncated
            done_steps += 1
        episodes += 1
    collector.create_dataset(dataset_id=f"bench/{name}-v0")
    collector.close()
    return done_steps, episodes


def run_agenttrace(
    env, steps: int, out: Path, writer: str, metrics: bool
) -> tuple[int, int, at.AgentTrace]:
    runtime = configure_full_pipeline(
        out,
        writer,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]) if metrics else None,
        metrics="auto" if metrics else "none",
    )
    done_steps, episodes = play_traced(env, steps)
    runtime.force_flush()
    return done_steps, episodes, runtime


def main() -> None:
    args, round_steps = parse_arguments(
        __doc__.split("\n\n")[0],
        lambda parser: parser.add_argument(
            "--metrics", action="store_true", help="with episode metrics on an SDK MeterProvider"
        ),
    )
    env = gym.make("CartPole-v1")
    run_bare(env, 2_000)  # warm up imports and caches
    variants = ["bare", "raw SDK", "agenttrace", "raw SDK, batch", "Minari"]
    timings: dict[str, list[float]] = {name: [] for name in variants}
    ratios: dict[str, list[float]] = {name: [] for name in variants[1:] if name != "agenttrace"}
    dropped_by_batch: list[int] = []
    lost_spans = lost_trajectories = 0
    total_steps = 0
    minari_env = gym.make("CartPole-v1")
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            seconds, (steps, _) = measure(run_bare, env, round_steps)
            timings["bare"].append(seconds / steps * 1e6)
            order = ("raw SDK", "agenttrace", "raw SDK, batch", "Minari")
            for variant in order[:: 1 if round_index % 2 == 0 else -1]:
                if variant == "raw SDK":
                    seconds, (steps, _) = measure(run_raw_sdk, env, round_steps)
                elif variant == "raw SDK, batch":
                    seconds, (steps, _) = measure(run_raw_sdk, env, round_steps, dropped_by_batch)
                elif variant == "Minari":
                    folder = Path(tmp) / "minari"
                    seconds, (steps, _) = measure(
                        run_minari, minari_env, round_steps, folder, f"round{round_index}"
                    )
                else:
                    seconds, (steps, episodes, runtime) = measure(
                        run_agenttrace, env, round_steps, Path(tmp), args.writer, args.metrics
                    )
                    traced_steps = steps
                timings[variant].append(seconds / steps * 1e6)
            for name in ratios:
                ratios[name].append(timings["agenttrace"][-1] / timings[name][-1])
            writer = type(runtime.trajectory_processor.writer).__name__
            total_steps += traced_steps
            runtime.shutdown()
            expected_spans = 2 * episodes + 3 * traced_steps  # episode + reset, 3 spans per step
            lost_spans += expected_spans - count_spans(runtime.span_paths)
            jsonl = [p for p in runtime.trajectory_paths if p.suffix == ".jsonl"]
            parquet = [p for p in runtime.trajectory_paths if p.suffix == ".parquet"]
            lost_trajectories += episodes - len(load_trajectories(jsonl))
            lost_trajectories += episodes - len(load_trajectories(parquet))
            stats = runtime.stats()
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(
        f"CartPole-v1, {round_steps * args.rounds} steps per variant in {args.rounds} rounds "
        f"of {round_steps}; medians"
    )
    print(f"agenttrace writer: {args.writer} -> {writer}; episode metrics: {args.metrics}")
    print(f"{'variant':<16} {'us/step':>9}")
    for name, value in medians.items():
        print(f"{name:<16} {value:>9.1f}")
    for name, values in ratios.items():
        target = "  target <= 1.0" if name == "raw SDK" else ""
        print(
            f"ratio agenttrace / {name}: {statistics.median(values):.2f} "
            f"(rounds {min(values):.2f}-{max(values):.2f}){target}"
        )
    print(f"spans the raw SDK's BatchSpanProcessor dropped (queue full): {sum(dropped_by_batch)}")
    print(
        f"spans lost: {lost_spans}  trajectories lost: {lost_trajectories}  "
        f"over {total_steps} agenttrace steps"
    )
    print(
        f"agenttrace loss counters (last round): spans_dropped={stats['spans_dropped']}, "
        f"episodes_dropped_queue_full={stats['episodes_dropped_queue_full']}"
    )


if __name__ == "__main__":
    main()
