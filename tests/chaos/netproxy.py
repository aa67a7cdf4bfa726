"""Raft links the harness can cut: one TCP forwarder in front of every coordinator's Raft port.

Each node's `raft` address (what its peers dial, and its Raft identity) is a forwarder owned
by this module; the node itself listens on `raft_bind`. pysyncobj opens one connection per
pair of nodes, always from the node with the greater address, so a forwarder sees
connections from several peers. It tells them apart the way an operator would with
``ss -tp``: the accepted connection's source port belongs to a socket of exactly one of
the coordinator processes, looked up by PID.

A cut link is a black hole, not a reset: bytes of a cut pair are read and discarded in both
directions, new connections between the pair are accepted and starved, so the nodes see
silence and must find out through their own timeouts, as on a real network partition. On
heal every starved connection is closed and the nodes reconnect.

All forwarding runs on threads of the test process; each loop wakes at least every
POLL_S to check for shutdown, and `close()` joins them with a bound.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from coordinator.config import NodeSpec

log = logging.getLogger(__name__)

POLL_S = 0.1
CHUNK_BYTES = 1 << 16
SEND_TIMEOUT_S = 10.0
IDENTIFY_TIMEOUT_S = 1.0
JOIN_TIMEOUT_S = 2.0


def _addr(hostport: str) -> tuple[str, int]:
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


@dataclass(eq=False)
class _Pipe:
    pair: frozenset[str]
    a: socket.socket
    b: socket.socket | None
    dropping: bool = False
    closed: threading.Event = field(default_factory=threading.Event)
    dropped_bytes: int = 0

    def close(self) -> None:
        self.closed.set()
        for s in (self.a, self.b):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()


class RaftLinks:
    """Forwarders for all nodes of one cluster, with `cut`, `isolate` and `heal`."""

    def __init__(self, specs: tuple[NodeSpec, ...], pid_of: Callable[[str], int | None]) -> None:
        for s in specs:
            if s.raft_bind is None:
                raise ValueError(f"{s.id} has no raft_bind: nothing to put a forwarder in front of")
        self.specs = specs
        self.pid_of = pid_of
        self._lock = threading.Lock()
        self._cut: set[frozenset[str]] = set()
        self._pipes: set[_Pipe] = set()
        self._listeners: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._dropped_done = 0  # bytes discarded by pipes already gone
        self.unidentified = 0

    # -- control -------------------------------------------------------------------------------

    def start(self) -> None:
        for s in self.specs:
            lsock = socket.create_server(_addr(s.raft), reuse_port=False)
            lsock.settimeout(POLL_S)
            self._listeners.append(lsock)
            self._spawn(self._accept_loop, lsock, s)

    def cut(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        with self._lock:
            self._cut.add(pair)
            for p in self._pipes:
                if p.pair == pair:
                    p.dropping = True

    def isolate(self, node: str) -> None:
        for s in self.specs:
            if s.id != node:
                self.cut(node, s.id)

    def heal(self) -> None:
        with self._lock:
            self._cut.clear()
            starved = [p for p in self._pipes if p.dropping]
        for p in starved:
            p.close()

    def dropped_bytes(self) -> int:
        with self._lock:
            return self._dropped_done + sum(p.dropped_bytes for p in self._pipes)

    def close(self) -> None:
        self._stop.set()
        for lsock in self._listeners:
            with contextlib.suppress(OSError):
                lsock.close()
        with self._lock:
            pipes = list(self._pipes)
        for p in pipes:
            p.close()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(JOIN_TIMEOUT_S)

    # -- forwarding ----------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:  # finished pumps drop out, so the list stays as long as the live set
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _accept_loop(self, lsock: socket.socket, spec: NodeSpec) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._connect, conn, peer[1], spec)

    def _identify(self, port: int, listen_port: int) -> str | None:
        """Which coordinator owns the socket 127.0.0.1:port connected to our listener."""
        deadline = time.monotonic() + IDENTIFY_TIMEOUT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            for s in self.specs:
                pid = self.pid_of(s.id)
                if pid is None:
                    continue
                try:
                    conns = psutil.Process(pid).net_connections(kind="tcp")
                except psutil.Error:
                    continue  # the process is gone or going
                for c in conns:
                    if c.laddr and c.laddr.port == port and c.raddr and c.raddr.port == listen_port:
                        return s.id
            time.sleep(0.02)
        return None

    def _connect(self, conn: socket.socket, peer_port: int, spec: NodeSpec) -> None:
        try:
            dialer = self._identify(peer_port, _addr(spec.raft)[1])
        except Exception:
            log.exception("cannot tell who dialed %s from port %d", spec.id, peer_port)
            dialer = None
        if dialer is None:
            self.unidentified += 1
            conn.close()
            return
        conn.settimeout(SEND_TIMEOUT_S)
        pipe = _Pipe(pair=frozenset((dialer, spec.id)), a=conn, b=None)
        with self._lock:
            pipe.dropping = pipe.pair in self._cut
            self._pipes.add(pipe)
        if not pipe.dropping:
            try:
                assert spec.raft_bind is not None
                pipe.b = socket.create_connection(_addr(spec.raft_bind), timeout=SEND_TIMEOUT_S)
            except OSError:
                self._forget(pipe)
                return
        for src, dst in ((pipe.a, pipe.b), (pipe.b, pipe.a)):
            if src is not None:
                self._spawn(self._pump, pipe, src, dst)

    def _pump(self, pipe: _Pipe, src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while not pipe.closed.is_set() and not self._stop.is_set():
                ready, _, _ = select.select([src], [], [], POLL_S)
                if not ready:
                    continue
                data = src.recv(CHUNK_BYTES)
                if not data:
                    break
                if pipe.dropping or dst is None:
                    pipe.dropped_bytes += len(data)
                    continue
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self._forget(pipe)

    def _forget(self, pipe: _Pipe) -> None:
        pipe.close()
        with self._lock:
            if pipe in self._pipes:
                self._pipes.discard(pipe)
                self._dropped_done += pipe.dropped_bytes
