"""A store that fails on a schedule: an HTTP reverse proxy in front of an S3 server (moto).

Workers get this proxy as their S3 endpoint; the test's own clients (producer, oracle) keep
talking to the server directly. Outside every fault window each request is forwarded whole
(method, path and query, headers except hop-by-hop ones, the complete body) and the server's
answer comes back whole. A fault window (`Window`: a fault, a start and an end, relative to
when it was scheduled, and a rate) makes the proxy, for that share of the requests arriving
inside it:

- answer as S3 does when it sheds load or breaks: ``503 SlowDown``, ``503
  ServiceUnavailable`` or ``500 InternalError`` with S3's XML ``<Error>``, nothing forwarded;
- reset the connection (RST) after reading the request, before any answer;
- wait `delay_s` before forwarding (latency);
- hold the request without an answer (past the client's read timeout), then reset it;
- while an ``UNREACHABLE`` window is open, not listen at all: connects are refused by the
  kernel, open connections are reset, and the same port listens again when the window ends.

Which request a rate hits is drawn from one `random.Random` whose seed is printed and kept in
`seed`, so a run replays. Every injected fault is counted per kind (`counts()`), so a test can
prove its fault happened.

Invariants: a request is either forwarded whole or not forwarded at all (bodies are read
completely, bounded by ``BODY_BYTES_MAX``, before the decision, so a refused PUT never reaches
the server half-written). Every fault ends: a window has an end no more than ``WINDOW_S_MAX``
after its start, a held request is released by ``HOLD_S_MAX``, and `close()` ends them all.

Threads: one accept loop (it alone opens and closes the listening socket) and one thread per
client connection; every socket has a timeout and `close()` joins every thread with a bound.
"""

from __future__ import annotations

import contextlib
import enum
import http.client
import random
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from testkit.faults.threads import Threads

__all__ = ["OUTAGE_FAULTS", "Fault", "S3FaultProxy", "Window"]

BODY_BYTES_MAX = 64 * 1024 * 1024
UPSTREAM_TIMEOUT_S = 15.0
# An idle keep-alive connection from a client ends after this; boto3 simply reconnects.
CLIENT_IDLE_TIMEOUT_S = 30.0
POLL_S = 0.05
LISTEN_SWITCH_TIMEOUT_S = 2.0
WINDOW_S_MAX = 3600.0
HOLD_S_MAX = 120.0
DELAY_S_MAX = 60.0
LISTEN_BACKLOG = 64
# RFC 9110 §7.6.1 connection-specific fields, plus the ones this proxy recomputes itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",  # answered here (100 Continue) before the body is read
        "content-length",
    }
)


class Fault(enum.Enum):
    """What a window does to the requests it hits (an S3 error's value is its error code)."""

    SLOW_DOWN = "SlowDown"
    SERVICE_UNAVAILABLE = "ServiceUnavailable"
    INTERNAL_ERROR = "InternalError"
    RESET = "reset"
    LATENCY = "latency"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"


ERROR_STATUS = {Fault.SLOW_DOWN: 503, Fault.SERVICE_UNAVAILABLE: 503, Fault.INTERNAL_ERROR: 500}
ERROR_MESSAGE = {
    Fault.SLOW_DOWN: "Please reduce your request rate.",
    Fault.SERVICE_UNAVAILABLE: "Please reduce your request rate.",
    Fault.INTERNAL_ERROR: "We encountered an internal error. Please try again.",
}
# The two answers S3 gives when it sheds load: what an outage of the store looks like.
OUTAGE_FAULTS = (Fault.SERVICE_UNAVAILABLE, Fault.SLOW_DOWN)


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """`fault` for a `rate` share of the requests arriving in [start_s, end_s), in seconds
    after the schedule call. `delay_s`: the latency added (LATENCY), or how long a request
    is held (TIMEOUT; 0 holds it to the window's end)."""

    fault: Fault
    start_s: float
    end_s: float
    rate: float = 1.0
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.start_s < self.end_s <= self.start_s + WINDOW_S_MAX:
            raise ValueError(
                f"window [{self.start_s}, {self.end_s}) must start at or after 0 and end"
                f" after its start, within {WINDOW_S_MAX} s"
            )
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"rate must be in (0, 1], got {self.rate}")
        if self.fault is Fault.UNREACHABLE and self.rate != 1.0:
            raise ValueError("an unreachable window refuses every connection: rate must be 1")
        if not 0.0 <= self.delay_s <= DELAY_S_MAX:
            raise ValueError(f"delay_s must be in [0, {DELAY_S_MAX}], got {self.delay_s}")
        if self.fault is Fault.LATENCY and self.delay_s == 0.0:
            raise ValueError("a latency window needs delay_s > 0")


@dataclass(frozen=True, slots=True)
class _Scheduled:
    window: Window
    start: float  # time.monotonic()
    end: float


@dataclass(frozen=True, slots=True)
class _Decision:
    fault: Fault | None
    hold_s: float = 0.0


