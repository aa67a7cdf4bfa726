"""One node's disk failing or slowing under three real Raft nodes.

The faults go in through the test-only control file `replication.disk_faults` reads when
RIPPLE_TEST_FAULTS names it (never set in production): the real journal sync then raises
EIO, or sleeps before it, in that node alone. The replicated-log half runs three
`ReplicatedLog`s in this process (as test_replication.py); the coordinator half runs three
coordinator processes and reads what an operator would: /v1/health, /metrics, the 503.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pysyncobj import SyncObj
from pysyncobj.journal import ResizableFile
from pysyncobj.serializer import Serializer

from replication.disk_faults import FAULTS_ENV
from replication.errors import NoLeaderError, ReplicationError
from replication.journal import UNSYNCED_MARK_SUFFIX
from replication.log import RaftRole, ReplicatedLog
from replication.raft_node import RaftNode
from testkit.cluster import Cluster as CoordinatorCluster
from testkit.prom import parse, value
from testkit.wait import wait_until
from tests.integration.test_replication import WAIT_S, Cluster, wait_for


def test_the_disk_fault_corrections_still_fit_pysyncobj() -> None:
    """What the disk-fault handling relies on of pysyncobj's private code (replication/
    raft_node.py and durable_journal.py): fail here, not in production, if an upgrade moves
    it."""
    assert "_SyncObj__tryLogCompaction" in vars(RaftNode)
    compaction = inspect.getsource(SyncObj._SyncObj__tryLogCompaction)
    assert "self.__serializer.checkSerializing()" in compaction
    assert "SERIALIZER_STATE.FAILED" in compaction
    # A compaction's dump and a received one, told apart by their temporary names.
    assert "tmpFile = self.__fileName + '.tmp'" in inspect.getsource(Serializer.serialize)
    received = inspect.getsource(Serializer.setTransmissionData)
    assert "tmpFile = self.__fileName + '.1.tmp'" in received
    mapped = inspect.getsource(ResizableFile.__init__)
    assert "self.__f = open(fileName, 'r+b')" in mapped and "self.__mm = mmap.mmap(" in mapped
    assert "offset + size > self.__mm.size()" in inspect.getsource(ResizableFile.write)
    assert "'timeout_now'" in inspect.getsource(SyncObj._SyncObj__onMessageReceived)


@contextlib.asynccontextmanager
async def faulty_cluster(
    tmp: Path, mp: pytest.MonkeyPatch, **kw: object
) -> AsyncIterator[tuple[Cluster, list[Path]]]:
    """Three nodes, each reading its own control file (none written yet: no fault)."""
    c = Cluster(tmp, **kw)
    controls = [tmp / f"faults-{i}.json" for i in range(3)]
    for i, control in enumerate(controls):
        mp.setenv(FAULTS_ENV, str(control))
        c.start(i)
    mp.delenv(FAULTS_ENV)
    try:
        yield c, controls
    finally:
        for i in range(3):
            c.stop(i)


async def write(c: Cluster, entries: list[bytes], acked: list[bytes]) -> None:
    """Propose each entry at the current leader; `acked` gets those acknowledged."""
    for entry in entries:
        for _attempt in range(50):
            leader = await c.leader()
            try:
                await leader.propose(entry, timeout_s=5.0)
            except ReplicationError:
                continue  # not appended, or unknown: the final check counts only the acked
            acked.append(entry)
            break


def holds_all(c: Cluster, i: int, acked: list[bytes]) -> bool:
    entries = c.machines[i].entries
    return set(acked) <= set(entries)


def settled(c: Cluster, acked: list[bytes]) -> bool:
    """Every node holds every acknowledged write, and the three replicas are equal."""
    a, b, d = (m.entries for m in c.machines)
    return a == b == d and holds_all(c, 0, acked)


async def test_a_follower_whose_sync_fails_halts_and_rejoins_with_nothing_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with faulty_cluster(tmp_path, monkeypatch) as (c, controls):
        acked: list[bytes] = []
        await write(c, [b"a%d" % k for k in range(20)], acked)
        leader = await c.leader()
        f = next(i for i, n in enumerate(c.nodes) if n is not None and n is not leader)
        follower = c.nodes[f]
        assert follower is not None
        controls[f].write_text(json.dumps({"journal_sync_errno": "EIO"}))
        await write(c, [b"b%d" % k for k in range(20)], acked)
        await wait_for(lambda: follower.halted is not None, "the follower to halt")
        st = follower.status()
        assert st.halt_kind == "sync_failed" and st.role is RaftRole.FOLLOWER
        assert "journal sync" in (st.halted or "") and "EIO" in (st.halted or "")
        with pytest.raises(NoLeaderError, match="halted"):
            await follower.propose(b"refused")
        mark = Path(follower.settings.journal_path + UNSYNCED_MARK_SUFFIX)
        assert mark.exists()
        # The other two go on: every write acknowledged, none at the halted node.
        await write(c, [b"c%d" % k for k in range(20)], acked)
        assert len(acked) == 60
        c.stop(f)
        controls[f].unlink()  # the disk replaced: the restart reads no fault
        c.start(f)
        await wait_for(lambda: holds_all(c, f, acked), "the restarted node to catch up")
        restarted = c.nodes[f]
        assert restarted is not None and restarted.halted is None
        assert not mark.exists()  # its unsynced tail was cut, then it caught up
        await write(c, [b"d"], acked)
        await wait_for(lambda: settled(c, acked), "equal replicas holding every ack")


async def test_a_dump_that_fails_leaves_the_node_running_and_is_retried_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with faulty_cluster(
        tmp_path, monkeypatch, log_compaction_min_entries=5, log_compaction_min_time_s=0.5
    ) as (c, controls):
        acked: list[bytes] = []
        leader = await c.leader()
        d = c.nodes.index(leader)
        controls[d].write_text(json.dumps({"dump_errno": "ENOSPC"}))
        await write(c, [b"a%d" % k for k in range(30)], acked)
        node = c.nodes[d]
        assert node is not None
        await wait_for(lambda: node.dump_failures >= 1, "a failed dump")
        await write(c, [b"b%d" % k for k in range(30)], acked)  # it keeps leading
        assert node.halted is None and node.is_ready_leader
        # Retried after DUMP_RETRY_MIN_S, not on every tick: one failure so far.
        assert node.dump_failures == 1
        assert not os.path.exists(node.settings.dump_path)
        controls[d].unlink()
        await wait_for(
            lambda: os.path.exists(node.settings.dump_path), "the retried dump", 2 * WAIT_S
        )
        await write(c, [b"c"], acked)
        await wait_for(lambda: settled(c, acked), "equal replicas holding every ack")


# Election timeouts above two slow syncs (of 150-300 ms against a 100 ms bound), so only the
# step-down moves the leadership.
SLOW_DISK_SETTINGS: dict[str, object] = {
    "raft_min_timeout_s": 1.5,
    "raft_max_timeout_s": 3.0,
    "connection_timeout_s": 3.0,
    "leader_sync_slow_ms": 100,
    "leader_sync_cooldown_s": 60.0,
}


async def test_a_leader_whose_syncs_turn_slow_hands_its_leadership_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with faulty_cluster(tmp_path, monkeypatch, **SLOW_DISK_SETTINGS) as (c, controls):
        acked: list[bytes] = []
        await write(c, [b"a%d" % k for k in range(5)], acked)
        slow = await c.leader()
        s = c.nodes.index(slow)
        controls[s].write_text(json.dumps({"journal_sync_delay_ms": 300}))

        def another_leader() -> ReplicatedLog | None:
            leaders = [n for n in c.nodes if n is not None and n.is_ready_leader]
            return leaders[0] if len(leaders) == 1 and leaders[0] is not slow else None

        for k in range(100):  # bounded: writes keep the slow leader syncing
            if another_leader() is not None:
                break
            await write(c, [b"b%d" % k], acked)
        new = await wait_for(another_leader, "a follower to take the leadership")
        assert slow.slow_disk_step_downs == 1
        assert slow.status().disk_slow  # still slow as a follower: it stands aside
        await write(c, [b"c%d" % k for k in range(10)], acked)
        assert new.is_ready_leader and not slow.is_ready_leader  # it did not stand again
        controls[s].unlink()
        await write(c, [b"d"], acked)
        await wait_for(lambda: settled(c, acked), "equal replicas holding every ack")


async def test_when_every_disk_is_slow_a_leader_remains_and_writes_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No follower can take the leadership (each stands aside): the hand-over fails once and
    # waits out the cooldown, and the slow leader keeps leading rather than none.
    async with faulty_cluster(tmp_path, monkeypatch, **SLOW_DISK_SETTINGS) as (c, controls):
        acked: list[bytes] = []
        await write(c, [b"a%d" % k for k in range(3)], acked)
        for control in controls:
            control.write_text(json.dumps({"journal_sync_delay_ms": 150}))
        await write(c, [b"b%d" % k for k in range(20)], acked)
        assert len(acked) == 23  # every write was acknowledged in the end
        assert sum(n.slow_disk_step_downs for n in c.nodes if n is not None) == 0
        leader = await c.leader()
        assert leader.status().disk_slow
        for control in controls:
            control.unlink()
        await wait_for(lambda: settled(c, acked), "equal replicas holding every ack")


# -- a real full disk: a small tmpfs in a private mount namespace ----------------------------

# Appends 1 KB records to a DurableJournal on the directory argv[1], syncing each, until the
# node would halt; argv[2] "no-fallocate" takes the allocation away, as pysyncobj writes.
FILL_JOURNAL = """
import errno, os, sys
from replication.disk_faults import DiskFaults
from replication.durability import SyncTimes
from replication.durable_journal import DurableJournal
from replication.errors import SyncFailedError
if sys.argv[2] == "no-fallocate":
    def refused(*_args):
        raise OSError(errno.EOPNOTSUPP, "not here")
    os.posix_fallocate = refused
