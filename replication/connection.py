"""One Raft TCP connection (what all of a node's connections share is `replication.hub`).

`Connection` is the socket side of `replication.wire`: it dials or is accepted, runs the
handshake, then seals, frames and sends pysyncobj's messages and opens, checks and delivers
the ones it receives, with the interface pysyncobj's TCPTransport expects of its own
connection. Invariants it keeps, with the bounds of `TransportLimits` and the hub's clock:

- Nothing is read beyond what the handshake wants until the peer has proved the secret.
- Each handshake has a deadline (`handshake_timeout_s`); an authenticated connection that
  has received nothing for `idle_timeout_s` is closed, and each side sends an empty
  keep-alive frame after a third of that without sending, so quiet links stay up and
  half-open ones are found.
- One poll event reads at most READ_BUDGET_BYTES, so one busy peer cannot hold up the tick.
- A connection other than the one whose event is being handled is closed on the next tick
  (`Hub.doom`), never in the middle of another's event.

It runs where pysyncobj ticks (`replication.ticker`); nothing here blocks.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import struct
from collections.abc import Callable
from enum import Enum
from typing import Any

from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, set_keepalive

from replication.hub import Hub
from replication.pysyncobj_pin import check_pysyncobj_version
from replication.wire import (
    KEEPALIVE_FRAME,
    NONCE_BYTES,
    FrameError,
    FrameReader,
    Handshake,
    HandshakeError,
    Session,
    decode_message,
    encode_frame,
    encode_message,
)
from shared.clock import monotonic_s

__all__ = ["Connection", "abort_on_close"]

check_pysyncobj_version()  # `Connection` is what pysyncobj's TCPTransport takes it for

log = logging.getLogger(__name__)

KEEPALIVE_FRACTION = 3  # send a keep-alive after idle_timeout_s / 3 of silence
RECV_CHUNK_BYTES = 1 << 16
READ_BUDGET_BYTES = 1 << 20  # per poll event: one busy peer cannot hold up the Raft tick

_LINGER_RESET = struct.pack("ii", 1, 0)


def abort_on_close(sock: socket.socket) -> None:
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


class Connection:
    """One Raft TCP connection; the interface pysyncobj's TCPTransport expects of its
    TcpConnection (connect, send, disconnect, state, callbacks, the rand-key attributes)."""

    def __init__(self, hub: Hub, sock: socket.socket | None = None, peer: str = "") -> None:
        self._hub = hub
        # pysyncobj's TCPTransport reads these; they stay None (its own encryption, and the
        # rand-key exchange that came with it, are off: `Session` seals every frame instead).
        self.encryptor: Any = None
        self.sendRandKey: Any = None
        self.recvRandKey: Any = None
        self.doomed = False
        self.peer = peer
        self.version = 0  # the transport version agreed with the peer, once authenticated
        self._on_message: Callable[[Any], None] | None = None
        self._on_connected: Callable[[], None] | None = None
        self._on_disconnected: Callable[[], None] | None = None
        self.on_authenticated: Callable[[Connection], None] | None = None
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
            self._handshake = self._new_handshake(dialler=False)
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
        self._handshake = self._new_handshake(dialler=True)
        self._subscribe(_READ | _WRITE | _ERROR)
        return True

    def _new_handshake(self, *, dialler: bool) -> Handshake:
        hub = self._hub
        return Handshake(
            dialler=dialler,
            key=hub.key,
            nonce=os.urandom(NONCE_BYTES),
            versions=hub.versions,
            cluster_id=hub.cluster_id,
        )

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
        now = monotonic_s(self._hub.clock)
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
                    abort_on_close(self._sock)
                hub.release(self._sock)
            self._sock = None
        self._mask = 0
        self._handshake = None
        self._session = None
        self.version = 0
        self._wbuf, self._wpos = bytearray(), 0
        self._reader = FrameReader(hub.limits.frame_bytes_max)

    def close(self, reason: str | None, detail: str = "", *, abort: bool = True) -> None:
        """Close now; count `reason` when there is one. Calls pysyncobj's disconnected
        callback last, as its own connection does (it may reconnect from inside it).
        `abort=False`: a FIN even for a refusal, so the peer reads what was sent last."""
        if reason is not None:
            self._hub.refusals.refuse(reason, self.peer, detail)
        was_open = self._phase is not _Phase.CLOSED
        if was_open:
            log.debug("raft link %s closed in %s (%s)", self.peer, self._phase.name, reason)
        # A refused stranger gets a reset: no TIME_WAIT state kept here for each one.
        self._drop_socket(abort=abort and reason is not None and self._phase is not _Phase.OPEN)
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
        """Bytes are waiting: a late tick, not a silent peer (the poll that follows
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
            self._last_recv = monotonic_s(self._hub.clock)
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
        refused = handshake.refused
        if refused is not None and self._sock is not None:
            # Our proof is out: the listener refuses us in turn, so let it read it (a FIN,
            # not a reset that could drop it unread).
            self.close(refused.reason, str(refused), abort=False)
            return
        if not handshake.done or self._sock is None:
            return
        self._handshake = None
        self._session = handshake.session()
        self.version = handshake.version
        self._phase = _Phase.OPEN
        self._hub.pending.pop(self, None)
        log.debug(
            "raft link %s authenticated at transport version %d (dialler %s)",
            self.peer,
            handshake.version,
            handshake.dialler,
        )
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
            self._last_send = monotonic_s(self._hub.clock)
        if self._wpos == len(self._wbuf):
            self._wbuf, self._wpos = bytearray(), 0
        elif self._wpos > len(self._wbuf) // 2:
            del self._wbuf[: self._wpos]
            self._wpos = 0
        if not in_event and self._sock is sock:
            self._subscribe(_READ | _ERROR | (_WRITE if len(self._wbuf) > self._wpos else 0))
