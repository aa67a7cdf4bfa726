"""A replicated log over pysyncobj: opaque bytes in, opaque result bytes out.

This module owns the Raft node of one coordinator process and nothing else. It knows
no domain type: it hands each committed entry to a `StateMachine` and returns what the
machine returned. The invariants it keeps, each forced by a fact measured on pysyncobj
0.3.17 (DESIGN §2):

- The single replicated entry point never raises. An exception inside a replicated
  method makes pysyncobj retry the same entry on every tick forever, stalling the whole
  cluster, so a failing entry becomes an error *value* (`machine_error_result`).
- A cluster secret is mandatory (pysyncobj's wire format and dumps are pickle: anyone
  who can talk to the Raft port unauthenticated can run code; the transport's handshake
  and frame keys come from it) and the port binds to an explicit address.
- Both `journalFile` and `fullDumpFile` are set: a journal alone silently loses all
  state at the first log compaction. The dump holds the machine's own snapshot bytes.
- `appendEntriesUseBatch=False` (about 1 ms per write instead of about 100 ms).
- The Raft port is `replication.transport.HardenedTransport`: frames capped, peers proven
  by an HMAC handshake before anything is buffered, deadlines on every connection.
- Group commit: while a batch is in flight, proposals queue (bounded in entries and bytes);
  the next batch goes out as ONE log entry (`replication.batch`), applied item by item,
  each with its own result and its own failure; a lone proposal goes out as itself.
- A leader is *ready* only once an entry it proposed in its current term has been
  applied: every entry committed before it is then applied too, so nothing is served
  from a state that misses committed writes.

Threads: pysyncobj ticks on the asyncio event loop (`LoopPoller`), and on the stall guard
thread while the loop is busy (`_guard_forever`); every use of pysyncobj holds `_raft_lock`.
The machine is mutated only inside a tick, under `_lock`; readers on the loop take the same
lock (`read()`), so they never observe a half-applied entry. Results of a tick on the guard
cross back to the loop with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import _socket
import asyncio
import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar, overload

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from replication.entry import (
    PendingSnapshot,
    SnapshotCell,
    StateMachine,
    apply_entry,
    machine_error_result,
    unpickle_snapshot,
)
from replication.errors import (
    NoLeaderError,
    OutcomeUnknownError,
    QueueFullError,
    ReplicationError,
)
from replication.group_commit import DEFAULT_PROPOSE_TIMEOUT_S, GroupCommit, GroupCommitStats
from replication.journal import repair_journal_tail
from replication.poller import KickNotifier, LoopPoller
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.transport import HardenedTransport

# pysyncobj 0.3.17 (pysyncobj/win_inet_pton.py) replaces socket.inet_ntop on every platform
# with a Windows-only function that raises off Windows; anything in this process that
# formats an address (psutil, resolvers) would break. Put the real one back.
socket.inet_ntop = _socket.inet_ntop

__all__ = [
    "DEFAULT_PROPOSE_TIMEOUT_S",
    "NoLeaderError",
    "OutcomeUnknownError",
    "QueueFullError",
    "RaftRole",
    "RaftSettings",
    "RaftStatus",
    "ReplicatedLog",
    "ReplicationError",
    "StateMachine",
    "apply_entry",
    "machine_error_result",
]

log = logging.getLogger(__name__)

# The name dumps on disk give the snapshot's unpickler (replication.entry): kept importable.
_unpickle_snapshot = unpickle_snapshot

V = TypeVar("V")  # what a read returns of the machine (`ReplicatedLog.read`)

TICK_PERIOD_S = 0.02  # a tick on the loop at least this often: Raft's timers are checked in it
BIND_RETRIES_MAX = 20
BIND_RETRY_S = 0.25
SHUTDOWN_JOIN_S = 5.0
# How long after a commit the leader may wait before telling the followers the new commit
# index in an AppendEntries of its own (`_RaftNode._SyncObj__applyLogEntries`).
COMMIT_NOTICE_DELAY_S = 0.005
# Raft on the event loop: the guard thread ticks in the loop's place, every GUARD_PERIOD_S,
# once the loop has not for LOOP_STALL_S (two and a half of the loop's own TICK_PERIOD_S, so
# never while the loop keeps up): while the loop is busy, each Raft message then waits at
# most about 60 ms, a fifth of the shortest election timeout, so a cluster whose loops are
# busy with reads still elects a leader within its timeouts. It logs at most once per interval.
LOOP_STALL_S = 0.05
GUARD_PERIOD_S = 0.01
GUARD_LOG_INTERVAL_S = 10.0


class RaftRole(Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


_ROLE_BY_PYSYNCOBJ_STATE = {0: RaftRole.FOLLOWER, 1: RaftRole.CANDIDATE, 2: RaftRole.LEADER}


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftStatus:
    role: RaftRole
    leader_addr: str | None
    term: int
    commit_index: int
    applied_index: int
    ready: bool  # leader whose own entry of this term has been applied


def syncobj_conf(settings: RaftSettings, **extra: Any) -> SyncObjConf:
    """pysyncobj's configuration for `settings`, with `extra` (pysyncobj's own names) on top.
    No `password`: the transport seals every frame under keys of its own connection
    (`replication.wire.Session`); pysyncobj's Fernet on top would only cost CPU."""
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


