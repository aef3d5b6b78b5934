"""``python -m inline_agent``: play the tasks and write the rows (see launch.py)."""

from __future__ import annotations

import argparse
import asyncio

from inline_agent.engine import ScriptedEngine
from inline_agent.env import MAX_NUMBER, Task
from inline_agent.runner import Runner
from inline_agent.store import RolloutStore

PERSONAS = ("careful", "stubborn", "chatty")


def make_tasks(n: int) -> list[Task]:
    """Secrets spread over 1..32, the personas in turn: each way an episode ends shows up."""
    return [
        Task(f"guess-{i:03d}", 1 + (i * 7 + 3) % MAX_NUMBER, PERSONAS[i % len(PERSONAS)])
        for i in range(n)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="launch.py", description=__doc__)
    parser.add_argument("--episodes", type=int, default=9)
    parser.add_argument("--workers", type=int, default=3, help="concurrent episodes")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--db", default="rollouts.sqlite", help="SQLite file for the rows")
    args = parser.parse_args(argv)
    store = RolloutStore(args.db)
    try:
        runner = Runner(ScriptedEngine(), store, max_new_tokens=args.max_new_tokens)
        played = asyncio.run(runner.run(make_tasks(args.episodes), args.workers))
    finally:
        store.close()
    for task_id, steps, total in sorted(played):
        print(f"{task_id}: {steps} steps, return {total:+.1f}")
    print(f"{len(played)} episodes, rows in {args.db}")


if __name__ == "__main__":
    main()
