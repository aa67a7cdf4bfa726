"""A node whose disk was slow rejoins its cluster within seconds once the disk is fast again.

Two ways a slow disk kept a node out of the cluster long after the spell (replication/
raft_node.py's module doc, on standing aside): each of its ticks, two syncs long, outlasted
the election deadline it had just pushed out, so it stood for election at every tick and
deposed a working leader every few seconds; and once at a newer term than the leader the
others elected meanwhile, it counted that leader's appends, which it ignores unanswered, as a
leader heard, so it stood aside at that term, unheard, until its disk was found fast again,
which takes syncs a candidate never makes (minutes). The first test pins the second alone,
in-process; the second runs the whole spell on three coordinator processes with the tuned
election timeouts, a 2 s sync stretching one tick of the slowed leader to seconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pysyncobj.syncobj import _RAFT_STATE

from replication.log import RaftRole, ReplicatedLog
from testkit.cluster import Cluster as CoordinatorCluster
from testkit.cluster import agreed_leader
from testkit.wait import wait_until
from tests.integration.test_disk_faults import start_with_controls
from tests.integration.test_replication import Cluster, running, wait_for

# Far above what a rejoin takes once fixed (about LEADERLESS_STAND_TIMEOUTS election timeouts
# plus one election: a few seconds), far below the slow disk's cooldown (60 s) that the
# broken node waited out at best.
REJOIN_S_MAX = 20.0
SLOW_SYNC_MS = 2000
SLOW_SPELL_S = 12.0
WRITE_PERIOD_S = 0.5
# Terms the cluster may go through in the spell: the one election the slow leader's first
# long tick causes, and a spare for a loaded machine. Standing at every tick went through
# about one term a second.
SPELL_TERMS_MAX = 4


def agreed(c: Cluster) -> ReplicatedLog | None:
    """The one ready leader, when every node names it at its own term."""
    nodes = [n for n in c.nodes if n is not None]
    leaders = [n for n in nodes if n.is_ready_leader]
    if len(leaders) != 1:
        return None
    lead = leaders[0].status()
    ok = all(
        (s := n.status()).leader_addr == leaders[0].settings.self_addr and s.term == lead.term
        for n in nodes
    )
    return leaders[0] if ok else None


async def test_a_node_standing_aside_at_a_newer_term_stands_and_is_heard(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, leader_sync_cooldown_s=60.0) as c:
        leader = await c.leader()
        await leader.propose(b"a")
        follower = next(n for n in c.nodes if n is not None and n is not leader)
        # As after a slow spell: found slow (so it stands aside for the cooldown) and a
        # candidate at a term the leader never heard of.
        with follower._raft_lock:
            now_ms = follower._clock.monotonic_ms()
            for _ in range(3):
                follower._slow_disk.synced(5.0, now_ms)
            raft = follower._node
            term = raft.raftCurrentTerm
            raft._SyncObj__setCurrentTerm(term + 1, None)
            raft._SyncObj__setState(_RAFT_STATE.CANDIDATE)
        assert follower.status().role is RaftRole.CANDIDATE and follower.status().disk_slow
        started = time.monotonic()
        new = await wait_for(lambda: agreed(c), "every node to name one leader", REJOIN_S_MAX)
        assert new.status().term > term + 1, "the newer term reached the others"
        assert follower.status().role is not RaftRole.CANDIDATE
        assert await new.propose(b"b") is not None
        print(f"rejoined in {time.monotonic() - started:.1f}s at term {new.status().term}")


def test_a_leader_slowed_to_seconds_per_sync_rejoins_at_once_when_fast_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = CoordinatorCluster(tmp_path)  # the tuned election timeouts: 0.3-0.6 s
    try:
        controls = start_with_controls(c, tmp_path, monkeypatch)
        slow = c.ready(60.0)
        term0 = (c.health(slow) or {})["term"]
        controls[slow].write_text(json.dumps({"journal_sync_delay_ms": SLOW_SYNC_MS}))
        spell_end = time.monotonic() + SLOW_SPELL_S
        k = 0
        while time.monotonic() < spell_end:  # writes keep the slow node syncing
            body = {"worker_id": f"w{k}", "address": "http://127.0.0.1:9"}
            # 409: an attempt whose answer was lost (a leader deposed under it) had landed.
            assert c.write_via_any("/v1/workers", body).status in (200, 409)
            k += 1
            time.sleep(WRITE_PERIOD_S)
        terms = {n: h["term"] for n in c.alive() if (h := c.health(n)) is not None}
        controls[slow].unlink()
        undone = time.monotonic()

        def agreed_now() -> str | None:
            healths = {n: c.health(n) for n in c.alive()}
            answered = {n: h for n, h in healths.items() if h is not None}
            return agreed_leader(answered) if len(answered) == len(healths) == 3 else None

        leader = wait_until(
            agreed_now, "every node, the slowed one too, to name one leader", REJOIN_S_MAX
        )
        rejoin_s = time.monotonic() - undone
        h = c.health(slow)
        assert h is not None and h["role"] in ("follower", "leader") and h["halted"] is None
        assert max(terms.values()) - term0 <= SPELL_TERMS_MAX, f"elections in the spell: {terms}"
        print(f"slowed {slow}: terms {term0} -> {terms}; {leader} agreed {rejoin_s:.1f}s after")
        # And it catches up: it holds a write made after the spell.
        body = {"worker_id": "after", "address": "http://127.0.0.1:9"}
        assert c.write_via_any("/v1/workers", body).status in (200, 409)

        def holds_it() -> bool:
            r = c.get(slow, "/v1/workers")
            return r.status == 200 and "after" in {w["worker_id"] for w in r.body["workers"]}

        wait_until(holds_it, "the slowed node to catch up", REJOIN_S_MAX)
    finally:
        c.stop_all()
