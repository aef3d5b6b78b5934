"""A content-addressed blob store for span content that is too large to export inline.

With the ``ref`` export content policy (docs/export-content.md) an observation, action or LLM
message longer than the limit is written here and the exported span carries a small
reference instead; ``agenttrace export`` reads it back. A blob's id is the SHA-256 of its
bytes, written ``sha256:<64 lowercase hex>``: putting the same bytes twice stores them once,
and reading verifies the hash, so a damaged blob is reported instead of returned.

:func:`open_blob_store` takes a local folder (or ``file://`` URL), stored as plain files in
two-level fan-out folders (``ab/cdef…``), or any other URL that `fsspec
<https://filesystem-spec.readthedocs.io>`_ understands (``s3://bucket/blobs``,
``gs://…``, ``memory://…``), which needs ``pip install fsspec`` plus the filesystem's own
package. Writes go to a temporary name first and are renamed into place, so a blob is
either absent or whole. Ids are checked strictly before they become paths: a hostile
reference can never name a file outside the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import tempfile
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = [
    "BLOB_TAG",
    "BlobIntegrityError",
    "BlobNotFoundError",
    "BlobStore",
    "FsspecBlobStore",
    "InvalidBlobRefError",
    "LocalBlobStore",
    "blob_ref",
    "blob_reference",
    "check_blob_store",
    "open_blob_store",
    "parse_blob_reference",
]

#: The one key of the JSON object that replaces exported content with a reference:
#: ``{"$blob": {"ref": "sha256:<hex>", "size": <bytes>}}`` (a ``$`` tag like those of
#: agenttrace's value encoding, docs/trajectory-format.md).
BLOB_TAG = "$blob"
_PREFIX = "sha256:"
_REF = re.compile(r"sha256:[0-9a-f]{64}")


class InvalidBlobRefError(ValueError):
    """A blob id that is not ``sha256:`` followed by 64 lowercase hex digits."""


class BlobNotFoundError(KeyError):
    """No blob with this id in the store."""

    def __init__(self, ref: str, store: str) -> None:
        super().__init__(ref)
        self.ref = ref
        self.store = store

    def __str__(self) -> str:  # KeyError would quote the whole message
        return f"blob {self.ref} missing from {self.store}"


class BlobIntegrityError(ValueError):
    """A stored blob whose bytes no longer hash to its id (damaged or tampered with)."""


def blob_ref(data: bytes) -> str:
    """The id of ``data`` in any blob store: ``sha256:<hex>``."""
    return _PREFIX + hashlib.sha256(data).hexdigest()


def _digest(ref: Any) -> str:
    """The hex digest of a valid id; :class:`InvalidBlobRefError` for anything else."""
    if type(ref) is not str or _REF.fullmatch(ref) is None:
        shown = repr(ref) if len(repr(ref)) <= 100 else repr(ref)[:100] + "..."
        raise InvalidBlobRefError(
            f"not a blob id: {shown} (expected 'sha256:' and 64 lowercase hex digits)"
        )
    return ref[len(_PREFIX) :]


def blob_reference(ref: str, size: int) -> str:
    """The JSON text that stands for a blob in an exported span attribute."""
    _digest(ref)
    return '{"%s":{"ref":"%s","size":%d}}' % (BLOB_TAG, ref, size)


def parse_blob_reference(text: Any) -> tuple[str, int] | None:
    """``(ref, size)`` of a reference written by :func:`blob_reference`; None otherwise."""
    if type(text) is not str or not text.startswith('{"$blob"'):
        return None
    try:
        data = json.loads(text)
        body = data[BLOB_TAG]
        ref, size = body["ref"], body["size"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
    if len(data) != 1 or type(size) is not int or _REF.fullmatch(str(ref)) is None:
        return None
    return ref, size


class BlobStore:
    """Content-addressed bytes: :meth:`put` returns the id, :meth:`get` gives the bytes back.

    Subclasses provide the four storage primitives; ids, hashing, verification and the
    de-duplication cache live here. Thread-safe.
    """

    #: How many ids known to be stored are remembered, so content repeated on every step
    #: (a system prompt, tool definitions) is hashed but not written or looked up again.
    known_cache_size = 4096

    def __init__(self) -> None:
        self._known: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    # --- storage primitives ------------------------------------------------------------

    def _exists(self, digest: str) -> bool:
        raise NotImplementedError

    def _read(self, digest: str) -> bytes:
        """The stored bytes; FileNotFoundError when absent."""
        raise NotImplementedError

    def _write(self, digest: str, data: bytes) -> None:
        """Store ``data`` atomically (temporary name, then rename)."""
        raise NotImplementedError

    def _describe(self) -> str:
        raise NotImplementedError

    # --- the public interface -----------------------------------------------------------

    def put(self, data: bytes) -> str:
        """Store ``data`` (once, however often it is put) and return its id."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"blobs are bytes, got {type(data).__name__}")
        data = bytes(data)
        ref = blob_ref(data)
        with self._lock:
            if ref in self._known:
                self._known.move_to_end(ref)
                return ref
        digest = ref[len(_PREFIX) :]
        if not self._exists(digest):
            self._write(digest, data)
        with self._lock:
            self._known[ref] = None
            if len(self._known) > self.known_cache_size:
                self._known.popitem(last=False)
        return ref

    def get(self, ref: str) -> bytes:
        """The bytes stored under ``ref``.

        Raises :class:`InvalidBlobRefError` for a malformed id, :class:`BlobNotFoundError`
        when the store does not have it, :class:`BlobIntegrityError` when the stored bytes
        do not hash to the id.
        """
        digest = _digest(ref)
        try:
            data = self._read(digest)
        except FileNotFoundError:
            raise BlobNotFoundError(ref, self._describe()) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise BlobIntegrityError(
                f"blob {ref} in {self._describe()} is damaged: its bytes hash to {blob_ref(data)}"
            )
        return data

    def __contains__(self, ref: object) -> bool:
        try:
            digest = _digest(ref)
        except InvalidBlobRefError:
            return False
        return self._exists(digest)

    def __str__(self) -> str:
        return self._describe()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()!r})"


