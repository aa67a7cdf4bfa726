"""Object stores: create-only puts on a local directory and on a real S3 protocol endpoint."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from pipeline.store import (
    LocalStore,
    ObjectStore,
    S3Store,
    StoreError,
    StoreKeyInvalid,
    StoreKeyMissing,
    open_store,
)

# Fixtures are imported by name so pytest finds them here; test parameters then "redefine"
# those names, which is how pytest fixtures work, hence the file-wide F811 waiver.

WRITERS = 8


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    client, bucket = request.getfixturevalue("s3_bucket")
    return S3Store(bucket, "base/dir", client=client)


def test_put_if_absent_is_create_only(store: ObjectStore) -> None:
    assert store.put_if_absent("a/b/one", b"first")
    assert not store.put_if_absent("a/b/one", b"second")
    assert store.get("a/b/one") == b"first"


def test_get_missing_raises_store_key_missing(store: ObjectStore) -> None:
    with pytest.raises(StoreKeyMissing):
        store.get("nope/nothing")


def test_list_keys_sorted_and_prefix_filtered(store: ObjectStore) -> None:
    for key in ["x/p2/b", "x/p1/c", "x/p1/a", "y/z", "x/p10/a"]:
        assert store.put_if_absent(key, key.encode())
    assert store.list_keys("x/p1/") == ["x/p1/a", "x/p1/c"]
    assert store.list_keys("x/p1") == ["x/p1/a", "x/p1/c", "x/p10/a"]
    assert store.list_keys("x/") == ["x/p1/a", "x/p1/c", "x/p10/a", "x/p2/b"]
    assert store.list_keys("missing/") == []


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "a/./b", "a/.tmp-x"])
def test_invalid_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(StoreKeyInvalid):
        store.put_if_absent(key, b"x")


def test_racing_writers_exactly_one_wins(store: ObjectStore) -> None:
    wins: list[int] = []
    barrier = threading.Barrier(WRITERS)

    def write(i: int) -> None:
        barrier.wait(timeout=10)
        if store.put_if_absent("race/key", f"writer {i}".encode()):
            wins.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(wins) == 1
    assert store.get("race/key") == f"writer {wins[0]}".encode()


def test_local_store_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put_if_absent("d/k", b"1")
    store.put_if_absent("d/k", b"2")
    assert sorted(os.listdir(tmp_path / "d")) == ["k"]
    assert store.local_path("d/k") == str(tmp_path / "d" / "k")
    assert store.uri("d/k") == f"file://{tmp_path}/d/k"


def test_s3_uri_and_no_local_path(s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    store = S3Store(bucket, "/pre/", client=client)
    assert store.uri("a/b") == f"s3://{bucket}/pre/a/b"
    assert store.local_path("a/b") is None
    store.put_if_absent("a/b", b"x")
    assert client.get_object(Bucket=bucket, Key="pre/a/b")["Body"].read() == b"x"


def test_s3_errors_are_translated(moto_endpoint: str) -> None:
    store = S3Store("no-such-bucket", endpoint_url=moto_endpoint)
    with pytest.raises(StoreError):
        store.put_if_absent("k", b"x")
    with pytest.raises(StoreError):
        store.list_keys("")


def test_open_store(tmp_path: Path, s3_bucket: tuple[Any, str], moto_endpoint: str) -> None:
    local = open_store(f"file://{tmp_path}/s")
    assert isinstance(local, LocalStore)
    _client, bucket = s3_bucket
    remote = open_store(f"s3://{bucket}/ripple", s3_endpoint=moto_endpoint)
    assert isinstance(remote, S3Store)
    assert remote.put_if_absent("k", b"v") and remote.get("k") == b"v"
    with pytest.raises(StoreError):
        open_store("ftp://x/y")
    with pytest.raises(StoreError):
        open_store("file://otherhost/x")
