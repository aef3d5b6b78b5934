"""The command line shared by the side-by-side benchmarks (overhead.py, auto_overhead.py).

Both play ``--steps`` per variant split into ``--rounds`` short interleaved rounds, and take
each ratio within a round: this host's speed drifts by 10-20 % within a minute.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any


def parse_arguments(
    description: str, more: Callable[[argparse.ArgumentParser], None] | None = None
) -> tuple[argparse.Namespace, int]:
    """The parsed arguments and the number of steps per variant in one round; ``more`` adds
    a script's own options."""
    parser = argparse.ArgumentParser(description=description)
    if more is not None:
        more(parser)
    parser.add_argument("--steps", type=int, default=300_000, help="steps per variant, in all")
    parser.add_argument("--rounds", type=int, default=15, help="short interleaved rounds")
    parser.add_argument("--writer", choices=("auto", "process", "thread"), default="auto")
    args = parser.parse_args()
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    return args, -(-args.steps // args.rounds)


def measure(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Wall time of ``fn(*args)`` after a garbage collection, and its result."""
    gc.collect()
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result
