"""Data directories made rather than grown: a node's journal and dump written so that it
starts from a given snapshot, and the log a stopped node left, read back.

Owns the knowledge of pysyncobj's dump file (gzip of a pickle of `(attributes, last entry,
entry before it, cluster)`, whose only attribute is `_cell`, `replication.entry.SnapshotCell`)
and of its replicated-call entries (`0x00` and a pickle of `(method id, (payload,))`; `0x01`
is a no-op). Both are pickle: `read_log` reads a data directory the way its node would at
start, so give it only a directory of your own cluster.

- `seed_node`: a dump holding the snapshot as applied through `index`, a journal of the
  dump's last two entries (no-ops at `index - 1` and `index`, of `term`) and a term and
  commit-index record saying `term` and `index`, all synced. The node
  loads the dump at start (`RaftNode.__loadDumpFile` keeps the journal, which begins exactly
  with them) and starts at `index` in `term`, as if it had compacted there.
- `read_log`: the dump's snapshot and position, and every journal entry after it, committed
  or not, with the payload the machine was (or would have been) given.
"""

from __future__ import annotations

import gzip
import io
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pysyncobj.pickle as syncobj_pickle
from pysyncobj.journal import FileJournal
from pysyncobj.node import TCPNode

from replication.durability import durable_replace, make_directory, sync_file
from replication.entry import PendingSnapshot, SnapshotCell
from replication.journal import read_journal

__all__ = ["LogEntry", "StoredLog", "read_log", "seed_node"]

_REGULAR = 0
_NO_OP = b"\x01"


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEntry:
    index: int
    term: int
    # What the replicated method was given (a machine entry, a batch, or b"" for a barrier);
    # None for pysyncobj's own entries (no-ops, membership and code-version changes).
    payload: bytes | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredLog:
    snapshot: bytes | None  # the dump's machine snapshot; None: no dump (never compacted)
    snapshot_index: int  # the index the snapshot is of (0 without one)
    snapshot_term: int
    entries: tuple[LogEntry, ...]  # every journal entry after the snapshot, in order

    @property
    def last_index(self) -> int:
        return self.entries[-1].index if self.entries else self.snapshot_index

    @property
    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.snapshot_term


class _Fixed:
    """The machine side of the seed's SnapshotCell: its snapshot is given, it applies nothing."""

    def __init__(self, snapshot: bytes) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> bytes:
        return self._snapshot

    def apply(self, entry: bytes) -> bytes:
        raise AssertionError("a seed applies nothing")

    def restore(self, data: bytes) -> None:
        raise AssertionError("a seed restores nothing")

    def halted(self) -> str | None:
        return None


def seed_node(
    journal_path: str,
    dump_path: str,
    snapshot: bytes,
    *,
    index: int,
    term: int,
    members: Sequence[str],
    durable: bool = True,
) -> None:
    """Write a node's journal and dump so that it starts from `snapshot` at `index` (>= 2)
    in `term` (>= 1), in a cluster of `members` (every node's Raft address)."""
    if index < 2 or term < 1:
        raise ValueError(f"a seed needs index >= 2 and term >= 1, got {index}, {term}")
    for path in (journal_path, dump_path):
        if os.path.exists(path):
            raise FileExistsError(f"{path} exists: a seed never overwrites a node's log")
        make_directory(os.path.dirname(os.path.abspath(path)), durable=durable)
    before_last, last = (_NO_OP, index - 1, term), (_NO_OP, index, term)
    journal = FileJournal(journal_path)
    try:
        journal.clear()
        journal.add(*before_last)
        journal.add(*last)
        journal.flush()
    finally:
        journal._destroy()
    # Its term and commit index (pysyncobj's `<journal>.meta`): the node starts committed
    # through `index`, as after the compaction the seed stands for.
    meta = {"raftCommitIndex": index, "currentTerm": term, "votedForNodeId": None}
    _write(journal_path + ".meta", syncobj_pickle.dumps(meta), durable=durable)
    cluster = {TCPNode(address) for address in members}
    data: tuple[Any, ...] = ({"_cell": SnapshotCell(_Fixed(snapshot))}, last, before_last, cluster)
    with io.BytesIO() as buffer:
        with gzip.GzipFile(fileobj=buffer, mode="wb") as g:
            syncobj_pickle.dump(data, g)
        _write(dump_path, buffer.getvalue(), durable=durable)
    if durable:
        sync_file(journal_path)


def _write(path: str, data: bytes, *, durable: bool) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    if durable:
        durable_replace(tmp, path)
    else:
        os.replace(tmp, path)


def read_log(journal_path: str, dump_path: str) -> StoredLog:
    """What a stopped node's data directory holds: its dump's snapshot, and every journal
    entry after it (the whole records a start would keep). Reads only."""
    snapshot: bytes | None = None
    snapshot_index = snapshot_term = 0
    if os.path.exists(dump_path):
        with open(dump_path, "rb") as f, gzip.GzipFile(fileobj=f) as g:
            data = syncobj_pickle.load(g)
        cell = data[0]["_cell"]
        if not isinstance(cell, PendingSnapshot):
            raise ValueError(f"{dump_path} holds no machine snapshot")
        snapshot = cell.data
        snapshot_index, snapshot_term = int(data[1][1]), int(data[1][2])
    entries: list[LogEntry] = []
    if os.path.exists(journal_path):
        for command, idx, term in read_journal(journal_path):
            if idx > snapshot_index:
                entries.append(LogEntry(index=idx, term=term, payload=_payload(command)))
    for before, after in itertools.pairwise(entries):
        if after.index != before.index + 1:
            raise ValueError(f"{journal_path}: entry {after.index} follows {before.index}")
    if entries and snapshot is not None and entries[0].index != snapshot_index + 1:
        raise ValueError(
            f"{journal_path} starts at {entries[0].index}, after the dump's {snapshot_index}"
        )
    return StoredLog(
        snapshot=snapshot,
        snapshot_index=snapshot_index,
        snapshot_term=snapshot_term,
        entries=tuple(entries),
    )


def _payload(command: bytes) -> bytes | None:
    if not command or command[0] != _REGULAR:
        return None
    call = syncobj_pickle.loads(command[1:])
    if not isinstance(call, tuple) or len(call) < 2 or not call[1]:
        raise ValueError("a replicated call without its entry")
    payload = call[1][0]
    if not isinstance(payload, bytes):
        raise ValueError("a replicated call whose entry is not bytes")
    return payload
