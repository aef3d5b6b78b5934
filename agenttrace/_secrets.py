"""Which names must never be recorded (arguments, dict keys, headers)."""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

_SECRET_NAME = re.compile(
    r"(api[_-]?key|apikey|token|passw(or)?d|passphrase|secret|authorization|auth[_-]?header"
    r"|credential|cookie|private[_-]?key|session[_-]?key)",
    re.IGNORECASE,
)
_cache: dict[str, bool] = {}


def is_secret_name(name: str) -> bool:
    """True for names like ``api_key``, ``x-auth-token``, ``Authorization``, ``db_password``.

    Cached: the same few argument and key names are checked on every step.
    """
    known = _cache.get(name)
    if known is None:
        known = bool(_SECRET_NAME.search(name))
        if len(_cache) < 10_000:
            _cache[name] = known
    return known
