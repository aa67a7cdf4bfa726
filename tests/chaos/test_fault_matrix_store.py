"""Fault matrix, store cells (issue 39): the store failing a share of requests, the store
unreachable, and a worker's staging disk full, each under the running pipeline of scenario f
(tests/chaos/matrix.py) and ending as scenario f does: every key equal to the batch job, the
log holding exactly what the producer appended, every recorded checkpoint loading, no
partition's epoch gone back.

The workers (not the rig's producer and oracle) reach moto through an `S3FaultProxy`, so a
store fault hits exactly their source reads, stagings and checkpoints. Worker w1 runs under
the disk shim (`DiskFaults`) aimed at its temporary directory, where it stages the segments
Spark reads: the staging-disk cell fails its writes there with ENOSPC. The shim, not a small
tmpfs in a private mount namespace, because the fault must come and go in the running
worker (a full disk that gets space back) and the rig starts workers by environment; the
shim's limit (calls through libc only) covers the staging copies, written by Python. A
worker stages copies only for a batch past the files path's Arrow bound (smaller ones go to
Spark as Arrow, from memory), so the cell appends a burst past it as the disk fills: w1's
next batch must write there. Its other local writes (the token file) happen at registration.

What each cell adds to the matrix's checks: the fault happened (the proxy or the shim
counted it); no worker left ACTIVE or re-registered and no partition changed owner or epoch
(a store that is slow or down is waited on, never a reason to move or declare dead); and,
for the outage and the full disk, the leader showed the owner's partitions as `failing`
with the store's or the disk's error, which is what an operator reads.

Every cell is `soak` (opt-in with --soak), the short one (30% of requests failed for
HOLD_SHORT_S) as well as the issue's full-length ones: each needs a pipeline on Spark for
minutes, and the default run holds the store's retries and reasons in
tests/unit/test_store_faults.py (a real S3 call through the fault proxy among them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.datapath import FILES_ARROW_ROWS_MAX_DEFAULT
from pipeline.source import generate
from testkit.background import Background
from testkit.faults.disk import DiskFaults
from testkit.faults.s3_proxy import Fault, S3FaultProxy, Window
from testkit.http import call
from tests.chaos.matrix import (
    CLOCK_WORKER,
    KEYS,
    SEED,
    Matrix,
    Options,
    check_held_steady,
    open_matrix,
    placement,
    run_cell,
)

# A cell's setup (three coordinators, two workers on Spark, the initial records) and its end
# checks (a Spark batch job over the whole log) take minutes on a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

HOLD_SHORT_S = 15.0
ERRORS_HOLD_S = 60.0
UNREACHABLE_HOLD_S = 120.0
DISK_FULL_HOLD_S = 30.0
ERROR_RATE = 0.3
# A fault window outlives its hold by this, so only the cell's undo ends it.
WINDOW_MARGIN_S = 30.0
DISK_WORKER = CLOCK_WORKER  # w1: under the clock shim already, the disk shim added
# Past FILES_ARROW_ROWS_MAX_DEFAULT for the half of the partitions one worker holds.
BURST_RECORDS = 2 * FILES_ARROW_ROWS_MAX_DEFAULT + 20_000
FAILING_EVERY_S = 0.5
FAILING_TIMEOUT_S = 3.0


@dataclass
class Store:
    matrix: Matrix
    proxy: S3FaultProxy
    disk: DiskFaults
    tmp: Path  # the disk worker's temporary directory (its staging lives there)


@pytest.fixture
def store(
    tmp_path: Path, spark_remote: str, moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> Iterator[Store]:
    tmp = tmp_path / f"tmp-{DISK_WORKER}"
    tmp.mkdir()
    disk = DiskFaults(tmp, tmp_path / "diskfault.ctl")

    def worker_env(wid: str) -> dict[str, str]:
        return {**disk.env(), "TMPDIR": str(tmp)} if wid == DISK_WORKER else {}

    proxy = S3FaultProxy(moto_endpoint)
    proxy.start()
    try:
        opts = Options(worker_s3_endpoint=proxy.url, worker_env=worker_env)
        with open_matrix(tmp_path, spark_remote, moto_endpoint, s3_bucket[1], opts) as m:
            yield Store(m, proxy, disk, tmp)
    finally:
        disk.clear()
        proxy.close()


class FailingSeen(Background):
    """The leader's partition table, read all along: when a partition first showed as
    failing, and the errors it showed."""

    every_s = FAILING_EVERY_S
    join_timeout_s = 4 * FAILING_TIMEOUT_S

    def __init__(self, m: Matrix) -> None:
        super().__init__("failing-seen")
        self.m = m
        self.first_at_s: float | None = None
        self.errors: set[str] = set()

    def step(self) -> None:
        cluster = self.m.rig.cluster
        try:
            leader = cluster.leader(FAILING_TIMEOUT_S)
            r = call("GET", cluster.url(leader) + "/v1/partitions", timeout_s=FAILING_TIMEOUT_S)
        except (OSError, AssertionError, TimeoutError):
            return  # no leader to ask this round; the next one asks again
        if r.status != 200:
            return
        for x in r.body["partitions"]:
            if x.get("failing"):
                if self.first_at_s is None:
                    self.first_at_s = self.m.watch.now_s()
                self.errors.add(x["failing"]["error"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """A fault, its undo, and why a run of it proved nothing (None: the fault happened)."""

    fault: Callable[[], None]
    undo: Callable[[], None]
    invalid: Callable[[], str | None]


def store_cell(
    s: Store,
    cell: str,
    fault: Callable[[], None],
    undo: Callable[[], None],
    hold_s: float,
    *,
    invalid: Callable[[], str | None],
    failing_expected: bool,
) -> None:
    """One cell, checked for what the store's faults must not do and must show. `invalid`
    says why the run proved nothing (the fault never happened), or None."""
    m = s.matrix
    before = placement(m)
    with FailingSeen(m) as seen:
        figures, began, undone = run_cell(m, cell, fault, undo, hold_s)
    check_held_steady(m, figures, before, (began, undone), "a store fault")
    shown = None if seen.first_at_s is None else round(seen.first_at_s - began, 1)
    print(f"[matrix] {cell}: failing shown after {shown} s: {sorted(seen.errors)[:3]}")
    print(f"[matrix] {cell}: store {s.proxy.counts()}, disk {s.disk.counts()}")
    if failing_expected and shown is None:
        figures.violations.append("the leader never showed a failing partition")
    why = invalid()
    if why is not None:
        figures.violations.append(f"INVALID RUN: {why}")
    assert not figures.violations, f"{cell}: {figures.violations}"


def errors_at(rate: float, hold_s: float) -> list[Window]:
    """`rate` of the requests failed, a third each 503 SlowDown, 500 and a reset: windows
    are drawn in turn, so each one's rate is its share of what the ones before let pass."""
    end_s = hold_s + WINDOW_MARGIN_S
    share = rate / 3
    windows = []
    passed = 1.0
    for fault in (Fault.SLOW_DOWN, Fault.INTERNAL_ERROR, Fault.RESET):
        windows.append(Window(fault=fault, start_s=0.0, end_s=end_s, rate=share / passed))
        passed -= share
    return windows


