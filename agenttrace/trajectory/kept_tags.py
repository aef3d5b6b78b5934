"""Tagged values a process keeps as it read them, so they re-encode byte for byte.

A process that cannot import a user's type (the writer helper, ``agenttrace export``) reads
its ``$enum``, ``$dataclass`` or ``$pydantic`` object as data, not as the value; so it reads
``$unserializable`` and ``$json`` markers, and tags the codec does not know (``$blob``,
``$truncated``, a newer version's). The codec's decoder returns them as a :class:`Tagged`,
which its encoder writes back as the very JSON it was read from. A plain one-key ``$`` dict
is a user's dict, which the encoder escapes as ``$dict`` (docs/trajectory-format.md).
"""

from __future__ import annotations

import json
from typing import Any

#: The fallback marker's tag: it stands for no value, so it is no dict key or set item.
UNSERIALIZABLE_TAG = "$unserializable"


class Tagged(dict):
    """A tagged object kept as it was read. A dict (``tag in value`` and ``==`` work as for
    the plain dict) that the codec encodes back to the same JSON. Hashable, by its JSON
    text, so it can be a set item or a dict key as the value it stands for would be; an
    ``$unserializable`` marker cannot (two such keys would be one)."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        if UNSERIALIZABLE_TAG in self:
            raise TypeError("an $unserializable marker is no value: it cannot be a key")
        try:
            return hash(json.dumps(self, sort_keys=True, default=repr))
        except (TypeError, ValueError, RecursionError):  # (not JSON data: equal ones agree)
            return hash(len(self))


def holds_kept(value: Any) -> bool:
    """Whether decoded data holds a :class:`Tagged` anywhere (a pydantic model built around
    one would lose it: ``model_dump`` copies it to a plain dict)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is Tagged:
            return True
        if isinstance(item, dict):
            stack += [*item, *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += item
    return False
