"""Stuck partitions end to end: three real coordinator processes and scripted workers whose
store "lost" every checkpoint (host calls naming one answer 503 checkpoint_unavailable), with
`full_replay_fallback = false` (a source that truncates). The leader walks each partition's
fallback chain down to `stuck`; the reason shows in /v1/partitions, `ripple partitions` and
/metrics; reassign and abort work on such a partition; the admin reset brings it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.integration.test_cli import ripple
from tests.integration.test_duties import FAST, admin, migrations, table, three_online

SETTINGS = {
    **FAST,
    "full_replay_fallback": False,
    "fallback_after_failures": 2,
    "host_retry_cap_ms": 500,
}


def lose(w: ScriptedWorkers, wid: str, lost: bool) -> None:
    r = call("POST", f"http://127.0.0.1:{w.ports[wid]}/test/lose-checkpoints", {"lost": lost})
    assert r.status == 200, r


def stuck(c: Cluster) -> list[dict[str, Any]]:
    return [p for p in table(c) if p["stuck"]]


def all_stuck(c: Cluster) -> list[dict[str, Any]] | None:
    """The partitions not ONLINE, once there are some, none is w1's and all are stuck."""
    parts = table(c)
    waiting = [p for p in parts if p["status"] != "online"]
    if waiting and all(p["stuck"] and p["owner"] != "w1" for p in waiting):
        return waiting
    return None


def leader_metric(c: Cluster, sample: str) -> float:
    text = c.get(c.leader(), "/metrics").body
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(sample)]
    return sum(values)


def test_stuck_partition_is_shown_moved_aborted_and_reset(tmp_path: Path) -> None:
    c = Cluster(tmp_path, **SETTINGS)
    c.start_all()
    w = ScriptedWorkers(c)
    try:
        three_online(c, w)
        wait_until(lambda: all(p["checkpoint"] is not None for p in table(c)), "checkpoints", 30)
        for wid in ("w2", "w3"):
            lose(w, wid, True)
        w.procs["w1"].kill9()  # w1's partitions go to w2 and w3, which cannot load them
        victims = wait_until(lambda: all_stuck(c), "w1's partitions all stuck", 60)
        for p in victims:
            assert p["status"] == "assigning" and "no lossless fallback" in p["stuck"], p
            reasons = [
                h["reason"]
                for h in c.get(c.leader(), f"/v1/partitions/{p['partition']}/history").body[
                    "history"
                ]
            ]
            assert reasons[-1] in ("failure", "fallback"), reasons
        assert leader_metric(c, "ripple_partitions_stuck") == len(victims)
        assert leader_metric(c, 'ripple_partition_fallbacks_total{to="stuck"}') >= len(victims)
        out = ripple("partitions", "--coordinator", c.url(c.leader()))
        assert out.returncode == 0, out.stderr
        assert "STUCK" in out.stdout and "no lossless fallback" in out.stdout

        # Reassign works on a stuck partition (it is ASSIGNING with no migration)...
        p = victims[0]
        to = "w3" if p["owner"] == "w2" else "w2"
        r = admin(c, "/v1/admin/reassign", {"moves": [{"partition": p["partition"], "to": to}]})
        assert r.status == 202, r
        mid = r.body["migrations"][0]["id"]
        # ...the source never loaded it, so it hands off at once, and the target cannot
        # load it either: abort detaches the handed-off migration (it answered 409 before).
        wait_until(
            lambda: (
                {m["id"]: m["phase"] for m in migrations(c)["migrations"]}.get(mid) == "handed_off"
            ),
            "hand-off",
            30,
        )
        ab = admin(c, f"/v1/admin/migrations/{mid}/abort", {})
        assert ab.status == 200 and ab.body["phase"] == "aborted", ab

        # The reset: admin only, ASSIGNING only, then every stuck partition comes ONLINE
        # from offset 0 on a worker whose checkpoints are still "lost".
        leader = c.leader()
        path = f"/v1/admin/partitions/{p['partition']}/reset"
        assert c.post(leader, path, {}).status == 401
        online = next(x for x in table(c) if x["status"] == "online")
        conflict = c.post(
            leader, f"/v1/admin/partitions/{online['partition']}/reset", {}, token=ADMIN
        )
        assert conflict.status == 409 and conflict.body["error"] == "conflict", conflict
        assert c.post(leader, "/v1/admin/partitions/9999/reset", {}, token=ADMIN).status == 404
        for x in victims:
            r = admin(c, f"/v1/admin/partitions/{x['partition']}/reset", {})
            assert r.status == 200 and r.body["partition"] == x["partition"], r
        wait_until(
            lambda: all(x["status"] == "online" for x in table(c)), "all online after reset", 30
        )
        assert stuck(c) == [] and leader_metric(c, "ripple_partitions_stuck") == 0
        history = c.get(leader, f"/v1/partitions/{p['partition']}/history").body["history"]
        assert "reset" in [h["reason"] for h in history], history
    finally:
        w.stop_all()
        c.stop_all()
