"""How deeply JSON nests, measured without letting ``json`` run into the recursion limit.

The codec keeps a value nested deeper than :data:`MAX_DEPTH` as its JSON text (``$json``);
these checks tell such text apart cheaply: for free when it is short or has few brackets, by
a few counts when its brackets are dense, else parsed (orjson reads any depth) and measured a
level at a time.
"""

from __future__ import annotations

import contextlib
import json
import re
from gc import get_referents
from itertools import accumulate
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - optional
    _orjson = None

#: Deepest nesting of lists and objects read or written as JSON: a value nested deeper is kept
#: as its JSON text, tagged ``$json`` (well below Python's recursion limit, which json and the
#: decoder would otherwise hit: at 2 frames a level, 256 levels need about 512).
MAX_DEPTH = 256

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string, escapes included
_BRACKET = re.compile(r"[\[\]{}]")
_LEVEL = {"[": 1, "{": 1, "]": -1, "}": -1}
#: Text this short cannot nest deeper than MAX_DEPTH (each level takes two characters).
DEEP_LENGTH = 2 * MAX_DEPTH
_NOT_PARSED = object()


def is_deep(text: str) -> bool:
    """Whether JSON text nests deeper than :data:`MAX_DEPTH`. Free for short text and text
    with few brackets (which cannot); text with many is told apart by a few counts when its
    brackets are dense, else parsed (orjson reads any depth) and measured a level at a time."""
    if len(text) <= DEEP_LENGTH:
        return False
    return text_deeper(text, text.count("[") + text.count("{")) is True


def text_deeper(text: str, openers: int) -> bool | str | None:
    """Whether text with ``openers`` brackets ``[``/``{`` nests deeper than MAX_DEPTH: False
    (not deeper; JSON or not), True, None (deeper, but not JSON), or "json" (parsed: JSON,
    not deeper)."""
    if openers <= MAX_DEPTH:
        return False
    # Dense brackets: count siblings before parsing. An opener right after a closed sibling
    # ("],[", "},{") goes no deeper than the opener before it (in strings too, where each such
    # pattern also holds the opener it cancels).
    if len(text) < 64 * openers and openers - text.count("],[") - text.count("},{") <= MAX_DEPTH:
        return False
    data: Any = _NOT_PARSED
    if _orjson is not None:
        with contextlib.suppress(Exception):  # refused (NaN, huge numbers, ...): json decides
            data = _orjson.loads(text)
    if data is _NOT_PARSED:
        try:
            data = json.loads(text)
        except ValueError:
            return False
        except RecursionError:  # deeper than json reads: JSON if its brackets balance
            return True if nesting(text)[1] and text.strip()[:1] in ("[", "{") else None
    return True if data_deeper(data) else "json"


def data_deeper(data: Any) -> bool:
    """Whether parsed JSON data nests deeper than MAX_DEPTH: one C call per level."""
    if type(data) is not list and type(data) is not dict:
        return False
    level, depth = [data], 1
    while True:
        level = [c for c in get_referents(*level) if type(c) is list or type(c) is dict]
        if not level:
            return False
        depth += 1
        if depth > MAX_DEPTH:
            return True


def nesting(text: str) -> tuple[int, bool]:
    """(deepest nesting, whether the brackets balance) of JSON text, without parsing it."""
    if '"' in text:
        text = _STRING.sub("", text)
    levels = list(accumulate(map(_LEVEL.__getitem__, _BRACKET.findall(text))))
    if not levels:
        return 0, True
    return max(levels), levels[-1] == 0 and min(levels) >= 0
