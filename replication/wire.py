"""The Raft port's wire protocol, sans-IO: the handshake, the sealed frames, the messages.

This module owns the bytes two nodes exchange and nothing that touches a socket or a clock
(`replication.connection` feeds it what a socket read and sends what it returns). Invariants:

- A peer proves it holds the cluster secret before anything it sends is buffered beyond a
  fixed-size handshake: an HMAC-SHA256 over both sides' fresh nonces, compared in constant
  time. Both sides prove it, so neither buffers a stranger's frames whichever side dialled.
- Every frame after the handshake is sealed with AES-256-GCM under keys of that connection
  alone (derived from the handshake key and both nonces, one per direction) and a counter
  nonce: a frame that was altered, replayed, reordered, reflected back or taken from another
  connection fails to open (`FrameError` "bad_frame"). pysyncobj's own encryption (Fernet,
  its `password`) stays unset: it would cost most of a frame's CPU (docs/benchmarks.md).
- Two nodes talk only at a transport version both speak, and only within one cluster: a
  peer outside this node's version range ("bad_version") or of another cluster
  ("wrong_cluster") is refused once it has proved the secret, before any frame.
- A frame header announcing more than the limit is refused before its body is read, and a
  compressed message is refused once it would inflate past the same limit.
- Errors carry a `reason`, one of `replication.refusals.REFUSAL_REASONS`.

Wire format (both directions; versions 2 and 3 differ only in the nonces):
  dialler -> listener   MAGIC | client_nonce(32)
  listener -> dialler   MAGIC | server_nonce(32) | HMAC(k, "S" | client_nonce | server_nonce)
  dialler -> listener   HMAC(k, "C" | client_nonce | server_nonce)
  then frames           length(int32 little-endian) | payload   (length 0: keep-alive)
  payload               AES-256-GCM(key_out, nonce = frame number (96-bit big-endian, from 0),
                        plaintext = flag(1) | pickled message, zlib-compressed if flag is 1)
with k = HMAC-SHA256(secret, HANDSHAKE_KEY_LABEL) and key_out = HMAC-SHA256(k,
FRAME_KEY_LABEL | "D" (dialler's frames) or "L" (listener's) | client_nonce | server_nonce).

Version negotiation. A node that speaks only version 2 sends 32 random bytes as its nonce. A
node that speaks version 3 sends an *offer* in the same 32 bytes, which a version-2 node
takes for a nonce like any other:
  OFFER_TAG(4) | lowest version(1) | highest version(1) | cluster tag(8) | random(18)
where the cluster tag is the first 8 bytes of SHA-256(cluster id). Both MACs cover both
nonces, so an offer cannot be stripped or altered on the way without failing the proof.
When both sides offer, they talk at the highest version both speak, provided their ranges
overlap and their cluster tags match; when one side offers and the other does not, the
other speaks version 2 only, and they talk at 2 if the offering side still accepts it. The
frames of version 3 are those of version 2. Nodes of version 1 (Fernet frames) fail at the
handshake's magic ("bad_handshake").
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from typing import Any

import pysyncobj.pickle as syncobj_pickle
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "CHALLENGE_BYTES",
    "COMPRESS_MIN_BYTES",
    "HELLO_BYTES",
    "KEEPALIVE_FRAME",
    "NONCE_BYTES",
    "PROOF_BYTES",
    "TRANSPORT_VERSION",
    "TRANSPORT_VERSION_MIN",
    "FrameError",
    "FrameReader",
    "Handshake",
    "HandshakeError",
    "Session",
    "cluster_tag",
    "decode_message",
    "decompress_bounded",
    "encode_frame",
    "encode_message",
    "handshake_key",
    "negotiate",
    "parse_offer",
]

MAGIC = b"RRT\x02"  # Ripple Raft Transport: the handshake of versions 2 and 3
# The transport versions this code speaks; a node may be set to accept a narrower range
# (`RaftSettings.transport_version_min`) once every peer speaks the newer one.
TRANSPORT_VERSION_MIN = 2
TRANSPORT_VERSION = 3
OFFER_TAG = b"RRTo"  # the start of a nonce that is a version offer (version 3 on)
CLUSTER_TAG_BYTES = 8
_OFFER = struct.Struct(">4sBB8s")  # tag, lowest version, highest version, cluster tag
NONCE_BYTES = 32
MAC_BYTES = 32
HELLO_BYTES = len(MAGIC) + NONCE_BYTES
CHALLENGE_BYTES = len(MAGIC) + NONCE_BYTES + MAC_BYTES
PROOF_BYTES = MAC_BYTES
HANDSHAKE_KEY_LABEL = b"ripple raft transport handshake v1"
FRAME_KEY_LABEL = b"ripple raft transport frames v2"
FRAME_NONCE_BYTES = 12
# Messages this long (pickled) or longer are compressed: snapshot chunks and catch-up
# batches, where the bytes on a real network matter. Below it zlib costs more CPU than the
# frame's whole trip on loopback (docs/benchmarks.md, the transport's frame costs).
COMPRESS_MIN_BYTES = 32 * 1024
COMPRESS_LEVEL = 3
_PLAIN = b"\x00"
_COMPRESSED = b"\x01"
_HEADER = struct.Struct("<i")
KEEPALIVE_FRAME = _HEADER.pack(0)


def handshake_key(secret: str) -> bytes:
    """The handshake's own key, so a MAC seen on the wire says nothing about other uses."""
    return hmac.new(secret.encode(), HANDSHAKE_KEY_LABEL, hashlib.sha256).digest()


