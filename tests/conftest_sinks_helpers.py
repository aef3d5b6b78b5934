"""Hand-built trajectories for the sink tests: every value kind the codec must carry."""

from __future__ import annotations

import numpy as np

from agenttrace.trajectory.model import EpisodeError, LLMCall, Step, ToolCall, Trajectory

BASE_NS = 1_700_000_000_000_000_000


def make_trajectory(i: int = 0, *, steps: int = 3) -> Trajectory:
    """A rich episode: float32 and uint8 arrays, NaN/inf/None rewards, bytes, tuples,
    nested and non-string-key dicts, sets, numpy scalars, LLM and tool calls; every third
    episode errored, every fifth has no trace id, task id or end time."""
    rng = np.random.default_rng(i)
    rewards = [float("nan"), float("inf"), None, -float("inf"), 1.5, -0.25]
    step_list = []
    for k in range(steps):
        start = BASE_NS + i * 1_000_000_000 + k * 1_000_000
        step_list.append(
            Step(
                index=k,
                observation={
                    "vec": rng.standard_normal(4).astype(np.float32),
                    "image": rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8),
                    "text": f"obs {k} héllo ✓",
                },
                action=(k, "left", b"\x00\xff\x10"),
                reward=rewards[(i + k) % len(rewards)],
                terminated=k == steps - 1,
                truncated=False,
                discount=None if k % 2 else 0.99,
                info={
                    "lives": np.int64(3 - k),
                    "nested": {"a": {"b": [1, 2.5, None, True]}},
                    7: "int key",
                    "tags": frozenset({"x", "y"}),
                    "$looks_like_tag": 1,
                },
                start_time=start,
                end_time=start + 500_000,
                llm_calls=[
                    LLMCall(
                        name="chat gpt-test",
                        model="gpt-test",
                        provider="openai",
                        input_messages=[
                            {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                            {"role": "user", "parts": [{"type": "text", "content": f"step {k}"}]},
                        ],
                        output_messages=[
                            {
                                "role": "assistant",
                                "parts": [{"type": "text", "content": "go left"}],
                                "finish_reason": "stop",
                            }
                        ],
                        finish_reasons=["stop"],
                        input_tokens=12,
                        output_tokens=3,
                        start_time=start + 1000,
                        end_time=start + 2000,
                        attributes={"gen_ai.request.temperature": 0.2},
                    )
                ],
                tool_calls=[
                    ToolCall(
                        name="search",
                        call_id=f"call-{k}",
                        arguments={"q": "where", "limit": 3},
                        result=("ok", 1, None),
                        start_time=start + 3000,
                        end_time=start + 4000,
                    )
                ],
            )
        )
    errored = i % 3 == 2
    bare = i % 5 == 4
    return Trajectory(
        episode_id=f"ep-{i:04d}",
        trace_id=None if bare else f"{i + 1:032x}",
        task_id=None if bare else f"task/{i % 2}",
        status="errored" if errored else "completed",
        error=EpisodeError("ValueError", f"boom {i}", "Traceback...\nValueError")
        if errored
        else None,
        start_time=BASE_NS + i * 1_000_000_000,
        end_time=None if bare else BASE_NS + i * 1_000_000_000 + 900_000_000,
        return_=float("nan") if i % 4 == 3 else float(i) / 2,
        length=steps,
        attributes={"rl.env.name": "Grid-v0", "seed": i, "note": "unicode ✓ \u2028 line sep"},
        steps=step_list,
        final_observation=np.arange(6, dtype=np.float32).reshape(2, 3) * i,
        reset_info={"seed": i, "options": None},
        missing_steps=[steps + 1] if i % 6 == 5 else [],
    )


def make_batch(n: int, *, steps: int = 3) -> list[Trajectory]:
    """``n`` different rich trajectories."""
    return [make_trajectory(i, steps=steps) for i in range(n)]


class ErrorLog:
    """An ``on_error`` that keeps the errors, so tests can assert on each one."""

    def __init__(self) -> None:
        self.errors: list = []

    def __call__(self, error) -> None:
        self.errors.append(error)
