"""``python -m interactor``: start the LLM and env servers, play the tasks, stop everything.

Everything runs on 127.0.0.1 with ports the OS picks: the scripted OpenAI-compatible server
in a thread of this process, the env server (aiohttp) in a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import openai

from interactor.data_manager import DataManager
from interactor.env_client import EnvActor, EnvPool
from interactor.llm_server import ChatCompletionsServer
from interactor.rollout import EpisodeSummary, Interactor, Task

HERE = Path(__file__).resolve().parent.parent  # the folder holding the interactor package


def make_tasks(n: int) -> list[Task]:
    """Sums whose (a + b) % 4 walk through the scripted policy's four behaviours."""
    return [Task(f"sum-{i:03d}", 3 + i, 2 * i + 1) for i in range(n)]


@contextmanager
def env_server(n_actors: int, startup_timeout: float = 60.0) -> Iterator[str]:
    """The env server in a child process; yields its base URL, stops it gracefully."""
    process = subprocess.Popen(
        [sys.executable, "-m", "interactor.env_server", "--actors", str(n_actors)],
        cwd=HERE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], startup_timeout)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("LISTENING "):
            raise RuntimeError(f"env server did not start (said {line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # a normal exit: the server flushes its files
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        process.stdout.close()


async def play(args: argparse.Namespace, env_url: str, llm_url: str) -> list[EpisodeSummary]:
    data_manager = DataManager(args.db)
    pool = EnvPool([EnvActor(env_url, str(i)) for i in range(args.actors)])
    llm = openai.AsyncOpenAI(base_url=llm_url, api_key=args.api_key, max_retries=0, timeout=30)
    try:
        with ThreadPoolExecutor(args.workers, thread_name_prefix="interactor") as executor:
            interactor = Interactor(
                pool=pool,
                llm=llm,
                policy_version=args.policy_version,
                data_manager=data_manager,
                executor=executor,
                max_tokens=args.max_tokens,
            )
            return await interactor.run(make_tasks(args.episodes), args.workers)
    finally:
        await llm.close()
        pool.close()
        data_manager.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m interactor", description=__doc__)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--workers", type=int, default=3, help="concurrent episodes")
    parser.add_argument("--actors", type=int, default=2, help="env actors in the pool")
    parser.add_argument("--policy-version", default="ckpt-0007", help="weights the LLM serves")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--db", default="rollouts.sqlite", help="SQLite file for the rows")
    parser.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY", "sk-local-example-key")
    )
    args = parser.parse_args(argv)

    llm_server = ChatCompletionsServer(served_model=args.policy_version).start()
    try:
        with env_server(args.actors) as env_url:
            summaries = asyncio.run(play(args, env_url, llm_server.base_url))
    finally:
        llm_server.stop()
    for s in sorted(summaries, key=lambda s: s.task_id):
        end = "  (reply cut: finish_reason length)" if s.ended_by_length else ""
        print(f"{s.task_id}: {s.steps} steps, return {s.total_reward:+.1f}{end}")
    print(f"{len(summaries)} episodes, rows in {args.db}")


if __name__ == "__main__":
    main()
