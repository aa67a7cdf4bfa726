"""Chaos scenario (f): the pipeline under leader kills, worker kills, migrations and a
checkpoint-store outage ends equal, key for key, to one Spark batch job over its input.

Real parts only: three coordinator processes, `ripple worker` processes on the session's
Spark Connect server, moto's S3 server. Workers reach the store through an S3FaultProxy
(testkit/faults/s3_proxy.py) the test turns off and on; the producer and the oracle reach
the server directly, so the outage hits exactly the workers' checkpoints, loads and reads.

While a producer keeps appending, a fixed seed orders and times the faults (one round of
each kind by default, rounds for SOAK_FAULTS_S with ``--soak``): kill -9 the leader and
restart it ~1 s later; kill -9 a worker that owns partitions and restart it under its id;
an admin reassign of a few partitions; a store outage of a few seconds with another
reassign inside it (releases and checkpoint loads meet the outage). An observer thread
takes consistent reads of the partition table and samples every worker's gates throughout.

Invariants (violations go to Figures and are asserted with the seed at the end):
- after heal and catch-up, every key's state equals the batch job's, and the log holds
  exactly the records the producer appended;
- every partition ONLINE, no migration in flight, each planned migration DONE or ABORTED;
- every checkpoint the coordinator recorded in any read loads from the store, is what was
  recorded, and holds exactly the aggregate of its partition's records below its offset;
- per partition, the epoch never decreases across the consistent reads;
- no (partition, epoch) is ever open on two worker processes (ids or incarnations);
- after heal, every live worker hosts exactly the partitions the table gives it;
- the leader's logged retry delays lie within the backoff cap.
A run below MIN_APPENDED_PER_S or MIN_MERGED_PER_S before the first fault, an outage no
request saw, or a run in which no reassignment was accepted is INVALID, not passed.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.checkpoint import CheckpointStore
from pipeline.source import Producer, generate
from pipeline.state import PartitionState, aggregate_records
from pipeline.store import StoreError
from testkit.background import Background
from testkit.cluster import ADMIN
from testkit.faults.s3_proxy import OUTAGE_FAULTS, S3FaultProxy
from testkit.pipeline_rig import CATCH_UP_TIMEOUT_S, PipelineRig
from testkit.wait import wait_until
from tests.chaos.harness import Figures, request, wait_settled

SEED = 606
WORKERS = ("w1", "w2", "w3")
INITIAL_RECORDS = 2000
KEYS = 40
PRODUCE_EVERY_S = 0.5
RECORDS_PER_PRODUCE = 200
# A micro-batch takes seconds here (one Spark server for every worker, 2 cores), so the
# warm-up spans a few batches of each worker.
WARMUP_S = 8.0
MIN_APPENDED_PER_S = 100.0
MIN_MERGED_PER_S = 20.0
OBSERVE_EVERY_S = 0.25
FAULT_KINDS = ("kill9_leader", "kill9_worker", "reassign", "store_outage")
FAULT_GAP_S = (2.0, 3.0)
RESTART_AFTER_S = (0.8, 1.2)
OUTAGE_S = (3.0, 4.0)
MOVE_INTO_OUTAGE_S = 0.5
MOVES_PER_REASSIGN = 3
REASSIGN_ATTEMPTS = 5
SOAK_FAULTS_S = 120.0
SETTLE_TIMEOUT_S = 60.0
HOSTS_MATCH_TIMEOUT_S = 10.0
LEADER_TIMEOUT_S = 30.0
RETRY_LOG = re.compile(r"retry in (-?\d+) ms")


class Feed(Background):
    """One thread appending generated records to the source log until stopped."""

    def __init__(self, producer: Producer, seed: int) -> None:
        super().__init__("feed")
        self.producer = producer
        self.seed = seed
        self.records = 0
        self.errors = 0

    def _run(self) -> None:
        batch = 0
        while not self._stop.wait(PRODUCE_EVERY_S):
            batch += 1
            records = generate(RECORDS_PER_PRODUCE, KEYS, seed=self.seed * 100_000 + batch)
            try:
                self.producer.produce(records)
            except StoreError:
                # Talks to the server directly, so this is not the injected outage; some
                # partitions' segments of this batch may have landed. The oracle reads the
                # log, so equality still holds; the appended-count check is skipped.
                self.errors += 1
                continue
            self.records += len(records)


class Observer(Background):
    """Consistent reads of the partition table and samples of every worker's gates."""

    def __init__(self, rig: PipelineRig) -> None:
        super().__init__("observer")
        self.rig = rig
        self.violations: list[str] = []
        self.epochs: dict[int, int] = {}
        self.checkpoints: dict[str, tuple[int, int, int]] = {}  # uri -> (partition, epoch, offset)
        self.open_on: dict[tuple[int, int], set[tuple[str, int]]] = {}
        self.reads_ok = 0
        self.reads_failed = 0
        self.gate_samples = 0

    def _run(self) -> None:
        while not self._stop.wait(OBSERVE_EVERY_S):
            self.read_table()
            self.sample_gates()

    def read_table(self) -> None:
        try:
            r = request(self.rig.cluster, "GET", "/v1/partitions?consistent=true")
        except OSError:
            self.reads_failed += 1
            return
        if r.status != 200:
            self.reads_failed += 1
            return
        self.reads_ok += 1
        self.record(r.body["partitions"])

    def record(self, parts: list[dict[str, Any]]) -> None:
        for x in parts:
            p, epoch = x["partition"], x["epoch"]
            last = self.epochs.get(p, 0)
            if epoch < last:
                self.violations.append(f"p{p} epoch went back {last} -> {epoch}")
            self.epochs[p] = max(last, epoch)
            ck = x["checkpoint"]
            if ck is not None:
                self.checkpoints.setdefault(ck["uri"], (p, ck["epoch"], ck["offset"]))

    def sample_gates(self) -> None:
        for wid, proc in list(self.rig.workers.items()):
            if not proc.alive():
                continue
            h = self.rig.health(wid)
            if h is None or h.get("worker_id") != wid or not h.get("incarnation"):
                continue
            self.gate_samples += 1
            for p, g in h["partitions"].items():
                if not g["open"]:
                    continue
                holders = self.open_on.setdefault((int(p), g["epoch"]), set())
                holders.add((wid, int(h["incarnation"])))
                if len(holders) == 2:  # report each (partition, epoch) once
                    self.violations.append(
                        f"p{p} e{g['epoch']} open on two workers: {sorted(holders)}"
                    )


