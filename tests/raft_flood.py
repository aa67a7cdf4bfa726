"""A stranger on the Raft ports: what someone without the cluster secret can throw at them.

Two kinds of attacker, both on threads of the test process, both only towards 127.0.0.1:
- streamers: each connects, sends a frame header claiming 2 GiB and streams zeros after it
  for as long as the port takes them; when the node closes the connection it reconnects.
  Against pysyncobj's own transport this grows the node's read buffer by copying, on its
  Raft thread, until the node stops answering its peers.
- idlers: per port, a set of connections that send nothing and sit there (what half-open
  connections look like from the node's side); each one the node closes is opened again.

Every loop wakes at least every POLL_S to check for stop; `stop()` joins with a bound.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FloodStats", "RaftFlood"]

POLL_S = 0.1
CONNECT_TIMEOUT_S = 1.0
SEND_TIMEOUT_S = 0.5
JOIN_TIMEOUT_S = 5.0
CHUNK = bytes(1 << 16)
GIANT_HEADER = struct.pack("<i", 2**31 - 1)  # "the next frame is 2 GiB"
# A pause between a streamer's reconnects: the machine under test is shared (2 cores), and
# the fix does not depend on the rate (every stranger connection is closed either way).
RECONNECT_PAUSE_S = 0.005


@dataclass
class FloodStats:
    streamed_bytes: int = 0
    stream_connects: int = 0
    idle_connects: int = 0
    idle_closed_by_node: int = 0
    connect_failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)


class RaftFlood:
    def __init__(
        self,
        targets: list[tuple[str, int]],
        *,
        streamers_per_target: int = 3,
        idlers_per_target: int = 100,
    ) -> None:
        for host, _port in targets:
            if host != "127.0.0.1":
                raise ValueError("the flood only ever targets 127.0.0.1")
        self.targets = targets
        self.streamers_per_target = streamers_per_target
        self.idlers_per_target = idlers_per_target
        self.stats = FloodStats()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for target in self.targets:
            for i in range(self.streamers_per_target):
                self._spawn(f"stream-{target[1]}-{i}", self._stream, target)
            if self.idlers_per_target:
                self._spawn(f"idle-{target[1]}", self._idle, target)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(JOIN_TIMEOUT_S)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise AssertionError(f"flood threads did not stop: {alive}")

    def __enter__(self) -> RaftFlood:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(
        self, name: str, fn: Callable[[tuple[str, int]], None], target: tuple[str, int]
    ) -> None:
        t = threading.Thread(target=fn, args=(target,), name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _connect(self, target: tuple[str, int]) -> socket.socket | None:
        try:
            return socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            self.stats.add(connect_failures=1)
            self._stop.wait(POLL_S)  # refused outright: the node is down or its backlog full
            return None

    def _stream(self, target: tuple[str, int]) -> None:
        while not self._stop.is_set():
            s = self._connect(target)
            if s is None:
                continue
            self.stats.add(stream_connects=1)
            s.settimeout(SEND_TIMEOUT_S)
            sent = 0
            try:
                s.sendall(GIANT_HEADER)
                while not self._stop.is_set():
                    try:
                        sent += s.send(CHUNK)
                    except TimeoutError:
                        continue  # the node is not reading: keep the pressure, check stop
            except OSError:
                pass  # the node closed it: that is the defence working; go again
            finally:
                s.close()
                self.stats.add(streamed_bytes=sent)
            self._stop.wait(RECONNECT_PAUSE_S)

    def _idle(self, target: tuple[str, int]) -> None:
        socks: list[socket.socket] = []
        try:
            while not self._stop.is_set():
                while len(socks) < self.idlers_per_target and not self._stop.is_set():
                    s = self._connect(target)
                    if s is None:
                        break
                    s.setblocking(False)
                    socks.append(s)
                    self.stats.add(idle_connects=1)
                if not socks:
                    continue
                readable, _, _ = select.select(socks, [], [], POLL_S)
                for s in readable:
                    try:
                        data = s.recv(4096)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:  # closed by the node
                        socks.remove(s)
                        s.close()
                        self.stats.add(idle_closed_by_node=1)
        finally:
            for s in socks:
                with contextlib.suppress(OSError):
                    s.close()
