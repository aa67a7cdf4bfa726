"""Bad input against every coordinator endpoint of ONE real 3-node cluster (started once).

No 5xx other than 503 (no leader yet), never a stack trace, and a rejected request (4xx)
changes neither the worker list nor the partition table. The cluster has no workers, so
no duty writes anything behind the fuzzer's back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cluster import ADMIN, Cluster, call

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
    "/v1/admin/barrier",
    "/v1/openapi.json",
    "/v1/{w}",
]
SEGMENTS = st.one_of(
    st.sampled_from(["0", "3", "-1", "99999999", "w1", "..", "%00", "a" * 80, "é", "1e3"]),
    st.text(alphabet="abcXYZ019._-%", min_size=0, max_size=12),
)
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
        },
    ).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=64),
)
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "Authorization": st.sampled_from(["Bearer x", "Bearer " + ADMIN, "Basic a", ""]),
        "Content-Type": st.sampled_from(["application/json", "text/plain", "x/y"]),
        "Idempotency-Key": st.sampled_from(["k1", "bad key!", "x" * 70]),
    },
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("fuzz-http")), total_partitions=8)
    c.start_all()
    try:
        c.ready(60.0)
        yield c
    finally:
        c.stop_all()


def snapshot(c: Cluster, leader: str) -> Any:
    ws = c.get(leader, "/v1/workers?consistent=true").body["workers"]
    parts = c.get(leader, "/v1/partitions?consistent=true").body["partitions"]
    return [{k: v for k, v in w.items() if k not in ("liveness", "load")} for w in ws], parts


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
    before = snapshot(cluster, leader)
    try:
        r = call(method, cluster.url(leader) + path, raw=body, headers=headers, timeout_s=10.0)
    except UnicodeEncodeError:
        return  # http.client cannot send it: nothing reached the server
    assert r.status < 500 or r.status == 503, f"{method} {path} -> {r.status} {r.body}"
    assert "Traceback" not in str(r.body), f"{method} {path} leaked a stack trace"
    if r.status >= 400:
        assert snapshot(cluster, leader) == before, f"{method} {path} -> {r.status} changed state"