def merged_now(rig: PipelineRig) -> int:
    return sum(int((rig.health(w) or {}).get("stats", {}).get("records", 0)) for w in rig.workers)


def require_pipeline_rate(appended: int, merged: int, window_s: float) -> tuple[float, float]:
    """Records appended and merged per second before the first fault, or INVALID RUN."""
    appended_per_s, merged_per_s = appended / window_s, merged / window_s
    if appended_per_s < MIN_APPENDED_PER_S or merged_per_s < MIN_MERGED_PER_S:
        raise AssertionError(
            f"INVALID RUN: {appended_per_s:.0f} records/s appended (minimum "
            f"{MIN_APPENDED_PER_S}), {merged_per_s:.0f} merged (minimum {MIN_MERGED_PER_S}): "
            "the machine is too loaded for this run to mean anything"
        )
    return appended_per_s, merged_per_s


def consistent(rig: PipelineRig, path: str) -> dict[str, Any]:
    body = wait_until(
        lambda: (r := request(rig.cluster, "GET", path)).status == 200 and r.body,
        f"a consistent read of {path}",
        LEADER_TIMEOUT_S,
    )
    return body  # type: ignore[no-any-return]


# -- faults ------------------------------------------------------------------------------------


def kill_leader(rig: PipelineRig, rng: random.Random, figures: Figures) -> None:
    leader = rig.cluster.leader(LEADER_TIMEOUT_S)
    rig.cluster.kill9(leader)
    figures.fault("kill9_leader")
    time.sleep(rng.uniform(*RESTART_AFTER_S))
    rig.cluster.start(leader)


