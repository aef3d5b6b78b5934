"""Safe file names for episode ids, and JSON text that encodes to UTF-8 whatever it holds.

Episode ids come from users and environments, so they may hold anything: ``/``, ``..``, NUL,
control characters, 10 000 characters. :func:`safe_filename` turns any id into one path
component that cannot leave its folder, and different ids into different names.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

#: Longest kept part of an id in a file name (before the hash and suffix).
MAX_NAME_CHARS = 120
#: Hex digits of sha1 appended when a name had to be changed or cut.
HASH_CHARS = 16

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# A name that already ends like one of our hash tags is tagged again, so an id can never
# pose as the changed form of another id.
_LOOKS_TAGGED = re.compile(r"-[0-9a-f]{%d}$" % HASH_CHARS)
_SAFE_SUFFIX = re.compile(r"[A-Za-z0-9._-]*")
# Device names Windows reserves whatever the extension.
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{i}" for i in range(1, 10)}
    | {f"LPT{i}" for i in range(1, 10)}
)


def safe_filename(name: str, *, suffix: str = "") -> str:
    """One path component for ``name`` that cannot escape its folder and never collides.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``; a leading dot, an empty name, a
    trailing dot, Windows device names and names over :data:`MAX_NAME_CHARS` are fixed too.
    Whenever anything was changed or cut, ``-`` and the first :data:`HASH_CHARS` hex digits
    of the sha1 of the original are appended, so two different ids never share a name. Names
    with upper-case letters are tagged the same way, so they stay distinct on case-insensitive
    file systems (macOS, Windows).
    """
    if not isinstance(name, str):
        raise TypeError(f"safe_filename needs a str, got {type(name).__name__}")
    if not _SAFE_SUFFIX.fullmatch(suffix) or suffix in (".", ".."):
        raise ValueError(f"unsafe file name suffix {suffix!r}")
    cleaned = _UNSAFE.sub("_", name)
    if cleaned.startswith("."):
        cleaned = "_" + cleaned[1:]
    if cleaned.endswith("."):
        cleaned = cleaned[:-1] + "_"
    if not cleaned:
        cleaned = "_"
    if cleaned.split(".", 1)[0].upper() in _WINDOWS_RESERVED:
        cleaned = "_" + cleaned
    cut = cleaned[:MAX_NAME_CHARS]
    changed = cut != name or _LOOKS_TAGGED.search(name) is not None or name.lower() != name
    if changed:
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()
        cut = f"{cut}-{digest[:HASH_CHARS]}"
    return cut + suffix


def utf8_safe(text: str) -> str:
    """JSON text that encodes to UTF-8 even if it holds lone surrogates.

    ``json.dumps(..., ensure_ascii=False)`` keeps a lone surrogate (e.g. from a file name
    decoded with ``surrogateescape``) as a raw character, which UTF-8 cannot encode. Written
    as the JSON escape ``\\udcff`` instead, it decodes back to the same string (except a
    surrogate *pair* held as two code points, which comes back as the character it encodes).
    """
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def resolve_inside(folder: str | os.PathLike, name: str, *, suffix: str = "") -> Path:
    """``folder / safe_filename(name)``, checked to resolve inside ``folder``.

    The check also catches a symlink planted at that name pointing elsewhere.
    """
    base = Path(folder)
    path = base / safe_filename(name, suffix=suffix)
    resolved_base = base.resolve()
    resolved = path.resolve()
    if resolved.parent != resolved_base:
        raise ValueError(f"refusing to write {name!r}: {resolved} is outside {resolved_base}")
    return path
