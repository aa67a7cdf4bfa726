"""What reaches the disk: the syncs of a node's Raft files, how long they take, and (for
power-cut tests only) an image of exactly what they made durable.

Owns the sync primitives (`sync_file`, `sync_directory`, `make_directory`, `durable_replace`),
the record of their count and of the journal syncs' latency (`SyncTimes`), and the synced
images.
Invariants: once `durable_replace` returns, the new file is on disk under its name, its
bytes and its directory entry both synced, and a power cut before that leaves the old file
whole; a synced image changes only after the sync it records has returned, so it never holds
more than the disk does.

Synced images are a test-only switch (SYNCED_IMAGES_ENV = "1", never set in production: it
writes every synced byte twice). Beside each journal, term/vote record and dump,
`<file>.synced` then holds what the node's syncs made durable of that file, updated by each
sync with only the bytes it covered. A power-cut test kills the node, puts the images in
place of the files (a file without one was never synced) and restarts it on exactly what a
power cut at that moment would have left.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "SYNCED_IMAGES_ENV",
    "SYNCED_IMAGE_SUFFIX",
    "SYNC_SECONDS_BUCKETS",
    "SyncStats",
    "SyncTimes",
    "SyncedImage",
    "durable_replace",
    "make_directory",
    "sync_directory",
    "sync_file",
]

SYNCED_IMAGES_ENV = "RIPPLE_TEST_SYNCED_IMAGES"
SYNCED_IMAGE_SUFFIX = ".synced"
# From a fast SSD's flush to a disk that stalls writes for a second, as etcd's WAL histogram.
SYNC_SECONDS_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)


def sync_file(path: str) -> None:
    """fsync `path`: its bytes written so far survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_directory(path: str) -> None:
    """fsync the directory `path`: the names created, renamed or removed in it so far
    survive a power cut (a file's own fsync does not cover its name)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directory(path: str, *, durable: bool) -> None:
    """Create the directory `path` and its missing parents; with `durable`, each new name is
    synced into its parent, or a power cut could take a synced file away with its directory."""
    missing = []
    parent = os.path.abspath(path)
    while not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(path, exist_ok=True)
    if durable:
        for created in reversed(missing):
            sync_directory(os.path.dirname(created))


def durable_replace(tmp: str, path: str) -> None:
    """Rename the written file `tmp` over `path` so that a power cut leaves one of the two
    whole: `tmp`'s bytes are synced before the rename (or the new name could point at
    nothing) and the directory after it (or the rename could be undone)."""
    sync_file(tmp)
    os.replace(tmp, path)
    sync_directory(os.path.dirname(os.path.abspath(path)))
    image = SyncedImage.beside(path)
    if image is not None:
        with open(path, "rb") as f:
            image.replace(f.read())


class SyncedImage:
    """`<path>.synced`: the bytes of `path` its syncs made durable (power-cut tests only)."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path + SYNCED_IMAGE_SUFFIX

    @classmethod
    def beside(cls, path: str) -> SyncedImage | None:
        """The image of `path`, or None unless the test-only switch is on."""
        return cls(path) if os.environ.get(SYNCED_IMAGES_ENV) == "1" else None

    def replace(self, data: bytes) -> None:
        """The image becomes `data`, whole: a process killed meanwhile leaves the old one."""
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)

    def write(self, writes: list[tuple[int, bytes]], size: int) -> None:
        """Apply `writes` ((offset, bytes), in order) to the image, then cut it to `size`:
        the bytes one sync covered, not the whole file again."""
        with open(self.path, "r+b") as f:
            for offset, data in writes:
                f.seek(offset)
                f.write(data)
            f.truncate(size)


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncStats:
    """What a node synced so far: journal syncs per bucket of SYNC_SECONDS_BUCKETS (not
    cumulative; the last counts those over the last bound) and their total time, and the
    other synced writes by file."""

    journal_sync_counts: tuple[int, ...]
    journal_sync_s_total: float
    meta_syncs: int  # term, vote and commit index records
    dump_syncs: int  # snapshots received from a leader (compaction's dump syncs in its child)
    journal_rewrites: int  # journals replaced whole after a compaction

    @property
    def journal_syncs(self) -> int:
        return sum(self.journal_sync_counts)


class SyncTimes:
    """The running counts behind `SyncStats`. Bumped under the node's Raft lock, read at
    scrape time without it: a reader may see one sync's bucket without its time, never a
    count go back."""

    __slots__ = ("_counts", "_dumps", "_metas", "_rewrites", "_total_s", "on_journal_sync")

    def __init__(self) -> None:
        # Told each journal sync's seconds as it ends (the slow-disk verdict's feed).
        self.on_journal_sync: Callable[[float], None] | None = None
        self._counts = [0] * (len(SYNC_SECONDS_BUCKETS) + 1)
        self._total_s = 0.0
        self._metas = 0
        self._dumps = 0
        self._rewrites = 0

    def journal_synced(self, seconds: float) -> None:
        # A bucket counts the times at or under its bound, as prometheus_client's Histogram.
        self._counts[bisect.bisect_left(SYNC_SECONDS_BUCKETS, seconds)] += 1
        self._total_s += seconds
        if self.on_journal_sync is not None:
            self.on_journal_sync(seconds)

    def meta_synced(self) -> None:
        self._metas += 1

    def dump_synced(self) -> None:
        self._dumps += 1

    def journal_rewritten(self) -> None:
        self._rewrites += 1

    def stats(self) -> SyncStats:
        return SyncStats(
            journal_sync_counts=tuple(self._counts),
            journal_sync_s_total=self._total_s,
            meta_syncs=self._metas,
            dump_syncs=self._dumps,
            journal_rewrites=self._rewrites,
        )
