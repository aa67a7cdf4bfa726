"""The replicated log on three real pysyncobj nodes over loopback TCP, in one process.

A toy machine (an append-only list of entries) keeps these tests independent of the
coordinator's domain; the coordinator's own processes are tested in test_cluster.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pysyncobj.serializer
import pytest
from pysyncobj import SyncObj
from pysyncobj.journal import FileJournal, MetaStorer

import replication.durable_journal
import replication.log
import replication.raft_node
import replication.wire
from replication.log import (
    NoLeaderError,
    OutcomeUnknownError,
    RaftRole,
    RaftSettings,
    ReplicatedLog,
    machine_error_result,
)
from replication.poller import KickNotifier
from replication.raft_node import RaftNode
from shared.ports import free_ports

SECRET = "test-secret-0123456789abcdef"
WAIT_S = 15.0


class ListMachine:
    """Appends entries; raises on b"boom" to prove the log survives a raising machine. One
    made with `halts_on` halts at that entry, as a node of an older release meets a command
    of a newer one: it applies nothing from then on."""

    def __init__(self, halts_on: bytes | None = None) -> None:
        self.entries: list[bytes] = []
        self.threads: set[int] = set()  # the threads apply ran on
        self.halts_on = halts_on
        self.reason: str | None = None

    def apply(self, entry: bytes) -> bytes:
        self.threads.add(threading.get_ident())
        if self.reason is not None:
            return b"halted"
        if entry == self.halts_on:
            self.reason = f"cannot apply {entry!r}"
            return b"halted"
        if entry == b"boom":
            raise RuntimeError("machine bug")
        self.entries.append(entry)
        return b"ok:%d" % len(self.entries)

    def halted(self) -> str | None:
        return self.reason

    def snapshot(self) -> bytes:
        return b"\n".join(self.entries)

    def restore(self, data: bytes) -> None:
        self.entries = data.split(b"\n") if data else []


def settings_for(tmp: Path, ports: list[int], i: int, **kw: object) -> RaftSettings:
    addrs = [f"127.0.0.1:{p}" for p in ports]
    return RaftSettings(
        self_addr=addrs[i],
        partners=tuple(a for j, a in enumerate(addrs) if j != i),
        bind_addr=addrs[i],
        secret=SECRET,
        journal_path=str(tmp / f"n{i}" / "journal"),
        dump_path=str(tmp / f"n{i}" / "dump"),
        **kw,  # type: ignore[arg-type]
    )


async def wait_for(pred, what: str, timeout_s: float = WAIT_S):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        value = pred()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Cluster:
    def __init__(self, tmp: Path, **kw: object) -> None:
        self.tmp = tmp
        self.ports = free_ports(3)
        self.kw = kw
        self.nodes: list[ReplicatedLog | None] = [None, None, None]
        self.machines: list[ListMachine] = [ListMachine(), ListMachine(), ListMachine()]

    def start(self, i: int, machine: ListMachine | None = None, **kw: object) -> None:
        """Start node `i` with the cluster's settings, and `kw` on top for this node."""
        self.machines[i] = machine or ListMachine()
        settings = settings_for(self.tmp, self.ports, i, **{**self.kw, **kw})
        node = ReplicatedLog(settings, self.machines[i])
        node.start()
        self.nodes[i] = node

    def stop(self, i: int) -> None:
        node = self.nodes[i]
        if node is not None:
            node.close()
            self.nodes[i] = None

    async def leader(self) -> ReplicatedLog:
        def ready() -> ReplicatedLog | None:
            leaders = [n for n in self.nodes if n is not None and n.is_ready_leader]
            return leaders[0] if len(leaders) == 1 else None

        return await wait_for(ready, "one ready leader")  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def running(tmp: Path, **kw: object) -> AsyncIterator[Cluster]:
    c = Cluster(tmp, **kw)
    for i in range(3):
        c.start(i)
    try:
        yield c
    finally:
        for i in range(3):
            c.stop(i)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with running(tmp_path) as c:
        yield c


