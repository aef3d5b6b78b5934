"""Agenttrace's value encoding: observations, actions and info as faithful JSON.

Plain JSON values (None, bool, int, finite float, str, lists, dicts with string keys) are
written as themselves. Everything else becomes a one-key object whose key starts with ``$``
(the full table is in docs/trajectory-format.md):

======================  ===============================================================
``$float``              "nan", "inf" or "-inf" (JSON has no such numbers)
``$tuple``              list of items
``$bytes``              base64 text
``$dict``               list of ``[key, value]`` pairs: non-string keys, or a user dict
                        that would otherwise look like one of these tags
``$set``/``$frozenset`` list of items
``$ndarray``            ``{"dtype", "shape", "data"}`` (nested list) for small numeric or
                        string arrays, ``{"dtype", "shape", "b64"}`` (raw C-order bytes)
                        otherwise
``$numpy``              ``{"dtype", "value"}`` for a numpy scalar (``"b64"`` raw bytes
                        for complex, datetime and other non-JSON scalars)
``$dataclass``          ``{"type": "module:QualName", "fields": {...}}``
``$pydantic``           ``{"type": "module:QualName", "fields": {...}}``
``$enum``               ``{"type": "module:QualName", "value": ...}``
``$datetime``           ISO 8601 text (``$date`` for dates)
``$unserializable``     ``{"type", "repr"}``: the fallback, with an
                        :class:`UnserializableValueWarning`; decodes to itself
``$json``               JSON text of a value nested deeper than :data:`MAX_DEPTH`, kept
                        unparsed; decodes to itself
======================  ===============================================================

Nesting has one limit, :data:`MAX_DEPTH` levels of lists and objects, on every path that
encodes or decodes JSON: a value nested deeper is written (and read) as
``{"$json": "<its JSON text>"}``, so whatever is written can be read back.

Decoding gives equal objects back. Dataclasses, pydantic models and enums are rebuilt when
their class can be found among the modules already imported (decoding never imports code);
otherwise they stay as their tagged dict, a :class:`~agenttrace.trajectory.kept_tags.Tagged`,
as do ``$unserializable``, ``$json`` and tags this codec does not know: a Tagged re-encodes to
the same JSON, byte for byte, in any process. Sets are written in one order (their items'
JSON text sorted), so they too re-encode as they were read.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import json
import math
import sys
import warnings
from typing import Any

import numpy as np

try:  # optional (otel-agenttrace[fast]): checks untrusted content text ~5x faster than json
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - exercised by tests that hide it
    _msgspec = None
try:  # used when installed and msgspec is not
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by tests that hide it
    _orjson = None

from agenttrace._secrets import REDACTED, is_secret_name, without_secrets
from agenttrace.trajectory.json_depth import (
    DEEP_LENGTH,
    MAX_DEPTH,
    data_deeper,
    text_deeper,
)
from agenttrace.trajectory.kept_tags import Tagged, holds_kept

#: Arrays up to this many elements are written as readable nested lists.
INLINE_ARRAY_LIMIT = 1024
#: Length of repr() kept by the fallback.
REPR_LIMIT = 1000
#: Tag of a value nested deeper than MAX_DEPTH: ``{"$json": "<JSON text>"}``.
DEEP_TAG = "$json"

_TAGS = frozenset(
    {
        "$float",
        "$tuple",
        "$bytes",
        "$dict",
        "$set",
        "$frozenset",
        "$ndarray",
        "$numpy",
        "$dataclass",
        "$pydantic",
        "$enum",
        "$datetime",
        "$date",
        "$unserializable",
        DEEP_TAG,
    }
)
_warned_types: set[str] = set()
#: What a ``$float`` holds, and the float each reads as.
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class UnserializableValueWarning(UserWarning):
    """A value had no faithful JSON form and was recorded as its repr()."""


class ValueDecodeError(ValueError):
    """Text is not valid JSON in agenttrace's value encoding."""


# --- encoding --------------------------------------------------------------------------