class _BodyTooLarge(Exception):
    pass


class _Reset(Exception):
    """Raised by a handler to end its connection with a TCP reset, not an answer."""


class S3FaultProxy:
    """Forward to `upstream` (``http://host:port``), injecting the faults scheduled."""

    def __init__(self, upstream: str, *, seed: int | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.seed = random.SystemRandom().randrange(2**32) if seed is None else seed
        print(f"s3 fault proxy seed={self.seed}", file=sys.stderr)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._windows: list[_Scheduled] = []
        self._counts = dict.fromkeys(Fault, 0)
        self._forwarded = 0
        self._upstream_errors = 0
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._threads = Threads("s3-fault-proxy")
        self._started = False
        self._listener: socket.socket | None = socket.create_server(
            ("127.0.0.1", 0), backlog=LISTEN_BACKLOG
        )
        self._listener.settimeout(POLL_S)
        self._listening = threading.Event()
        self._listening.set()
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    # -- control -----------------------------------------------------------------------------

    def start(self) -> None:
        self._threads.start(self._accept_loop)
        self._started = True

    def __enter__(self) -> S3FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schedule(self, windows: Sequence[Window]) -> None:
        """Add `windows`, their times counted from now. Returns once an unreachable window
        open now has taken the listening socket down."""
        now = time.monotonic()
        added = [_Scheduled(w, now + w.start_s, now + w.end_s) for w in windows]
        with self._lock:
            # Ended windows go, so a long soak's requests do not scan its whole history.
            self._windows = [s for s in self._windows if s.end > now] + added
        if self._started and self._unreachable(time.monotonic()):
            deadline = time.monotonic() + LISTEN_SWITCH_TIMEOUT_S
            while self._listening.is_set() and time.monotonic() < deadline:
                time.sleep(POLL_S / 5)

    def inject(
        self, fault: Fault, *, duration_s: float, rate: float = 1.0, delay_s: float = 0.0
    ) -> None:
        """`fault` from now for `duration_s` (the setter form of `schedule`)."""
        self.schedule(
            [Window(fault=fault, start_s=0.0, end_s=duration_s, rate=rate, delay_s=delay_s)]
        )

    def clear(self) -> None:
        """End every fault now, scheduled or open."""
        with self._lock:
            self._windows.clear()

    @contextmanager
    def outage(self, fault: Fault = Fault.SERVICE_UNAVAILABLE) -> Iterator[None]:
        """Every request refused with `fault` (an S3 error) for the block, at most
        WINDOW_S_MAX."""
        if fault not in ERROR_STATUS:
            raise ValueError(f"an outage answers an S3 error, not {fault}")
        window = Window(fault=fault, start_s=0.0, end_s=WINDOW_S_MAX)
        now = time.monotonic()
        entry = _Scheduled(window, now, now + WINDOW_S_MAX)
        with self._lock:
            self._windows.append(entry)
        try:
            yield
        finally:
            with self._lock:
                if entry in self._windows:
                    self._windows.remove(entry)

    def counts(self) -> dict[Fault, int]:
        """Faults injected so far, per kind (UNREACHABLE: times the listener went down)."""
        with self._lock:
            return dict(self._counts)

    @property
    def refused(self) -> int:
        """Requests answered with an S3 error instead of being forwarded."""
        with self._lock:
            return sum(self._counts[f] for f in ERROR_STATUS)

    @property
    def forwarded(self) -> int:
        with self._lock:
            return self._forwarded

    @property
    def upstream_errors(self) -> int:
        with self._lock:
            return self._upstream_errors

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def close(self) -> None:
        self._stop.set()  # the accept loop and every held request see it within POLL_S
        self.clear()
        self._reset_connections()
        self._threads.join()
        if self._listener is not None:  # never started: no accept loop closed it
            self._listener.close()

    # -- the accept loop (owns the listening socket) ------------------------------------------

    def _unreachable(self, now: float) -> bool:
        with self._lock:
            return any(
                s.window.fault is Fault.UNREACHABLE and s.start <= now < s.end
                for s in self._windows
            )

    def _accept_loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._switch_listener()
                if self._listener is None:
                    self._stop.wait(POLL_S)
                    continue
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                self._spawn(conn)
        finally:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            self._listening.clear()

    def _switch_listener(self) -> None:
        down = self._unreachable(time.monotonic())
        if down and self._listener is not None:
            # Closing the listener makes the kernel refuse connects (RST to the SYN) and
            # reset the ones still in its backlog; the open ones are reset here.
            self._listener.close()
            self._listener = None
            self._listening.clear()
            with self._lock:
                self._counts[Fault.UNREACHABLE] += 1
            self._reset_connections()
        elif not down and self._listener is None:
            # SO_REUSEADDR (create_server's default) lets the same port listen again at once.
            self._listener = socket.create_server(("127.0.0.1", self.port), backlog=LISTEN_BACKLOG)
            self._listener.settimeout(POLL_S)
            self._listening.set()

    def _spawn(self, conn: socket.socket) -> None:
        conn.settimeout(CLIENT_IDLE_TIMEOUT_S)
        # Headers and body leave in two writes: without this, Nagle's algorithm holds the
        # body for the client's delayed ACK (40 ms a request).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._conns.add(conn)
        self._threads.start(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        try:
            # The handler runs the whole keep-alive connection in its constructor; it reads
            # only `server` from its server, and this proxy is what it needs there.
            _Handler(conn, conn.getpeername(), self)  # type: ignore[arg-type]
        except _Reset:
            _reset(conn)
        except OSError:
            pass  # a client killed mid-request, or a connection reset by an outage
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _reset_connections(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _reset(c)

    # -- called from connection threads -------------------------------------------------------

    def _decide(self) -> _Decision:
        """The fault this request meets (counted), or none: it is forwarded."""
        now = time.monotonic()
        with self._lock:
            for s in self._windows:
                if not s.start <= now < s.end:
                    continue
                if s.window.fault is Fault.UNREACHABLE:
                    self._counts[Fault.RESET] += 1
                    return _Decision(Fault.RESET)
                if self._rng.random() >= s.window.rate:
                    continue
                self._counts[s.window.fault] += 1
                hold_s = s.window.delay_s
                if s.window.fault is Fault.TIMEOUT and hold_s == 0.0:
                    hold_s = s.end - now
                return _Decision(s.window.fault, min(hold_s, HOLD_S_MAX))
        return _Decision(None)

    def _counted_forward(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self._forwarded += 1
            else:
                self._upstream_errors += 1


def _reset(conn: socket.socket) -> None:
    """Close `conn` with a TCP RST (SO_LINGER 0) rather than an orderly FIN."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        conn.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100 Continue for `Expect` uploads
    timeout = CLIENT_IDLE_TIMEOUT_S
    server: S3FaultProxy  # type: ignore[assignment]  # the proxy stands in for a server

    def log_message(self, format: str, *args: object) -> None:
        pass  # the counters are the record; per-request lines would flood pytest output

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        n = int(length)
        if n > BODY_BYTES_MAX:
            raise _BodyTooLarge(n)
        return self.rfile.read(n)

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size = int(self.rfile.readline(1024).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers, then the blank line
                    pass
                return bytes(out)
            if len(out) + size > BODY_BYTES_MAX:
                raise _BodyTooLarge(len(out) + size)
            out += self.rfile.read(size)
            self.rfile.readline(1024)  # CRLF after the chunk

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response_only(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _s3_error(self, status: int, code: str, message: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<Resource>{self.path.split('?', 1)[0]}</Resource>"
            f"<RequestId>{request_id}</RequestId></Error>"
        ).encode()
        self._reply(
            status,
            [("Content-Type", "application/xml"), ("x-amz-request-id", request_id)],
            body,
        )

    def _proxy(self) -> None:
        proxy = self.server
        try:
            body = self._read_body()
        except (_BodyTooLarge, ValueError):
            self.close_connection = True  # the unread body makes the stream unusable
            self._s3_error(400, "EntityTooLarge", "request body over the proxy's bound")
            return
        decision = proxy._decide()
        fault = decision.fault
        if fault in ERROR_STATUS:
            assert fault is not None
            self._s3_error(ERROR_STATUS[fault], fault.value, ERROR_MESSAGE[fault])
            return
        if fault is Fault.RESET:
            raise _Reset
        if fault is Fault.TIMEOUT:
            proxy._stop.wait(decision.hold_s)
            raise _Reset
        if fault is Fault.LATENCY:
            proxy._stop.wait(decision.hold_s)
        self._forward(body)

    def _forward(self, body: bytes | None) -> None:
        proxy = self.server
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
        conn = http.client.HTTPConnection(
            proxy.upstream_host, proxy.upstream_port, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            # The client's own Host header is forwarded (it is what the request was signed
            # with); putrequest must not add a second one.
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read(BODY_BYTES_MAX + 1)
            if len(data) > BODY_BYTES_MAX:
                raise _BodyTooLarge(len(data))
            status, upstream_headers = resp.status, resp.getheaders()
        except (OSError, http.client.HTTPException, _BodyTooLarge) as exc:
            proxy._counted_forward(ok=False)
            self.close_connection = True
            self._s3_error(502, "InternalError", f"proxy: upstream failed: {exc!r}")
            return
        finally:
            conn.close()
        proxy._counted_forward(ok=True)
        kept = [(k, v) for k, v in upstream_headers if k.lower() not in HOP_BY_HOP]
        if self.command == "HEAD":
            # A HEAD answer has no body but names the object's length.
            length = next((v for k, v in upstream_headers if k.lower() == "content-length"), "0")
            self.send_response_only(status)
            for k, v in kept:
                self.send_header(k, v)
            self.send_header("Content-Length", length)
            self.end_headers()
            return
        self._reply(status, kept, data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy
