"""The disk fault kit on real child processes: the LD_PRELOAD shim fails or delays syncs and
fails writes with ENOSPC for files under its prefix only, only while its control file says
so, in a process already running; the small tmpfs gives a child the kernel's own ENOSPC."""

from __future__ import annotations

import errno
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.faults.disk import DiskFaultCounts, DiskFaults, fill, small_tmpfs_argv, unfill
from testkit.faults.line_child import LineChild
from testkit.spark_cluster import unshare_available
from testkit.wait import wait_until

DELAY_MS = 300
TMPFS_BYTES = 1 << 20

# One command a line on stdin ("<op> <path>"); one answer a line: "ok <ms>" or "err <errno> <ms>".
DRIVER = r"""
import mmap, os, sys, time
for line in sys.stdin:
    op, path = line.split()
    began = time.monotonic()
    try:
        if op == "write":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, b"x" * 4096)
            finally:
                os.close(fd)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if op == "fsync":
                    os.fsync(fd)
                elif op == "fdatasync":
                    os.fdatasync(fd)
                elif op == "ftruncate":
                    os.ftruncate(fd, 8192)
                elif op == "fallocate":
                    os.posix_fallocate(fd, 0, 16384)
                elif op == "msync":
                    os.ftruncate(fd, 4096)
                    with mmap.mmap(fd, 4096) as m:
                        m[0:1] = b"y"
                        m.flush()
                else:
                    raise SystemExit(f"unknown op {op}")
            finally:
                os.close(fd)
        answer = "ok"
    except OSError as exc:
        answer = f"err {exc.errno}"
    print(answer, round((time.monotonic() - began) * 1000), flush=True)
"""


def do(child: LineChild, op: str, path: Path) -> tuple[int, int]:
    """(errno or 0, elapsed ms) of `op` on `path` in the child."""
    words = child.ask(f"{op} {path}").split()
    if words[0] == "ok":
        return 0, int(words[1])
    return int(words[1]), int(words[2])


@pytest.fixture
def disk(tmp_path: Path) -> DiskFaults:
    (tmp_path / "node").mkdir()
    (tmp_path / "other").mkdir()
    return DiskFaults(tmp_path / "node", tmp_path / "control")


@pytest.fixture
def child(disk: DiskFaults) -> Iterator[LineChild]:
    d = LineChild([sys.executable, "-c", DRIVER], env=disk.env())
    try:
        yield d
    finally:
        d.stop()


@dataclass(frozen=True)
class Node:
    """The fault kit, a child running under it, a file under the faulted prefix and one
    beside it, outside."""

    disk: DiskFaults
    child: LineChild
    inside: Path
    outside: Path


@pytest.fixture
def node(disk: DiskFaults, child: LineChild, tmp_path: Path) -> Node:
    return Node(disk, child, tmp_path / "node" / "f", tmp_path / "other" / "f")


SYNCS = ("fsync", "fdatasync", "msync")
WRITES = ("write", "ftruncate", "fallocate")


def test_no_fault_unless_the_control_file_says_so(
    disk: DiskFaults, child: LineChild, tmp_path: Path
) -> None:
    for op in SYNCS + WRITES:
        assert do(child, op, tmp_path / "node" / op)[0] == 0, op
    assert disk.counts() == DiskFaultCounts()


def test_sync_eio_under_the_prefix_only_and_off_again(node: Node) -> None:
    disk, child, inside, outside = node.disk, node.child, node.inside, node.outside
    assert do(child, "write", inside)[0] == 0
    disk.set(duration_s=60, sync_eio=True)
    for op in SYNCS:
        assert do(child, op, inside)[0] == errno.EIO, op
        assert do(child, op, outside)[0] == 0, op
    assert do(child, "write", inside)[0] == 0  # a sync fault leaves writes alone
    disk.clear()
    for op in SYNCS:
        assert do(child, op, inside)[0] == 0, op
    assert disk.counts() == DiskFaultCounts(sync_eio=len(SYNCS))


def test_sync_delay_slows_syncs_under_the_prefix(node: Node) -> None:
    disk, child, inside, outside = node.disk, node.child, node.inside, node.outside
    with disk.faults(duration_s=60, sync_delay_ms=DELAY_MS):
        slowed = {op: do(child, op, inside) for op in SYNCS}
        beside = do(child, "fsync", outside)
    after = do(child, "fsync", inside)
    assert all(rc == 0 and ms >= DELAY_MS for rc, ms in slowed.values()), slowed
    assert beside[0] == 0 and beside[1] < DELAY_MS
    assert after[0] == 0 and after[1] < DELAY_MS
    assert disk.counts() == DiskFaultCounts(sync_delay=len(SYNCS))


def test_write_enospc_under_the_prefix_only(node: Node) -> None:
    disk, child, inside, outside = node.disk, node.child, node.inside, node.outside
    with disk.faults(duration_s=60, write_enospc=True):
        assert [do(child, op, inside)[0] for op in WRITES] == [errno.ENOSPC] * len(WRITES)
        assert [do(child, op, outside)[0] for op in WRITES] == [0] * len(WRITES)
        assert do(child, "fsync", inside)[0] == 0  # a write fault leaves syncs alone
    assert [do(child, op, inside)[0] for op in WRITES] == [0] * len(WRITES)
    assert disk.counts() == DiskFaultCounts(write_enospc=len(WRITES))


def test_a_fault_ends_by_itself(disk: DiskFaults, child: LineChild, tmp_path: Path) -> None:
    inside = tmp_path / "node" / "journal"
    began = time.monotonic()
    disk.set(duration_s=0.5, sync_eio=True)
    assert do(child, "fsync", inside)[0] == errno.EIO
    wait_until(lambda: do(child, "fsync", inside)[0] == 0, "the fault's end", 5.0, 0.05)
    assert time.monotonic() - began >= 0.5


def test_fault_bounds(disk: DiskFaults) -> None:
    d = disk
    with pytest.raises(ValueError):
        d.set(duration_s=0, sync_eio=True)
    with pytest.raises(ValueError):
        d.set(duration_s=1, sync_delay_ms=-1)
    with pytest.raises(ValueError):
        d.set(duration_s=10_000, sync_eio=True)


def test_small_tmpfs_gives_a_real_enospc(tmp_path: Path) -> None:
    why = unshare_available()
    if why is not None:
        pytest.skip(why)
    data = tmp_path / "data"  # made by the command, as a node makes its data directory
    d = LineChild(small_tmpfs_argv(data, TMPFS_BYTES, [sys.executable, "-c", DRIVER]))
    try:
        assert do(d, "write", data / "a")[0] == 0
        # The mount is the child's alone: this process still sees the empty directory.
        assert list(data.iterdir()) == []
        written = fill(d.pid, data)
        assert 0 < written <= TMPFS_BYTES
        assert do(d, "write", data / "a")[0] == errno.ENOSPC
        assert do(d, "write", tmp_path / "outside")[0] == 0
        unfill(d.pid, data)
        assert do(d, "write", data / "a")[0] == 0
    finally:
        d.stop()
