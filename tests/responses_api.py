"""What the loopback test server (test_openai_genai.ChatServer) answers on /v1/responses.

The bodies follow OpenAI's Responses API reference (the ``Response`` object, its ``message``
and ``function_call`` output items, ``usage``) and its streaming events
(``response.created`` ... ``response.completed``, each with a ``sequence_number``; no
``[DONE]``), which vLLM's /v1/responses sends alike. The rules mirror the chat route's: a
request offering function tools whose last input item is the user's gets a call of the first
tool; otherwise a text answer naming the last input; ``max_output_tokens=16`` (the API's
least) cuts the answer: ``incomplete``.
"""

from __future__ import annotations

import json
from typing import Any

#: The arguments the server's function calls carry (the test tools take a city).
CALL_ARGUMENTS = {"city": "Paris"}


def last_text(request: dict) -> str:
    """The text of the request's last input: text, a message's text parts, a tool output."""
    items = request.get("input")
    if isinstance(items, str):
        return items
    if not items:
        return ""
    last = items[-1]
    content = last.get("content", last.get("output"))
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _asks_for_a_tool(request: dict) -> str | None:
    """The first function tool's name, when the user spoke last and tools are offered."""
    tools = [tool for tool in request.get("tools") or () if tool.get("type") == "function"]
    items = request.get("input")
    user_last = isinstance(items, str) or (
        bool(items) and items[-1].get("role") == "user" and items[-1].get("type") != "reasoning"
    )
    return tools[0]["name"] if tools and user_last else None


def answer(request: dict, n: int) -> dict[str, Any]:
    """The n-th exchange's ``Response`` body for ``request``."""
    tool = _asks_for_a_tool(request)
    if tool is not None:
        output = [
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": tool,
                "arguments": json.dumps(CALL_ARGUMENTS),
                "status": "completed",
            }
        ]
    else:
        text = f"answer {n} to {last_text(request)}"
        output = [
            {
                "type": "message",
                "id": f"msg_{n}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    cut = request.get("max_output_tokens") == 16
    items = request.get("input")
    input_tokens = 10 + (1 if isinstance(items, str) else len(items or ()))
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "incomplete" if cut else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request["model"] + "-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3 + n,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + 3 + n,
        },
        "user": None,
        "metadata": {},
    }


def events(response: dict) -> list[dict[str, Any]]:
    """``response`` as the stream of events that delivers it."""
    found: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        found.append({"type": kind, "sequence_number": len(found), **fields})

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=started)
    emit("response.in_progress", response=started)
    for index, item in enumerate(response["output"]):
        where = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            emit("response.output_item.added", output_index=index, item={**item, "content": []})
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            emit("response.content_part.added", **where, content_index=0, part=part)
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                emit(
                    "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
                )
            emit("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            emit("response.content_part.done", **where, content_index=0, part=item["content"][0])
        else:
            emit("response.output_item.added", output_index=index, item={**item, "arguments": ""})
            arguments = item["arguments"]
            emit("response.function_call_arguments.delta", **where, delta=arguments)
            emit("response.function_call_arguments.done", **where, arguments=arguments)
        emit("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    emit(final, response=response)
    return found
