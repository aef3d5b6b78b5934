"""Which names must never be recorded (arguments, dict keys, headers).

Names are split into lower-case words (``x-auth-token`` -> x, auth, token;
``openaiApiKey`` -> openai, api, key) and matched word by word, so ``max_tokens``,
``token_ids`` or ``secretary`` stay recordable while ``access_token``, ``OPENAI_API_KEY``,
``Authorization`` and ``db_password`` do not.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

_SECRET_WORDS = frozenset(
    {
        "apikey",
        "token",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "secrets",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "bearer",
    }
)
_SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("session", "key"),
        ("secret", "key"),
        ("access", "key"),
        ("auth", "header"),
        ("auth", "key"),
        ("signing", "key"),
    }
)
# "token" after or before these words is an LLM token count or id list, not a credential
# (max_tokens, token_ids); "id_token" or "refresh_token" stay secret.
_COUNT_WORDS_BEFORE_TOKEN = frozenset(
    {"max", "num", "n", "input", "output", "total", "prompt", "completion", "cached"}
)
_COUNT_WORDS_AFTER_TOKEN = frozenset(
    {"ids", "id", "count", "counts", "usage", "type", "types", "len", "length", "limit", "per"}
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_cache: dict[str, bool] = {}


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(name)]


def _is_secret(name: str) -> bool:
    words = _words(name)
    for i, word in enumerate(words):
        if word in _SECRET_WORDS:
            if word == "token" and (
                (i > 0 and words[i - 1] in _COUNT_WORDS_BEFORE_TOKEN)
                or (i + 1 < len(words) and words[i + 1] in _COUNT_WORDS_AFTER_TOKEN)
            ):
                continue
            return True
        if i + 1 < len(words) and (word, words[i + 1]) in _SECRET_PAIRS:
            return True
    return False


def is_secret_name(name: str) -> bool:
    """True for names like ``api_key``, ``x-auth-token``, ``Authorization``, ``db_password``.

    Cached: the same few argument and key names are checked on every step.
    """
    known = _cache.get(name)
    if known is None:
        known = _is_secret(name)
        if len(_cache) < 10_000:
            _cache[name] = known
    return known


def without_secrets(data: Any) -> Any:
    """A copy of JSON data with the value under every secret-named key replaced by REDACTED,
    however deep the data nests (walked without recursion); the data itself is left as it is."""
    top = [data]
    work: list[tuple[Any, Any]] = [(top, 0)]
    while work:
        holder, at = work.pop()
        value = holder[at]
        if isinstance(value, dict):
            copy = {
                key: REDACTED if isinstance(key, str) and is_secret_name(key) else item
                for key, item in value.items()
            }
            holder[at] = copy
            work.extend((copy, key) for key, item in copy.items() if isinstance(item, (dict, list)))
        elif isinstance(value, list):
            copy = list(value)
            holder[at] = copy
            work.extend((copy, i) for i, item in enumerate(copy) if isinstance(item, (dict, list)))
    return top[0]
