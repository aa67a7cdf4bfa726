"""The pysyncobj node of one process: `RaftNode`, with every correction Ripple makes to it.

Owns the `SyncObj` subclass, its configuration and its one replicated method, and is the
only module that overrides SyncObj's private (name-mangled) methods or reads its private
state. It is written against pysyncobj 0.3.17 and refuses any other release at import
(`replication.pysyncobj_pin`); tests/integration/test_replication.py checks that every
private name below still exists and still means what it is used for. Each correction and
why it is needed:

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

Durable acknowledgements (docs/design.md §2), with `RaftSettings.fsync` on (the journal
and the dump hook are `replication.durable_journal`'s):

- `__raftLog` (swapped right after SyncObj's constructor opened it): a `DurableJournal` on
  the same file, which knows what it has synced.
- `_onTick`: the journal is synced before pysyncobj's tick, whose commit computation counts
  the leader itself for every entry of its log, and again after it, so the entries the
  leader appended in the tick reach its disk while the followers write theirs.
- `__sendNextNodeIdx`: a follower's success answer says it holds the entries, so it waits,
  with any answer behind it, for the sync at the start of the next tick, one sync for every
  answer of a pass of the loop.

Online membership (docs/design.md §10; pysyncobj's dynamic membership on, nodes are
`replication.members.MemberNode`s so entries and dumps carry each member's name):

- `__doChangeCluster` (pysyncobj calls it when a membership entry is appended, applied, or
  undone by a truncation): a change naming this node says whether it is a voter (pysyncobj
  ignores those: a node never adds or removes itself); a removal tells the transport to
  refuse the removed node from then on; a learner that became a voter leaves the learner
  feed. Changes met while applying are skipped for this node: the entry was met when it was
  appended, and applying lags (a later entry may have undone it already); so is the leader
  trying a change on itself, which pysyncobj refuses.
- `__changeCluster` (the leader, as it appends a change): refused while a membership entry
  is past the commit index. pysyncobj means to allow one change at a time (Raft's rule for
  single-server changes) but never sets the `__changeClusterIDx` it checks, so two changes
  proposed together would both be appended.
- `__doApplyCommand`: marks the apply path for the above.
- `__updateClusterConfiguration` (the dump's voter set, at start or when the leader sends
  one): the link to the leader that sent the dump is kept even when the dump predates that
  leader's addition (its voter set lacks it), or the node would drop the only link the
  entries adding the leader can come by and never catch up; the member table is
  republished.
- `_onTick`: a node that is not a voter (joining, or removed) has its election deadline
  pushed out on every tick, so it never starts an election: a joining node that campaigned
  before its admission would come in at a higher term and depose the leader with its vote
  requests (the join race).
- `__onMessageReceived`: a node that is not a voter ignores vote requests and `timeout_now`:
  it neither votes nor takes a leadership handed to it.
- `_checkCommandsToApply`: held while the leader hands its leadership over, as Raft's
  leadership transfer asks: pysyncobj sends `timeout_now` only to a voter that holds the
  leader's whole log, which under a steady write load it never quite does. Proposals wait
  in pysyncobj's queue meanwhile (forwarded to the new leader once there is one).
- Learners: the leader feeds a node about to be added through pysyncobj's read-only feed
  (`__readonlyNodes`, `__raftNextIndex`, `__raftMatchIndex`, read by `__sendAppendEntries`),
  while no majority counts it; it is added once caught up. It is always fed a dump first
  (`replication.reconfig` compacts the leader's log when it has none): the dump's voter set
  is exact, where replaying membership entries from the start over the voters it was told of
  is not (pysyncobj undoes a truncated entry's change even when the entry changed nothing,
  so a truncation during the catch-up could drop a current voter).

A failing disk (`replication.disk_faults`):

- `_onTick` and `__onMessageReceived`: once a sync or write of a Raft file failed, the node
  ticks no more and ignores every message: no append is answered, no vote given, no
  heartbeat sent (the owner halts it and closes the port, the next tick at the latest).
- `__tryLogCompaction` (with the serializer's `checkSerializing` watched): a compaction's
  dump that failed is tried again after a backoff, not on the next tick.
- A node whose journal syncs are slow (`may_stand` false) stands aside: like a non-voter it
  never starts an election of its own (`_onTick` puts the election deadline off after the
  tick's first sync, which on a slow disk outlasts any election timeout set before it) and
  ignores `timeout_now`, but it still votes and answers appends (`replication.slow_disk`).
  Unless it has heard no leader for
  LEADERLESS_STAND_TIMEOUTS election timeouts: when every disk is slow, a slow leader beats
  none. Only a leader of its own term or a newer one counts as heard: a node that became a
  candidate at a higher term (a slow tick outlasted the others' election) ignores the
  appends of the leader they elected meanwhile, which never learns that term from it; were
  those appends counted, the node would stand aside, unheard, until its disk was found fast
  again, which takes syncs that a candidate never makes.

Other invariants: the one replicated method (`_apply_entry`) never raises
(`replication.entry`); the machine is touched only under the apply lock; the only attribute
pysyncobj dumps is `_cell`, the machine's snapshot bytes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from enum import Enum
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.monotonic import monotonic
from pysyncobj.syncobj import _COMMAND_TYPE

from replication.disk_faults import DiskFaults, DumpBackoff
from replication.durability import SyncTimes
from replication.durable_journal import DurableJournal, register_dump
from replication.entry import PendingSnapshot, SnapshotCell, StateMachine, apply_entry
from replication.members import (
    Member,
    MemberNode,
    Membership,
    before_change,
    member_of,
    members_by_raft,
    named,
)
from replication.poller import KickNotifier, LoopPoller
from replication.pysyncobj_pin import check_pysyncobj_version
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.transport import HardenedTransport
from shared.clock import Clock
from shared.system_clock import SYSTEM_CLOCK

check_pysyncobj_version()

__all__ = ["COMMIT_NOTICE_DELAY_S", "RaftNode", "RaftRole", "syncobj_conf"]

log = logging.getLogger(__name__)

BIND_RETRIES_MAX = 20
BIND_RETRY_S = 0.25
# How long after a commit the leader may wait before telling the followers the new commit
# index in an AppendEntries of its own (`RaftNode._SyncObj__applyLogEntries`).
COMMIT_NOTICE_DELAY_S = 0.005
_MEMBERSHIP = bytes([_COMMAND_TYPE.MEMBERSHIP])  # the first byte of a membership entry
# A node standing aside for a slow disk stands anyway once it has heard no leader for this
# many of the longest election timeouts: the others had time for a few elections of their own.
LEADERLESS_STAND_TIMEOUTS = 4


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
        dynamicMembershipChange=True,
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
        sync_times: SyncTimes,
        clock: Clock = SYSTEM_CLOCK,
        faults: DiskFaults | None = None,
        may_stand: Callable[[], bool] = lambda: True,
    ) -> None:
        # Attributes set before SyncObj.__init__ are pysyncobj "properties": excluded from
        # dumps. Only `_cell`, set after, is serialized.
        self._ripple_loop_poller = poller
        self._ripple_clock = clock
        self._ripple_faults = faults if faults is not None else DiskFaults()
        self._ripple_may_stand = may_stand  # false: its disk is slow (module doc)
        self._ripple_heard_leader_at = monotonic()  # the last append of a current leader
        self._ripple_dump_backoff = DumpBackoff()
        self._ripple_machine = machine
        self._ripple_lock = lock
        self._ripple_backup_to: int | None = None
        # A follower's answers waiting for the journal sync (`__sendNextNodeIdx`), in order.
        self._ripple_answers: list[tuple[Any, bool, int, bool]] = []
        self._ripple_journal: DurableJournal | None = None
        # Membership (see the module doc): names by Raft address, whether this node votes,
        # the apply path's mark, and the published view with what it was made from.
        known = members_by_raft(settings.members)
        self._ripple_known = known
        self._ripple_voter = not settings.joining
        self._ripple_applying = False
        self._ripple_proposing = False
        self._ripple_holding = False  # new commands wait (`hold_commands`)
        self._ripple_on_voter: Callable[[bool], None] | None = None
        self._ripple_stale_view = True
        self._ripple_scanned_to = 0  # the log is scanned for pending changes up to here
        self._ripple_pending: int | None = None
        self._ripple_membership = Membership(
            voters=(), committed=(), voter=self._ripple_voter, pending_index=None, learners=()
        )
        register_dump(
            settings.dump_path, sync_times if settings.fsync else None, self._ripple_faults
        )
        conf = syncobj_conf(
            settings,
            autoTick=False,
            onStateChanged=lambda _old, new: on_role(
                _ROLE_BY_PYSYNCOBJ_STATE.get(new, RaftRole.FOLLOWER)
            ),
        )
        self._ripple_transport: HardenedTransport | None = None
        make_transport = HardenedTransport.factory(
            limits=settings.transport_limits(),
            secret=settings.secret,
            refusals=refusals,
            versions=(settings.transport_version_min, settings.transport_version_max),
            cluster_id=settings.cluster_id,
            clock=clock,
        )

        def transport(sync_obj: Any, self_node: Any, other_nodes: Any) -> HardenedTransport:
            made = make_transport(sync_obj, self_node, other_nodes)
            self._ripple_transport = made
            return made

        def node(addr: str) -> MemberNode:
            return MemberNode(known.get(addr) or Member(id=addr, raft=addr, http=""))

        super().__init__(
            node(settings.self_addr),
            [node(a) for a in settings.partners],
            conf,
            transportClass=transport,
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
            settings.journal_path, sync_times, self._ripple_faults, fsync=settings.fsync
        )
        self._SyncObj__raftLog = self._ripple_journal
        serializer = self.__dict__["_SyncObj__serializer"]
        check_serializing = serializer.checkSerializing

        def watched() -> Any:
            state, ident = check_serializing()
            if state == SERIALIZER_STATE.FAILED:
                self._ripple_dump_failed()
            elif state == SERIALIZER_STATE.SUCCESS:
                self._ripple_dump_backoff.succeeded()
            return state, ident

        serializer.checkSerializing = watched
        self._cell = SnapshotCell(machine)
        self._ripple_publish()

    # SyncObj's constructor assigns `self._poller = createPoller(...)`; the poller must be
    # ours before the transport and the pipe subscribe to it, so pysyncobj's is dropped.
    @property
    def _poller(self) -> Any:
        return self._ripple_loop_poller

    @_poller.setter
    def _poller(self, value: Any) -> None:
        pass

    def transport(self) -> HardenedTransport:
        made = self._ripple_transport
        assert made is not None, "made in SyncObj's constructor"
        return made

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
        if self._ripple_faults.failure is not None:
            return  # the disk failed: nothing more from this node (module doc)
        self._ripple_sync_and_answer()
        if not self._ripple_voter or self._ripple_standing_aside():
            # Not a voter, or a slow disk: never an election of its own (module doc). After
            # the sync, which on a slow disk outlasts the deadline set before it.
            self._SyncObj__raftElectionDeadline = monotonic() + self.conf.raftMaxTimeout
        SyncObj._onTick(self, timeToWait)
        self.journal().sync()
        self._ripple_publish()

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
            soon = monotonic() + COMMIT_NOTICE_DELAY_S  # pysyncobj's clock, as its deadline
            if soon < self._SyncObj__newAppendEntriesTime:
                self._SyncObj__newAppendEntriesTime = soon
        return False

    # -- membership (module doc) ------------------------------------------------------------

    # Overrides pysyncobj's private SyncObj.__doChangeCluster (its name, mangled).
    def _SyncObj__doChangeCluster(self, request: Any, reverse: bool = False) -> bool:
        """Apply (or undo) one membership change to the voter set, as pysyncobj does, and
        keep this node's own standing, the transport's refusals and the learners in step."""
        node = request[2] if len(request) >= 3 else None
        if request[0] not in ("add", "rem") or node is None:
            return bool(SyncObj._SyncObj__doChangeCluster(self, request, reverse))
        adding = (request[0] == "add") != reverse
        if node == self.selfNode:
            # Refused on the leader (never appended); met again when applied (module doc).
            seen = not (self._ripple_proposing or self._ripple_applying)
            if seen and adding != self._ripple_voter:
                self._ripple_voter = adding
                self._ripple_stale_view = True
                log.warning("raft: this node is %s", "a voter now" if adding else "no voter now")
                if self._ripple_on_voter is not None:
                    self._ripple_on_voter(adding)
            return False
        changed = bool(SyncObj._SyncObj__doChangeCluster(self, request, reverse))
        if changed:
            if (member := named(node)) is not None:
                self._ripple_known[member.raft] = member
            if adding:  # a learner is fed as a voter from now on
                self._SyncObj__readonlyNodes.discard(node)
            else:
                self.transport().mark_removed(node)
            self._ripple_stale_view = True
        return changed

    # Overrides pysyncobj's private SyncObj.__changeCluster (its name, mangled).
    def _SyncObj__changeCluster(self, request: Any) -> bool:
        if self._ripple_pending_change() is not None:
            return False  # one change at a time: the last one is not committed yet
        self._ripple_proposing = True  # pysyncobj tries the change here before appending it
        try:
            return bool(SyncObj._SyncObj__changeCluster(self, request))
        finally:
            self._ripple_proposing = False

    # Overrides pysyncobj's private SyncObj.__doApplyCommand (its name, mangled).
    def _SyncObj__doApplyCommand(self, command: Any) -> Any:
        self._ripple_applying = True
        try:
            return SyncObj._SyncObj__doApplyCommand(self, command)
        finally:
            self._ripple_applying = False

    # Overrides pysyncobj's private SyncObj.__updateClusterConfiguration (its name, mangled).
    def _SyncObj__updateClusterConfiguration(self, newNodes: Any) -> None:
        leader = self._SyncObj__raftLeader
        keep = leader is not None and leader != self.selfNode and leader not in set(newNodes)
        transport = self.transport()
        transport.keep_link = leader if keep else None
        try:
            SyncObj._SyncObj__updateClusterConfiguration(self, newNodes)
        finally:
            transport.keep_link = None
        for node in self._SyncObj__otherNodes:
            if (member := named(node)) is not None:
                self._ripple_known[member.raft] = member
        self._ripple_stale_view = True

    # Overrides pysyncobj's private SyncObj.__onMessageReceived (its name, mangled).
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        if self._ripple_faults.failure is not None:
            return  # the disk failed: no answer, no vote (module doc)
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "append_entries" and message.get("term", 0) >= self.raftCurrentTerm:
            # A leader of an older term is none: pysyncobj drops its appends unanswered, so
            # counting them would keep a node standing aside at a higher term for good,
            # unheard by that leader (module doc).
            self._ripple_heard_leader_at = monotonic()
        if not self._ripple_voter and kind in ("request_vote", "timeout_now"):
            return  # not a voter: no vote, no leadership (module doc)
        if kind == "timeout_now" and not self._ripple_may_stand():
            return  # a slow disk: no leadership handed to it (module doc)
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _ripple_standing_aside(self) -> bool:
        """A slow disk, and a leader heard recently enough to leave the leading to it."""
        if self._ripple_may_stand():
            return False
        silent_s = monotonic() - self._ripple_heard_leader_at
        return bool(silent_s < LEADERLESS_STAND_TIMEOUTS * self.conf.raftMaxTimeout)

    # Overrides pysyncobj's private SyncObj.__tryLogCompaction (its name, mangled).
    def _SyncObj__tryLogCompaction(self) -> None:
        if self._ripple_dump_backoff.waiting(self._ripple_clock.monotonic_ms()):
            return  # a dump failed: nothing in flight, the next try waits (module doc)
        SyncObj._SyncObj__tryLogCompaction(self)

    def _ripple_dump_failed(self) -> None:
        retry_s = self._ripple_dump_backoff.failed(self._ripple_clock.monotonic_ms())
        log.warning(
            "raft: writing the dump %s failed (%d so far): the node keeps every entry in its "
            "journal and tries again in %.0f s; check the disk's free space",
            self.conf.fullDumpFile,
            self._ripple_dump_backoff.failures,
            retry_s,
        )

    def dump_failures(self) -> int:
        """Compaction dumps that failed so far (any thread)."""
        return self._ripple_dump_backoff.failures

    def membership(self) -> Membership:
        """The voter set as of the last tick (any thread: the view is replaced whole)."""
        return self._ripple_membership

    def on_voter_change(self, listener: Callable[[bool], None]) -> None:
        """`listener(voter)` runs in the tick in which this node's own standing changes."""
        self._ripple_on_voter = listener

    def _ripple_publish(self) -> None:
        """Replace the published view when the voters, the learners, this node's standing or
        the pending change moved (every tick; cheap when nothing did)."""
        pending = self._ripple_pending_change()
        view = self._ripple_membership
        if not self._ripple_stale_view and view.pending_index == pending:
            return
        self._ripple_stale_view = False
        known = self._ripple_known
        voters = [member_of(n, known) for n in self._SyncObj__otherNodes]
        if self._ripple_voter:
            voters.append(member_of(self.selfNode, known))
        learners = [member_of(n, known) for n in self._SyncObj__readonlyNodes]
        latest = tuple(sorted(voters, key=lambda m: m.id))
        committed = latest
        if pending is not None:
            journal = self._SyncObj__raftLog
            entry = journal[pending - int(journal[0][1])][0]
            change = self._SyncObj__parseChangeClusterRequest(entry)
            if change is not None and change[0] in ("add", "rem"):
                committed = before_change(latest, change, known)
        self._ripple_membership = Membership(
            voters=latest,
            committed=committed,
            voter=self._ripple_voter,
            pending_index=pending,
            learners=tuple(sorted(learners, key=lambda m: m.id)),
        )

    def _ripple_pending_change(self) -> int | None:
        """The index of a membership entry in the log past the commit index, if any. Scans
        only the entries appended since the last call (a truncation rescans from the
        commit index)."""
        journal = self._SyncObj__raftLog
        commit = int(self._SyncObj__raftCommitIndex)
        last = int(journal[-1][1])
        first = int(journal[0][1])
        if self._ripple_pending is not None and (
            self._ripple_pending <= commit or self._ripple_pending > last
        ):
            self._ripple_pending = None
        if self._ripple_scanned_to > last:  # truncated since
            self._ripple_scanned_to = commit
        for idx in range(max(self._ripple_scanned_to, commit, first - 1) + 1, last + 1):
            if journal[idx - first][0][:1] == _MEMBERSHIP:
                self._ripple_pending = idx
        self._ripple_scanned_to = last
        return self._ripple_pending

    # Leader side, with the Raft lock held (`ReplicatedLog` takes it).

    def learn(self, member: Member) -> None:
        """Feed `member` the log (a dump first when it needs one) without counting it in any
        majority: pysyncobj's read-only feed, and the transport lets it in."""
        node = MemberNode(member)
        self._ripple_known[member.raft] = member
        self.transport().addNode(node)
        self._SyncObj__readonlyNodes.add(node)
        self._SyncObj__raftNextIndex[node] = self._SyncObj__getCurrentLogIndex() + 1
        self._SyncObj__raftMatchIndex[node] = 0
        self._ripple_stale_view = True
        self._ripple_publish()  # at once, as forget_learner: a change's phases read it

    def forget_learner(self, raft: str) -> None:
        """Stop feeding the learner at `raft` (a voter now, or given up on). The view drops it
        at once: a change that gave up on a learner ends right after this, and a read of the
        nodes after that end must not still list it."""
        for node in list(self._SyncObj__readonlyNodes):
            if node.address == raft:
                self._SyncObj__readonlyNodes.discard(node)
                self._SyncObj__raftNextIndex.pop(node, None)
                self._SyncObj__raftMatchIndex.pop(node, None)
                if node not in self._SyncObj__otherNodes:
                    self.transport().dropNode(node)
                self._ripple_stale_view = True
        self._ripple_publish()

    def progress(self) -> dict[str, tuple[int, float]]:
        """On the leader: each voter's and learner's match index and the seconds since it
        last answered, by Raft address."""
        now = monotonic()
        matched = self._SyncObj__raftMatchIndex
        answered = self._SyncObj__lastResponseTime
        return {
            n.address: (int(matched.get(n, 0)), now - answered.get(n, float("-inf")))
            for n in self._SyncObj__otherNodes | self._SyncObj__readonlyNodes
        }

    def last_index(self) -> int:
        return int(self._SyncObj__getCurrentLogIndex())

    def first_index(self) -> int:
        """The first entry this node's journal holds (1 until a compaction trims it)."""
        return int(self._SyncObj__raftLog[0][1])

    def hold_commands(self, hold: bool) -> None:
        """Append no new command while held (a leadership transfer, module doc)."""
        self._ripple_holding = hold

    # Overrides SyncObj._checkCommandsToApply (pysyncobj's own name).
    def _checkCommandsToApply(self) -> None:
        if not self._ripple_holding:
            SyncObj._checkCommandsToApply(self)

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
