"""Per-step cost of auto-instrumentation against the hand-written tracing API, in one run.

The same gymnasium CartPole-v1 loop (scripted policy, episode k played from seed k), the same
pipeline settings (trajectories.jsonl and spans.jsonl, writer ``auto`` unless ``--writer``),
the same spans (episode > env.reset, timestep > agent.act + env.step):

* ``bare``: the plain loop of benchmarks/cartpole_plain.py, untraced (reference);
* ``hand-written``: that loop written with ``at.episode`` / ``at.env_reset`` /
  ``at.timestep`` / ``at.agent_act`` / ``at.env_step``;
* ``auto functions``: the plain loop traced only through ``AgentTraceInstrumentor`` targets
  on its functions (``play_episode``, ``play_step``, ``policy``, ``reset_env``, ``step_env``);
* ``auto methods``: the same, but env.reset and env.step are ``gymnasium.core:Env.reset`` /
  ``Env.step``, which trace every gymnasium environment and wrapper: the TimeLimit >
  OrderEnforcing > PassiveEnvChecker > CartPoleEnv chain of ``gym.make`` gives one span per
  call (the outermost), the nested calls pass through.

Times include the final flush, so background work is counted; ``instrument()`` itself is
not timed (it runs once per process). The steps are played in short rounds (``--steps`` split
over ``--rounds``); in each round every variant runs once, taking turns at running first, and
each auto variant's ratio is taken against the hand-written run of the same round. The ratio
shown is the median of those per-round ratios: a host whose speed drifts by 10-20 % within
a minute (shared machines do) moves both runs of a round alike. Next to the wall time it
shows the CPU time of the loop's thread, which other processes disturb much less.
Afterwards it counts spans and trajectories lost by reading the files back, and checks
that every auto variant wrote the same trajectories (field by field, ids and times aside)
and the same spans (name, parent's name, status, attributes, ids aside) as the
hand-written one; it exits with status 1 when they differ. Target: ratio auto /
hand-written <= 1.1 and nothing lost. Run::

    python benchmarks/auto_overhead.py --steps 300000
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cartpole_plain as plain
import gymnasium as gym
from rounds import parse_arguments

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument.auto import AgentTraceInstrumentor
from agenttrace.sinks import load_trajectories

PLAIN = "cartpole_plain"
LOOP_TARGETS = [
    f"{PLAIN}:play_episode=episode",
    f"{PLAIN}:play_step=timestep",
    f"{PLAIN}:policy=agent.act",
]
TARGETS = {
    "auto functions": [
        *LOOP_TARGETS,
        f"{PLAIN}:reset_env=env.reset",
        f"{PLAIN}:step_env=env.step",
    ],
    "auto methods": [
        *LOOP_TARGETS,
        "gymnasium.core:Env.reset=env.reset",
        "gymnasium.core:Env.step=env.step",
    ],
}
HAND = "hand-written"
#: Attributes that differ between two runs of the same episodes.
ID_ATTRIBUTES = frozenset({sc.EPISODE_ID, sc.GEN_AI_CONVERSATION_ID})
ID_FIELDS = frozenset({"episode_id", "trace_id", "start_time", "end_time"})


# --- the variants --------------------------------------------------------------------------------


def run_bare(env: Any, steps: int) -> tuple[int, int]:
    done_steps = episodes = 0
    while done_steps < steps:
        done_steps += plain.play_episode(env, episodes)  # by attribute: instrumented when asked
        episodes += 1
    return done_steps, episodes


def run_hand_written(env: Any, steps: int) -> tuple[int, int]:
    """The loop with the tracing API, recording what the auto variants' targets record."""
    done_steps = episodes = 0
    while done_steps < steps:
        seed = episodes
        with at.episode(env=env, seed=seed):
            with at.env_reset() as reset:
                reset.set_attribute(sc.EPISODE_SEED, seed)  # a traced reset(seed=) records it
                obs, _info = reset.record_result(env.reset(seed=seed))
            done = False
            while not done:
                with at.timestep():
                    with at.agent_act() as act:
                        action = plain.policy(obs)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        step.record(action=action)  # a traced step(action) records it
                        obs, _reward, terminated, truncated, _info = step.record_result(
                            env.step(action)
                        )
                done = terminated or truncated
                done_steps += 1
        episodes += 1
    return done_steps, episodes


def traced_run(
    loop: Callable[[Any, int], tuple[int, int]], env: Any, steps: int, out: Path, writer: str
) -> tuple[int, int, at.AgentTrace]:
    """``loop`` under a fresh pipeline; returns after the final flush (background work)."""
    runtime = at.configure(
        out=str(out),
        run_name=uuid.uuid4().hex,
        sinks=["jsonl"],
        spans=["file"],
        writer=writer,
        exit_report=False,  # each round's pipeline; the benchmark reports itself
    )
    done_steps, episodes = loop(env, steps)
    runtime.force_flush()
    return done_steps, episodes, runtime


