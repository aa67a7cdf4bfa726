"""The disk's floor under a durable acknowledgement: what any three-node cluster on this
machine pays for its syncs, with no Raft, HTTP or state machine around them.

    python -m bench.disk_floor follower --connect PORT --index I --path FILE [--sync]

`measure` is the leader, in the calling process; it starts the two followers (the command
above, each a `testkit.process.Proc`, ended by its PID). They connect to it over loopback
TCP. One client's writes, one at a time, each the shape of Ripple's commit
(docs/design.md §2):

1. the leader writes a RECORD_BYTES record into its journal file and sends it to both
   followers;
2. it syncs its own journal while they write and sync theirs;
3. the write is acknowledged once the leader's sync and a follower's answer are in, and the
   other follower's answer is read before the next write starts.

A journal here is pysyncobj's pattern: the file mapped, each record written after the last,
its end offset in the file's first bytes, and a sync is `msync` of the mapping.

The modes:
- `off`: nobody syncs (Ripple's `fsync = false`).
- `shared_disk`: all three sync, on the one disk the processes share on this machine (what
  Ripple's `fsync = true` meets here): the first answer counts, as in Raft.
- `disk_each`: only the first follower syncs, and its answer is the one waited for. This is
  the path of a cluster whose nodes each have a disk of their own: there the leader's sync
  and the other follower's never hold a follower's sync up, and the path is one sync of
  an idle disk (the leader's own, started first, ends earlier).

The gap between a syncing mode's p50 and `off`'s is the least any implementation pays for
durable acknowledgements with those disks.
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.stats import percentile
from testkit.process import Proc, python_argv

__all__ = ["MODES", "measure"]

MODES = ("off", "shared_disk", "disk_each")
RECORD_BYTES = 128  # about one registration's command in Ripple's journal
JOURNAL_BYTES = 16 << 20  # sparse; the records wrap round after it
HEADER_BYTES = 4096  # the end offset lives in the first page, the records after it
ANSWER = b"k"
SYNCED_LINE = "synced records: "  # a follower's last line, read back by `measure`
CONNECT_TIMEOUT_S = 30.0  # for both followers to start and connect
FOLLOWER_EXIT_S = 5.0  # for a follower to exit once its connection is closed
ANSWER_TIMEOUT_S = 5.0  # for one answer; a follower slower than this fails the run


class _Journal:
    """A mapped, sparse file written record after record, pysyncobj's way."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self._fd, JOURNAL_BYTES)
        self._map = mmap.mmap(self._fd, JOURNAL_BYTES)
        self._end = HEADER_BYTES

    def append(self, record: bytes) -> None:
        if self._end + len(record) > JOURNAL_BYTES:
            self._end = HEADER_BYTES
        self._map[self._end : self._end + len(record)] = record
        self._end += len(record)
        self._map[0:4] = self._end.to_bytes(4, "little")

    def sync(self) -> None:
        self._map.flush()

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise ConnectionError("peer closed")
        data += part
    return data


def _syncs_of(mode: str) -> tuple[bool, bool, bool]:
    """Whether the leader, the first follower and the second sync in `mode`."""
    return (mode == "shared_disk", mode != "off", mode == "shared_disk")


def _synced_records(proc: Proc) -> int:
    lines = [line for line in proc.output().splitlines() if line.startswith(SYNCED_LINE)]
    if not lines:
        raise RuntimeError(f"disk floor: a follower ended without its count: {proc.output()}")
    return int(lines[-1].removeprefix(SYNCED_LINE))


def follower(port: int, index: int, path: Path, sync: bool) -> None:
    """Write and (with `sync`) sync each record the leader sends, then answer it; until the
    leader closes the connection."""
    journal = _Journal(path)
    synced = 0
    sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)  # the leader decides when to write; it ends the run by closing
    try:
        sock.sendall(bytes([index]))
        while True:
            try:
                record = _read_exactly(sock, RECORD_BYTES)
            except ConnectionError:
                return
            journal.append(record)
            if sync:
                journal.sync()
                synced += 1
            sock.sendall(ANSWER)
    finally:
        sock.close()
        journal.close()
        print(f"{SYNCED_LINE}{synced}", flush=True)


