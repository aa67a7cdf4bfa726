"""Chaos scenarios on real processes: three coordinators, scripted workers, client load.

Each scenario has a fixed seed, a minimum operation rate before its first fault (a run below
it fails as INVALID, it does not pass), its own invariant, and the shared checks (no
acknowledged write lost, linearizable history, replicas equal after heal). The default run
is short; ``pytest tests/chaos --soak`` runs the long versions. Each prints one ``[chaos]``
line with its figures (run with ``-s`` to see them).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from testkit.background import Background
from testkit.cluster import ADMIN, Cluster, worker_token
from testkit.faults.raft_links import RaftLinks
from testkit.http import Reply, call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.chaos.harness import (
    CHAOS_SETTINGS,
    CLIENT_TIMEOUT_S,
    Figures,
    Load,
    check_acknowledged,
    check_linearizable,
    check_replicas_equal,
    register_recorded,
    request,
    require_rate,
    start_env,
    start_env_with_links,
    wait_settled,
)

MIN_OPS_PER_S = 5.0
WARMUP_S = 2.0
KILL_EVERY_S = 3.0
BURST_WRITES = 1000
BURST_CLIENTS = 8
# Concurrent writers in the scenarios that check group commit: enough that writes share log
# entries, so the linearizability checker runs on batched histories.
BATCHED_WRITERS = 6
CATCH_UP_S = 20.0


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Cluster, ScriptedWorkers]]:
    cluster, workers = start_env(tmp_path)
    try:
        yield cluster, workers
    finally:
        workers.stop_all()
        cluster.stop_all()


def warm_up(load: Load) -> None:
    load.start()
    time.sleep(WARMUP_S)
    require_rate(load, 0, WARMUP_S, MIN_OPS_PER_S)


def finish(cluster: Cluster, load: Load, figures: Figures, started: float) -> None:
    load.stop()
    cluster.leader(60.0)
    check_acknowledged(cluster, load, figures)
    check_linearizable(load, figures)
    wait_settled(cluster)
    check_replicas_equal(cluster, figures)
    check_batched(cluster, load, figures)
    figures.duration_s = time.monotonic() - started
    print(figures.line())
    assert not figures.violations, f"seed={figures.seed}: {figures.violations}"


def sample_batching(cluster: Cluster, figures: Figures) -> None:
    """Add what the live nodes proposed since their last start (log entries and the commands
    they carried) to the figures. Call it before killing nodes, whose counts die with them."""
    for node in cluster.alive():
        counts = cluster.proposed(node)
        if counts is not None:
            for key, value in zip(("entries_proposed", "commands_proposed"), counts, strict=True):
                figures.ops[key] = figures.ops.get(key, 0) + value


def check_batched(cluster: Cluster, load: Load, figures: Figures) -> None:
    """With BATCHED_WRITERS writers, a run where no entry carried two commands did not test
    group commit at all, and says so."""
    sample_batching(cluster, figures)
    entries = figures.ops.get("entries_proposed", 0)
    commands = figures.ops.get("commands_proposed", 0)
    if load.writers >= BATCHED_WRITERS and commands <= entries:
        figures.violations.append(
            f"no batching: {commands} commands in {entries} entries; the history checked "
            "holds no batched writes"
        )


def test_a_leader_killed_every_3s(
    env: tuple[Cluster, ScriptedWorkers], request: pytest.FixtureRequest
) -> None:
    """(a) kill -9 the leader every ~3 s under load; it restarts ~1 s later."""
    cluster, _ = env
    seed = 101
    rng = random.Random(seed)
    duration_s = 60.0 if request.config.getoption("--soak") else 15.0
    figures = Figures(scenario="a_leader_kill", seed=seed)
    started = time.monotonic()
    load = Load(cluster, seed, writers=BATCHED_WRITERS)
    warm_up(load)
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        t0 = time.monotonic()
        leader = cluster.leader(30.0)
        cluster.kill9(leader)
        figures.fault("kill9_leader")
        time.sleep(0.8 + 0.4 * rng.random())
        cluster.start(leader)
        time.sleep(max(0.0, KILL_EVERY_S - (time.monotonic() - t0)))
    finish(cluster, load, figures, started)


@pytest.fixture
def env_links(tmp_path: Path) -> Iterator[tuple[Cluster, ScriptedWorkers, RaftLinks]]:
    cluster, workers, links = start_env_with_links(tmp_path)
    try:
        yield cluster, workers, links
    finally:
        workers.stop_all()
        cluster.stop_all()
        links.close()


class VictimWatch(Background):
    """Every 50 ms: does `victim` lead, ready, below the commit index `high` that live nodes
    had reported before it restarted? Each such sighting is in `bad`."""

    every_s = 0.05

    def __init__(self, cluster: Cluster, victim: str, high: int) -> None:
        self.cluster = cluster
        self.victim = victim
        self.high = high
        self.bad: list[str] = []
        super().__init__("victim-watch")

    def step(self) -> None:
        h = self.cluster.health(self.victim)
        leads = h and h.get("role") == "leader" and h.get("ready")
        if leads and h.get("applied_index", 0) < self.high:
            applied = h.get("applied_index")
            self.bad.append(f"{self.victim} leads at applied {applied} < {self.high}")


class Prober(Background):
    """Writes straight to one node (no redirect followed), each recorded in the history.

    Every write it starts after `start()` targets a node the scenario has cut off or
    paused: an `ok` from it is an acknowledgement no majority stands behind.
    """

    def __init__(self, cluster: Cluster, node: str, load: Load, process: int = 99) -> None:
        self.send = straight_to(cluster, node)
        self.load = load
        self.process = process
        self.acked: list[str] = []
        self.sent = 0
        super().__init__("prober")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sent += 1
            wid = f"probe-{self.sent}"
            if register_recorded(self.load.history, wid, self.process, self.send):
                self.acked.append(wid)
            time.sleep(0.1)  # pacing: about ten probes a second


def straight_to(cluster: Cluster, node: str) -> Callable[[dict[str, Any]], Reply]:
    """POST /v1/workers to exactly `node`, no redirect followed."""
    url = cluster.url(node) + "/v1/workers"
    return lambda body: call("POST", url, body, timeout_s=CLIENT_TIMEOUT_S)


def test_b_leader_cut_off_from_followers(
    env_links: tuple[Cluster, ScriptedWorkers, RaftLinks], request: pytest.FixtureRequest
) -> None:
    """(b) black-hole the leader's Raft links to both followers under load: it acknowledges
    no write, steps down, a follower takes over; after heal one leader, replicas equal."""
    cluster, _, links = env_links
    seed = 202
    cut_s = 20.0 if request.config.getoption("--soak") else 6.0
    figures = Figures(scenario="b_leader_cut_off", seed=seed)
    started = time.monotonic()
    load = Load(cluster, seed, writers=BATCHED_WRITERS)
    warm_up(load)
    old = cluster.leader(30.0)
    others = [s.id for s in cluster.specs if s.id != old]
    links.isolate(old)
    t_cut = time.monotonic()
    figures.fault("cut_leader_raft_links")
    prober = Prober(cluster, old, load)
    prober.start()
    try:
        new = cluster.leader(15.0, among=others)
        figures.ops["failover_ms"] = round((time.monotonic() - t_cut) * 1000)
        # More than one append batch (64 KiB) past the cut-off node's divergent tail: the
        # shape that kept pysyncobj from ever catching it up (docs/reliability.md, bug 6).
        figures.ops["burst_writes_ok"] = burst(cluster, new, load, BURST_WRITES)
        # Cut off, it must give up leadership on its own (leader_fallback_timeout_s).
        wait_until(
            lambda: (h := cluster.health(old)) is not None and h.get("role") != "leader",
            "the cut-off leader steps down",
            15.0,
        )
        figures.ops["step_down_ms"] = round((time.monotonic() - t_cut) * 1000)
        time.sleep(max(0.0, cut_s - (time.monotonic() - t_cut)))
    finally:
        prober.stop()
        links.heal()
    figures.fault("heal")
    t_heal = time.monotonic()
    target = (cluster.health(new) or {}).get("commit_index", 0)
    try:
        wait_until(
            lambda: (cluster.health(old) or {}).get("applied_index", 0) >= target,
            f"{old} applies the majority's log after heal",
            CATCH_UP_S,
        )
        figures.ops["catch_up_ms"] = round((time.monotonic() - t_heal) * 1000)
    except AssertionError as exc:
        figures.violations.append(f"{old} never caught up after heal: {exc}")
    figures.ops["probe_writes"] = prober.sent
    figures.ops["dropped_raft_bytes"] = links.dropped_bytes()
    if prober.acked:
        figures.violations.append(f"cut-off leader acknowledged {prober.acked[:5]}")
    if new == old:
        figures.violations.append(f"{old} still leads while cut off")
    if figures.ops["dropped_raft_bytes"] == 0:
        figures.violations.append("the cut dropped no Raft traffic: the fault did not happen")
    finish(cluster, load, figures, started)


def burst(cluster: Cluster, node: str, load: Load, n: int) -> int:
    """`n` registrations straight to `node` from BURST_CLIENTS threads, into the history."""
    send = straight_to(cluster, node)

    def one(i: int) -> bool:
        return register_recorded(load.history, f"burst-{i}", 98, send)

    with ThreadPoolExecutor(BURST_CLIENTS) as pool:
        return sum(pool.map(one, range(n)))


def test_g_leader_paused_past_timeouts(
    env: tuple[Cluster, ScriptedWorkers], request: pytest.FixtureRequest
) -> None:
    """(g) SIGSTOP the leader until a follower leads, then SIGCONT: the old leader commits
    nothing of its old term, no live worker is declared dead, the cluster converges."""
    cluster, _ = env
    seed = 707
    pauses = 4 if request.config.getoption("--soak") else 1
    figures = Figures(scenario="g_leader_pause", seed=seed)
    started = time.monotonic()
    load = Load(cluster, seed)
    warm_up(load)
    for _ in range(pauses):
        old = cluster.leader(30.0)
        others = [s.id for s in cluster.specs if s.id != old]
        cluster.procs[old].signal(signal.SIGSTOP)
        figures.fault("sigstop_leader")
        try:
            cluster.leader(15.0, among=others)
            # Past every timeout of the old leader's own clocks: heartbeats and leases.
            time.sleep(CHAOS_SETTINGS["heartbeat_timeout_s"] + 0.5)
            prober = Prober(cluster, old, load)
        finally:
            cluster.procs[old].signal(signal.SIGCONT)
        # Right after it wakes the old leader believes it leads: write to it directly.
        prober.start()
        time.sleep(2.0)
        prober.stop()
        figures.ops["probe_writes"] = figures.ops.get("probe_writes", 0) + prober.sent
        figures.ops["probe_acked"] = figures.ops.get("probe_acked", 0) + len(prober.acked)
    load.stop()
    dead = [
        w["worker_id"]
        for w in request_ok(cluster, "/v1/workers?consistent=true")["workers"]
        if w["worker_id"] in ("w1", "w2", "w3") and w["state"] != "active"
    ]
    if dead:
        figures.violations.append(f"live workers declared dead by a paused leader: {dead}")
    finish(cluster, load, figures, started)


def request_ok(cluster: Cluster, path: str) -> Any:
    r = wait_until(
        lambda: (r := request(cluster, "GET", path)).status == 200 and r, path, CLIENT_TIMEOUT_S * 5
    )
    return r.body


def owners(cluster: Cluster) -> dict[int, tuple[str | None, int]]:
    r = request(cluster, "GET", "/v1/partitions?consistent=true")
    assert r.status == 200, r
    return {p["partition"]: (p["owner"], p["epoch"]) for p in r.body["partitions"]}


def open_gates_unique(workers: ScriptedWorkers, figures: Figures) -> None:
    """No two workers hold an open gate for one partition at one epoch (double processing)."""
    holders: dict[tuple[int, int], str] = {}
    for wid, proc in workers.procs.items():
        if not proc.alive():
            continue
        for p, g in workers.state(wid)["gates"].items():
            if not g["open"]:
                continue
            other = holders.setdefault((int(p), g["epoch"]), wid)
            if other != wid:
                figures.violations.append(f"p{p} e{g['epoch']} open on {other} and {wid}")


def test_c_worker_paused_past_timeout(env: tuple[Cluster, ScriptedWorkers]) -> None:
    """(c) SIGSTOP a worker past heartbeat_timeout, SIGCONT: moved, fenced, no double owner."""
    cluster, workers = env
    seed = 303
    figures = Figures(scenario="c_worker_pause", seed=seed)
    started = time.monotonic()
    load = Load(cluster, seed, writers=1)
    warm_up(load)
    # The load's registrations are workers that never heartbeat; placement would hand the
    # paused worker's partitions to them. Stop writing and let them be declared dead first.
    load.stop()
    wait_until(
        lambda: all(
            w["state"] != "active"
            for w in request(cluster, "GET", "/v1/workers?consistent=true").body["workers"]
            if w["worker_id"].startswith("c")
        ),
        "the load's phantom workers declared dead",
        CHAOS_SETTINGS["heartbeat_timeout_s"] + 20,
    )
    before = owners(cluster)
    # min_cluster_size is 2 of 3 workers: the last to register may own nothing yet.
    victim = next((w for w in ("w1", "w2", "w3") if any(o == w for o, _ in before.values())), "w1")
    held = {p: e for p, (o, e) in before.items() if o == victim}
    assert held, f"{victim} owns nothing: {before}"
    old_incarnation = workers.state(victim)["incarnation"]
    workers.procs[victim].signal(signal.SIGSTOP)
    figures.fault("sigstop_worker")
    try:
        moved = wait_until(
            lambda: (
                (o := owners(cluster))
                and all(o[p][0] != victim and o[p][1] > e for p, e in held.items())
                and o
            ),
            "the paused worker's partitions moved",
            CHAOS_SETTINGS["heartbeat_timeout_s"] + 20,
        )
        # While it is still stopped, report an old-epoch checkpoint in its name (its token is
        # what the stopped process holds): the worker is DEAD, the report must change nothing.
        stale = {
            "worker_id": victim,
            "incarnation": old_incarnation,
            "checkpoints": [
                {"partition": p, "epoch": e, "offset": 10**9, "uri": f"mem://stale/{p}"}
                for p, e in held.items()
            ],
        }
        token = worker_token(victim, old_incarnation)
        r = request(cluster, "POST", "/v1/checkpoints", stale, token=token)
        figures.fault("stale_checkpoint_report")
        if r.status == 200 and any(x["status"] == "accepted" for x in r.body["results"]):
            figures.violations.append(f"stale checkpoint accepted: {r.body}")
    finally:
        workers.procs[victim].signal(signal.SIGCONT)
    # It re-registers under a new incarnation; old-epoch reports under that one are fenced.
    new_inc = wait_until(
        lambda: (i := workers.state(victim)["incarnation"]) > old_incarnation and i,
        "the resumed worker re-registered",
        30.0,
    )
    token = worker_token(victim, new_inc)
    stale["incarnation"] = new_inc
    r = request(cluster, "POST", "/v1/checkpoints", stale, token=token)
    if r.status == 200 and any(x["status"] == "accepted" for x in r.body["results"]):
        figures.violations.append(f"old-epoch checkpoint accepted after re-register: {r.body}")
    after = owners(cluster)
    for p, (_owner, e) in after.items():
        if e < moved[p][1]:
            figures.violations.append(f"p{p} epoch went back {moved[p][1]} -> {e}")
    ck = request(cluster, "GET", "/v1/partitions?consistent=true").body["partitions"]
    for part in ck:
        if part["checkpoint"] and "stale" in str(part["checkpoint"].get("uri", "")):
            figures.violations.append(f"p{part['partition']} holds the stale checkpoint")
    wait_settled(cluster)
    # Give every worker a couple of heartbeats to reconcile, then no (p, epoch) twice.
    time.sleep(1.0)
    open_gates_unique(workers, figures)
    finish(cluster, load, figures, started)


def test_d_whole_cluster_killed_and_restarted(env: tuple[Cluster, ScriptedWorkers]) -> None:
    """(d) kill -9 all three mid-load with migrations pending; restart: all present, done."""
    cluster, _ = env
    seed = 404
    figures = Figures(scenario="d_kill_all", seed=seed)
    started = time.monotonic()
    load = Load(cluster, seed, writers=BATCHED_WRITERS)
    warm_up(load)
    table = owners(cluster)
    moves = [{"partition": p, "to": "w2" if o != "w2" else "w3"} for p, (o, _) in table.items()][:6]
    r = request(cluster, "POST", "/v1/admin/reassign", {"moves": moves}, token=ADMIN)
    assert r.status in (200, 202), r
    mids = [m["id"] for m in r.body["migrations"]]
    time.sleep(0.2)
    sample_batching(cluster, figures)
    for nid in list(cluster.procs):
        cluster.kill9(nid)
    figures.fault("kill9_all")
    time.sleep(0.5)
    for s in cluster.specs:
        cluster.start(s.id)
    figures.fault("restart_all")
    time.sleep(3.0)
    finish(cluster, load, figures, started)
    migs = request(cluster, "GET", "/v1/migrations?consistent=true").body["migrations"]
    phases = {m["id"]: m["phase"] for m in migs if m["id"] in mids}
    assert set(phases) == set(mids), f"seed={seed}: migrations lost: {phases} vs {mids}"
    assert all(p in ("done", "aborted") for p in phases.values()), f"seed={seed}: {phases}"


def test_e_truncated_journal_tail(env: tuple[Cluster, ScriptedWorkers]) -> None:
    """(e) a follower's journal loses its tail while down: it never leads with lost entries."""
    cluster, _ = env
    seed = 505
    figures = Figures(scenario="e_truncated_journal", seed=seed)
    started = time.monotonic()
    load = Load(cluster, seed)
    warm_up(load)
    leader = cluster.leader()
    victim = next(s.id for s in cluster.specs if s.id != leader)
    cluster.kill9(victim)
    figures.fault("kill9_follower")
    time.sleep(1.0)
    journal = Path(cluster.config.data_dir) / victim / "raft.journal"
    size = journal.stat().st_size
    with journal.open("r+b") as f:
        f.truncate(size - size // 3)
    figures.fault("truncate_journal_tail")
    # The highest commit index any live node has reported: the victim must not lead below it.
    high = max((cluster.health(n) or {}).get("commit_index", 0) for n in cluster.alive())
    cluster.start(victim)
    with VictimWatch(cluster, victim, high) as watch:
        # Force elections so the victim gets its chances to lead.
        for _ in range(2):
            time.sleep(2.0)
            current = cluster.leader(30.0)
            if current == victim:
                continue
            cluster.kill9(current)
            figures.fault("kill9_leader")
            time.sleep(1.0)
            cluster.start(current)
        time.sleep(2.0)
    figures.violations.extend(watch.bad)
    assert cluster.procs[victim].alive(), (
        f"seed={seed}: {victim} did not survive its truncated journal:\n"
        + cluster.procs[victim].output()[-3000:]
    )
    finish(cluster, load, figures, started)