def measure(fn: Callable[..., Any], *args: Any) -> tuple[float, float, Any]:
    """Wall time, CPU time of this thread (less sensitive to other processes), result."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    result = fn(*args)
    return time.perf_counter() - wall, time.thread_time() - cpu, result


# --- reading the files back ----------------------------------------------------------------------


def span_shapes(paths: list[Path]) -> Counter[str]:
    """Every span as name, parent's name, status and attributes (ids aside), counted."""
    spans: list[dict] = []
    for path in paths:
        with open(path) as handle:
            for line in handle:
                for resource in json.loads(line)["resourceSpans"]:
                    for scope in resource["scopeSpans"]:
                        spans.extend(scope["spans"])
    names = {span["spanId"]: span["name"] for span in spans}
    shapes: Counter[str] = Counter()
    for span in spans:
        attributes = sorted(
            (a["key"], json.dumps(a["value"], sort_keys=True))
            for a in span.get("attributes", [])
            if a["key"] not in ID_ATTRIBUTES
        )
        parent = names.get(span.get("parentSpanId") or "", "")
        status = span.get("status", {}).get("code", 0)
        shapes[json.dumps([span["name"], parent, status, attributes])] += 1
    return shapes


def comparable(value: Any) -> Any:
    """A trajectory's dict form without ids and times, at every depth."""
    if isinstance(value, dict):
        return {
            key: comparable(item)
            for key, item in value.items()
            if key not in ID_FIELDS and key not in ID_ATTRIBUTES
        }
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def first_difference(expected: Any, got: Any, where: str = "") -> str | None:
    """Where two comparable values first differ (a readable path), None when equal."""
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in sorted(set(expected) | set(got)):
            if key not in expected or key not in got:
                return f"{where}.{key}: only in {HAND if key in expected else 'auto'}"
            found = first_difference(expected[key], got[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{where}: {len(expected)} items vs {len(got)}"
        for index, (a, b) in enumerate(zip(expected, got, strict=True)):
            found = first_difference(a, b, f"{where}[{index}]")
            if found:
                return found
        return None
    return None if expected == got else f"{where}: {expected!r} vs {got!r}"


class Readback:
    """What one traced run wrote: trajectories by seed and span shapes; losses counted."""

    def __init__(self, runtime: at.AgentTrace, steps: int, episodes: int) -> None:
        jsonl = [p for p in runtime.trajectory_paths if p.suffix == ".jsonl"]
        trajectories = load_trajectories(jsonl) if jsonl else []
        self.duplicate_seeds = len(trajectories) - len(
            set(t.attributes.get(sc.EPISODE_SEED) for t in trajectories)
        )
        self.by_seed = {
            t.attributes.get(sc.EPISODE_SEED): comparable(t.to_dict()) for t in trajectories
        }
        self.spans = span_shapes(runtime.span_paths)
        expected_spans = 2 * episodes + 3 * steps  # episode + env.reset, 3 spans per step
        self.lost_spans = expected_spans - sum(self.spans.values())
        self.lost_trajectories = episodes - len(trajectories)
        self.stats = runtime.stats()


def describe(shape: str | None) -> str:
    """A span shape from span_shapes, short: name < parent [attribute keys]."""
    if shape is None:
        return "none"
    name, parent, status, attributes = json.loads(shape)
    keys = ",".join(key for key, _ in attributes)
    return f"{name} < {parent or '-'} (status {status}) [{keys}]"


def compare(hand: Readback, auto: Readback) -> list[str]:
    """The differences between two runs of the same seeds (empty: the same)."""
    problems: list[str] = []
    if hand.duplicate_seeds or auto.duplicate_seeds:
        problems.append("trajectories without a seed or with the same seed: cannot pair them")
    if set(hand.by_seed) != set(auto.by_seed):
        problems.append(f"seeds differ: {sorted(set(hand.by_seed) ^ set(auto.by_seed))[:5]}")
    for seed in sorted(set(hand.by_seed) & set(auto.by_seed), key=str):
        found = first_difference(hand.by_seed[seed], auto.by_seed[seed])
        if found:
            problems.append(f"trajectory of seed {seed}: at {found.lstrip('.')}")
            break
    if hand.spans != auto.spans:
        only_hand, only_auto = hand.spans - auto.spans, auto.spans - hand.spans
        problems.append(
            f"spans differ: {sum(only_hand.values())} only in {HAND}, e.g. "
            f"{describe(next(iter(only_hand), None))}; {sum(only_auto.values())} only in auto, "
            f"e.g. {describe(next(iter(only_auto), None))}"
        )
    return problems


# --- main ----------------------------------------------------------------------------------------


def main() -> int:
    args, round_steps = parse_arguments(__doc__.split("\n\n")[0])
    env = gym.make("CartPole-v1")
    run_bare(env, 2_000)  # warm up imports and caches
    instrumentor = AgentTraceInstrumentor()
    traced = [HAND, *TARGETS]
    wall: dict[str, list[float]] = {name: [] for name in ("bare", *traced)}
    cpu: dict[str, list[float]] = {name: [] for name in ("bare", *traced)}
    ratios: dict[str, list[float]] = {name: [] for name in TARGETS}  # wall, per round
    cpu_ratios: dict[str, list[float]] = {name: [] for name in TARGETS}
    lost = {name: [0, 0] for name in traced}  # spans, trajectories
    problems: dict[str, list[str]] = {name: [] for name in TARGETS}
    dropped = total_steps = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            seconds, cpu_seconds, (steps, _) = measure(run_bare, env, round_steps)
            wall["bare"].append(seconds / steps * 1e6)
            cpu["bare"].append(cpu_seconds / steps * 1e6)
            runs: dict[str, tuple[at.AgentTrace, int, int]] = {}
            shift = round_index % len(traced)  # each traced variant takes each place in turn
            for name in traced[shift:] + traced[:shift]:
                targets = TARGETS.get(name)
                if targets:
                    instrumentor.instrument(targets=targets)
                try:
                    loop = run_bare if targets else run_hand_written
                    seconds, cpu_seconds, (steps, episodes, runtime) = measure(
                        traced_run, loop, env, round_steps, Path(tmp), args.writer
                    )
                finally:
                    if targets:
                        instrumentor.uninstrument()
                runtime.shutdown()
                writer = type(runtime.trajectory_processor.writer).__name__
                wall[name].append(seconds / steps * 1e6)
                cpu[name].append(cpu_seconds / steps * 1e6)
                runs[name] = (runtime, steps, episodes)
                total_steps += steps
            for name in TARGETS:
                ratios[name].append(wall[name][-1] / wall[HAND][-1])
                cpu_ratios[name].append(cpu[name][-1] / cpu[HAND][-1])
            # files are read back after the timed runs, so their data never slows one down
            readbacks = {name: Readback(*run) for name, run in runs.items()}
            for name, readback in readbacks.items():
                lost[name][0] += readback.lost_spans
                lost[name][1] += readback.lost_trajectories
                dropped += readback.stats["spans_dropped"]
                dropped += readback.stats["episodes_dropped_queue_full"]
                if name in TARGETS:
                    problems[name] += compare(readbacks[HAND], readback)
            del readbacks, runs
    median_wall = {name: statistics.median(values) for name, values in wall.items()}
    median_cpu = {name: statistics.median(values) for name, values in cpu.items()}
    print(
        f"CartPole-v1, {round_steps * args.rounds} steps per variant in {args.rounds} rounds "
        f"of {round_steps}; medians"
    )
    print(f"pipeline: trajectories.jsonl + spans.jsonl, writer {args.writer} -> {writer}")
    print(
        f"{'variant':<16} {'us/step':>9} {'CPU us/step':>12} {'spans lost':>11} {'traj. lost':>11}"
    )
    for name in wall:
        spans_lost, trajectories_lost = lost.get(name, ("-", "-"))
        print(
            f"{name:<16} {median_wall[name]:>9.1f} {median_cpu[name]:>12.1f} "
            f"{spans_lost:>11} {trajectories_lost:>11}"
        )
    print("(us/step: wall time incl. the final flush; CPU: this thread's CPU time, which other")
    print(" processes on the machine disturb less)")
    for name in TARGETS:
        low, high = min(ratios[name]), max(ratios[name])
        print(
            f"ratio {name} / {HAND}: {statistics.median(ratios[name]):.2f} "
            f"(CPU {statistics.median(cpu_ratios[name]):.2f}; rounds {low:.2f}-{high:.2f})"
            "  target <= 1.1"
        )
    spans_lost = sum(counts[0] for counts in lost.values())
    trajectories_lost = sum(counts[1] for counts in lost.values())
    print(
        f"spans lost: {spans_lost}  trajectories lost: {trajectories_lost}  "
        f"over {total_steps} traced steps; dropped by agenttrace: {dropped}"
    )
    failed = False
    for name, found in problems.items():
        if found:
            failed = True
            print(f"{name}: DIFFERENT from {HAND}:")
            for problem in found[:5]:
                print(f"  {problem}")
        else:
            print(f"{name}: same trajectories and same spans as {HAND}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
