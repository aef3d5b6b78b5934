"""Per-sub-env-step cost of agenttrace on ``gymnasium.make_vec("CartPole-v1", num_envs=16)``.

Variants, each over the same number of vector steps with the same batched policy:

* ``bare``: the plain vector loop (sync vector env, next-step autoreset);
* ``raw SDK``: OpenTelemetry SDK spans of the shape a per-env tracer gives, one ``episode``
  and ``env.reset`` per sub-environment run and one ``env.step`` span per sub-environment step
  with agenttrace's attributes, SimpleSpanProcessor and an exporter that does nothing;
* ``agenttrace``: ``TracedVectorEnv`` and the full pipeline with default settings
  (trajectories.jsonl and Parquet, spans.jsonl): one ``env.vector_step`` span per call,
  the episodes rebuilt from it; the time includes the final flush.

Rounds are interleaved and the ratio is the median of per-round ratios (benchmarks/rounds.py).
It then checks that nothing was lost: every sub-environment step is in a trajectory, and every
span is in the span file. Run::

    python benchmarks/vector_overhead.py --steps 300000 --rounds 6

(``--steps`` counts sub-environment steps per variant.)
"""

from __future__ import annotations

import statistics
import tempfile
import uuid
from pathlib import Path

import gymnasium as gym
import numpy as np
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from rounds import measure, parse_arguments
from traced_loop import configure_full_pipeline, count_spans

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument.vector import TracedVectorEnv
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory import codec

NUM_ENVS = 16


def policy(observations: np.ndarray) -> np.ndarray:
    return (observations[:, 2] + 0.3 * observations[:, 3] > 0).astype(np.int64)


def make_envs() -> gym.vector.VectorEnv:
    return gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="sync")


def run_bare(envs, vector_steps: int) -> int:
    observations, _ = envs.reset(seed=0)
    for _ in range(vector_steps):
        observations, *_ = envs.step(policy(observations))
    return vector_steps * NUM_ENVS


