"""Context propagation by configuration (``propagate`` / ``AGENTTRACE_PROPAGATE``), and the
episode target's per-call options (``episode_id``, ``policy_version``, ...).

The user code in ``tests/propagated_pkg`` never imports agenttrace: it hands work to real
thread pools (``submit``, ``map``, ``loop.run_in_executor``), talks to a real aiohttp env server
in its own process on 127.0.0.1 with a real ``httpx.Client``, and is traced through targets and
settings only. Every propagation check is also run without the setting, to show it can fail.
"""

from __future__ import annotations

import asyncio
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import wrapt
from aiohttp import web
from conftest import read_run
from propagated_pkg.http_runner import HttpRunner, Run
from propagated_pkg.pool_runner import HANDOFFS, PoolRunner

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.config import ConfigError
from agenttrace.instrument.auto import AgentTraceInstrumentor
from agenttrace.instrument.propagate_patches import PropagationWrapper
from agenttrace.instrument.propagation import ContextThreadPoolExecutor, in_context
from agenttrace.instrument.targets import TargetError
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.records import SpanRecord

TESTS = Path(__file__).parent
ALL = "threads,httpx,aiohttp"
PATCHED = [
    (ThreadPoolExecutor, "submit"),
    (httpx.Client, "send"),
    (httpx.AsyncClient, "send"),
    (web.Application, "__init__"),
]

POOL = "propagated_pkg.pool_runner"
POOL_TARGETS = [
    f"{POOL}:PoolRunner.play=episode[episode_id=run_id,policy_version=self.policy_version]",
    f"{POOL}:PoolRunner.turn=timestep",
    f"{POOL}:act=agent.act",
]
CLIENT = "propagated_pkg.http_runner"
CLIENT_TARGETS = [
    f"{CLIENT}:HttpRunner.play=episode[episode_id=run.run_id,policy_version=self.policy_version]",
    f"{CLIENT}:HttpRunner.turn=timestep[extractor=mapping]",
]
SERVER = "propagated_pkg.env_server"
ENV = "propagated_pkg.count_env"
SERVER_TARGETS = f"{ENV}:CountEnv.reset=env.reset;{ENV}:CountEnv.step=env.step[extractor=mapping]"


@pytest.fixture
def instrumentor() -> Iterator[AgentTraceInstrumentor]:
    instrumentor = AgentTraceInstrumentor()
    try:
        yield instrumentor
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def by_name(records: list[SpanRecord], name: str) -> list[SpanRecord]:
    return [r for r in records if r.name == name]


def current_library_attributes() -> list[Any]:
    return [vars(owner)[attribute] for owner, attribute in PATCHED]


# --- threads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("handoff", HANDOFFS)
def test_pool_work_joins_its_step_only_with_propagate_threads(
    pipeline, instrumentor, handoff
) -> None:
    with ThreadPoolExecutor(max_workers=2) as executor:
        runner = PoolRunner(executor, policy_version="ckpt-7")
        instrumentor.instrument(targets=POOL_TARGETS, propagate=["threads"])
        assert runner.play("joined", 3, handoff) == [1, 3, 5]
        instrumentor.uninstrument()
        # Same executor, same worker threads: nothing of the first episode stayed in them.
        instrumentor.instrument(targets=POOL_TARGETS)
        assert runner.play("lost", 3, handoff) == [1, 3, 5]
    result = read_run(pipeline)
    records = list(read_otlp_json(pipeline.span_paths))
    by_id = {r.span_id: r for r in records}

    acts = by_name(records, sc.AGENT_ACT)
    joined = [r for r in acts if r.attributes.get(sc.EPISODE_ID) == "joined"]
    assert len(joined) == 3
    for record in joined:
        parent = by_id[record.parent_span_id]
        assert parent.name == sc.TIMESTEP
        assert parent.attributes[sc.EPISODE_ID] == "joined"
        assert record.trace_id == parent.trace_id
        assert record.attributes[sc.TIMESTEP_INDEX] == parent.attributes[sc.TIMESTEP_INDEX]
    lost = [r for r in acts if sc.EPISODE_ID not in r.attributes]
    assert len(lost) == 3
    assert all(r.parent_span_id == 0 for r in lost)

    live = {t.episode_id: t for t in result.live}
    assert sorted(live) == ["joined", "lost"]
    assert [(s.observation, s.action) for s in live["joined"].steps] == [(0, 1), (1, 3), (2, 5)]
    assert [s.action for s in live["lost"].steps] == [None, None, None]
    assert live["joined"].attributes[sc.POLICY_VERSION] == "ckpt-7"
    assert sorted(result.offline, key=lambda t: t.episode_id) == [live["joined"], live["lost"]]


