"""Security probes against a real three-node cluster, each a regression test.

Probe -> test:
- non-ASCII digits in a partition path             test_non_ascii_partition_digits
- non-ASCII / undecodable bearer tokens            test_non_ascii_and_undecodable_tokens
- integers past 64 bits in checkpoint bodies       test_integers_past_64_bits_are_400
- one idempotency-key space                        test_idempotency_keys_are_scoped
- bodies parsed before the token is checked        test_token_checked_before_the_body
- the registered address steers the leader (SSRF)  test_addresses_are_scheme_host_port_only
- worker ids can be taken over with the join token test_live_worker_ids_cannot_be_taken_over
- join_token optional and empty by default         test_no_join_token_refuses_to_start
- worker tokens keyed like the Raft password       tests/unit/test_http_security.py
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from testkit.cluster import ADMIN, Cluster
from testkit.wait import wait_until

RAW_REPLY_BYTES_MAX = 65_536
JOIN = "http-security-join-token-0123"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Nothing is ever assigned, so no duty writes behind a test's back. (It was 5, and the
    # module registers five workers: partitions went to fake workers whose host calls fail,
    # and on a loaded machine draining one waited on its migrations past the test's bound.)
    c = Cluster(
        Path(tmp_path_factory.mktemp("http-security")),
        min_cluster_size=1_000_000,
        join_token=JOIN,
        open_registration=False,
    )
    with c.running() as running:
        yield running


def raw_status(url: str, method: str, path: bytes, headers: list[bytes], body: bytes = b"") -> int:
    """Send exactly these bytes (http.client would refuse or re-encode them); the status."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    head = [method.encode() + b" " + path + b" HTTP/1.1", b"Host: x", b"Connection: close"]
    head += [*headers, b"Content-Length: " + str(len(body)).encode()]
    with socket.create_connection((parts.hostname, parts.port), timeout=10.0) as s:
        s.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        reply = b""
        while len(reply) < RAW_REPLY_BYTES_MAX:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert b"Traceback" not in reply
    return int(reply.split(b" ", 2)[1])


