"""testkit/flood.py, the overload cells' load generator, against a local HTTP/1.1 server that
answers every other request 503 with Retry-After: answers counted by status, a shed answer
counted with its Retry-After, an open-loop schedule kept and a closed loop one in flight per
connection, and a request cut across reads still counted once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from testkit.flood import LoadProcs, Tally, _answers, _Conn

REQUEST = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, pipelined requests read in turn
    served = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with _Handler.lock:
            _Handler.served += 1
            shed = _Handler.served % 2 == 0
        body = b'{"ok":true}'
        self.send_response(503 if shed else 200)
        if shed:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield "127.0.0.1", httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=10.0)


def test_an_open_loop_keeps_its_rate_and_counts_answers_by_status(
    server: tuple[str, int],
) -> None:
    procs = LoadProcs()
    procs.start(2, *server, [REQUEST], 200.0, 2, 8, 1.5)
    t = procs.tally()
    assert t.processes == 2
    # Each process offers its 200/s on schedule (the server reads all: nothing held).
    assert t.held == 0
    assert 350 <= t.rate(t.offered) <= 450, vars(t)
    assert t.ok + t.shed + t.other <= t.offered and t.other == 0
    assert t.ok > 0 and t.shed > 0 and t.shed_with_retry_after == t.shed, vars(t)


def test_a_closed_loop_keeps_one_request_in_flight_per_connection(
    server: tuple[str, int],
) -> None:
    procs = LoadProcs()
    procs.start(1, *server, [REQUEST], None, 3, 1, 1.0)
    t = procs.tally()
    # Each connection sends again only once answered: at most one unanswered each at the end.
    assert t.offered - (t.ok + t.shed) <= 3 and t.ok > 0, vars(t)


def test_an_answer_cut_across_reads_is_counted_once(server: tuple[str, int]) -> None:
    c = _Conn(*server)
    try:
        c.unanswered, t = 2, Tally()
        whole = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}"
        c.rbuf += whole[:40]
        _answers(c, t)
        assert (t.shed, c.unanswered) == (0, 2)
        c.rbuf += whole[40:] + b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{}"
        _answers(c, t)
        assert (t.shed, t.shed_with_retry_after, t.ok, c.unanswered) == (1, 1, 0, 1)
        c.rbuf += b"}"
        _answers(c, t)
        assert (t.ok, c.unanswered, bytes(c.rbuf)) == (1, 0, b"")
    finally:
        c.sock.close()