def _type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _encode_float(value: float, depth: int) -> Any:
    if math.isfinite(value):
        return value
    if depth >= MAX_DEPTH:  # ({"$float": "nan"}: one level)
        raise _TooDeep
    return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}


class _TooDeep(Exception):
    """A value nests deeper than MAX_DEPTH (raised by the encoder and decoder, caught at the
    top, where the whole value becomes its ``$json`` form)."""


def _encode_ndarray(array: np.ndarray, redact: bool, depth: int) -> dict:
    # {"$ndarray": {..., "data": [...]}}: the data list is 3 levels in, nested lists ndim deep
    kind = array.dtype.kind
    if depth + 3 > MAX_DEPTH:  # (the shape list, in every form, is 3 levels in)
        raise _TooDeep
    header = {"dtype": array.dtype.str, "shape": list(array.shape)}
    if kind == "O":
        header["data"] = [_encode(item, redact, depth + 3) for item in array.ravel().tolist()]
        return {"$ndarray": header}
    if (array.size <= INLINE_ARRAY_LIMIT and kind in "biuU") or (
        kind == "f" and array.size <= INLINE_ARRAY_LIMIT and bool(np.isfinite(array).all())
    ):
        if depth + 2 + array.ndim > MAX_DEPTH:  # (the data list's levels: ndim)
            raise _TooDeep
        header["data"] = array.tolist()
        return {"$ndarray": header}
    header["b64"] = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
    return {"$ndarray": header}


def _encode_dict(value: dict, redact: bool, depth: int) -> Any:
    """A dict ``depth`` containers in: plain (one level) or ``$dict`` pairs (three)."""
    plain = True
    for key in value:
        if type(key) is not str:
            plain = False
            break
    if plain and not (len(value) == 1 and next(iter(value)).startswith("$")):
        if depth >= MAX_DEPTH:
            raise _TooDeep
        inner = depth + 1
        out = {}
        for key, item in value.items():
            if redact and is_secret_name(key):
                out[key] = REDACTED
            else:
                out[key] = _encode(item, redact, inner)
        return out
    if depth + 3 > MAX_DEPTH:
        raise _TooDeep
    inner = depth + 3
    pairs = []
    for key, item in value.items():
        if redact and isinstance(key, str) and is_secret_name(key):
            item = REDACTED
        pairs.append([_encode(key, redact, inner), _encode(item, redact, inner)])
    return {"$dict": pairs}


def _fallback(value: Any, depth: int) -> dict:
    if depth + 2 > MAX_DEPTH:  # ({"$unserializable": {...}}: two levels)
        raise _TooDeep
    path = _type_path(type(value))
    if path not in _warned_types:
        _warned_types.add(path)
        warnings.warn(
            f"agenttrace: values of type {path} have no faithful JSON form; "
            f"recording them as repr() (a '$unserializable' object)",
            UnserializableValueWarning,
            stacklevel=4,
        )
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not break the user's loop
        text = f"<repr failed: {type(exc).__name__}>"
    return {"$unserializable": {"type": path, "repr": text[:REPR_LIMIT]}}


def encode(value: Any, *, redact_secrets: bool = False) -> Any:
    """Turn ``value`` into plain JSON data (dicts, lists, str, numbers, bool, None).

    Never raises for odd values: anything without a faithful form takes the documented
    ``$unserializable`` fallback, and a value whose lists and objects nest deeper than
    :data:`MAX_DEPTH` becomes ``{"$json": "<its JSON text>"}``. With ``redact_secrets`` the
    values of dict keys named like secrets (api_key, token, password, authorization, ...) are
    replaced by ``[REDACTED]``. Raises RecursionError only for a container that holds itself.
    """
    try:
        return _encode(value, redact_secrets, 0)
    except (_TooDeep, RecursionError):
        return {DEEP_TAG: _deep_text(value, redact_secrets)}


