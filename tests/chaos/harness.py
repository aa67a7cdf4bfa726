"""Chaos harness: three real coordinators, scripted workers, client load, faults, a history.

Owns the load generator (registrations of unique worker ids as writes, ``consistent=true``
worker-list reads as reads, every one recorded invoke -> ok / fail / unknown), the fault
injectors (kill -9, SIGSTOP/SIGCONT, journal truncation), and the checks every scenario ends
with: the run met its minimum operation rate (else it is INVALID, not passed), every
acknowledged write is present, the history is linearizable per key, and all replicas hold
the same state at the same applied index.

Every process is a ``testkit.process.Proc`` ended by its PID; every wait has a bound. The
seed only drives the harness's own choices (which client does what, fault timing jitter):
real processes are not deterministic, so the seed makes a run comparable, not replayable.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from testkit.background import Background
from testkit.cluster import Cluster
from testkit.faults.raft_links import RaftLinks
from testkit.http import Reply, call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.chaos.history import History, check_epochs, check_history

CHAOS_SETTINGS: dict[str, Any] = {
    "total_partitions": 12,
    "min_cluster_size": 2,
    "heartbeat_interval_s": 0.3,
    "suspect_after_s": 1.0,
    "lease_s": 1.5,
    "heartbeat_timeout_s": 2.5,
    "checkpoint_interval_s": 1.0,
}
CLIENT_TIMEOUT_S = 3.0
# A partition's (epoch, owner) as bootstrap creates it, read before the cluster has a table.
UNBOOTSTRAPPED = (0, None)
CONVERGE_TIMEOUT_S = 60.0
PRESENT = "present"


@dataclass
class Figures:
    """What a scenario did, for the report and docs/reliability.md."""

    scenario: str
    seed: int
    ops: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def fault(self, name: str) -> None:
        self.faults[name] = self.faults.get(name, 0) + 1

    def line(self) -> str:
        return (
            f"[chaos] {self.scenario} seed={self.seed} {self.duration_s:.1f}s ops={self.ops} "
            f"faults={self.faults} violations={len(self.violations)}"
        )


def leader_url(cluster: Cluster) -> str | None:
    for nid in cluster.alive():
        h = cluster.health(nid)
        if h and h.get("role") == "leader" and h.get("ready"):
            return cluster.url(nid)
    return None


def request(cluster: Cluster, method: str, path: str, body: Any = None, **kw: Any) -> Reply:
    """One attempt at whichever live node answers first; a 307 is followed once."""
    nodes = cluster.alive()
    last: OSError | None = None
    for nid in random.sample(nodes, len(nodes)):
        try:
            r = call(method, cluster.url(nid) + path, body, timeout_s=CLIENT_TIMEOUT_S, **kw)
        except ConnectionRefusedError as exc:
            last = exc
            continue
        if r.status == 307:
            return call(method, r.headers["Location"], body, timeout_s=CLIENT_TIMEOUT_S, **kw)
        return r
    raise last or ConnectionRefusedError("no live node")


class _Client(Background):
    """One client thread of a `Load`: its loop runs until the load's stop event is set."""

    join_timeout_s = CLIENT_TIMEOUT_S * 4  # a request and its redirect, each within its timeout

    def __init__(self, loop: Callable[[int], None], process: int) -> None:
        super().__init__(name=f"{loop.__name__.strip('_')}-{process}")
        self._loop = loop
        self._process = process

    def _run(self) -> None:
        self._loop(self._process)