faults = DiskFaults()
j = DurableJournal(sys.argv[1] + "/raft.journal", SyncTimes(), faults, fsync=True)
try:
    for i in range(1, 100_000):
        j.add(b"x" * 1000, i, 1)
        j.sync()
except SyncFailedError:
    print("halted", faults.failure.kind, j.synced_index)
"""
TMPFS_BYTES = 256 * 1024


def can_mount_privately() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "--mount", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not can_mount_privately(), reason="no private mount namespace here")
@pytest.mark.parametrize("mode", ["fallocate", "no-fallocate"])
def test_a_journal_on_a_full_tmpfs_halts_with_enospc_rather_than_sigbus(
    tmp_path: Path, mode: str
) -> None:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            f'mount -t tmpfs -o size={TMPFS_BYTES} tmpfs "$1" && exec "$2" -c "$3" "$1" "$4"',
            "sh",
            str(mount),
            sys.executable,
            FILL_JOURNAL,
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if mode == "fallocate":
        assert done.returncode == 0, done.stderr
        word, kind, synced = done.stdout.split()
        assert (word, kind) == ("halted", "disk_full")
        assert int(synced) > TMPFS_BYTES // 2048  # it filled most of the disk first
    else:
        # pysyncobj's own way: the write into an unallocated page of the mapping kills the
        # process with SIGBUS, which is why the journal allocates first.
        assert done.returncode == -signal.SIGBUS and "halted" not in done.stdout


# -- three coordinator processes -------------------------------------------------------------


def start_with_controls(
    c: CoordinatorCluster, tmp: Path, mp: pytest.MonkeyPatch
) -> dict[str, Path]:
    """Start every node, each reading its own fault control file (none written yet)."""
    controls = {s.id: tmp / f"faults-{s.id}.json" for s in c.specs}
    for node, control in controls.items():
        mp.setenv(FAULTS_ENV, str(control))  # each process reads its own
        c.start(node)
    mp.delenv(FAULTS_ENV)
    return controls


def register(c: CoordinatorCluster, worker: str) -> None:
    body = {"worker_id": worker, "address": "http://127.0.0.1:9"}
    r = c.write_via_any("/v1/workers", body)
    assert r.status == 200, r


def workers_at(c: CoordinatorCluster, node: str) -> set[str]:
    r = c.get(node, "/v1/workers")
    return {w["worker_id"] for w in r.body["workers"]} if r.status == 200 else set()


@pytest.mark.parametrize(
    ("fault", "kind", "op", "other"),
    [
        ({"journal_sync_errno": "EIO"}, "sync_failed", "journal sync", "disk_full"),
        ({"journal_write_errno": "ENOSPC"}, "disk_full", "journal write", "sync_failed"),
    ],
    ids=["eio", "enospc"],
)
def test_a_coordinator_whose_disk_fails_halts_says_why_and_rejoins(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: dict[str, str],
    kind: str,
    op: str,
    other: str,
) -> None:
    c = CoordinatorCluster(tmp_path)
    try:
        controls = start_with_controls(c, tmp_path, monkeypatch)
        leader = c.ready()
        acked = [f"w{k}" for k in range(10)]
        for worker in acked:
            register(c, worker)
        f = next(s.id for s in c.specs if s.id != leader)
        controls[f].write_text(json.dumps(fault))
        more = [f"x{k}" for k in range(10)]
        for worker in more:
            register(c, worker)  # the other two acknowledge them
        acked += more

        def halted() -> str | None:
            h = c.health(f)
            return None if h is None else h.get("halted")

        reason = wait_until(halted, "the follower to halt", 20.0)
        assert reason.startswith(f"{kind}: {op} of ") and next(iter(fault.values())) in reason
        assert "restart the node: it rejoins and catches up from the others" in reason
        # Local reads still answer, from the (stale) state it had when it stopped.
        assert c.get(f, "/v1/workers").status == 200
        assert {"w0"} <= workers_at(c, f) <= set(acked)
        refused = c.post(f, "/v1/workers", {"worker_id": "y", "address": "http://127.0.0.1:9"})
        assert refused.status == 503 and "halted" in json.dumps(refused.body)
        samples = parse(str(c.get(f, "/metrics").body))
        assert value(samples, "ripple_node_halted", reason=kind) == 1
        assert value(samples, "ripple_node_halted", reason=other) == 0
        assert "ERROR" in c.procs[f].output() and f"HALTED ({kind})" in c.procs[f].output()
        register(c, "z")  # the other two go on
        acked.append("z")
        c.procs[f].stop()
        controls[f].unlink()  # the disk fixed
        c.start(f)
        wait_until(lambda: set(acked) <= workers_at(c, f), "the node to catch up", 30.0)
        h = c.health(f)
        assert h is not None and h["halted"] is None and h["role"] == "follower"
    finally:
        c.stop_all()


def test_a_coordinator_leader_on_a_slow_disk_hands_over_and_writes_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Election timeouts above two slow syncs, so only the step-down moves the leadership.
    c = CoordinatorCluster(
        tmp_path,
        raft_min_timeout_s=1.0,
        raft_max_timeout_s=1.5,
        leader_sync_slow_ms=100,
        leader_sync_cooldown_s=60.0,
    )
    try:
        controls = start_with_controls(c, tmp_path, monkeypatch)
        slow = c.ready(60.0)
        controls[slow].write_text(json.dumps({"journal_sync_delay_ms": 200}))
        acked: list[str] = []

        def handed_over() -> str | None:
            register(c, f"w{len(acked)}")  # writes keep the slow leader syncing
            acked.append(f"w{len(acked)}")
            h = c.health(slow)
            return None if h is None or h["role"] == "leader" else slow

        wait_until(handed_over, "the slow leader to hand its leadership over", 30.0)
        new = c.leader(30.0)
        assert new != slow
        h = c.health(slow)
        assert h is not None and h["disk_slow"] and h["halted"] is None
        samples = parse(str(c.get(slow, "/metrics").body))
        assert value(samples, "ripple_raft_slow_disk_step_downs_total") == 1
        assert value(samples, "ripple_raft_disk_slow") == 1
        assert "journal syncs are slow" in c.procs[slow].output()
        for k in range(5):
            register(c, f"after{k}")  # at the new leader's pace
            acked.append(f"after{k}")
        assert c.leader(10.0) == new  # the slow node did not stand again
        controls[slow].unlink()
        wait_until(lambda: set(acked) <= workers_at(c, slow), "the slow node to hold all", 30.0)
    finally:
        c.stop_all()
