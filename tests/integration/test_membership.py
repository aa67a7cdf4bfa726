"""Online membership on real pysyncobj nodes over loopback TCP, in one process: a node added
as a learner then a voter, a voter removed and refused from then on, the leader replaced,
and the join race a non-voter is kept out of. The coordinator's own processes and its HTTP
API are tested in test_nodes.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from replication.errors import MembershipRefusedError, OutcomeUnknownError
from replication.log import Member, RaftSettings, ReplicatedLog
from shared.ports import free_ports
from tests.integration.test_replication import SECRET, ListMachine, wait_for

FAST = {"handshake_timeout_s": 0.5, "connection_timeout_s": 1.0, "connection_retry_s": 0.2}
CHANGE_S = 15.0


class Nodes:
    """Up to five nodes n0..n4; n0..n2 are the configured voters. Addresses are handed out
    so that n0's is the greatest string: pysyncobj's lower-address side waits to be dialled,
    so n0 is the one that dials the others (and whose attempts they refuse once it is
    removed)."""

    def __init__(self, tmp: Path, **kw: object) -> None:
        self.tmp = tmp
        ports = sorted(free_ports(5), key=str, reverse=True)
        self.members = [
            Member(id=f"n{i}", raft=f"127.0.0.1:{p}", http=f"127.0.0.1:{9000 + i}")
            for i, p in enumerate(ports)
        ]
        self.kw = {**FAST, **kw}
        self.logs: dict[int, ReplicatedLog] = {}
        self.machines: dict[int, ListMachine] = {}

    def settings(self, i: int, partners: list[int], joining: bool) -> RaftSettings:
        me = self.members[i]
        return RaftSettings(
            self_addr=me.raft,
            partners=tuple(self.members[j].raft for j in partners),
            bind_addr=me.raft,
            secret=SECRET,
            journal_path=str(self.tmp / me.id / "journal"),
            dump_path=str(self.tmp / me.id / "dump"),
            members=tuple(self.members),
            joining=joining,
            **self.kw,  # type: ignore[arg-type]
        )

    def start(self, i: int, partners: list[int] | None = None, *, joining: bool = False) -> None:
        partners = [j for j in (partners if partners is not None else [0, 1, 2]) if j != i]
        self.machines[i] = ListMachine()
        log = ReplicatedLog(self.settings(i, partners, joining), self.machines[i])
        log.start()
        self.logs[i] = log

    def stop(self, i: int) -> None:
        log = self.logs.pop(i, None)
        if log is not None:
            log.close()

    async def leader(self, among: list[int] | None = None) -> int:
        def ready() -> int | None:
            found = [
                i
                for i, n in self.logs.items()
                if (among is None or i in among) and n.is_ready_leader
            ]
            return found[0] + 1 if len(found) == 1 else None

        return int(await wait_for(ready, "one ready leader")) - 1

    def voters(self, i: int) -> set[str]:
        return {m.id for m in self.logs[i].membership().voters}


@contextlib.asynccontextmanager
async def three(tmp: Path, **kw: object) -> AsyncIterator[Nodes]:
    nodes = Nodes(tmp, **kw)
    for i in range(3):
        nodes.start(i)
    try:
        yield nodes
    finally:
        for i in list(nodes.logs):
            nodes.stop(i)


async def add(nodes: Nodes, leader: int, new: int) -> None:
    log = nodes.logs[leader]
    await log.reconfig.catch_up(nodes.members[new], timeout_s=CHANGE_S)
    await log.reconfig.change(add=True, member=nodes.members[new], timeout_s=CHANGE_S)


async def test_a_node_joins_as_a_learner_then_votes(tmp_path: Path) -> None:
    # Compaction every few entries: the new node can only catch up from the leader's dump.
    async with three(tmp_path, log_compaction_min_entries=5, log_compaction_min_time_s=0.5) as c:
        leader = await c.leader()
        expected = [os.urandom(64).hex().encode() for _ in range(40)]
        for entry in expected:
            await c.logs[leader].propose(entry)
        await wait_for(lambda: os.path.exists(tmp_path / f"n{leader}" / "dump"), "a dump")
        c.start(3, joining=True)
        assert not c.logs[3].membership().voter
        admitted: list[bool] = []
        c.logs[3].on_voter_change(admitted.append)
        await add(c, leader, 3)
        # The entry that adds it took effect where it was appended, the new node included.
        for i in range(4):
            await wait_for(lambda i=i: c.voters(i) == {"n0", "n1", "n2", "n3"}, f"n{i}'s view")
        assert c.logs[3].membership().voter
        await wait_for(lambda: admitted == [True], "the new node told it votes")
        await c.logs[leader].propose(b"after")
        await wait_for(lambda: c.machines[3].entries[-41:] == [*expected, b"after"], "caught up")
        names = {m.id: m for m in c.logs[0].membership().voters}
        assert names["n3"] == c.members[3]  # its name and HTTP address came with the entry
        assert c.logs[leader].membership().learners == ()
        # Four voters: the cluster commits without any one of them, the new one included.
        c.stop(3)
        await c.logs[await c.leader()].propose(b"three of four")


async def test_one_change_at_a_time(tmp_path: Path) -> None:
    async with three(tmp_path) as c:
        leader = await c.leader()
        c.start(3, joining=True)
        c.start(4, joining=True)
        log = c.logs[leader].reconfig
        await log.catch_up(c.members[3], timeout_s=CHANGE_S)
        await log.catch_up(c.members[4], timeout_s=CHANGE_S)
        both = await asyncio.gather(
            log.change(add=True, member=c.members[3], timeout_s=CHANGE_S),
            log.change(add=True, member=c.members[4], timeout_s=CHANGE_S),
            return_exceptions=True,
        )
        refused = [r for r in both if isinstance(r, MembershipRefusedError)]
        assert len(refused) == 1 and both.count(None) == 1, both
        assert len(c.logs[leader].membership().voters) == 4


async def test_a_removed_node_is_refused_and_counted_and_never_campaigns(tmp_path: Path) -> None:
    async with three(tmp_path) as c:
        leader = await c.leader()
        if leader == 0:  # remove a follower here (the leader is test_the_leader_is_replaced)
            await c.logs[0].reconfig.transfer_leadership(c.members[1], timeout_s=CHANGE_S)
            leader = await c.leader([1, 2])
        term = c.logs[leader].status().term
        await c.logs[leader].reconfig.change(add=False, member=c.members[0], timeout_s=CHANGE_S)
        for i in (1, 2):
            await wait_for(lambda i=i: c.voters(i) == {"n1", "n2"}, f"n{i}'s view")
        # The leader dropped n0 as it appended the entry, so n0 never hears of it (as in any
        # Raft): n0 dials n1 and n2 (the greater address dials) and is refused by name.
        await wait_for(
            lambda: all(c.logs[i].refused_connections()["removed_node"] >= 2 for i in (1, 2)),
            "n0's attempts refused as removed_node by both",
        )
        await c.logs[leader].propose(b"two voters")
        assert c.logs[0].status().term <= term  # it never started an election of its own
        assert await c.leader([1, 2]) == leader and c.logs[leader].status().term == term


async def test_the_leader_is_replaced_without_dropping_below_three_voters(tmp_path: Path) -> None:
    async with three(tmp_path) as c:
        old = await c.leader()
        c.start(3, joining=True)
        await add(c, old, 3)
        heir = next(i for i in range(3) if i != old)
        await c.logs[old].reconfig.transfer_leadership(c.members[heir], timeout_s=CHANGE_S)
        new = await c.leader([i for i in range(4) if i != old])
        with pytest.raises(MembershipRefusedError):  # pysyncobj: a leader never removes itself
            await c.logs[new].reconfig.change(add=False, member=c.members[new], timeout_s=CHANGE_S)
        assert c.logs[new].membership().voter and c.logs[new].is_ready_leader
        await c.logs[new].reconfig.change(add=False, member=c.members[old], timeout_s=CHANGE_S)
        rest = {f"n{i}" for i in range(4) if i != old}
        for i in range(4):
            if i != old:
                await wait_for(lambda i=i: c.voters(i) == rest, f"n{i}'s view")
        c.stop(old)
        await c.logs[await c.leader()].propose(b"replaced")


@pytest.mark.parametrize("guarded", [True, False])
async def test_a_joining_node_left_without_a_leader_does_not_disrupt_the_cluster(
    tmp_path: Path, guarded: bool
) -> None:
    # The join race: a node being fed as a learner loses its feed (the leader handed over)
    # but keeps its link. Unguarded (the control) it campaigns at ever higher terms, and the
    # old leader it reaches takes the term up and deposes the new one; guarded it waits.
    async with three(tmp_path) as c:
        old = await c.leader()
        c.start(3, joining=True)
        if not guarded:
            c.logs[3]._node._ripple_voter = True  # what a node without the guard does
        await c.logs[old].reconfig.catch_up(c.members[3], timeout_s=CHANGE_S)
        heir = next(i for i in range(3) if i != old)
        await c.logs[old].reconfig.transfer_leadership(c.members[heir], timeout_s=CHANGE_S)
        new = await c.leader([0, 1, 2])
        term = c.logs[new].status().term

        def disrupted() -> bool:
            return any(c.logs[i].status().term > term for i in range(3))

        with contextlib.suppress(AssertionError):
            await wait_for(disrupted, "a term bump", timeout_s=3.0)
        assert disrupted() != guarded
        if guarded:
            assert c.logs[3].status().term <= term
            assert await c.leader([0, 1, 2]) == new


async def test_a_new_node_catches_up_from_a_dump_older_than_its_leader(tmp_path: Path) -> None:
    # n3 joins from a dump (voters n0..n2), then leads; n4 is fed that same dump, which does
    # not name n3: n4 must keep its link to n3 until the entries that add n3 arrive.
    async with three(tmp_path) as c:
        old = await c.leader()
        c.start(3, joining=True)
        await add(c, old, 3)
        await c.logs[old].reconfig.transfer_leadership(c.members[3], timeout_s=CHANGE_S)
        assert await c.leader() == 3
        assert c.logs[3]._node.first_index() > 1  # its log starts at the dump it was sent
        c.start(4, [0, 1, 2, 3], joining=True)
        await add(c, 3, 4)
        await wait_for(lambda: c.voters(4) == {"n0", "n1", "n2", "n3", "n4"}, "n4's view")
        await c.logs[3].propose(b"five voters")
        await wait_for(lambda: c.machines[4].entries[-1:] == [b"five voters"], "n4 applies")


async def test_a_learner_given_up_on_leaves_the_view_at_once(tmp_path: Path) -> None:
    """`forget` drops the learner from the published view in the same call, not at the next
    tick: a change that gave up on it ends right after, and a read of the nodes after that
    end must not still list it."""
    async with three(tmp_path) as c:
        leader = await c.leader()
        ghost = c.members[4]  # never started: it cannot catch up
        with pytest.raises(OutcomeUnknownError):
            await c.logs[leader].reconfig.catch_up(ghost, timeout_s=2.0)
        assert c.logs[leader].membership().learners == (ghost,)
        c.logs[leader].reconfig.forget(ghost.raft)
        assert c.logs[leader].membership().learners == ()  # no await in between: no tick
