"""The HTTP front door (coordinator/service/front.py) answers exactly as aiohttp does.

Two one-node clusters of real `ripple coordinator` processes, one with the front door (the
default) and one with `http_front_door = false`, hold the same workers (same ids, same
incarnations, the same secret, so the same tokens). Every request below goes as raw bytes to
both, on a fresh connection each; status, JSON body and the headers a client acts on must be
the same. The requests are the hot routes' good and bad cases (which the front door serves
itself) and the malformed, smuggling and unusual ones (which it must hand to aiohttp intact).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import Cluster, worker_token

PIECE_WAIT_S = 0.05
READ_TIMEOUT_S = 10.0
ORIGIN_HEADERS = ("Vary", "Access-Control-Allow-Origin", "Retry-After", "Location", "Allow")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Cluster]]:
    root = tmp_path_factory.mktemp("front-door")
    (root / "front").mkdir()
    (root / "aiohttp").mkdir()
    # Long liveness timeouts and no checkpoint rounds: the registered workers are fake
    # (no address answers) and must stay ACTIVE through the module.
    settings: dict[str, Any] = {
        "nodes": 1,
        "min_cluster_size": 1_000,
        "checkpoint_interval_s": 3600,
        "heartbeat_timeout_s": 600,
        "store": f"file://{root}/store",  # one store: fenced references read the same
    }
    front = Cluster(root / "front", **settings)
    plain = Cluster(root / "aiohttp", **settings, http_front_door=False)
    with front.running(), plain.running():
        for c in (front, plain):
            for wid in ("w1", "w2"):
                reply = c.write_via_any(
                    "/v1/workers", {"worker_id": wid, "address": "http://127.0.0.1:9"}
                )
                assert reply.status == 200 and reply.body["incarnation"] == 1, reply
        yield front, plain


def _port(c: Cluster) -> int:
    return int(c.url(c.specs[0].id).rsplit(":", 1)[1])


def exchange(port: int, data: bytes, *, half_close: bool = False) -> bytes:
    """Send `data` on a new connection and read until the server closes or stays quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        chunks: list[bytes] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        s.settimeout(0.5)
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                if chunks:
                    break
                continue
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def answers(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP/1.1 answers in `raw`, in order (each with a Content-Length)."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:length]))
        raw = rest[length:]
    return out


def _heartbeat(wid: str = "w1", body: bytes | None = None, extra: str = "", **kw: str) -> bytes:
    token = kw.get("token", worker_token(wid, 1))
    payload = b'{"incarnation":1,"load":0.5,"partitions":{}}' if body is None else body
    return (
        f"POST {kw.get('path', f'/v1/workers/{wid}/heartbeat')} HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\n{extra}"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


CHUNKED = (
    b"POST /v1/workers/w1/heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
    + worker_token("w1", 1).encode()
    + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"2c\r\n"
    + b'{"incarnation":1,"load":0.5,"partitions":{}}'
    + b"\r\n0\r\n\r\n"
)

CASES: dict[str, bytes] = {
    "heartbeat": _heartbeat(),
    "heartbeat_origin": _heartbeat(extra="Origin: http://127.0.0.1:1\r\n"),
    "heartbeat_other_worker_token": _heartbeat(token=worker_token("w2", 1)),
    "heartbeat_no_token": _heartbeat(token=""),
    "heartbeat_garbage_token": _heartbeat(token="nope"),
    "heartbeat_bad_json": _heartbeat(body=b"{not json"),
    "heartbeat_empty_body": _heartbeat(body=b""),
    "heartbeat_wrong_incarnation": _heartbeat(body=b'{"incarnation":7,"load":0,"partitions":{}}'),
    "heartbeat_bad_load": _heartbeat(body=b'{"incarnation":1,"load":"x","partitions":{}}'),
    "heartbeat_unknown_worker": _heartbeat("w9"),
    "heartbeat_id_too_long": _heartbeat("w" * 65),
    "heartbeat_escaped_id": _heartbeat(path="/v1/workers/w%31/heartbeat"),
    "heartbeat_query": _heartbeat(path="/v1/workers/w1/heartbeat?x=1"),
    "heartbeat_trailing_slash": _heartbeat(path="/v1/workers/w1/heartbeat/"),
    "heartbeat_chunked": CHUNKED,
    "smuggle_cl_and_te": _heartbeat(extra="Transfer-Encoding: chunked\r\n"),
    "two_content_lengths": _heartbeat(extra="Content-Length: 3\r\n"),
    "expect_continue": _heartbeat(extra="Expect: 100-continue\r\n"),
    "obs_fold": _heartbeat(extra="X-A: 1\r\n  folded\r\n"),
    "space_before_colon": _heartbeat(extra="X-A : 1\r\n"),
    "non_ascii_header": _heartbeat(extra="X-A: caf\u00e9\r\n"),
    "bare_lf": _heartbeat().replace(b"\r\n", b"\n"),
    "http_1_0": _heartbeat().replace(b"HTTP/1.1", b"HTTP/1.0", 1),
    # Forms llhttp reads but the front door does not serve: aiohttp answers them.
    "double_space_request_line": _heartbeat().replace(b"POST ", b"POST  ", 1),
    "empty_line_before_request": b"\r\n" + _heartbeat(),
    "absolute_form_target": _heartbeat(path="http://127.0.0.1/v1/workers/w1/heartbeat"),
    "lowercase_method": _heartbeat().replace(b"POST", b"post", 1),
    "put_heartbeat": _heartbeat().replace(b"POST", b"PUT", 1),
    "too_large": _post("/v1/checkpoints", b"x" * (1_048_576 + 1)),
    # Past the front door's own body bound (64 KiB): aiohttp reads it, token first.
    "large_body_no_token": _heartbeat(token="", body=b" " * 100_000 + b"{}"),
    "large_body_genuine": _heartbeat(
        body=b'{"incarnation":1,"load":0.5,"partitions":{}}' + b" " * 100_000
    ),
    "negative_length": _heartbeat().replace(b"Content-Length: 44", b"Content-Length: -1"),
    "register_missing_body": _post("/v1/workers", b""),
    "register_bad_id": _post("/v1/workers", b'{"worker_id":"a b","address":"http://127.0.0.1:9"}'),
    "register_bad_address": _post("/v1/workers", b'{"worker_id":"w1","address":"ftp://x"}'),
    "register_live_id": _post("/v1/workers", b'{"worker_id":"w1","address":"http://127.0.0.1:9"}'),
    "checkpoints_no_token": _post("/v1/checkpoints", b'{"worker_id":"w1"}'),
    "checkpoints_fenced": _post(
        "/v1/checkpoints",
        b'{"worker_id":"w1","incarnation":1,"checkpoints":[{"partition":0,"epoch":1,'
        b'"offset":5,"uri":"file:///elsewhere/x"}]}',
        f"Authorization: Bearer {worker_token('w1', 1)}\r\n",
    ),
    "get_health": b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n",
    "unknown_path": _post("/v1/nothing", b"{}"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_answer_as_aiohttp(pair: tuple[Cluster, Cluster], case: str) -> None:
    front, plain = pair
    raw = CASES[case]
    # Origins differ by port between the clusters; a cross-origin test names each its own.
    got = {}
    for name, c in (("front", front), ("aiohttp", plain)):
        data = raw.replace(b"http://127.0.0.1:1", c.specs[0].url.encode())
        replies = answers(exchange(_port(c), data))
        assert replies, f"{name}: no answer to {case}"
        status, headers, body = replies[0]
        assert b"Traceback" not in body and status != 500, (name, case, body)
        kept = {h: headers.get(h.lower()) for h in ORIGIN_HEADERS}
        if kept["Access-Control-Allow-Origin"] is not None:
            kept["Access-Control-Allow-Origin"] = "<the node's own origin>"
        dynamic = case == "get_health"  # indexes and times move between the two calls
        got[name] = (status, kept, headers.get("content-type"), None if dynamic else body)
    assert got["front"] == got["aiohttp"], case


def test_pipelined_requests_answered_in_order_then_handed_over(
    pair: tuple[Cluster, Cluster],
) -> None:
    """Three hot requests and a GET in one write: four answers in order, the last from
    aiohttp (its Server header), on the one connection."""
    front, _ = pair
    data = _heartbeat() + _heartbeat("w2") + _heartbeat(token="") + CASES["get_health"]
    replies = answers(exchange(_port(front), data))
    assert [r[0] for r in replies] == [200, 200, 401, 200]
    assert b'"generation"' in replies[0][2] and b'"assignment"' in replies[1][2]
    assert "server" not in replies[0][1] and "aiohttp" in replies[3][1]["server"]
    assert b'"role"' in replies[3][2]


def test_a_large_body_goes_to_aiohttp(pair: tuple[Cluster, Cluster]) -> None:
    """A body past front.BODY_BYTES_MAX is never buffered by the front door: aiohttp (its
    Server header) answers it, checking the token before it reads the body."""
    front, _ = pair
    replies = answers(exchange(_port(front), CASES["large_body_no_token"]))
    assert replies[0][0] == 401 and "aiohttp" in replies[0][1]["server"]
    replies = answers(exchange(_port(front), CASES["large_body_genuine"]))
    assert replies[0][0] == 200 and "aiohttp" in replies[0][1]["server"]


def test_lenient_forms_go_to_aiohttp(pair: tuple[Cluster, Cluster]) -> None:
    """Request lines llhttp reads but that are not the plain form are aiohttp's (its Server
    header), not served by the front door."""
    front, _ = pair
    for case in ("double_space_request_line", "empty_line_before_request", "absolute_form_target"):
        replies = answers(exchange(_port(front), CASES[case]))
        assert replies and "aiohttp" in replies[0][1].get("server", ""), case


def test_connection_close_and_half_close(pair: tuple[Cluster, Cluster]) -> None:
    front, _ = pair
    replies = answers(exchange(_port(front), _heartbeat(extra="Connection: close\r\n")))
    assert [(r[0], r[1].get("connection")) for r in replies] == [(200, "close")]
    # A client that sends its request and shuts its side still gets the answer.
    replies = answers(exchange(_port(front), _heartbeat(), half_close=True))
    assert [r[0] for r in replies] == [200]


def test_registration_and_metrics_through_the_front_door(pair: tuple[Cluster, Cluster]) -> None:
    """A registration through the front door commits (the worker is listed) and is counted
    under the route aiohttp would have counted it under."""
    front, _ = pair
    body = b'{"worker_id":"w3","address":"http://127.0.0.1:9"}'
    replies = answers(exchange(_port(front), _post("/v1/workers", body)))
    assert replies[0][0] == 200 and b'"incarnation":1' in replies[0][2]
    workers = front.get(front.specs[0].id, "/v1/workers").body
    assert "w3" in {w["worker_id"] for w in workers["workers"]}
    text = front.get(front.specs[0].id, "/metrics").body
    assert 'route="/v1/workers"' in text and 'route="/v1/workers/{worker_id}/heartbeat"' in text
    served = _metric(text, "ripple_http_front_door_requests_total")
    handed = _metric(text, "ripple_http_front_door_handovers_total")
    assert served > 0 and handed > 0  # the module's GETs were handed over
    # One more registration through the front door is one more served request.
    body = b'{"worker_id":"w4","address":"http://127.0.0.1:9"}'
    assert answers(exchange(_port(front), _post("/v1/workers", body)))[0][0] == 200
    text = front.get(front.specs[0].id, "/metrics").body
    assert _metric(text, "ripple_http_front_door_requests_total") == served + 1


def _metric(text: str, name: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


def test_a_body_in_pieces(pair: tuple[Cluster, Cluster]) -> None:
    """Head and body arriving in separate segments are put together before the answer."""
    front, _ = pair
    data = _heartbeat()
    with socket.create_connection(("127.0.0.1", _port(front)), timeout=READ_TIMEOUT_S) as s:
        for cut in (10, len(data) - 20):
            s.sendall(data[:cut])
            data = data[cut:]
            # A part of a request gets no answer: waiting for one (bounded) also lets each
            # piece arrive alone.
            s.settimeout(PIECE_WAIT_S)
            with pytest.raises(TimeoutError):
                s.recv(65536)
        s.settimeout(READ_TIMEOUT_S)
        s.sendall(data)
        reply = s.recv(65536)
    assert answers(reply)[0][0] == 200


def test_follower_redirects_hot_routes(tmp_path: Path) -> None:
    """On a follower the front door answers 307 to the leader, as aiohttp's route does."""
    c = Cluster(tmp_path, open_registration=True)
    with c.running():
        leader = c.leader()
        follower = next(s for s in c.specs if s.id != leader)
        port = int(follower.http.rsplit(":", 1)[1])
        replies = answers(exchange(port, _heartbeat()))
        status, headers, body = replies[0]
        assert status == 307 and headers["ripple-leader"] == leader
        assert headers["location"].endswith("/v1/workers/w1/heartbeat")
        assert b'"not_leader"' in body
