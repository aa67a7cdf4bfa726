"""Group commit on three real coordinator processes: concurrent writers share replicated
entries (many commands per entry, from the leader's /metrics), every acknowledged write is
present exactly once on every replica, and a retried Idempotency-Key applies once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testkit.cluster import ADMIN, Cluster
from testkit.http import Reply, call
from testkit.wait import wait_until

WRITERS = 32
PER_WRITER = 15


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # min_cluster_size unreachable: no partition is assigned, so the leader's duties propose
    # nothing and every entry counted below is one of these writes.
    c = Cluster(tmp_path, min_cluster_size=1_000_000)
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def test_concurrent_writers_share_entries_and_each_ack_lands_once(cluster: Cluster) -> None:
    leader = cluster.ready()
    url = cluster.url(leader) + "/v1/workers"
    before = cluster.proposed(leader)
    assert before is not None
    commit_before = cluster.health(leader)["commit_index"]  # type: ignore[index]

    def writer(i: int) -> list[tuple[str, Reply]]:
        out = []
        for j in range(PER_WRITER):
            wid = f"w{i}-{j}"
            body = {"worker_id": wid, "address": "http://127.0.0.1:9"}
            # Every third write is sent twice with one Idempotency-Key: it must apply once.
            # Both as admin: the key is scoped by caller, and re-registering an active worker
            # needs the admin (or the worker's) token.
            if j % 3:
                out.append((wid, call("POST", url, body, timeout_s=60)))
                continue
            key = {"Idempotency-Key": f"k-{wid}"}
            for _ in range(2):
                retry = call("POST", url, body, headers=key, token=ADMIN, timeout_s=60)
                out.append((wid, retry))
        return out

    with ThreadPoolExecutor(WRITERS) as pool:
        replies = [r for rs in pool.map(writer, range(WRITERS)) for r in rs]

    acked = Counter(wid for wid, r in replies if r.status == 200)
    # The leader stayed put on a quiet machine; if it did not, a 503 is an honest answer but
    # then this run proves less, so say so instead of passing quietly.
    assert all(r.status == 200 for _, r in replies), [r for _, r in replies if r.status != 200][:3]
    incarnations = {(wid, r.body["incarnation"]) for wid, r in replies}
    assert all(inc == 1 for _, inc in incarnations)  # the retried key applied once
    assert len(acked) == WRITERS * PER_WRITER

    after = cluster.proposed(leader)
    assert after is not None
    entries = after[0] - before[0]
    commands = after[1] - before[1]
    # Each request went through the log (the leader's own duties may add a few)...
    assert commands >= sum(acked.values())
    assert commands >= 2 * entries, (entries, commands)  # ...and they shared entries
    # The Raft log grew by the entries, not by the commands.
    health = cluster.health(leader)
    assert health is not None and health["commit_index"] - commit_before < commands

    # Every acknowledged write is present exactly once, on every replica.
    for spec in cluster.specs:

        def listed(node: str = spec.id) -> bool:
            body = cluster.get(node, "/v1/workers").body
            return len(body["workers"]) == len(acked)

        wait_until(listed, f"{spec.id} catches up", timeout_s=60)
        ids = Counter(w["worker_id"] for w in cluster.get(spec.id, "/v1/workers").body["workers"])
        assert set(ids) == set(acked) and set(ids.values()) == {1}


def test_a_full_queue_answers_503_overloaded_and_loses_nothing(tmp_path: Path) -> None:
    c = Cluster(tmp_path, min_cluster_size=1_000_000, proposals_queued_max=1)
    c.start_all()
    try:
        leader = c.ready()
        url = c.url(leader) + "/v1/workers"

        def write(i: int) -> tuple[str, Reply]:
            body = {"worker_id": f"q{i}", "address": "http://127.0.0.1:9"}
            return f"q{i}", call("POST", url, body, timeout_s=60)

        with ThreadPoolExecutor(WRITERS) as pool:
            replies = list(pool.map(write, range(WRITERS * 4)))
        refused = [r for _, r in replies if r.status == 503]
        acked = {wid for wid, r in replies if r.status == 200}
        assert {r.status for _, r in replies} <= {200, 503}
        assert refused and acked, "one queued command at most: some must be refused"
        for r in refused:
            assert r.body["error"] == "overloaded" and r.headers["Retry-After"] == "1", r
        listed = Counter(w["worker_id"] for w in c.get(leader, "/v1/workers").body["workers"])
        assert set(listed) == acked and set(listed.values()) == {1}  # refused: never applied
    finally:
        c.stop_all()