def register(c: Cluster, leader: str, wid: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("token", JOIN)
    r = c.post(leader, "/v1/workers", {"worker_id": wid, "address": "http://127.0.0.1:9"}, **kw)
    assert r.status == 200, r.body
    return dict(r.body)


def test_non_ascii_partition_digits(cluster: Cluster) -> None:
    """'%C2%B2' (superscript two) was a 500; '%D9%A1' (Arabic-Indic one) read as 1."""
    leader = cluster.ready()
    for digits in ("%C2%B2", "%D9%A1", "%EF%BC%91"):
        for tail in ("", "/history"):
            r = cluster.get(leader, f"/v1/partitions/{digits}{tail}")
            assert r.status == 400, (digits, tail, r.status, r.body)
            assert r.body["field"] == "partition"


def test_non_ascii_and_undecodable_tokens(cluster: Cluster) -> None:
    """Tokens of UTF-8 letters, Unicode digits or invalid UTF-8 were 500s."""
    leader = cluster.ready()
    url = cluster.url(leader)
    tokens = [b"Bearer 1.\xc3\xa9", b"Bearer \xc2\xb2.abc", b"Bearer \xff\xfe"]
    tokens.append(b"Bearer w.1.2.\xff")
    ck = b'{"worker_id":"w1","incarnation":1,"checkpoints":[]}'
    for token in tokens:
        auth = [b"Authorization: " + token, b"Content-Type: application/json"]
        for method, path, body in [
            ("POST", b"/v1/workers/w1/heartbeat", b'{"incarnation":1}'),
            ("POST", b"/v1/checkpoints", ck),
            ("POST", b"/v1/workers/w1/drain", b"{}"),
            ("POST", b"/v1/admin/reassign", b'{"strategy":"balance"}'),
            ("POST", b"/v1/admin/barrier", b""),
        ]:
            status = raw_status(url, method, path, auth, body)
            assert status == 401, (token, path, status)


def test_integers_past_64_bits_are_400(cluster: Cluster) -> None:
    leader = cluster.ready()
    reg = register(cluster, leader, "big")
    for field in ("partition", "epoch", "offset"):
        entry = {"partition": 0, "epoch": 1, "offset": 1, "uri": "file:///x"}
        entry[field] = 2**64 + 5
        body = {"worker_id": "big", "incarnation": reg["incarnation"], "checkpoints": [entry]}
        r = cluster.post(leader, "/v1/checkpoints", body, token=reg["token"])
        assert r.status == 400, (field, r.status, r.body)
        assert r.body["field"] == f"checkpoints.0.{field}"
    hb = {"incarnation": 2**64, "partitions": {}}
    r = cluster.post(leader, "/v1/workers/big/heartbeat", hb, token=reg["token"])
    assert r.status == 400 and r.body["field"] == "incarnation", r.body


def test_idempotency_keys_are_scoped(cluster: Cluster) -> None:
    """A key first used by a worker made a later join or admin request with that key
    return the worker's recorded result: nothing applied, and a 500."""
    leader = cluster.ready()
    w = register(cluster, leader, "keyed")
    key = {"Idempotency-Key": "shared-key-1"}
    body = {"worker_id": "keyed", "incarnation": w["incarnation"], "checkpoints": []}
    first = cluster.post(leader, "/v1/checkpoints", body, token=w["token"], headers=key)
    assert first.status == 200, first.body
    # The same key on a registration (join principal): it must really register.
    joined = register(cluster, leader, "joiner", headers=key)
    assert joined["worker_id"] == "joiner"
    ws = cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
    assert "joiner" in {x["worker_id"] for x in ws}
    # ... and on an admin drain of that worker: it must really drain.
    r = cluster.post(leader, "/v1/workers/joiner/drain", {}, token=ADMIN, headers=key)
    assert r.status == 202, r.body
    assert r.body["worker_id"] == "joiner" and r.body["state"] in ("draining", "left")
    # The same key, same principal and command is still a retry: the same answer.
    again = cluster.post(leader, "/v1/checkpoints", body, token=w["token"], headers=key)
    assert again.status == 200 and again.body == first.body


def test_token_checked_before_the_body(cluster: Cluster) -> None:
    """Without a token, a malformed body is a 401 (not a 400 that proves the body was
    parsed for a stranger)."""
    leader = cluster.ready()
    for path in ("/v1/workers/w1/heartbeat", "/v1/checkpoints", "/v1/admin/reassign"):
        r = cluster.post(leader, path, None, raw=b"{not json")
        assert r.status == 401, (path, r.status, r.body)


def test_addresses_are_scheme_host_port_only(cluster: Cluster) -> None:
    """Any path, query, userinfo or '#' was accepted, and the leader then POSTed with a
    bearer token to a path of the registrant's choosing."""
    leader = cluster.ready()
    before = cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
    for address in [
        "http://127.0.0.1:9/admin/steal",
        "http://127.0.0.1:9?next=/x",
        "http://user:pw@127.0.0.1:9",
        "http://evil@127.0.0.1:9",
        "http://127.0.0.1:9#frag",
        "http://127.0.0.1:9/",
        "ftp://127.0.0.1:9",
        "http://127.0.0.1",
        "http://127.0.0.1:0",
        "http://127.0.0.1:70000",
        "http://0.0.0.0:9",
        "http://h%2Fx:9",
        "http://exa mple:9",
        "http://\u0661.example:9",
    ]:
        body = {"worker_id": "ssrf", "address": address}
        r = cluster.post(leader, "/v1/workers", body, token=JOIN)
        assert r.status == 400 and r.body["field"] == "address", (address, r.status, r.body)
    assert cluster.get(leader, "/v1/workers?consistent=true").body["workers"] == before
    for address in ("http://127.0.0.1:9", "https://w1.example:9101", "http://[::1]:9"):
        body = {"worker_id": "addr-ok", "address": address}
        r = cluster.post(leader, "/v1/workers", body, token=ADMIN)
        assert r.status == 200, (address, r.body)


def test_live_worker_ids_cannot_be_taken_over(cluster: Cluster) -> None:
    """Every worker holds the join token: with it alone, one worker re-registered as another
    live one and received its host calls and checkpoint references."""
    leader = cluster.ready()
    a = register(cluster, leader, "victim")
    b = register(cluster, leader, "intruder")
    body = {"worker_id": "victim", "address": "http://127.0.0.1:10"}
    for headers in ({}, {"Ripple-Worker-Token": b["token"]}, {"Ripple-Worker-Token": "x.1.2.ab"}):
        r = cluster.post(leader, "/v1/workers", body, token=JOIN, headers=headers)
        assert r.status == 409 and r.body["error"] == "worker_active", (headers, r.body)
    ws = {
        x["worker_id"]: x
        for x in cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
    }
    assert ws["victim"]["incarnation"] == a["incarnation"]
    assert ws["victim"]["address"] == "http://127.0.0.1:9"
    # Its own current token, or the admin token, may.
    own = {"Ripple-Worker-Token": a["token"]}
    r = cluster.post(leader, "/v1/workers", body, token=JOIN, headers=own)
    assert r.status == 200 and r.body["incarnation"] == a["incarnation"] + 1, r.body
    r = cluster.post(leader, "/v1/workers", body, token=ADMIN)
    assert r.status == 200 and r.body["incarnation"] == a["incarnation"] + 2, r.body
    # Without any credential: 401, before the body is read.
    assert cluster.post(leader, "/v1/workers", body).status == 401
    # Once the id has LEFT, the join token registers it again.
    assert cluster.post(leader, "/v1/workers/intruder/drain", {}, token=ADMIN).status == 202
    wait_until(
        lambda: any(
            x["worker_id"] == "intruder" and x["state"] == "left"
            for x in cluster.get(leader, "/v1/workers?consistent=true").body["workers"]
        ),
        "intruder left",
        30.0,
    )
    assert register(cluster, leader, "intruder")["incarnation"] == b["incarnation"] + 1


def test_no_join_token_refuses_to_start(tmp_path: Path) -> None:
    """join_token was optional and empty by default: registration open to anyone."""
    c = Cluster(tmp_path, nodes=1, open_registration=False)
    proc = c.start("n1")
    try:
        wait_until(lambda: not proc.alive(), "a node without join_token exits", 60.0)
        assert "join_token is required" in proc.output()
    finally:
        c.stop_all()
    # Said explicitly, it starts.
    (tmp_path / "open").mkdir()
    c2 = Cluster(tmp_path / "open", nodes=1, open_registration=True)
    c2.start_all()
    try:
        c2.ready(60.0)
    finally:
        c2.stop_all()