def cluster_tag(cluster_id: str) -> bytes:
    """What a nonce carries of the cluster id: enough to tell two clusters apart."""
    return hashlib.sha256(cluster_id.encode()).digest()[:CLUSTER_TAG_BYTES]


def parse_offer(nonce: bytes) -> tuple[int, int, bytes] | None:
    """(lowest, highest, cluster tag) of a version offer; None for a plain version-2 nonce."""
    if nonce[: len(OFFER_TAG)] != OFFER_TAG:
        return None
    _tag, low, high, tag = _OFFER.unpack_from(nonce)
    return low, high, tag


def negotiate(versions: tuple[int, int], tag: bytes, peer: tuple[int, int, bytes] | None) -> int:
    """The version two sides talk at, from one side's range and cluster tag and what the other
    offered (None: it speaks version 2 only); HandshakeError when they cannot talk."""
    low, high = versions
    if peer is None:
        if low > 2:
            raise HandshakeError(
                "bad_version",
                f"the peer speaks transport version 2 only; this node needs {low} to {high}",
            )
        return 2
    peer_low, peer_high, peer_tag = peer
    if max(low, peer_low) > min(high, peer_high):
        raise HandshakeError(
            "bad_version",
            f"the peer speaks transport versions {peer_low} to {peer_high}, this node "
            f"{low} to {high}",
        )
    if not hmac.compare_digest(tag, peer_tag):
        raise HandshakeError("wrong_cluster", "the peer belongs to another cluster (cluster id)")
    return min(high, peer_high)