def test_context_pools_and_bound_callables_are_not_bound_again(pipeline, instrumentor) -> None:
    """ContextThreadPoolExecutor (and submit(in_context(fn))) already bind: the patch passes
    them through, so the context they captured is the one the work runs in."""
    instrumentor.instrument(targets=[], propagate="threads")
    seen = []
    with at.episode(episode_id="outer"), ContextThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: seen.append(at.current_episode_id())).result()
        bound_earlier = in_context(lambda: seen.append(at.current_episode_id()))
        with at.episode(episode_id="inner"), ThreadPoolExecutor(max_workers=1) as plain:
            plain.submit(bound_earlier).result()
            plain.submit(lambda: seen.append(at.current_episode_id())).result()
    assert seen == ["outer", "outer", "inner"]


# --- HTTP: httpx client -> aiohttp env server in its own process -----------------------------


@dataclass
class EnvServer:
    url: str
    process: subprocess.Popen
    run_dir: Path

    def stop(self) -> None:
        """SIGTERM: the server exits normally and writes its span file."""
        self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]

    def records(self) -> list[SpanRecord]:
        return list(read_otlp_json(sorted(self.run_dir.glob("spans*.jsonl"))))


def server_environment(out: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
    env.update(
        PYTHONPATH=str(TESTS),
        AGENTTRACE_OUT=str(out),
        AGENTTRACE_RUN_NAME="server",
        AGENTTRACE_WRITER="thread",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        **settings,
    )
    return env


@pytest.fixture
def start_server(tmp_path) -> Iterator[Callable[..., EnvServer]]:
    """Starts ``python -m propagated_pkg.env_server``, under opentelemetry-instrument when
    asked; every server is killed at the end if a test left it running."""
    processes: list[subprocess.Popen] = []

    def start(instrumented: bool, **settings: str) -> EnvServer:
        command = [sys.executable, "-m", SERVER]
        if instrumented:
            found = shutil.which("opentelemetry-instrument")
            assert found, "opentelemetry-instrument is installed with opentelemetry-instrumentation"
            command = [found, *command]
        out = tmp_path / "server"
        process = subprocess.Popen(
            command,
            env=server_environment(out, **settings),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            ready = selector.select(timeout=60)
        line = process.stdout.readline() if ready else ""  # type: ignore[union-attr]
        if not line.startswith("PORT "):
            process.kill()
            pytest.fail(f"env server did not start: {line!r} {process.communicate()[1]}")
        return EnvServer(f"http://127.0.0.1:{int(line.split()[1])}", process, out / "server")

    try:
        yield start
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()


def test_http_hop_joined_by_configuration_alone(
    pipeline, instrumentor, start_server, monkeypatch
) -> None:
    """Targets on plain code and AGENTTRACE_PROPAGATE in both processes: the server's env
    spans join the client's episodes (the runner's own ids) and steps, over a thread pool and
    an HTTP hop; without the setting on the client they do not."""
    server = start_server(
        instrumented=True, AGENTTRACE_TARGETS=SERVER_TARGETS, AGENTTRACE_PROPAGATE=ALL
    )
    monkeypatch.setenv("AGENTTRACE_PROPAGATE", ALL)
    instrumentor.instrument(targets=CLIENT_TARGETS)
    runs = [Run("episode-a", 1), Run("episode-b", 2)]

    async def play_all(runner: HttpRunner) -> list[Any]:
        return list(await asyncio.gather(*(runner.play(run) for run in runs)))

    with ThreadPoolExecutor(max_workers=2) as executor:
        runner = HttpRunner(server.url, "ckpt-3", executor)
        try:
            played = asyncio.run(play_all(runner))
            instrumentor.uninstrument()
            monkeypatch.delenv("AGENTTRACE_PROPAGATE")
            instrumentor.instrument(targets=CLIENT_TARGETS)
            unjoined = asyncio.run(runner.play(Run("episode-c", 3)))
        finally:
            runner.close()
    server.stop()
    result = read_run(pipeline)
    client = list(read_otlp_json(pipeline.span_paths))
    served = server.records()

    timesteps = {
        (r.attributes[sc.EPISODE_ID], r.attributes[sc.TIMESTEP_INDEX]): r
        for r in by_name(client, sc.TIMESTEP)
    }
    steps = by_name(served, sc.ENV_STEP)
    assert len(steps) == sum(len(p.actions) for p in [*played, unjoined])
    for run in played:
        mine = [r for r in steps if r.attributes.get(sc.EPISODE_ID) == run.run_id]
        assert sorted(r.attributes[sc.TIMESTEP_INDEX] for r in mine) == list(
            range(len(run.actions))
        )
        for record in mine:
            timestep = timesteps[(run.run_id, record.attributes[sc.TIMESTEP_INDEX])]
            assert (record.trace_id, record.parent_span_id) == (
                timestep.trace_id,
                timestep.span_id,
            )
            assert record.parent_is_remote
        (reset,) = [
            r
            for r in by_name(served, sc.ENV_RESET)
            if r.attributes.get(sc.EPISODE_ID) == run.run_id
        ]
        assert reset.trace_id == timesteps[(run.run_id, 0)].trace_id
    # Without propagation the server's env steps miss the client's episode; its env then
    # delimits an episode of its own (docs/auto-instrumentation.md), in the server's files.
    lost = [r for r in steps if r.attributes.get(sc.EPISODE_ID) not in {p.run_id for p in played}]
    assert len(lost) == len(unjoined.actions)
    (own,) = by_name(served, sc.EPISODE)
    assert {r.attributes[sc.EPISODE_ID] for r in lost} == {own.attributes[sc.EPISODE_ID]}
    assert own.attributes[sc.EPISODE_ID] != unjoined.run_id

    live = {t.episode_id: t for t in result.live}
    assert sorted(live) == ["episode-a", "episode-b", "episode-c"]
    for run in [*played, unjoined]:
        trajectory = live[run.run_id]
        assert trajectory.attributes[sc.POLICY_VERSION] == "ckpt-3"
        assert [s.reward for s in trajectory.steps] == [r["reward"] for r in run.replies]
        assert all(s.action is None for s in trajectory.steps)  # the client records no action
    # Rebuilt from both span files: the server's env.step spans add what only it recorded.
    both = {
        t.episode_id: t
        for t in at.assemble(
            read_otlp_json([*pipeline.span_paths, *server.run_dir.glob("spans*.jsonl")])
        )
    }
    for run in played:
        assert [s.action for s in both[run.run_id].steps] == run.actions
        assert both[run.run_id].final_observation == run.replies[-1]["observation"]
    assert all(s.action is None for s in both["episode-c"].steps)


def test_httpx_adds_headers_inside_episodes_only_and_keeps_the_callers(
    pipeline, instrumentor, start_server
) -> None:
    server = start_server(instrumented=False)
    instrumentor.instrument(targets=[], propagate="httpx")
    theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    async def async_headers() -> dict[str, str]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            return (await client.get("/headers")).json()

    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            outside = client.get("/headers").json()
            with at.episode(episode_id="ep-h"):
                with at.timestep():
                    plain = client.get("/headers").json()
                    own = client.get(
                        "/headers", headers={"traceparent": theirs, "baggage": "tenant=blue"}
                    ).json()
                in_async = asyncio.run(async_headers())
    finally:
        server.stop()
    assert "traceparent" not in outside and "baggage" not in outside
    assert plain["baggage"] == "rl.episode.id=ep-h,rl.timestep.index=0"
    assert plain["traceparent"].startswith("00-")
    assert own["traceparent"] == theirs
    assert own["baggage"] == "tenant=blue,rl.episode.id=ep-h,rl.timestep.index=0"
    assert in_async["baggage"] == "rl.episode.id=ep-h"  # outside the step: no index
    assert "traceparent" in in_async


# --- patches: exact undo, bad settings, missing libraries -------------------------------------


def test_uninstrument_restores_the_patched_library_attributes(instrumentor) -> None:
    before = current_library_attributes()
    context_pool = dict(vars(ContextThreadPoolExecutor))
    for _ in range(2):  # instrument() works again after uninstrument()
        instrumentor.instrument(targets=[], propagate=ALL)
        now = current_library_attributes()
        assert all(isinstance(w, PropagationWrapper) for w in now)
        assert [w.__wrapped__ for w in now] == before
        instrumentor.uninstrument()
        assert all(a is b for a, b in zip(current_library_attributes(), before, strict=True))
    assert dict(vars(ContextThreadPoolExecutor)) == context_pool


def test_an_attribute_replaced_after_us_is_left_alone_and_ours_stops(
    pipeline, instrumentor, caplog
) -> None:
    original = vars(ThreadPoolExecutor)["submit"]
    instrumentor.instrument(targets=[], propagate="threads")
    ours = vars(ThreadPoolExecutor)["submit"]
    theirs = wrapt.FunctionWrapper(
        ours, lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs)
    )
    ThreadPoolExecutor.submit = theirs
    try:
        with caplog.at_level(logging.WARNING, logger="agenttrace"):
            instrumentor.uninstrument()
        assert vars(ThreadPoolExecutor)["submit"] is theirs
        assert "ThreadPoolExecutor.submit was replaced" in caplog.text
        with at.episode(), ThreadPoolExecutor(max_workers=1) as pool:
            assert pool.submit(at.current_episode_id).result() is None  # ours passes through
    finally:
        ThreadPoolExecutor.submit = original


def test_bad_propagate_values(instrumentor, monkeypatch, caplog) -> None:
    before = current_library_attributes()
    with pytest.raises(ConfigError, match=r"'thread'.*choose from threads, httpx, aiohttp"):
        instrumentor.instrument(targets=POOL_TARGETS, propagate="thread")
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert all(a is b for a, b in zip(current_library_attributes(), before, strict=True))
    assert not hasattr(vars(PoolRunner)["play"], "agenttrace_target")  # no target either

    monkeypatch.setenv("AGENTTRACE_PROPAGATE", "threads,requests")
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        instrumentor.instrument(targets=POOL_TARGETS)
    assert "AGENTTRACE_PROPAGATE='threads,requests'" in caplog.text
    assert "'requests'" in caplog.text
    assert all(a is b for a, b in zip(current_library_attributes(), before, strict=True))
    assert hasattr(vars(PoolRunner)["play"], "agenttrace_target")  # the targets still apply


def test_a_library_that_cannot_be_imported_is_named_and_the_others_apply(
    instrumentor, monkeypatch, caplog
) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # as if aiohttp were not installed
    monkeypatch.setitem(sys.modules, "aiohttp.web", None)
    monkeypatch.setenv("AGENTTRACE_PROPAGATE", "threads,aiohttp")
    with caplog.at_level(logging.ERROR, logger="agenttrace"):
        instrumentor.instrument(targets=[])
    assert "propagate=aiohttp needs aiohttp, which cannot be imported" in caplog.text
    assert isinstance(vars(ThreadPoolExecutor)["submit"], PropagationWrapper)
    assert not isinstance(vars(web.Application)["__init__"], PropagationWrapper)


# --- episode targets: the call's own id, policy version and names -----------------------------


def test_episode_options_come_from_each_calls_arguments(pipeline, instrumentor) -> None:
    instrumentor.instrument(
        targets=[
            f"{POOL}:PoolRunner.play=episode[episode_id=run_id,policy_version=self.policy_version,"
            "agent_name=handoff,env_name=self.executor._thread_name_prefix,task_id=run_id]",
            f"{POOL}:PoolRunner.turn=timestep",
        ]
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool-env") as executor:
        runner = PoolRunner(executor, policy_version="v1")
        runner.play("run-1", 1, "submit")
        runner.policy_version = "v2"
        runner.play("run-2", 2, "map")
        runner.play(None, 1, "submit")  # type: ignore[arg-type]  # no id: one is made up
    result = read_run(pipeline)
    live = result.live
    assert [t.episode_id for t in live[:2]] == ["run-1", "run-2"]
    assert live[2].episode_id not in ("run-1", "run-2", "None") and len(live[2].episode_id) == 32
    assert [t.attributes[sc.POLICY_VERSION] for t in live] == ["v1", "v2", "v2"]
    assert [t.attributes[sc.AGENT_NAME] for t in live] == ["submit", "map", "submit"]
    assert {t.attributes[sc.ENV_NAME] for t in live} == {"pool-env"}
    assert [t.task_id for t in live] == ["run-1", "run-2", None]
    assert [t.length for t in live] == [1, 2, 1]
    assert sorted(result.offline, key=lambda t: t.start_time) == live


def test_episode_options_are_checked(instrumentor) -> None:
    with pytest.raises(TargetError, match=r"role env\.step has no option 'episode_id'"):
        instrumentor.instrument(targets=[f"{POOL}:act=env.step[episode_id=observation]"])
    with pytest.raises(TargetError, match="the function has no argument 'run'"):
        instrumentor.instrument(targets=[f"{POOL}:PoolRunner.play=episode[episode_id=run.id]"])
