"""The pysyncobj node of one process: `RaftNode`, with every correction Ripple makes to it.

Owns the `SyncObj` subclass, its configuration and its one replicated method, and is the
only module that overrides SyncObj's private (name-mangled) methods or reads its private
state. It is written against pysyncobj 0.3.17 and refuses any other release at import
(`replication.pysyncobj_pin`); tests/integration/test_replication.py checks that every
private name below still exists and still means what it is used for. Each correction and
why it is needed:

- `socket.inet_ntop` is put back: importing pysyncobj replaces it on every platform with a
  Windows-only function, and anything else in the process that formats an address would
  break.
- `_poller` (a property over SyncObj's `self._poller = createPoller(...)`): the poller is
  `replication.poller.LoopPoller`, so the transport's sockets are watched by the event loop.
- `__pipeNotifier` (and the pipe's `__pipeR`, `__pipeW`): replaced by a
  `KickNotifier` and the pipe closed, because on the loop a proposal kicks a tick directly.
- `__sendNextNodeIdx` (reads `__getCurrentLogIndex`): a follower's answers to a chained
  append burst are kept from cancelling each other out, or a node with a divergent tail
  never catches up (chaos scenario b).
- `__loadDumpFile` (reads `__serializer`, `__raftLog`; calls `__deleteEntriesTo`): the
  journal is trimmed to the dump before loading it, or a node stopped between a compaction
  and pysyncobj's own trim drops every entry after the dump, acknowledged ones included.
- `__applyLogEntries` (writes `__newAppendEntriesTime`): the commit notice rides the next
  AppendEntries within COMMIT_NOTICE_DELAY_S instead of a round of its own after each apply.

Durable acknowledgements (docs/design.md §2), with `RaftSettings.fsync` on; pysyncobj syncs
nothing, so a power cut of a majority could lose acknowledged entries and reuse a term:

- `__raftLog` (swapped right after SyncObj's constructor opened it): a `DurableJournal` on
  the same file, which knows what it has synced (`sync`, `dirty`, `synced_index`), stores
  the term/vote record durably (`FileJournal.__metaStorer`) and replaces itself whole when
  trimmed after a compaction (`FileJournal.__journal`, `__journalFile`, `__currentOffset`):
  pysyncobj rewrites the records in place, and a cut midway garbles entries after the dump.
- `_onTick`: the journal is synced before pysyncobj's tick, whose commit computation counts
  the leader itself for every entry of its log, and again after it, so the entries the
  leader appended in the tick reach its disk while the followers write theirs.
- `__sendNextNodeIdx`: a follower's success answer says it holds the entries, so it waits,
  with any answer behind it, for the sync at the start of the next tick, one sync for every
  answer of a pass of the loop.
- `pysyncobj.serializer.atomicReplace` (a module global, used for the dump pysyncobj writes
  and the one a follower receives; a bare rename): dumps of nodes with fsync on are
  replaced by `durable_replace`, the file and its directory synced.

Other invariants: the one replicated method (`_apply_entry`) never raises
(`replication.entry`); the machine is touched only under the apply lock; the only attribute
pysyncobj dumps is `_cell`, the machine's snapshot bytes.
"""

from __future__ import annotations

import _socket
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

import pysyncobj.serializer
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal, MetaStorer, ResizableFile
from pysyncobj.pickle import dumps as pysyncobj_dumps
from pysyncobj.pickle import to_bytes

from replication.durability import SyncedImage, SyncTimes, durable_replace, sync_directory
from replication.entry import PendingSnapshot, SnapshotCell, StateMachine, apply_entry
from replication.journal import FIRST_RECORD_OFFSET, encode_journal, sync_writes
from replication.poller import KickNotifier, LoopPoller
from replication.pysyncobj_pin import check_pysyncobj_version
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.transport import HardenedTransport

check_pysyncobj_version()
socket.inet_ntop = _socket.inet_ntop

__all__ = ["COMMIT_NOTICE_DELAY_S", "DurableJournal", "RaftNode", "RaftRole", "syncobj_conf"]

log = logging.getLogger(__name__)

