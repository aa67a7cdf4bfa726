"""Power cuts: all three coordinators lose their power at once, again and again, under a
steady write load; no acknowledged write may be lost.

A cut freezes the three node processes (SIGSTOP), kills them and any child they forked (a
compaction's dump writer) with SIGKILL, and throws away every byte that was not synced: the
nodes run with the test-only switch of `replication.durability`, so each keeps beside its
journal, term/vote record and dump an image of what its syncs made durable, and the test
puts those images in place of the files (a file without one was never synced: deleted)
before it restarts the nodes. After every restart each registration acknowledged before it
must be there, in a read through the log; at the end the partitions' (epoch, owner) reads
are linearizable (a lost epoch bump would hand one epoch to two owners) and the replicas
are equal. Compaction runs every LOG_COMPACTION_MIN_ENTRIES entries, so cuts also land
around dumps and journal trims.

One seed drives the cut moments and is printed. The default run makes POWER_CUTS cuts; with
``--soak``, POWER_CUTS_SOAK. The same cuts with ``fsync = false`` must lose acknowledged
writes: proof that this check can fail. With nothing synced, the first cut leaves no state
at all, so that test stops at the first loss and stays in the default run.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from replication.durability import SYNCED_IMAGE_SUFFIX, SYNCED_IMAGES_ENV
from testkit.cluster import Cluster
from testkit.prom import parse, value
from testkit.wait import wait_until
from tests.chaos.harness import Figures, Load, check_linearizable, check_replicas_equal, request

POWER_CUTS = 10
POWER_CUTS_SOAK = 60
POWER_CUTS_WITHOUT_FSYNC = 3
SEED = 808
WRITERS = 4  # enough that writes share log entries (group commit) and syncs
CUT_AFTER_S = (0.1, 1.5)  # a cut comes this long after the first write acknowledged since a restart
LOG_COMPACTION_MIN_ENTRIES = 300
SETTINGS = {
    "total_partitions": 4,
    "log_compaction_min_entries": LOG_COMPACTION_MIN_ENTRIES,
    # Registered workers never heartbeat: each is declared dead after this and its partitions
    # move on under new epochs, so epoch bumps keep coming between cuts too.
    "heartbeat_timeout_s": 3.0,
}
ACK_TIMEOUT_S = 60.0  # for the first acknowledged write after a restart
RESTART_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def power_cut(cluster: Cluster) -> None:
    """Every node stops at once, with whatever it forked; nothing runs on after the cut."""
    procs = [cluster.procs[s.id] for s in cluster.specs]
    for proc in procs:
        proc.signal(signal.SIGSTOP)
    for proc in procs:
        wait_until(
            lambda pid=proc.pid: psutil.Process(pid).status() == psutil.STATUS_STOPPED,
            f"node pid {proc.pid} stopped",
            STOP_TIMEOUT_S,
            every_s=0.005,
        )
    # Stopped, a node forks no more: its children now are all it will ever have had running.
    children = [c for proc in procs for c in psutil.Process(proc.pid).children(recursive=True)]
    for child in children:
        child.kill()
    for proc in procs:
        proc.kill9()
    psutil.wait_procs(children, timeout=STOP_TIMEOUT_S)


def keep_only_synced(node_dir: Path) -> None:
    """Each file becomes what its syncs made durable; a file never synced goes."""
    for path in node_dir.iterdir():
        if path.name.endswith(SYNCED_IMAGE_SUFFIX):
            continue
        image = Path(str(path) + SYNCED_IMAGE_SUFFIX)
        if image.exists():
            shutil.copyfile(image, path)
        else:
            path.unlink()  # never synced (a temp file among them, images' own too)


def acknowledged(load: Load) -> set[str]:
    return {op.key for op in load.history.ops if op.kind == "write" and op.status == "ok"}


def present(cluster: Cluster) -> set[str]:
    """Every registered worker, in a read through the log."""
    body = wait_until(
        lambda: (
            (r := request(cluster, "GET", "/v1/workers?consistent=true")).status == 200 and r.body
        ),
        "a consistent read of the workers",
        RESTART_TIMEOUT_S,
    )
    return {w["worker_id"] for w in body["workers"]}


def compactions(cluster: Cluster) -> int:
    """Journals rewritten after a compaction on the live nodes since they started."""
    total = 0
    for node in cluster.alive():
        samples = parse(str(cluster.get(node, "/metrics").body))
        total += int(value(samples, "ripple_raft_syncs_total", file="journal_rewrite") or 0)
    return total


def run_cuts(
    cluster: Cluster, load: Load, figures: Figures, cuts: int, *, stop_at_loss: bool
) -> None:
    """Up to `cuts` power cuts, each at a seeded moment after writes were acknowledged; after
    each restart, every write acknowledged so far is checked for."""
    rng = random.Random(figures.seed)
    for cut in range(1, cuts + 1):
        acks = load.ok_count()
        wait_until(lambda acks=acks: load.ok_count() > acks, "a write acknowledged", ACK_TIMEOUT_S)
        time.sleep(rng.uniform(*CUT_AFTER_S))
        figures.ops["compactions"] = figures.ops.get("compactions", 0) + compactions(cluster)
        power_cut(cluster)
        figures.fault("power_cut")
        for spec in cluster.specs:
            keep_only_synced(cluster.config.node_dir(spec.id))
        for spec in cluster.specs:
            cluster.start(spec.id)
        cluster.ready(RESTART_TIMEOUT_S)
        acked = acknowledged(load)  # before the read: each of these committed before it began
        lost = acked - present(cluster)
        figures.ops["acknowledged"] = len(acked)
        print(f"[chaos] cut {cut}/{cuts}: {len(acked)} acknowledged, {len(lost)} lost")
        if lost:
            figures.violations.append(
                f"cut {cut}: {len(lost)} of {len(acked)} acknowledged writes lost: "
                f"{sorted(lost)[:5]}"
            )
            if stop_at_loss:
                return


@contextlib.contextmanager
def loaded_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, fsync: bool, epoch_readers: int
) -> Iterator[tuple[Cluster, Load]]:
    """Three nodes keeping synced images, under WRITERS writers (and `epoch_readers`)."""
    monkeypatch.setenv(SYNCED_IMAGES_ENV, "1")  # inherited by the node processes
    cluster = Cluster(tmp_path, fsync=fsync, **SETTINGS)
    load = Load(cluster, SEED, writers=WRITERS, readers=0, epoch_readers=epoch_readers)
    load.start()  # its writes fail, and it backs off, until the cluster is up
    try:
        cluster.start_all()
        cluster.ready(RESTART_TIMEOUT_S)
        yield cluster, load
    finally:
        load.stop()
        cluster.stop_all()


@pytest.mark.timeout(1800)  # 60 cuts with --soak: 5-6 minutes, more on a loaded machine
def test_power_cuts_lose_no_acknowledged_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    cuts = POWER_CUTS_SOAK if request.config.getoption("--soak") else POWER_CUTS
    figures = Figures(scenario="power_cut", seed=SEED)
    print(f"[chaos] power_cut seed={SEED} cuts={cuts}")
    started = time.monotonic()
    with loaded_cluster(tmp_path, monkeypatch, fsync=True, epoch_readers=1) as (cluster, load):
        run_cuts(cluster, load, figures, cuts, stop_at_loss=False)
        load.stop()
        check_linearizable(load, figures)
        check_replicas_equal(cluster, figures)
    figures.duration_s = time.monotonic() - started
    print(figures.line())
    assert figures.faults.get("power_cut") == cuts
    assert not figures.violations, f"seed={SEED}: {figures.violations}"


def test_without_fsync_power_cuts_lose_acknowledged_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: with `fsync = false` nothing reaches the synced images, so a
    cut loses every write acknowledged before it."""
    figures = Figures(scenario="power_cut_without_fsync", seed=SEED)
    started = time.monotonic()
    with loaded_cluster(tmp_path, monkeypatch, fsync=False, epoch_readers=0) as (cluster, load):
        run_cuts(cluster, load, figures, POWER_CUTS_WITHOUT_FSYNC, stop_at_loss=True)
    figures.duration_s = time.monotonic() - started
    print(figures.line())
    assert figures.violations, f"seed={SEED}: no acknowledged write lost in {figures.faults}"
    assert not any(
        path.name.endswith(SYNCED_IMAGE_SUFFIX)
        for spec in cluster.specs
        for path in cluster.config.node_dir(spec.id).iterdir()
    ), "a node without fsync kept a synced image"