def kill_worker(rig: PipelineRig, rng: random.Random, figures: Figures) -> None:
    parts = consistent(rig, "/v1/partitions?consistent=true")["partitions"]
    live = sorted(w for w, proc in rig.workers.items() if proc.alive())
    owning = [w for w in live if any(x["owner"] == w for x in parts)]
    victim = rng.choice(owning or live)
    rig.workers[victim].kill9()
    figures.fault("kill9_worker")
    time.sleep(rng.uniform(*RESTART_AFTER_S))
    rig.start_worker(victim)


def reassign(
    rig: PipelineRig,
    rng: random.Random,
    figures: Figures,
    planned: list[str],
    fault: str = "reassign",
) -> None:
    """An admin move of a few ONLINE partitions to other ACTIVE workers (as scenario d)."""
    for _ in range(REASSIGN_ATTEMPTS):
        parts = consistent(rig, "/v1/partitions?consistent=true")["partitions"]
        workers = consistent(rig, "/v1/workers?consistent=true")["workers"]
        active = sorted(
            w["worker_id"]
            for w in workers
            if w["state"] == "active" and rig.workers.get(w["worker_id"]) is not None
        )
        movable = [x for x in parts if x["status"] == "online" and x["migration"] is None]
        if len(active) >= 2 and movable:
            picks = rng.sample(movable, min(MOVES_PER_REASSIGN, len(movable)))
            moves = [
                {
                    "partition": x["partition"],
                    "to": rng.choice([w for w in active if w != x["owner"]]),
                }
                for x in picks
            ]
            r = rig.cluster.write_via_any("/v1/admin/reassign", {"moves": moves}, token=ADMIN)
            if r.status == 202:
                planned.extend(m["id"] for m in r.body["migrations"])
                figures.fault(fault)
                figures.ops["migrations_planned"] += len(r.body["migrations"])
                return
        # A race with the other faults (a move's target just died, a partition just left
        # ONLINE): counted, and tried again on a fresh table.
        figures.ops["reassign_refused"] += 1
        time.sleep(0.5)


def store_outage(
    rig: PipelineRig,
    proxy: S3FaultProxy,
    rng: random.Random,
    figures: Figures,
    planned: list[str],
) -> None:
    """The store answers the workers 503 for a few seconds; partitions are moved meanwhile,
    so a source's final checkpoint write and a target's checkpoint load both fail."""
    code = rng.choice(OUTAGE_FAULTS)
    outage_s = rng.uniform(*OUTAGE_S)
    before = proxy.refused
    with proxy.outage(code):
        began = time.monotonic()
        time.sleep(MOVE_INTO_OUTAGE_S)
        reassign(rig, rng, figures, planned, fault="reassign_in_outage")
        time.sleep(max(0.0, outage_s - (time.monotonic() - began)))
    refused = proxy.refused - before
    figures.fault("store_outage")
    figures.ops["store_requests_refused"] += refused
    if refused == 0:
        raise AssertionError(
            f"INVALID RUN: a {code} outage refused no request (the fault did not happen)"
        )