BIND_RETRIES_MAX = 20
BIND_RETRY_S = 0.25
# How long after a commit the leader may wait before telling the followers the new commit
# index in an AppendEntries of its own (`RaftNode._SyncObj__applyLogEntries`).
COMMIT_NOTICE_DELAY_S = 0.005


class RaftRole(Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


_ROLE_BY_PYSYNCOBJ_STATE = {0: RaftRole.FOLLOWER, 1: RaftRole.CANDIDATE, 2: RaftRole.LEADER}


def syncobj_conf(settings: RaftSettings, **extra: Any) -> SyncObjConf:
    """pysyncobj's configuration for `settings`, with `extra` (pysyncobj's own names) on top.
    Both a journal and a dump (a journal alone loses all state at the first compaction);
    `appendEntriesUseBatch` off, so a write is sent at once rather than on the next
    AppendEntries period. No `password`: the transport seals every frame under keys of its own
    connection (`replication.wire.Session`), and pysyncobj's Fernet on top would only cost
    CPU."""
    return SyncObjConf(
        bindAddress=settings.bind_addr,
        journalFile=settings.journal_path,
        fullDumpFile=settings.dump_path,
        appendEntriesUseBatch=False,
        raftMinTimeout=settings.raft_min_timeout_s,
        raftMaxTimeout=settings.raft_max_timeout_s,
        appendEntriesPeriod=settings.append_entries_period_s,
        leaderFallbackTimeout=settings.leader_fallback_timeout_s,
        connectionTimeout=settings.connection_timeout_s,
        connectionRetryTime=settings.connection_retry_s,
        logCompactionMinEntries=settings.log_compaction_min_entries,
        logCompactionMinTime=settings.log_compaction_min_time_s,
        commandsQueueSize=settings.commands_queue_max,
        maxBindRetries=BIND_RETRIES_MAX,
        bindRetryTime=BIND_RETRY_S,
        dynamicMembershipChange=False,
        **extra,
    )


# The dumps replaced durably, by absolute path, each with its node's sync record: pysyncobj's
# Serializer replaces a dump with its module's `atomicReplace`, so one hook serves every node
# of the process and tells them apart by path (set by each node as it starts).
_DURABLE_DUMPS: dict[str, SyncTimes] = {}


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


class RaftNode(SyncObj):  # type: ignore[misc]
    """pysyncobj ticked by its owner (`autoTick` off) on the event loop's poller; the machine
    behind its one replicated method. Every call into it holds the node's Raft lock."""

    # pysyncobj's own (private) time of the leader's next AppendEntries round.
    _SyncObj__newAppendEntriesTime: float

    def __init__(
        self,
        settings: RaftSettings,
        machine: StateMachine,
        lock: threading.Lock,
        on_role: Callable[[RaftRole], None],
        refusals: Refusals,
        poller: LoopPoller,
        sync_times: SyncTimes,
    ) -> None:
        # Attributes set before SyncObj.__init__ are pysyncobj "properties": excluded from
        # dumps. Only `_cell`, set after, is serialized.
        self._ripple_loop_poller = poller
        self._ripple_machine = machine
        self._ripple_lock = lock
        self._ripple_backup_to: int | None = None
        # A follower's answers waiting for the journal sync (`__sendNextNodeIdx`), in order.
        self._ripple_answers: list[tuple[Any, bool, int, bool]] = []
        self._ripple_journal: DurableJournal | None = None
        dump_path = os.path.abspath(settings.dump_path)
        if settings.fsync:
            _DURABLE_DUMPS[dump_path] = sync_times
        else:
            _DURABLE_DUMPS.pop(dump_path, None)
        conf = syncobj_conf(
            settings,
            autoTick=False,
            onStateChanged=lambda _old, new: on_role(
                _ROLE_BY_PYSYNCOBJ_STATE.get(new, RaftRole.FOLLOWER)
            ),
        )
        transport = HardenedTransport.factory(
            limits=settings.transport_limits(), secret=settings.secret, refusals=refusals
        )
        super().__init__(
            settings.self_addr, list(settings.partners), conf, transportClass=transport
        )
        # pysyncobj's pipe (subscribed in its constructor) is not needed on the loop.
        pipe: Any = self.__dict__["_SyncObj__pipeNotifier"]
        read_fd, write_fd = pipe._PipeNotifier__pipeR, pipe._PipeNotifier__pipeW
        poller.unsubscribe(read_fd)
        os.close(read_fd)
        os.close(write_fd)
        self._SyncObj__pipeNotifier = KickNotifier(poller)
        # pysyncobj's journal (opened in its constructor, no tick yet) handed over to ours on
        # the same file: closing it syncs its mapping, and ours reads what it wrote.
        self.__dict__["_SyncObj__raftLog"]._destroy()
        self._ripple_journal = DurableJournal(
            settings.journal_path, sync_times, fsync=settings.fsync
        )
        self._SyncObj__raftLog = self._ripple_journal
        self._cell = SnapshotCell(machine)

    # SyncObj's constructor assigns `self._poller = createPoller(...)`; the poller must be
    # ours before the transport and the pipe subscribe to it, so pysyncobj's is dropped.
    @property
    def _poller(self) -> Any:
        return self._ripple_loop_poller

    @_poller.setter
    def _poller(self, value: Any) -> None:
        pass

    def journal(self) -> DurableJournal:
        """The node's journal. A method, not a property: SyncObj's constructor reads every
        attribute of the node, before the journal is ours."""
        journal = self._ripple_journal
        assert journal is not None, "set in __init__"
        return journal

    # Overrides SyncObj._onTick, what doTick runs.
    def _onTick(self, timeToWait: float = 0.0) -> None:
        """pysyncobj's tick between two journal syncs. The first makes every entry appended
        since the last tick durable before the tick's commit computation counts the leader
        itself for each entry of its log, and lets a follower's answers go; the second syncs
        what the leader appended in the tick, while the followers are writing it too."""
        self._ripple_sync_and_answer()
        SyncObj._onTick(self, timeToWait)
        self.journal().sync()

    def _ripple_sync_and_answer(self) -> None:
        self.journal().sync()
        answers, self._ripple_answers = self._ripple_answers, []
        for node, reset, next_idx, success in answers:
            SyncObj._SyncObj__sendNextNodeIdx(
                self, node, reset=reset, nextNodeIdx=next_idx, success=success
            )

    # Overrides pysyncobj's private SyncObj.__sendNextNodeIdx (its name, mangled).
    def _SyncObj__sendNextNodeIdx(
        self,
        node: Any,
        reset: bool = False,
        nextNodeIdx: int | None = None,
        success: bool = False,
    ) -> None:
        """A follower's answer to append_entries, made to converge.

        The leader sends everything from its guess of our next index in one burst of
        messages, each chained on the one before. When our tail conflicts (term mismatch
        at prevLogIdx) we ask it to back up one entry; every later message of the burst
        then names a prevLogIdx we do not have, and pysyncobj answers those with "reset to
        the end of your log", which the leader applies after the back-up. Once the
        leader holds more than one batch (64 KiB) past the conflict, the two answers cancel
        out forever and this node never catches up (chaos scenario b, --soak). So until an
        append succeeds, a "do not have it" answer repeats the lowest back-up point asked for.

        A success answer tells the leader the entries are ours to count: while the journal
        holds unsynced writes it waits for the sync at the next tick's start, and every answer
        after it waits behind it, so the leader hears them in order.
        """
        if success:
            self._ripple_backup_to = None
        elif reset and nextNodeIdx is not None:  # conflict at prevLogIdx: back up
            prev = self._ripple_backup_to
            self._ripple_backup_to = nextNodeIdx if prev is None else min(prev, nextNodeIdx)
        elif reset and self._ripple_backup_to is not None:  # a later message of the burst
            end = int(self._SyncObj__getCurrentLogIndex()) + 1
            nextNodeIdx = min(self._ripple_backup_to, end)
        if self._ripple_answers or (success and self.journal().dirty):
            # Durable acknowledgements: held for the sync at the next tick's start (`_onTick`),
            # in order. The index is fixed now, as pysyncobj would have sent it now.
            if nextNodeIdx is None:
                nextNodeIdx = int(self._SyncObj__getCurrentLogIndex()) + 1
            self._ripple_answers.append((node, reset, nextNodeIdx, success))
            return
        SyncObj._SyncObj__sendNextNodeIdx(
            self, node, reset=reset, nextNodeIdx=nextNodeIdx, success=success
        )

    # Overrides pysyncobj's private SyncObj.__loadDumpFile (its name, mangled).
    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """Load the dump without throwing away the journal entries written after it.

        pysyncobj keeps the journal only if it starts exactly with the dump's last two
        entries; otherwise it clears it. But it trims the journal to the dump only on the tick
        after the forked child has written the dump, so a node stopped in between (any stop
        soon after a compaction) restarts with a journal that still starts earlier, and every
        entry after the dump would be dropped, acknowledged ones included, on all nodes that
        stopped alike (tests/integration/test_replication.py's restart test). Trimming the
        journal to the dump first keeps what came after it.
        """
        serializer = self._SyncObj__serializer
        data = serializer.deserialize()
        if not clearJournal:
            self._ripple_trim_journal_to(data[2], data[1])
        original = serializer.deserialize
        serializer.deserialize = lambda: data  # read the file once, not twice
        try:
            SyncObj._SyncObj__loadDumpFile(self, clearJournal)
        finally:
            serializer.deserialize = original

    def _ripple_trim_journal_to(self, before_last: Any, last: Any) -> None:
        journal = self._SyncObj__raftLog
        if len(journal) < 2:
            return
        pos = int(before_last[1]) - int(journal[0][1])
        if not 0 < pos < len(journal) - 1:
            return  # already aligned, or the journal does not reach the dump
        if journal[pos] == before_last and journal[pos + 1] == last:
            log.info(
                "journal starts at index %d, before the dump's index %d (stopped before "
                "trimming it): trimming it, keeping the %d entries after the dump",
                journal[0][1],
                last[1],
                len(journal) - pos - 2,
            )
            self._SyncObj__deleteEntriesTo(before_last[1])

    # Overrides pysyncobj's private SyncObj.__applyLogEntries (its name, mangled).
    def _SyncObj__applyLogEntries(self) -> bool:
        """Apply what is committed, and tell the followers the new commit index soon rather
        than at once (pysyncobj, appendEntriesUseBatch off, sends every follower an
        AppendEntries after each apply, only to carry the commit index).

        That second round (a message out and an answer back per follower, per commit) would
        run right after the commit's callback, holding the GIL while the event loop needs it
        to answer the writer, and costs each follower and the leader CPU per write
        (docs/benchmarks.md). The notice waits up to COMMIT_NOTICE_DELAY_S instead: the next
        write's AppendEntries carries it sooner when writes keep coming, and alone it goes
        then. Followers' local state lags the commit by that much more when the leader is
        idle (their reads say `stale`; consistent reads go through the leader)."""
        if SyncObj._SyncObj__applyLogEntries(self):
            soon = time.monotonic() + COMMIT_NOTICE_DELAY_S
            if soon < self._SyncObj__newAppendEntriesTime:
                self._SyncObj__newAppendEntriesTime = soon
        return False

    def machine(self) -> StateMachine:
        """The machine, restoring a snapshot pysyncobj loaded since the last call.
        Call with the apply lock held."""
        cell = self._cell
        if isinstance(cell, PendingSnapshot):
            self._ripple_machine.restore(cell.data)
            self._cell = SnapshotCell(self._ripple_machine)
        return self._ripple_machine

    def restore_loaded_snapshot(self) -> None:
        """After a tick: a dump pysyncobj loaded in it goes into the machine now, under the
        apply lock, rather than on the next read."""
        with self._ripple_lock:
            self.machine()

    @replicated  # type: ignore[untyped-decorator]
    def _apply_entry(self, entry: bytes) -> bytes:
        # The one replicated entry point; it never raises (replication.entry). Journal
        # entries carry its number, which pysyncobj gives replicated methods in name order:
        # a second replicated method could renumber it.
        if not entry:
            return b""  # a barrier: ordering only, the machine never sees it
        with self._ripple_lock:
            return apply_entry(self.machine(), entry)
