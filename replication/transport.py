"""The Raft port: a pysyncobj transport that a stranger on the network cannot stall.

pysyncobj 0.3.17's own transport reads a 4-byte frame length with no cap and grows its read
buffer by copying before it decrypts anything, and its idle connections never time out: one
connection streaming a frame that claims 2 GiB deposes the leader. `HardenedTransport` keeps
pysyncobj's node bookkeeping (reconnects, which node dials which) and owns every Raft TCP
connection of one node instead. Invariants, beside those of `replication.connection` (each
link) and `replication.wire` (the bytes):

- A connection is accepted only from a host of the current nodes (the voters the log names,
  and the learners the leader feeds), and the node identity a peer then claims must be one
  of them, from that node's host. A node added online is let in as soon as the entry that
  adds it reaches this node; a removed node is refused from then on, counted apart
  ("removed_node").
- At most `unauthenticated_max` accepted connections are in the handshake at once; a new one
  evicts the oldest, so a slow stranger cannot keep a peer out for longer than it takes the
  peer to answer.
- Every refusal is counted by reason (`replication.refusals`).

It runs where pysyncobj ticks (`replication.ticker`); `Refusals.counts()` may be read from
any thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable
from typing import Any

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.transport import TCPTransport

from replication.connection import Connection, abort_on_close
from replication.hub import Hub, TransportLimits
from replication.pysyncobj_pin import check_pysyncobj_version
from replication.refusals import Refusals
from replication.wire import TRANSPORT_VERSION, TRANSPORT_VERSION_MIN, handshake_key
from shared.clock import Clock, monotonic_s
from shared.system_clock import SYSTEM_CLOCK

check_pysyncobj_version()  # HardenedTransport overrides TCPTransport's internals

__all__ = ["ALLOWED_HOSTS_RETRY_S", "HardenedTransport", "host_ips"]

log = logging.getLogger(__name__)

_READ = POLL_EVENT_TYPE.READ
_ERROR = POLL_EVENT_TYPE.ERROR

ACCEPTS_PER_EVENT_MAX = 32  # per poll event: a flood of new connections cannot hold up a tick
LISTEN_BACKLOG = 128
# The nodes' hosts are resolved again every ALLOWED_HOSTS_REFRESH_S, and sooner (at most every
# ALLOWED_HOSTS_RETRY_S) when a connection comes from an address not on the list: a peer
# that started after us, or came back with a new address, is let in within seconds, and a
# stranger cannot make a Raft tick resolve names more often than that.
ALLOWED_HOSTS_REFRESH_S = 30.0
ALLOWED_HOSTS_RETRY_S = 5.0


def _normalize_ip(ip: str) -> str:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def host_ips(host: str) -> set[str]:
    """Every address `host` names (an IP literal names itself)."""
    with contextlib.suppress(ValueError):
        return {_normalize_ip(host)}
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        log.warning("raft transport: cannot resolve node host %s: %s", host, exc)
        return set()
    return {_normalize_ip(str(info[4][0])) for info in infos}


class _Listener:
    """The Raft server socket. Checks the peer's host before reading a byte, bounds the
    handshakes in flight, and hands a connection to pysyncobj only once it is proven."""

    def __init__(
        self,
        hub: Hub,
        host: str,
        port: int,
        allowed: Callable[[bool], set[str]],
        removed_ips: Callable[[], set[str]],
        on_authenticated: Callable[[Connection], None],
    ) -> None:
        self._hub = hub
        self._host = host
        self._port = port
        self._allowed = allowed
        self._removed_ips = removed_ips
        self._on_authenticated = on_authenticated
        self._sock: socket.socket | None = None
        self._fileno: int | None = None

    def bind(self) -> None:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._hub.conf.sendBufferSize)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._hub.conf.recvBufferSize)
            sock.setblocking(False)
            sock.bind((self._host, self._port))
            sock.listen(LISTEN_BACKLOG)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._fileno = sock.fileno()
        self._hub.poller.subscribe(self._fileno, self._on_event, _READ | _ERROR)

    def unbind(self) -> None:
        if self._fileno is not None:
            self._hub.poller.unsubscribe(self._fileno)
            self._fileno = None
        if self._sock is not None:
            self._hub.release(self._sock)
            self._sock = None

    def _on_event(self, descr: int, event: int) -> None:
        sock = self._sock
        if sock is None or descr != self._fileno:
            self._hub.poller.unsubscribe(descr)
            return
        for _ in range(ACCEPTS_PER_EVENT_MAX):
            try:
                conn_sock, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors and the like: keep listening (pysyncobj's server
                # unbound itself for good here), the next tick tries again.
                log.warning("raft transport: accept failed: %s", exc)
                return
            self._admit(conn_sock, addr)

    def _admit(self, conn_sock: socket.socket, addr: Any) -> None:
        hub = self._hub
        peer = f"{addr[0]}:{addr[1]}"
        try:
            ip = _normalize_ip(str(addr[0]))
        except ValueError:
            ip = ""
        if ip not in self._allowed(False) and ip not in self._allowed(True):
            with contextlib.suppress(OSError):
                abort_on_close(conn_sock)
            conn_sock.close()
            removed = ip in self._removed_ips()
            hub.refusals.refuse("removed_node" if removed else "address_not_allowed", peer)
            return
        if len(hub.pending) >= hub.limits.unauthenticated_max:
            oldest = next(iter(hub.pending))
            hub.doom(oldest, "unauthenticated_limit")
        try:
            conn_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn_sock.setblocking(False)
        except OSError:
            conn_sock.close()
            return
        conn = Connection(hub, conn_sock, peer)
        conn.on_authenticated = self._on_authenticated
        hub.pending[conn] = None


class HardenedTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCPTransport (node bookkeeping, reconnects, rand-key exchange) with every
    connection and the server socket replaced by guarded ones (`Connection`, `_Listener`).
    Construct it through `HardenedTransport.factory(...)`, which is what SyncObj's
    `transportClass` takes."""

    def __init__(
        self,
        syncObj: Any,  # pysyncobj calls it with its own names
        selfNode: Any,
        otherNodes: Any,
        *,
        limits: TransportLimits,
        secret: str,
        refusals: Refusals,
        versions: tuple[int, int] = (TRANSPORT_VERSION_MIN, TRANSPORT_VERSION),
        cluster_id: str = "",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        limits.validate()
        if syncObj.encryptor:
            # Its rand-key exchange and Fernet frames would run inside our sealed ones.
            raise ValueError(
                "HardenedTransport seals every frame itself: leave SyncObjConf.password unset"
            )
        self._ripple_hub = Hub(
            poller=syncObj._poller,
            limits=limits,
            key=handshake_key(secret),
            refusals=refusals,
            conf=syncObj.conf,
            versions=versions,
            cluster_id=cluster_id,
            clock=clock,
        )
        self._ripple_host_ips: dict[str, set[str]] = {}
        self._ripple_allowed: set[str] = set()
        # Removed from the voter set (since this node started): their addresses and hosts,
        # so their attempts are counted as removed_node rather than as strangers'.
        self._ripple_removed: set[str] = set()
        self._ripple_removed_ips: set[str] = set()
        # A node whose link `dropNode` leaves open (the leader feeding this node a dump
        # that does not name it yet; `RaftNode.__updateClusterConfiguration`).
        self.keep_link: Any = None
        self._ripple_allowed_at = float("-inf")
        super().__init__(syncObj, selfNode, otherNodes)

    @classmethod
    def factory(
        cls,
        *,
        limits: TransportLimits,
        secret: str,
        refusals: Refusals,
        versions: tuple[int, int] = (TRANSPORT_VERSION_MIN, TRANSPORT_VERSION),
        cluster_id: str = "",
        clock: Clock = SYSTEM_CLOCK,
    ) -> Callable[[Any, Any, Any], HardenedTransport]:
        def make(sync_obj: Any, self_node: Any, other_nodes: Any) -> HardenedTransport:
            return cls(
                sync_obj,
                self_node,
                other_nodes,
                limits=limits,
                secret=secret,
                refusals=refusals,
                versions=versions,
                cluster_id=cluster_id,
                clock=clock,
            )

        return make

    def _allowed_ips(self, missed: bool) -> set[str]:
        """The addresses of the current nodes' hosts; `missed`: one just connected from
        elsewhere, so look again if the last lookup is ALLOWED_HOSTS_RETRY_S old."""
        now = monotonic_s(self._ripple_hub.clock)
        age = now - self._ripple_allowed_at
        if age > ALLOWED_HOSTS_REFRESH_S or (missed and age > ALLOWED_HOSTS_RETRY_S):
            known = self._ripple_host_ips
            for node in self._nodes:
                # A failed lookup keeps the host's last addresses rather than shutting a
                # configured peer out until the next refresh.
                known[node.host] = host_ips(node.host) or known.get(node.host, set())
            hosts = {node.host for node in self._nodes}
            self._ripple_allowed = set().union(*(ips for h, ips in known.items() if h in hosts))
            removed = {a.rsplit(":", 1)[0] for a in self._ripple_removed} - hosts
            self._ripple_removed_ips = set().union(
                *(ips for h, ips in known.items() if h in removed)
            )
            self._ripple_allowed_at = now
        return self._ripple_allowed

    def mark_removed(self, node: Any) -> None:
        """`node` left the voter set: refused from now on, and counted as removed_node (the
        entry that removed it has already dropped its link)."""
        self._ripple_removed.add(node.address)
        self._ripple_allowed_at = float("-inf")

    # -- overrides of TCPTransport (pysyncobj's names) -------------------------------------------

    def _createServer(self) -> None:
        conf = self._syncObj.conf
        bind = conf.bindAddress or self._selfNode.address
        host, port = bind.rsplit(":", 1)
        self._server = _Listener(
            self._ripple_hub,
            globalDnsResolver().resolve(host) or host,
            int(port),
            self._allowed_ips,
            lambda: self._ripple_removed_ips,
            self._onNewIncomingConnection,
        )

    def addNode(self, node: Any) -> None:
        self._ripple_removed.discard(node.address)
        self._ripple_allowed_at = float("-inf")  # a new node's host is allowed from now on
        if node.address in self._nodeAddrToNode:
            return  # a learner that became a voter: its link stays as it is
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        if self._shouldConnect(node):
            conn = Connection(self._ripple_hub)
            conn.setOnConnectedCallback(lambda: self._onOutgoingConnected(conn))
            conn.setOnMessageReceivedCallback(lambda m: self._onMessageReceived(node, m))
            conn.setOnDisconnectedCallback(lambda: self._onDisconnected(conn))
            self._connections[node] = conn

    def dropNode(self, node: Any) -> None:
        if self.keep_link is not None and node == self.keep_link:
            return
        super().dropNode(node)

    def _onIncomingMessageReceived(self, conn: Connection, message: Any) -> None:
        # The peer names the node it is. Only current nodes, from that node's host: no
        # read-only nodes and no utility commands (status, add, remove, transfer) here.
        node = self._nodeAddrToNode.get(message) if isinstance(message, str) else None
        peer_ip = _normalize_ip(conn.peer.rsplit(":", 1)[0])
        if node is None or peer_ip not in self._ripple_host_ips.get(node.host, set()):
            what = message if isinstance(message, str) else type(message).__name__
            self._unknownConnections.discard(conn)
            removed = isinstance(message, str) and message in self._ripple_removed
            conn.close("removed_node" if removed else "unknown_peer", f"claims {what!r}"[:200])
            return
        super()._onIncomingMessageReceived(conn, message)

    def link_versions(self) -> dict[str, int]:
        """The transport version of each open link, by the peer's node address."""
        return {
            node.address: conn.version
            for node, conn in list(self._connections.items())
            if isinstance(conn, Connection) and conn.version
        }

    def _onTick(self) -> None:
        self._ripple_hub.tick()
        super()._onTick()

    def destroy(self) -> None:
        super().destroy()
        for conn in list(self._ripple_hub.live):
            conn.close(None)
        self._ripple_hub.pending.clear()
        self._ripple_hub.doomed.clear()
