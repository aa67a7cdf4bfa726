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

`replication.raft_node` swaps the journal in and registers each node's dump. Written against
pysyncobj 0.3.17, refused with any other release at import.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pysyncobj.serializer
from pysyncobj.journal import FileJournal, MetaStorer, ResizableFile
from pysyncobj.pickle import dumps as pysyncobj_dumps
from pysyncobj.pickle import to_bytes

from replication.durability import SyncedImage, SyncTimes, durable_replace, sync_directory
from replication.journal import FIRST_RECORD_OFFSET, encode_journal, sync_writes
from replication.pysyncobj_pin import check_pysyncobj_version

check_pysyncobj_version()  # DurableJournal takes over FileJournal's private state

__all__ = ["DurableJournal", "register_dump"]


# The dumps replaced durably, by absolute path, each with its node's sync record: pysyncobj's
# Serializer replaces a dump with its module's `atomicReplace`, so one hook serves every node
# of the process and tells them apart by path (set by each node as it starts).
_DURABLE_DUMPS: dict[str, SyncTimes] = {}


def register_dump(dump_path: str, times: SyncTimes | None) -> None:
    """Replace the dump at `dump_path` durably, counting in `times` (None: fsync off)."""
    path = os.path.abspath(dump_path)
    if times is None:
        _DURABLE_DUMPS.pop(path, None)
    else:
        _DURABLE_DUMPS[path] = times


def _replace_dump(tmp: str, path: str) -> None:
    times = _DURABLE_DUMPS.get(os.path.abspath(path))
    if times is None:
        os.rename(tmp, path)  # pysyncobj's own atomicReplace on POSIX
        return
    durable_replace(tmp, path)
    times.dump_synced()  # counted in this process only: compaction writes from a child


pysyncobj.serializer.atomicReplace = _replace_dump


class _DurableMetaStorer(MetaStorer):  # type: ignore[misc]
    """pysyncobj's term/vote record, stored (as pysyncobj does, before any vote or vote
    request goes out) so that it survives a power cut: pysyncobj's own moves an unsynced
    temp file over it, and a node that forgot its vote could vote twice in one term."""

    def __init__(self, path: str, times: SyncTimes) -> None:
        super().__init__(path)
        self._ripple_times = times

    def storeMeta(self, meta: dict[str, Any]) -> None:
        path = str(self.getPath())
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(pysyncobj_dumps(meta))
        durable_replace(tmp, path)
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

    def __init__(self, path: str, times: SyncTimes, *, fsync: bool) -> None:
        super().__init__(path)
        self._ripple_path = path
        self._ripple_times = times
        self._ripple_fsync = fsync
        self._ripple_dirty = False
        end = self._ripple_end()
        self._ripple_low = end  # the lowest record byte written since the last sync
        self._ripple_synced_end = end  # where the records ended at the last sync
        self._ripple_synced_index = self._ripple_last_index()
        self._ripple_image = SyncedImage.beside(path) if fsync else None
        if fsync:
            self._FileJournal__metaStorer = _DurableMetaStorer(path + ".meta", times)
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

    def add(self, command: Any, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self._ripple_dirty = self._ripple_fsync

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
        if not self._ripple_fsync:
            super().deleteEntriesTo(entryTo)
            return
        kept = list(self._FileJournal__journal[entryTo:])
        data = encode_journal(
            self._ripple_read(0, FIRST_RECORD_OFFSET),
            [(to_bytes(command), idx, term) for command, idx, term in kept],
        )
        tmp = self._ripple_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        durable_replace(tmp, self._ripple_path)
        self._FileJournal__journalFile._destroy()
        self._FileJournal__journalFile = ResizableFile(self._ripple_path)
        self._FileJournal__journal = kept
        self._FileJournal__currentOffset = len(data)
        self._ripple_low = self._ripple_synced_end = len(data)
        self._ripple_synced_index = self._ripple_last_index()
        self._ripple_dirty = False
        self._ripple_times.journal_rewritten()

    def sync(self) -> bool:
        """Make everything written so far durable; False when there was nothing to sync."""
        if not self._ripple_dirty:
            return False
        started = time.perf_counter()
        self.flush()  # msync(MS_SYNC) of the whole mapping: fdatasync of the file's pages
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