def _encode(value: Any, redact: bool, depth: int) -> Any:
    """``encode`` of a value inside ``depth`` JSON containers (_TooDeep past MAX_DEPTH)."""
    cls = type(value)
    if cls is str or cls is int or cls is bool or value is None:
        return value
    if cls is float:
        return _encode_float(value, depth)
    if cls is list:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        depth += 1
        return [_encode(item, redact, depth) for item in value]
    if cls is dict:
        return _encode_dict(value, redact, depth)
    if cls is Tagged:
        return _kept(value, redact, depth)
    if cls is np.ndarray:
        return _encode_ndarray(value, redact, depth)
    if cls is tuple:
        return {"$tuple": _items(value, redact, depth)}
    if isinstance(value, np.generic):
        if depth + 2 > MAX_DEPTH:
            raise _TooDeep
        item = value.item()
        if isinstance(item, (bool, int, float, str)) and value.dtype.kind not in "mM":
            return {"$numpy": {"dtype": value.dtype.str, "value": _encode(item, False, depth + 2)}}
        raw = base64.b64encode(value.tobytes()).decode("ascii")
        return {"$numpy": {"dtype": value.dtype.str, "b64": raw}}
    if isinstance(value, (bytes, bytearray, memoryview)):
        if depth >= MAX_DEPTH:
            raise _TooDeep
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        if depth + 2 > MAX_DEPTH:
            raise _TooDeep
        return {"$enum": {"type": _type_path(cls), "value": _encode(value.value, False, depth + 2)}}
    if isinstance(value, bool):  # bool subclasses (rare) before int
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _encode_float(float(value), depth)
    if isinstance(value, str):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {
            "$dataclass": {
                "type": _type_path(cls),
                "fields": _encode_dict(fields, redact, depth + 2),
            }
        }
    if hasattr(value, "model_dump") and hasattr(cls, "model_fields"):
        try:
            fields = value.model_dump(mode="python")
        except Exception:
            return _fallback(value, depth)
        return {
            "$pydantic": {
                "type": _type_path(cls),
                "fields": _encode_dict(fields, redact, depth + 2),
            }
        }
    if isinstance(value, _dt.date):  # ($datetime or $date: one level)
        if depth >= MAX_DEPTH:
            raise _TooDeep
        if isinstance(value, _dt.datetime):
            return {"$datetime": value.isoformat()}
        return {"$date": value.isoformat()}
    if isinstance(value, (set, frozenset)):  # (one order in every process: see module doc)
        tag = "$frozenset" if isinstance(value, frozenset) else "$set"
        return {tag: sorted(_items(value, redact, depth), key=_dump)}
    if isinstance(value, dict):
        return _encode_dict(dict(value), redact, depth)
    if isinstance(value, list):  # subclasses
        if depth >= MAX_DEPTH:
            raise _TooDeep
        return [_encode(item, redact, depth + 1) for item in value]
    if isinstance(value, tuple):  # subclasses such as NamedTuple
        return {"$tuple": _items(value, redact, depth)}
    return _fallback(value, depth)


def _kept(data: Any, redact: bool, depth: int) -> Any:
    """A :class:`Tagged`'s JSON data as read (already encoded: copied, not escaped), checked
    against MAX_DEPTH; anything else a caller put into it is encoded."""
    cls = type(data)
    if cls is dict or cls is Tagged:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        if not all(type(key) is str for key in data):  # not JSON data: an ordinary dict
            return _encode_dict(dict(data), redact, depth)
        return {
            key: REDACTED if redact and is_secret_name(key) else _kept(item, redact, depth + 1)
            for key, item in data.items()
        }
    if cls is list:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        return [_kept(item, redact, depth + 1) for item in data]
    return _encode(data, redact, depth)  # (scalars as they are; NaN as {"$float": "nan"})


def _items(value: Any, redact: bool, depth: int) -> list:
    """The list of a tagged container (``{"$tuple": [...]}``: two levels) ``depth`` in."""
    if depth + 2 > MAX_DEPTH:
        raise _TooDeep
    depth += 2
    return [_encode(item, redact, depth) for item in value]