def _mac(key: bytes, side: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(key, side + client_nonce + server_nonce, hashlib.sha256).digest()


class HandshakeError(Exception):
    """The other side failed the handshake; `reason` is "bad_handshake", "bad_proof",
    "bad_version" or "wrong_cluster"."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Handshake:
    """One side of the mutual HMAC handshake. Feed it exactly `wanted` bytes at a time (the
    connection reads no more than that, so nothing after the handshake is buffered early);
    send what `feed` returns. `done` once the other side has proved the secret and the two
    agreed on `version`. `versions` is the range this side speaks: a highest version of 2
    sends a plain nonce, as a node of version 2 does; from 3 the nonce is an offer made from
    `nonce`'s first random bytes."""

    def __init__(
        self,
        *,
        dialler: bool,
        key: bytes,
        nonce: bytes,
        versions: tuple[int, int] = (TRANSPORT_VERSION_MIN, TRANSPORT_VERSION),
        cluster_id: str = "",
    ) -> None:
        if len(nonce) != NONCE_BYTES:
            raise ValueError("nonce must be 32 bytes")
        low, high = versions
        if not TRANSPORT_VERSION_MIN <= low <= high <= TRANSPORT_VERSION:
            raise ValueError(
                f"transport versions {low}..{high}: this code speaks "
                f"{TRANSPORT_VERSION_MIN}..{TRANSPORT_VERSION}"
            )
        self.dialler = dialler
        self._key = key
        self._versions = versions
        self._tag = cluster_tag(cluster_id)
        if high >= 3:
            offer = _OFFER.pack(OFFER_TAG, low, high, self._tag)
            nonce = offer + nonce[: NONCE_BYTES - len(offer)]
        self._nonce = nonce
        self.version = 0  # the version both sides talk at, once done
        # A dialler that cannot talk to the listener it reached: send the proof `feed`
        # returned, then close with this refusal's reason.
        self.refused: HandshakeError | None = None
        self._peer_nonce = b""
        self._buf = bytearray()
        self.done = False
        self._nonces = (b"", b"")  # (client, server) once done
        self._stage = "challenge" if dialler else "hello"

    def opening(self) -> bytes:
        """What to send as soon as the TCP connection is up (only the dialler speaks first)."""
        return MAGIC + self._nonce if self.dialler else b""

    @property
    def wanted(self) -> int:
        need = {"hello": HELLO_BYTES, "challenge": CHALLENGE_BYTES, "proof": PROOF_BYTES}
        if self.done or self.refused is not None:
            return 0
        return need[self._stage] - len(self._buf)

    def feed(self, data: bytes) -> bytes:
        if self.done or self.refused is not None or len(data) > self.wanted:
            raise ValueError("fed more than the handshake wanted")
        self._buf += data
        opening = self._stage in ("hello", "challenge")
        if opening and len(self._buf) >= len(MAGIC) and self._buf[: len(MAGIC)] != MAGIC:
            raise HandshakeError("bad_handshake", "not a Ripple Raft handshake")
        if self.wanted:
            return b""
        msg, self._buf = bytes(self._buf), bytearray()
        if self._stage == "hello":  # listener: answer with our nonce and our proof
            self._peer_nonce = msg[len(MAGIC) :]
            self._stage = "proof"
            return MAGIC + self._nonce + _mac(self._key, b"S", self._peer_nonce, self._nonce)
        if self._stage == "challenge":  # dialler: check the listener's proof, send ours
            server_nonce = msg[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
            expected = _mac(self._key, b"S", self._nonce, server_nonce)
            if not hmac.compare_digest(expected, msg[len(MAGIC) + NONCE_BYTES :]):
                raise HandshakeError("bad_proof", "the listener does not know the secret")
            proof = _mac(self._key, b"C", self._nonce, server_nonce)
            try:
                self.version = negotiate(self._versions, self._tag, parse_offer(server_nonce))
            except HandshakeError as exc:
                # Proved anyway, so the listener can refuse (and count) us in turn.
                self.refused = exc
                return proof
            self.done = True
            self._nonces = (self._nonce, server_nonce)
            return proof
        expected = _mac(self._key, b"C", self._peer_nonce, self._nonce)  # listener: proof
        if not hmac.compare_digest(expected, msg):
            raise HandshakeError("bad_proof", "the dialler does not know the secret")
        self.version = negotiate(self._versions, self._tag, parse_offer(self._peer_nonce))
        self.done = True
        self._nonces = (self._peer_nonce, self._nonce)
        return b""

    def session(self) -> Session:
        """The frame keys of this connection, once both sides have proved the secret."""
        if not self.done:
            raise ValueError("the handshake is not done")
        client_nonce, server_nonce = self._nonces
        return Session(
            key=self._key,
            client_nonce=client_nonce,
            server_nonce=server_nonce,
            dialler=self.dialler,
        )


def _frame_key(key: bytes, side: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(key, FRAME_KEY_LABEL + side + client_nonce + server_nonce, "sha256").digest()


class Session:
    """Seals the frames one side sends and opens the ones it receives, on one connection.
    Each direction has its own key, from the handshake key and both fresh nonces, so no two
    connections (and no two directions) share one; the nonce is the frame's number in its
    direction, which both sides count. TCP delivers in order, so a frame that does not open
    under the next number was altered, replayed, reordered, reflected or spliced in from
    another connection: the connection is closed (`FrameError` "bad_frame")."""

    def __init__(
        self, *, key: bytes, client_nonce: bytes, server_nonce: bytes, dialler: bool
    ) -> None:
        mine, theirs = (b"D", b"L") if dialler else (b"L", b"D")
        self._seal = AESGCM(_frame_key(key, mine, client_nonce, server_nonce))
        self._open = AESGCM(_frame_key(key, theirs, client_nonce, server_nonce))
        self._sent = 0
        self._received = 0

    def seal(self, plaintext: bytes) -> bytes:
        nonce = self._sent.to_bytes(FRAME_NONCE_BYTES, "big")
        self._sent += 1
        return self._seal.encrypt(nonce, plaintext, None)

    def open(self, frame: bytes) -> bytes:
        nonce = self._received.to_bytes(FRAME_NONCE_BYTES, "big")
        try:
            plaintext = self._open.decrypt(nonce, frame, None)
        except InvalidTag:
            raise FrameError(
                "bad_frame",
                f"frame {self._received} fails authentication (altered, replayed, out of "
                "order or from another connection)",
            ) from None
        self._received += 1
        return plaintext


def encode_message(message: Any) -> bytes:
    """A pysyncobj message as a frame's plaintext: pickled, compressed from
    `COMPRESS_MIN_BYTES`."""
    body: bytes = syncobj_pickle.dumps(message)
    if len(body) >= COMPRESS_MIN_BYTES:
        return _COMPRESSED + zlib.compress(body, COMPRESS_LEVEL)
    return _PLAIN + body


def decode_message(plaintext: bytes, limit: int) -> Any:
    """The message `encode_message` made; a compressed body may inflate to `limit` bytes.
    Only ever called on a plaintext that opened under the connection's key."""
    flag, body = plaintext[:1], plaintext[1:]
    if flag == _COMPRESSED:
        body = decompress_bounded(body, limit)
    elif flag != _PLAIN:
        raise FrameError("bad_frame", f"unknown frame encoding {flag!r}")
    return syncobj_pickle.loads(body)


class FrameError(Exception):
    """A frame that must close the link; `reason` is "frame_too_large" or "bad_frame"."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class FrameReader:
    """Splits an authenticated byte stream into frames. Holds at most one frame plus one
    read chunk; a header announcing more than `frame_bytes_max` is refused at once."""

    def __init__(self, frame_bytes_max: int) -> None:
        self._max = frame_bytes_max
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """The complete frames `data` finishes, keep-alives left out."""
        self._buf += data
        frames, pos, buf = [], 0, self._buf
        while len(buf) - pos >= _HEADER.size:
            (length,) = _HEADER.unpack_from(buf, pos)
            if length < 0 or length > self._max:
                raise FrameError("frame_too_large", f"frame of {length} bytes, limit {self._max}")
            end = pos + _HEADER.size + length
            if len(buf) < end:
                break
            if length:
                frames.append(bytes(buf[pos + _HEADER.size : end]))
            pos = end
        if pos:
            del buf[:pos]
        return frames


def encode_frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


def decompress_bounded(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, limit)
    if d.unconsumed_tail or not d.eof:
        raise FrameError("frame_too_large", f"frame decompresses to more than {limit} bytes")
    return out
