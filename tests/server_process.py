"""What the tests' real servers (Phoenix, Prometheus) share: waiting until one answers, and
the tail of its logs for failure messages."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path


def log_tail(paths: Iterable[Path], limit: int) -> str:
    """The last ``limit`` bytes of each log file, headed by its name."""
    parts = []
    for path in paths:
        try:
            text = path.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            text = ""
        parts.append(f"--- {path.name} (tail) ---\n{text}")
    return "\n".join(parts)


def wait_ready(
    process: subprocess.Popen,
    url: str,
    timeout: float,
    *,
    name: str,
    output: Callable[[], str],
    error: type[Exception],
    interval: float = 0.25,
) -> None:
    """Poll ``url`` until it answers 200; raise ``error`` with the logs if the process exits
    first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise error(
                f"{name} exited with status {process.returncode} before it was ready:\n{output()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(interval)
    raise error(f"{name} was not ready after {timeout:.0f} s:\n{output()}")
