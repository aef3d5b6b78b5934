"""The capture gateway's cost: calls through ``agenttrace gateway`` against the same calls made
directly to the same local upstream, side by side in one run (issue 33's targets: added latency
p50 < 1 ms and p99 < 5 ms non-streamed; each streamed chunk forwarded within 1 ms).

Run ``python benchmarks/gateway.py`` (defaults: 2,000 non-streamed calls each way, 15 streams
each way of 40 chunks 20 ms apart). Processes, all on 127.0.0.1:

* the upstream: a minimal aiohttp server (this file, ``--serve-upstream``) that answers a Chat
  Completions request at once with a precomputed body, or streams ``chat.completion.chunk``
  events every ``--interval`` seconds, each carrying the CLOCK_MONOTONIC time it was written;
* the gateway: ``agenttrace gateway --upstream ...``, its real agenttrace pipeline writing the
  episodes to a temporary folder (each call under ``/e/<episode>/v1``, 10 calls an episode,
  then ``POST /e/<episode>/end``, as ``agenttrace run`` gives an agent);
* for reference, a bare aiohttp forwarder (this file, ``--serve-forwarder``): the same HTTP
  stack as the gateway (aiohttp server, aiohttp client session to the upstream, uvloop's
  event loop where installed), nothing recorded. What it adds is the stack's own cost; the
  gateway's above it is agenttrace's;
* this process, the client (aiohttp, one call at a time), which calls the upstream directly,
  through the forwarder and through the gateway in turn, call by call, so the machine's drift
  weighs on all three alike.

Non-streamed: each call's time at the client; the added latency is the gateway's percentile
minus the direct one. Streamed: each chunk's delay is the time it reached the client minus the
time the upstream wrote it (the processes share CLOCK_MONOTONIC); the added delay is again the
gateway's percentile minus the direct one. Also printed: the CPU time per non-streamed call of
the gateway process (all its threads, its writer helper process apart) and of the forwarder's.
The gateway is then stopped and its files read back: every call through it must be a step,
every streamed answer whole.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MESSAGES = [
    {"role": "system", "content": "You are a coding agent. Use the tools; be brief. " * 4},
    {"role": "user", "content": "The test test_parse fails with KeyError 'id'. Fix it."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "src/parse.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def parse(d):\n  return d['id']\n" * 8},
    {"role": "user", "content": "Go on."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} a file of the repository",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("read_file", "write_file", "run_tests")
]
ANSWER_TEXT = "The key is missing when the record has no id; parse now uses d.get('id'). " * 3
SIDES = ("direct", "forwarder", "gateway")
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _listen() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


# --- the upstream and the bare forwarder (processes of their own) --------------------------


def serve_upstream(chunks: int, interval: float) -> None:
    """A model server that costs as little as possible: prints its port, serves until killed."""
    from aiohttp import web

    whole = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER_TEXT},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 420, "completion_tokens": 60, "total_tokens": 480},
        }
    ).encode()
    chunk = (
        '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
        '"model":"bench","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}'
    )
    last = chunk.replace('"finish_reason":null', '"finish_reason":"stop"') % ""

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(body=whole, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(chunks):
            if n:
                await asyncio.sleep(interval)
            text = f"{n}@{_now_ns()} "  # (when it was written, for the client to compare)
            await response.write(b"data: " + (chunk % text).encode() + b"\n\n")
        await response.write(b"data: " + last.encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    sock = _listen()
    print(sock.getsockname()[1], flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None)


def serve_forwarder(upstream: str) -> None:
    """The gateway's HTTP stack with nothing recorded: aiohttp server, aiohttp client session,
    answers passed back as they come (streams chunk by chunk)."""
    from aiohttp import ClientSession, web

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        session = request.app["session"]
        async with session.post(upstream + "/v1/chat/completions", data=body,
                                headers=HEADERS) as answer:  # fmt: skip
            if answer.content_type != "text/event-stream":
                data = await answer.read()
                kind = "application/json"
                return web.Response(body=data, status=answer.status, content_type=kind)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            async for data in answer.content.iter_any():
                await response.write(data)
            await response.write_eof()
            return response

    async def session(app: web.Application) -> Any:
        app["session"] = ClientSession()
        yield
        await app["session"].close()

    from agenttrace.collect.http_server import new_event_loop

    app = web.Application()
    app.cleanup_ctx.append(session)
    app.router.add_route("*", "/{tail:.*}", forward)
    sock = _listen()
    print(sock.getsockname()[1], flush=True)
    # the gateway's event loop too (uvloop where installed), for the same stack
    web.run_app(app, sock=sock, print=None, access_log=None, loop=new_event_loop())


# --- the client ------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _whole_call(session: Any, url: str, body: bytes) -> float:
    """Milliseconds from sending a non-streamed call to holding its whole answer."""
    started = time.perf_counter_ns()
    async with session.post(url, data=body, headers=HEADERS) as answer:
        data = await answer.read()
    elapsed = (time.perf_counter_ns() - started) / 1e6
    if answer.status != 200 or b"chat.completion" not in data:
        raise SystemExit(f"{url} answered {answer.status}: {data[:300]!r}")
    return elapsed


async def _streamed_call(session: Any, url: str, body: bytes, chunks: int) -> list[float]:
    """Each chunk's delay in ms: when the client had it minus when the upstream wrote it."""
    delays, buffer = [], b""
    async with session.post(url, data=body, headers=HEADERS) as answer:
        async for data in answer.content.iter_any():
            arrived = _now_ns()
            buffer += data
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                payload = event.removeprefix(b"data: ")
                if payload == b"[DONE]":
                    continue
                content = json.loads(payload)["choices"][0]["delta"].get("content")
                if content:
                    delays.append((arrived - int(content.split("@")[1])) / 1e6)
    if len(delays) != chunks:
        raise SystemExit(f"{url}: {len(delays)} chunks of {chunks}")
    return delays


