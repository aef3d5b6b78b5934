"""The capture gateway under load: 200 concurrent streaming calls lose nothing, with bounded
memory (issue 33).

``agenttrace gateway`` runs as a process of its own (its real pipeline writing to tmp_path), in
front of the scripted model server (tests/model_server.py), which streams every answer a word
per event, 20 ms apart. The real ``openai.AsyncOpenAI`` client makes 200 streaming Chat
Completions calls at once, each in its own episode (``/e/<id>/v1``, ended with ``POST
/e/<id>/end`` as ``agenttrace run`` does), and reads each answer's raw bytes; two such waves.

* every stream was open at the same time (each had its first bytes before any ended);
* every client got, byte for byte, the SSE body the server sent it;
* every call is recorded: one episode of one step each, with the messages sent and the whole
  answer's text, status completed;
* the gateway process's memory after the second wave is within a small margin of its memory
  after the first: what a wave leaves behind is not kept (its writer helper's is looked at too).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import clean_environ
from model_server import ModelServer, say

from agenttrace.reading import load_trajectories

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(240)

CALLS = 200  # at once, per wave
WORDS = 80  # streamed a word per event: 80 content chunks, with the role and finish chunks
CHUNK_DELAY = 0.02
#: What the second wave may add to the gateway process's RSS over the first's: at most 0.7 MiB
#: was seen; keeping each call's record and answer adds 4 MiB.
MARGIN_MIB = 2.5
#: The same for its pipeline's writer helper process (which writes the episodes out): up to
#: 1.4 MiB was seen.
HELPER_MARGIN_MIB = 8.0


def _text(wave: int, n: int) -> str:
    return " ".join(f"w{wave}c{n}t{k}" for k in range(WORDS))


def _messages(wave: int, n: int) -> list[dict[str, str]]:
    """A call's request: a system prompt of 2 kB, as agents send, and its question."""
    return [
        {"role": "system", "content": f"You are agent {n}. " + "Follow the rules. " * 120},
        {"role": "user", "content": f"call {n} of wave {wave}"},
    ]


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _memory(pid: int) -> dict[str, int]:
    """RSS (KiB) of the gateway process and of its children (its pipeline's writer helper)."""
    tasks = Path(f"/proc/{pid}/task").glob("*/children")  # (any thread may have started one)
    children = sorted({child for task in tasks for child in task.read_text().split()})
    found = {"gateway": _rss_kib(pid)}
    for child in children:
        found[f"helper {child}"] = _rss_kib(int(child))
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_gateway(upstream: str, out: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "agenttrace", "gateway", "--upstream", upstream,
             "--listen", f"127.0.0.1:{port}"],
            env=clean_environ(AGENTTRACE_OUT=str(out)), stderr=stderr,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # (GET on an episode path: a 404 that says it listens)
        assert process.poll() is None, log.read_text()
        try:
            urllib.request.urlopen(f"{url}/e/probe/end", timeout=5)
        except urllib.error.HTTPError:
            return process, url
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)


async def _wave(gateway: str, wave: int) -> tuple[dict[int, bytes], int]:
    """CALLS streaming calls at once; (each call's raw answer, the most streams open at
    once: begun, not yet ended)."""
    got: dict[int, bytes] = {}
    open_now = most_open = 0
    async with openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key="k", max_retries=0,
                                  timeout=120) as client:  # fmt: skip

        async def one(n: int) -> None:
            nonlocal open_now, most_open
            episode = f"w{wave}-{n}"
            agent = client.with_options(base_url=f"{gateway}/e/{episode}/v1")
            body = bytearray()
            async with agent.chat.completions.with_streaming_response.create(
                model=f"w{wave}m{n}",
                messages=_messages(wave, n),
                stream=True,
            ) as response:
                async for data in response.iter_bytes():
                    if not body:
                        open_now += 1
                        most_open = max(most_open, open_now)
                    body += data
            open_now -= 1
            got[n] = bytes(body)
            ended = await client.post(
                f"{gateway}/e/{episode}/end", body={"exit_code": 0}, cast_to=httpx.Response
            )
            assert ended.json() == {"episode_id": episode, "ended": True}

        await asyncio.gather(*(one(n) for n in range(CALLS)))
    return got, most_open


