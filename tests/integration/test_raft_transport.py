"""The hardened Raft transport on three real pysyncobj nodes in this process, probed with raw
sockets on 127.0.0.1: what a stranger, a stranger who speaks the protocol, and a peer that
holds the secret but misbehaves can make a node do. Each refusal must close the connection
and be counted under its reason; the cluster must keep committing throughout."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import replication.transport
from replication.log import ReplicatedLog
from replication.wire import (
    CHALLENGE_BYTES,
    Handshake,
    Session,
    encode_frame,
    encode_message,
    handshake_key,
)
from tests.integration.test_replication import SECRET, Cluster, wait_for

CLOSE_WAIT_S = 10.0  # generous: the node closes within its own (shorter) deadlines
FAST = {"handshake_timeout_s": 0.5, "connection_timeout_s": 1.0}


@pytest.fixture
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Cluster]:
    # Settings per test: @pytest.mark.parametrize("cluster", [{...}], indirect=True)
    c = Cluster(tmp_path, **{**FAST, **getattr(request, "param", {})})
    for i in range(3):
        c.start(i)
    try:
        await c.leader()
        yield c
    finally:
        for i in range(3):
            c.stop(i)


def node0(c: Cluster) -> ReplicatedLog:
    node = c.nodes[0]
    assert node is not None
    return node


def connect(c: Cluster, *, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(CLOSE_WAIT_S)
    s.bind((source, 0))
    s.connect(("127.0.0.1", c.ports[0]))
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def closed_by_node(s: socket.socket) -> bool:
    """Block (bounded by the socket timeout) until the node closes; False on timeout."""
    try:
        while s.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def prove(s: socket.socket, secret: str = SECRET, **hs_kw: Any) -> Handshake:
    """Dial a handshake through to our proof (sent even if we refuse the node in turn)."""
    hs = Handshake(dialler=True, key=handshake_key(secret), nonce=os.urandom(32), **hs_kw)
    s.sendall(hs.opening())
    s.sendall(hs.feed(recv_exactly(s, CHALLENGE_BYTES)))
    return hs


def authenticate(s: socket.socket, secret: str = SECRET) -> Session:
    hs = prove(s, secret)
    assert hs.done
    return hs.session()


async def counted(c: Cluster, reason: str, at_least: int = 1) -> dict[str, int]:
    return await wait_for(  # type: ignore[no-any-return]
        lambda: (n := node0(c).refused_connections())[reason] >= at_least and n,
        f"{at_least} x {reason} counted",
    )


async def still_commits(c: Cluster) -> None:
    leader = await c.leader()
    await leader.propose(b"after")


async def test_a_giant_frame_is_refused_after_a_few_bytes(cluster: Cluster) -> None:
    # pysyncobj's own transport buffers this by copying until the leader stops answering.
    # Here the node closes at the first 4 bytes; what we manage to send is the kernel's.
    def attack() -> int:
        s = connect(cluster)
        sent = 0
        try:
            s.sendall(struct.pack("<i", 2**31 - 1))
            chunk = bytes(1 << 16)
            while sent < 256 << 20:
                sent += s.send(chunk)
        except OSError:
            return sent
        finally:
            s.close()
        raise AssertionError("the node took 256 MiB of a frame without closing")

    sent = await asyncio.to_thread(attack)
    counts = await counted(cluster, "bad_handshake")
    print(f"\nstranger got {sent} bytes into the kernel before the reset; {counts}")
    await still_commits(cluster)


async def test_a_silent_connection_is_closed_at_the_handshake_deadline(cluster: Cluster) -> None:
    def silent() -> float:
        s = connect(cluster)
        t0 = time.monotonic()
        try:
            assert closed_by_node(s), "the node kept a silent stranger past the deadline"
        finally:
            s.close()
        return time.monotonic() - t0

    took = await asyncio.to_thread(silent)
    await counted(cluster, "handshake_timeout")
    print(f"\nsilent stranger closed after {took:.2f} s (deadline 0.5 s)")


async def test_a_stranger_speaking_the_protocol_without_the_secret(cluster: Cluster) -> None:
    def impostor() -> None:
        s = connect(cluster)
        try:
            hs = Handshake(
                dialler=True, key=handshake_key("wrong-secret-0123456789"), nonce=os.urandom(32)
            )
            s.sendall(hs.opening())
            challenge = recv_exactly(s, CHALLENGE_BYTES)
            with pytest.raises(Exception, match="does not know the secret"):
                hs.feed(challenge)  # and we see that the node is not one of "ours" either
            s.sendall(os.urandom(32))  # a guessed proof
            assert closed_by_node(s)
        finally:
            s.close()

    await asyncio.to_thread(impostor)
    await counted(cluster, "bad_proof")
    await still_commits(cluster)


@pytest.mark.parametrize("cluster", [{"unauthenticated_connections_max": 4}], indirect=True)
async def test_connections_in_the_handshake_are_bounded(cluster: Cluster) -> None:
    socks = await asyncio.to_thread(lambda: [connect(cluster) for _ in range(12)])
    try:
        counts = await counted(cluster, "unauthenticated_limit", at_least=8)
        await still_commits(cluster)
        # The newest four were kept (the oldest are the ones evicted) until their deadline.
        alive = await asyncio.to_thread(lambda: [not closed_by_node(s) for s in socks[:8]])
        assert not any(alive)
        print(f"\n{counts}")
    finally:
        for s in socks:
            s.close()


async def test_hosts_that_are_not_nodes_are_refused_before_any_byte(cluster: Cluster) -> None:
    def from_elsewhere() -> None:
        try:
            s = connect(cluster, source="127.0.0.2")  # loopback too, but not a node's host
        except ConnectionResetError:
            return  # reset before connect() even returned: refused, as it should be
        try:
            assert closed_by_node(s)
        finally:
            s.close()

    await asyncio.to_thread(from_elsewhere)
    await counted(cluster, "address_not_allowed")


# A batch of commands travels in one frame: group commit's bound must fit the small cap too.
SMALL_FRAMES = {"frame_bytes_max": 1 << 16, "group_commit_bytes_max": 1 << 14}


@pytest.mark.parametrize("cluster", [SMALL_FRAMES], indirect=True)
async def test_an_authenticated_peer_cannot_send_a_frame_over_the_cap(cluster: Cluster) -> None:
    def oversized() -> None:
        s = connect(cluster)
        try:
            authenticate(s)
            s.sendall(struct.pack("<i", (1 << 16) + 1))
            assert closed_by_node(s)
        finally:
            s.close()

    await asyncio.to_thread(oversized)
    await counted(cluster, "frame_too_large")


async def test_an_authenticated_peer_that_falls_silent_is_dropped(cluster: Cluster) -> None:
    def silent_peer() -> float:
        s = connect(cluster)
        try:
            authenticate(s)
            t0 = time.monotonic()
            assert closed_by_node(s)  # the node's keep-alives arrive and are drained here
            return time.monotonic() - t0
        finally:
            s.close()

    took = await asyncio.to_thread(silent_peer)
    await counted(cluster, "idle_timeout")
    assert took >= 0.9, f"dropped after {took:.2f} s, before its 1 s idle timeout"


class _Peer:
    """Sealed frames on an authenticated connection, as a node sends and reads them."""

    def __init__(self, s: socket.socket, session: Session) -> None:
        self.s = s
        self.session = session

    def send(self, message: Any) -> None:
        self.s.sendall(encode_frame(self.session.seal(encode_message(message))))


async def test_a_frame_sealed_for_another_connection_is_refused(cluster: Cluster) -> None:
    # Both connections hold the secret; a frame from one spliced into the other (or replayed
    # there) does not open under the other's keys, and pickle never sees it.
    def splicer() -> None:
        a, b = connect(cluster), connect(cluster)
        try:
            peer_a = _Peer(a, authenticate(a))
            authenticate(b)
            b.sendall(encode_frame(peer_a.session.seal(encode_message("127.0.0.1:1"))))
            assert closed_by_node(b)
        finally:
            a.close()
            b.close()

    await asyncio.to_thread(splicer)
    await counted(cluster, "bad_frame")
    await still_commits(cluster)


@pytest.mark.parametrize("claim", ["readonly", ["status"], "127.0.0.1:1"])
async def test_an_authenticated_peer_must_claim_a_configured_node(
    cluster: Cluster, claim: Any
) -> None:
    def claimant() -> None:
        s = connect(cluster)
        try:
            peer = _Peer(s, authenticate(s))
            peer.send(claim)  # a read-only node, a utility command, a node that is not ours
            assert closed_by_node(s)
        finally:
            s.close()

    await asyncio.to_thread(claimant)
    await counted(cluster, "unknown_peer")


async def test_quiet_links_stay_up_on_keepalives(cluster: Cluster) -> None:
    # The two followers exchange no Raft message while the leader is stable: without the
    # transport's keep-alives their link would hit the 1 s idle timeout every second.
    await asyncio.sleep(3.0)  # three idle timeouts of doing nothing; nothing to poll for
    for node in cluster.nodes:
        assert node is not None
        assert node.refused_connections()["idle_timeout"] == 0, node.refused_connections()
    await still_commits(cluster)


async def test_a_node_host_that_did_not_resolve_at_first_is_let_in_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in compose when a peer's container is not up yet: its name does not resolve, so its
    # connections are refused; once it resolves, the next refused connection looks again.
    resolvable = False
    real = replication.transport.host_ips

    def flaky(host: str) -> set[str]:
        return real(host) if resolvable else set()

    monkeypatch.setattr(replication.transport, "host_ips", flaky)
    monkeypatch.setattr(replication.transport, "ALLOWED_HOSTS_RETRY_S", 0.5)
    c = Cluster(tmp_path, **FAST)
    for i in range(3):
        c.start(i)
    try:
        # Only the node with the greater address dials, so look at every node.
        await wait_for(
            lambda: any(
                n is not None and n.refused_connections()["address_not_allowed"] for n in c.nodes
            ),
            "a peer refused while its host does not resolve",
        )
        assert not any(n is not None and n.is_ready_leader for n in c.nodes)
        resolvable = True
        await still_commits(c)
    finally:
        for i in range(3):
            c.stop(i)


async def test_a_v2_only_node_and_v3_nodes_form_one_cluster_at_v2(tmp_path: Path) -> None:
    # A rolling upgrade halfway: node 0 still speaks transport version 2 only.
    c = Cluster(tmp_path, **FAST)
    c.start(0, transport_version_max=2)
    c.start(1)
    c.start(2)
    try:
        await still_commits(c)
        old, new, newer = c.nodes
        assert old is not None and new is not None and newer is not None
        addrs = [f"127.0.0.1:{p}" for p in c.ports]
        await wait_for(
            lambda: (
                set(old.link_versions().values()) == {2}
                and new.link_versions().get(addrs[0]) == 2
                and new.link_versions().get(addrs[2]) == 3
                and newer.link_versions().get(addrs[1]) == 3
            ),
            "v2 links to the old node, v3 between the new ones",
        )
        for node in c.nodes:
            assert node is not None
            assert node.refused_connections()["bad_version"] == 0
    finally:
        for i in range(3):
            c.stop(i)


@pytest.mark.parametrize("cluster", [{"transport_version_min": 3}], indirect=True)
async def test_once_every_node_speaks_v3_a_v2_peer_is_refused(cluster: Cluster) -> None:
    def old_node() -> None:
        s = connect(cluster)
        try:
            hs = prove(s, versions=(2, 2))  # a plain v2 nonce: no offer to check
            assert hs.refused is not None and hs.refused.reason == "bad_version"
            assert closed_by_node(s)
        finally:
            s.close()

    await asyncio.to_thread(old_node)
    await counted(cluster, "bad_version")
    await still_commits(cluster)


@pytest.mark.parametrize("cluster", [{"cluster_id": "restored-cluster"}], indirect=True)
async def test_a_node_of_another_cluster_is_refused_though_it_holds_the_secret(
    cluster: Cluster,
) -> None:
    # A node of the cluster a backup was restored from: same secret, another cluster id.
    def old_cluster_node() -> None:
        s = connect(cluster)
        try:
            hs = prove(s, cluster_id="original")
            assert hs.refused is not None and hs.refused.reason == "wrong_cluster"
            assert closed_by_node(s)
        finally:
            s.close()

    await asyncio.to_thread(old_cluster_node)
    await counted(cluster, "wrong_cluster")
    await still_commits(cluster)
