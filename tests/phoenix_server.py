"""A real Phoenix server on loopback for the Phoenix reader's tests, and a run sent to it.

:class:`PhoenixServer` starts ``python -m phoenix.server.main serve`` bound to 127.0.0.1 on
free HTTP and gRPC ports, with its database in a temporary working folder, telemetry and
every fetch from the internet switched off, and stops it (killed if it does not stop in time).

Run as a script (``python phoenix_server.py demo OUT``), this file plays the built-in demo plus
one episode that fails, with agenttrace's OTLP span export on: the OTLP endpoint and the
resource attribute naming the Phoenix project come from the environment the test sets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from server_process import log_tail, wait_ready

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def phoenix_time_ns(ns: int) -> int:
    """The time Phoenix stores for ``ns``, in ns: ``phoenix.trace.otel._decode_unix_nano``
    (``datetime.fromtimestamp(ns / 1e9)``, microseconds, rounded through a float)."""
    moment = datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


class PhoenixError(RuntimeError):
    """Phoenix did not start; the message holds the end of its output."""


class PhoenixServer:
    """One Phoenix server process; ``url`` is its HTTP base (REST API and OTLP/HTTP)."""

    def __init__(self, working_dir: Path, *, start_timeout: float = 120.0) -> None:
        self.working_dir = Path(working_dir)
        self.working_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = self.working_dir / "phoenix.out"
        self.stderr_path = self.working_dir / "phoenix.err"
        for attempt in range(3):  # a free port may be taken before Phoenix binds it
            self._start()
            try:
                self._wait_ready(start_timeout)
                return
            except PhoenixError:
                self.stop()
                output = self.output().lower()
                if attempt == 2 or not ("address already in use" in output or "bind" in output):
                    raise
            except BaseException:
                self.stop()
                raise

    def _start(self) -> None:
        self.port, self.grpc_port = free_port(), free_port()
        while self.grpc_port == self.port:
            self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.otlp_traces_endpoint = f"{self.url}/v1/traces"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_WORKING_DIR=str(self.working_dir),
            PHOENIX_TELEMETRY_ENABLED="false",
            # No docs MCP client, sandbox downloads or web tools: nothing leaves loopback.
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
            PHOENIX_DISABLE_AGENT_ASSISTANT="true",
            PHOENIX_ALLOWED_SANDBOX_PROVIDERS="NONE",
            NO_PROXY="127.0.0.1,localhost",
        )
        self._stdout = open(self.stdout_path, "wb")  # noqa: SIM115 - closed in stop()
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"],
            cwd=self.working_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=self._stderr,
        )

    def _wait_ready(self, timeout: float) -> None:
        wait_ready(
            self.process,
            f"{self.url}/readyz",
            timeout,
            name="Phoenix",
            output=self.output,
            error=PhoenixError,
        )

    def output(self, limit: int = 6000) -> str:
        """The end of the server's stderr and stdout, for failure messages."""
        return log_tail((self.stderr_path, self.stdout_path), limit)

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self._stdout.close()
        self._stderr.close()


# --- the run sent to Phoenix (this file as a script) ----------------------------------------


def send_run(
    server: PhoenixServer,
    project: str,
    out: Path,
    *,
    episodes: int = 3,
    seed: int = 1,
    play: str = "demo",
) -> Path:
    """Run :func:`_play` (``play="vector"``: :func:`_play_vector`) in a fresh process
    exporting to ``server``; the run's folder."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.update(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=server.otlp_traces_endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])),
    )
    command = [sys.executable, __file__, play, str(out), str(episodes), str(seed)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def _play(out: str, episodes: int, seed: int) -> None:
    import asyncio

    import agenttrace as at
    from agenttrace.cli import demo

    runtime = at.configure(
        out=out, run_name="run", sinks=["jsonl"], spans=["file", "otlp"], service_name="phx-test"
    )
    asyncio.run(demo.run_episodes(episodes, episodes, seed))
    try:  # one episode that fails: exception event, ERROR status with a message
        with at.episode(task_id="fails", env_name="edge/Fails-v0", seed=7):
            with at.env_reset() as reset:
                reset.record(observation={"x": 1}, info={"note": "reset"})
            with at.timestep():
                with at.agent_act() as act:
                    act.record(observation={"x": 1}, action=[0.5, -1.0])
                with at.env_step() as step:
                    step.record(observation={"x": 2}, reward=1.0, terminated=False, truncated=False)
            raise RuntimeError("the env server went away")
    except RuntimeError:
        pass
    ok = runtime.force_flush()
    runtime.shutdown()
    at.shutdown()
    stats = runtime.stats()
    if not ok or stats["spans_dropped"] or stats["spans_export_failed"]:
        raise SystemExit(f"spans were lost: {stats}")
    print(runtime.run_dir)


def _play_vector(out: str, vector_steps: int, seed: int) -> None:
    """Three CartPole sub-environments of a TracedVectorEnv: env.vector_step spans."""
    import gymnasium as gym
    import numpy as np

    import agenttrace as at
    from agenttrace.instrument.vector import TracedVectorEnv

    runtime = at.configure(
        out=out, run_name="vector", sinks=["jsonl"], spans=["file", "otlp"], service_name="phx"
    )
    envs = TracedVectorEnv(
        gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=12)
    )
    observations, _ = envs.reset(seed=seed)
    for _ in range(vector_steps):
        observations, *_ = envs.step((observations[:, 2] > 0).astype(np.int64))
    envs.close()
    ok = runtime.force_flush()
    runtime.shutdown()
    at.shutdown()
    if not ok or runtime.stats()["spans_dropped"]:
        raise SystemExit(f"spans were lost: {runtime.stats()}")
    print(runtime.run_dir)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] not in ("demo", "vector"):
        raise SystemExit("usage: phoenix_server.py demo|vector OUT EPISODES SEED")
    play = _play if sys.argv[1] == "demo" else _play_vector
    play(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
