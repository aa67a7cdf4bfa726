"""A TCP link that is slow, lossy or cut in one direction: a forwarder the test puts between a
client and a server (between two coordinators: in front of a Raft port).

This machine's kernel has no ``netem`` qdisc, so the faults live in a forwarder on 127.0.0.1.
Each accepted connection is paired with one to the target, and each direction of the pair
("up": client to server, "down": server to client) is a delay line: a reader stamps every chunk
it receives with the time it may leave, a writer sends chunks in order once due. The faults of
a direction (`LinkFaults`) apply to every connection, current and future, from the next chunk:

- ``delay_s``: one-way latency added to every chunk.
- ``loss``: the share of chunks "lost". Dropping bytes would corrupt a TCP stream, which no
  real loss does: TCP resends a lost segment after its retransmission timeout, and the bytes
  behind it wait (head-of-line blocking). So a lost chunk here waits ``retransmit_s`` (Linux's
  minimum RTO, 200 ms, by default) and holds back everything after it, as on a lossy link.
- ``blackhole``: a one-way partition. The direction's bytes are read and discarded, so the
  sender's writes succeed and the receiver hears nothing, while the other direction flows; new
  connections are accepted as usual. When the blackhole is lifted, every connection that lost
  bytes is closed (its stream has a hole) and the peers reconnect, as after a real partition.

With an `identify` function the proxy names the peer of each connection it accepts, and
faults can be set per peer (testkit/faults/raft_links.py names coordinators this way).

Which chunk is lost is drawn from one `random.Random` whose seed is printed and kept in
`seed`. Invariants: bytes that are forwarded arrive whole and in order; every wait is bounded
(sockets have timeouts, loops wake every ``POLL_S``, a direction buffers at most
``QUEUE_BYTES_MAX`` before it stops reading), and `close()` joins every thread with a bound.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from testkit.faults.threads import Threads

__all__ = ["HEALTHY", "Direction", "Identify", "LinkFaults", "TcpFaultProxy"]

Direction = Literal["up", "down"]
DIRECTIONS: tuple[Direction, ...] = ("up", "down")
POLL_S = 0.05
CHUNK_BYTES = 1 << 16
QUEUE_BYTES_MAX = 8 << 20
SEND_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
DELAY_S_MAX = 10.0
# Linux's TCP_RTO_MIN: the least a lost segment costs before it is sent again.
RETRANSMIT_S = 0.2


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkFaults:
    """What one direction of the link does to the bytes it carries."""

    delay_s: float = 0.0
    loss: float = 0.0
    retransmit_s: float = RETRANSMIT_S
    blackhole: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.delay_s <= DELAY_S_MAX:
            raise ValueError(f"delay_s must be in [0, {DELAY_S_MAX}], got {self.delay_s}")
        if not 0.0 <= self.loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {self.loss}")
        if not 0.0 < self.retransmit_s <= DELAY_S_MAX:
            raise ValueError(f"retransmit_s must be in (0, {DELAY_S_MAX}]")


HEALTHY = LinkFaults()


@dataclass(eq=False)
class _Line:
    """One direction of one connection: chunks waiting to leave, in order, with their times."""

    direction: Direction
    src: socket.socket
    dst: socket.socket
    queue: deque[tuple[float, bytes | None]] = field(default_factory=deque)
    queued_bytes: int = 0
    last_due: float = 0.0
    dropped_bytes: int = 0
    ended: bool = False
    ready: threading.Condition = field(default_factory=threading.Condition)


@dataclass(eq=False)
class _Pipe:
    lines: tuple[_Line, _Line]
    peer: str | None
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.closed.set()
        for line in self.lines:
            with contextlib.suppress(OSError):
                line.src.close()
            with line.ready:
                line.ready.notify_all()


# Who is at the other end of an accepted connection (a name, or None: not known, refused).
Identify = Callable[[socket.socket], str | None]


class TcpFaultProxy:
    """Listen on `listen` (127.0.0.1 on a free port by default) and forward to `target`.

    With `identify`, each accepted connection is first named by its peer (a connection it
    cannot name is closed and counted in `unidentified`), and faults can be set per peer:
    a fault set for a peer overrides the one set for every peer, in its direction."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        seed: int | None = None,
        identify: Identify | None = None,
    ) -> None:
        self.target = target
        self.identify = identify
        self.unidentified = 0
        self.seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        print(f"tcp fault proxy seed={self.seed}", file=sys.stderr)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._faults: dict[tuple[Direction, str | None], LinkFaults] = {}
        self._pipes: set[_Pipe] = set()
        self._threads = Threads("tcp-fault-proxy")
        self._stop = threading.Event()
        self._losses = dict.fromkeys(DIRECTIONS, 0)
        self._dropped_bytes = 0
        self._listener = socket.create_server(listen)
        self._listener.settimeout(POLL_S)
        self.port = int(self._listener.getsockname()[1])

    # -- control -----------------------------------------------------------------------------

    def start(self) -> None:
        self._threads.start(self._accept_loop)

    def __enter__(self) -> TcpFaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set(self, direction: Direction, faults: LinkFaults, *, peer: str | None = None) -> None:
        """`faults` on `direction` (of `peer`'s connections, or of all) from the next chunk
        on. Where no blackhole is left, connections that lost bytes to one are closed."""
        with self._lock:
            self._faults[(direction, peer)] = faults
        self._close_holed()

    def heal(self) -> None:
        """Every direction of every peer healthy again; holed connections closed."""
        with self._lock:
            self._faults.clear()
        self._close_holed()

    def faults(self, direction: Direction, peer: str | None = None) -> LinkFaults:
        """What `direction` of `peer`'s connections does now."""
        with self._lock:
            return self._faults_of(direction, peer)

    def _faults_of(self, direction: Direction, peer: str | None) -> LinkFaults:
        got = self._faults.get((direction, peer)) if peer is not None else None
        return got or self._faults.get((direction, None), HEALTHY)

    def _close_holed(self) -> None:
        with self._lock:
            holed = [
                p
                for p in self._pipes
                if any(
                    ln.dropped_bytes and not self._faults_of(ln.direction, p.peer).blackhole
                    for ln in p.lines
                )
            ]
        for p in holed:
            p.close()

    def losses(self) -> dict[Direction, int]:
        """Chunks held back as lost, per direction."""
        with self._lock:
            return dict(self._losses)

    def dropped_bytes(self) -> int:
        """Bytes a blackhole discarded."""
        with self._lock:
            return self._dropped_bytes

    def close(self) -> None:
        """Stop accepting, close every connection, and join every thread (bounded)."""
        self._stop.set()  # every loop sees it within POLL_S
        with self._lock:
            pipes = list(self._pipes)
        for p in pipes:
            p.close()  # and a pump blocked in a send is woken by its socket closing
        self._threads.join()
        self._listener.close()

    # -- forwarding ----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                self._threads.start(self._connect, conn)
        finally:
            self._listener.close()

    def _connect(self, conn: socket.socket) -> None:
        peer = None
        if self.identify is not None:
            peer = self.identify(conn)
            if peer is None:
                with self._lock:
                    self.unidentified += 1
                conn.close()
                return
        try:
            upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            conn.close()
            return
        for s in (conn, upstream):
            s.settimeout(SEND_TIMEOUT_S)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe((_Line("up", conn, upstream), _Line("down", upstream, conn)), peer)
        with self._lock:
            self._pipes.add(pipe)
        for line in pipe.lines:
            self._threads.start(self._read, pipe, line)
            self._threads.start(self._write, pipe, line)

    def _due(self, line: _Line, faults: LinkFaults) -> float:
        """When a chunk read now may leave: after the delay, after a retransmission if it is
        lost, and never before the chunk ahead of it."""
        due = time.monotonic() + faults.delay_s
        if faults.loss:
            with self._lock:
                lost = self._rng.random() < faults.loss
                if lost:
                    self._losses[line.direction] += 1
            if lost:
                due += faults.retransmit_s
        line.last_due = max(due, line.last_due)
        return line.last_due

    def _read(self, pipe: _Pipe, line: _Line) -> None:
        try:
            while not pipe.closed.is_set() and not self._stop.is_set():
                with line.ready:
                    if line.queued_bytes >= QUEUE_BYTES_MAX:
                        line.ready.wait(POLL_S)  # the writer is behind: stop reading a while
                        continue
                ready, _, _ = select.select([line.src], [], [], POLL_S)
                if not ready:
                    continue
                data = line.src.recv(CHUNK_BYTES)
                faults = self.faults(line.direction, pipe.peer)
                if data and faults.blackhole:
                    line.dropped_bytes += len(data)
                    with self._lock:
                        self._dropped_bytes += len(data)
                    continue
                item = (self._due(line, faults), data or None)
                with line.ready:
                    line.queue.append(item)
                    line.queued_bytes += len(data)
                    line.ready.notify_all()
                if not data:
                    return  # end of stream, queued for the writer to pass on
        except (OSError, ValueError):
            self._forget(pipe)

    def _write(self, pipe: _Pipe, line: _Line) -> None:
        done = True  # a send that failed ends the pipe
        with contextlib.suppress(OSError, ValueError):
            done = self._send_due(pipe, line)
        if done:
            self._forget(pipe)

    def _send_due(self, pipe: _Pipe, line: _Line) -> bool:
        """Send `line`'s chunks in order as they fall due. Returns whether the pipe is done
        (False: this direction ended and the other one still flows)."""
        while not pipe.closed.is_set() and not self._stop.is_set():
            with line.ready:
                if not line.queue:
                    line.ready.wait(POLL_S)
                    continue
                due, data = line.queue[0]
                wait_s = due - time.monotonic()
                if wait_s > 0:
                    line.ready.wait(min(wait_s, POLL_S))
                    continue
                line.queue.popleft()
                line.queued_bytes -= len(data or b"")
                line.ready.notify_all()
            if data is None:
                line.dst.shutdown(socket.SHUT_WR)  # pass the half-close on
                line.ended = True
                return all(ln.ended for ln in pipe.lines)
            line.dst.sendall(data)
        return True

    def _forget(self, pipe: _Pipe) -> None:
        pipe.close()
        with self._lock:
            self._pipes.discard(pipe)
