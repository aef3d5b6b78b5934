"""Logging inside the user's process: each kind of problem once, the program always goes on.

The tracing API, env wrappers and propagation helpers run on the user's threads; an
internal failure there is logged once per place (with its traceback) and swallowed.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

logger = logging.getLogger("agenttrace")

_warned: set[str] = set()


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log ``message`` the first time ``key`` comes up."""
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)


def internal_error(where: str) -> None:
    """Log the exception being handled, once per ``where``; call it from an except block.

    A RecursionError is logged without its traceback (a thousand identical frames)."""
    if where not in _warned:
        _warned.add(where)
        exc = sys.exc_info()[1]
        if isinstance(exc, RecursionError):
            logger.error(
                "agenttrace: internal error in %s (RecursionError: %s); your program goes on",
                where,
                exc,
            )
            return
        logger.exception("agenttrace: internal error in %s; your program goes on", where)
