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

import asyncio
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from pysyncobj import FAIL_REASON

from replication.entry import (
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
from replication.poller import LoopPoller
from replication.raft_node import RaftNode, RaftRole
from replication.refusals import Refusals
from replication.settings import RaftSettings

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
SHUTDOWN_JOIN_S = 5.0
# Raft on the event loop: the guard thread ticks in the loop's place, every GUARD_PERIOD_S,
# once the loop has not for LOOP_STALL_S (two and a half of the loop's own TICK_PERIOD_S, so
# never while the loop keeps up): while the loop is busy, each Raft message then waits at
# most about 60 ms, a fifth of the shortest election timeout, so a cluster whose loops are
# busy with reads still elects a leader within its timeouts. It logs at most once per interval.
LOOP_STALL_S = 0.05
GUARD_PERIOD_S = 0.01
GUARD_LOG_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftStatus:
    role: RaftRole
    leader_addr: str | None
    term: int
    commit_index: int
    applied_index: int
    ready: bool  # leader whose own entry of this term has been applied


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
        self._node = RaftNode(
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
            self._node.restore_loaded_snapshot()
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
        return MachineRead(self._lock, self._node.machine, view or _itself)

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
