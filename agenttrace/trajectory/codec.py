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
======================  ===============================================================

Decoding gives equal objects back. Dataclasses, pydantic models and enums are rebuilt when
their class can be found among the modules already imported (decoding never imports code);
otherwise they stay as their tagged dict, which re-encodes to the same JSON.
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

from agenttrace._secrets import REDACTED, is_secret_name

#: Arrays up to this many elements are written as readable nested lists.
INLINE_ARRAY_LIMIT = 1024
#: Length of repr() kept by the fallback.
REPR_LIMIT = 1000

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
    }
)
_warned_types: set[str] = set()


class UnserializableValueWarning(UserWarning):
    """A value had no faithful JSON form and was recorded as its repr()."""


class ValueDecodeError(ValueError):
    """Text is not valid JSON in agenttrace's value encoding."""


# --- encoding --------------------------------------------------------------------------


def _type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _encode_float(value: float) -> Any:
    if math.isfinite(value):
        return value
    return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}


def _encode_ndarray(array: np.ndarray, redact: bool) -> dict:
    kind = array.dtype.kind
    header = {"dtype": array.dtype.str, "shape": list(array.shape)}
    if kind == "O":
        header["data"] = [encode(item, redact_secrets=redact) for item in array.ravel().tolist()]
        return {"$ndarray": header}
    if (array.size <= INLINE_ARRAY_LIMIT and kind in "biuU") or (
        kind == "f" and array.size <= INLINE_ARRAY_LIMIT and bool(np.isfinite(array).all())
    ):
        header["data"] = array.tolist()
        return {"$ndarray": header}
    header["b64"] = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
    return {"$ndarray": header}


def _encode_dict(value: dict, redact: bool) -> Any:
    plain = True
    for key in value:
        if type(key) is not str:
            plain = False
            break
    if plain and not (len(value) == 1 and next(iter(value)).startswith("$")):
        out = {}
        for key, item in value.items():
            if redact and is_secret_name(key):
                out[key] = REDACTED
            else:
                out[key] = encode(item, redact_secrets=redact)
        return out
    pairs = []
    for key, item in value.items():
        if redact and isinstance(key, str) and is_secret_name(key):
            item = REDACTED
        pairs.append([encode(key, redact_secrets=redact), encode(item, redact_secrets=redact)])
    return {"$dict": pairs}


