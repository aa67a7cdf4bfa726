"""Raft links between two "nodes" that are real processes (so the forwarders can name the
dialer by PID, as they do coordinators): a one-way cut silences one direction of a link
whichever node dialed, the other direction flows, and heal restores both."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from coordinator.config import NodeSpec
from shared.ports import free_ports
from testkit.faults.line_child import LineChild
from testkit.faults.netproxy import LinkFaults
from testkit.faults.raft_links import RaftLinks

SEED = 39
IO_TIMEOUT_S = 5.0
SILENCE_S = 0.5

# A node's dialing side: "dial PORT", "send TEXT", "recv" (the text, or "silence").
DIALER = f"""
import socket, sys
conn = None
for line in sys.stdin:
    op, _, arg = line.strip().partition(" ")
    if op == "dial":
        conn = socket.create_connection(("127.0.0.1", int(arg)), timeout={IO_TIMEOUT_S})
        print("ok", flush=True)
    elif op == "send":
        conn.sendall(arg.encode())
        print("ok", flush=True)
    elif op == "recv":
        conn.settimeout({SILENCE_S})
        try:
            print(conn.recv(64).decode() or "closed", flush=True)
        except TimeoutError:
            print("silence", flush=True)
        except ConnectionResetError:
            print("closed", flush=True)
"""


class Net:
    """Nodes a and b: a's dialer is a child process, b's Raft port a socket here."""

    def __init__(self) -> None:
        ports = free_ports(4)
        self.specs = tuple(
            NodeSpec(
                id=name,
                raft=f"127.0.0.1:{ports[2 * i]}",
                raft_bind=f"127.0.0.1:{ports[2 * i + 1]}",
                http="127.0.0.1:1",
            )
            for i, name in enumerate(("a", "b"))
        )
        self.b_listen = socket.create_server(("127.0.0.1", ports[3]))
        self.b_listen.settimeout(IO_TIMEOUT_S)
        self.a = LineChild([sys.executable, "-c", DIALER])
        self.links = RaftLinks(self.specs, {"a": self.a.pid}.get, seed=SEED)
        self.links.start()

    def connect_a_to_b(self) -> socket.socket:
        """a dials b (through b's forwarder); b's end of the connection."""
        assert self.a.ask(f"dial {self.specs[1].raft.rsplit(':', 1)[1]}") == "ok"
        conn, _ = self.b_listen.accept()
        conn.settimeout(SILENCE_S)
        return conn

    def b_hears(self, conn: socket.socket, text: str) -> bool:
        assert self.a.ask(f"send {text}") == "ok"
        try:
            return conn.recv(64) == text.encode()
        except TimeoutError:
            return False

    def a_hears(self, conn: socket.socket, text: str) -> bool:
        conn.sendall(text.encode())
        return self.a.ask("recv") == text

    def close(self) -> None:
        self.links.close()
        self.a.stop()
        self.b_listen.close()


@pytest.fixture
def net() -> Iterator[Net]:
    n = Net()
    try:
        yield n
    finally:
        n.close()


def test_one_way_cuts_hold_whoever_dialed(net: Net) -> None:
    conn = net.connect_a_to_b()
    assert net.b_hears(conn, "hello") and net.a_hears(conn, "hi")
    net.links.cut_one_way("a", "b")  # up, on the connection a dialed
    assert not net.b_hears(conn, "lost")
    assert net.a_hears(conn, "still")
    net.links.heal()
    assert net.a.ask("recv") == "closed"  # the stream with a hole is closed
    conn.close()

    conn = net.connect_a_to_b()
    net.links.cut_one_way("b", "a")  # down, on the connection a dialed
    assert not net.a_hears(conn, "lost")
    assert net.b_hears(conn, "still")
    assert net.links.dropped_bytes() == len("lost") * 2
    net.links.heal()
    conn.close()
    assert net.links.unidentified == 0


def test_link_settings_are_per_ordered_pair(net: Net) -> None:
    net.links.set_link("a", "b", LinkFaults(delay_s=0.2))
    assert net.links.faults("a", "b").delay_s == 0.2
    assert net.links.faults("b", "a") == LinkFaults()
    net.links.set_all(LinkFaults(delay_s=0.1))
    assert net.links.faults("b", "a").delay_s == 0.1
