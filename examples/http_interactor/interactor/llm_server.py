"""A tiny OpenAI-compatible chat server with scripted answers (stands in for vLLM or SGLang).

It serves one model, named after the policy weights it "loaded" (the policy version), at
``POST /v1/chat/completions``. Answers are scripted from the sum the environment asks about
and from how many times the policy already answered, so each kind of episode shows up:

* ``(a + b) % 4 == 0``: right at once;
* ``== 1``: wrong, then right;
* ``== 2``: always wrong (the environment truncates the episode after its turn limit);
* ``== 3``: wrong, then a rambling answer cut at ``max_tokens`` (``finish_reason == "length"``).

Tokens are words here. Only loopback: the server binds 127.0.0.1 on a port the OS picks.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")
RAMBLE = (
    "Let me think about this very carefully and explain every single step of the addition "
    "before I give the final answer so that nothing is missed along the way"
)


class ScriptedPolicy:
    """Decides what the "model" says; pure, so tests of the example can predict it."""

    def answer(self, messages: list[dict[str, Any]], max_tokens: int) -> tuple[str, str]:
        """The reply text and its finish reason for this conversation."""
        question = next(
            (QUESTION.search(m.get("content") or "") for m in messages if m["role"] == "user"),
            None,
        )
        if question is None:
            return "I do not know.", "stop"
        a, b = int(question[1]), int(question[2])
        turn = sum(1 for m in messages if m["role"] == "assistant")
        kind = (a + b) % 4
        if kind == 0 or (kind == 1 and turn >= 1):
            return str(a + b), "stop"
        if kind == 3 and turn >= 1:
            words = RAMBLE.split()
            return " ".join(words[:max_tokens]), "length" if len(words) > max_tokens else "stop"
        return str(a + b + 1 + turn), "stop"


class ChatCompletionsServer:
    """``ThreadingHTTPServer`` answering chat completions for one served model."""

    def __init__(self, served_model: str, policy: ScriptedPolicy | None = None) -> None:
        self.served_model = served_model
        self.policy = policy or ScriptedPolicy()
        self._count = 0
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="llm-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def start(self) -> ChatCompletionsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)

    def complete(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """HTTP status and JSON body for one chat completion request."""
        if request.get("model") != self.served_model:
            error = {"message": f"model {request.get('model')!r} is not served", "type": "invalid"}
            return 404, {"error": error}
        messages = request["messages"]
        max_tokens = int(request.get("max_tokens") or 64)
        text, finish_reason = self.policy.answer(messages, max_tokens)
        with self._lock:
            self._count += 1
            number = self._count
        prompt_tokens = sum(len((m.get("content") or "").split()) for m in messages)
        completion_tokens = len(text.split())
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served_model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep the example's output readable
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    request = json.loads(body)
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                self._send(*server.complete(request))

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
