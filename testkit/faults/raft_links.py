"""The network between coordinators, as the test wants it: a `TcpFaultProxy` in front of every
coordinator's Raft port, faults set per ordered pair of nodes.

Each node's `raft` address (what its peers dial, and its Raft identity) is a forwarder owned
by this module; the node itself listens on `raft_bind`. pysyncobj opens one connection per
pair of nodes, always from the node with the greater address, so a forwarder sees
connections from several peers. It tells them apart the way an operator would with
``ss -tp``: the accepted connection's source port belongs to a socket of exactly one of
the coordinator processes, looked up by PID.

A link from `src` to `dst` is the bytes `src` sends `dst`, whichever of the two dialed: on a
connection `src` dialed (through `dst`'s forwarder) they go "up", on one `dst` dialed
(through `src`'s forwarder) they come "down". `set_link` sets both, so the fault holds
whoever dials. On it: latency, loss (as retransmission stalls) and blackholes
(testkit/faults/netproxy.py): `cut_one_way(a, b)` leaves a deaf to nothing and b deaf to a;
`cut`, `isolate` and `isolate_outbound` are built from it. A cut is a black hole, not a
reset: the nodes see silence and must find out through their own timeouts, as on a real
partition; on heal every connection that lost bytes is closed and the nodes reconnect.

All forwarding runs on threads of the test process, every loop wakes at least every POLL_S
to check for shutdown, and `close()` joins them with a bound.
"""

from __future__ import annotations

import functools
import random
import socket
import sys
import time
from collections.abc import Callable

import psutil  # type: ignore[import-untyped]  # only in _identify, typed at its edge

from coordinator.config import NodeSpec
from testkit.faults.netproxy import LinkFaults, TcpFaultProxy

__all__ = ["RaftLinks"]

IDENTIFY_TIMEOUT_S = 1.0
IDENTIFY_POLL_S = 0.02
BLACKHOLE = LinkFaults(blackhole=True)


def _addr(hostport: str) -> tuple[str, int]:
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


class RaftLinks:
    """Forwarders for all nodes of one cluster, with faults per ordered pair of nodes."""

    def __init__(
        self,
        specs: tuple[NodeSpec, ...],
        pid_of: Callable[[str], int | None],
        *,
        seed: int | None = None,
    ) -> None:
        for s in specs:
            if s.raft_bind is None:
                raise ValueError(f"{s.id} has no raft_bind: nothing to put a forwarder in front of")
        self.specs = specs
        self.pid_of = pid_of
        self.seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        print(f"raft links seed={self.seed}", file=sys.stderr)
        rng = random.Random(self.seed)
        self._proxies: dict[str, TcpFaultProxy] = {}
        for s in specs:
            assert s.raft_bind is not None
            self._proxies[s.id] = TcpFaultProxy(
                _addr(s.raft_bind),
                listen=_addr(s.raft),
                seed=rng.randrange(2**32),
                identify=functools.partial(self._identify, spec=s),
            )
        self._closed = False

    # -- control -------------------------------------------------------------------------------

    def start(self) -> None:
        for p in self._proxies.values():
            p.start()

    def set_link(self, src: str, dst: str, faults: LinkFaults) -> None:
        """What the bytes `src` sends `dst` meet, from their next chunk on."""
        self._proxies[dst].set("up", faults, peer=src)  # on connections src dialed
        self._proxies[src].set("down", faults, peer=dst)  # on connections dst dialed

    def set_all(self, faults: LinkFaults) -> None:
        """`faults` on every link between every two nodes, both ways (latency, loss)."""
        for a in self._ids():
            for b in self._ids():
                if a != b:
                    self.set_link(a, b, faults)

    def cut_one_way(self, src: str, dst: str) -> None:
        """`dst` hears nothing from `src`; `src` still hears `dst`."""
        self.set_link(src, dst, BLACKHOLE)

    def cut(self, a: str, b: str) -> None:
        self.cut_one_way(a, b)
        self.cut_one_way(b, a)

    def isolate(self, node: str) -> None:
        for other in self._ids():
            if other != node:
                self.cut(node, other)

    def isolate_outbound(self, node: str) -> None:
        """Nobody hears `node`; it still hears everybody."""
        for other in self._ids():
            if other != node:
                self.cut_one_way(node, other)

    def heal(self) -> None:
        """Every link healthy; connections that lost bytes are closed, so nodes reconnect."""
        for p in self._proxies.values():
            p.heal()

    def faults(self, src: str, dst: str) -> LinkFaults:
        return self._proxies[dst].faults("up", src)

    def dropped_bytes(self) -> int:
        return sum(p.dropped_bytes() for p in self._proxies.values())

    @property
    def unidentified(self) -> int:
        return sum(p.unidentified for p in self._proxies.values())

    def close(self) -> None:
        self._closed = True
        for p in self._proxies.values():
            p.close()

    # -- naming the dialer ---------------------------------------------------------------------

    def _ids(self) -> list[str]:
        return [s.id for s in self.specs]

    def _identify(self, conn: socket.socket, spec: NodeSpec) -> str | None:
        """Which coordinator owns the socket at the other end of `conn`, accepted on `spec`'s
        forwarder."""
        try:
            port = int(conn.getpeername()[1])
        except OSError:
            return None
        listen_port = _addr(spec.raft)[1]
        deadline = time.monotonic() + IDENTIFY_TIMEOUT_S
        while time.monotonic() < deadline and not self._closed:
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
            time.sleep(IDENTIFY_POLL_S)
        return None
