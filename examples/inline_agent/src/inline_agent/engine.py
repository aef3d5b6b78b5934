"""A scripted in-process inference engine (stands in for an SGLang or vLLM engine).

``generate`` answers a chat with a dict shaped like SGLang's native ``/generate`` reply:
``{"text", "meta_info": {"finish_reason": {"type"}, "prompt_tokens", "completion_tokens"}}``.
Tokens are words here. How it plays depends on the persona its system prompt names:

* careful: a binary search on the env's "Higher."/"Lower." hints (right within 6 guesses);
* stubborn: always 1 (the env truncates the episode after its turn limit, unless 1 is right);
* chatty: a binary search, but from its second turn on it explains itself past
  ``max_new_tokens``, and the reply is cut (``finish_reason`` ``length``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from inline_agent.env import MAX_NUMBER

CHATTER = (
    "Let me reason about every number that is still possible before I commit to one, "
    "because the hints so far narrow the range and I want to explain each step"
)


class ScriptedEngine:
    async def generate(
        self, messages: list[dict[str, str]], sampling_params: dict[str, Any]
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        limit = int(sampling_params.get("max_new_tokens", 16))
        persona = re.search(r"You are a (\w+) player", messages[0]["content"])
        turn = sum(1 for m in messages if m["role"] == "assistant")
        kind = persona[1] if persona else "careful"
        if kind == "stubborn":
            text = "1"
        elif kind == "chatty" and turn >= 1:
            text = CHATTER
        else:
            text = str(_binary_search(messages))
        words = text.split()
        cut = len(words) > limit
        return {
            "text": " ".join(words[:limit]),
            "meta_info": {
                "finish_reason": {"type": "length" if cut else "stop"},
                "prompt_tokens": sum(len(m["content"].split()) for m in messages),
                "completion_tokens": min(len(words), limit),
            },
        }


def _binary_search(messages: list[dict[str, str]]) -> int:
    low, high = 1, MAX_NUMBER
    for guess, hint in zip(messages[2::2], messages[3::2], strict=False):
        if guess["content"].isdigit():
            if hint["content"] == "Higher.":
                low = max(low, int(guess["content"]) + 1)
            elif hint["content"] == "Lower.":
                high = min(high, int(guess["content"]) - 1)
    return (low + high) // 2