class _RaftNode(SyncObj):  # type: ignore[misc]
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
    # ours before the transport and the pipe subscribe to it.
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
        """A follower's answer to append_entries, made to converge (pysyncobj 0.3.17).

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

        pysyncobj 0.3.17 keeps the journal only if it starts exactly with the dump's last two
        entries; otherwise it clears it. But it trims the journal to the dump only on the tick
        after the forked child has written the dump, so a node stopped in between (any stop
        soon after a compaction) restarts with a journal that still starts earlier: every
        entry after the dump was dropped, acknowledged ones included, on all nodes that
        stopped alike (tests/integration/test_replication.py's restart test, about half the
        runs). Trimming the journal to the dump first keeps what came after it.
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
        than at once (pysyncobj 0.3.17, appendEntriesUseBatch off, sends every follower an
        AppendEntries after each apply, only to carry the commit index).

        That second round (a message out and an answer back per follower, per commit) ran
        right after the commit's callback, holding the GIL while the event loop needed it to
        answer the writer; without it, at one client, each follower spent 28% and the
        leader 13% less CPU per write (interleaved A/B, docs/benchmarks.md). Now the notice
        waits up to COMMIT_NOTICE_DELAY_S: the next write's AppendEntries carries it sooner
        when writes keep coming, and alone it goes then.
        Followers' local state lags the commit by that much more when the leader is idle
        (their reads say `stale`; consistent reads go through the leader)."""
        if SyncObj._SyncObj__applyLogEntries(self):
            soon = time.monotonic() + COMMIT_NOTICE_DELAY_S
            if soon < self._SyncObj__newAppendEntriesTime:
                self._SyncObj__newAppendEntriesTime = soon
        return False

    def _machine(self) -> StateMachine:
        """The machine, restoring a snapshot pysyncobj loaded since the last call.
        Call with `_ripple_lock` held."""
        cell = self._cell
        if isinstance(cell, PendingSnapshot):
            self._ripple_machine.restore(cell.data)
            self._cell = SnapshotCell(self._ripple_machine)
        return self._ripple_machine

    @replicated  # type: ignore[untyped-decorator]
    def _apply_entry(self, entry: bytes) -> bytes:
        # The one replicated entry point. It must never raise (see module docstring).
        if not entry:
            return b""  # a barrier: ordering only, the machine never sees it
        with self._ripple_lock:
            return apply_entry(self._machine(), entry)


def _itself(machine: StateMachine) -> StateMachine:
    return machine


class MachineRead(Generic[V]):
    """`with log.read(view) as value:` holds the apply lock for the block; `value` is
    `view(machine)`. A class rather than a generator context manager: it is on every
    heartbeat (profiled: the generator's enter/exit was 2-3% of the leader's event loop at
    10,000 workers)."""

    __slots__ = ("_lock", "_machine", "_view")

    def __init__(
        self,
        lock: threading.Lock,
        machine: Callable[[], StateMachine],
        view: Callable[[StateMachine], V],
    ) -> None:
        self._lock = lock
        self._machine = machine
        self._view = view

    def __enter__(self) -> V:
        self._lock.acquire()
        try:
            return self._view(self._machine())
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *_exc: object) -> None:
        self._lock.release()