class Load:
    """Client threads: writers register unique worker ids, a reader reads the list."""

    def __init__(
        self,
        cluster: Cluster,
        seed: int,
        writers: int = 2,
        readers: int = 1,
        epoch_readers: int = 1,
    ) -> None:
        self.cluster = cluster
        self.writers = writers
        self.history = History()
        self.epochs = History()  # consistent reads of every partition's (epoch, owner)
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.threads = (
            [_Client(self._writer, i) for i in range(writers)]
            + [_Client(self._reader, writers + i) for i in range(readers)]
            + [_Client(self._epoch_reader, writers + readers + i) for i in range(epoch_readers)]
        )
        self.keys: list[str] = []
        self._keys_lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        """Stop every client (bounded; again is a no-op) and fail with what ended any of them
        early: a writer or reader that died would leave the checks with less than they say."""
        if self._stopped:
            return
        self._stopped = True
        self.stop_event.set()
        failures = []
        for t in self.threads:
            try:
                t.stop()
            except AssertionError as exc:
                failures.append(str(exc))
        assert not failures, "; ".join(failures)

    def ok_count(self) -> int:
        return sum(1 for op in self.history.ops if op.status == "ok")

    def _writer(self, process: int) -> None:
        seq = 0
        while not self.stop_event.is_set():
            seq += 1
            wid = f"c{process}-{seq}"
            with self._keys_lock:
                self.keys.append(wid)
            headers = {"Idempotency-Key": f"reg-{wid}"}
            send = partial(request, self.cluster, "POST", "/v1/workers", headers=headers)
            if not register_recorded(self.history, wid, process, send):
                time.sleep(0.05)  # back off while the cluster has no leader

    def _reader(self, process: int) -> None:
        while not self.stop_event.is_set():
            with self._keys_lock:
                keys = list(self.keys)
            ops = [self.history.invoke(k, "read", None, process) for k in keys]
            try:
                r = request(self.cluster, "GET", "/v1/workers?consistent=true")
            except OSError:
                for op in ops:
                    self.history.unknown(op)
                time.sleep(0.05)
                continue
            if r.status != 200:
                for op in ops:
                    self.history.fail(op, str(r.status))
                time.sleep(0.05)
                continue
            present = {w["worker_id"] for w in r.body["workers"]}
            for op in ops:
                self.history.ok(op, PRESENT if op.key in present else None)
            time.sleep(0.1)

    def _epoch_reader(self, process: int) -> None:
        parts = range(self.cluster.config.total_partitions)
        while not self.stop_event.is_set():
            ops = [self.epochs.invoke(f"p{p}", "read", None, process) for p in parts]
            try:
                r = request(self.cluster, "GET", "/v1/partitions?consistent=true")
            except OSError:
                r = None
            if r is None or r.status != 200:
                for op in ops:
                    self.epochs.fail(op, "no answer" if r is None else str(r.status))
                time.sleep(0.05)
                continue
            table = {p["partition"]: (p["epoch"], p["owner"]) for p in r.body["partitions"]}
            for p, op in zip(parts, ops, strict=True):
                # A cluster not bootstrapped yet has no table: every partition is then as
                # bootstrap makes it, so a table lost later shows as an epoch going back.
                self.epochs.ok(op, table.get(p, UNBOOTSTRAPPED))
            time.sleep(0.1)


def register_recorded(
    history: History, wid: str, process: int, send: Callable[[dict[str, Any]], Reply]
) -> bool:
    """One registration of `wid` through `send`, recorded as a write; True if acknowledged.

    Refused connections, 4xx and an unfollowed 307 never reached a proposal: fail. Any
    other error (timeout, reset, 503 after proposing) may still commit: unknown.
    """
    op = history.invoke(wid, "write", PRESENT, process)
    try:
        r = send({"worker_id": wid, "address": "http://127.0.0.1:9"})
    except ConnectionRefusedError:
        history.fail(op, "refused")
        return False
    except OSError as exc:
        history.unknown(op, type(exc).__name__)
        return False
    if r.status == 200:
        history.ok(op)
        return True
    if 400 <= r.status < 500 or r.status == 307:
        history.fail(op, str(r.status))
    else:
        history.unknown(op, str(r.status))
    return False


def require_rate(load: Load, since_ok: int, window_s: float, min_ops_per_s: float) -> float:
    rate = (load.ok_count() - since_ok) / window_s
    if rate < min_ops_per_s:
        raise AssertionError(
            f"INVALID RUN: {rate:.1f} ok ops/s < minimum {min_ops_per_s} ops/s "
            "(the machine is too loaded for this run to mean anything)"
        )
    return rate


def check_acknowledged(cluster: Cluster, load: Load, figures: Figures) -> None:
    """Every acknowledged registration is present in a consistent read after heal."""
    body = wait_until(
        lambda: (
            (r := request(cluster, "GET", "/v1/workers?consistent=true")).status == 200 and r.body
        ),
        "a consistent read after heal",
        CONVERGE_TIMEOUT_S,
    )
    present = {w["worker_id"] for w in body["workers"]}
    acked = [op.key for op in load.history.ops if op.kind == "write" and op.status == "ok"]
    lost = [k for k in acked if k not in present]
    if lost:
        figures.violations.append(f"{len(lost)} acknowledged writes lost: {lost[:10]}")
    figures.ops.update(load.history.counts())


