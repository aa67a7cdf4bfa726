"""A replicated log over pysyncobj: opaque bytes in, opaque result bytes out.

`ReplicatedLog` is one node's log and what the rest of the process uses of Raft. It knows no
domain type: it hands each committed entry to a `StateMachine` and returns what the machine
returned. It wires the parts, each in a module of its own:

- `replication.settings`: what the node is configured with, refused when unsafe;
- `replication.journal`: the journal file, its torn tail repaired before pysyncobj opens it;
- `replication.durability`: the syncs that make an acknowledgement durable, and their times;
- `replication.disk_faults`, `replication.slow_disk` and `replication.step_down`: a failing
  disk that halts the node, a slow one that makes a leader hand its leadership over;
- `replication.raft_node`: the pysyncobj node and every correction made to it;
- `replication.poller` and `replication.ticker`: Raft on the event loop, and on the stall
  guard thread while the loop is stuck;
- `replication.entry`: the never-raising apply path and what the dump holds;
- `replication.group_commit`: proposals, their batches and their deadlines;
- `replication.transport`: the Raft port;
- `replication.members` and `replication.reconfig`: who the voters are, and the leader's
  side of changing them online.

The invariants this module keeps itself:

- A leader is *ready* only once an entry it proposed in its current term has been
  applied: every entry committed before it is then applied too, so nothing is served
  from a state that misses committed writes.
- The machine is mutated only inside a tick, under the apply lock; `read()` takes the same
  lock, so a reader never observes a half-applied entry (or half of a batch).
- Role listeners run on the event loop thread, whichever thread ticked.
- A node whose machine halts (`StateMachine.halted`) leaves Raft at once: it stops ticking
  and closes its Raft port and journal, so it neither votes nor leads nor writes a dump of
  its frozen state; it keeps its data directory as it was, answers `status` with the reason,
  and refuses proposals. Restarted on code that can apply the entry, it replays its journal
  from its last dump and catches up.
- A node whose disk failed a sync or write of a Raft file (`replication.disk_faults`) halts
  the same way, at the end of the tick that met it, with the failure as its reason and one
  ERROR line; it leaves the last index its syncs covered beside the journal, and restarted,
  cuts its journal there (`replication.journal.drop_unsynced_tail`) and catches up.
- A leader whose journal syncs are slow (`replication.slow_disk`) hands its leadership to
  the follower that holds the most of its log (`replication.step_down`), and stands for no
  election until its disk has been fast for the cooldown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from pysyncobj import FAIL_REASON

from replication.disk_faults import DiskFailure, DiskFaults
from replication.durability import SYNC_SECONDS_BUCKETS, SyncStats, SyncTimes, make_directory
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
from replication.journal import drop_unsynced_tail, mark_unsynced_tail, repair_journal_tail
from replication.members import Member, Membership
from replication.poller import LoopPoller
from replication.raft_node import RaftNode, RaftRole
from replication.reconfig import Reconfiguration
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.slow_disk import SlowDisk
from replication.step_down import StepDown
from replication.ticker import Ticker
from shared.clock import Clock
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "DEFAULT_PROPOSE_TIMEOUT_S",
    "SYNC_SECONDS_BUCKETS",
    "GroupCommitStats",
    "MachineRead",
    "Member",
    "Membership",
    "NoLeaderError",
    "OutcomeUnknownError",
    "QueueFullError",
    "RaftRole",
    "RaftSettings",
    "RaftStatus",
    "ReplicatedLog",
    "ReplicationError",
    "StateMachine",
    "SyncStats",
    "apply_entry",
    "machine_error_result",
]

log = logging.getLogger(__name__)

# The name dumps on disk give the snapshot's unpickler (replication.entry): kept importable.
_unpickle_snapshot = unpickle_snapshot

V = TypeVar("V")  # what a read returns of the machine (`ReplicatedLog.read`)


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftStatus:
    role: RaftRole
    leader_addr: str | None
    term: int
    commit_index: int
    applied_index: int
    ready: bool  # leader whose own entry of this term has been applied
    halted: str | None = None  # why the node left Raft (a machine or disk failure)
    # `machine`, `sync_failed` or `disk_full` (replication.disk_faults), with `halted`.
    halt_kind: str | None = None
    disk_slow: bool = False  # the last journal syncs are over leader_sync_slow_ms


def _itself(machine: StateMachine) -> StateMachine:
    return machine


class MachineRead(Generic[V]):
    """`with log.read(view) as value:` holds the apply lock for the block; `value` is
    `view(machine)`. A class rather than a generator context manager: it is on every
    heartbeat, where a generator's enter and exit cost the leader's event loop more."""

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
    """One node's replicated log. Start it inside a running asyncio loop, which Raft then
    runs on; close it on that loop."""

    def __init__(
        self, settings: RaftSettings, machine: StateMachine, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        settings.validate()
        for path in (settings.journal_path, settings.dump_path):
            make_directory(os.path.dirname(os.path.abspath(path)), durable=settings.fsync)
        self._settings = settings
        self._machine = machine
        self._halted: str | None = None
        self._halt_kind: str | None = None
        self._clock = clock
        self._closed = False
        self._lock = threading.Lock()  # the apply lock: the machine's, for ticks and reads
        self._role = RaftRole.FOLLOWER
        self._ready_term = -1
        self._readiness_pending_term = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._role_listeners: list[Callable[[RaftRole], None]] = []
        drop_unsynced_tail(settings.journal_path)  # before the torn-tail repair reads it
        repair_journal_tail(settings.journal_path)
        self._refusals = Refusals(clock=clock)
        self._sync_times = SyncTimes()
        self._faults = DiskFaults.from_env()
        self._slow_disk = slow = SlowDisk(
            bound_ms=settings.leader_sync_slow_ms, cooldown_s=settings.leader_sync_cooldown_s
        )
        self._sync_times.on_journal_sync = lambda s: slow.synced(s, clock.monotonic_ms())
        raft_lock = threading.Lock()
        self._raft_lock = raft_lock
        self._poller = LoopPoller(raft_lock)
        self._node = RaftNode(
            settings,
            machine,
            self._lock,
            self._on_role,
            self._refusals,
            self._poller,
            self._sync_times,
            clock,
            faults=self._faults,
            may_stand=lambda: slow.may_stand(clock.monotonic_ms()),
        )
        # The leader's membership calls (`replication.reconfig`), on the loop, under the
        # same Raft lock every tick holds.
        self.reconfig = Reconfiguration(self._node, raft_lock, clock)
        self._step_down = StepDown(slow, self._node, raft_lock, self.reconfig, settings, clock)
        self._ticker = Ticker(
            self._node,
            self._poller,
            raft_lock,
            self._lock,
            after_tick=self._after_tick,
            clock=clock,
        )
        self._group = GroupCommit(
            settings.group_commit_limits(),
            append=self._append,
            on_loop=self._poller.on_loop,
            sent=self._ticker.tick_now,
            clock=clock,
        )

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ticker.start()

    def close(self) -> None:
        """Stop ticking and close the Raft port and the journal (on the event loop's thread)."""
        if not self._closed:
            self._closed = True
            self._step_down.close()
            self._ticker.close()

    @property
    def guard_ticks(self) -> int:
        """Ticks the stall guard ran because the event loop was busy (so far)."""
        return self._ticker.guard_ticks

    # -- roles and readiness -----------------------------------------------------------

    def on_role_change(self, listener: Callable[[RaftRole], None]) -> None:
        """`listener` runs on the event loop thread after each role change."""
        self._role_listeners.append(listener)

    def _on_role(self, role: RaftRole) -> None:
        if self._halted is not None:
            role = RaftRole.FOLLOWER  # leaving Raft: no listener hears of a role it holds
        self._role = role
        if role is not RaftRole.LEADER:
            self._ready_term = -1
        loop = self._loop
        if loop is not None:
            for listener in self._role_listeners:
                loop.call_soon_threadsafe(listener, role)

    def _after_tick(self) -> None:
        """After every tick (the Raft lock held, on the loop or the guard)."""
        if self._halted is not None:
            return
        failure = self._faults.failure
        if failure is not None:
            self._halt_on_disk(failure)
            return
        reason = self._machine.halted()
        if reason is not None:
            self._halt(reason)
            return
        self._check_readiness()
        self._step_down.after_tick(self._role is RaftRole.LEADER, self._loop)

    def _halt_on_disk(self, failure: DiskFailure) -> None:
        """A sync or write of a Raft file failed: leave Raft, never syncing again (module
        doc), and leave the synced index for the restart."""
        self._halted = failure.reason
        self._halt_kind = failure.kind
        self._role = RaftRole.FOLLOWER
        synced = self._node.journal().synced_index
        log.error(
            "HALTED (%s): %s. This node left Raft at synced index %d and answers 503 "
            "`halted`; the others go on without it",
            failure.kind,
            failure.reason,
            synced,
        )
        try:
            mark_unsynced_tail(self._settings.journal_path, synced)
        except OSError as exc:
            log.warning("could not mark the journal's synced index %d: %s", synced, exc)
        self._leave_raft_soon()

    def _halt(self, reason: str) -> None:
        """The machine stopped applying: leave Raft (on the loop, which owns closing)."""
        self._halted = reason
        self._halt_kind = "machine"
        self._role = RaftRole.FOLLOWER
        log.critical(
            "HALTED: the state machine stopped applying entries at index %d and this node "
            "leaves Raft until it is restarted on a release that can apply them: %s",
            int(self._node.raftLastApplied),
            reason,
        )
        self._leave_raft_soon()

    def _leave_raft_soon(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._leave_raft)

    def _leave_raft(self) -> None:
        self.close()
        for listener in self._role_listeners:
            listener(RaftRole.FOLLOWER)

    def _check_readiness(self) -> None:
        """A new leader proposes one empty entry of its own; once that entry is applied, so
        is everything committed before it (Raft's no-op rule)."""
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
        halted = self._halted
        leader = None if halted is not None else node._getLeader()
        role = self._role
        return RaftStatus(
            role=role,
            leader_addr=None if leader is None else str(leader.address),
            term=int(node.raftCurrentTerm),
            commit_index=int(node.raftCommitIndex),
            applied_index=int(node.raftLastApplied),
            ready=halted is None
            and role is RaftRole.LEADER
            and self._ready_term == node.raftCurrentTerm,
            halted=halted,
            halt_kind=self._halt_kind,
            disk_slow=self._slow_disk.slow,
        )

    @property
    def halted(self) -> str | None:
        """Why this node's machine stopped applying entries (it left Raft), or None."""
        return self._halted

    def sync_stats(self) -> SyncStats:
        """The journal syncs and other synced writes of this node (so far; any thread)."""
        return self._sync_times.stats()

    @property
    def slow_disk_step_downs(self) -> int:
        """Leaderships this node handed over for a slow disk (so far; any thread)."""
        return self._slow_disk.step_downs

    @property
    def dump_failures(self) -> int:
        """Compaction dumps that failed (each retried later; so far; any thread)."""
        return self._node.dump_failures()

    def link_versions(self) -> dict[str, int]:
        """The transport version of each open Raft link, by peer address (any thread)."""
        return self._node.transport().link_versions()

    def membership(self) -> Membership:
        """The voters as this node's log says, as of its last tick (any thread)."""
        return self._node.membership()

    def on_voter_change(self, listener: Callable[[bool], None]) -> None:
        """`listener(voter)` runs on the event loop thread when an entry makes this node a
        voter, or takes that away (a removal, or a truncated addition)."""

        def changed(voter: bool) -> None:
            loop = self._loop
            if loop is not None:
                loop.call_soon_threadsafe(listener, voter)

        self._node.on_voter_change(changed)

    def refused_connections(self) -> dict[str, int]:
        """Connections the Raft port refused or closed, by reason (any thread)."""
        return self._refusals.counts()

    @property
    def is_ready_leader(self) -> bool:
        return (
            self._role is RaftRole.LEADER
            and self._ready_term == self._node.raftCurrentTerm
            and self._halted is None
        )

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

    def read_at(self, view: Callable[[StateMachine], V]) -> tuple[V, int, int]:
        """`view(machine)` with the exact log position it reflects: (value, applied index,
        term of that entry). Holds the Raft lock too, so no tick is between an entry's apply
        and pysyncobj counting it: a snapshot taken this way is of exactly that index. Keep
        `view` short (a copy, not an encoding): every tick waits for it."""
        with self._raft_lock, self._lock:
            value = view(self._node.machine())
            applied = int(self._node.raftLastApplied)
            journal = self._node.journal()
            first = int(journal[0][1]) if len(journal) else applied + 1
            if first <= applied < first + len(journal):
                term = int(journal[applied - first][2])
            else:
                term = int(self._node.raftCurrentTerm)
        return value, applied, term

    # -- writes ------------------------------------------------------------------------

    async def propose(self, entry: bytes, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S) -> bytes:
        """Append `entry`, wait until it is committed and applied here, return the machine's
        result. Raises NoLeaderError (not appended: no leader, or the proposal queue is
        full) or OutcomeUnknownError (may commit).

        Group commit: the entry joins the queue; whenever fewer than
        `group_commit_in_flight_max` batches are in flight, everything queued (up to the
        batch bounds) goes out as one log entry. One client alone sees no extra wait: its
        proposal finds nothing in flight and goes out at once, as itself."""
        if self._halted is not None:
            raise NoLeaderError(f"this node halted and left Raft: {self._halted}")
        return await self._group.propose(entry, timeout_s)

    def _append(self, payload: bytes, callback: Callable[[Any, int], None]) -> None:
        self._node._apply_entry(payload, callback=callback)

    def group_commit_stats(self) -> GroupCommitStats:
        """Log entries sent by this node's proposals and proposals they carried (so far)."""
        return self._group.stats()

    async def barrier(self, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S) -> None:
        """Linearizable-read fence: once an empty entry proposed now has been applied here,
        local state reflects every write acknowledged before the call."""
        await self.propose(b"", timeout_s)
