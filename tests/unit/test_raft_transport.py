"""The Raft transport's sans-IO parts: the HMAC handshake, the sealed frames, the frame
reader, the message encoding with its bounded decompression and the refusal counter. The
socket side is in tests/integration/test_raft_transport.py."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import struct
import zlib
from types import SimpleNamespace

import pytest

from replication.hub import TransportLimits
from replication.refusals import REFUSAL_REASONS, Refusals
from replication.transport import HardenedTransport
from replication.wire import (
    CHALLENGE_BYTES,
    COMPRESS_MIN_BYTES,
    HELLO_BYTES,
    KEEPALIVE_FRAME,
    MAGIC,
    PROOF_BYTES,
    TRANSPORT_VERSION,
    FrameError,
    FrameReader,
    Handshake,
    HandshakeError,
    Session,
    decode_message,
    decompress_bounded,
    encode_frame,
    encode_message,
    handshake_key,
    parse_offer,
)
from shared.clock import FakeClock

KEY = handshake_key("unit-secret-0123456789")
OTHER_KEY = handshake_key("another-secret-0123456789")


def pair(dialler_key: bytes = KEY, listener_key: bytes = KEY) -> tuple[Handshake, Handshake]:
    return (
        Handshake(dialler=True, key=dialler_key, nonce=os.urandom(32)),
        Handshake(dialler=False, key=listener_key, nonce=os.urandom(32)),
    )


def test_both_sides_prove_the_secret_in_three_fixed_size_messages() -> None:
    d, s = pair()
    hello = d.opening()
    assert s.opening() == b"" and len(hello) == HELLO_BYTES == s.wanted
    challenge = s.feed(hello)
    assert len(challenge) == CHALLENGE_BYTES == d.wanted and not s.done
    proof = d.feed(challenge)
    assert d.done and len(proof) == PROOF_BYTES == s.wanted
    assert s.feed(proof) == b"" and s.done
    assert d.wanted == s.wanted == 0


def test_the_listener_never_wants_more_than_the_next_handshake_message() -> None:
    # The connection reads `wanted` bytes and no more: a stranger's stream stays in the kernel.
    d, s = pair()
    hello = d.opening()
    for i in range(HELLO_BYTES - 1):
        assert s.feed(hello[i : i + 1]) == b""
        assert s.wanted == HELLO_BYTES - i - 1
    with pytest.raises(ValueError):
        s.feed(hello[-1:] + b"x")


@pytest.mark.parametrize(
    "opening",
    [
        struct.pack("<i", 2**31 - 1),  # pysyncobj's frame header for a 2 GiB frame
        b"GET / HTTP/1.1\r\n",
        b"\x00\x00\x00\x00",
        b"RRT\x01",  # a node of transport version 1 (Fernet frames): upgrade needs a restart
    ],
)
def test_anything_but_our_magic_is_refused_after_four_bytes(opening: bytes) -> None:
    _d, s = pair()
    with pytest.raises(HandshakeError) as exc:
        s.feed(opening[:4])
    assert exc.value.reason == "bad_handshake"


def test_a_dialler_without_the_secret_fails_at_the_listener() -> None:
    d, s = pair(dialler_key=OTHER_KEY)
    challenge = s.feed(d.opening())
    # The dialler sees the listener's proof does not match its own key: it refuses too.
    with pytest.raises(HandshakeError) as at_dialler:
        d.feed(challenge)
    assert at_dialler.value.reason == "bad_proof"
    # And a dialler that sends some proof anyway is refused by the listener.
    with pytest.raises(HandshakeError) as at_listener:
        s.feed(os.urandom(PROOF_BYTES))
    assert at_listener.value.reason == "bad_proof"


def test_a_listener_without_the_secret_fails_at_the_dialler() -> None:
    d, s = pair(listener_key=OTHER_KEY)
    with pytest.raises(HandshakeError) as exc:
        d.feed(s.feed(d.opening()))
    assert exc.value.reason == "bad_proof"


def test_a_recorded_proof_does_not_open_a_new_session() -> None:
    d, s = pair()
    proof = d.feed(s.feed(d.opening()))
    s.feed(proof)
    # Replay the whole recorded dialler side against a fresh listener (fresh nonce).
    replay = Handshake(dialler=False, key=KEY, nonce=os.urandom(32))
    replay.feed(d.opening())
    with pytest.raises(HandshakeError):
        replay.feed(proof)


def test_the_listeners_own_mac_is_no_dialler_proof() -> None:
    # Reflection: send the listener's proof back to it as ours.
    d, s = pair()
    challenge = s.feed(d.opening())
    with pytest.raises(HandshakeError):
        s.feed(challenge[-PROOF_BYTES:])


def run(d: Handshake, s: Handshake) -> None:
    """A whole handshake between two sides; HandshakeError from whichever refuses."""
    s.feed(d.feed(s.feed(d.opening())))


class V2Peer:
    """A node of transport version 2, written from the wire format in replication/wire.py
    (not from its code): a random nonce, the two MACs, nothing else."""

    def __init__(self, key: bytes = KEY) -> None:
        self.key = key
        self.nonce = os.urandom(32)

    def mac(self, side: bytes, client: bytes, server: bytes) -> bytes:
        return hmac.new(self.key, side + client + server, hashlib.sha256).digest()

    def hello(self) -> bytes:
        return b"RRT\x02" + self.nonce

    def challenge(self, hello: bytes) -> bytes:
        self.client = hello[4:]
        return b"RRT\x02" + self.nonce + self.mac(b"S", self.client, self.nonce)

    def proof(self, challenge: bytes) -> bytes:
        server = challenge[4:36]
        assert challenge[36:] == self.mac(b"S", self.nonce, server), "listener's proof"
        self.server = server
        return self.mac(b"C", self.nonce, server)


def test_a_v2_peer_and_a_v3_node_talk_at_v2_whichever_dials() -> None:
    # A rolling upgrade: the v3 node's offer is a nonce like any other to the v2 node.
    old = V2Peer()
    listener = Handshake(dialler=False, key=KEY, nonce=os.urandom(32))
    listener.feed(old.proof(listener.feed(old.hello())))
    assert listener.done and listener.version == 2
    frames = Session(key=KEY, client_nonce=old.nonce, server_nonce=old.server, dialler=True)
    assert listener.session().open(frames.seal(b"\x00hello")) == b"\x00hello"

    old = V2Peer()
    dialler = Handshake(dialler=True, key=KEY, nonce=os.urandom(32))
    proof = dialler.feed(old.challenge(dialler.opening()))
    assert proof == old.mac(b"C", old.client, old.nonce)  # what the v2 listener checks
    assert dialler.done and dialler.version == 2


def test_a_node_limited_to_v2_sends_exactly_the_v2_bytes() -> None:
    nonce = os.urandom(32)
    hs = Handshake(dialler=True, key=KEY, nonce=nonce, versions=(2, 2))
    assert hs.opening() == MAGIC + nonce == b"RRT\x02" + nonce
    assert parse_offer(nonce) is None


def test_two_v3_nodes_talk_at_the_highest_version_both_speak() -> None:
    d, s = pair()
    offer = parse_offer(d.opening()[len(MAGIC) :])
    assert offer is not None and offer[:2] == (2, TRANSPORT_VERSION)
    run(d, s)
    assert d.version == s.version == TRANSPORT_VERSION
    narrow = Handshake(dialler=True, key=KEY, nonce=os.urandom(32), versions=(2, 2))
    run(narrow, Handshake(dialler=False, key=KEY, nonce=os.urandom(32)))
    assert narrow.version == 2


@pytest.mark.parametrize("v3_dials", [True, False])
def test_a_node_that_needs_v3_refuses_a_v2_peer(v3_dials: bool) -> None:
    # After every node speaks v3 the operator raises the lowest version: a v2 node is then
    # refused (counted as bad_version) on whichever side speaks v3.
    old = V2Peer()
    if v3_dials:
        dialler = Handshake(dialler=True, key=KEY, nonce=os.urandom(32), versions=(3, 3))
        dialler.feed(old.challenge(dialler.opening()))
        assert dialler.refused is not None and not dialler.done
        reason = dialler.refused.reason
    else:
        listener = Handshake(dialler=False, key=KEY, nonce=os.urandom(32), versions=(3, 3))
        challenge = listener.feed(old.hello())
        with pytest.raises(HandshakeError) as exc:
            listener.feed(old.proof(challenge))
        reason = exc.value.reason
    assert reason == "bad_version"


def test_a_peer_of_another_cluster_is_refused_on_both_sides() -> None:
    # A node of the cluster a backup was restored from, and a node of the restored one.
    d = Handshake(dialler=True, key=KEY, nonce=os.urandom(32), cluster_id="restored")
    s = Handshake(dialler=False, key=KEY, nonce=os.urandom(32), cluster_id="original")
    proof = d.feed(s.feed(d.opening()))
    # The dialler still proves the secret, so the listener refuses (and counts) it too.
    assert d.refused is not None and d.refused.reason == "wrong_cluster"
    assert not d.done and d.wanted == 0 and len(proof) == PROOF_BYTES
    with pytest.raises(HandshakeError) as exc:
        s.feed(proof)
    assert exc.value.reason == "wrong_cluster" and not s.done


def test_an_offer_altered_on_the_way_fails_the_proof() -> None:
    # Downgrade protection: the MACs cover the offers, so rewriting "2..3" into "2..2" (or
    # stripping the offer) without the secret breaks the handshake instead of downgrading it.
    d, s = pair()
    hello = bytearray(d.opening())
    hello[len(MAGIC) + 5] = 2  # the dialler's highest version
    challenge = s.feed(bytes(hello))
    with pytest.raises(HandshakeError) as exc:
        d.feed(challenge)
    assert exc.value.reason == "bad_proof"


def test_a_handshake_refuses_versions_this_code_does_not_speak() -> None:
    for versions in [(1, 3), (2, TRANSPORT_VERSION + 1), (3, 2)]:
        with pytest.raises(ValueError):
            Handshake(dialler=True, key=KEY, nonce=os.urandom(32), versions=versions)


def sessions(key: bytes = KEY) -> tuple[Session, Session]:
    """The (dialler, listener) sessions of one completed handshake."""
    d, s = pair(key, key)
    s.feed(d.feed(s.feed(d.opening())))
    return d.session(), s.session()


def test_sealed_frames_open_in_order_in_both_directions() -> None:
    d, s = sessions()
    for i in range(5):
        assert s.open(d.seal(b"to listener %d" % i)) == b"to listener %d" % i
        assert d.open(s.seal(b"to dialler %d" % i)) == b"to dialler %d" % i
    assert s.open(d.seal(b"")) == b""


def test_the_frame_keys_are_pinned() -> None:
    # The wire format (version 2): a change here needs a new MAGIC, or upgraded and old
    # nodes would close each other's every frame as bad_frame instead of refusing at once.
    d = Session(
        key=KEY, client_nonce=bytes(range(32)), server_nonce=bytes(range(32, 64)), dialler=True
    )
    assert d.seal(b"\x00ripple").hex() == "bdfbc115e0cd64debcac99686855ff949cf9e511365a64"
    assert d.seal(b"\x00ripple").hex() == "798dc1ba666ddff6a834972a0c03052960eb4ace64209c"


def _bad_frame(session: Session, frame: bytes) -> None:
    with pytest.raises(FrameError) as exc:
        session.open(frame)
    assert exc.value.reason == "bad_frame"


def test_an_altered_frame_does_not_open() -> None:
    d, s = sessions()
    frame = bytearray(d.seal(b"append_entries"))
    frame[3] ^= 1
    _bad_frame(s, bytes(frame))
    _bad_frame(s, d.seal(b"x")[:-1])  # truncated tag


def test_a_replayed_or_reordered_frame_does_not_open() -> None:
    d, s = sessions()
    first, second = d.seal(b"first"), d.seal(b"second")
    _bad_frame(s, second)  # out of order
    assert s.open(first) == b"first"
    _bad_frame(s, first)  # replayed
    assert s.open(second) == b"second"


def test_a_frame_reflected_back_to_its_sender_does_not_open() -> None:
    d, _s = sessions()
    _bad_frame(d, d.seal(b"request_vote"))


def test_two_connections_never_share_frame_keys() -> None:
    (d1, s1), (d2, s2) = sessions(), sessions()
    _bad_frame(s2, d1.seal(b"spliced"))
    _bad_frame(d2, s1.seal(b"spliced"))
    (d3, _s3), (_d4, s4) = sessions(OTHER_KEY), sessions()
    _bad_frame(s4, d3.seal(b"another cluster"))


def test_a_session_needs_the_finished_handshake() -> None:
    d, _s = pair()
    with pytest.raises(ValueError):
        d.session()


def test_only_large_messages_are_compressed_and_inflation_is_bounded() -> None:
    small = {"type": "append_entries", "entries": [b"x" * 100]}
    plain = encode_message(small)
    assert plain[:1] == b"\x00" and decode_message(plain, 1 << 20) == small
    large = {"entries": [b"y" * COMPRESS_MIN_BYTES]}
    packed = encode_message(large)
    assert packed[:1] == b"\x01" and len(packed) < COMPRESS_MIN_BYTES // 10
    assert decode_message(packed, 1 << 20) == large
    with pytest.raises(FrameError) as exc:
        decode_message(packed, COMPRESS_MIN_BYTES // 2)
    assert exc.value.reason == "frame_too_large"
    with pytest.raises(FrameError) as unknown:
        decode_message(b"\x02" + plain[1:], 1 << 20)
    assert unknown.value.reason == "bad_frame"


def test_the_transport_refuses_to_run_under_pysyncobjs_own_encryption() -> None:
    with pytest.raises(ValueError, match="password"):
        HardenedTransport(
            SimpleNamespace(encryptor=object()),
            None,
            [],
            limits=TransportLimits(),
            secret="unit-secret-0123456789",
            refusals=Refusals(),
        )


def test_frames_split_anywhere_come_out_whole_and_keepalives_vanish() -> None:
    payloads = [b"a", os.urandom(70_000), b"", b"xyz"]
    stream = KEEPALIVE_FRAME + b"".join(encode_frame(p) for p in payloads) + KEEPALIVE_FRAME
    for step in (1, 3, 4096, len(stream)):
        reader = FrameReader(1 << 20)
        got: list[bytes] = []
        for i in range(0, len(stream), step):
            got += reader.feed(stream[i : i + step])
        assert got == [p for p in payloads if p]
        assert reader.buffered == 0


@pytest.mark.parametrize("length", [2**31 - 1, (1 << 16) + 1, -1])
def test_a_frame_header_over_the_cap_is_refused_before_its_body_arrives(length: int) -> None:
    reader = FrameReader(1 << 16)
    with pytest.raises(FrameError) as exc:
        reader.feed(struct.pack("<i", length))
    assert exc.value.reason == "frame_too_large"


def test_the_reader_holds_at_most_one_frame_and_one_chunk() -> None:
    cap, chunk = 1 << 16, 1 << 12
    reader = FrameReader(cap)
    stream = b"".join(encode_frame(os.urandom(cap)) for _ in range(4))
    most = 0
    for i in range(0, len(stream), chunk):
        reader.feed(stream[i : i + chunk])
        most = max(most, reader.buffered)
    assert most <= cap + 4 + chunk


def test_decompression_is_bounded_too() -> None:
    bomb = zlib.compress(bytes(10 * (1 << 20)), 9)  # ~10 KiB that inflates to 10 MiB
    assert len(bomb) < 1 << 16
    with pytest.raises(FrameError) as exc:
        decompress_bounded(bomb, 1 << 20)
    assert exc.value.reason == "frame_too_large"
    assert decompress_bounded(zlib.compress(b"ok" * 100), 1 << 20) == b"ok" * 100


def test_refusals_are_counted_always_and_logged_at_a_rate_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(monotonic_ms=100_000)
    refusals = Refusals(log_interval_s=10.0, clock=clock)
    assert refusals.counts() == dict.fromkeys(REFUSAL_REASONS, 0)
    with caplog.at_level(logging.WARNING, logger="replication.refusals"):
        for _ in range(1000):
            refusals.refuse("bad_handshake", "127.0.0.1:5")
        refusals.refuse("bad_proof", "127.0.0.1:6")
        clock.advance(9_999)
        refusals.refuse("bad_handshake", "127.0.0.1:7")  # within the interval: not logged
        clock.advance(1)
        refusals.refuse("bad_handshake", "127.0.0.1:7")
    assert refusals.counts()["bad_handshake"] == 1002
    assert refusals.counts()["bad_proof"] == 1
    assert refusals.logged == 3  # first of each reason, then one more after the interval
    assert "1000 more not logged" in caplog.records[-1].getMessage()
    with pytest.raises(ValueError):
        refusals.refuse("made_up", "x")


def test_limits_refuse_nonsense() -> None:
    TransportLimits().validate()
    for bad in (
        TransportLimits(frame_bytes_max=1000),
        TransportLimits(handshake_timeout_s=0),
        TransportLimits(idle_timeout_s=-1),
        TransportLimits(unauthenticated_max=0),
    ):
        with pytest.raises(ValueError):
            bad.validate()
