"""``agenttrace collect`` against ``agenttrace export`` on the same spans, side by side.

Run ``python benchmarks/collect_throughput.py`` (default 250,000 spans, 3 producers). It
records a real traced CartPole run and grows its span file to the size asked for (as
``benchmarks/offline_rebuild.py`` does), then, in one run:

* starts ``agenttrace collect`` in a fresh process on 127.0.0.1 and has ``--producers``
  processes send the file's export requests to it over OTLP/HTTP (JSON, one request per line,
  each producer a share of the lines, as fast as the service answers), and times from the first
  request to the last episode written: the spans/s one collect process ingests (decoded, logged
  and synced, acknowledged) and rebuilds;
* times ``agenttrace export`` of the same file in a fresh process (read, rebuild, write);

and prints both rates and their ratio, with the service's peak RSS. ``--no-sync`` measures the
service without fsync of its span log.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from offline_rebuild import grow, measure, record_run

SENDER = """
import sys, time, urllib.error, urllib.request
url, path, part, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(path, "rb") as handle:
    lines = [line for n, line in enumerate(handle) if n % parts == part]
for line in lines:
    while True:
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(url, data=line, headers=headers)
        try:
            urllib.request.urlopen(request, timeout=60).read()
            break
        except urllib.error.HTTPError as error:
            if error.code not in (429, 503):
                raise
            time.sleep(float(error.headers.get("Retry-After", "1")))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        return json.loads(answer.read())


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def measure_collect(span_file: Path, folder: Path, producers: int, sync: bool) -> dict:
    """Spans/s of one collect process fed by ``producers`` sender processes."""
    port = _free_port()
    out = folder / "collected"
    command = [sys.executable, "-m", "agenttrace", "collect", "--out", str(out), "--grpc",
               "none", "--http", f"127.0.0.1:{port}", "--grace", "0.5"]  # fmt: skip
    if not sync:
        command.append("--no-sync")
    service = subprocess.Popen(command, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _health(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("collect did not start") from None
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1/traces"
        started = time.perf_counter()
        senders = [
            subprocess.Popen(
                [sys.executable, "-c", SENDER, url, str(span_file), str(n), str(producers)]
            )
            for n in range(producers)
        ]
        for sender in senders:
            if sender.wait() != 0:
                raise SystemExit("a sender failed")
        sent = time.perf_counter() - started
        while True:  # the last episodes wait out the grace period
            health = _health(port)
            if health["queued_spans"] == 0 and health["open_episodes"] == 0:
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        peak = _peak_rss_kib(service.pid)
    finally:
        service.terminate()
        service.wait(60)
    return {
        "seconds": seconds,
        "acknowledged_seconds": sent,
        "spans": health["spans_received"],
        "episodes": sum(health["episodes_written"].values()),
        "peak_kib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=250_000)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--no-sync", action="store_true", help="no fsync of the span log")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="agenttrace-collect-bench-"))
    seed_file = record_run(folder)
    span_file = folder / "spans.jsonl"
    count = grow(seed_file, span_file, args.spans)
    print(f"{count:,} spans ({span_file.stat().st_size / 2**20:,.0f} MiB), "
          f"{args.producers} producers")  # fmt: skip
    collect = measure_collect(span_file, folder, args.producers, sync=not args.no_sync)
    assert collect["spans"] == count, collect
    export = measure(span_file, folder / "exported.jsonl")
    collect_rate = count / collect["seconds"]
    export_rate = count / export["seconds"]
    print(
        f"{'agenttrace collect':>18}: {collect['seconds']:6.1f} s = {collect_rate:9,.0f} spans/s "
        f"({collect['episodes']:,} episodes; all acknowledged after "
        f"{collect['acknowledged_seconds']:.1f} s), peak RSS {collect['peak_kib'] / 1024:,.0f} MiB"
    )
    print(
        f"{'agenttrace export':>18}: {export['seconds']:6.1f} s = {export_rate:9,.0f} spans/s, "
        f"peak RSS {export['peak_kib'] / 1024:,.0f} MiB"
    )
    print(f"{'collect / export':>18}: x{collect_rate / export_rate:.2f}")
    print(json.dumps({"spans": count, "collect": collect, "export": export}))


if __name__ == "__main__":
    main()