class LocalBlobStore(BlobStore):
    """Blobs as files under a local folder: ``<folder>/ab/cdef…`` for ``sha256:abcdef…``."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        super().__init__()
        self.folder = Path(folder)

    def _path(self, digest: str) -> Path:
        return self.folder / digest[:2] / digest[2:]

    def _exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def _read(self, digest: str) -> bytes:
        return self._path(digest).read_bytes()

    def _write(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def _describe(self) -> str:
        return str(self.folder)


class FsspecBlobStore(BlobStore):
    """Blobs under an fsspec URL (``s3://bucket/prefix``, ``memory://x``, …), same layout."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        super().__init__()
        fsspec = _import_fsspec(url)
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")

    def _path(self, digest: str) -> str:
        return f"{self.root}/{digest[:2]}/{digest[2:]}"

    def _exists(self, digest: str) -> bool:
        return bool(self.fs.exists(self._path(digest)))

    def _read(self, digest: str) -> bytes:
        return self.fs.cat_file(self._path(digest))

    def _write(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        folder = path.rsplit("/", 1)[0]
        temp = f"{folder}/.tmp-{uuid.uuid4().hex}"
        with contextlib.suppress(Exception):  # object stores have no folders to make
            self.fs.makedirs(folder, exist_ok=True)
        self.fs.pipe_file(temp, data)
        try:
            self.fs.mv(temp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(temp)
            raise

    def _describe(self) -> str:
        return self.url


def _import_fsspec(url: str) -> Any:
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            f"the blob store {url!r} is not a local folder; reading and writing it needs "
            f"fsspec: pip install fsspec (plus the filesystem's own package, e.g. s3fs)"
        ) from exc
    return fsspec


def check_blob_store(url_or_path: str | os.PathLike[str]) -> None:
    """Raise ValueError when :func:`open_blob_store` could never open ``url_or_path``.

    Cheap and offline, for checking a setting when agenttrace starts rather than at the first
    write: an empty string, a ``file://`` URL on another host, a URL with nothing after the
    scheme, a scheme fsspec does not know, or one whose filesystem package (s3fs, gcsfs, ...)
    is not installed. Nothing is opened or connected to; a local folder is made at the first
    write.
    """
    if isinstance(url_or_path, os.PathLike):
        return
    text = str(url_or_path)
    if not text.strip():
        raise ValueError("a blob store needs a folder or URL, got an empty string")
    if "://" not in text:
        return  # a local folder
    scheme = urlsplit(text).scheme.lower()
    if scheme == "file":
        if urlsplit(text).netloc not in ("", "localhost"):
            raise ValueError(f"file URL with a remote host is not a local folder: {text!r}")
        return
    # fsspec chains filesystems: "simplecache::s3://bucket/blobs"
    *wrappers, target = text.split("::")
    protocol, _, location = target.partition("://")
    if not location.strip("/ "):
        raise ValueError(f"{text!r} names no bucket or folder after {protocol}://")
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        raise ValueError(
            f"the blob store {text!r} is not a local folder; reading and writing it needs "
            "fsspec: pip install fsspec (plus the filesystem's own package, e.g. s3fs)"
        ) from None
    for name in [*wrappers, protocol]:
        name = name.strip().lower()
        if name in registry:
            continue
        known = known_implementations.get(name)
        if known is None:
            raise ValueError(
                f"unknown blob store scheme {name + '://'!r} in {text!r}: use a folder, a "
                "file:// URL or a URL fsspec understands (s3://, gs://, az://, memory://, ...)"
            )
        package = str(known.get("class", "")).split(".", 1)[0]
        if package and importlib.util.find_spec(package) is None:
            hint = known.get("err") or f"pip install {package}"
            raise ValueError(f"the blob store {text!r} needs the package {package}: {hint}")


def open_blob_store(url_or_path: str | os.PathLike[str], **storage_options: Any) -> BlobStore:
    """The blob store at a local folder, a ``file://`` URL, or any fsspec URL.

    ``storage_options`` go to fsspec (credentials, endpoints); a local folder takes none. The
    folder is created on the first write.
    """
    if isinstance(url_or_path, os.PathLike):
        return LocalBlobStore(url_or_path)
    text = str(url_or_path)
    if not text.strip():
        raise ValueError("a blob store needs a folder or URL, got an empty string")
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URL with a remote host is not a local folder: {text!r}")
        return LocalBlobStore(unquote(parts.path))
    if not scheme:
        return LocalBlobStore(text)
    return FsspecBlobStore(text, **storage_options)
