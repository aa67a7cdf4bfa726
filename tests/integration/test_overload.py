"""A flood of API reads at the leader of a real three-node cluster while workers heartbeat:
no worker is declared dead, nobody is elected, every heartbeat is answered, and a read the
leader sheds is answered 503 overloaded with Retry-After (coordinator/service/admission_load.py).

Whether reads are shed at all depends on how far this machine's flood holds the leader's
loop, so the count is printed, not required; when and what the gate sheds is
tests/unit/test_admission_load.py's, and the front door's answer tests/unit/test_front_door.py's."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.cluster import Cluster
from testkit.http import call

FLOOD_S = 20.0
READERS = 24
WORKERS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # A short timeout so the flood spans several of them; a 1 ms read lag bound, so reads
    # are shed whenever the flood holds the loop at all, and the shed answers are checked.
    c = Cluster(tmp_path, heartbeat_timeout_s=10.0, reads_shed_lag_s=0.001)
    c.start_all()
    try:
        yield c
    finally:
        c.stop_all()


def _declared_dead(cluster: Cluster, node: str) -> float:
    text = call("GET", cluster.url(node) + "/metrics").body
    found = re.search(r"^ripple_workers_declared_dead_total (\S+)$", str(text), re.M)
    assert found is not None, "the leader exports ripple_workers_declared_dead_total"
    return float(found.group(1))


def test_read_flood_sheds_reads_and_keeps_workers_and_leader(cluster: Cluster) -> None:
    leader = cluster.ready()
    before = cluster.health(leader)
    assert before is not None
    url = cluster.url(leader)
    tokens: dict[str, str] = {}
    for i in range(WORKERS):
        wid = f"w{i + 1}"
        r = cluster.post(leader, "/v1/workers", {"worker_id": wid, "address": "http://127.0.0.1:9"})
        assert r.status == 200, r
        tokens[wid] = r.body["token"]
    stop = threading.Event()
    beats: Counter[int] = Counter()
    reads: Counter[int] = Counter()
    retry_after: list[str] = []
    lock = threading.Lock()

    def heartbeat(wid: str) -> None:
        while not stop.is_set():
            hb = {"incarnation": 1, "load": 0.5, "partitions": {}}
            try:
                r = call("POST", f"{url}/v1/workers/{wid}/heartbeat", hb, token=tokens[wid])
            except OSError:
                r = None
            with lock:
                beats[0 if r is None else r.status] += 1
            if r is not None and r.status == 200:
                tokens[wid] = r.body["token"]
            stop.wait(1.0)  # heartbeat_interval_s at this timeout

    def read() -> None:
        while not stop.is_set():
            try:
                r = call("GET", f"{url}/v1/workers", timeout_s=10.0)
            except OSError:
                continue
            with lock:
                reads[r.status] += 1
                if r.status == 503:
                    retry_after.append(r.headers.get("Retry-After", ""))

    threads = [threading.Thread(target=heartbeat, args=(w,)) for w in tokens]
    threads += [threading.Thread(target=read) for _ in range(READERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(FLOOD_S)  # the flood's length, not a wait for an outcome
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30.0)
    assert not any(t.is_alive() for t in threads)
    after = cluster.health(leader)
    assert after is not None
    assert (after["leader_id"], after["term"]) == (before["leader_id"], before["term"])
    assert _declared_dead(cluster, leader) == 0
    assert set(beats) == {200}, beats  # every heartbeat answered, none refused
    print(f"[overload] reads answered by status: {dict(reads)}")
    assert reads[200] > 0 and set(reads) <= {200, 503}, reads
    assert len(retry_after) == reads[503] and all(v == "1" for v in retry_after)
    listed = cluster.get(leader, "/v1/workers")
    assert listed.status == 200, listed
    liveness = {w["worker_id"]: w["liveness"] for w in listed.body["workers"]}
    assert liveness == dict.fromkeys(tokens, "alive"), liveness
