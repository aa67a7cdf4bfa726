"""A checkpoint-store outage the test controls: an HTTP reverse proxy in front of an S3 server.

Workers get this proxy as their S3 endpoint; the test's own clients (producer, oracle) keep
talking to the server directly. While up, every request is forwarded whole (method, path and
query, headers except hop-by-hop ones, the complete body) and the server's answer comes back
whole. While down, every request is answered at once with what S3 sends when it sheds load,
HTTP 503 and an XML ``<Error>`` (``ServiceUnavailable`` or ``SlowDown``), and nothing is
forwarded; each such refusal is counted, so a test can prove its outage was seen.

Invariant: a request is either forwarded whole or refused whole. Bodies are read completely
(bounded by ``BODY_BYTES_MAX``) before the up/down decision, so a refused PUT never reaches
the server half-written and a forwarded one is never cut short by the outage starting.

One ``ThreadingHTTPServer`` on 127.0.0.1 (port chosen by the kernel), one thread per client
connection; every socket has a timeout and ``close()`` stops the accept loop within a bound.
"""

from __future__ import annotations

import http.client
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["StoreOutageProxy"]

BODY_BYTES_MAX = 64 * 1024 * 1024
UPSTREAM_TIMEOUT_S = 15.0
# An idle keep-alive connection from a client ends after this; boto3 simply reconnects.
CLIENT_IDLE_TIMEOUT_S = 30.0
POLL_S = 0.1
CLOSE_TIMEOUT_S = 5.0
OUTAGE_CODES = ("ServiceUnavailable", "SlowDown")
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


class _BodyTooLarge(Exception):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, proxy: StoreOutageProxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy

    def handle_error(self, request: object, client_address: object) -> None:
        # A client killed with -9 mid-request resets its connection: part of the chaos,
        # not a proxy failure worth a traceback on stderr.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class StoreOutageProxy:
    """Forward to ``upstream`` (``http://host:port``) or, while down, refuse with S3's 503."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self._lock = threading.Lock()
        self._down_code: str | None = None
        self.forwarded = 0
        self.refused = 0
        self.upstream_errors = 0
        self._server = _Server(self)
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_S},
            name=f"store-outage-proxy-{self.port}",
            daemon=True,
        )
        self._started = False

    def start(self) -> None:
        self._thread.start()
        self._started = True

    def down(self, code: str = "ServiceUnavailable") -> None:
        if code not in OUTAGE_CODES:
            raise ValueError(f"outage code must be one of {OUTAGE_CODES}, got {code!r}")
        with self._lock:
            self._down_code = code

    def up(self) -> None:
        with self._lock:
            self._down_code = None

    @contextmanager
    def outage(self, code: str = "ServiceUnavailable") -> Iterator[None]:
        self.down(code)
        try:
            yield
        finally:
            self.up()

    def close(self) -> None:
        self.up()
        if self._started:
            # shutdown() returns once serve_forever notices, within POLL_S.
            self._server.shutdown()
            self._thread.join(CLOSE_TIMEOUT_S)
        self._server.server_close()

    # -- called from handler threads ---------------------------------------------------------

    def _decide(self) -> str | None:
        """The outage code if this request is refused (counted), None if it is forwarded."""
        with self._lock:
            if self._down_code is not None:
                self.refused += 1
            return self._down_code

    def _forwarded(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.forwarded += 1
            else:
                self.upstream_errors += 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100 Continue for `Expect` uploads
    timeout = CLIENT_IDLE_TIMEOUT_S

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
        assert isinstance(self.server, _Server)
        proxy = self.server.proxy
        try:
            body = self._read_body()
        except (_BodyTooLarge, ValueError):
            self.close_connection = True  # the unread body makes the stream unusable
            self._s3_error(400, "EntityTooLarge", "request body over the proxy's bound")
            return
        code = proxy._decide()
        if code is not None:
            self._s3_error(503, code, "Please reduce your request rate.")
            return
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
            proxy._forwarded(ok=False)
            self.close_connection = True
            self._s3_error(502, "InternalError", f"proxy: upstream failed: {exc!r}")
            return
        finally:
            conn.close()
        proxy._forwarded(ok=True)
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
