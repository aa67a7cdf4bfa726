"""The Raft port: a pysyncobj transport that a stranger on the network cannot stall.

pysyncobj 0.3.17's own transport reads a 4-byte frame length with no cap and grows its read
buffer by copying, on the Raft thread, before it decrypts anything; idle connections never
time out. One connection streaming a frame that claims 2 GiB deposed the leader (issue 11).
This module owns every Raft TCP connection of one node instead, and keeps these invariants:

- Nothing a peer sends is buffered beyond a fixed-size handshake until the peer has proved
  it holds the cluster secret: an HMAC-SHA256 over both sides' fresh nonces, compared in
  constant time. Both sides prove it, so a node never buffers a stranger's frames whichever
  side dialled.
- Every frame after the handshake is sealed with AES-256-GCM under keys of that connection
  alone (derived from the handshake key and both nonces, one per direction) and a counter
  nonce: a frame that was altered, replayed, reordered, reflected back or taken from another
  connection fails to open and closes the link. This replaces pysyncobj's own encryption
  (Fernet with a 1-second timestamp, pysyncobj's `password`, which Ripple leaves unset):
  Fernet and zlib were most of what a frame cost to send and to receive, 38 of 44 us to
  send a 2 KB batch (docs/benchmarks.md). Only frames of `COMPRESS_MIN_BYTES` or more are
  compressed.
- A connection is accepted only from a host of the configured nodes, and the node identity
  a peer then claims must be one of them, from that node's host.
- At most `unauthenticated_max` accepted connections are in the handshake at once; a new one
  evicts the oldest, so a slow stranger cannot keep a peer out for longer than it takes the
  peer to answer. Each handshake has a deadline (`handshake_timeout_s`).
- An authenticated connection that has received nothing for `idle_timeout_s` is closed; each
  side sends an empty keep-alive frame when it has sent nothing for a third of that, so quiet
  links between followers stay up and half-open ones are found.
- Every frame is at most `frame_bytes_max` on the wire and again once decompressed.
- Every refusal is counted by reason (`Refusals.counts`) and logged at most once per
  LOG_INTERVAL_S per reason.

The handshake and the framing are sans-IO (`Handshake`, `FrameReader`); `_Connection` does the
socket work. Everything runs on pysyncobj's tick thread; `Refusals.counts()` may be read
from any thread.

Wire format (both directions, version 2):
  dialler -> listener   MAGIC | client_nonce(32)
  listener -> dialler   MAGIC | server_nonce(32) | HMAC(k, "S" | client_nonce | server_nonce)
  dialler -> listener   HMAC(k, "C" | client_nonce | server_nonce)
  then frames           length(int32 little-endian) | payload   (length 0: keep-alive)
  payload               AES-256-GCM(key_out, nonce = frame number (96-bit big-endian, from 0),
                        plaintext = flag(1) | pickled message, zlib-compressed if flag is 1)
with k = HMAC-SHA256(secret, HANDSHAKE_KEY_LABEL) and key_out = HMAC-SHA256(k,
FRAME_KEY_LABEL | "D" (dialler's frames) or "L" (listener's) | client_nonce | server_nonce).
Nodes of another version (version 1 sealed frames with Fernet) fail at the handshake's magic
("bad_handshake"): upgrading needs a whole-cluster restart, as it did from pysyncobj's own.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
import struct
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pysyncobj.pickle as syncobj_pickle
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, set_keepalive
from pysyncobj.transport import TCPTransport

__all__ = [
    "COMPRESS_MIN_BYTES",
    "FRAME_BYTES_MAX_DEFAULT",
    "HANDSHAKE_TIMEOUT_S_DEFAULT",
    "REFUSAL_REASONS",
    "UNAUTHENTICATED_MAX_DEFAULT",
    "FrameError",
    "FrameReader",
    "Handshake",
    "HandshakeError",
    "HardenedTransport",
    "Refusals",
    "Session",
    "TransportLimits",
    "decode_message",
    "encode_message",
    "handshake_key",
]

log = logging.getLogger(__name__)

# Largest legitimate frame: an append_entries batch (pysyncobj stops adding entries past
# 64 KiB, so at most 64 KiB plus one entry, an entry being one group-commit batch of at most
# group_commit_bytes_max, 1 MiB by default) or a 64 KiB snapshot chunk, pickled, perhaps
# compressed, then sealed (17 bytes more). 64 MiB is far above that and still a bounded cost
# per authenticated peer.
FRAME_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
HANDSHAKE_TIMEOUT_S_DEFAULT = 2.0
UNAUTHENTICATED_MAX_DEFAULT = 16

MAGIC = b"RRT\x02"  # Ripple Raft Transport, version 2 (1 sealed frames with Fernet)
NONCE_BYTES = 32
MAC_BYTES = 32
HELLO_BYTES = len(MAGIC) + NONCE_BYTES
CHALLENGE_BYTES = len(MAGIC) + NONCE_BYTES + MAC_BYTES
PROOF_BYTES = MAC_BYTES
HANDSHAKE_KEY_LABEL = b"ripple raft transport handshake v1"
FRAME_KEY_LABEL = b"ripple raft transport frames v2"
FRAME_NONCE_BYTES = 12
# Messages this long (pickled) or longer are compressed: snapshot chunks and catch-up
# batches, where the bytes on a real network matter. Below it zlib cost more CPU than the
# frame's whole trip on loopback (level 3 on a 2 KB batch: 21 us against 1 us to seal it).
COMPRESS_MIN_BYTES = 32 * 1024
COMPRESS_LEVEL = 3
_PLAIN = b"\x00"
_COMPRESSED = b"\x01"
_HEADER = struct.Struct("<i")
KEEPALIVE_FRAME = _HEADER.pack(0)
KEEPALIVE_FRACTION = 3  # send a keep-alive after idle_timeout_s / 3 of silence

LOG_INTERVAL_S = 10.0  # at most one warning per refusal reason per interval
RECV_CHUNK_BYTES = 1 << 16
READ_BUDGET_BYTES = 1 << 20  # per poll event: one busy peer cannot hold the Raft thread
ACCEPTS_PER_EVENT_MAX = 32  # likewise for a flood of new connections
LISTEN_BACKLOG = 128
# The nodes' hosts are resolved again every ALLOWED_HOSTS_REFRESH_S, and sooner (at most every
# ALLOWED_HOSTS_RETRY_S) when a connection comes from an address not on the list: a peer
# that started after us, or came back with a new address, is let in within seconds, and a
# stranger cannot make the Raft thread resolve names more often than that.
ALLOWED_HOSTS_REFRESH_S = 30.0
ALLOWED_HOSTS_RETRY_S = 5.0

REFUSAL_REASONS = (
    "address_not_allowed",  # accepted from a host that is not a configured node's
    "unauthenticated_limit",  # evicted: too many connections in the handshake at once
    "handshake_timeout",  # no complete handshake within handshake_timeout_s
    "bad_handshake",  # not our protocol (wrong magic): a stranger or an old node
    "bad_proof",  # the other side does not know the cluster secret
    "unknown_peer",  # authenticated, but claims no configured node, or from the wrong host
    "frame_too_large",  # a frame over frame_bytes_max (on the wire or decompressed)
    "bad_frame",  # a frame that fails to open (altered, replayed, reordered) or decode
    "idle_timeout",  # an authenticated connection silent for idle_timeout_s
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportLimits:
    frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S_DEFAULT
    idle_timeout_s: float = 1.5
    unauthenticated_max: int = UNAUTHENTICATED_MAX_DEFAULT

    def validate(self) -> None:
        if self.frame_bytes_max < 1 << 16:
            raise ValueError("frame_bytes_max must be at least 64 KiB (a snapshot chunk)")
        if self.handshake_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("handshake_timeout_s and idle_timeout_s must be positive")
        if self.unauthenticated_max < 1:
            raise ValueError("unauthenticated_max must be at least 1")


class Refusals:
    """Connections the transport refused or closed, counted by reason, logged at a rate limit."""

    def __init__(
        self,
        log_interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log_interval_s = log_interval_s
        self._clock = clock
        # Every key exists from the start: readers on other threads copy the dict while the
        # tick thread increments, and a dict that never changes size can always be copied.
        self._counts = dict.fromkeys(REFUSAL_REASONS, 0)
        self._suppressed = dict.fromkeys(REFUSAL_REASONS, 0)
        self._last_logged: dict[str, float] = dict.fromkeys(REFUSAL_REASONS, float("-inf"))
        self.logged = 0  # warnings actually written (tests check the rate limit)

    def refuse(self, reason: str, peer: str, detail: str = "") -> None:
        if reason not in self._counts:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self._counts[reason] += 1
        now = self._clock()
        if now - self._last_logged[reason] < self._log_interval_s:
            self._suppressed[reason] += 1
            return
        suppressed, self._suppressed[reason] = self._suppressed[reason], 0
        self._last_logged[reason] = now
        self.logged += 1
        log.warning(
            "raft transport: %s from %s%s (%d more not logged in the last %.0f s; total %d)",
            reason,
            peer,
            f": {detail}" if detail else "",
            suppressed,
            self._log_interval_s,
            self._counts[reason],
        )

    def counts(self) -> dict[str, int]:
        return dict(self._counts)


# -- sans-IO: handshake and framing ----------------------------------------------------------


def handshake_key(secret: str) -> bytes:
    """The handshake's own key, so a MAC seen on the wire says nothing about other uses."""
    return hmac.new(secret.encode(), HANDSHAKE_KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, side: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(key, side + client_nonce + server_nonce, hashlib.sha256).digest()


class HandshakeError(Exception):
    """The other side failed the handshake; `reason` is one of REFUSAL_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Handshake:
    """One side of the mutual HMAC handshake. Feed it exactly `wanted` bytes at a time (the
    connection reads no more than that, so nothing after the handshake is buffered early);
    send what `feed` returns. `done` once the other side has proved the secret."""

    def __init__(self, *, dialler: bool, key: bytes, nonce: bytes) -> None:
        if len(nonce) != NONCE_BYTES:
            raise ValueError("nonce must be 32 bytes")
        self.dialler = dialler
        self._key = key
        self._nonce = nonce
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
        return 0 if self.done else need[self._stage] - len(self._buf)

    def feed(self, data: bytes) -> bytes:
        if self.done or len(data) > self.wanted:
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
            self.done = True
            self._nonces = (self._nonce, server_nonce)
            return _mac(self._key, b"C", self._nonce, server_nonce)
        expected = _mac(self._key, b"C", self._peer_nonce, self._nonce)  # listener: proof
        if not hmac.compare_digest(expected, msg):
            raise HandshakeError("bad_proof", "the dialler does not know the secret")
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


# -- IO ----------------------------------------------------------------------------------------


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


_LINGER_RESET = struct.pack("ii", 1, 0)


def _abort(sock: socket.socket) -> None:
    """Make close() send a reset instead of a FIN (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)


class _Phase(Enum):
    CLOSED = 0
    DIALLING = 1  # TCP connect in progress
    HANDSHAKE = 2
    OPEN = 3  # authenticated: pysyncobj frames flow


_READ = POLL_EVENT_TYPE.READ
_WRITE = POLL_EVENT_TYPE.WRITE
_ERROR = POLL_EVENT_TYPE.ERROR


class _Hub:
    """What all connections of one node share: limits, key, counters, poller, and the live
    and pending sets the tick sweeps. Closing a connection other than the one whose poll
    event is being handled is deferred to the next tick (`doom`): pysyncobj's poller looks
    up each ready descriptor's callback by number and fails on one closed in the same round."""

    def __init__(
        self,
        *,
        poller: Any,
        limits: TransportLimits,
        key: bytes,
        refusals: Refusals,
        conf: Any,
    ) -> None:
        self.poller = poller
        self.limits = limits
        self.key = key
        self.refusals = refusals
        self.conf = conf
        self.live: set[_Connection] = set()
        self.pending: OrderedDict[_Connection, None] = OrderedDict()  # accepted, not proven
        self.doomed: list[tuple[_Connection, socket.socket | None, str | None]] = []

    def release(self, sock: socket.socket) -> None:
        """Close a socket already unsubscribed from the poller. Raft on the event loop
        (replication.log._LoopPoller) may defer the close to the loop's thread."""
        release = getattr(self.poller, "release", None)
        if release is not None:
            release(sock)
        else:
            sock.close()

    def doom(self, conn: _Connection, reason: str | None) -> None:
        conn.doomed = True
        self.pending.pop(conn, None)
        self.doomed.append((conn, conn.sock, reason))

    def tick(self) -> None:
        doomed, self.doomed = self.doomed, []
        for conn, sock, reason in doomed:
            if conn.sock is sock:  # not already closed (and perhaps reconnected) since
                conn.close(reason)
        now = time.monotonic()
        for conn in list(self.live):
            conn.sweep(now)


class _Connection:
    """One Raft TCP connection; the interface pysyncobj's TCPTransport expects of its
    TcpConnection (connect, send, disconnect, state, callbacks, the rand-key attributes)."""

    def __init__(self, hub: _Hub, sock: socket.socket | None = None, peer: str = "") -> None:
        self._hub = hub
        # pysyncobj's TCPTransport reads these; they stay None (its own encryption, and the
        # rand-key exchange that came with it, are off: `Session` seals every frame instead).
        self.encryptor: Any = None
        self.sendRandKey: Any = None
        self.recvRandKey: Any = None
        self.doomed = False
        self.peer = peer
        self._on_message: Callable[[Any], None] | None = None
        self._on_connected: Callable[[], None] | None = None
        self._on_disconnected: Callable[[], None] | None = None
        self.on_authenticated: Callable[[_Connection], None] | None = None
        self._sock: socket.socket | None = None
        self._fileno: int | None = None
        self._mask = 0
        self._phase = _Phase.CLOSED
        self._handshake: Handshake | None = None
        self._session: Session | None = None
        self._reader = FrameReader(hub.limits.frame_bytes_max)
        self._wbuf = bytearray()
        self._wpos = 0
        self._deadline = 0.0
        self._last_recv = 0.0
        self._last_send = 0.0
        if sock is not None:  # accepted by the listener: we answer the handshake
            self._attach(sock, _Phase.HANDSHAKE)
            self._handshake = Handshake(dialler=False, key=hub.key, nonce=os.urandom(NONCE_BYTES))
            self._subscribe(_READ | _ERROR)

    # -- pysyncobj's TcpConnection interface -----------------------------------------------

    @property
    def state(self) -> int:
        if self._phase is _Phase.OPEN:
            return int(CONNECTION_STATE.CONNECTED)
        if self._phase is _Phase.CLOSED:
            return int(CONNECTION_STATE.DISCONNECTED)
        return int(CONNECTION_STATE.CONNECTING)

    def setOnConnectedCallback(self, cb: Callable[[], None] | None) -> None:
        self._on_connected = cb

    def setOnMessageReceivedCallback(self, cb: Callable[[Any], None] | None) -> None:
        self._on_message = cb

    def setOnDisconnectedCallback(self, cb: Callable[[], None] | None) -> None:
        self._on_disconnected = cb

    def fileno(self) -> int | None:
        return self._fileno

    @property
    def sock(self) -> socket.socket | None:
        return self._sock

    def getSendBufferSize(self) -> int:
        return len(self._wbuf) - self._wpos

    def connect(self, host: str | None, port: int) -> bool:
        if host is None:
            return False
        self._drop_socket()
        conf = self._hub.conf
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, conf.sendBufferSize)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, conf.recvBufferSize)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if conf.tcp_keepalive is not None:
                set_keepalive(sock, *conf.tcp_keepalive)
            sock.setblocking(False)
            err = sock.connect_ex((host, port))
        except OSError:
            sock.close()
            return False
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            return False
        self.peer = f"{host}:{port}"
        self._attach(sock, _Phase.DIALLING)
        self._handshake = Handshake(dialler=True, key=self._hub.key, nonce=os.urandom(NONCE_BYTES))
        self._subscribe(_READ | _WRITE | _ERROR)
        return True

    def send(self, message: Any) -> None:
        session = self._session
        if self._phase is not _Phase.OPEN or session is None:
            return  # nothing but the handshake goes out before the peer has proved itself
        data = session.seal(encode_message(message))
        if len(data) > self._hub.limits.frame_bytes_max:
            log.error(
                "raft transport: sending a %d-byte frame to %s, over frame_bytes_max %d: the "
                "peer will refuse it; raise raft_frame_bytes_max on every node",
                len(data),
                self.peer,
                self._hub.limits.frame_bytes_max,
            )
        self._queue(encode_frame(data))
        self._flush(in_event=False)

    def disconnect(self) -> None:
        self.close(None)

    # -- lifecycle ---------------------------------------------------------------------------

    def _attach(self, sock: socket.socket, phase: _Phase) -> None:
        now = time.monotonic()
        self._sock = sock
        self._fileno = sock.fileno()
        self._phase = phase
        self._deadline = now + self._hub.limits.handshake_timeout_s
        self._last_recv = self._last_send = now
        self._reader = FrameReader(self._hub.limits.frame_bytes_max)
        self._wbuf, self._wpos = bytearray(), 0
        self.doomed = False
        self._hub.live.add(self)

    def _drop_socket(self, *, abort: bool = False) -> None:
        hub = self._hub
        hub.live.discard(self)
        hub.pending.pop(self, None)
        if self._fileno is not None:
            hub.poller.unsubscribe(self._fileno)
            self._fileno = None
        if self._sock is not None:
            with contextlib.suppress(OSError):
                if abort:
                    _abort(self._sock)
                hub.release(self._sock)
            self._sock = None
        self._mask = 0
        self._handshake = None
        self._session = None
        self._wbuf, self._wpos = bytearray(), 0
        self._reader = FrameReader(hub.limits.frame_bytes_max)

    def close(self, reason: str | None, detail: str = "") -> None:
        """Close now; count `reason` when there is one. Calls pysyncobj's disconnected
        callback last, as its own connection does (it may reconnect from inside it)."""
        if reason is not None:
            self._hub.refusals.refuse(reason, self.peer, detail)
        was_open = self._phase is not _Phase.CLOSED
        if was_open:
            log.debug("raft link %s closed in %s (%s)", self.peer, self._phase.name, reason)
        # A refused stranger gets a reset: no TIME_WAIT state kept here for each one.
        self._drop_socket(abort=reason is not None and self._phase is not _Phase.OPEN)
        self._phase = _Phase.CLOSED
        if was_open and self._on_disconnected is not None:
            self._on_disconnected()

    def sweep(self, now: float) -> None:
        """Deadlines, on every tick (before pysyncobj polls)."""
        limits = self._hub.limits
        if self._phase in (_Phase.DIALLING, _Phase.HANDSHAKE):
            if now > self._deadline:
                # Our own dial that got nowhere is not a refusal; a stranger's stall is.
                dialler = self._handshake is not None and self._handshake.dialler
                self.close(None if dialler else "handshake_timeout")
            return
        if self._phase is not _Phase.OPEN:
            return
        if now - self._last_recv > limits.idle_timeout_s and not self._readable():
            self.close("idle_timeout", f"nothing received for {limits.idle_timeout_s} s")
            return
        if now - self._last_send > limits.idle_timeout_s / KEEPALIVE_FRACTION:
            self._queue(KEEPALIVE_FRAME)
            self._flush(in_event=False)

    def _readable(self) -> bool:
        """Bytes are waiting: a stalled tick thread, not a silent peer (the poll that follows
        this sweep reads them). pysyncobj's own check dropped such connections."""
        sock = self._sock
        if sock is None:
            return False
        try:
            return len(sock.recv(1, socket.MSG_PEEK)) > 0
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False

    # -- poller events -------------------------------------------------------------------------

    def _subscribe(self, mask: int) -> None:
        if self._fileno is not None and mask != self._mask:
            self._hub.poller.subscribe(self._fileno, self._on_event, mask)
            self._mask = mask

    def _on_event(self, descr: int, event: int) -> None:
        if descr != self._fileno or self._sock is None:
            self._hub.poller.unsubscribe(descr)  # an event for a socket we already closed
            return
        if self.doomed:
            return  # closed at the next tick; nothing more from it until then
        sock = self._sock
        if event & _ERROR:
            self.close(None)
            return
        if self._phase is _Phase.DIALLING:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self.close(None)
                return
            self._phase = _Phase.HANDSHAKE
            assert self._handshake is not None
            self._queue(self._handshake.opening())
        if event & _WRITE or self._wbuf:
            self._flush(in_event=True)
        if self._sock is not sock:
            return
        if event & _READ:
            self._read(sock)
        if self._sock is sock:
            self._subscribe(_READ | _ERROR | (_WRITE if len(self._wbuf) > self._wpos else 0))

    def _read(self, sock: socket.socket) -> None:
        budget = READ_BUDGET_BYTES
        while budget > 0 and self._sock is sock:
            handshake = self._handshake
            want = handshake.wanted if handshake is not None else RECV_CHUNK_BYTES
            try:
                data = sock.recv(want)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close(None)
                return
            if not data:
                self.close(None)
                return
            self._last_recv = time.monotonic()
            budget -= len(data)
            if handshake is not None:
                self._feed_handshake(handshake, data)
            else:
                self._feed_frames(data)

    def _feed_handshake(self, handshake: Handshake, data: bytes) -> None:
        try:
            reply = handshake.feed(data)
        except HandshakeError as exc:
            self.close(exc.reason, str(exc))
            return
        if reply:
            self._queue(reply)
            self._flush(in_event=True)
        if not handshake.done or self._sock is None:
            return
        self._handshake = None
        self._session = handshake.session()
        self._phase = _Phase.OPEN
        self._hub.pending.pop(self, None)
        log.debug("raft link %s authenticated (dialler %s)", self.peer, handshake.dialler)
        if handshake.dialler:
            if self._on_connected is not None:
                self._on_connected()
        elif self.on_authenticated is not None:
            self.on_authenticated(self)

    def _feed_frames(self, data: bytes) -> None:
        sock = self._sock
        try:
            frames = self._reader.feed(data)
        except FrameError as exc:
            self.close(exc.reason, str(exc))
            return
        for frame in frames:
            try:
                message = self._decode(frame)
            except FrameError as exc:
                self.close(exc.reason, str(exc))
                return
            except Exception as exc:  # whatever zlib or pickle raises on an opened frame
                self.close("bad_frame", f"{type(exc).__name__}: {exc}"[:200])
                return
            if self._on_message is not None:
                self._on_message(message)
            if self._sock is not sock:
                return

    def _decode(self, data: bytes) -> Any:
        """Open the frame under this connection's key, then decode it (a compressed body
        bounded by `frame_bytes_max` once inflated too)."""
        session = self._session
        if session is None:  # pragma: no cover - frames are read only once OPEN
            raise FrameError("bad_frame", "frame before the handshake")
        return decode_message(session.open(data), self._hub.limits.frame_bytes_max)

    # -- writing ---------------------------------------------------------------------------------

    def _queue(self, data: bytes) -> None:
        self._wbuf += data

    def _flush(self, *, in_event: bool) -> None:
        sock = self._sock
        if sock is None or self._phase is _Phase.DIALLING:
            return
        while self._wpos < len(self._wbuf):
            try:
                with memoryview(self._wbuf) as view:
                    sent = sock.send(view[self._wpos :])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                if in_event:
                    self.close(None)
                elif not self.doomed:
                    self._hub.doom(self, None)
                return
            if sent <= 0:
                break
            self._wpos += sent
            self._last_send = time.monotonic()
        if self._wpos == len(self._wbuf):
            self._wbuf, self._wpos = bytearray(), 0
        elif self._wpos > len(self._wbuf) // 2:
            del self._wbuf[: self._wpos]
            self._wpos = 0
        if not in_event and self._sock is sock:
            self._subscribe(_READ | _ERROR | (_WRITE if len(self._wbuf) > self._wpos else 0))