async def test_propose_commits_everywhere_and_returns_result(cluster: Cluster) -> None:
    leader = await cluster.leader()
    assert await leader.propose(b"a") == b"ok:1"
    assert await leader.propose(b"b") == b"ok:2"
    await wait_for(lambda: all(m.entries == [b"a", b"b"] for m in cluster.machines), "replicas")
    st = leader.status()
    assert st.role is RaftRole.LEADER and st.ready
    assert st.applied_index >= 3 and st.commit_index >= st.applied_index - 0


async def test_raising_machine_becomes_error_value_and_cluster_keeps_going(
    cluster: Cluster,
) -> None:
    leader = await cluster.leader()
    result = await leader.propose(b"boom")
    assert result == machine_error_result(RuntimeError("machine bug"))
    # The next entry commits: Raft did not stall on the raising entry.
    assert await leader.propose(b"after") == b"ok:1"
    await wait_for(lambda: all(m.entries == [b"after"] for m in cluster.machines), "replicas")


async def test_follower_state_is_readable_and_barrier_orders_reads(cluster: Cluster) -> None:
    leader = await cluster.leader()
    await leader.propose(b"x")
    await leader.barrier()
    with leader.read() as machine:
        assert machine.entries == [b"x"]  # type: ignore[attr-defined]
    followers = [n for n in cluster.nodes if n is not None and n is not leader]
    assert all(not f.is_ready_leader for f in followers)
    leader_addr = leader.settings.self_addr
    await wait_for(lambda: all(f.status().leader_addr == leader_addr for f in followers), "hint")


async def test_no_quorum_means_no_commit(cluster: Cluster) -> None:
    leader = await cluster.leader()
    for i, node in enumerate(cluster.nodes):
        if node is not leader:
            cluster.stop(i)
    with pytest.raises((OutcomeUnknownError, NoLeaderError)):
        await leader.propose(b"lonely", timeout_s=1.5)
    # A partitioned leader steps down after leaderFallbackTimeout (tuned to 2 s, not 30 s).
    await wait_for(lambda: not leader.is_ready_leader, "leader fallback", timeout_s=6)


async def test_a_proposal_that_timed_out_in_the_queue_is_never_appended(
    cluster: Cluster,
) -> None:
    """A caller whose proposal waited past its timeout behind a batch in flight is told the
    outcome is unknown, and the proposal is dropped from the queue: it never reaches the
    log, even once the cluster can commit again (the dedup table would not save a command
    that has no request id of its own)."""
    leader = await cluster.leader()
    leader_index = cluster.nodes.index(leader)
    for i in range(3):
        if i != leader_index:
            cluster.stop(i)
    in_flight = asyncio.ensure_future(leader.propose(b"first", timeout_s=1.0))
    await asyncio.sleep(0.05)  # "first" holds the one in-flight slot; nothing can commit
    with pytest.raises(OutcomeUnknownError, match="no commit within"):
        await leader.propose(b"second", timeout_s=0.3)
    with contextlib.suppress(OutcomeUnknownError, NoLeaderError):
        await in_flight
    for i in range(3):
        if i != leader_index:
            cluster.start(i)
    new_leader = await cluster.leader()
    await new_leader.propose(b"third")
    await wait_for(
        lambda: all(b"third" in m.entries for i, m in enumerate(cluster.machines)), "third"
    )
    assert all(b"second" not in m.entries for m in cluster.machines)


async def test_restart_recovers_from_journal_and_dump(tmp_path: Path) -> None:
    c = Cluster(tmp_path, log_compaction_min_entries=5, log_compaction_min_time_s=0.5)
    for i in range(3):
        c.start(i)
    try:
        leader = await c.leader()
        for k in range(20):
            await leader.propose(b"e%d" % k)
        expected = [b"e%d" % k for k in range(20)]
        await wait_for(
            lambda: all(os.path.exists(tmp_path / f"n{i}" / "dump") for i in range(3)),
            "a compaction dump on every node",
        )
        for i in range(3):
            c.stop(i)
        for i in range(3):
            c.start(i)
        await c.leader()
        await wait_for(
            lambda: all(m.entries == expected for m in c.machines), "state after restart"
        )
    finally:
        for i in range(3):
            c.stop(i)


