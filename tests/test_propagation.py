"""Context propagation across threads, executors, an HTTP hop and Ray actor processes.

Every hop is real: ``concurrent.futures`` thread pools and ``loop.run_in_executor``; an aiohttp
env server in its own process (its own agenttrace pipeline and span file) on 127.0.0.1,
reached with httpx; a local Ray cluster whose actor processes run their own pipelines. The
checks are the ones that matter downstream: a span made across the hop has the caller's
trace id and parent, the caller's ``rl.episode.id`` and the right ``rl.timestep.index``, and
the rebuilt trajectory holds what the far side recorded. Each hop is also run without the
helper, to show the checks can fail.

Run as a script (``python test_propagation.py serve OUT``) this file is the env server.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
import pytest
from conftest import read_run
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument import propagation
from agenttrace.instrument.propagation import (
    ContextThreadPoolExecutor,
    accepts_trace_context,
    in_context,
    inject,
    inject_into_httpx,
    remote_context,
    run_in_executor,
)
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.records import SpanRecord

MAX_STEPS = 6  # CartPole time limit in every test: short episodes, always the same length
SERVER_RUN_NAME = "env-server"


def policy(observation: Any) -> int:
    """Deterministic: push towards the side the pole leans to."""
    return int(observation[2] > 0)


@dataclass
class EpisodeRun:
    """What one episode produced, recorded by the test itself (not by agenttrace)."""

    episode_id: str
    seed: int
    steps: list[tuple[Any, int, float, bool, bool]] = field(default_factory=list)
    final_observation: Any = None


def replay(seed: int) -> EpisodeRun:
    """The same seeded CartPole episode, played here without any tracing: the reference."""
    env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
    run = EpisodeRun("", seed)
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        action = policy(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        run.steps.append((obs.copy(), action, float(reward), terminated, truncated))
        obs, done = next_obs, terminated or truncated
    run.final_observation = obs.copy()
    return run


def check_steps(trajectory: at.Trajectory, run: EpisodeRun) -> None:
    """Observations, actions, rewards and termination equal the reference, step by step."""
    assert trajectory.missing_steps == []
    assert [s.index for s in trajectory.steps] == list(range(len(run.steps)))
    for step, (obs, action, reward, terminated, truncated) in zip(
        trajectory.steps, run.steps, strict=True
    ):
        np.testing.assert_array_equal(np.asarray(step.observation, dtype=obs.dtype), obs)
        assert step.action == action
        assert step.reward == reward
        assert (step.terminated, step.truncated) == (terminated, truncated)


def by_name(records: list[SpanRecord], name: str) -> list[SpanRecord]:
    return [r for r in records if r.name == name]


# --- threads and executors ------------------------------------------------------------------------

# How the agent's act and the env's step are handed to another thread: callables taking
# (work, *args) and returning the result.
Dispatch = Callable[..., Any]


def play_in_workers(env: gym.Env, seed: int, dispatch: Dispatch) -> EpisodeRun:
    """An episode whose agent.act and env.step spans are made in worker threads."""

    def act(obs: Any) -> int:
        with at.agent_act() as span:
            action = policy(obs)
            span.record(observation=obs, action=action)
        return action

    def step(action: int) -> tuple:
        with at.env_step() as span:
            return span.record_result(env.step(action))

    with at.episode(task_id="workers", env=env, seed=seed) as ep:
        run = EpisodeRun(ep.id, seed)
        with at.env_reset() as reset:
            obs, _ = reset.record_result(env.reset(seed=seed))
        done = False
        while not done:
            with at.timestep():
                action = dispatch(act, obs)
                next_obs, reward, terminated, truncated, _ = dispatch(step, action)
            run.steps.append((obs.copy(), action, float(reward), terminated, truncated))
            obs, done = next_obs, terminated or truncated
    run.final_observation = obs.copy()
    return run


def dispatch_context_pool(work: Callable, *args: Any) -> Any:
    with ContextThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(work, *args).result()


def dispatch_context_pool_map(work: Callable, *args: Any) -> Any:
    with ContextThreadPoolExecutor(max_workers=1) as pool:
        return next(pool.map(work, *([a] for a in args)))


def dispatch_in_context(work: Callable, *args: Any) -> Any:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(in_context(work), *args).result()


def dispatch_thread(work: Callable, *args: Any) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=in_context(lambda: result.append(work(*args))))
    thread.start()
    thread.join()
    return result[0]


def dispatch_plain_pool(work: Callable, *args: Any) -> Any:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(work, *args).result()


def _run_on_loop(use_helper: bool) -> Dispatch:
    """Dispatch through ``run_in_executor`` on a loop running in this thread."""

    def dispatch(work: Callable, *args: Any) -> Any:
        async def hop() -> Any:
            loop = asyncio.get_running_loop()
            with ThreadPoolExecutor(max_workers=1) as pool:
                if use_helper:
                    return await run_in_executor(loop, pool, work, *args)
                return await loop.run_in_executor(pool, work, *args)

        # asyncio.run copies the current context into its task, as any asyncio code would.
        return asyncio.run(hop())

    return dispatch


WITH_HELPER = [
    pytest.param(dispatch_context_pool, id="ContextThreadPoolExecutor.submit"),
    pytest.param(dispatch_context_pool_map, id="ContextThreadPoolExecutor.map"),
    pytest.param(dispatch_in_context, id="ThreadPoolExecutor+in_context"),
    pytest.param(dispatch_thread, id="Thread+in_context"),
    pytest.param(_run_on_loop(use_helper=True), id="run_in_executor"),
]
WITHOUT_HELPER = [
    pytest.param(dispatch_plain_pool, id="ThreadPoolExecutor"),
    pytest.param(_run_on_loop(use_helper=False), id="loop.run_in_executor"),
]


@pytest.mark.parametrize("dispatch", WITH_HELPER)
def test_worker_spans_join_their_episode_and_step(pipeline, dispatch: Dispatch) -> None:
    env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
    runs = [play_in_workers(env, seed, dispatch) for seed in (1, 2)]
    result = read_run(pipeline)
    records = list(read_otlp_json(pipeline.span_paths))
    by_id = {r.span_id: r for r in records}

    for name in (sc.AGENT_ACT, sc.ENV_STEP):
        made_in_workers = by_name(records, name)
        assert len(made_in_workers) == sum(len(run.steps) for run in runs)
        for record in made_in_workers:
            parent = by_id[record.parent_span_id]  # KeyError: the span lost its parent
            assert parent.name == sc.TIMESTEP
            assert record.trace_id == parent.trace_id
            assert record.attributes[sc.EPISODE_ID] == parent.attributes[sc.EPISODE_ID]
            assert record.attributes[sc.TIMESTEP_INDEX] == parent.attributes[sc.TIMESTEP_INDEX]

    for trajectories in (result.live, result.offline):
        assert [t.episode_id for t in trajectories] == [run.episode_id for run in runs]
        for trajectory, run in zip(trajectories, runs, strict=True):
            reference = replay(run.seed)
            check_steps(trajectory, reference)
            np.testing.assert_array_equal(trajectory.final_observation, reference.final_observation)
            assert trajectory.return_ == sum(step[2] for step in reference.steps)


@pytest.mark.parametrize("dispatch", WITHOUT_HELPER)
def test_without_the_helper_worker_spans_are_lost(pipeline, dispatch: Dispatch) -> None:
    env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
    run = play_in_workers(env, 1, dispatch)
    result = read_run(pipeline)
    records = list(read_otlp_json(pipeline.span_paths))
    (episode,) = by_name(records, sc.EPISODE)

    made_in_workers = by_name(records, sc.AGENT_ACT) + by_name(records, sc.ENV_STEP)
    assert len(made_in_workers) == 2 * len(run.steps)
    for record in made_in_workers:
        assert record.parent_span_id == 0
        assert record.trace_id != episode.trace_id
        assert sc.EPISODE_ID not in record.attributes
        assert record.attributes[sc.TIMESTEP_INDEX] == 0  # every step looks like step 0

    (trajectory,) = result.live
    assert trajectory.episode_id == run.episode_id
    assert len(trajectory.steps) == len(run.steps)
    assert all(s.reward is None and s.action is None for s in trajectory.steps)


def test_in_context_runs_each_call_in_its_own_copy() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    marker.set("submitter")

    def read_then_change(tag: str) -> str:
        seen = marker.get()
        marker.set(tag)
        return seen

    bound = in_context(read_then_change)
    marker.set("changed after binding")
    with ThreadPoolExecutor(max_workers=4) as pool:
        seen = list(pool.map(bound, [f"call {i}" for i in range(16)]))
    assert seen == ["submitter"] * 16  # the bound context; no call sees another's change
    assert marker.get() == "changed after binding"
    assert bound.__name__ == "read_then_change"


async def test_in_context_rejects_what_it_cannot_bind() -> None:
    async def coroutine_function() -> None:
        pass

    with pytest.raises(TypeError, match="async functions"):
        in_context(coroutine_function)
    with pytest.raises(TypeError, match="needs a callable"):
        in_context(42)  # type: ignore[arg-type]
    # run_in_executor without a loop uses the running one.
    assert await run_in_executor(None, None, lambda x: x + 1, 41) == 42


# --- inject / extract -----------------------------------------------------------------------------


def test_inject_carries_trace_episode_and_step(pipeline) -> None:
    assert inject() == {}  # outside any span: nothing to carry
    user_bag = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        with at.episode() as ep:
            outside_step = inject()
            with at.timestep(), at.agent_act() as act:
                headers = {"Content-Type": "application/json"}
                assert inject(headers) is headers
                span_context = act.span.get_span_context()
    finally:
        otel_context.detach(user_bag)

    assert sc.TIMESTEP_INDEX not in outside_step["baggage"]
    assert headers["Content-Type"] == "application/json"
    assert headers["traceparent"] == (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{int(span_context.trace_flags):02x}"
    )
    assert _baggage_of(headers) == {"tenant": "acme", sc.EPISODE_ID: ep.id, sc.TIMESTEP_INDEX: "0"}


def test_remote_context_joins_the_callers_episode_and_step(pipeline) -> None:
    seen: dict[str, Any] = {}

    def handle_request(headers: dict[str, str]) -> None:
        """A server thread: its own empty context, like a request handler elsewhere."""
        seen["before"] = at.current_episode_id()
        with remote_context(headers) as ctx:
            seen["inside"] = at.current_episode_id()
            seen["remote parent"] = trace.get_current_span(ctx).get_span_context()
            with at.env_step() as remote_step:
                remote_step.record(reward=2.5, terminated=True)
            seen["passed on"] = inject()["baggage"]
        seen["after"] = at.current_episode_id()

    with at.episode() as ep:
        at.timestep().start().end()  # step 0, nothing recorded
        with at.timestep() as step:
            # Header names in another case, as some servers and proxies rewrite them.
            headers = {name.title(): value for name, value in inject().items()}
            server = threading.Thread(target=handle_request, args=(headers,))
            server.start()
            server.join()
    caller = step.span.get_span_context()

    assert seen["before"] is None and seen["after"] is None
    assert seen["inside"] == ep.id
    remote_parent = seen["remote parent"]
    assert (remote_parent.trace_id, remote_parent.span_id) == (caller.trace_id, caller.span_id)
    assert seen["passed on"] == f"{sc.EPISODE_ID}={ep.id},{sc.TIMESTEP_INDEX}=1"

    result = read_run(pipeline)
    (record,) = by_name(list(read_otlp_json(pipeline.span_paths)), sc.ENV_STEP)
    assert (record.trace_id, record.parent_span_id) == (caller.trace_id, caller.span_id)
    assert record.parent_is_remote
    assert record.attributes[sc.EPISODE_ID] == ep.id
    assert record.attributes[sc.TIMESTEP_INDEX] == 1
    # Same process as the episode span: the live trajectory takes the remote step in.
    (trajectory,) = result.live
    assert [(s.index, s.reward, s.terminated) for s in trajectory.steps] == [
        (0, None, False),
        (1, 2.5, True),
    ]


def test_remote_context_without_headers_changes_nothing(pipeline) -> None:
    class Boom(Exception):
        pass

    boom = Boom("user error")
    with at.episode() as ep:
        for headers in (None, {}, {"traceparent": "not a traceparent"}):
            with remote_context(headers):
                assert at.current_episode_id() == ep.id
        with pytest.raises(Boom) as raised, remote_context(inject()):
            raise boom
        assert raised.value is boom  # the user's exception, unchanged
    with pytest.raises(TypeError, match="mutable mapping"):
        inject(["traceparent"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapping of headers"):
        propagation.extract("traceparent")  # type: ignore[arg-type]


def test_an_episode_inside_a_remote_context_sends_its_own_ids(pipeline) -> None:
    with at.episode() as upstream, at.timestep(index=3):
        received = inject()
    with remote_context(received), at.episode() as local:
        at_episode_level = _baggage_of(inject())
        with at.timestep():
            in_step = _baggage_of(inject())
    assert at_episode_level == {sc.EPISODE_ID: local.id}
    assert in_step == {sc.EPISODE_ID: local.id, sc.TIMESTEP_INDEX: "0"}
    assert local.id != upstream.id


def _baggage_of(headers: dict[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in headers["baggage"].split(","))


def test_a_remote_parent_outside_episodes_does_not_join_the_local_one(pipeline) -> None:
    tracer = trace.get_tracer("other-service", tracer_provider=pipeline.provider)
    with tracer.start_as_current_span("request"):
        headers = inject()
    assert "baggage" not in headers
    with at.episode():
        with remote_context(headers):
            assert at.current_episode_id() is None


# --- HTTP: an aiohttp env server in its own process -----------------------------------------------


def serve(out: str) -> None:
    """The env server: one CartPole per session, env.reset/env.step spans made here."""
    from aiohttp import web

    runtime = at.configure(out=out, run_name=SERVER_RUN_NAME, spans=["file"], writer="thread")
    envs: dict[str, gym.Env] = {}

    async def reset(request: web.Request) -> web.Response:
        body = await request.json()
        env = envs[body["session"]] = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
        with at.env_reset() as span:
            obs, _ = span.record_result(env.reset(seed=body["seed"]))
        return web.json_response({"observation": obs.tolist()})

    async def step(request: web.Request) -> web.Response:
        body = await request.json()
        with at.env_step() as span:
            span.record(action=body["action"])
            obs, reward, terminated, truncated, _ = envs[body["session"]].step(body["action"])
            info = {"server_pid": os.getpid()}
            span.record(
                observation=obs,
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                info=info,
            )
        reply = {
            "observation": obs.tolist(),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
        }
        return web.json_response(reply)

    async def main() -> None:
        app = web.Application(middlewares=[propagation.aiohttp_middleware])
        app.add_routes([web.post("/reset", reset), web.post("/step", step)])
        runner = web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("PORT", sock.getsockname()[1], flush=True)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(main())
    runtime.shutdown()
    print("STATS", json.dumps(runtime.stats()), flush=True)


@dataclass
class EnvServer:
    url: str
    run_dir: Path
    process: subprocess.Popen

    def stop(self) -> dict:
        """Stop the server (it flushes its files); its stats."""
        self.process.send_signal(signal.SIGTERM)
        stdout, stderr = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, stderr
        stats = [line for line in stdout.splitlines() if line.startswith("STATS ")]
        assert stats, f"no stats from the env server; stderr:\n{stderr}"
        return json.loads(stats[-1].split(" ", 1)[1])

    @property
    def span_files(self) -> str:
        return str(self.run_dir / "spans*.jsonl")

    def records(self) -> list[SpanRecord]:
        return list(read_otlp_json(self.span_files))


@pytest.fixture
def env_server(tmp_path) -> Iterator[EnvServer]:
    out = tmp_path / "server"
    process = subprocess.Popen(
        [sys.executable, __file__, "serve", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            ready = selector.select(timeout=60)
        line = process.stdout.readline() if ready else ""  # type: ignore[union-attr]
        if not line.startswith("PORT "):
            process.kill()
            pytest.fail(f"env server did not start: {line!r} {process.communicate()[1]}")
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        yield EnvServer(url, out / SERVER_RUN_NAME, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@dataclass
class HttpEpisode:
    run: EpisodeRun
    step_span_ids: dict[int, int] = field(default_factory=dict)  # index -> client timestep span
    trace_id: int = 0


def start_http_episode(ep: Any, seed: int) -> HttpEpisode:
    return HttpEpisode(EpisodeRun(ep.id, seed), trace_id=ep.span.get_span_context().trace_id)


def finish_http_step(episode: HttpEpisode, step: Any, obs: Any, action: int, reply: dict) -> bool:
    """Record the server's reply on the client's timestep and in the test's own record.

    The outcome goes on the timestep too because the episode's return and status are
    computed here, where the episode span runs.
    """
    outcome = (reply["reward"], reply["terminated"], reply["truncated"])
    step.record(reward=outcome[0], terminated=outcome[1], truncated=outcome[2])
    episode.step_span_ids[step.index] = step.span.get_span_context().span_id
    episode.run.steps.append((np.asarray(obs), action, *outcome))
    episode.run.final_observation = np.asarray(reply["observation"])
    return outcome[1] or outcome[2]


def play_over_http(client: httpx.Client, seed: int) -> HttpEpisode:
    """The agent side: timestep and agent.act spans here, env.reset/env.step on the server."""
    with at.episode(task_id="http") as ep:
        episode = start_http_episode(ep, seed)
        obs = _post(client, "/reset", {"session": ep.id, "seed": seed})["observation"]
        done = False
        while not done:
            with at.timestep() as step:
                with at.agent_act() as act:
                    action = policy(obs)
                    act.record(observation=obs, action=action)
                reply = _post(client, "/step", {"session": ep.id, "action": action})
                done = finish_http_step(episode, step, obs, action, reply)
            obs = reply["observation"]
    return episode


async def play_over_http_async(client: httpx.AsyncClient, seed: int) -> HttpEpisode:
    """``play_over_http`` with an async client, in an asyncio task."""
    with at.episode(task_id="http") as ep:
        episode = start_http_episode(ep, seed)
        obs = (await _post_async(client, "/reset", {"session": ep.id, "seed": seed}))["observation"]
        done = False
        while not done:
            with at.timestep() as step:
                with at.agent_act() as act:
                    action = policy(obs)
                    act.record(observation=obs, action=action)
                reply = await _post_async(client, "/step", {"session": ep.id, "action": action})
                done = finish_http_step(episode, step, obs, action, reply)
            obs = reply["observation"]
    return episode


def _post(client: httpx.Client, path: str, body: dict) -> dict:
    response = client.post(path, json=body)
    response.raise_for_status()
    return response.json()


async def _post_async(client: httpx.AsyncClient, path: str, body: dict) -> dict:
    response = await client.post(path, json=body)
    response.raise_for_status()
    return response.json()


def test_http_hop_joins_server_spans_to_the_client_episode(pipeline, env_server) -> None:
    with httpx.Client(base_url=env_server.url, timeout=30) as client:
        inject_into_httpx(client)
        inject_into_httpx(client)  # idempotent
        episodes = [play_over_http(client, seed) for seed in (3, 4)]
    server_stats = env_server.stop()
    client_result = read_run(pipeline)

    server_records = env_server.records()
    server_steps = by_name(server_records, sc.ENV_STEP)
    assert len(server_steps) == sum(len(e.run.steps) for e in episodes)
    for episode in episodes:
        mine = [r for r in server_steps if r.attributes[sc.EPISODE_ID] == episode.run.episode_id]
        assert sorted(r.attributes[sc.TIMESTEP_INDEX] for r in mine) == sorted(
            episode.step_span_ids
        )
        for record in mine:
            assert record.trace_id == episode.trace_id
            index = record.attributes[sc.TIMESTEP_INDEX]
            assert record.parent_span_id == episode.step_span_ids[index]
            assert record.parent_is_remote
        (reset,) = [
            r
            for r in by_name(server_records, sc.ENV_RESET)
            if r.attributes[sc.EPISODE_ID] == episode.run.episode_id
        ]
        assert reset.trace_id == episode.trace_id
    # The server runs no episode span: it writes spans only, and counts them as remote.
    assert by_name(server_records, sc.EPISODE) == []
    assert server_stats["episodes_written"] == 0
    assert server_stats["spans_of_remote_episodes"] == len(server_records)

    # Rebuilt from both processes' span files: one trajectory per episode, holding what the
    # server recorded (returned observations, info) in its steps.
    both = at.assemble(read_otlp_json([*pipeline.span_paths, env_server.span_files]))
    assert [t.episode_id for t in both] == [e.run.episode_id for e in episodes]
    for trajectory, episode in zip(both, episodes, strict=True):
        reference = replay(episode.run.seed)
        check_steps(trajectory, reference)
        check_steps(trajectory, episode.run)
        terminated = reference.steps[-1][3]
        assert trajectory.status == (sc.STATUS_COMPLETED if terminated else sc.STATUS_TRUNCATED)
        assert trajectory.trace_id == f"{episode.trace_id:032x}"
        assert all(s.info == {"server_pid": env_server.process.pid} for s in trajectory.steps)
        np.testing.assert_array_equal(trajectory.final_observation, reference.final_observation)
        assert trajectory.reset_info == {}
    # The live trajectory is written by the client, where the episode span runs: right
    # steps and rewards (recorded on the client's timesteps), but no server-side content.
    assert [t.episode_id for t in client_result.live] == [e.run.episode_id for e in episodes]
    for live, episode in zip(client_result.live, episodes, strict=True):
        check_steps(live, episode.run)
        assert all(s.info is None for s in live.steps)
        assert live.final_observation is None


async def test_http_hop_with_async_client_and_without_injection(pipeline, env_server) -> None:
    async with (
        httpx.AsyncClient(base_url=env_server.url, timeout=30) as injecting,
        httpx.AsyncClient(base_url=env_server.url, timeout=30) as plain,
    ):
        inject_into_httpx(injecting)
        joined = await play_over_http_async(injecting, 5)
        not_joined = await play_over_http_async(plain, 6)
    env_server.stop()
    read_run(pipeline)

    server_steps = by_name(env_server.records(), sc.ENV_STEP)
    assert len(server_steps) == len(joined.run.steps) + len(not_joined.run.steps)
    with_episode = [r for r in server_steps if sc.EPISODE_ID in r.attributes]
    assert {r.attributes[sc.EPISODE_ID] for r in with_episode} == {joined.run.episode_id}
    assert {r.trace_id for r in with_episode} == {joined.trace_id}
    assert {r.parent_span_id for r in with_episode} == set(joined.step_span_ids.values())
    without_episode = [r for r in server_steps if sc.EPISODE_ID not in r.attributes]
    assert len(without_episode) == len(not_joined.run.steps)
    for record in without_episode:  # sent without injection: each a trace of its own
        assert record.trace_id not in (joined.trace_id, not_joined.trace_id)
        assert record.parent_span_id == 0

    both = at.assemble(read_otlp_json([*pipeline.span_paths, env_server.span_files]))
    infos = {t.episode_id: [s.info for s in t.steps] for t in both}
    assert all(infos[joined.run.episode_id])
    assert not any(infos[not_joined.run.episode_id])


def test_inject_into_httpx_rejects_other_clients() -> None:
    with pytest.raises(TypeError, match=r"httpx\.Client or httpx\.AsyncClient"):
        inject_into_httpx(object())


# --- Ray: episodes in actor processes, parented to the driver's span ------------------------------


class EpisodeRunner:
    """A Ray actor body (made remote in the tests): plays traced episodes in its process."""

    def __init__(self, out: str | None = None, run_name: str | None = None) -> None:
        if out is not None:
            at.configure(out=out, run_name=run_name, sinks=["jsonl"], spans=["file"])
        # else agenttrace configures itself from AGENTTRACE_* on the first span

    @accepts_trace_context
    def play(self, seed: int) -> str:
        env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
        with at.episode(task_id="ray", env=env, seed=seed) as ep:
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset(seed=seed))
            done = False
            while not done:
                with at.timestep():
                    with at.agent_act() as act:
                        action = policy(obs)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        obs, _, terminated, truncated, _ = step.record_result(env.step(action))
                done = terminated or truncated
        return ep.id

    def finish(self) -> dict[str, Any]:
        """Shut this process's pipeline down; where it wrote."""
        runtime = at.get_default()
        at.shutdown()
        return {
            "pid": os.getpid(),
            "run_dir": str(runtime.run_dir),
            "trajectories": [str(p) for p in runtime.trajectory_paths],
            "spans": [str(p) for p in runtime.span_paths],
        }