_dump = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def dumps(value: Any, *, redact_secrets: bool = False) -> str:
    """``encode`` then compact JSON text. Never raises for odd values."""
    cls = type(value)
    if cls is int:
        return "%d" % value
    if cls is str:
        return _dump(value)
    if value is None:
        return "null"
    if cls is bool:
        return "true" if value else "false"
    if (
        cls is np.ndarray
        and value.dtype.kind == "f"
        and value.size <= 64
        and value.ndim == 1
        and np.isfinite(value).all()
    ):
        # Hot path: small float vectors (most RL observations).
        return '{"$ndarray":{"dtype":"%s","shape":[%d],"data":%s}}' % (
            value.dtype.str,
            value.shape[0],
            _dump(value.tolist()),
        )
    try:
        return _dump(_encode(value, redact_secrets, 0))
    except (_TooDeep, RecursionError):  # (a container holding itself re-raises RecursionError)
        return _deep_json(_deep_text(value, redact_secrets))


# --- nesting past MAX_DEPTH -------------------------------------------------------------------


def _deep_json(text: str) -> str:
    """The ``$json`` form of JSON text nested deeper than MAX_DEPTH (itself two levels)."""
    return '{"%s":%s}' % (DEEP_TAG, _dump(text))


class _Leave(int):
    """Work item of _deep_text: a container (by id) whose items are all written."""


class _Text(str):
    """Work item of _deep_text: text written as it is."""


def _deep_text(value: Any, redact: bool) -> str:
    """JSON text of a value nested too deeply for the recursive encoder, written without
    recursion: lists, tuples, sets and dicts one item at a time, anything else by ``_encode``.
    Raises RecursionError for a container that holds itself."""
    parts: list[str] = []
    path: set[int] = set()  # the containers being written
    work: list[Any] = [value]
    while work:
        item = work.pop()
        cls = type(item)
        if cls is _Text:
            parts.append(item)
            continue
        if cls is _Leave:
            path.discard(item)
            continue
        if cls is Tagged:  # (its JSON as read, however deep: this text is a $json's)
            try:
                parts.append(_dump(_kept(item, redact, 0)))
            except (_TooDeep, RecursionError):
                parts.append(_data_text(without_secrets(item) if redact else dict(item)))
            continue
        if not isinstance(item, (list, tuple, dict, set, frozenset)) or (
            isinstance(item, tuple) and not _plain_container(item)
        ):
            try:
                parts.append(_dump(_encode(item, redact, 0)))
            except (_TooDeep, RecursionError):  # deep inside an object: its type only
                parts.append(_dump(_fallback_deep(item)))
            continue
        ident = id(item)
        if ident in path:
            raise RecursionError("a container that holds itself has no JSON form")
        path.add(ident)
        entries: list[Any] = []
        if isinstance(item, dict):
            keys_plain = all(type(key) is str for key in item)
            if keys_plain and not (len(item) == 1 and next(iter(item)).startswith("$")):
                head, tail = "{", "}"
                for key, child in item.items():
                    if redact and is_secret_name(key):
                        child = REDACTED
                    entries += [_Text(_dump(key) + ":"), child, _Text(",")]
            else:
                head, tail = '{"$dict":[', "]}"
                for key, child in item.items():
                    if redact and isinstance(key, str) and is_secret_name(key):
                        child = REDACTED
                    entries += [_Text("["), key, _Text(","), child, _Text("]"), _Text(",")]
        else:
            if isinstance(item, list):
                head, tail = "[", "]"
            elif isinstance(item, tuple):
                head, tail = '{"$tuple":[', "]}"
            else:
                head = '{"$frozenset":[' if isinstance(item, frozenset) else '{"$set":['
                tail = "]}"
            for child in item:
                entries += [child, _Text(",")]
        if entries:
            entries.pop()  # the last comma
        parts.append(head)
        work.append(_Leave(ident))
        work.append(_Text(tail))
        work.extend(reversed(entries))
    return "".join(parts)


