"""A worker's restart is not a leave: three real coordinator processes and scripted worker
processes. A worker that says it is restarting keeps its partitions past the heartbeat
timeout, and registered again with its own token it gets exactly them back under new epochs,
with no migration; without its token it cannot; one that does not come back is declared
dead when its grace ends; only the worker itself may say it restarts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import ADMIN, Cluster, worker_token
from testkit.http import call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.integration.test_duties import FAST, all_online, table, three_online


def running(tmp_path: Path, rejoin_grace_s: float) -> Iterator[tuple[Cluster, ScriptedWorkers]]:
    c = Cluster(tmp_path, **{**FAST, "rejoin_grace_s": rejoin_grace_s})
    c.start_all()
    w = ScriptedWorkers(c)
    try:
        yield c, w
    finally:
        w.stop_all()
        c.stop_all()


@pytest.fixture
def long_grace(tmp_path: Path) -> Iterator[tuple[Cluster, ScriptedWorkers]]:
    yield from running(tmp_path, 30.0)


@pytest.fixture
def short_grace(tmp_path: Path) -> Iterator[tuple[Cluster, ScriptedWorkers]]:
    yield from running(tmp_path, 5.0)


def workers(c: Cluster) -> dict[str, dict[str, Any]]:
    body = c.get(c.leader(), "/v1/workers?consistent=true").body
    return {x["worker_id"]: x for x in body["workers"]}


def test_a_restarting_worker_is_held_and_rejoins_to_its_own_partitions(
    long_grace: tuple[Cluster, ScriptedWorkers],
) -> None:
    c, w = long_grace
    before = three_online(c, w)
    mine = {p["partition"]: p["epoch"] for p in before if p["owner"] == "w2"}
    notice = w.restart("w2")
    assert notice["partitions"] == len(mine) and notice["rejoin_grace_s"] == pytest.approx(30, 0.1)
    # w3 falls silent at the same moment: its death verdict is the clock that shows w2's hold
    # outlasting the heartbeat timeout.
    w.silence("w3")
    wait_until(lambda: workers(c)["w3"]["state"] == "dead", "w3 declared dead", 20)
    view = workers(c)["w2"]
    assert (view["state"], view["liveness"]) == ("active", "restarting")
    held = {p["partition"]: p["epoch"] for p in table(c) if p["owner"] == "w2"}
    assert held == mine
    # Only w1 was eligible for w3's partitions: nothing was placed on the held worker.
    assert {p["owner"] for p in table(c)} == {"w1", "w2"}
    # The join token alone cannot take the live id over, restarting or not.
    status, body = w.rejoin("w2", with_token=False)
    assert (status, body["error"]) == (409, "worker_active"), body
    status, body = w.rejoin("w2", with_token=True)
    assert (status, body["incarnation"]) == (200, 2), body
    after = wait_until(lambda: all_online(c, {"w1", "w2"}), "w2 back", 30)
    back = {p["partition"]: p["epoch"] for p in after if p["owner"] == "w2"}
    assert back == {p: e + 1 for p, e in mine.items()}
    for p in mine:
        history = c.get(c.leader(), f"/v1/partitions/{p}/history").body["history"]
        assert [h["owner"] for h in history] == ["w2", "w2"]
        assert history[-1]["reason"] == "restart"
    assert c.get(c.leader(), "/v1/migrations").body["migrations"] == []


def test_a_restarting_worker_that_does_not_return_is_dead_when_its_grace_ends(
    short_grace: tuple[Cluster, ScriptedWorkers],
) -> None:
    c, w = short_grace
    before = three_online(c, w)
    mine = {p["partition"] for p in before if p["owner"] == "w2"}
    asked = time.monotonic()
    w.restart("w2")

    def moved() -> float | None:
        owners = {p["partition"]: p["owner"] for p in table(c)}
        return time.monotonic() if all(owners[p] != "w2" for p in mine) else None

    seen = wait_until(moved, "w2's partitions moved", 30, 0.1)
    # The hold began after the notice was sent and lasts the whole grace (5 s), twice the
    # heartbeat timeout.
    assert seen - asked >= 5.0, seen - asked
    assert workers(c)["w2"]["state"] == "dead"
    history = c.get(c.leader(), f"/v1/partitions/{min(mine)}/history").body["history"]
    assert history[-1]["reason"] == "failure"
    wait_until(lambda: all_online(c, {"w1", "w3"}), "all online on the others", 30)


def test_only_the_worker_itself_says_it_restarts_and_a_leaving_one_is_not_held(
    long_grace: tuple[Cluster, ScriptedWorkers],
) -> None:
    c, w = long_grace
    three_online(c, w)
    leader = c.leader()
    url = c.url(leader) + "/v1/workers/w2/restarting"
    body = {"incarnation": 1}
    assert call("POST", url, body).status == 401
    assert call("POST", url, body, token=ADMIN).status == 401  # a worker's word, not the admin's
    assert call("POST", url, body, token=worker_token("w1", 1)).status == 403
    stale = call("POST", url, {"incarnation": 2}, token=worker_token("w2", 1))
    assert (stale.status, stale.body["error"]) == (409, "stale_incarnation")
    assert c.post(leader, "/v1/workers/w2/drain", {}, token=ADMIN).status == 202
    leaving = call("POST", url, body, token=worker_token("w2", 1))
    assert leaving.status in (404, 409), leaving.body  # draining (409), or left already (404)
    assert workers(c)["w2"]["liveness"] != "restarting"
