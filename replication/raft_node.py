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

from pysyncobj import SyncObj, SyncObjConf, replicated

from replication.entry import PendingSnapshot, SnapshotCell, StateMachine, apply_entry
from replication.poller import KickNotifier, LoopPoller
from replication.pysyncobj_pin import check_pysyncobj_version
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.transport import HardenedTransport

check_pysyncobj_version()
socket.inet_ntop = _socket.inet_ntop

__all__ = ["COMMIT_NOTICE_DELAY_S", "RaftNode", "RaftRole", "syncobj_conf"]

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
    ) -> None:
        # Attributes set before SyncObj.__init__ are pysyncobj "properties": excluded from
        # dumps. Only `_cell`, set after, is serialized.
        self._ripple_loop_poller = poller
        self._ripple_machine = machine
        self._ripple_lock = lock
        self._ripple_backup_to: int | None = None
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
        self._cell = SnapshotCell(machine)

    # SyncObj's constructor assigns `self._poller = createPoller(...)`; the poller must be
    # ours before the transport and the pipe subscribe to it, so pysyncobj's is dropped.
    @property
    def _poller(self) -> Any:
        return self._ripple_loop_poller

    @_poller.setter
    def _poller(self, value: Any) -> None:
        pass

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
        """
        if success:
            self._ripple_backup_to = None
        elif reset and nextNodeIdx is not None:  # conflict at prevLogIdx: back up
            prev = self._ripple_backup_to
            self._ripple_backup_to = nextNodeIdx if prev is None else min(prev, nextNodeIdx)
        elif reset and self._ripple_backup_to is not None:  # a later message of the burst
            end = int(self._SyncObj__getCurrentLogIndex()) + 1
            nextNodeIdx = min(self._ripple_backup_to, end)
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