def _plain_container(value: tuple) -> bool:
    """Whether a tuple encodes as ``$tuple`` (NamedTuples do too; see _encode)."""
    return not (dataclasses.is_dataclass(value) or hasattr(value, "model_dump"))


def _fallback_deep(value: Any) -> dict:
    return {"$unserializable": {"type": _type_path(type(value)), "repr": "<nested too deeply>"}}


class RawJSON(str):
    """Valid JSON text in this encoding, kept undecoded until someone reads the value.

    The live rebuild moves observations and actions from span attributes to trajectory files
    as text, without a decode/encode round trip per step.
    """

    __slots__ = ()


def json_text(value: Any) -> str:
    """JSON text of a value, reusing :class:`RawJSON` text as is."""
    return value if type(value) is RawJSON else dumps(value)


def as_raw_json(text: str, *, trusted: bool) -> RawJSON | str:
    """Wrap attribute text for lazy decoding; untrusted text must parse, else stays a str
    (and text nested deeper than MAX_DEPTH becomes its ``$json`` form: see checked_json)."""
    if trusted:
        return RawJSON(text)
    if len(text) <= DEEP_LENGTH:  # (checked_json, one call less)
        return RawJSON(text) if is_json(text) else text
    return checked_json(text)


_deep_texts = 0  # texts checked_json kept as $json
_last_checked: str | None = None  # the last long text checked_json took as JSON


def deep_texts() -> int:
    """How many texts :func:`checked_json` has kept as ``$json`` in this process (the
    assembler looks for them in what it built when this rose)."""
    return _deep_texts


def is_deep_json(value: Any) -> bool:
    """Whether ``value`` is RawJSON text in the ``$json`` form."""
    return type(value) is RawJSON and value.startswith('{"%s":' % DEEP_TAG)


def checked_json(text: str) -> RawJSON | str:
    """Untrusted text as content: :class:`RawJSON` when it is JSON nested at most
    :data:`MAX_DEPTH` levels; its ``$json`` form (RawJSON) when it nests deeper; otherwise the
    text itself, a plain ``str``. Never raises RecursionError. Costs nothing over
    :func:`is_json` for text that is short or has at most MAX_DEPTH brackets."""
    global _deep_texts, _last_checked
    if len(text) <= DEEP_LENGTH:
        return RawJSON(text) if is_json(text) else text
    if text == _last_checked:  # (a step's observation is the previous step's result)
        return RawJSON(text)
    openers = text.count("[") + text.count("{")
    deep = text_deeper(text, openers)
    if deep is False:
        if not is_json(text, openers):
            return text
    elif deep is None:
        return text
    elif deep is True:
        _deep_texts += 1
        return RawJSON(_deep_json(text))
    _last_checked = text  # (deep is "json": parsed, within MAX_DEPTH)
    return RawJSON(text)


# Short texts that recur in every step ("{}" infos, discrete actions), once they have parsed.
_KNOWN_JSON: dict[str, None] = {}
# The last longer text that parsed: a step's observation is the previous step's result.
_last_json: str | None = None
_KNOWN_LIMIT = 1024  # entries before the memo starts over
_KNOWN_LENGTH = 16  # longest text remembered
_scan_once = json.JSONDecoder().scan_once  # the C scanner json.loads runs, without its frames
#: A faster JSON parser, when one is installed: what it accepts, json accepts (see is_json).
_fast_loads: Any = (
    _msgspec.json.decode if _msgspec is not None else _orjson.loads if _orjson is not None else None
)