def run_faults(
    rig: PipelineRig,
    proxy: S3FaultProxy,
    rng: random.Random,
    figures: Figures,
    planned: list[str],
    soak: bool,
) -> None:
    """One round of every fault kind in a seeded order (rounds for SOAK_FAULTS_S if soak)."""
    faults: dict[str, Callable[[], None]] = {
        "kill9_leader": lambda: kill_leader(rig, rng, figures),
        "kill9_worker": lambda: kill_worker(rig, rng, figures),
        "reassign": lambda: reassign(rig, rng, figures, planned),
        "store_outage": lambda: store_outage(rig, proxy, rng, figures, planned),
    }
    end = time.monotonic() + SOAK_FAULTS_S
    while True:
        for kind in rng.sample(FAULT_KINDS, len(FAULT_KINDS)):
            faults[kind]()
            time.sleep(rng.uniform(*FAULT_GAP_S))
        if not soak or time.monotonic() >= end:
            return


def heal(rig: PipelineRig, proxy: S3FaultProxy) -> None:
    proxy.clear()
    for spec in rig.cluster.specs:
        if not rig.cluster.procs[spec.id].alive():
            rig.cluster.start(spec.id)
    for wid, proc in list(rig.workers.items()):
        if not proc.alive():
            rig.start_worker(wid)


# -- checks ------------------------------------------------------------------------------------


def check_equal_to_batch_job(
    rig: PipelineRig, parts: list[dict[str, Any]], appended: int | None, figures: Figures
) -> None:
    got, want = rig.state(parts), rig.oracle()
    figures.ops["keys"] = len(want)
    in_log = sum(v[0] for v in want.values())
    figures.ops["records_in_log"] = in_log
    if appended is not None and in_log != appended:
        figures.violations.append(
            f"the log holds {in_log} records, the producer appended {appended}"
        )
    if got == want:
        return
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    figures.violations.append(
        f"state != batch job: {len(missing)} keys missing {missing[:3]}, {len(extra)} extra "
        f"{extra[:3]}, {len(wrong)} differ: "
        + "; ".join(f"{k} got {got[k]} want {want[k]}" for k in wrong[:3])
    )


def check_checkpoints(
    rig: PipelineRig, recorded: dict[str, tuple[int, int, int]], figures: Figures
) -> None:
    """Every recorded checkpoint loads, is what was recorded, and holds exactly the
    aggregate of its partition's records [0, offset)."""
    store = CheckpointStore(rig.store)
    by_partition: dict[int, list[tuple[str, int, PartitionState]]] = {}
    for uri, (p, epoch, offset) in sorted(recorded.items()):
        try:
            data = store.read(uri)
        except StoreError as exc:
            figures.violations.append(f"recorded checkpoint {uri} does not load: {exc}")
            continue
        if (data.partition, data.epoch, data.offset) != (p, epoch, offset):
            figures.violations.append(
                f"{uri} holds p{data.partition} e{data.epoch} o{data.offset}, "
                f"recorded as p{p} e{epoch} o{offset}"
            )
        by_partition.setdefault(p, []).append((uri, offset, data.state))
    for p, items in sorted(by_partition.items()):
        table = rig.source.read(p)
        keys, values = table["key"].to_pylist(), table["value"].to_pylist()
        offsets = table["offset"].to_pylist()
        assert offsets == list(range(len(offsets))), f"p{p}: source offsets not contiguous"
        for uri, offset, state in items:
            if offset > len(keys):
                figures.violations.append(f"{uri} is at offset {offset} > log end {len(keys)}")
                continue
            want = aggregate_records(
                zip(keys[:offset], values[:offset], offsets[:offset], strict=True)
            )
            if state != want:
                figures.violations.append(f"{uri} does not hold the records [0, {offset})")
    figures.ops["checkpoints_verified"] = sum(len(v) for v in by_partition.values())