async def test_a_halted_node_leaves_raft_keeps_its_last_dump_and_catches_up_later(
    tmp_path: Path,
) -> None:
    """A node whose machine halts (an entry it can neither apply nor skip) stops ticking:
    the other two go on committing and compacting, its dump stays the last good one, and
    restarted with a machine that applies the entry it replays its journal and catches up."""
    c = Cluster(tmp_path, log_compaction_min_entries=5, log_compaction_min_time_s=0.5)
    for i in range(3):
        c.start(i)
    try:
        leader = await c.leader()
        held = next(i for i, n in enumerate(c.nodes) if n is not leader)
        c.stop(held)
        c.start(held, ListMachine(halts_on=b"newer"))
        up = [i for i in range(3) if i != held]
        first = [b"e%d" % k for k in range(12)]
        for entry in first:
            await leader.propose(entry)
        held_dump = tmp_path / f"n{held}" / "dump"
        await wait_for(lambda: held_dump.exists(), "a dump on the node before it halts")
        await leader.propose(b"newer")
        node = c.nodes[held]
        assert node is not None
        reason = await wait_for(lambda: node.status().halted, "the node halts")
        assert reason == "cannot apply b'newer'"
        st = node.status()
        assert (st.role, st.ready, st.leader_addr) == (RaftRole.FOLLOWER, False, None)
        assert not node.is_ready_leader
        with pytest.raises(NoLeaderError, match="halted"):
            await node.propose(b"x")
        frozen = held_dump.read_bytes()
        dumps_before = {i: (tmp_path / f"n{i}" / "dump").read_bytes() for i in up}
        rest = [b"f%d" % k for k in range(12)]
        for entry in rest:  # the other two are a majority
            await leader.propose(entry)
        await wait_for(
            lambda: all((tmp_path / f"n{i}" / "dump").read_bytes() != dumps_before[i] for i in up),
            "the running nodes compact again",
        )
        assert held_dump.read_bytes() == frozen
        assert c.machines[held].entries == first
        c.stop(held)
        c.start(held)
        expected = [*first, b"newer", *rest]
        await wait_for(lambda: c.machines[held].entries == expected, "the node caught up", 30.0)
    finally:
        for i in range(3):
            c.stop(i)


async def test_a_node_that_missed_a_compaction_catches_up_from_a_compressed_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The others compact while a follower is down, so it can only catch up from the snapshot,
    # sent in chunks large enough to travel compressed (COMPRESS_MIN_BYTES).
    inflated: list[int] = []
    real = replication.wire.decompress_bounded

    def counting(data: bytes, limit: int) -> bytes:
        out = real(data, limit)
        inflated.append(len(out))
        return out

    monkeypatch.setattr(replication.wire, "decompress_bounded", counting)
    c = Cluster(tmp_path, log_compaction_min_entries=5, log_compaction_min_time_s=0.5)
    for i in range(3):
        c.start(i)
    try:
        leader = await c.leader()
        lag = next(i for i, n in enumerate(c.nodes) if n is not leader)
        up = [i for i in range(3) if i != lag]
        c.stop(lag)
        expected = [os.urandom(2048).hex().encode() for _ in range(60)]  # 240 KiB
        for entry in expected:
            await leader.propose(entry)
        await wait_for(
            lambda: all(os.path.exists(tmp_path / f"n{i}" / "dump") for i in up),
            "a compaction dump on the running nodes",
        )
        assert not inflated  # single entries travel uncompressed
        c.start(lag)
        await wait_for(lambda: c.machines[lag].entries == expected, "the node caught up", 30.0)
        assert inflated and max(inflated) >= replication.wire.COMPRESS_MIN_BYTES
    finally:
        for i in range(3):
            c.stop(i)