def is_json(text: str, brackets: int = -1) -> bool:
    """Whether ``json.loads(text)`` would succeed (same answer, same RecursionError).

    msgspec or orjson, when installed, decides for text it accepts that cannot nest deep
    enough to exhaust json's recursion limit: ``json`` accepts everything they do except
    nesting past that limit. Text they refuse (NaN, huge numbers, lone surrogates, anything
    broken) goes to json itself. ``brackets``: the text's count of ``[`` and ``{``, when the
    caller has it (-1: not counted).
    """
    if len(text) <= _KNOWN_LENGTH:
        if text in _KNOWN_JSON:
            return True
    elif text == _last_json:
        return True
    if _fast_loads is not None and (
        len(text) < 1000 or (brackets if brackets >= 0 else text.count("[") + text.count("{")) < 500
    ):  # (nesting depth < 500)
        try:
            _fast_loads(text)
        except Exception:  # refused, or anything else: json decides
            pass
        else:
            _remember(text)
            return True
    if text and text[0] not in " \t\n\r":  # json.loads skips leading whitespace first
        try:
            end = _scan_once(text, 0)[1]
        except StopIteration:  # no JSON value at the start
            return False
        except ValueError:
            return False
        if end == len(text):
            _remember(text)
            return True
    try:
        json.loads(text)  # trailing whitespace or data, leading whitespace, empty text
    except ValueError:
        return False
    _remember(text)
    return True


def _remember(text: str) -> None:
    global _last_json
    if len(text) <= _KNOWN_LENGTH:
        if len(_KNOWN_JSON) >= _KNOWN_LIMIT:
            _KNOWN_JSON.clear()
        _KNOWN_JSON[text] = None
    else:
        _last_json = text


# --- decoding --------------------------------------------------------------------------


def _resolve(path: str) -> Any | None:
    """Find ``module:QualName`` among already-imported modules; never imports."""
    module_name, _, qualname = path.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None or not qualname:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _plain_dtype(spec: Any) -> np.dtype:
    """A dtype as the encoder writes it: a plain string naming a dtype (never a structured or
    void one, which the encoder never writes; void is the one kind besides text whose items
    can have no size)."""
    if type(spec) is not str:
        raise ValueError(f"a dtype is written as text, got {type(spec).__name__}")
    dtype = np.dtype(spec)
    if dtype.fields is not None or dtype.kind == "V":
        raise ValueError(f"dtype {spec!r} is not one agenttrace writes")
    return dtype


def _decode_ndarray(spec: dict, depth: int) -> np.ndarray:
    dtype = _plain_dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    if "b64" in spec:
        raw = base64.b64decode(spec["b64"])
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if dtype.kind == "O":
        flat = [_decode(item, depth) for item in spec["data"]]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    return np.array(spec["data"], dtype=dtype).reshape(shape)


def _decode_tagged(tag: str, body: Any, original: dict, depth: int) -> Any:
    """A tagged object ``depth`` containers in (its body is one more, a body's items two)."""
    inner = depth + 2
    if tag == "$float":  # (only the three the encoder writes: float() would take far more)
        if type(body) is not str or body not in _NONFINITE:
            raise ValueError(f'not "nan", "inf" or "-inf" but {body!r}')
        return _NONFINITE[body]
    if tag == "$tuple":
        return tuple([_decode(item, inner) for item in body])
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$dict":
        return {_hashable(_decode(key, inner + 1)): _decode(item, inner + 1) for key, item in body}
    if tag == "$set":
        return {_hashable(_decode(item, inner)) for item in body}
    if tag == "$frozenset":
        return frozenset([_hashable(_decode(item, inner)) for item in body])
    if tag == "$ndarray":
        return _decode_ndarray(body, inner + 1)
    if tag == "$numpy":
        dtype = _plain_dtype(body["dtype"])
        if "b64" in body:
            raw = base64.b64decode(body["b64"])
            return np.frombuffer(raw, dtype=dtype)[0] if dtype.itemsize else dtype.type(raw)
        if dtype.kind in "mM":  # (a number in the dtype's unit, as older versions wrote)
            return np.array(body["value"], dtype=dtype)[()]
        return dtype.type(_decode(body["value"], inner))
    if tag == "$datetime":
        return _dt.datetime.fromisoformat(body)
    if tag == "$date":
        return _dt.date.fromisoformat(body)
    if tag in ("$dataclass", "$pydantic"):
        cls = _resolve(body["type"])
        fields = _decode(body["fields"], inner)
        if isinstance(cls, type) and isinstance(fields, dict):
            try:
                if tag == "$dataclass" and dataclasses.is_dataclass(cls):
                    init = {f.name: fields[f.name] for f in dataclasses.fields(cls) if f.init}
                    obj = cls(**init)
                    for f in dataclasses.fields(cls):
                        if not f.init and f.name in fields:
                            object.__setattr__(obj, f.name, fields[f.name])
                    return obj
                if (
                    tag == "$pydantic"
                    and hasattr(cls, "model_validate")
                    and not holds_kept(fields)  # (its model_dump would copy a Tagged to a dict)
                ):
                    return cls.model_validate(fields)
            except Exception:
                pass
        return Tagged(original)
    if tag == "$enum":
        cls = _resolve(body["type"])
        if isinstance(cls, type) and issubclass(cls, enum.Enum):
            try:
                return cls(_decode(body["value"], inner))
            except Exception:
                pass
        return Tagged(original)
    if tag == DEEP_TAG and type(body) is not str:
        raise TypeError("$json holds JSON text")
    return Tagged(original)  # $unserializable and $json stay as recorded


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def decode(data: Any) -> Any:
    """Inverse of :func:`encode` on JSON data. Data nested deeper than :data:`MAX_DEPTH`
    decodes to its ``$json`` form, ``{"$json": "<its JSON text>"}``."""
    try:
        return _decode(data, 0)
    except (_TooDeep, RecursionError):
        return Tagged({DEEP_TAG: _data_text(data)})


