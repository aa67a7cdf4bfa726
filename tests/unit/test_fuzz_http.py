"""Bad input against every coordinator endpoint of ONE real 3-node cluster (started once).

No 5xx other than 503 (no leader yet), never a stack trace, and a rejected request (4xx)
changes neither the worker list, nor the partition table, nor the pipelines. One worker is
registered (so a genuine worker token reaches past authentication), but min_cluster_size
keeps anything from being assigned: no duty writes behind the fuzzer's back.

The input probes of tests/integration/test_http_security.py are among the samples:
Unicode digits in paths (`%C2%B2`, `%D9%A1`), non-ASCII and undecodable bearer tokens
(http.client sends a header's characters as latin-1 bytes, so "\xc3\xa9" arrives as UTF-8
"é" and "\xff" as an invalid byte), one Idempotency-Key shared by every principal, integers
past 64 bits. The same probes go to a real worker's HTTP API too
(test_worker_http_bad_input), as raw bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.cluster import ADMIN, Cluster
from testkit.http import call

PATHS = [
    "/v1/health",
    "/v1/status",
    "/v1/partitions",
    "/v1/partitions/{p}",
    "/v1/partitions/{p}/history",
    "/v1/workers",
    "/v1/workers/{w}",
    "/v1/workers/{w}/assignment",
    "/v1/workers/{w}/heartbeat",
    "/v1/workers/{w}/drain",
    "/v1/migrations",
    "/v1/checkpoints",
    "/v1/admin/reassign",
    "/v1/admin/migrations/{w}/abort",
    "/v1/admin/partitions/{p}/reset",
    "/v1/admin/barrier",
    "/v1/pipelines",
    "/v1/pipelines/{w}",
    "/v1/pipelines/{w}/pause",
    "/v1/pipelines/{w}/resume",
    "/v1/pipelines/{w}/rescale",
    "/v1/pipelines/{w}/update",
    "/v1/pipelines/{w}?purge=true",
    "/v1/openapi.json",
    "/v1/{w}",
]
SEGMENTS = st.one_of(
    st.sampled_from(
        ["0", "3", "-1", "99999999", "w1", "..", "%00", "a" * 80, "é", "1e3", "%C2%B2", "%D9%A1"]
    ),
    st.text(alphabet="abcXYZ019._-%", min_size=0, max_size=12),
)
BIG_OR_SMALL = st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, 4])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
BODIES = st.one_of(
    JSONISH.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {},
        optional={
            "worker_id": SEGMENTS,
            "address": st.text(max_size=30),
            "incarnation": st.integers(-5, 2**65),
            "strategy": st.text(max_size=10),
            "moves": JSONISH,
            "checkpoints": JSONISH,
            "dry_run": JSONISH,
            "name": SEGMENTS,
            "spec_text": st.sampled_from(["", "format = 1", "[schema]\nddl = 'k STRING'"]),
            "spec": st.sampled_from(["", "format = 1", "[schema]\nddl = 'k STRING'"]),
            "partitions": BIG_OR_SMALL,
            "pool": JSONISH,
            "settings": JSONISH,
        },
    ).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=64),
)
WORKER = "<the fuzz worker's token>"  # replaced by the real one at run time
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "Authorization": st.sampled_from(
            [
                "Bearer x",
                "Bearer " + ADMIN,
                "Basic a",
                "",
                WORKER,
                "Bearer \xc3\xa9",
                "Bearer \xff\xfe",
                "Bearer 1.\xc2\xb2",
                "Bearer fz.1.99999999999999.\xff",
            ]
        ),
        "Content-Type": st.sampled_from(["application/json", "text/plain", "x/y"]),
        "Idempotency-Key": st.sampled_from(["k1", "bad key!", "x" * 70]),
    },
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("fuzz-http")), total_partitions=8, min_cluster_size=9)
    c.start_all()
    try:
        leader = c.ready(60.0)
        r = c.post(leader, "/v1/workers", {"worker_id": "fz", "address": "http://127.0.0.1:9"})
        assert r.status == 200, r.body
        c.fuzz_worker = r.body  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop_all()


def snapshot(c: Cluster, leader: str) -> Any:
    ws = c.get(leader, "/v1/workers?consistent=true").body["workers"]
    parts = c.get(leader, "/v1/partitions?consistent=true").body["partitions"]
    pipelines = c.get(leader, "/v1/pipelines?consistent=true").body["pipelines"]
    workers = [{k: v for k, v in w.items() if k not in ("liveness", "load")} for w in ws]
    return workers, parts, pipelines


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    template=st.sampled_from(PATHS),
    p=SEGMENTS,
    w=SEGMENTS,
    query=st.sampled_from(["", "?consistent=true", "?consistent=maybe", "?x=%ff"]),
    body=BODIES,
    headers=HEADERS,
)
def test_http_bad_input(
    cluster: Cluster,
    method: str,
    template: str,
    p: str,
    w: str,
    query: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    leader = cluster.leader(30.0)
    path = template.replace("{p}", p).replace("{w}", w) + query
    if headers.get("Authorization") == WORKER:
        headers = {**headers, "Authorization": "Bearer " + cluster.fuzz_worker["token"]}  # type: ignore[attr-defined]
    before = snapshot(cluster, leader)
    try:
        r = call(method, cluster.url(leader) + path, raw=body, headers=headers, timeout_s=10.0)
    except UnicodeEncodeError:
        return  # http.client cannot send it: nothing reached the server
    assert r.status < 500 or r.status == 503, f"{method} {path} -> {r.status} {r.body}"
    assert "Traceback" not in str(r.body), f"{method} {path} leaked a stack trace"
    if r.status >= 400:
        assert snapshot(cluster, leader) == before, f"{method} {path} -> {r.status} changed state"


BIG = st.integers(-(2**70), 2**70) | st.sampled_from([2**63 - 1, 2**63, 2**64, -1, 0])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    entries=st.lists(
        st.fixed_dictionaries(
            {"partition": BIG, "epoch": BIG, "offset": BIG, "uri": st.text(max_size=40)}
        ),
        max_size=3,
    ),
    incarnation=BIG,
    key=st.sampled_from([None, "k1"]),
)
def test_checkpoint_bodies_with_a_genuine_token(
    cluster: Cluster, entries: list[dict[str, Any]], incarnation: int, key: str | None
) -> None:
    """Past authentication, any integer in a checkpoint body: a 2xx or a 4xx naming the
    field, never a 500 (integers past 64 bits failed in the codec)."""
    leader = cluster.leader(30.0)
    worker = cluster.fuzz_worker  # type: ignore[attr-defined]
    body = {"worker_id": "fz", "incarnation": incarnation, "checkpoints": entries}
    headers = {"Idempotency-Key": key} if key else {}
    r = cluster.post(leader, "/v1/checkpoints", body, token=worker["token"], headers=headers)
    assert r.status < 500, (body, r.status, r.body)
    limit = 2**63 - 1
    if any(not 0 <= e[f] <= limit for e in entries for f in ("partition", "epoch", "offset")):
        assert r.status == 400, r.body
        assert r.body["field"] == "incarnation" or r.body["field"].startswith("checkpoints.")


# -- the worker's HTTP API -------------------------------------------------------------------

WORKER_CALL_TOKEN = "7.worker-call-token-for-the-fuzzer"
WORKER_PATHS = [
    "/v1/partitions/{p}/host",
    "/v1/partitions/{p}/release",
    "/v1/checkpoint",
    "/v1/partitions/{p}/keys/{w}",
    "/v1/partitions/{p}/state",
    "/v1/health",
    "/metrics",
]
RAW_TOKENS = st.sampled_from(
    [
        b"",
        b"Bearer " + WORKER_CALL_TOKEN.encode(),
        b"Bearer \xc3\xa9",
        b"Bearer \xff\xfe",
        b"Bearer 1.\xc2\xb2",
        b"Basic \x80",
    ]
)


@pytest.fixture(scope="module")
def worker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real worker's aiohttp app on 127.0.0.1 in a thread of its own (no coordinator, no
    Spark: its calls to them fail fast, which the handlers must absorb)."""
    import asyncio
    import threading

    from aiohttp import web

    from pipeline.store import LocalStore
    from pipeline.worker import Worker
    from shared.ports import free_ports
    from tests.unit.test_pipeline_worker import offline_settings

    root = Path(tmp_path_factory.mktemp("fuzz-worker"))
    port = free_ports(1)[0]
    settings = replace(offline_settings(root, "fw"), listen=f"127.0.0.1:{port}")
    worker = Worker(settings, LocalStore(str(root / "store")))
    worker.call_token, worker.total_partitions = WORKER_CALL_TOKEN, 8
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(worker.app())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(worker.site(runner).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10.0)
        asyncio.run_coroutine_threadsafe(worker.client.close(), loop).result(10.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10.0)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from([b"GET", b"POST"]),
    template=st.sampled_from(WORKER_PATHS),
    p=SEGMENTS,
    w=SEGMENTS,
    token=RAW_TOKENS,
    body=BODIES,
)
def test_worker_http_bad_input(
    worker_url: str, method: bytes, template: str, p: str, w: str, token: bytes, body: bytes
) -> None:
    """Any path, any (non-ASCII, undecodable) bearer, any body: never a 5xx other than the
    worker's 503 for a checkpoint it cannot load, never a stack trace."""
    import socket

    host, port = worker_url.split(":")
    path = template.replace("{p}", p).replace("{w}", w).encode("utf-8", "surrogateescape")
    head = [method + b" " + path + b" HTTP/1.1", b"Host: x", b"Connection: close"]
    if token:
        head.append(b"Authorization: " + token)
    head += [b"Content-Type: application/json", b"Content-Length: " + str(len(body)).encode()]
    with socket.create_connection((host, int(port)), timeout=10.0) as conn:
        conn.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        reply = b""
        while len(reply) < 1_000_000:
            chunk = conn.recv(65_536)
            if not chunk:
                break
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    assert status < 500 or status == 503, (method, path, token, status, reply[:300])
    assert b"Traceback" not in reply
