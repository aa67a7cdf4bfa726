"""Checkpoint references: the one name a checkpoint of (partition, epoch, offset) may have.

A worker writes a checkpoint under `checkpoint_key(partition, epoch, offset)` in the
cluster's store, and the coordinator records its URI; the next owner loads exactly that
URI. The coordinator therefore accepts a reference only when it is `canonical_uri(store,
partition, epoch, offset)`: no other file, bucket, path or partition's object can be made
a partition's checkpoint by whoever holds a worker token. The pipeline names its objects
with these same functions, so the two sides cannot drift apart.

`store_mismatch` says why a worker's store is not the cluster's (its checkpoints would all
be fenced), naming both without whatever user information a URI might carry.

Pure: string work only (the store URI is parsed, never opened).
"""

from __future__ import annotations

import functools
import posixpath
import re
from urllib.parse import unquote, urlsplit

__all__ = [
    "canonical_uri",
    "checkpoint_key",
    "checkpoint_key_parts",
    "checkpoints_prefix",
    "reference_problem",
    "shown_store",
    "store_base",
    "store_mismatch",
]

STORE_BASES_CACHED_MAX = 16  # a process uses one store; tests and tools a few


# The partition as `checkpoint_key` spells it: five digits, or more without a leading zero (a
# recorded pipeline's numbers start at SLOT_BASE, seven digits).
_CHECKPOINT_KEY = re.compile(r"^checkpoints/p(\d{5}|[1-9]\d{5,18})/e(\d{10})-o(\d{20})\.ckpt$")


def checkpoints_prefix(partition: int) -> str:
    """The key prefix every checkpoint of `partition` is under."""
    return f"checkpoints/p{partition:05d}/"


def checkpoint_key(partition: int, epoch: int, offset: int) -> str:
    return f"{checkpoints_prefix(partition)}e{epoch:010d}-o{offset:020d}.ckpt"


def checkpoint_key_parts(key: str) -> tuple[int, int, int] | None:
    """The (partition, epoch, offset) a checkpoint key names, or None for any other key."""
    match = _CHECKPOINT_KEY.match(key)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


@functools.lru_cache(maxsize=STORE_BASES_CACHED_MAX)
def store_base(store: str) -> str:
    """The prefix of every object URI in the store `store` (`file:///dir` or
    `s3://bucket/prefix`), spelled as the pipeline's stores spell it. ValueError when the
    URI is not a store URI (not cached: lru_cache keeps only returned values). Kept per
    store: the leader checks every entry of every checkpoint ack against its one store, so
    it is parsed once, not once per entry."""
    parts = urlsplit(store)
    if parts.query or parts.fragment:
        raise ValueError(f"store URI {store!r} has a query or fragment")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file store URI must be local (file:///dir), got {store!r}")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError(f"file store URI needs an absolute path, got {store!r}")
        root = posixpath.normpath(path)
        return "file://" + root.rstrip("/") + "/"
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"s3 store URI needs a bucket, got {store!r}")
        prefix = parts.path.strip("/")
        return f"s3://{parts.netloc}/" + (prefix + "/" if prefix else "")
    raise ValueError(f"unsupported store URI {store!r} (file:///dir or s3://bucket/prefix)")


def shown_store(store: str) -> str:
    """`store` fit for a message or a log: user information (`s3://key:secret@bucket`, which
    no Ripple store needs, but an operator may have written) is left out."""
    parts = urlsplit(store)
    if "@" not in parts.netloc:
        return store
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def store_mismatch(cluster_store: str, worker_store: str) -> str | None:
    """Why a worker whose store is `worker_store` cannot checkpoint in a cluster whose
    `store` setting is `cluster_store`, or None when it can (or the cluster has no store to
    compare with). ValueError when `worker_store` is not a store URI."""
    worker_base = store_base(worker_store)
    if not cluster_store or store_base(cluster_store) == worker_base:
        return None
    return (
        f"this worker's store {shown_store(worker_store)} is not the cluster's store "
        f"{shown_store(cluster_store)}: every checkpoint it writes would be fenced. Start it "
        "with the cluster's store (--store), or fix the cluster file's store setting"
    )


def canonical_uri(store: str, partition: int, epoch: int, offset: int) -> str:
    return store_base(store) + checkpoint_key(partition, epoch, offset)


def reference_problem(store: str, partition: int, epoch: int, offset: int, uri: str) -> str | None:
    """Why `uri` may not be recorded as the checkpoint of (partition, epoch, offset), or
    None when it is that checkpoint's canonical object in the cluster's store."""
    if not store:
        return "the cluster has no store setting, so no checkpoint reference can be checked"
    if partition < 0 or epoch < 0 or offset < 0:
        return "partition, epoch and offset must be non-negative"
    expected = canonical_uri(store, partition, epoch, offset)
    if uri != expected:
        return f"not the canonical object for this partition, epoch and offset ({expected})"
    return None
