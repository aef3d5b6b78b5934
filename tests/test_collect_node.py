"""``agenttrace collect`` fed by a producer that is not Python (issue 32).

The collect service's promise is OTLP from any language, and the Python tests
(tests/test_collect.py) only ever feed it spans from the Python SDK: nothing there would notice
a rebuild that leans on what Python's SDK happens to do (its scope name, its attribute types,
its id and time encodings). Here a Node.js script, tests/node_producer/producer.mjs, runs a
toy environment (a seeded 1-D random walk) traced with the official OpenTelemetry JS SDK from
the npm registry in agenttrace's conventions, exports over OTLP/HTTP protobuf and OTLP/HTTP
JSON, and prints its own record of every episode. Each rebuilt trajectory is checked against
that record, value by value: the script's record is the independent truth, never agenttrace's
own reading of the same spans.

The SDK is installed with ``npm ci`` from the committed package-lock.json, once per lock file
into pytest's cache folder (with ``-p no:cacheprovider``, as CI runs, once per session). The
test skips only when ``node`` or ``npm`` is missing; .ci/run installs Debian's ``nodejs`` and
``npm`` so CI never does.
"""

from __future__ import annotations

import functools
import json
import operator
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import clean_environ, wait_until
from node_packages import installed_node_modules

from agenttrace.collect import CollectService, CollectSettings
from agenttrace.reading import load_trajectories

pytest.importorskip("aiohttp")
pytestmark = pytest.mark.timeout(300)

PRODUCER = Path(__file__).parent / "node_producer"
EPISODES = 6


@pytest.fixture(scope="session")
def node_modules(request, tmp_path_factory) -> Path:
    """The producer's node_modules (tests/node_packages.py)."""
    return installed_node_modules(request, tmp_path_factory, PRODUCER, "the Node.js producer")


def read_body(stream, headers) -> bytes:
    """A request's body, whole: the JS exporters send theirs in chunks, with no length."""
    if headers.get("Transfer-Encoding", "").lower() != "chunked":
        return stream.read(int(headers.get("Content-Length", 0)))
    parts = []
    while size := int(stream.readline().split(b";")[0], 16):
        parts.append(stream.read(size))
        stream.readline()  # the CRLF after each chunk
    while stream.readline() not in (b"\r\n", b"\n", b""):  # trailers, up to the blank line
        pass
    return b"".join(parts)


class RecordingProxy:
    """Forwards every request to ``target`` as it came and notes its path and Content-Type: the
    proof that each run used the encoding it names."""

    def __init__(self, target: str) -> None:
        self.seen: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = read_body(self.rfile, self.headers)
                content_type = self.headers.get("Content-Type", "")
                proxy.seen.append((self.path, content_type.split(";")[0]))
                forward = urllib.request.Request(
                    target + self.path, data=body, headers={"Content-Type": content_type}
                )
                try:
                    with urllib.request.urlopen(forward, timeout=30) as answer:
                        status, headers, data = answer.status, answer.headers, answer.read()
                except urllib.error.HTTPError as error:
                    status, headers, data = error.code, error.headers, error.read()
                self.send_response(status)
                for name in ("Content-Type", "Retry-After"):
                    if headers.get(name):
                        self.send_header(name, headers[name])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def trajectories(folder: Path) -> dict:
    files = sorted(folder.glob("trajectories*.jsonl"))
    return {t.episode_id: t for t in load_trajectories(files)} if files else {}


def health(svc: CollectService) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{svc.http_port}/health", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.parametrize(
    ("protocol", "content_type", "url_from"),
    [
        ("proto", "application/x-protobuf", "argument"),
        ("json", "application/json", "environment"),
    ],
)
def test_a_node_producer_s_episodes_equal_its_own_record(
    node_modules, tmp_path, protocol, content_type, url_from
) -> None:
    # the script next to the installed SDK (ES modules find packages only by folder)
    shutil.copy(PRODUCER / "producer.mjs", tmp_path)
    (tmp_path / "node_modules").symlink_to(node_modules, target_is_directory=True)
    svc = CollectService(
        CollectSettings(out=tmp_path / "out", grace_seconds=0.3),
        http="127.0.0.1:0",
        grpc="127.0.0.1:0",
    ).start()
    try:
        with RecordingProxy(f"http://127.0.0.1:{svc.http_port}") as proxy:
            url = f"{proxy.url}/v1/traces"
            command = ["node", "producer.mjs", "--protocol", protocol]
            command += ["--episodes", str(EPISODES)]
            env = clean_environ()  # no OTEL_* of ours reaches the JS SDK
            if url_from == "argument":
                command += ["--url", url]
            else:  # the standard variable, as a deployed Node service would be configured
                env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = url
            done = subprocess.run(
                command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr[-3000:]
            record = json.loads(done.stdout)
            assert wait_until(lambda: len(trajectories(tmp_path / "out")) == EPISODES, 30)
            got = trajectories(tmp_path / "out")
            counts = health(svc)
        assert proxy.seen and set(proxy.seen) == {("/v1/traces", content_type)}
    finally:
        svc.stop()

    own = record["episodes"]
    assert record["protocol"] == protocol and len(own) == EPISODES
    # the toy's seeds give both endings, and falls (reward -1) as well as goals (reward 1)
    assert {episode["status"] for episode in own} == {"completed", "truncated"}
    assert {episode["rewards"][-1] for episode in own} >= {1, -1}
    assert sorted(got) == sorted(episode["episode_id"] for episode in own)
    # every span the script made arrived: episode + env.reset + 3 per step
    spans = sum(2 + 3 * episode["length"] for episode in own)
    assert (counts["spans_received"], counts.get("spans_rejected", 0)) == (spans, 0)
    assert counts["episodes_written"] == {
        status: sum(episode["status"] == status for episode in own)
        for status in {episode["status"] for episode in own}
    }

    for episode in own:
        name = episode["episode_id"]
        trajectory = got[name]
        # the script's record holds together (what the checks below compare with)
        length = len(episode["actions"])
        assert episode["length"] == length
        assert episode["return"] == functools.reduce(operator.add, episode["rewards"], 0)
        assert all(not t for t in episode["terminated"][:-1] + episode["truncated"][:-1])

        assert trajectory.task_id == episode["task_id"], name
        assert trajectory.attributes["rl.env.name"] == "RandomWalk1D", name
        assert trajectory.attributes["rl.episode.seed"] == episode["seed"], name
        assert trajectory.status == episode["status"], name
        assert trajectory.error is None, name
        assert trajectory.length == length, name
        assert trajectory.return_ == episode["return"], name
        assert (trajectory.missing_steps, trajectory.lossy) == ([], {}), name
        assert trajectory.reset_info == episode["reset_info"], name
        assert trajectory.final_observation == episode["next_observations"][-1], name
        assert [step.index for step in trajectory.steps] == list(range(length)), name
        for i, step in enumerate(trajectory.steps):
            where = f"{name} step {i}"
            assert step.observation == episode["observations"][i], where
            assert step.action == episode["actions"][i], where
            assert step.reward == episode["rewards"][i], where
            assert step.terminated is episode["terminated"][i], where
            assert step.truncated is episode["truncated"][i], where
            assert step.info == episode["infos"][i], where
            assert step.error is None, where
        # the observation each step acted on is the one the step before returned
        acted_on = [episode["reset_observation"], *episode["next_observations"][:-1]]
        assert [step.observation for step in trajectory.steps] == acted_on, name
