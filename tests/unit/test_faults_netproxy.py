"""The TCP fault proxy between two real sockets on 127.0.0.1: bytes whole and in order, latency
per direction, loss as retransmission stalls, and a one-way partition that heals."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from testkit.faults.netproxy import HEALTHY, LinkFaults, TcpFaultProxy

SEED = 39
DELAY_S = 0.15
# Forwarding through two threads on a loaded machine, without a fault.
FAST_S = 0.1
IO_TIMEOUT_S = 5.0
SILENCE_S = 0.5


class Link:
    """A client connected through the proxy and the server's end of that connection."""

    def __init__(
        self, proxy: TcpFaultProxy, server: socket.socket, client: socket.socket | None = None
    ) -> None:
        self.client = client or socket.socket()
        self.client.settimeout(IO_TIMEOUT_S)
        self.client.connect(("127.0.0.1", proxy.port))
        self.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server, _ = server.accept()
        self.server.settimeout(IO_TIMEOUT_S)
        self.server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self.client.close()
        self.server.close()


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def one_way_s(src: socket.socket, dst: socket.socket, data: bytes = b"m") -> float:
    began = time.monotonic()
    src.sendall(data)
    assert recv_exactly(dst, len(data)) == data
    return time.monotonic() - began


@pytest.fixture
def server() -> Iterator[socket.socket]:
    s = socket.create_server(("127.0.0.1", 0))
    s.settimeout(IO_TIMEOUT_S)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def proxy(server: socket.socket) -> Iterator[TcpFaultProxy]:
    with TcpFaultProxy(("127.0.0.1", server.getsockname()[1]), seed=SEED) as p:
        yield p


@pytest.fixture
def link(proxy: TcpFaultProxy, server: socket.socket) -> Iterator[Link]:
    link = Link(proxy, server)
    try:
        yield link
    finally:
        link.close()


def test_forwards_whole_and_in_order_both_ways(link: Link) -> None:
    up, down = os.urandom(1 << 20), os.urandom(1 << 20)
    link.client.sendall(up)
    assert recv_exactly(link.server, len(up)) == up
    link.server.sendall(down)
    assert recv_exactly(link.client, len(down)) == down


def test_latency_per_direction(proxy: TcpFaultProxy, link: Link) -> None:
    proxy.set("up", LinkFaults(delay_s=DELAY_S))
    assert one_way_s(link.client, link.server) >= DELAY_S
    assert one_way_s(link.server, link.client) < FAST_S
    proxy.set("down", LinkFaults(delay_s=DELAY_S))
    assert one_way_s(link.server, link.client) >= DELAY_S
    proxy.heal()
    assert one_way_s(link.client, link.server) < FAST_S


def test_loss_stalls_the_stream_like_a_retransmission(proxy: TcpFaultProxy, link: Link) -> None:
    proxy.set("up", LinkFaults(loss=0.3, retransmit_s=0.2))
    times = [one_way_s(link.client, link.server, bytes([i])) for i in range(30)]
    stalled = [t for t in times if t >= 0.2]
    assert 0 < len(stalled) < len(times), times
    assert len(stalled) == proxy.losses()["up"]
    assert all(t < FAST_S for t in times if t < 0.2), times
    assert proxy.losses()["down"] == 0


def test_one_way_partition_then_heal(
    proxy: TcpFaultProxy, link: Link, server: socket.socket
) -> None:
    proxy.set("up", LinkFaults(blackhole=True))
    link.client.sendall(b"unheard")
    link.server.settimeout(SILENCE_S)
    with pytest.raises(TimeoutError):
        link.server.recv(16)
    assert one_way_s(link.server, link.client, b"heard") < FAST_S  # the other way flows
    assert proxy.dropped_bytes() == len(b"unheard")

    proxy.heal()
    # The stream that lost bytes is closed, not resumed with a hole in it.
    link.client.settimeout(IO_TIMEOUT_S)
    with pytest.raises((EOFError, ConnectionResetError)):
        recv_exactly(link.client, 1)
    fresh = Link(proxy, server)
    try:
        assert one_way_s(fresh.client, fresh.server) < FAST_S
        assert one_way_s(fresh.server, fresh.client) < FAST_S
    finally:
        fresh.close()


def test_link_faults_are_bounded() -> None:
    with pytest.raises(ValueError):
        LinkFaults(delay_s=-1)
    with pytest.raises(ValueError):
        LinkFaults(loss=1.0)
    with pytest.raises(ValueError):
        LinkFaults(delay_s=60)


def test_a_half_close_passes_on_and_the_other_way_still_flows(link: Link) -> None:
    link.client.shutdown(socket.SHUT_WR)
    assert link.server.recv(1) == b""
    assert one_way_s(link.server, link.client, b"after") < FAST_S


def test_faults_per_peer(server: socket.socket) -> None:
    """Connections named by their peer (here: by the client's local port) take that peer's
    faults; an unnamed one is refused."""
    names: dict[int, str] = {}

    def identify(conn: socket.socket) -> str | None:
        return names.get(conn.getpeername()[1])

    def dial(name: str | None) -> Link:
        # The name is known before the proxy asks: the client binds its port first.
        client = socket.socket()
        client.bind(("127.0.0.1", 0))
        if name is not None:
            names[client.getsockname()[1]] = name
        return Link(proxy, server, client)

    with TcpFaultProxy(("127.0.0.1", server.getsockname()[1]), identify=identify) as proxy:
        proxy.set("up", LinkFaults(delay_s=DELAY_S))
        proxy.set("up", LinkFaults(blackhole=True), peer="a")
        a, b = dial("a"), dial("b")
        try:
            a.client.sendall(b"x")
            assert one_way_s(b.client, b.server) >= DELAY_S  # b: the all-peers fault
            assert one_way_s(a.server, a.client) < FAST_S  # a: only its way up is cut
            assert proxy.dropped_bytes() == 1
            proxy.set("up", HEALTHY, peer="a")  # a now takes the all-peers fault
            a.client.settimeout(IO_TIMEOUT_S)
            with pytest.raises((EOFError, ConnectionResetError)):
                recv_exactly(a.client, 1)  # its holed stream was closed
        finally:
            a.close()
            b.close()
        stranger = socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S)
        try:
            assert stranger.recv(1) == b""
        finally:
            stranger.close()
        assert proxy.unidentified == 1