def test_settings_refuse_missing_secret_and_wildcard_bind(tmp_path: Path) -> None:
    ports = free_ports(3)
    good = settings_for(tmp_path, ports, 0)
    with pytest.raises(ValueError, match="secret"):
        ReplicatedLog(
            RaftSettings(**{**_asdict(good), "secret": ""}),
            ListMachine(),  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match="wildcard"):
        ReplicatedLog(
            RaftSettings(**{**_asdict(good), "bind_addr": f"0.0.0.0:{ports[0]}"}),  # type: ignore[arg-type]
            ListMachine(),
        )


def _asdict(s: RaftSettings) -> dict[str, object]:
    return {f: getattr(s, f) for f in s.__dataclass_fields__}


def test_importing_the_log_leaves_socket_inet_ntop_working() -> None:
    """pysyncobj 0.3.17 swaps socket.inet_ntop for a Windows-only function on import; the
    replication package puts the real one back (psutil in the chaos harness tripped on it)."""
    assert replication.log.ReplicatedLog is not None  # pysyncobj is imported by now
    assert socket.inet_ntop(socket.AF_INET, bytes([127, 0, 0, 1])) == "127.0.0.1"
    assert socket.inet_ntop(socket.AF_INET6, bytes(15) + b"\x01") == "::1"