def hosts_mismatch(rig: PipelineRig, parts: list[dict[str, Any]]) -> list[str]:
    """Live workers whose hosted partitions (open or not) differ from their assignment."""
    assigned: dict[str, dict[int, int]] = {}
    for x in parts:
        if x["owner"] is not None:
            assigned.setdefault(x["owner"], {})[x["partition"]] = x["epoch"]
    problems = []
    for wid, proc in sorted(rig.workers.items()):
        if not proc.alive():
            continue
        h = rig.health(wid)
        if h is None:
            problems.append(f"{wid} does not answer /v1/health")
            continue
        hosted = {int(p): g["epoch"] for p, g in h["partitions"].items()}
        closed = sorted(int(p) for p, g in h["partitions"].items() if not g["open"])
        if hosted != assigned.get(wid, {}) or closed:
            problems.append(
                f"{wid} hosts {hosted} (closed {closed}), assigned {assigned.get(wid, {})}"
            )
    return problems


def check_migrations(rig: PipelineRig, planned: list[str], figures: Figures) -> None:
    migs = consistent(rig, "/v1/migrations?consistent=true")["migrations"]
    phases = {m["id"]: m["phase"] for m in migs if m["id"] in planned}
    for mid in planned:
        if phases.get(mid) not in ("done", "aborted"):
            figures.violations.append(f"migration {mid} ended {phases.get(mid)}")
    figures.ops["migrations_done"] = sum(1 for v in phases.values() if v == "done")
    figures.ops["migrations_aborted"] = sum(1 for v in phases.values() if v == "aborted")


def check_retry_delays(rig: PipelineRig, figures: Figures) -> None:
    """The leader's "retry in N ms" lines (host and release retries, which the outage
    causes) name a delay within the backoff cap, not a timestamp (seed 606 found that)."""
    cap_ms = rig.cluster.config.host_retry_cap_ms
    delays = [
        int(m.group(1))
        for spec in rig.cluster.specs
        for m in RETRY_LOG.finditer(rig.cluster.procs[spec.id].output())
    ]
    bad = [d for d in delays if not 0 <= d <= cap_ms]
    if bad:
        figures.violations.append(f"retry delays logged outside [0, {cap_ms}] ms: {bad[:5]}")
    figures.ops["retry_delays_logged"] = len(delays)


# -- the scenario --------------------------------------------------------------------------------


