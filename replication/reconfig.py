"""The leader's side of an online membership change: feed a new node until it has caught up,
add or remove one voter through the log, hand the leadership to another voter.

Owns the bridge from pysyncobj's membership calls (answered by callbacks in a Raft tick) to
awaitables on the event loop, and the bounds of each wait. Invariants: every call into the
node that reads or changes its state holds the Raft lock; every wait is bounded and ends in
a result or one of `replication.errors`; nothing here decides whether a change is wise (the
caller does), but pysyncobj's own rules answer as errors, never as a hang: one change at a
time (`MembershipRefusedError` while one is not committed), none before the leader's own
first entry of its term is applied, never the leader removing itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON

from replication.errors import MembershipRefusedError, NoLeaderError, OutcomeUnknownError
from replication.members import Member, MemberNode
from replication.raft_node import RaftNode
from shared.clock import Clock, monotonic_s
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["CATCH_UP_LAG_MAX", "Progress", "Reconfiguration"]

# A learner within this many entries of the leader's log is caught up: once it votes, the
# leader brings it the rest within one AppendEntries round, so a majority that needs it is
# not held up.
CATCH_UP_LAG_MAX = 64
POLL_S = 0.05
TRANSFER_RETRY_S = 0.05
_TIMED_OUT = -1  # no answer from pysyncobj within the bound (not one of its FAIL_REASONs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """What the leader knows of one voter or learner."""

    match_index: int  # the last entry it is known to hold
    answered_s_ago: float  # since its last answer (inf: never)


class Reconfiguration:
    """The leader's membership calls on one node. Use on the event loop the log runs on."""

    def __init__(
        self, node: RaftNode, raft_lock: threading.Lock, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._node = node
        self._raft_lock = raft_lock
        self._clock = clock  # every wait's deadline is on it

    def _now_s(self) -> float:
        return monotonic_s(self._clock)

    def progress(self) -> dict[str, Progress]:
        """On the leader: every voter's and learner's progress, by Raft address."""
        with self._raft_lock:
            raw = self._node.progress()
        return {a: Progress(match_index=m, answered_s_ago=age) for a, (m, age) in raw.items()}

    async def catch_up(self, member: Member, *, timeout_s: float) -> int:
        """Feed `member` a dump and then the log as a learner until it is within
        CATCH_UP_LAG_MAX entries of this leader's log; its match index then. The feed goes
        on until `forget` (or the membership entry that makes it a voter). Raises
        NoLeaderError when this node stops leading, OutcomeUnknownError on the timeout."""
        deadline = self._now_s() + timeout_s
        await self._compacted(deadline)
        with self._raft_lock:
            self._node.learn(member)
        while self._now_s() < deadline:
            with self._raft_lock:
                if not self._node._isLeader():
                    raise NoLeaderError("leadership lost while a new node was catching up")
                matched, _age = self._node.progress().get(member.raft, (0, 0.0))
                last = self._node.last_index()
            if matched and last - matched <= CATCH_UP_LAG_MAX:
                return matched
            await asyncio.sleep(POLL_S)
        raise OutcomeUnknownError(
            f"{member.id} ({member.raft}) did not catch up within {timeout_s:g} s"
        )

    async def _compacted(self, deadline: float) -> None:
        """Make sure this leader's log starts at a dump, so a new node (whose journal holds
        only its first entry) is sent the dump before any entry: its voter set is then the
        dump's, exact, and not one replayed from the voters it was told of (raft_node's
        module doc)."""
        with self._raft_lock:
            if self._node.first_index() > 1:
                return
            self._node.forceLogCompaction()
        while self._now_s() < deadline:
            await asyncio.sleep(POLL_S)
            with self._raft_lock:
                if not self._node._isLeader():
                    raise NoLeaderError("leadership lost while compacting for a new node")
                if self._node.first_index() > 1:
                    return
        raise OutcomeUnknownError("the leader's log was not compacted in time")

    def forget(self, raft: str) -> None:
        """Stop feeding the learner at `raft`."""
        with self._raft_lock:
            self._node.forget_learner(raft)

    async def change(self, *, add: bool, member: Member, timeout_s: float) -> None:
        """Append the entry that adds `member` as a voter (or removes it) and wait until it
        is committed and applied here."""
        node = MemberNode(member)
        outcome = await self._call(
            lambda cb: (
                self._node.addNodeToCluster(node, callback=cb)
                if add
                else self._node.removeNodeFromCluster(node, callback=cb)
            ),
            timeout_s,
        )
        if outcome == FAIL_REASON.SUCCESS:
            return
        if outcome == FAIL_REASON.REQUEST_DENIED:
            raise MembershipRefusedError(
                "the leader refused the change: another membership change is not committed "
                "yet, or it would remove the leader itself"
            )
        if outcome in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER, FAIL_REASON.QUEUE_FULL):
            raise NoLeaderError(f"membership change not appended ({outcome})")
        raise OutcomeUnknownError(f"membership change outcome unknown ({outcome})")

    async def transfer_leadership(self, to: Member, *, timeout_s: float) -> None:
        """Hand the leadership to the voter `to` (Raft's TimeoutNow) and wait until this node
        no longer leads. pysyncobj sends it only while `to` holds this leader's whole log, so
        new commands are held meanwhile (they wait, then go to the new leader) and it is
        asked again until `to` has caught up."""
        with self._raft_lock:
            self._node.hold_commands(True)
        try:
            await self._transfer(to, timeout_s)
        finally:
            with self._raft_lock:
                self._node.hold_commands(False)

    async def _transfer(self, to: Member, timeout_s: float) -> None:
        deadline = self._now_s() + timeout_s
        while self._now_s() < deadline:
            with self._raft_lock:
                if not self._node._isLeader():
                    return
            outcome = await self._call(
                lambda cb: self._locked(lambda: self._node.transferLeadership(to.raft, cb)),
                max(POLL_S, deadline - self._now_s()),
            )
            if outcome == FAIL_REASON.SUCCESS:
                while self._now_s() < deadline:
                    with self._raft_lock:
                        if not self._node._isLeader():
                            return
                    await asyncio.sleep(POLL_S)
                break
            await asyncio.sleep(TRANSFER_RETRY_S)
        raise OutcomeUnknownError(f"leadership not handed to {to.id} within {timeout_s:g} s")

    def _locked(self, call: Callable[[], None]) -> None:
        with self._raft_lock:
            call()

    async def _call(
        self, start: Callable[[Callable[[Any, int], None]], None], timeout_s: float
    ) -> int:
        """Start a pysyncobj call with a callback; its FAIL_REASON, or TIMEOUT's."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()

        def settle(err: int) -> None:
            if not fut.done():
                fut.set_result(err)

        def callback(_result: Any, err: int) -> None:
            loop.call_soon_threadsafe(settle, int(err))

        start(callback)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return _TIMED_OUT