@pytest.fixture(scope="module")
def ray_module() -> Iterator[Any]:
    """One local Ray cluster for this module, started without AGENTTRACE_* settings."""
    import ray

    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):
            if name.startswith("AGENTTRACE_"):
                env.delenv(name)
        # Ray's workers inherit this environment; they import this module for the actor.
        env.setenv("PYTHONPATH", str(Path(__file__).parent), prepend=os.pathsep)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_ray_actor_episodes_are_children_of_the_driver_span(ray_module, tmp_path) -> None:
    ray = ray_module
    runner = ray.remote(EpisodeRunner)
    actors = [
        # configured in code ...
        runner.remote(str(tmp_path / "actors"), "actor-configured"),
        # ... and through the environment, with the default run name (it holds the pid)
        runner.options(
            runtime_env={"env_vars": {"AGENTTRACE_OUT": str(tmp_path / "env")}}
        ).remote(),
    ]
    try:
        driver = at.configure(out=str(tmp_path / "driver"), run_name="driver", writer="thread")
        with driver.tracer.start_as_current_span("train") as train:
            calls = {
                (index, seed): actor.play.remote(seed, trace_context=inject())
                for index, actor in enumerate(actors)
                for seed in (10 + index, 20 + index)
            }
            episode_ids = {key: ray.get(ref, timeout=120) for key, ref in calls.items()}
        written = ray.get([actor.finish.remote() for actor in actors], timeout=120)
    finally:
        for actor in actors:
            ray.kill(actor)
    at.shutdown()
    driver_span = train.get_span_context()

    assert Path(written[0]["run_dir"]).name == "actor-configured"
    assert str(written[1]["pid"]) in Path(written[1]["run_dir"]).name
    assert written[1]["run_dir"].startswith(str(tmp_path / "env"))
    for index, files in enumerate(written):
        assert files["pid"] != os.getpid()
        records = list(read_otlp_json(files["spans"]))
        episodes = by_name(records, sc.EPISODE)
        assert len(episodes) == 2
        for record in episodes:
            assert record.trace_id == driver_span.trace_id
            assert record.parent_span_id == driver_span.span_id
            assert record.parent_is_remote
        assert {r.trace_id for r in records} == {driver_span.trace_id}

        trajectories = load_trajectories(files["trajectories"])
        mine = {seed: episode_ids[(i, seed)] for (i, seed) in episode_ids if i == index}
        assert sorted(t.episode_id for t in trajectories) == sorted(mine.values())
        for trajectory in trajectories:
            seed = next(s for s, e in mine.items() if e == trajectory.episode_id)
            reference = replay(seed)
            assert trajectory.trace_id == f"{driver_span.trace_id:032x}"
            assert trajectory.status != sc.STATUS_INCOMPLETE
            assert trajectory.attributes[sc.EPISODE_SEED] == seed
            check_steps(trajectory, reference)
            np.testing.assert_array_equal(trajectory.final_observation, reference.final_observation)
    # The driver ran no episode: it wrote its span and no trajectory.
    driver_records = list(read_otlp_json(driver.span_paths))
    assert [r.name for r in driver_records] == ["train"]
    assert driver.trajectory_paths == [] or load_trajectories(driver.trajectory_paths) == []


