"""The heartbeat's token on real coordinators: the presented token comes back unchanged
while more than half its lifetime is left (no HMAC per heartbeat, the reply stays the same
within a generation); past half its lifetime the heartbeat renews it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.service.auth import issue_token
from coordinator.service.models import HeartbeatResponse
from testkit.cluster import SECRET, Cluster

LIFETIME_S = 3600.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, min_cluster_size=1_000_000, worker_token_lifetime_s=LIFETIME_S)
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def test_heartbeat_keeps_a_fresh_token_and_renews_an_old_one(cluster: Cluster) -> None:
    leader = cluster.ready()
    reg = cluster.post(leader, "/v1/workers", {"worker_id": "w1", "address": "http://127.0.0.1:9"})
    assert reg.status == 200, reg
    hb = {"incarnation": 1, "load": 0.0, "partitions": {}}
    path = "/v1/workers/w1/heartbeat"

    first = cluster.post(leader, path, hb, token=reg.body["token"])
    second = cluster.post(leader, path, hb, token=first.body["token"])
    assert first.status == second.status == 200
    assert first.body["token"] == second.body["token"] == reg.body["token"]
    assert first.body == second.body  # same generation: the same reply
    # The handler builds this reply as a dict: it is exactly the documented model.
    assert set(first.body) == set(HeartbeatResponse.model_fields)
    assert HeartbeatResponse.model_validate(first.body).model_dump() == first.body

    # A genuine token with less than half its lifetime left is renewed.
    old_expiry = int(time.time() * 1000) + int(LIFETIME_S * 1000 * 0.4)
    old = issue_token(SECRET, "w1", 1, old_expiry)
    renewed = cluster.post(leader, path, hb, token=old)
    assert renewed.status == 200, renewed
    assert renewed.body["token"] != old
    assert renewed.body["token_expires_at_ms"] > old_expiry + LIFETIME_S * 1000 * 0.5
    assert cluster.post(leader, path, hb, token=renewed.body["token"]).status == 200
