"""How long the README's first example takes to exit when its collector fails.

The first Python block of README.md runs as printed in a fresh process, with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a server on 127.0.0.1 (the test suite's,
tests/backend_servers.py) that accepts, answers slowly (``--slow`` seconds per request),
refuses connections, answers 503, or never answers. A line printed after the loop marks its
end; the time from there to the end of the process is the exit. Shown per kind: the median
and longest of ``--runs`` runs, the exit status and the exit line of the last run::

    python benchmarks/exit_times.py
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The test suite's servers (tests/backend_servers.py), started here on 127.0.0.1.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from backend_servers import BlackHole, OtlpReceiver, refused_endpoint

ROOT = Path(__file__).resolve().parent.parent

KINDS = ("accepts", "slow", "refuses", "503", "black hole")


def first_example() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    return blocks[0] + '\nimport time\nprint("loop-ended", time.time(), flush=True)\n'


def start(kind: str, slow: float) -> tuple[str, object | None]:
    if kind == "refuses":
        return refused_endpoint(), None
    if kind == "black hole":
        hole = BlackHole()
        return hole.endpoint, hole
    server = OtlpReceiver(
        delay=slow if kind == "slow" else 0.0, status=503 if kind == "503" else 200
    )
    return server.endpoint, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per kind")
    parser.add_argument("--slow", type=float, default=1.0, help="the slow server's seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "first_example.py"
        script.write_text(first_example())
        print(f"{'endpoint':<11} {'exit s (median)':>16} {'longest':>8}  status  exit line")
        for kind in KINDS:
            exits, status, line = [], 0, ""
            for _ in range(args.runs):
                endpoint, server = start(kind, args.slow)
                env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
                env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, AGENTTRACE_OUT=f"{tmp}/runs")
                try:
                    done = subprocess.run(
                        [sys.executable, str(script)],
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=300,
                    )
                    ended = time.time()
                finally:
                    if server is not None:
                        server.stop()
                marker = [x for x in done.stdout.splitlines() if x.startswith("loop-ended")]
                if not marker:
                    raise SystemExit(f"{kind}: the example failed:\n{done.stderr}")
                exits.append(ended - float(marker[0].split()[1]))
                status = done.returncode
                lines = [x for x in done.stderr.splitlines() if x.startswith("agenttrace: ")]
                line = lines[-1] if lines else "(no exit line)"
            line = re.sub(r"-> [^,\s]+", "-> ...", line)
            print(
                f"{kind:<11} {statistics.median(exits):>16.2f} {max(exits):>8.2f}  {status:>6}  "
                f"{line}"
            )


if __name__ == "__main__":
    main()