@pytest.fixture
def rig(
    tmp_path: Path, spark_remote: str, moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> Iterator[tuple[PipelineRig, S3FaultProxy]]:
    _, bucket = s3_bucket
    proxy = S3FaultProxy(moto_endpoint)
    proxy.start()
    try:
        p = PipelineRig(
            tmp_path,
            f"s3://{bucket}/pipeline",
            spark_remote,
            moto_endpoint,
            worker_s3_endpoint=proxy.url,
        )
        try:
            p.cluster.start_all()
            p.cluster.ready()
            yield p, proxy
        finally:
            p.stop()
    finally:
        proxy.close()


def test_f_pipeline_under_kills_migrations_and_store_outage(
    rig: tuple[PipelineRig, S3FaultProxy], request: pytest.FixtureRequest
) -> None:
    p, proxy = rig
    seed = SEED
    print(f"\nscenario f seed={seed}")
    rng = random.Random(seed)
    soak = bool(request.config.getoption("--soak"))
    figures = Figures(scenario="f_pipeline", seed=seed)
    for name in ("migrations_planned", "reassign_refused", "store_requests_refused"):
        figures.ops[name] = 0
    started = time.monotonic()

    p.producer.produce(generate(INITIAL_RECORDS, KEYS, seed=seed))
    for wid in WORKERS:
        p.start_worker(wid)
    wait_until(p.caught_up, "the initial records processed", CATCH_UP_TIMEOUT_S, 0.2)

    feed, observer = Feed(p.producer, seed), Observer(p)
    planned: list[str] = []
    try:
        try:
            merged_before = merged_now(p)
            feed.start()
            observer.start()
            time.sleep(WARMUP_S)
            rates = require_pipeline_rate(feed.records, merged_now(p) - merged_before, WARMUP_S)
            print(f"warm-up: {rates[0]:.0f} records/s appended, {rates[1]:.0f} merged")
            run_faults(p, proxy, rng, figures, planned, soak)
        finally:
            heal(p, proxy)
            feed.stop()
        if not figures.faults.get("reassign"):
            raise AssertionError(f"INVALID RUN seed={seed}: no reassignment was accepted")
        try:
            wait_settled(p.cluster, SETTLE_TIMEOUT_S)
            parts = wait_until(p.caught_up, "the pipeline caught up", CATCH_UP_TIMEOUT_S, 0.2)
        except AssertionError as exc:
            raise AssertionError(f"seed={seed}: did not heal: {exc}\n{figures.line()}") from exc
    finally:
        observer.stop()
    observer.record(parts)
    observer.sample_gates()

    appended = None if feed.errors else INITIAL_RECORDS + feed.records
    check_equal_to_batch_job(p, parts, appended, figures)
    check_checkpoints(p, observer.checkpoints, figures)
    check_migrations(p, planned, figures)
    check_retry_delays(p, figures)
    try:
        wait_until(
            lambda: not hosts_mismatch(p, parts),
            "every worker hosting exactly its assignment",
            HOSTS_MATCH_TIMEOUT_S,
            0.2,
        )
    except AssertionError:
        figures.violations.extend(hosts_mismatch(p, parts))
    figures.violations.extend(observer.violations)
    figures.ops.update(
        records_appended=INITIAL_RECORDS + feed.records,
        feed_errors=feed.errors,
        consistent_reads_ok=observer.reads_ok,
        consistent_reads_failed=observer.reads_failed,
        gate_samples=observer.gate_samples,
        store_requests_forwarded=proxy.forwarded,
    )
    figures.duration_s = time.monotonic() - started
    print(figures.line())
    assert not figures.violations, f"seed={seed}: {figures.violations}"


def test_store_outage_proxy_forwards_whole_and_refuses_whole(
    moto_endpoint: str, s3_bucket: tuple[Any, str]
) -> None:
    """The fault tool itself: faithful while up; while down, S3's 503 and nothing forwarded."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    direct, bucket = s3_bucket
    proxy = S3FaultProxy(moto_endpoint)
    proxy.start()
    try:
        via = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            region_name="us-east-1",
            config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
        )
        body = bytes(range(256)) * 4096  # 1 MiB, every byte value
        via.put_object(Bucket=bucket, Key="a/x", Body=body, IfNoneMatch="*")
        assert direct.get_object(Bucket=bucket, Key="a/x")["Body"].read() == body
        assert via.get_object(Bucket=bucket, Key="a/x")["Body"].read() == body
        assert via.head_object(Bucket=bucket, Key="a/x")["ContentLength"] == len(body)
        with pytest.raises(ClientError) as again:
            via.put_object(Bucket=bucket, Key="a/x", Body=b"other", IfNoneMatch="*")
        assert again.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        listed = via.list_objects_v2(Bucket=bucket, Prefix="a/")["Contents"]
        assert [o["Key"] for o in listed] == ["a/x"]
        forwarded = proxy.forwarded

        for fault in OUTAGE_FAULTS:
            with proxy.outage(fault):
                with pytest.raises(ClientError) as down:
                    via.put_object(
                        Bucket=bucket, Key=f"a/{fault.value}", Body=b"y", IfNoneMatch="*"
                    )
                assert down.value.response["Error"]["Code"] == fault.value
                assert down.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                with pytest.raises(ClientError):
                    via.head_object(Bucket=bucket, Key="a/x")
        assert proxy.refused == 4 and proxy.forwarded == forwarded
        keys = [o["Key"] for o in direct.list_objects_v2(Bucket=bucket, Prefix="a/")["Contents"]]
        assert keys == ["a/x"]  # no refused PUT reached the server

        via.put_object(Bucket=bucket, Key="a/after", Body=b"z", IfNoneMatch="*")
        assert direct.get_object(Bucket=bucket, Key="a/after")["Body"].read() == b"z"
    finally:
        proxy.close()