class ReplicatedLog:
    """One node's replicated log. Start it inside a running asyncio loop."""

    def __init__(self, settings: RaftSettings, machine: StateMachine) -> None:
        settings.validate()
        for path in (settings.journal_path, settings.dump_path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._settings = settings
        self._lock = threading.Lock()
        self._role = RaftRole.FOLLOWER
        self._ready_term = -1
        self._readiness_pending_term = -1
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._role_listeners: list[Callable[[RaftRole], None]] = []
        repair_journal_tail(settings.journal_path)
        self._refusals = Refusals()
        # Every use of pysyncobj holds this on the loop (uncontended there) and on the guard.
        self._raft_lock = threading.Lock()
        self._poller = LoopPoller(self._raft_lock)
        self._node = _RaftNode(
            settings, machine, self._lock, self._on_role, self._refusals, self._poller
        )
        self._guard = threading.Thread(target=self._guard_forever, name="raft-guard", daemon=True)
        self._tick_pending = False  # a tick is due on the loop (`_kick`)
        self._tick_timer: asyncio.Handle | None = None
        self._last_turn = time.monotonic()  # the loop's last tick or Raft event
        self._guard_rounds = 0
        self._guard_logged_at = -math.inf
        self._group = GroupCommit(
            settings.group_commit_limits(),
            append=self._append,
            on_loop=self._poller.on_loop,
            sent=self._send_now,
        )

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._last_turn = time.monotonic()
        self._poller.attach(loop, self._kick, self._turned)
        self._tick_timer = loop.call_soon(self._tick_periodically)
        self._guard.start()

    def close(self) -> None:
        """Stop ticking and close the Raft port and the journal (on the event loop's thread)."""
        self._stop.set()
        if self._guard.is_alive():
            self._guard.join(SHUTDOWN_JOIN_S)
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        with self._raft_lock, contextlib.suppress(Exception):
            self._node.destroy()  # autoTick is off: closes sockets and the journal now
        self._poller.close()

    def _tick(self) -> None:
        """One pysyncobj tick, on the loop or on the guard, with `_raft_lock` held."""
        try:
            self._node.doTick(0.0)
            with self._lock:
                self._node._machine()
            self._check_readiness()
        except Exception:
            log.exception("raft tick failed")

    def _turned(self) -> None:
        self._last_turn = time.monotonic()

    def _tick_on_loop(self) -> None:
        self._tick_pending = False  # this tick serves every kick made before it
        with self._raft_lock:
            self._tick()
        self._last_turn = time.monotonic()

    def _kick(self) -> None:
        """Tick on the loop once the events of this pass are handled (at most one due)."""
        loop, poller = self._loop, self._poller
        if loop is None:
            return
        if not poller.on_loop():
            loop.call_soon_threadsafe(self._kicked)  # from the guard
        elif not self._tick_pending:
            self._tick_pending = True
            loop.call_soon(self._kicked)

    def _kicked(self) -> None:
        if self._tick_pending and not self._stop.is_set():
            self._tick_on_loop()

    def _tick_periodically(self) -> None:
        """On the loop: Raft's timers (elections, heartbeats, reconnects, the transport's
        deadlines) are checked in each tick; with no events, one every TICK_PERIOD_S."""
        if self._stop.is_set() or self._loop is None:
            return
        self._tick_on_loop()
        self._tick_timer = self._loop.call_later(TICK_PERIOD_S, self._tick_periodically)

    def _guard_forever(self) -> None:
        """The stall guard: when the loop has not ticked Raft for LOOP_STALL_S (busy with a
        long request, a big plan, a collection), this thread reads the Raft sockets and ticks
        in its place, so the leader keeps sending heartbeats and a follower keeps hearing
        them through the stall.
        It wakes every GUARD_PERIOD_S and does nothing while the loop keeps up."""
        poller = self._poller
        while not self._stop.wait(GUARD_PERIOD_S):
            stalled = time.monotonic() - self._last_turn
            if stalled < LOOP_STALL_S:
                continue
            with self._raft_lock:
                if self._stop.is_set() or time.monotonic() - self._last_turn < LOOP_STALL_S:
                    continue
                self._guard_rounds += 1
                poller.dispatch_ready()
                self._tick()
            now = time.monotonic()
            if now - self._guard_logged_at > GUARD_LOG_INTERVAL_S:
                self._guard_logged_at = now
                log.warning(
                    "event loop busy for %.0f ms: Raft ticked on the guard thread "
                    "(%d guard ticks so far)",
                    stalled * 1000,
                    self._guard_rounds,
                )

    @property
    def guard_ticks(self) -> int:
        """Ticks the stall guard ran because the event loop was busy (so far)."""
        return self._guard_rounds

    # -- roles and readiness -----------------------------------------------------------

    def on_role_change(self, listener: Callable[[RaftRole], None]) -> None:
        """`listener` runs on the event loop thread after each role change."""
        self._role_listeners.append(listener)

    def _on_role(self, role: RaftRole) -> None:
        self._role = role
        if role is not RaftRole.LEADER:
            self._ready_term = -1
        loop = self._loop
        if loop is not None:
            for listener in self._role_listeners:
                loop.call_soon_threadsafe(listener, role)

    def _check_readiness(self) -> None:
        """On the tick thread: a new leader proposes one empty entry of its own; once that
        entry is applied, so is everything committed before it (Raft's no-op rule)."""
        if self._role is not RaftRole.LEADER:
            return
        term = self._node.raftCurrentTerm
        if self._ready_term == term or self._readiness_pending_term == term:
            return
        self._readiness_pending_term = term

        def done(_result: Any, err: int) -> None:
            if err == FAIL_REASON.SUCCESS and self._node.raftCurrentTerm == term:
                self._ready_term = term
                loop = self._loop
                if loop is not None:
                    for listener in self._role_listeners:
                        loop.call_soon_threadsafe(listener, RaftRole.LEADER)
            else:
                self._readiness_pending_term = -1  # try again next tick

        self._node._apply_entry(b"", callback=done)

    def status(self) -> RaftStatus:
        node = self._node
        leader = node._getLeader()
        role = self._role
        return RaftStatus(
            role=role,
            leader_addr=None if leader is None else str(leader.address),
            term=int(node.raftCurrentTerm),
            commit_index=int(node.raftCommitIndex),
            applied_index=int(node.raftLastApplied),
            ready=role is RaftRole.LEADER and self._ready_term == node.raftCurrentTerm,
        )

    def refused_connections(self) -> dict[str, int]:
        """Connections the Raft port refused or closed, by reason (any thread)."""
        return self._refusals.counts()

    @property
    def is_ready_leader(self) -> bool:
        return self._role is RaftRole.LEADER and self._ready_term == self._node.raftCurrentTerm

    @property
    def settings(self) -> RaftSettings:
        return self._settings

    @overload
    def read(self) -> MachineRead[StateMachine]: ...

    @overload
    def read(self, view: Callable[[StateMachine], V]) -> MachineRead[V]: ...

    def read(self, view: Callable[[StateMachine], Any] | None = None) -> MachineRead[Any]:
        """Local (possibly stale on a follower) read of the machine, or of `view(machine)`,
        never torn: a context manager holding the apply lock."""
        return MachineRead(self._lock, self._node._machine, view or _itself)

    # -- writes ------------------------------------------------------------------------

    async def propose(self, entry: bytes, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S) -> bytes:
        """Append `entry`, wait until it is committed and applied here, return the machine's
        result. Raises NoLeaderError (not appended: no leader, or the proposal queue is
        full) or OutcomeUnknownError (may commit).

        Group commit: the entry joins the queue; whenever fewer than
        `group_commit_in_flight_max` batches are in flight, everything queued (up to the
        batch bounds) goes out as one log entry. One client alone sees no extra wait: its
        proposal finds nothing in flight and goes out at once, as itself."""
        return await self._group.propose(entry, timeout_s)

    def _append(self, payload: bytes, callback: Callable[[Any, int], None]) -> None:
        self._node._apply_entry(payload, callback=callback)

    def _send_now(self) -> None:
        """On the loop: tick now, so a batch just queued goes out in this pass of the loop
        rather than the next. Not inside a tick (a commit freed the slot: the same tick sends
        it), nor while the guard ticks (its kick does), nor under a read (`_lock`: the tick
        applies under it)."""
        if self._stop.is_set() or self._lock.locked():
            return
        if self._raft_lock.acquire(blocking=False):
            self._tick_pending = False  # the tick the proposal kicked: this is it
            try:
                self._tick()
            finally:
                self._raft_lock.release()

    def group_commit_stats(self) -> GroupCommitStats:
        """Log entries sent by this node's proposals and proposals they carried (so far)."""
        return self._group.stats()

    async def barrier(self, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S) -> None:
        """Linearizable-read fence: once an empty entry proposed now has been applied here,
        local state reflects every write acknowledged before the call."""
        await self.propose(b"", timeout_s)