def _decode(data: Any, depth: int) -> Any:
    """``decode`` of data inside ``depth`` containers (_TooDeep past MAX_DEPTH)."""
    cls = type(data)
    if cls is dict:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        if len(data) == 1:
            tag = next(iter(data))
            if tag in _TAGS:
                try:
                    return _decode_tagged(tag, data[tag], data, depth)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise ValueDecodeError(f"malformed {tag} value: {exc}") from exc
            if type(tag) is str and tag.startswith("$"):  # a tag this codec does not know
                return Tagged(data)
        depth += 1  # (scalars as they are, without a call each)
        return {
            key: _decode(item, depth) if type(item) is dict or type(item) is list else item
            for key, item in data.items()
        }
    if cls is list:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        depth += 1
        return [
            _decode(item, depth) if type(item) is dict or type(item) is list else item
            for item in data
        ]
    return data


def _data_text(data: Any) -> str:
    """JSON text of parsed JSON data, however deep."""
    try:
        return _dump(data)
    except (RecursionError, ValueError, TypeError):
        return _deep_text(data, False)


def loads(text: str) -> Any:
    """Parse JSON text written by :func:`dumps` back into values. Text nested deeper than
    :data:`MAX_DEPTH` (which :func:`dumps` never writes) reads as ``{"$json": text}``."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueDecodeError(f"not JSON: {exc}") from exc
    except RecursionError:
        return Tagged({DEEP_TAG: text if type(text) is str else _text_of(text)})
    try:
        return _decode(data, 0)
    except (_TooDeep, RecursionError):
        return Tagged({DEEP_TAG: text if type(text) is str else _text_of(text)})


def _text_of(raw: bytes | bytearray) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` within :data:`MAX_DEPTH`: plain JSON data (no tags decoded), or
    :class:`ValueDecodeError` for text that is not JSON or nests deeper."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueDecodeError(f"not JSON: {exc}") from exc
    except RecursionError:
        raise ValueDecodeError(f"nested deeper than {MAX_DEPTH} levels") from None
    if type(data) in (list, dict) and data_deeper(data):
        raise ValueDecodeError(f"nested deeper than {MAX_DEPTH} levels")
    return data


def json_or_text(value: Any) -> Any:
    """Text that is JSON as its data (:func:`parse_json`); other text, and any other value,
    as it is: what other tracers record as JSON text or as plain text alike."""
    if isinstance(value, str):
        try:
            return parse_json(value)
        except ValueError:
            return value
    return value