def check_linearizable(load: Load, figures: Figures) -> None:
    res = check_history(load.history.ops)
    if not res.ok:
        figures.violations.append(f"not linearizable on {res.key}: {res.reason}")
    epochs = check_epochs(load.epochs.ops)
    if not epochs.ok:
        figures.violations.append(f"epochs not linearizable on {epochs.key}: {epochs.reason}")
    figures.ops["epoch_reads_ok"] = epochs.ops_checked


DIVERGED_READS_MIN = 3  # reads at an equal index with different digests before we call it


def _health_with_digest(cluster: Cluster, nid: str) -> dict[str, Any] | None:
    try:
        r = call("GET", cluster.url(nid) + "/v1/health?digest=true", timeout_s=3.0)
    except OSError:
        return None
    return r.body if r.status == 200 else None  # type: ignore[no-any-return]


def check_replicas_equal(cluster: Cluster, figures: Figures, timeout_s: float = 30.0) -> None:
    """All live nodes' whole replicated state hash-equal at one applied index.

    A node's digest can run one entry ahead of its reported index (pysyncobj bumps its
    counter just after the apply), so one mismatch at an equal index is not yet a
    divergence: it takes DIVERGED_READS_MIN of them.
    """
    mismatches = 0
    last: dict[str, Any] = {}  # each node's last health body, for the timeout message

    def same() -> bool:
        nonlocal mismatches
        last.clear()
        last.update({nid: _health_with_digest(cluster, nid) for nid in cluster.alive()})
        if any(h is None for h in last.values()):
            return False
        views = [(h["applied_index"], h["state_digest"]) for h in last.values() if h]
        if len({index for index, _ in views}) != 1:
            return False
        if len({digest for _, digest in views}) == 1:
            figures.ops["replicas_equal_at"] = views[0][0]
            return True
        mismatches += 1
        if mismatches >= DIVERGED_READS_MIN:
            figures.violations.append(f"replicas differ at applied index {views[0]}: {views}")
            return True
        return False

    try:
        wait_until(same, "all replicas hash-equal at one applied index", timeout_s, every_s=0.02)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last health: {last}") from None


def wait_settled(cluster: Cluster, timeout_s: float = CONVERGE_TIMEOUT_S) -> dict[str, Any]:
    """No migration in flight and every partition ONLINE, read consistently."""

    def settled() -> dict[str, Any] | None:
        r = request(cluster, "GET", "/v1/status?consistent=true")
        if r.status != 200:
            return None
        b = r.body
        online = b["partitions_by_status"].get("online", 0) == b["cluster"]["total_partitions"]
        return b if online and b["migrations_in_flight"] == 0 else None

    return wait_until(settled, "all partitions ONLINE and no migration in flight", timeout_s)


def start_env(root: Path, workers: int = 3, **settings: Any) -> tuple[Cluster, ScriptedWorkers]:
    cluster = Cluster(root, **{**CHAOS_SETTINGS, **settings})
    return cluster, bring_up(cluster, workers)


def start_env_with_links(
    root: Path, workers: int = 3
) -> tuple[Cluster, ScriptedWorkers, RaftLinks]:
    """As start_env, with every Raft link through a forwarder the test can cut."""
    cluster = Cluster(root, raft_bind=True, **CHAOS_SETTINGS)
    links = RaftLinks(
        cluster.specs,
        lambda nid: p.pid if (p := cluster.procs.get(nid)) is not None and p.alive() else None,
    )
    links.start()
    try:
        return cluster, bring_up(cluster, workers), links
    except BaseException:
        links.close()
        raise


def bring_up(cluster: Cluster, workers: int) -> ScriptedWorkers:
    ws = ScriptedWorkers(cluster, call_timeout_s=CLIENT_TIMEOUT_S)
    try:
        cluster.start_all()
        for i in range(workers):
            ws.start(f"w{i + 1}")
        cluster.ready(CONVERGE_TIMEOUT_S)
        wait_settled(cluster)
    except BaseException:
        ws.stop_all()
        cluster.stop_all()
        raise
    return ws