def test_ray_call_without_trace_context_starts_its_own_trace(ray_module, tmp_path) -> None:
    ray = ray_module
    actor = ray.remote(EpisodeRunner).remote(str(tmp_path), "untraced")
    try:
        driver = at.configure(out=str(tmp_path / "driver"), run_name="driver", writer="thread")
        with driver.tracer.start_as_current_span("train") as train:
            ray.get(actor.play.remote(30), timeout=120)
        files = ray.get(actor.finish.remote(), timeout=120)
    finally:
        ray.kill(actor)
    (episode,) = by_name(list(read_otlp_json(files["spans"])), sc.EPISODE)
    assert episode.parent_span_id == 0
    assert episode.trace_id != train.get_span_context().trace_id


def test_accepts_trace_context_signature_and_bad_input() -> None:
    def step(env: Any, action: int, **options: Any) -> int:
        return action

    wrapped = accepts_trace_context(step)
    assert list(inspect.signature(wrapped).parameters) == [
        "env",
        "action",
        "trace_context",
        "options",
    ]
    assert wrapped(None, 3, trace_context=None) == 3

    def generator() -> Iterator[int]:
        yield 1

    def has_it(trace_context: dict) -> None:
        pass

    with pytest.raises(TypeError, match="generator functions"):
        accepts_trace_context(generator)
    with pytest.raises(TypeError, match="already has a parameter"):
        accepts_trace_context(has_it)


async def test_accepts_trace_context_on_async_functions(pipeline) -> None:
    @accepts_trace_context
    async def remote_step() -> str | None:
        with at.env_step():
            return at.current_episode_id()

    with at.episode() as ep, at.timestep():
        carrier = inject()
    assert await remote_step(trace_context=carrier) == ep.id
    assert await remote_step() is None


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2])