async def measure(args: argparse.Namespace, urls: dict[str, str], pids: dict[str, int]) -> dict:
    """The calls, in turn on every side; the gateway's calls in episodes of their own."""
    from aiohttp import ClientSession, TCPConnector

    request = {"model": "bench", "messages": MESSAGES, "tools": TOOLS}
    whole = json.dumps(request).encode()
    streamed = json.dumps({**request, "stream": True}).encode()
    calls: dict[str, list[float]] = {side: [] for side in SIDES}
    chunk_delays: dict[str, list[float]] = {side: [] for side in SIDES}
    state = {"episode": 0, "in_episode": 0, "calls": 0, "episodes": 0}

    async with ClientSession(connector=TCPConnector(limit=8)) as session:

        def url(side: str) -> str:
            if side != "gateway":
                return urls[side] + "/v1/chat/completions"
            return f"{urls['gateway']}/e/bench-{state['episode']}/v1/chat/completions"

        async def end_episode() -> None:
            if not state["in_episode"]:
                return
            end = f"{urls['gateway']}/e/bench-{state['episode']}/end"
            async with session.post(end, json={"exit_code": 0}) as answer:
                await answer.read()
            state["episode"] += 1
            state["episodes"] += 1
            state["in_episode"] = 0

        async def one_step_done() -> None:
            state["calls"] += 1
            state["in_episode"] += 1
            if state["in_episode"] == args.episode_steps:
                await end_episode()

        for _ in range(args.warmup):  # connections made, code paths warm; not counted
            for side in SIDES:
                await _whole_call(session, url(side), whole)
            await one_step_done()
        await end_episode()
        gc.collect()
        gc.disable()  # the client's own collections out of the timings (the gateway keeps its)
        cpu_before = {side: _cpu_seconds(pid) for side, pid in pids.items()}
        try:
            for n in range(args.calls):
                order = SIDES if n % 2 == 0 else SIDES[::-1]
                for side in order:
                    calls[side].append(await _whole_call(session, url(side), whole))
                await one_step_done()
                if state["in_episode"] == 0:
                    gc.collect()
            await end_episode()
            cpu = {side: (_cpu_seconds(pid) - cpu_before[side]) / args.calls * 1000
                   for side, pid in pids.items()}  # fmt: skip
            for n in range(args.streams):
                order = SIDES if n % 2 == 0 else SIDES[::-1]
                for side in order:
                    chunk_delays[side] += await _streamed_call(
                        session, url(side), streamed, args.chunks
                    )
                await one_step_done()
                gc.collect()
            await end_episode()
        finally:
            gc.enable()
    return {"calls": calls, "chunks": chunk_delays, "gateway_calls": state["calls"],
            "episodes": state["episodes"], "cpu_ms_per_call": cpu}  # fmt: skip