def _fallback(value: Any) -> dict:
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
    ``$unserializable`` fallback. With ``redact_secrets`` the values of dict keys named like
    secrets (api_key, token, password, authorization, ...) are replaced by ``[REDACTED]``.
    """
    cls = type(value)
    if cls is str or cls is int or cls is bool or value is None:
        return value
    if cls is float:
        return _encode_float(value)
    if cls is list:
        return [encode(item, redact_secrets=redact_secrets) for item in value]
    if cls is dict:
        return _encode_dict(value, redact_secrets)
    if cls is np.ndarray:
        return _encode_ndarray(value, redact_secrets)
    if cls is tuple:
        return {"$tuple": [encode(item, redact_secrets=redact_secrets) for item in value]}
    if isinstance(value, np.generic):
        item = value.item()
        if isinstance(item, (bool, int, float, str)):
            return {"$numpy": {"dtype": value.dtype.str, "value": encode(item)}}
        raw = base64.b64encode(value.tobytes()).decode("ascii")
        return {"$numpy": {"dtype": value.dtype.str, "b64": raw}}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        return {"$enum": {"type": _type_path(cls), "value": encode(value.value)}}
    if isinstance(value, bool):  # bool subclasses (rare) before int
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _encode_float(float(value))
    if isinstance(value, str):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {
            "$dataclass": {
                "type": _type_path(cls),
                "fields": _encode_dict(fields, redact_secrets),
            }
        }
    if hasattr(value, "model_dump") and hasattr(cls, "model_fields"):
        try:
            fields = value.model_dump(mode="python")
        except Exception:
            return _fallback(value)
        return {
            "$pydantic": {
                "type": _type_path(cls),
                "fields": _encode_dict(fields, redact_secrets),
            }
        }
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, frozenset):
        return {"$frozenset": [encode(item, redact_secrets=redact_secrets) for item in value]}
    if isinstance(value, set):
        return {"$set": [encode(item, redact_secrets=redact_secrets) for item in value]}
    if isinstance(value, dict):
        return _encode_dict(dict(value), redact_secrets)
    if isinstance(value, (list, tuple)):  # subclasses such as NamedTuple
        items = [encode(item, redact_secrets=redact_secrets) for item in value]
        return items if isinstance(value, list) else {"$tuple": items}
    return _fallback(value)


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
    return _dump(encode(value, redact_secrets=redact_secrets))


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
    """Wrap attribute text for lazy decoding; untrusted text must parse, else stays a str."""
    if trusted or is_json(text):
        return RawJSON(text)
    return text


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


def is_json(text: str) -> bool:
    """Whether ``json.loads(text)`` would succeed (same answer, same RecursionError).

    msgspec or orjson, when installed, decides for text it accepts that cannot nest deep
    enough to exhaust json's recursion limit: ``json`` accepts everything they do except
    nesting past that limit. Text they refuse (NaN, huge numbers, lone surrogates, anything
    broken) goes to json itself.
    """
    if len(text) <= _KNOWN_LENGTH:
        if text in _KNOWN_JSON:
            return True
    elif text == _last_json:
        return True
    if _fast_loads is not None and (
        len(text) < 1000 or text.count("[") + text.count("{") < 500  # nesting depth < 500
    ):
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


def _decode_ndarray(spec: dict) -> np.ndarray:
    dtype = np.dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    if "b64" in spec:
        raw = base64.b64decode(spec["b64"])
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if dtype.kind == "O":
        flat = [decode(item) for item in spec["data"]]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    return np.array(spec["data"], dtype=dtype).reshape(shape)


def _decode_tagged(tag: str, body: Any, original: dict) -> Any:
    if tag == "$float":
        return float(body)
    if tag == "$tuple":
        return tuple(decode(item) for item in body)
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$dict":
        return {_hashable(decode(key)): decode(item) for key, item in body}
    if tag == "$set":
        return {_hashable(decode(item)) for item in body}
    if tag == "$frozenset":
        return frozenset(_hashable(decode(item)) for item in body)
    if tag == "$ndarray":
        return _decode_ndarray(body)
    if tag == "$numpy":
        dtype = np.dtype(body["dtype"])
        if "b64" in body:
            return np.frombuffer(base64.b64decode(body["b64"]), dtype=dtype)[0]
        return dtype.type(decode(body["value"]))
    if tag == "$datetime":
        return _dt.datetime.fromisoformat(body)
    if tag == "$date":
        return _dt.date.fromisoformat(body)
    if tag in ("$dataclass", "$pydantic"):
        cls = _resolve(body["type"])
        fields = decode(body["fields"])
        if isinstance(cls, type) and isinstance(fields, dict):
            try:
                if tag == "$dataclass" and dataclasses.is_dataclass(cls):
                    init = {f.name: fields[f.name] for f in dataclasses.fields(cls) if f.init}
                    obj = cls(**init)
                    for f in dataclasses.fields(cls):
                        if not f.init and f.name in fields:
                            object.__setattr__(obj, f.name, fields[f.name])
                    return obj
                if tag == "$pydantic" and hasattr(cls, "model_validate"):
                    return cls.model_validate(fields)
            except Exception:
                pass
        return original
    if tag == "$enum":
        cls = _resolve(body["type"])
        if isinstance(cls, type) and issubclass(cls, enum.Enum):
            try:
                return cls(decode(body["value"]))
            except Exception:
                pass
        return original
    return original  # $unserializable stays as recorded


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def decode(data: Any) -> Any:
    """Inverse of :func:`encode` on JSON data."""
    cls = type(data)
    if cls is dict:
        if len(data) == 1:
            tag = next(iter(data))
            if tag in _TAGS:
                try:
                    return _decode_tagged(tag, data[tag], data)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    raise ValueDecodeError(f"malformed {tag} value: {exc}") from exc
        return {key: decode(item) for key, item in data.items()}
    if cls is list:
        return [decode(item) for item in data]
    return data


def loads(text: str) -> Any:
    """Parse JSON text written by :func:`dumps` back into values."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueDecodeError(f"not JSON: {exc}") from exc
    return decode(data)


# --- equality --------------------------------------------------------------------------


def values_equal(a: Any, b: Any) -> bool:
    """Deep equality that understands numpy arrays (dtype, shape, data) and NaN."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "O":
            return all(values_equal(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return type(a) is type(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if type(a) is not type(b) and not (_is_number(a) and _is_number(b)):
        return False
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return all(
            values_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    try:
        return bool(a == b)
    except Exception:
        return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
