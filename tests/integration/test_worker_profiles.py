"""A worker's profile at registration on real coordinator processes: a cluster that cannot
record it yet (command set below 5) refuses the registration whole, with nothing changed,
and the same worker without labels registers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.cluster import Cluster


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        Path(tmp_path_factory.mktemp("capped")),
        total_partitions=2,
        open_registration=True,
        command_set_version_max=4,
    )
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def test_a_profile_the_cluster_cannot_record_refuses_the_registration_whole(
    capped: Cluster,
) -> None:
    leader = capped.ready()
    body = {"worker_id": "w1", "address": "http://127.0.0.1:9", "labels": {"zone": "a"}}
    r = capped.post(leader, "/v1/workers", body)
    assert r.status == 503, r.body
    assert (r.body["error"], r.body["field"]) == ("version_not_finalized", "command_set_version")
    assert "Retry-After" in r.headers
    workers = capped.get(leader, "/v1/workers?consistent=true").body["workers"]
    assert [w for w in workers if w["worker_id"] == "w1"] == []
    for bad in ({"slots": 0}, {"labels": {"zone": "a b"}}, {"labels": "zone=a"}):
        r = capped.post(leader, "/v1/workers", {**body, "labels": None, **bad})
        assert r.status == 400, (bad, r.body)
    del body["labels"]
    assert capped.post(leader, "/v1/workers", body).status == 200
    shown = capped.get(leader, "/v1/workers?consistent=true").body["workers"]
    assert [(w["labels"], w["slots"]) for w in shown if w["worker_id"] == "w1"] == [(None, None)]
