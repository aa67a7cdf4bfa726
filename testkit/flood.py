"""A bounded HTTP/1.1 load generator for overload tests: processes, tracked and ended by the
test, each holding a few keep-alive connections to one node and sending prepared requests
round-robin, either closed-loop (one request in flight per connection: what the node can
answer) or open-loop at a fixed rate (requests pipelined on a schedule that does not wait
for answers: an offered load). Raw sockets and no HTTP library, so one process offers tens
of thousands of requests a second on a core the node under test shares.

Invariant: every request a process puts on a connection is counted once as offered, and
every whole answer once by its status; a request due while every connection is at its
window of unanswered requests is counted `held` (the node is not reading), never sent.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import re
import selectors
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["LoadProcs", "Tally", "load"]

PROC_JOIN_S = 30.0

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.I)


@dataclass
class Tally:
    """What one load process did."""

    offered: int = 0  # put on a connection
    held: int = 0  # due while every connection was at its window
    ok: int = 0
    shed: int = 0  # 503 answers
    shed_with_retry_after: int = 0
    other: int = 0  # any other status
    reconnects: int = 0
    elapsed_s: float = 0.0  # summed over processes: see `rate`
    processes: int = 0
    # The longest the process went without a turn of its loop: past a fraction of a
    # second it was starved, and its schedule came in bursts.
    max_gap_s: float = 0.0

    def add(self, other: Tally) -> None:
        for k, v in vars(other).items():
            setattr(self, k, max(self.max_gap_s, v) if k == "max_gap_s" else getattr(self, k) + v)

    def rate(self, count: int) -> float:
        """`count` per second over the processes' mean run (each times its own)."""
        return count * self.processes / self.elapsed_s if self.elapsed_s else 0.0


class _Conn:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.unanswered = 0


def _answers(c: _Conn, t: Tally) -> None:
    """Count every whole response in the connection's read buffer."""
    while True:
        end = c.rbuf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(c.rbuf[:end])
        m = _CONTENT_LENGTH.search(head)
        total = end + 4 + (int(m.group(1)) if m else 0)
        if len(c.rbuf) < total:
            return
        del c.rbuf[:total]
        c.unanswered -= 1
        status = int(head[9:12])
        if status == 200:
            t.ok += 1
        elif status == 503:
            t.shed += 1
            t.shed_with_retry_after += b"\r\nretry-after:" in head.lower()
        else:
            t.other += 1


def load(
    host: str,
    port: int,
    requests: list[bytes],
    rate: float | None,
    conns: int,
    window: int,
    duration_s: float,
    out: Connection,
) -> None:
    """One load process: `conns` connections sending `requests` round-robin for
    `duration_s`, closed-loop (one in flight per connection) when `rate` is None, else
    open-loop at `rate` per second, up to `window` unanswered on a connection; its Tally
    sent on `out`."""
    t = Tally()
    sel = selectors.DefaultSelector()
    pool = [_Conn(host, port) for _ in range(conns)]
    for c in pool:
        sel.register(c.sock, selectors.EVENT_READ, c)
    began = time.monotonic()
    deadline = began + duration_s
    nxt = 0
    rr = 0
    last = began
    while (now := time.monotonic()) < deadline:
        t.max_gap_s, last = max(t.max_gap_s, now - last), now
        if rate is None:
            due = sum(1 for c in pool if c.unanswered == 0)
        else:
            due = int(rate * (now - began)) - t.offered - t.held
        for _ in range(max(0, due)):
            for _ in range(conns):
                c = pool[rr]
                rr = (rr + 1) % conns
                if c.unanswered < (1 if rate is None else window):
                    c.wbuf += requests[nxt]
                    nxt = (nxt + 1) % len(requests)
                    c.unanswered += 1
                    t.offered += 1
                    break
            else:
                t.held += 1
        for c in pool:
            if c.wbuf:
                with contextlib.suppress(BlockingIOError):
                    del c.wbuf[: c.sock.send(c.wbuf)]
        for key, _ in sel.select(0.001):
            c = key.data
            try:
                data = c.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                c.rbuf += data
                _answers(c, t)
                continue
            # Closed by the leader: what was unanswered on it is lost; a fresh connection.
            sel.unregister(c.sock)
            c.sock.close()
            fresh = _Conn(host, port)
            pool[pool.index(c)] = fresh
            sel.register(fresh.sock, selectors.EVENT_READ, fresh)
            t.reconnects += 1
    t.elapsed_s, t.processes = time.monotonic() - began, 1
    for c in pool:
        c.sock.close()
    out.send(vars(t))
    out.close()


class LoadProcs:
    """Load processes, tracked and ended by the test; `tally` once they are joined."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: list[tuple[BaseProcess, Connection]] = []

    def start(self, n: int, *args: Any) -> None:
        for _ in range(n):
            recv, send = self._ctx.Pipe(duplex=False)
            p = self._ctx.Process(target=load, args=(*args, send), daemon=True)
            p.start()
            send.close()
            self._procs.append((p, recv))

    def tally(self) -> Tally:
        total = Tally()
        try:
            for p, recv in self._procs:
                if not recv.poll(PROC_JOIN_S):
                    raise AssertionError(f"load process {p.pid} sent no tally")
                total.add(Tally(**recv.recv()))
        finally:
            self.stop()
        return total

    def stop(self) -> None:
        for p, _ in self._procs:
            p.join(timeout=PROC_JOIN_S)
            if p.is_alive():
                p.kill()
                p.join(timeout=PROC_JOIN_S)
        self._procs.clear()
