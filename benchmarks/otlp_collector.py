"""A stand-in OTLP/HTTP collector on 127.0.0.1, run as its own process by the benchmarks.

It parses each ``/v1/traces`` request (protobuf) and counts its spans; ``GET /count`` answers
``{"spans": N, "requests": M}``. ``--delay`` seconds before each answer make it a slow but
healthy collector. It prints its port on the first line of stdout and runs until killed::

    python benchmarks/otlp_collector.py [--delay 0.3]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def serve(delay: float) -> None:
    counts = {"spans": 0, "requests": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            spans = 0
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        spans += len(scope.spans)
            if delay:
                time.sleep(delay)
            with lock:
                counts["spans"] += spans
                counts["requests"] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            with lock:
                data = json.dumps(counts).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    serve(parser.parse_args().delay)
