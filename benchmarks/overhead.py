"""Per-step cost of agenttrace on gymnasium CartPole-v1, side by side in one run.

Variants, each over the same number of steps with the same scripted policy:

* ``bare``: the plain gymnasium loop;
* ``raw SDK``: OpenTelemetry SDK spans of the same shape and attributes as agenttrace's
  (episode > env.reset, timestep > agent.act + env.step), SimpleSpanProcessor and an exporter
  that does nothing;
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
alike. It then counts spans and trajectories lost by reading the files back. Target: ratio
agenttrace / raw SDK <= 1.3 and nothing lost. Run::

    python benchmarks/overhead.py
"""

from __future__ import annotations

import statistics
import tempfile
import uuid
from pathlib import Path

import gymnasium as gym
from cartpole_plain import policy
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from rounds import measure, parse_arguments
from traced_loop import count_spans, play_traced

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


def run_raw_sdk(env, steps: int) -> tuple[int, int]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_NullExporter()))
    tracer = provider.get_tracer("bench")
    done_steps = episodes = 0
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
                total += reward
                done = terminated or truncated
                done_steps += 1
                index += 1
            episode.set_attributes(
                {sc.EPISODE_STATUS: "completed", sc.EPISODE_RETURN: total, sc.EPISODE_LENGTH: index}
            )
        episodes += 1
    provider.shutdown()
    return done_steps, episodes


def run_agenttrace(
    env, steps: int, out: Path, writer: str, metrics: bool
) -> tuple[int, int, at.AgentTrace]:
    runtime = at.configure(
        out=str(out),
        run_name=uuid.uuid4().hex,
        sinks=["jsonl", "parquet"],
        spans=["file"],
        writer=writer,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]) if metrics else None,
        metrics="auto" if metrics else "none",
        exit_report=False,  # each round's pipeline; the benchmark reports itself
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
    timings: dict[str, list[float]] = {"bare": [], "raw SDK": [], "agenttrace": []}
    ratios: list[float] = []
    lost_spans = lost_trajectories = 0
    total_steps = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            seconds, (steps, _) = measure(run_bare, env, round_steps)
            timings["bare"].append(seconds / steps * 1e6)
            for variant in ("raw SDK", "agenttrace")[:: 1 if round_index % 2 == 0 else -1]:
                if variant == "raw SDK":
                    seconds, (steps, _) = measure(run_raw_sdk, env, round_steps)
                else:
                    seconds, (steps, episodes, runtime) = measure(
                        run_agenttrace, env, round_steps, Path(tmp), args.writer, args.metrics
                    )
                    traced_steps = steps
                timings[variant].append(seconds / steps * 1e6)
            ratios.append(timings["agenttrace"][-1] / timings["raw SDK"][-1])
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
    print(f"{'variant':<12} {'us/step':>9}")
    for name, value in medians.items():
        print(f"{name:<12} {value:>9.1f}")
    print(
        f"ratio agenttrace / raw SDK: {statistics.median(ratios):.2f} "
        f"(rounds {min(ratios):.2f}-{max(ratios):.2f})  target <= 1.3"
    )
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
