"""The TCP fault proxy between two real sockets on 127.0.0.1: bytes whole and in order, latency
per direction, loss as retransmission stalls, and a one-way partition that heals."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from testkit.faults.netproxy import LinkFaults, TcpFaultProxy

SEED = 39
DELAY_S = 0.15
# Forwarding through two threads on a loaded machine, without a fault.
FAST_S = 0.1
IO_TIMEOUT_S = 5.0
SILENCE_S = 0.5


class Link:
    """A client connected through the proxy and the server's end of that connection."""

    def __init__(self, proxy: TcpFaultProxy, server: socket.socket) -> None:
        self.client = socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S)
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
