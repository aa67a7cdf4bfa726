"""A replicated log over pysyncobj: opaque bytes in, opaque result bytes out.

`ReplicatedLog` is one node's log and what the rest of the process uses of Raft. It knows no
domain type: it hands each committed entry to a `StateMachine` and returns what the machine
returned. It wires the parts, each in a module of its own:

- `replication.settings`: what the node is configured with, refused when unsafe;
- `replication.journal`: the journal file, its torn tail repaired before pysyncobj opens it;
- `replication.durability`: the syncs that make an acknowledgement durable, and their times;
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
from replication.journal import repair_journal_tail
from replication.members import Member, Membership
from replication.poller import LoopPoller
from replication.raft_node import RaftNode, RaftRole
from replication.reconfig import Reconfiguration
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.ticker import Ticker

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

    def __init__(self, settings: RaftSettings, machine: StateMachine) -> None:
        settings.validate()
        for path in (settings.journal_path, settings.dump_path):
            make_directory(os.path.dirname(os.path.abspath(path)), durable=settings.fsync)
        self._settings = settings
        self._lock = threading.Lock()  # the apply lock: the machine's, for ticks and reads
        self._role = RaftRole.FOLLOWER
        self._ready_term = -1
        self._readiness_pending_term = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._role_listeners: list[Callable[[RaftRole], None]] = []
        repair_journal_tail(settings.journal_path)
        self._refusals = Refusals()
        self._sync_times = SyncTimes()
        raft_lock = threading.Lock()
        self._poller = LoopPoller(raft_lock)
        self._node = RaftNode(
            settings,
            machine,
            self._lock,
            self._on_role,
            self._refusals,
            self._poller,
            self._sync_times,
        )
        # The leader's membership calls (`replication.reconfig`), on the loop, under the
        # same Raft lock every tick holds.
        self.reconfig = Reconfiguration(self._node, raft_lock)
        self._ticker = Ticker(
            self._node, self._poller, raft_lock, self._lock, after_tick=self._check_readiness
        )
        self._group = GroupCommit(
            settings.group_commit_limits(),
            append=self._append,
            on_loop=self._poller.on_loop,
            sent=self._ticker.tick_now,
        )

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ticker.start()

    def close(self) -> None:
        """Stop ticking and close the Raft port and the journal (on the event loop's thread)."""
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
        self._role = role
        if role is not RaftRole.LEADER:
            self._ready_term = -1
        loop = self._loop
        if loop is not None:
            for listener in self._role_listeners:
                loop.call_soon_threadsafe(listener, role)

    def _check_readiness(self) -> None:
        """After every tick: a new leader proposes one empty entry of its own; once that
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

    def sync_stats(self) -> SyncStats:
        """The journal syncs and other synced writes of this node (so far; any thread)."""
        return self._sync_times.stats()

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

    def group_commit_stats(self) -> GroupCommitStats:
        """Log entries sent by this node's proposals and proposals they carried (so far)."""
        return self._group.stats()

    async def barrier(self, timeout_s: float = DEFAULT_PROPOSE_TIMEOUT_S) -> None:
        """Linearizable-read fence: once an empty entry proposed now has been applied here,
        local state reflects every write acknowledged before the call."""
        await self.propose(b"", timeout_s)
