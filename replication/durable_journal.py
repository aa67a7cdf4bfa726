"""pysyncobj's journal and dumps made durable: `DurableJournal`, the term/vote record it stores,
and the hook every dump is replaced through.

Owns the file side of durable acknowledgements (docs/design.md §2): pysyncobj syncs nothing,
so a power cut of a majority could lose acknowledged entries and reuse a term. Each
correction and why:

- `DurableJournal` (a `FileJournal` on the same file, so existing data directories open as
  they are) knows what it has synced (`sync`, `dirty`, `synced_index`), stores the term/vote
  record durably (`FileJournal.__metaStorer`, before any vote or vote request goes out) and
  replaces itself whole when trimmed after a compaction (`FileJournal.__journal`,
  `__journalFile`, `__currentOffset`): pysyncobj rewrites the records in place, and a cut
  midway garbles entries after the dump.
- `pysyncobj.serializer.atomicReplace` (a module global, used for the dump pysyncobj writes
  and the one a follower receives; a bare rename): dumps of nodes with fsync on are replaced
  by `durable_replace`, the file and its directory synced.

A failed sync or write of any of these files is recorded in the node's `DiskFaults` and
raised as `SyncFailedError`; from then on the journal refuses every sync and write, stays
`dirty` (so no answer waits its way out) and is closed without a sync
(`replication.disk_faults` says why). Each record's bytes are allocated (`posix_fallocate`)
before pysyncobj writes them into the mapping: a write into an unallocated page of a full
disk would kill the process with SIGBUS, where the allocation answers ENOSPC.

`replication.raft_node` swaps the journal in and registers each node's dump. Written against
pysyncobj 0.3.17, refused with any other release at import.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

import pysyncobj.serializer
from pysyncobj.journal import FileJournal, MetaStorer, ResizableFile
from pysyncobj.pickle import dumps as pysyncobj_dumps
from pysyncobj.pickle import to_bytes

from replication.disk_faults import DiskFaults
from replication.durability import SyncedImage, SyncTimes, durable_replace, sync_directory
from replication.journal import FIRST_RECORD_OFFSET, encode_journal, sync_writes
from replication.pysyncobj_pin import check_pysyncobj_version

check_pysyncobj_version()  # DurableJournal takes over FileJournal's private state

__all__ = ["DurableJournal", "register_dump"]


# The dumps replaced durably, by absolute path, each with its node's sync record and disk
# faults: pysyncobj's Serializer replaces a dump with its module's `atomicReplace`, so one
# hook serves every node of the process and tells them apart by path (set by each node as it
# starts).
_DURABLE_DUMPS: dict[str, tuple[SyncTimes, DiskFaults]] = {}
# pysyncobj writes a dump received from the leader to `<dump>.1.tmp` (a compaction's own to
# `<dump>.tmp`): a received one that fails halts the node; a compaction's is retried.
_RECEIVED_SUFFIX = ".1.tmp"


def register_dump(dump_path: str, times: SyncTimes | None, faults: DiskFaults) -> None:
    """Replace the dump at `dump_path` durably, counting in `times` (None: fsync off)."""
    path = os.path.abspath(dump_path)
    if times is None:
        _DURABLE_DUMPS.pop(path, None)
    else:
        _DURABLE_DUMPS[path] = (times, faults)


def _replace_dump(tmp: str, path: str) -> None:
    entry = _DURABLE_DUMPS.get(os.path.abspath(path))
    if entry is None:
        os.rename(tmp, path)  # pysyncobj's own atomicReplace on POSIX
        return
    times, faults = entry
    try:
        faults.before_dump()
        durable_replace(tmp, path)
    except OSError as exc:
        if tmp.endswith(_RECEIVED_SUFFIX):  # pysyncobj logs the raise; the tick halts
            raise faults.fail("dump", path, exc) from exc
        raise  # a compaction's: pysyncobj counts it failed (`DumpBackoff`)
    times.dump_synced()  # counted in this process only: compaction writes from a child


pysyncobj.serializer.atomicReplace = _replace_dump


class _DurableMetaStorer(MetaStorer):  # type: ignore[misc]
    """pysyncobj's term/vote record, stored (as pysyncobj does, before any vote or vote
    request goes out) so that it survives a power cut: pysyncobj's own moves an unsynced
    temp file over it, and a node that forgot its vote could vote twice in one term."""

    def __init__(self, path: str, times: SyncTimes, faults: DiskFaults) -> None:
        super().__init__(path)
        self._ripple_times = times
        self._ripple_faults = faults

    def storeMeta(self, meta: dict[str, Any]) -> None:
        """Raises SyncFailedError (the vote is then never sent) when the record is not
        stored."""
        self._ripple_faults.check()
        path = str(self.getPath())
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(pysyncobj_dumps(meta))
            durable_replace(tmp, path)
        except OSError as exc:
            raise self._ripple_faults.fail("term/vote record", path, exc) from exc
        self._ripple_times.meta_synced()


class DurableJournal(FileJournal):  # type: ignore[misc]
    """pysyncobj's FileJournal on the same file (existing data directories open as they
    are), knowing what it has synced: `sync()` makes every entry written so far durable, and
    the disk holds the log through `synced_index`. With `fsync` off it syncs nothing and is
    never `dirty`. Called only under the node's Raft lock."""

    # pysyncobj's own (private) state of the file journal, replaced by `deleteEntriesTo`.
    _FileJournal__journal: list[Any]  # (command, idx, term) of every entry, in order
    _FileJournal__journalFile: Any  # the mapped file (pysyncobj's ResizableFile)
    _FileJournal__currentOffset: int  # where the records end
    _FileJournal__metaStorer: Any

    def __init__(
        self, path: str, times: SyncTimes, faults: DiskFaults | None = None, *, fsync: bool
    ) -> None:
        super().__init__(path)
        self._ripple_path = path
        self._ripple_times = times
        self._ripple_faults = faults if faults is not None else DiskFaults()
        self._ripple_fd: int | None = os.open(path, os.O_RDWR)  # for `posix_fallocate`
        self._ripple_allocated = 0  # the file's bytes allocated on disk (`_ripple_allocate`)
        self._ripple_allocate_to(os.fstat(self._ripple_fd).st_size)
        self._ripple_fsync = fsync
        self._ripple_dirty = False
        end = self._ripple_end()
        self._ripple_low = end  # the lowest record byte written since the last sync
        self._ripple_synced_end = end  # where the records ended at the last sync
        self._ripple_synced_index = self._ripple_last_index()
        self._ripple_image = SyncedImage.beside(path) if fsync else None
        if fsync:
            self._FileJournal__metaStorer = _DurableMetaStorer(
                path + ".meta", times, self._ripple_faults
            )
            # pysyncobj created and wrote the file without a sync: on disk from here on.
            self.flush()
            sync_directory(os.path.dirname(os.path.abspath(path)))
            if self._ripple_image is not None:
                self._ripple_image.replace(self._ripple_read(0, end))

    @property
    def dirty(self) -> bool:
        """Written since the last sync (never with fsync off)."""
        return self._ripple_dirty

    @property
    def synced_index(self) -> int:
        """The last log index the disk holds with every one before it (0: none)."""
        return self._ripple_synced_index

    @property
    def faults(self) -> DiskFaults:
        return self._ripple_faults

    def add(self, command: Any, idx: int, term: int) -> None:
        """Append a record; SyncFailedError when its bytes cannot be written (pysyncobj's
        list holds the entry already: the node halts)."""
        faults = self._ripple_faults
        faults.check()
        try:
            faults.before_write()
            self._ripple_allocate(len(to_bytes(command)))
            super().add(command, idx, term)
        except OSError as exc:
            raise faults.fail("journal write", self._ripple_path, exc) from exc
        self._ripple_dirty = self._ripple_fsync

    def _ripple_allocate(self, command_bytes: int) -> None:
        """Allocate the next record's bytes on disk before pysyncobj writes them into the
        mapping (ENOSPC here, not SIGBUS there), growing the file twofold as pysyncobj does;
        the mapping is grown to the file, so pysyncobj finds it large enough."""
        end = self._ripple_end() + 4 + 16 + command_bytes + 4  # size, idx term, command, size
        if end > self._ripple_allocated:
            self._ripple_allocate_to(max(2 * self._ripple_allocated, end))

    def _ripple_allocate_to(self, size: int) -> None:
        """Allocate the file's first `size` bytes (holes left by pysyncobj included) and map
        them; a filesystem without `posix_fallocate` is left to pysyncobj."""
        fd = self._ripple_fd
        if fd is None:
            return
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            self._ripple_fd = None
            os.close(fd)
            return
        self._ripple_allocated = size
        mapped = self._FileJournal__journalFile._ResizableFile__mm
        file_size = os.fstat(fd).st_size
        if len(mapped) < file_size:
            mapped.resize(file_size)  # the file has that size already: only the mapping grows

    def clear(self) -> None:
        super().clear()
        self._ripple_cut()

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        super().deleteEntriesFrom(entryFrom)
        self._ripple_cut()

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the entries before `entryTo` (the trim after a compaction). pysyncobj rewrites
        every kept record from the file's start, in place: a power cut midway would garble
        the entries after the dump, acknowledged ones included, on every node that compacted
        alike. With fsync on, the kept entries go to a new file that replaces the journal
        durably instead."""
        self._ripple_faults.check()
        if not self._ripple_fsync:
            super().deleteEntriesTo(entryTo)
            return
        kept = list(self._FileJournal__journal[entryTo:])
        data = encode_journal(
            self._ripple_read(0, FIRST_RECORD_OFFSET),
            [(to_bytes(command), idx, term) for command, idx, term in kept],
        )
        tmp = self._ripple_path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            durable_replace(tmp, self._ripple_path)
        except OSError as exc:
            raise self._ripple_faults.fail("journal rewrite", self._ripple_path, exc) from exc
        self._FileJournal__journalFile._destroy()
        self._FileJournal__journalFile = ResizableFile(self._ripple_path)
        if self._ripple_fd is not None:  # the new file's, for `posix_fallocate`
            os.close(self._ripple_fd)
            self._ripple_fd = os.open(self._ripple_path, os.O_RDWR)
            self._ripple_allocate_to(os.fstat(self._ripple_fd).st_size)
        self._FileJournal__journal = kept
        self._FileJournal__currentOffset = len(data)
        self._ripple_low = self._ripple_synced_end = len(data)
        self._ripple_synced_index = self._ripple_last_index()
        self._ripple_dirty = False
        self._ripple_times.journal_rewritten()

    def sync(self) -> bool:
        """Make everything written so far durable; False when there was nothing to sync."""
        faults = self._ripple_faults
        faults.check()
        if not self._ripple_dirty:
            return False
        started = time.perf_counter()
        try:
            faults.before_sync()
            self.flush()  # msync(MS_SYNC) of the whole mapping: fdatasync of the file's pages
        except OSError as exc:
            raise faults.fail("journal sync", self._ripple_path, exc) from exc
        self._ripple_times.journal_synced(time.perf_counter() - started)
        end = self._ripple_end()
        if self._ripple_image is not None:
            writes = sync_writes(self._ripple_read, self._ripple_low, self._ripple_synced_end, end)
            self._ripple_image.write(writes, end)
        self._ripple_low = self._ripple_synced_end = end
        self._ripple_synced_index = self._ripple_last_index()
        self._ripple_dirty = False
        return True

    def _destroy(self) -> None:
        if self._ripple_fd is not None:
            os.close(self._ripple_fd)
            self._ripple_fd = None
        if self._ripple_faults.failure is not None:
            # Never synced again after a failure (fsyncgate): unmapped without pysyncobj's
            # msync. The restart trusts only the synced part (`drop_unsynced_tail`).
            mapped = self._FileJournal__journalFile
            mapped._ResizableFile__mm.close()
            mapped._ResizableFile__f.close()
            return
        self.sync()  # a node closed in order leaves nothing unsynced
        super()._destroy()

    def _ripple_cut(self) -> None:
        """After records were dropped from the end (or all of them)."""
        self._ripple_low = min(self._ripple_low, self._ripple_end())
        self._ripple_synced_index = min(self._ripple_synced_index, self._ripple_last_index())
        self._ripple_dirty = self._ripple_fsync

    def _ripple_end(self) -> int:
        return int(self._FileJournal__currentOffset)

    def _ripple_read(self, offset: int, size: int) -> bytes:
        return bytes(self._FileJournal__journalFile.read(offset, size))

    def _ripple_last_index(self) -> int:
        return int(self[-1][1]) if len(self) else 0