class _NullExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def run_raw_sdk(envs, vector_steps: int) -> int:
    """What a tracer with a span per sub-environment step emits (next-step autoreset: a
    sub-env that ended is reset by the next call, which is not a step of it)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_NullExporter()))
    tracer = provider.get_tracer("bench")
    episodes: list = [None] * NUM_ENVS
    ids = [""] * NUM_ENVS
    indices = [0] * NUM_ENVS
    returns = [0.0] * NUM_ENVS

    def open_episode(i: int, observation, info) -> None:
        ids[i], indices[i], returns[i] = uuid.uuid4().hex, 0, 0.0
        attributes = {sc.EPISODE_ID: ids[i], sc.ENV_INDEX: i}
        episodes[i] = tracer.start_span(sc.EPISODE, attributes=attributes)
        context = trace_context(episodes[i])
        with tracer.start_as_current_span(sc.ENV_RESET, context=context) as span:
            span.set_attributes(
                {
                    sc.EPISODE_ID: ids[i],
                    sc.OBSERVATION: codec.dumps(observation),
                    sc.INFO: codec.dumps(info),
                }
            )

    def close_episode(i: int, status: str) -> None:
        episodes[i].set_attributes(
            {
                sc.EPISODE_STATUS: status,
                sc.EPISODE_RETURN: returns[i],
                sc.EPISODE_LENGTH: indices[i],
            }
        )
        episodes[i].end()

    observations, _ = envs.reset(seed=0)
    for i in range(NUM_ENVS):
        open_episode(i, observations[i], {})
    pending = np.zeros(NUM_ENVS, dtype=bool)
    stepped = 0
    for _ in range(vector_steps):
        actions = policy(observations)
        spans = [None] * NUM_ENVS
        for i in range(NUM_ENVS):
            if not pending[i]:
                spans[i] = span = tracer.start_span(
                    sc.ENV_STEP,
                    context=trace_context(episodes[i]),
                    attributes={sc.EPISODE_ID: ids[i], sc.TIMESTEP_INDEX: indices[i]},
                )
                span.set_attribute(sc.ACTION, codec.dumps(actions[i]))
        observations, rewards, terminations, truncations, _ = envs.step(actions)
        for i in range(NUM_ENVS):
            if pending[i]:
                open_episode(i, observations[i], {})
                continue
            terminated, truncated = bool(terminations[i]), bool(truncations[i])
            spans[i].set_attributes(
                {
                    sc.OBSERVATION: codec.dumps(observations[i]),
                    sc.INFO: codec.dumps({}),
                    sc.REWARD: float(rewards[i]),
                    sc.TERMINATED: terminated,
                    sc.TRUNCATED: truncated,
                    sc.DONE: terminated or truncated,
                }
            )
            spans[i].end()
            stepped += 1
            indices[i] += 1
            returns[i] += float(rewards[i])
            if terminated or truncated:
                close_episode(i, "completed" if terminated else "truncated")
        pending = terminations | truncations
    for i in range(NUM_ENVS):
        if not pending[i]:
            close_episode(i, "aborted")
    provider.shutdown()
    return stepped


def trace_context(span):
    from opentelemetry import trace

    return trace.set_span_in_context(span)


def run_agenttrace(
    envs, vector_steps: int, out: Path, writer: str
) -> tuple[int, int, at.AgentTrace]:
    """(sub-env steps played, calls that stepped at least one, the pipeline)."""
    runtime = configure_full_pipeline(out, writer)
    traced = TracedVectorEnv(envs)
    observations, _ = traced.reset(seed=0)
    pending = np.zeros(NUM_ENVS, dtype=bool)
    stepped = calls = 0
    for _ in range(vector_steps):
        stepped += int((~pending).sum())
        calls += int((~pending).any())  # (a call that only resets sub-envs has no span)
        observations, _, terminations, truncations, _ = traced.step(policy(observations))
        pending = terminations | truncations
    for sub in traced._at_subs:  # end the open episodes (close() would close envs too)
        traced._end(sub, sc.STATUS_ABORTED)
    runtime.force_flush()
    return stepped, calls, runtime


def main() -> None:
    args, round_steps = parse_arguments(__doc__.split("\n\n")[0])
    vector_steps = max(1, round_steps // NUM_ENVS)
    envs = make_envs()
    run_bare(envs, 200)  # warm up
    timings: dict[str, list[float]] = {"bare": [], "raw SDK": [], "agenttrace": []}
    ratios: list[float] = []
    lost_steps = lost_spans = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            seconds, steps = measure(run_bare, envs, vector_steps)
            timings["bare"].append(seconds / steps * 1e6)
            for variant in ("raw SDK", "agenttrace")[:: 1 if round_index % 2 == 0 else -1]:
                if variant == "raw SDK":
                    seconds, steps = measure(run_raw_sdk, envs, vector_steps)
                else:
                    seconds, (steps, calls, runtime) = measure(
                        run_agenttrace, envs, vector_steps, Path(tmp), args.writer
                    )
                    traced_steps = steps
                timings[variant].append(seconds / steps * 1e6)
            ratios.append(timings["agenttrace"][-1] / timings["raw SDK"][-1])
            runtime.shutdown()
            jsonl = [p for p in runtime.trajectory_paths if p.suffix == ".jsonl"]
            trajectories = load_trajectories(jsonl)
            lost_steps += traced_steps - sum(len(t.steps) for t in trajectories)
            # An episode span and a reset per episode, and one vector span per call.
            lost_spans += 2 * len(trajectories) + calls - count_spans(runtime.span_paths)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(
        f"make_vec CartPole-v1 x{NUM_ENVS} (sync), {vector_steps * NUM_ENVS * args.rounds} "
        f"sub-env steps per variant in {args.rounds} rounds; medians"
    )
    print(f"{'variant':<12} {'us per sub-env step':>20}")
    for name, value in medians.items():
        print(f"{name:<12} {value:>20.1f}")
    print(
        f"ratio agenttrace / raw SDK: {statistics.median(ratios):.2f} "
        f"(rounds {min(ratios):.2f}-{max(ratios):.2f})"
    )
    print(f"sub-env steps lost: {lost_steps}  spans lost: {lost_spans}")
    envs.close()


if __name__ == "__main__":
    main()