@pytest.mark.parametrize("module", ["connection", "transport", "poller", "wire", "members"])
def test_importing_any_replication_module_first_leaves_socket_inet_ntop_working(
    module: str,
) -> None:
    """The repair holds whichever module a process imports first, not only the log: the
    chaos harness's proxy formats addresses after importing `replication.connection` alone."""
    code = (
        f"import replication.{module}, socket; "
        "print(socket.inet_ntop(socket.AF_INET, bytes([127, 0, 0, 1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "127.0.0.1"


PYSYNCOBJ_PATCHES = ("raft_node", "durable_journal", "transport", "connection", "poller")


@pytest.mark.parametrize("module", [f"replication.{m}" for m in PYSYNCOBJ_PATCHES])
def test_the_pysyncobj_patches_refuse_another_release_at_import(module: str) -> None:
    """Importing a module that patches pysyncobj's private names against a release other
    than the pinned one fails at once, naming the pin."""
    code = f"import pysyncobj.version as v; v.VERSION = '0.3.18'; import {module}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "ImportError" in done.stderr and "pysyncobj==0.3.17" in done.stderr, done.stderr


def test_the_catch_up_correction_still_overrides_pysyncobj() -> None:
    """`RaftNode` overrides pysyncobj's private follower answer (chaos scenario b, bug 6 in
    docs/reliability.md). If an upgrade renames what it overrides, fail here, not in prod."""
    for name in ("_SyncObj__sendNextNodeIdx", "_SyncObj__getCurrentLogIndex"):
        assert callable(getattr(SyncObj, name, None)), name
    assert "_SyncObj__sendNextNodeIdx" in vars(RaftNode)


def test_the_dump_load_correction_still_overrides_pysyncobj() -> None:
    """`RaftNode` overrides pysyncobj's private dump loading so a node stopped between a
    compaction and the journal trim keeps the entries after the dump (the restart test above
    loses them without it). Fail here if an upgrade renames what it uses."""
    for name in ("_SyncObj__loadDumpFile", "_SyncObj__deleteEntriesTo"):
        assert callable(getattr(SyncObj, name, None)), name
    assert "_SyncObj__loadDumpFile" in vars(RaftNode)
    source = inspect.getsource(SyncObj._SyncObj__loadDumpFile)
    for attr in ("self.__serializer.deserialize()", "self.__raftLog"):
        assert attr in source, attr


def test_the_commit_notice_correction_still_overrides_pysyncobj() -> None:
    """`RaftNode` overrides pysyncobj's private apply step so the commit notice rides the
    next AppendEntries (test below). Fail here if an upgrade renames what it uses."""
    assert callable(getattr(SyncObj, "_SyncObj__applyLogEntries", None))
    assert "_SyncObj__applyLogEntries" in vars(RaftNode)
    source = inspect.getsource(SyncObj._onTick)
    assert "needSendAppendEntries = self.__applyLogEntries()" in source
    assert "self.__newAppendEntriesTime" in source


def test_the_durable_acknowledgement_corrections_still_fit_pysyncobj(tmp_path: Path) -> None:
    """`RaftNode` syncs its journal around SyncObj._onTick and holds a follower's answers
    for that sync; `DurableJournal` takes over FileJournal's private state; dumps go through
    pysyncobj.serializer.atomicReplace. Fail here if an upgrade renames or moves them."""
    assert "_onTick" in vars(RaftNode) and "_SyncObj__sendNextNodeIdx" in vars(RaftNode)
    tick = inspect.getsource(SyncObj._onTick)
    # The leader counts itself in the commit computation, before the tick appends commands.
    assert tick.index("count = 1") < tick.index("self._checkCommandsToApply()")
    assert "self.__raftLog = createJournal(self.__conf.journalFile)" in inspect.getsource(
        SyncObj.__init__
    )
    # A follower appends what a message carries, then answers, outside any tick.
    received = inspect.getsource(SyncObj._SyncObj__onMessageReceived)
    assert received.index("self.__raftLog.add(*entry)") < received.index(
        "self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)"
    )
    journal = FileJournal(str(tmp_path / "journal"))
    try:
        assert isinstance(journal._FileJournal__journal, list)
        assert isinstance(journal._FileJournal__currentOffset, int)
        assert isinstance(journal._FileJournal__metaStorer, MetaStorer)
        for method in ("read", "flush", "_destroy"):
            assert callable(getattr(journal._FileJournal__journalFile, method)), method
    finally:
        journal._destroy()
    stored = inspect.getsource(FileJournal.setCurrentTerm)
    assert "self.__metaStorer.storeMeta(self.__meta)" in stored
    assert inspect.getsource(pysyncobj.serializer.Serializer).count("atomicReplace(") == 2
    assert pysyncobj.serializer.atomicReplace is replication.durable_journal._replace_dump


async def test_an_acknowledged_entry_is_on_the_disk_of_a_majority(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable acknowledgements: a follower says it holds entries only once its journal has
    synced them, the leader counts itself only for what it synced, so whenever a proposal
    has returned the leader and at least one follower have synced their journals through
    the commit index; every node synced its journal and its term record."""
    answers: list[tuple[int, int, bool]] = []  # (next index, synced index, dirty) of each
    send = SyncObj._SyncObj__sendNextNodeIdx

    def recorded(node: RaftNode, *args: object, **kw: object) -> None:
        if kw.get("success"):
            next_index, journal = kw["nextNodeIdx"], node.journal()
            assert isinstance(next_index, int)
            answers.append((next_index, journal.synced_index, journal.dirty))
        send(node, *args, **kw)

    monkeypatch.setattr(SyncObj, "_SyncObj__sendNextNodeIdx", recorded)
    leader = await cluster.leader()
    for i in range(40):
        await leader.propose(b"w%d" % i)
        commit = leader.status().commit_index
        synced = [n._node.journal().synced_index for n in cluster.nodes if n is not None]
        assert sum(index >= commit for index in synced) >= 2, (commit, synced)
        assert leader._node.journal().synced_index >= commit  # it counted itself
    assert len(answers) >= 40
    unsynced = [a for a in answers if a[0] - 1 > a[1] or a[2]]
    assert not unsynced, unsynced[:5]
    for node in cluster.nodes:
        assert node is not None
        stats = node.sync_stats()
        assert stats.journal_syncs > 0 and stats.meta_syncs > 0, stats


async def test_with_fsync_off_nothing_is_synced(tmp_path: Path) -> None:
    async with running(tmp_path, fsync=False) as c:
        leader = await c.leader()
        for i in range(5):
            assert await leader.propose(b"w%d" % i) == b"ok:%d" % (i + 1)
        for node in c.nodes:
            assert node is not None
            stats = node.sync_stats()
            assert stats.journal_syncs == stats.meta_syncs == stats.dump_syncs == 0, stats


async def test_commit_notices_ride_the_next_append_entries(cluster: Cluster) -> None:
    """One writer, one proposal at a time: the leader sends each follower one AppendEntries
    per write (the entry), not two (the entry, then the commit index once applied, as
    pysyncobj 0.3.17 does); the last commit still reaches the followers on its own."""
    leader = await cluster.leader()
    # Elected with one vote, the leader may not have dialled the other follower yet.
    await wait_for(lambda: len(leader._node._SyncObj__connectedNodes) == 2, "both links")
    transport = leader._node._SyncObj__transport
    original = transport.send
    sent: collections.Counter[str] = collections.Counter()

    def counting(node: object, message: dict[str, object]) -> object:
        sent[str(message.get("type"))] += 1
        return original(node, message)

    transport.send = counting  # the next send goes through it
    writes = 60
    try:
        for i in range(writes):
            await leader.propose(b"w%d" % i)
    finally:
        transport.send = original
    # 2 followers x 1 per write, plus the periodic ones (every 50 ms) the run spans; the
    # per-commit notice made it 2 x 2 per write.
    assert 2 * writes <= sent["append_entries"] < 3 * writes, sent
    want = [b"w%d" % i for i in range(writes)]
    await wait_for(lambda: all(m.entries == want for m in cluster.machines), "replicas")


# -- where Raft runs -------------------------------------------------------------------------


async def test_raft_runs_on_the_event_loop(cluster: Cluster) -> None:
    """pysyncobj's wake-up pipe replaced, every entry applied on the event loop's thread."""
    leader = await cluster.leader()
    for i in range(5):
        assert await leader.propose(b"t%d" % i) == b"ok:%d" % (i + 1)
    await wait_for(lambda: all(len(m.entries) == 5 for m in cluster.machines), "replicas")
    loop_thread = threading.get_ident()
    for node, machine in zip(cluster.nodes, cluster.machines, strict=True):
        assert node is not None
        assert isinstance(node._node._SyncObj__pipeNotifier, KickNotifier)
        assert machine.threads == {loop_thread}


async def test_on_the_loop_close_leaves_no_descriptor_registered(tmp_path: Path) -> None:
    """Closing a node stops its ticks and takes every Raft socket off the loop: nothing
    fires for a closed descriptor, and the others keep electing a leader."""
    async with running(tmp_path) as c:
        leader = await c.leader()
        i = c.nodes.index(leader)
        poller = leader._poller
        assert poller is not None and poller._subs
        c.stop(i)
        assert not poller._subs
        timer = leader._ticker._tick_timer
        assert timer is not None and timer.cancelled()
        assert await (await c.leader()).propose(b"after") == b"ok:1"


async def test_a_busy_event_loop_keeps_its_leader_and_commits(tmp_path: Path) -> None:
    """The event loop busy for five times the shortest election timeout (CPU-bound, so the
    GIL still passes to other threads): each node's stall guard reads the Raft sockets and
    ticks in its place. No election, and a write proposed just before commits during it."""
    async with running(tmp_path) as c:
        leader = await c.leader()
        term = leader.status().term
        assert await leader.propose(b"before") == b"ok:1"
        target = leader.status().applied_index + 1
        pending = asyncio.ensure_future(leader.propose(b"during"))
        # One pass of the loop, not a wait: the task proposes and sends the entry, and the
        # busy stretch starts before the followers' answers can be read by the loop.
        await asyncio.sleep(0)
        assert leader._group.in_flight == 1
        applied_while_busy = False
        busy_until = time.monotonic() + 5 * 0.3
        while time.monotonic() < busy_until:
            applied_while_busy = applied_while_busy or leader.status().applied_index >= target
        assert applied_while_busy
        assert await pending == b"ok:2"
        for node in c.nodes:
            assert node is not None
            assert node.status().term == term
            assert node.guard_ticks > 0
        assert leader.is_ready_leader
        await wait_for(lambda: all(m.entries == [b"before", b"during"] for m in c.machines), "all")


def test_the_loop_poller_still_replaces_pysyncobjs(tmp_path: Path) -> None:
    """`RaftNode` swaps in its poller through SyncObj's `self._poller = ...`
    and takes over pysyncobj's private pipe notifier. Fail here if an upgrade renames them."""
    source = inspect.getsource(SyncObj.__init__)
    assert "self._poller = createPoller(" in source
    assert "self.__pipeNotifier = PipeNotifier(self._poller)" in source
    assert "_poller" in vars(RaftNode) and isinstance(vars(RaftNode)["_poller"], property)
    from pysyncobj.pipe_notifier import PipeNotifier

    assert "self.__pipeR, self.__pipeW = os.pipe()" in inspect.getsource(PipeNotifier.__init__)


# -- group commit -------------------------------------------------------------------------


async def test_group_commit_many_proposals_per_entry_each_with_its_own_result(
    cluster: Cluster,
) -> None:
    leader = await cluster.leader()
    before = leader.group_commit_stats().entries
    items = [b"w%03d" % i for i in range(200)]
    results = await asyncio.gather(*(leader.propose(x) for x in items))
    # Every caller got its own result: the machine numbered each entry once.
    assert sorted(results) == sorted(b"ok:%d" % n for n in range(1, 201))
    stats = leader.group_commit_stats()
    entries = stats.entries - before
    assert entries < 100, f"{entries} log entries for 200 concurrent proposals: not batched"
    # Same order on every replica, each entry once.
    await wait_for(lambda: all(len(m.entries) == 200 for m in cluster.machines), "replicas")
    assert cluster.machines[0].entries == cluster.machines[1].entries == cluster.machines[2].entries
    assert sorted(cluster.machines[0].entries) == items


async def test_a_raising_entry_in_a_batch_fails_alone(cluster: Cluster) -> None:
    leader = await cluster.leader()
    items = [b"a", b"b", b"boom", b"c", b"d", b"e"]
    results = await asyncio.gather(*(leader.propose(x) for x in items))
    assert results[2] == machine_error_result(RuntimeError("machine bug"))
    assert sorted(r for i, r in enumerate(results) if i != 2) == [b"ok:%d" % n for n in range(1, 6)]
    await wait_for(lambda: all(len(m.entries) == 5 for m in cluster.machines), "replicas")


async def test_barriers_ride_in_batches(cluster: Cluster) -> None:
    leader = await cluster.leader()
    out = await asyncio.gather(leader.propose(b"x"), leader.barrier(), leader.propose(b"y"))
    assert out[1] is None and sorted([out[0], out[2]]) == [b"ok:1", b"ok:2"]


async def test_a_full_proposal_queue_refuses_instead_of_waiting(tmp_path: Path) -> None:
    async with running(tmp_path, proposals_queued_max=4) as c:
        leader = await c.leader()
        outcomes = await asyncio.gather(
            *(leader.propose(b"q%d" % i) for i in range(40)), return_exceptions=True
        )
        refused = [o for o in outcomes if isinstance(o, NoLeaderError)]
        done = [o for o in outcomes if isinstance(o, bytes)]
        assert refused and done and len(refused) + len(done) == 40
        assert all("queue full" in str(o) for o in refused)
        assert leader.group_commit_stats().queue_full == len(refused)
        await wait_for(lambda: all(len(m.entries) == len(done) for m in c.machines), "replicas")


async def test_entries_max_one_turns_group_commit_off(tmp_path: Path) -> None:
    async with running(tmp_path, group_commit_entries_max=1) as c:
        leader = await c.leader()
        before = leader.group_commit_stats()
        e0, p0 = before.entries, before.proposals
        await asyncio.gather(*(leader.propose(b"s%d" % i) for i in range(30)))
        stats = leader.group_commit_stats()
        assert stats.entries - e0 == stats.proposals - p0 == 30
