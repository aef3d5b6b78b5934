"""The content-addressed blob store: ids, idempotent atomic writes, hostile ids, fsspec."""

from __future__ import annotations

import builtins
import hashlib
import os
import threading
import uuid

import pytest

from agenttrace.storage import blobs
from agenttrace.storage.blobs import (
    BlobIntegrityError,
    BlobNotFoundError,
    FsspecBlobStore,
    InvalidBlobRefError,
    LocalBlobStore,
    blob_reference,
    open_blob_store,
    parse_blob_reference,
)


def _files(folder) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
    )


def test_put_returns_the_sha256_id_and_get_gives_the_bytes_back(tmp_path) -> None:
    store = open_blob_store(tmp_path / "blobs")
    data = b'{"obs": [1, 2, 3]}'
    ref = store.put(data)
    digest = hashlib.sha256(data).hexdigest()
    assert ref == "sha256:" + digest
    assert store.get(ref) == data
    assert ref in store
    # two-level fan-out: ab/cdef...
    assert _files(tmp_path / "blobs") == [os.path.join(digest[:2], digest[2:])]


def test_put_is_idempotent_and_stores_each_content_once(tmp_path) -> None:
    store = LocalBlobStore(tmp_path)
    refs = {store.put(b"same bytes") for _ in range(5)}
    assert len(refs) == 1
    # a second store object on the same folder (another process) finds it too
    again = LocalBlobStore(tmp_path)
    assert again.put(b"same bytes") in refs
    assert len(_files(tmp_path)) == 1


def test_concurrent_puts_of_the_same_and_of_different_blobs(tmp_path) -> None:
    store = LocalBlobStore(tmp_path)
    payloads = [(b"x" * 10_000) + bytes([i % 3]) for i in range(60)]
    refs: list[str] = []

    def worker(chunk):
        for data in chunk:
            refs.append(LocalBlobStore(tmp_path).put(data))  # no shared cache

    threads = [threading.Thread(target=worker, args=(payloads[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(refs)) == 3
    assert len(_files(tmp_path)) == 3  # no temporary files left behind
    for data in payloads[:3]:
        assert store.get(blobs.blob_ref(data)) == data


def test_a_failed_write_leaves_no_blob_and_no_temporary_file(tmp_path, monkeypatch) -> None:
    store = LocalBlobStore(tmp_path)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(blobs.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        store.put(b"payload")
    monkeypatch.undo()
    assert _files(tmp_path) == []
    assert blobs.blob_ref(b"payload") not in store
    # and the failed put was not remembered as stored
    ref = store.put(b"payload")
    assert store.get(ref) == b"payload"


def test_missing_blob_names_the_ref_and_the_store(tmp_path) -> None:
    store = LocalBlobStore(tmp_path / "store")
    ref = "sha256:" + "0" * 64
    with pytest.raises(BlobNotFoundError) as caught:
        store.get(ref)
    assert isinstance(caught.value, KeyError)
    message = str(caught.value)
    assert ref in message and str(tmp_path / "store") in message
    assert ref not in store


def test_damaged_blob_is_reported_not_returned(tmp_path) -> None:
    store = LocalBlobStore(tmp_path)
    ref = store.put(b"original")
    digest = ref.removeprefix("sha256:")
    (tmp_path / digest[:2] / digest[2:]).write_bytes(b"tampered")
    with pytest.raises(BlobIntegrityError, match="damaged"):
        store.get(ref)


@pytest.mark.parametrize(
    "hostile",
    [
        "../../etc/passwd",
        "sha256:../x",
        "sha256:../../" + "a" * 58,
        "sha256:" + "A" * 64,  # upper case
        "sha256:" + "a" * 63,  # too short
        "sha256:" + "a" * 65,  # too long
        "sha256:" + "a" * 64 + "\n",
        "sha256:" + "g" * 64,
        "md5:" + "a" * 32,
        "/etc/passwd",
        "sha256:/" + "a" * 63,
        "",
        None,
        42,
    ],
)
def test_hostile_refs_are_rejected_before_touching_the_filesystem(
    tmp_path, monkeypatch, hostile
) -> None:
    opened: list = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    store = LocalBlobStore(tmp_path / "store")
    with pytest.raises(InvalidBlobRefError, match="not a blob id"):
        store.get(hostile)
    assert hostile not in store
    assert opened == []
    with pytest.raises(InvalidBlobRefError):
        blob_reference(hostile, 3)


def test_reference_text_round_trips_and_rejects_look_alikes() -> None:
    ref = blobs.blob_ref(b"abc")
    text = blob_reference(ref, 3)
    assert text == '{"$blob":{"ref":"%s","size":3}}' % ref
    assert parse_blob_reference(text) == (ref, 3)
    for other in (
        '{"$blob":{"ref":"sha256:../x","size":3}}',
        '{"$blob":{"ref":"%s","size":"3"}}' % ref,
        '{"$blob":{"ref":"%s","size":3},"x":1}' % ref,
        '{"$blob":"%s"}' % ref,
        '{"$blob":',
        "plain text",
        None,
        ["not", "text"],
    ):
        assert parse_blob_reference(other) is None


def test_open_blob_store_understands_paths_and_file_urls(tmp_path) -> None:
    assert isinstance(open_blob_store(str(tmp_path)), LocalBlobStore)
    store = open_blob_store((tmp_path / "a b").as_uri())
    assert isinstance(store, LocalBlobStore) and store.folder == tmp_path / "a b"
    ref = store.put(b"x")
    assert open_blob_store(str(tmp_path / "a b")).get(ref) == b"x"
    with pytest.raises(ValueError, match="empty"):
        open_blob_store("  ")
    with pytest.raises(ValueError, match="remote host"):
        open_blob_store("file://elsewhere/blobs")


def test_fsspec_memory_store_works_like_a_folder() -> None:
    pytest.importorskip("fsspec")
    url = f"memory://agenttrace-test-{uuid.uuid4().hex}/blobs"
    store = open_blob_store(url)
    assert isinstance(store, FsspecBlobStore)
    ref = store.put(b"big observation")
    assert store.put(b"big observation") == ref
    assert store.get(ref) == b"big observation"
    # another store object (no cache) on the same URL reads it; nothing temporary is left
    again = open_blob_store(url)
    assert again.get(ref) == b"big observation"
    listed = [p for p in again.fs.find(again.root)]
    digest = ref.removeprefix("sha256:")
    assert [p.rsplit("/", 2)[-2:] for p in listed] == [[digest[:2], digest[2:]]]
    with pytest.raises(BlobNotFoundError, match=url):
        again.get("sha256:" + "1" * 64)
    with pytest.raises(InvalidBlobRefError):
        again.get("sha256:../../x")


def test_fsspec_url_without_fsspec_names_the_install(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_fsspec(name, *args, **kwargs):
        if name == "fsspec" or name.startswith("fsspec."):
            raise ImportError("No module named 'fsspec'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fsspec)
    with pytest.raises(ImportError, match="pip install fsspec"):
        open_blob_store("s3://bucket/blobs")


def test_put_takes_bytes_only(tmp_path) -> None:
    with pytest.raises(TypeError, match="bytes"):
        LocalBlobStore(tmp_path).put("text")  # type: ignore[arg-type]
