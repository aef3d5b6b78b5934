"""A real Prometheus server on loopback, for tests that need PromQL answered by Prometheus itself.

:class:`PrometheusServer` starts the ``prometheus`` binary bound to 127.0.0.1 on a free port,
with its TSDB in a temporary folder, waits until ``/-/ready`` answers, and answers instant
queries through the HTTP API with the standard library only. It is a context manager; leaving
it (or :meth:`PrometheusServer.stop`) terminates the process, kills it if it does not stop in
time, and deletes the folder. Every wait is bounded; nothing listens beyond loopback.

The configuration is text, or a function of the port the server will listen on (to let a
config scrape the server itself)::

    with PrometheusServer(lambda port: SCRAPE_CONFIG.format(port=port)) as prom:
        prom.wait_for('up{job="prometheus"} == 1', timeout=30)
        rows = prom.query("sum(rl_episodes_total)")

CI installs the binary with Debian's ``prometheus`` package (.ci/run); :func:`find_prometheus`
says whether it is there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from server_process import log_tail, wait_ready

#: Config text, or a function from the listening port to config text.
Config = str | Callable[[int], str]


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


def find_prometheus() -> str | None:
    """Path of the ``prometheus`` binary on PATH, or None."""
    return shutil.which("prometheus")


# Read at import: the autouse fixture in conftest.py removes AGENTTRACE_* variables from the
# environment while each test runs. .ci/run sets it, so a CI machine without the Prometheus
# binaries fails instead of skipping.
REQUIRE_PROMETHEUS = os.environ.get("AGENTTRACE_REQUIRE_PROMETHEUS") == "1"


def prometheus_binary(name: str) -> str:
    """Path of ``prometheus`` or ``promtool``; skips the test without it (fails in CI)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian package: prometheus; .ci/run installs it)"
        if REQUIRE_PROMETHEUS:
            pytest.fail(f"{message}, and AGENTTRACE_REQUIRE_PROMETHEUS=1")
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrometheusServer:
    """One Prometheus process on ``127.0.0.1:port``; ``url`` is its HTTP base."""

    def __init__(
        self,
        config: Config,
        *,
        binary: str | None = None,
        start_timeout: float = 30.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        found = binary or find_prometheus()
        if not found:
            raise PrometheusError("no prometheus binary on PATH (Debian package: prometheus)")
        self.binary = found
        self.workdir = Path(tempfile.mkdtemp(prefix="agenttrace-prometheus-"))
        self.process: subprocess.Popen[bytes] | None = None
        self._files: list[Any] = []
        try:
            for attempt in range(3):  # a free port may be taken before Prometheus binds it
                self._start(config, extra_args)
                try:
                    self._wait_ready(start_timeout)
                    return
                except PrometheusError:
                    output = self.output().lower()
                    self._stop_process()
                    if attempt == 2 or "address already in use" not in output:
                        raise
        except BaseException:
            self.stop()
            raise

    # --- lifecycle -------------------------------------------------------------------------

    def _start(self, config: Config, extra_args: tuple[str, ...]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        text = config(self.port) if callable(config) else config
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(text)
        data = self.workdir / "data"
        shutil.rmtree(data, ignore_errors=True)  # a fresh TSDB for each attempt
        self.stdout_path = self.workdir / "prometheus.out"
        self.stderr_path = self.workdir / "prometheus.err"
        stdout = open(self.stdout_path, "wb")  # noqa: SIM115 - closed in _stop_process()
        stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        self._files = [stdout, stderr]
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *extra_args,
            ],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        wait_ready(
            self.process,
            f"{self.url}/-/ready",
            timeout,
            name="prometheus",
            output=self.output,
            error=PrometheusError,
            interval=0.2,
        )

    def output(self, limit: int = 4000) -> str:
        """The end of the server's stderr (where Prometheus logs) and stdout."""
        return log_tail((self.stderr_path, self.stdout_path), limit)

    def _stop_process(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        for handle in self._files:
            handle.close()
        self._files = []

    def stop(self) -> None:
        """Stop the process (terminate, then kill) and delete the working folder."""
        try:
            self._stop_process()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- HTTP API --------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:  # 400/422 carry a JSON error body
            try:
                body = json.load(error)
            except ValueError:
                raise PrometheusError(f"GET {path}: HTTP {error.code}") from None
        if body.get("status") != "success":
            raise PrometheusError(
                f"GET {path} {params}: {body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def query(self, expr: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query ``expr`` (now, or at unix time ``at``); the result list.

        For a vector each item is ``{"metric": {labels}, "value": [time, "value"]}``; a scalar
        or string result comes back as a one-item list ``[{"metric": {}, "value": [...]}]``.
        """
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def wait_for(self, expr: str, timeout: float = 30.0, interval: float = 0.25) -> list[Any]:
        """Poll :meth:`query` until ``expr`` returns a non-empty result; that result.

        Raises TimeoutError after ``timeout`` seconds, with the scrape targets' health and the
        server's log tail in the message.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{expr!r} stayed empty for {timeout:.0f} s; targets: {self.targets()}\n"
                    f"{self.output()}"
                )
            time.sleep(interval)

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets: job, scrape URL, health and last error of each."""
        data = self._get("/api/v1/targets")
        return [
            {
                "job": t.get("labels", {}).get("job"),
                "url": t.get("scrapeUrl"),
                "health": t.get("health"),
                "error": t.get("lastError"),
            }
            for t in data.get("activeTargets", [])
        ]