def test_200_concurrent_streams_lose_nothing_with_bounded_memory(tmp_path: Path) -> None:
    script = {f"w{wave}m{n}": [say(_text(wave, n), chunk_delay=CHUNK_DELAY)]
              for wave in (1, 2) for n in range(CALLS)}  # fmt: skip
    script["warm"] = [say("warm up", chunk_delay=CHUNK_DELAY)] * 5
    with ModelServer(script, fallback=None, validate=False) as server:
        gateway, url = _start_gateway(server.url, tmp_path / "runs", tmp_path / "gateway.log")
        try:
            warm = openai.OpenAI(base_url=f"{url}/e/warm/v1", api_key="k", max_retries=0)
            for _ in range(5):  # the pipeline, its writer and the code paths up
                for _chunk in warm.chat.completions.create(
                    model="warm", messages=[{"role": "user", "content": "hi"}], stream=True
                ):
                    pass
            rss = {"start": _memory(gateway.pid)}
            answers: dict[int, dict[int, bytes]] = {}
            for wave in (1, 2):
                started = time.perf_counter()
                answers[wave], most_open = asyncio.run(_wave(url, wave))
                seconds = time.perf_counter() - started
                time.sleep(1.0)  # (the episodes handed to the writer)
                rss[f"wave {wave}"] = _memory(gateway.pid)
                print(f"wave {wave}: {CALLS} streams in {seconds:.1f} s, at most {most_open} "
                      f"open at once; RSS (KiB) {rss[f'wave {wave}']}")  # fmt: skip
                assert most_open == CALLS  # all at once through the gateway, none queued
            peak = _rss_kib(gateway.pid, "VmHWM")
        finally:
            gateway.send_signal(signal.SIGTERM)
            assert gateway.wait(60) == 0, (tmp_path / "gateway.log").read_text()
        exchanges = server.exchanges
        assert server.errors == []
    print(f"RSS (KiB): {rss}; the gateway's peak {peak}")

    # every client got what the server sent it, byte for byte
    sent = {e.body["model"]: e for e in exchanges if e.body["model"] != "warm"}
    assert len(sent) == 2 * CALLS
    for wave, got in answers.items():
        assert sorted(got) == list(range(CALLS))
        for n, body in got.items():
            exchange = sent[f"w{wave}m{n}"]
            assert not exchange.disconnected
            assert len(exchange.events) == WORDS + 3  # role, words, finish, [DONE]
            assert body == b"".join(event.encode() for event in exchange.events)

    # every call recorded: its own episode, one step, the messages and the whole answer
    files = sorted((tmp_path / "runs").glob("*/trajectories*.jsonl"))
    found = {t.episode_id: t for t in load_trajectories(files) if t.episode_id != "warm"}
    assert len(found) == 2 * CALLS
    for wave in (1, 2):
        for n in range(CALLS):
            trajectory = found[f"w{wave}-{n}"]
            assert trajectory.status == "completed"
            (step,) = trajectory.steps
            (llm,) = step.llm_calls
            assert llm.input_messages == _messages(wave, n)
            assert llm.output_messages[0]["content"] == _text(wave, n)
            assert llm.finish_reasons == ["stop"]

    # what the first wave left is not kept growing by the second
    assert rss["wave 2"].keys() == rss["wave 1"].keys() == rss["start"].keys(), rss
    for process, after_first in rss["wave 1"].items():
        margin = MARGIN_MIB if process == "gateway" else HELPER_MARGIN_MIB
        assert rss["wave 2"][process] - after_first <= margin * 1024, (process, rss)
