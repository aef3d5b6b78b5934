"""Drive two RayRunner actors on a local Ray; print what each played as JSON.

``python ray_driver.py`` runs unmodified (tests start it under ``opentelemetry-instrument``);
``python ray_driver.py code <targets>`` instruments the driver in code with ``<targets>`` and
gives Ray agenttrace's worker setup hook (the workers read AGENTTRACE_TARGETS from env_vars).
"""

from __future__ import annotations

import json
import os
import sys
import time

import ray

from instrumented_pkg.runner import Task

N_EPISODES = 4


def main(argv: list[str]) -> None:
    runtime_env: dict = {}
    if argv[:1] == ["code"]:
        from agenttrace.instrument.auto import AgentTraceInstrumentor

        AgentTraceInstrumentor().instrument(targets=[argv[1]])
        runtime_env = {
            "worker_process_setup_hook": "agenttrace.instrument.auto.instrument_from_environment",
            "env_vars": {"AGENTTRACE_TARGETS": os.environ.pop("WORKER_TARGETS")},
        }
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=runtime_env or None)
    try:
        from instrumented_pkg.ray_runner import RayRunner

        runners = [RayRunner.remote() for _ in range(2)]
        pids = ray.get([runner.pid.remote() for runner in runners])
        futures = [
            runners[i % 2].play_episode.remote(Task(f"task-{i}", i)) for i in range(N_EPISODES)
        ]
        played = [{**p.__dict__, "pid": pids[i % 2]} for i, p in enumerate(ray.get(futures))]
        del runners
    finally:
        ray.shutdown()
    wait_until_gone(pids)  # an actor process writes its last files while it exits
    print(json.dumps({"driver_pid": os.getpid(), "actor_pids": pids, "played": played}))


def wait_until_gone(pids: list[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        time.sleep(0.05)
    raise TimeoutError(f"actor processes {pids} still running after {timeout} s")


if __name__ == "__main__":
    main(sys.argv[1:])
