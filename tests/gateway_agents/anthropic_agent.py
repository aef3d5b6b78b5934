"""An agent no one here instrumented: a tool loop on the Messages API with the official
``anthropic`` Python SDK (tests/test_gateway_agents.py). The client finds its endpoint and key by
itself (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``: ``agenttrace run`` sets the first).

    python anthropic_agent.py MODEL whole|streamed EXIT_CODE QUESTION

prints its own record as JSON (``{"answers": [...], "tool_calls": [{id, name, arguments,
result}], "episode": AGENTTRACE_EPISODE_ID}``) and exits with EXIT_CODE.
"""

import json
import os
import sys

import anthropic

TOOLS = [
    {
        "name": "add",
        "description": "add two numbers",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    }
]


def main(model: str, mode: str, exit_code: str, question: str) -> int:
    client = anthropic.Anthropic(max_retries=0)
    messages: list = [{"role": "user", "content": question}]
    episode = os.environ.get("AGENTTRACE_EPISODE_ID")
    record: dict = {"answers": [], "tool_calls": [], "episode": episode}
    for _ in range(8):
        request = {"model": model, "max_tokens": 256, "system": "be exact", "tools": TOOLS}
        if mode == "streamed":
            with client.messages.stream(messages=messages, **request) as stream:
                reply = stream.get_final_message()
        else:
            reply = client.messages.create(messages=messages, **request)
        record["answers"].append("".join(b.text for b in reply.content if b.type == "text"))
        uses = [block for block in reply.content if block.type == "tool_use"]
        if not uses:
            break
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        results = []
        for use in uses:
            result = str(use.input["a"] + use.input["b"])
            arguments = json.dumps(use.input)
            record["tool_calls"].append(
                {"id": use.id, "name": use.name, "arguments": arguments, "result": result}
            )
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": result})
        messages.append({"role": "user", "content": results})
    print(json.dumps(record), flush=True)
    return int(exit_code)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