def errors_cell(s: Store, hold_s: float) -> None:
    proxy = s.proxy

    def invalid() -> str | None:
        counts = proxy.counts()
        if counts[Fault.SLOW_DOWN] and counts[Fault.INTERNAL_ERROR]:
            return None
        return f"the proxy injected too little: {counts}"

    store_cell(
        s,
        f"store_errors_30pct_{hold_s:.0f}s",
        lambda: proxy.schedule(errors_at(ERROR_RATE, hold_s)),
        proxy.clear,
        hold_s,
        invalid=invalid,
        failing_expected=False,  # the client's retries absorb most; a partition may show
    )


@pytest.mark.soak
def test_store_failing_30pct_of_requests_short(store: Store) -> None:
    errors_cell(store, HOLD_SHORT_S)


@pytest.mark.soak
def test_store_failing_30pct_of_requests_for_a_minute(store: Store) -> None:
    errors_cell(store, ERRORS_HOLD_S)


def store_unreachable(s: Store, hold_s: float) -> Cell:
    proxy = s.proxy
    return Cell(
        fault=lambda: proxy.inject(Fault.UNREACHABLE, duration_s=hold_s + WINDOW_MARGIN_S),
        undo=proxy.clear,
        invalid=lambda: None if proxy.counts()[Fault.UNREACHABLE] else "the store stayed up",
    )


def staging_disk_full(s: Store, hold_s: float) -> Cell:
    disk, m = s.disk, s.matrix

    def fault() -> None:
        disk.set(duration_s=hold_s + WINDOW_MARGIN_S, write_enospc=True)
        # A batch stages copies only past the files path's Arrow bound (50,000 rows): a
        # burst puts each worker's next batch past it, so w1 must write to its full disk.
        records = generate(BURST_RECORDS, KEYS, seed=SEED * 1_000_003)
        m.rig.producer.produce(records)
        m.extra_records += len(records)

    return Cell(
        fault=fault,
        undo=disk.clear,
        invalid=lambda: None if disk.counts().write_enospc else f"no write failed in {s.tmp}",
    )


@pytest.mark.soak
@pytest.mark.parametrize(
    ("cell", "hold_s"),
    [(store_unreachable, UNREACHABLE_HOLD_S), (staging_disk_full, DISK_FULL_HOLD_S)],
    ids=["store_unreachable", "staging_disk_full"],
)
def test_outage_shows_as_failing_and_moves_nothing(
    store: Store, cell: Callable[[Store, float], Cell], hold_s: float
) -> None:
    c = cell(store, hold_s)
    name = f"{cell.__name__}_{hold_s:.0f}s"
    store_cell(store, name, c.fault, c.undo, hold_s, invalid=c.invalid, failing_expected=True)


def test_errors_at_fails_the_rate_asked() -> None:
    windows = errors_at(ERROR_RATE, HOLD_SHORT_S)
    passed, failed = 1.0, 0.0
    for w in windows:
        failed += passed * w.rate
        passed -= passed * w.rate
    assert abs(failed - ERROR_RATE) < 1e-9
    assert {w.fault for w in windows} == {Fault.SLOW_DOWN, Fault.INTERNAL_ERROR, Fault.RESET}
    assert all(w.start_s == 0.0 for w in windows)