def _accept_followers(server: socket.socket, procs: list[Proc]) -> list[socket.socket]:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    conns: dict[int, socket.socket] = {}
    while len(conns) < 2:
        left = deadline - time.monotonic()
        if left <= 0 or not all(p.alive() for p in procs):
            said = " | ".join(p.output()[-300:] for p in procs)
            raise RuntimeError(f"disk floor: followers did not connect: {said}")
        server.settimeout(left)
        conn, _ = server.accept()
        conn.settimeout(ANSWER_TIMEOUT_S)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns[_read_exactly(conn, 1)[0]] = conn
    return [conns[1], conns[2]]


def _answer(conn: socket.socket) -> None:
    if _read_exactly(conn, 1) != ANSWER:
        raise RuntimeError("disk floor: a follower answered garbage")


def _first_answer(conns: list[socket.socket]) -> socket.socket:
    ready, _, _ = select.select(conns, [], [], ANSWER_TIMEOUT_S)
    if not ready:
        raise TimeoutError(f"disk floor: no answer within {ANSWER_TIMEOUT_S} s")
    _answer(ready[0])
    return ready[0]


def measure(root: Path, mode: str, count: int) -> dict[str, Any]:
    """`count` writes in `mode` with journals under `root` (on the disk being measured): the
    rate, the p50 and p99 latency of an acknowledgement, and how many records each node
    synced."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    root.mkdir(parents=True, exist_ok=True)
    leader_syncs, *follower_syncs = _syncs_of(mode)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    procs: list[Proc] = []
    conns: list[socket.socket] = []
    journal = _Journal(root / f"{mode}-leader.journal")
    try:
        for index, sync in enumerate(follower_syncs, start=1):
            argv = python_argv(
                "-m",
                "bench.disk_floor",
                "follower",
                "--connect",
                str(port),
                "--index",
                str(index),
                "--path",
                str(root / f"{mode}-follower{index}.journal"),
                *(["--sync"] if sync else []),
            )
            procs.append(Proc(argv, root / f"{mode}-follower{index}.log"))
        conns = _accept_followers(server, procs)
        record = bytes(RECORD_BYTES)
        latencies: list[float] = []
        leader_synced = 0
        started = time.perf_counter()
        for _ in range(count):
            t0 = time.perf_counter()
            journal.append(record)
            for conn in conns:
                conn.sendall(record)
            if leader_syncs:
                journal.sync()
                leader_synced += 1
            # With a disk each, the syncing follower's answer: the other's, unsynced, would
            # come first.
            first = _first_answer(conns[:1] if mode == "disk_each" else conns)
            latencies.append(time.perf_counter() - t0)
            for conn in conns:
                if conn is not first:
                    _answer(conn)
        elapsed = time.perf_counter() - started
    finally:
        for conn in conns:
            conn.close()
        server.close()
        journal.close()
        for proc in procs:
            # Closed, a follower prints its count and exits; stop() is for one that does not.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(FOLLOWER_EXIT_S)
            proc.stop()
    synced = [leader_synced, *(_synced_records(proc) for proc in procs)]
    return {
        "ops_per_s": count / elapsed,
        "p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 99) * 1000, 3),
        "errors": 0,
        "synced_records": synced,  # by the leader, the first follower and the second
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.disk_floor")
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("follower", help="a follower of `measure` (started by it)")
    one.add_argument("--connect", type=int, required=True, help="the leader's port")
    one.add_argument("--index", type=int, choices=(1, 2), required=True)
    one.add_argument("--path", type=Path, required=True, help="its journal file")
    one.add_argument("--sync", action="store_true", help="sync each record before answering")
    args = parser.parse_args(argv)
    follower(args.connect, args.index, args.path, args.sync)


if __name__ == "__main__":
    main(sys.argv[1:])