# --- the run -----------------------------------------------------------------------------------


def _serve(*options: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """This file in one of its server modes; (process, its URL)."""
    process = subprocess.Popen(
        [sys.executable, __file__, *options], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.strip().isdigit():
        process.kill()
        raise SystemExit(f"{options[0]} did not start: {line!r}")
    return process, f"http://127.0.0.1:{int(line)}"


def _wait_for(url: str, process: subprocess.Popen, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{process.args} exited {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer") from None
            time.sleep(0.1)


def recorded(folder: Path) -> tuple[int, int, list[str]]:
    """(episodes, steps, the streamed answers' texts) the gateway wrote."""
    from agenttrace.reading import load_trajectories

    trajectories = load_trajectories(sorted(folder.glob("**/trajectories*.jsonl")))
    steps = [step for trajectory in trajectories for step in trajectory.steps]
    texts = [
        (message or {}).get("content") or ""
        for step in steps
        for llm in step.llm_calls
        for message in llm.output_messages or ()
    ]
    return len(trajectories), len(steps), [text for text in texts if "@" in text]


def _row(name: str, values: list[float]) -> str:
    return (f"{name:>30}: p50 {_percentile(values, 50):6.3f}  p99 {_percentile(values, 99):6.3f}"
            f"  mean {statistics.fmean(values):6.3f} ms  (n={len(values):,})")  # fmt: skip


def _added(name: str, found: dict[str, list[float]], side: str) -> tuple[str, dict[int, float]]:
    added = {q: _percentile(found[side], q) - _percentile(found["direct"], q) for q in (50, 99)}
    return f"{name:>30}: p50 {added[50]:+6.3f}  p99 {added[99]:+6.3f} ms", added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="non-streamed calls each way")
    parser.add_argument("--streams", type=int, default=15, help="streamed calls each way")
    parser.add_argument("--chunks", type=int, default=40, help="chunks per streamed answer")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument("--warmup", type=int, default=50, help="uncounted calls each way first")
    parser.add_argument("--episode-steps", type=int, default=10, help="calls per episode")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-forwarder", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        return serve_upstream(args.chunks, args.interval)
    if args.serve_forwarder:
        return serve_forwarder(args.serve_forwarder)
    if args.calls < 1 or args.streams < 1:
        parser.error("--calls and --streams must be at least 1")

    command = " ".join(["python benchmarks/gateway.py", *map(shlex.quote, sys.argv[1:])])
    cpus, load = os.cpu_count() or 1, os.getloadavg()
    print(f"command: {command}")
    from agenttrace.collect.http_server import new_event_loop

    loop = new_event_loop()
    kind = type(loop).__module__
    loop.close()
    print(f"machine: {cpus} CPUs, load average {load[0]:.2f} at the start; Python "
          f"{sys.version.split()[0]}; the servers' event loop: {kind}")  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="agenttrace-gateway-bench-"))
    processes: list[subprocess.Popen] = []
    try:
        upstream_process, upstream = _serve(
            "--serve-upstream", "--chunks", str(args.chunks), "--interval", str(args.interval)
        )
        processes.append(upstream_process)
        forwarder_process, forwarder = _serve("--serve-forwarder", upstream)
        processes.append(forwarder_process)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))}
        env["AGENTTRACE_OUT"] = str(folder / "runs")
        with _listen() as sock:
            port = sock.getsockname()[1]
        gateway_process = subprocess.Popen(
            [sys.executable, "-m", "agenttrace", "gateway", "--upstream", upstream,
             "--listen", f"127.0.0.1:{port}"],
            env=env, stderr=subprocess.DEVNULL, cwd=folder,
        )  # fmt: skip
        processes.append(gateway_process)
        gateway = f"http://127.0.0.1:{port}"
        _wait_for(gateway + "/e/probe/score", gateway_process)
        urls = {"direct": upstream, "forwarder": forwarder, "gateway": gateway}
        started = time.perf_counter()
        pids = {"forwarder": forwarder_process.pid, "gateway": gateway_process.pid}
        found = asyncio.run(measure(args, urls, pids))
        seconds = time.perf_counter() - started
    finally:
        for process in reversed(processes):  # the gateway first: it writes its episodes out
            process.send_signal(signal.SIGTERM)
            process.wait(120)
    load_after = os.getloadavg()
    episodes, steps, texts = recorded(folder / "runs")

    calls, chunks = found["calls"], found["chunks"]
    print(f"run: {seconds:.0f} s, load average {load_after[0]:.2f} at the end")
    if max(load[0], load_after[0]) > cpus / 2:
        print(f"NOTE: a loaded machine ({cpus} CPUs, load average up to "
              f"{max(load[0], load_after[0]):.1f}): every side is slower than on an idle one, "
              f"and the added figures are too")  # fmt: skip
    print(f"\nnon-streamed: {args.calls:,} calls each way, in turn direct / bare aiohttp "
          f"forwarder / gateway; request {len(json.dumps(MESSAGES)) // 100 / 10:.1f} kB of "
          f"messages + 3 tools")  # fmt: skip
    print(_row("direct", calls["direct"]))
    print(_row("bare aiohttp forwarder", calls["forwarder"]))
    print(_row("gateway (recording)", calls["gateway"]))
    line, added_forwarder = _added("added by the bare forwarder", calls, "forwarder")
    print(line)
    line, added = _added("added by the gateway", calls, "gateway")
    print(f"{line}  (targets: p50 < 1, p99 < 5)")
    cpu = found["cpu_ms_per_call"]
    print(f"{'CPU per call, its process':>30}: forwarder {cpu['forwarder']:.3f} ms, gateway "
          f"{cpu['gateway']:.3f} ms (its writer helper process apart)")  # fmt: skip
    print(f"\nstreamed: {args.streams} answers each way of {args.chunks} chunks "
          f"{args.interval * 1000:g} ms apart; a chunk's delay: when the client had it minus "
          f"when the upstream wrote it")  # fmt: skip
    print(_row("direct", chunks["direct"]))
    print(_row("bare aiohttp forwarder", chunks["forwarder"]))
    print(_row("gateway (recording)", chunks["gateway"]))
    line, _ = _added("added by the bare forwarder", chunks, "forwarder")
    print(line)
    line, added_chunk = _added("added by the gateway", chunks, "gateway")
    print(f"{line}  (target: within 1)")
    print(f"\nrecorded by the gateway: {steps:,} steps in {episodes:,} episodes "
          f"({found['gateway_calls']:,} calls in {found['episodes']:,} episodes sent); "
          f"{len(texts)} of {args.streams} streamed answers whole")  # fmt: skip
    whole_texts = sum(text.count("@") == args.chunks for text in texts)
    if (steps, episodes, whole_texts) != (found["gateway_calls"], found["episodes"], args.streams):
        raise SystemExit("the gateway did not record every call")

    def summary(found: dict[str, list[float]]) -> dict[str, dict[str, float]]:
        return {side: {f"p{q}": round(_percentile(v, q), 3) for q in (50, 99)}
                for side, v in found.items()}  # fmt: skip

    print(json.dumps({
        "command": command,
        "cpus": cpus,
        "load": [round(load[0], 2), round(load_after[0], 2)],
        "whole_ms": summary(calls),
        "whole_added_ms": {"forwarder": added_forwarder, "gateway": added},
        "cpu_ms_per_call": {side: round(v, 3) for side, v in cpu.items()},
        "chunk_ms": summary(chunks),
        "chunk_added_ms": added_chunk,
        "steps_recorded": steps,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
