"""The two ways spans reach ``agenttrace collect``: OTLP over HTTP and OTLP over gRPC.

Both hand the request's bytes to :meth:`Collector.receive
<agenttrace.collect.collector.Collector.receive>` and turn its outcome into OTLP's answers
(https://opentelemetry.io/docs/specs/otlp/):

* taken (perhaps partly): success, with ``partial_success`` counting the spans refused;
* :class:`~agenttrace.collect.collector.Busy`: HTTP 503 with ``Retry-After``, gRPC
  ``UNAVAILABLE``: statuses the SDK exporters retry;
* :class:`~agenttrace.collect.collector.Unreadable`: HTTP 400, gRPC ``INVALID_ARGUMENT``: not
  retried.

HTTP runs on aiohttp (the ``serve`` extra, the one HTTP stack of the service, the viewer and the
gateway); the request's work runs in a thread so the event loop keeps answering. gRPC runs on
grpcio, which comes with the OTLP exporter; its handler takes the request's bytes as they came,
so the span log holds exactly what was sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agenttrace.collect.collector import Busy, Collector, Receipt, Unreadable
from agenttrace.collect.http_server import MAX_REQUEST_BYTES

__all__ = ["TRACES_PATH", "add_trace_routes", "start_grpc_server"]

logger = logging.getLogger("agenttrace")

TRACES_PATH = "/v1/traces"
HEALTH_PATH = "/health"
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


def _response_message(receipt: Receipt | None) -> Any:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    response = trace_service_pb2.ExportTraceServiceResponse()
    if receipt is not None and receipt.rejected:
        response.partial_success.rejected_spans = receipt.rejected
        response.partial_success.error_message = receipt.message
    return response


# --- HTTP ---------------------------------------------------------------------------------------


def add_trace_routes(app: Any, collector: Collector, executor: ThreadPoolExecutor) -> None:
    """``POST /v1/traces`` and ``GET /health`` on an aiohttp application."""
    from aiohttp import web

    async def traces(request: web.Request) -> web.Response:
        content_type = request.content_type
        if content_type not in (_PROTOBUF, _JSON):
            return web.Response(
                status=415,
                text=f"Content-Type must be {_PROTOBUF} or {_JSON}, got {content_type}",
            )
        body = await request.read()  # (aiohttp undoes Content-Encoding: gzip, deflate)
        loop = asyncio.get_running_loop()
        try:
            receipt = await loop.run_in_executor(executor, collector.receive, body)
        except Busy as busy:
            return web.Response(
                status=503,
                text=str(busy),
                headers={"Retry-After": str(busy.retry_after)},
            )
        except Unreadable as bad:
            return web.Response(status=400, text=f"no spans could be read: {bad}")
        if content_type == _JSON:
            answer: dict[str, Any] = {}
            if receipt.rejected:
                answer["partialSuccess"] = {
                    "rejectedSpans": str(receipt.rejected),
                    "errorMessage": receipt.message,
                }
            return web.Response(text=json.dumps(answer), content_type=_JSON)
        return web.Response(
            body=_response_message(receipt).SerializeToString(), content_type=_PROTOBUF
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response(collector.health())

    app.router.add_post(TRACES_PATH, traces)
    app.router.add_get(HEALTH_PATH, health)


# --- gRPC ---------------------------------------------------------------------------------------


def start_grpc_server(collector: Collector, address: str, *, workers: int = 8) -> tuple[Any, int]:
    """A started gRPC server with OTLP's TraceService on ``address`` (``host:port``; port 0
    picks a free one). Returns the server and its port."""
    import grpc

    def export(payload: bytes, context: Any) -> Any:
        try:
            receipt = collector.receive(payload)
        except Busy as busy:
            context.set_trailing_metadata((("retry-after", str(busy.retry_after)),))
            context.abort(grpc.StatusCode.UNAVAILABLE, str(busy))
        except Unreadable as bad:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no spans could be read: {bad}")
        return _response_message(receipt)

    handler = grpc.method_handlers_generic_handler(
        _GRPC_SERVICE,
        {
            "Export": grpc.unary_unary_rpc_method_handler(
                export,
                request_deserializer=None,  # the bytes as they came, for the span log
                response_serializer=lambda message: message.SerializeToString(),
            )
        },
    )
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agenttrace-collect-grpc"),
        options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(address)
    if not port:
        raise OSError(f"cannot listen for gRPC on {address}")
    server.start()
    return server, port