class _Listener:
    """The Raft server socket. Checks the peer's host before reading a byte, bounds the
    handshakes in flight, and hands a connection to pysyncobj only once it is proven."""

    def __init__(
        self,
        hub: _Hub,
        host: str,
        port: int,
        allowed: Callable[[bool], set[str]],
        on_authenticated: Callable[[_Connection], None],
    ) -> None:
        self._hub = hub
        self._host = host
        self._port = port
        self._allowed = allowed
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
                _abort(conn_sock)
            conn_sock.close()
            hub.refusals.refuse("address_not_allowed", peer)
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
        conn = _Connection(hub, conn_sock, peer)
        conn.on_authenticated = self._on_authenticated
        hub.pending[conn] = None


class HardenedTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCPTransport (node bookkeeping, reconnects, rand-key exchange) with every
    connection and the server socket replaced by the guarded ones above. Construct it
    through `HardenedTransport.factory(...)`, which is what SyncObj's `transportClass` takes."""

    def __init__(
        self,
        syncObj: Any,  # pysyncobj calls it with its own names
        selfNode: Any,
        otherNodes: Any,
        *,
        limits: TransportLimits,
        secret: str,
        refusals: Refusals,
    ) -> None:
        limits.validate()
        if syncObj.encryptor:
            # Its rand-key exchange and Fernet frames would run inside our sealed ones.
            raise ValueError(
                "HardenedTransport seals every frame itself: leave SyncObjConf.password unset"
            )
        self._ripple_hub = _Hub(
            poller=syncObj._poller,
            limits=limits,
            key=handshake_key(secret),
            refusals=refusals,
            conf=syncObj.conf,
        )
        self._ripple_host_ips: dict[str, set[str]] = {}
        self._ripple_allowed: set[str] = set()
        self._ripple_allowed_at = float("-inf")
        super().__init__(syncObj, selfNode, otherNodes)

    @classmethod
    def factory(
        cls, *, limits: TransportLimits, secret: str, refusals: Refusals
    ) -> Callable[[Any, Any, Any], HardenedTransport]:
        def make(sync_obj: Any, self_node: Any, other_nodes: Any) -> HardenedTransport:
            return cls(
                sync_obj, self_node, other_nodes, limits=limits, secret=secret, refusals=refusals
            )

        return make

    def _allowed_ips(self, missed: bool) -> set[str]:
        """The addresses of the configured nodes' hosts; `missed`: one just connected from
        elsewhere, so look again if the last lookup is ALLOWED_HOSTS_RETRY_S old."""
        now = time.monotonic()
        age = now - self._ripple_allowed_at
        if age > ALLOWED_HOSTS_REFRESH_S or (missed and age > ALLOWED_HOSTS_RETRY_S):
            known = self._ripple_host_ips
            for node in self._nodes:
                # A failed lookup keeps the host's last addresses rather than shutting a
                # configured peer out until the next refresh.
                known[node.host] = host_ips(node.host) or known.get(node.host, set())
            hosts = {node.host for node in self._nodes}
            self._ripple_allowed = set().union(*(ips for h, ips in known.items() if h in hosts))
            self._ripple_allowed_at = now
        return self._ripple_allowed

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
            self._onNewIncomingConnection,
        )

    def addNode(self, node: Any) -> None:
        self._nodes.add(node)
        self._nodeAddrToNode[node.address] = node
        self._ripple_allowed_at = float("-inf")  # a new node's host is allowed from now on
        if self._shouldConnect(node):
            conn = _Connection(self._ripple_hub)
            conn.setOnConnectedCallback(lambda: self._onOutgoingConnected(conn))
            conn.setOnMessageReceivedCallback(lambda m: self._onMessageReceived(node, m))
            conn.setOnDisconnectedCallback(lambda: self._onDisconnected(conn))
            self._connections[node] = conn

    def _onIncomingMessageReceived(self, conn: _Connection, message: Any) -> None:
        # The peer names the node it is. Only configured nodes, from that node's host: no
        # read-only nodes and no utility commands (status, add, remove, transfer) here.
        node = self._nodeAddrToNode.get(message) if isinstance(message, str) else None
        peer_ip = _normalize_ip(conn.peer.rsplit(":", 1)[0])
        if node is None or peer_ip not in self._ripple_host_ips.get(node.host, set()):
            what = message if isinstance(message, str) else type(message).__name__
            self._unknownConnections.discard(conn)
            conn.close("unknown_peer", f"claims {what!r}"[:200])
            return
        super()._onIncomingMessageReceived(conn, message)

    def _onTick(self) -> None:
        self._ripple_hub.tick()
        super()._onTick()

    def destroy(self) -> None:
        super().destroy()
        for conn in list(self._ripple_hub.live):
            conn.close(None)
        self._ripple_hub.pending.clear()
        self._ripple_hub.doomed.clear()
