"""Ripple's pipeline against Spark Structured Streaming: the same aggregation over the same
source files on the same Spark Connect server, throughput and freshness, in one run.

Rig as in bench/pipeline.py (testkit.pipeline_rig: three coordinators, three workers, one
local Spark Connect server, local store, 8 partitions), with liveness timeouts long enough
that pausing the workers for a block of the peer's probes goes unnoticed, and the workers'
default batch interval (0.5 s, what `ripple up` runs). The peer is bench/streaming_query.py:
one Structured Streaming query on its own session of the same server, reading the segment
files the producer writes, its state under its own checkpoint, at Spark's default trigger
(the next micro-batch as soon as the last one ends). While one system is measured the other
does nothing (bench/contenders.py): the workers are stopped (SIGSTOP), the query is stopped
(its checkpoint keeps its place); each catches up, untimed, on what it missed before its
next measure.

- `backlog`: the producer appends `rows` records (one segment per partition per `chunk`)
  while neither runs; then each system in turn processes them: Ripple from the workers'
  resume until every owner has processed the whole log, the peer from the start of an
  `availableNow` run until it ends (`batch_rows_per_s` leaves out the query's start: the
  rows over its batches' own time). Same input for both.
- `streaming`: the system runs while the producer appends `rows` new records in chunks; the
  clock runs from the first append until the system has processed them all, so it cannot
  beat `produce_rows_per_s`.
- `freshness`: a background producer appends 2,000 records every 0.5 s (bench/freshness.py's
  load); in blocks, alternately, one system catches up, settles, then probes: produce ONE
  record of a fresh key, start the clock when `produce` returns, poll every 10 ms until it
  is visible (Ripple: its owner's key endpoint; the peer: its sink, one Spark query per
  look, `lookup_s` beside it) with that value.

Rounds alternate which system goes first. `ratio` is Ripple's figure over the peer's in the
same run (throughput: above 1 is Ripple faster; freshness p50: below 1 is Ripple fresher).
The `cost/...` rows say where the time went: per micro-batch, by stage (`Tally.cost_rows`),
and the cores each group of processes kept busy over the measures (CPU seconds from /proc
over wall seconds). At the end both systems' aggregates are compared key by key: they must
be equal, or the run fails.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.contenders import GROUPS, STAGES, Contenders
from bench.freshness import LOAD_EVERY_S, LOAD_KEYS, LOAD_ROWS, POLL_S, VISIBLE_TIMEOUT_S
from bench.freshness import probe_s as ripple_probe_s
from bench.harness import CATCH_UP_TIMEOUT_S, caught_up_s, percentile, pipeline_rig, scratch
from bench.pipeline import SETTINGS as PIPELINE_SETTINGS
from bench.pipeline import produce_s
from bench.streaming_query import Batch, StreamingAggregation, phase_means
from pipeline.source import generate
from pipeline.spark_server import SparkConnectServer
from pipeline.worker import BATCH_INTERVAL_S_DEFAULT
from testkit.http import call
from testkit.pipeline_rig import PipelineRig


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    rows: int  # per throughput measure
    chunk: int  # rows per produce call
    rounds: int
    # Freshness probes per system, in blocks short enough that the paused workers' lease
    # (SETTINGS) outlasts a block of the peer's.
    blocks: int
    probes_per_block: int
    settle_s: float  # after catching up, into the steady state before probing
    warm_rows: int  # an uncounted round first (cold JVM code on both sides); 0: none


FULL = Sizes(
    rows=1_000_000,
    chunk=50_000,
    rounds=3,
    blocks=5,
    probes_per_block=30,
    settle_s=3.0,
    warm_rows=50_000,
)
QUICK = Sizes(
    rows=50_000, chunk=10_000, rounds=1, blocks=1, probes_per_block=2, settle_s=0.5, warm_rows=0
)
FINAL_ROWS = 1_000  # the last input, so the peer's last run has a batch to show in its sink
LOOKUPS = 10  # timed lookups of one key per block, for `lookup_s`
LOAD_JOIN_TIMEOUT_S = 30.0
# Liveness far longer than a block of the peer's probes, which on a loaded machine (probes of
# 10 s and more) has outlasted a 300 s lease, so that the paused workers are never taken
# for dead; the token outlives the timeout plus the grace twice over, as config requires.
SETTINGS = {
    **PIPELINE_SETTINGS,
    "lease_s": 1800.0,
    "suspect_after_s": 1800.0,
    "heartbeat_timeout_s": 2400.0,
    "rejoin_grace_s": 60.0,
    "worker_token_lifetime_s": 7200.0,
}
SYSTEMS = ("ripple", "ss")

Rows = dict[str, dict[str, float]]


class Tally:
    """One kind of measure (backlog, streaming, freshness) over the run: each system's
    figures, the micro-batches that did the work, what the processes spent meanwhile."""

    def __init__(self) -> None:
        self.figures: dict[str, list[float]] = {who: [] for who in SYSTEMS}
        self.ripple_work = dict.fromkeys(("batches", *STAGES), 0.0)
        self.ss_batches: list[Batch] = []
        self.wall_s = dict.fromkeys(SYSTEMS, 0.0)
        self.cpu_s = {who: dict.fromkeys(GROUPS, 0.0) for who in SYSTEMS}
        self.extra: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def spending(
        self, c: Contenders, who: str, work: dict[str, float] | None = None
    ) -> Iterator[None]:
        """Counts the block's time and every group's CPU to `who`'s measure; with Ripple
        also the workers' micro-batches since `work` (their counters, read now if not
        given: the workers must be running when they are read)."""
        if who == "ripple" and work is None:
            work = c.ripple_work()
        before = c.usage()
        yield
        spent = c.usage().since(before)
        self.wall_s[who] += spent.at_s
        for group, seconds in spent.cpu_s.items():
            self.cpu_s[who][group] += seconds
        if work is not None:
            for k, v in c.ripple_work().items():
                self.ripple_work[k] += v - work[k]

    def note(self, name: str, figure: float) -> None:
        self.extra.setdefault(name, []).append(figure)

    def median(self, name: str) -> float:
        return statistics.median(self.extra[name])

    def rates(self, who: str) -> dict[str, float]:
        """Median, min and max rows/s of `who`; `ratio` over the peer's median."""
        values, base = self.figures[who], statistics.median(self.figures["ss"])
        median = statistics.median(values)
        return {
            "rows_per_s": median,
            "min_rows_per_s": min(values),
            "max_rows_per_s": max(values),
            "ratio": median / base if base else 0.0,
        }

    def cost_rows(self, kind: str) -> Rows:
        """Where each system's time went. Per micro-batch, in shared columns: `input_s`
        finding and reading in new input (Ripple: listing the store, fetching segments; the
        peer: listing the files, building the batch over them), `job_s` the Spark job
        (Ripple: the aggregation collected to the worker; the peer: planning and running
        it, state store and sink included), `state_s` keeping the state (Ripple: merging
        into memory; the peer: committing its state store, part of `job_s`), `commit_s`
        the peer's offset and commit logs (Ripple checkpoints outside its batches). Then
        each group of processes' CPU over the measures' time: `<group>_cores`."""
        n = self.ripple_work["batches"]
        per = {s: self.ripple_work[s] / n if n else 0.0 for s in STAGES}
        phases = phase_means(self.ss_batches)
        batches = {
            "ripple": {
                "batches": n,
                "s_per_batch": sum(per.values()),
                "input_s": per["plan"],
                "job_s": per["spark"],
                "state_s": per["merge"],
            },
            "ss": {
                "batches": len(self.ss_batches),
                "s_per_batch": phases["trigger"],
                "input_s": phases["latest_offset"] + phases["get_batch"],
                "job_s": phases["planning"] + phases["add_batch"],
                "state_s": phases["state_commit"],
                "commit_s": phases["wal_commit"] + phases["commit_offsets"],
            },
        }
        out: Rows = {}
        for who in SYSTEMS:
            wall = self.wall_s[who]
            cores = {f"{g}_cores": self.cpu_s[who][g] / wall if wall else 0.0 for g in GROUPS}
            out[f"cost/{kind}/{who}"] = {**batches[who], **cores}
        return out


def backlog_round(
    c: Contenders, rows: int, chunk: int, seed: int, ss_first: bool, t: Tally
) -> None:
    """Append `rows` while neither system runs; then each processes them, timed."""
    work = c.ripple_work()  # the workers are idle and caught up: nothing moves it till resumed
    c.pause_ripple()
    produce_s(c.rig, rows, chunk, seed)

    def ripple() -> None:
        with t.spending(c, "ripple", work):
            c.resume_ripple()
            t.figures["ripple"].append(rows / caught_up_s(c.rig))

    def ss() -> None:
        c.pause_ripple()
        with t.spending(c, "ss"):
            t0 = time.monotonic()
            batches = c.ss_caught_up()
            t.figures["ss"].append(rows / (time.monotonic() - t0))
        t.ss_batches.extend(batches)
        t.note("batch_rows_per_s", rows / sum(b.seconds["trigger"] for b in batches))

    for step in (ss, ripple) if ss_first else (ripple, ss):
        step()
    c.resume_ripple()
    caught_up_s(c.rig)


def streaming_round(
    c: Contenders, rows: int, chunk: int, seed: int, ss_first: bool, t: Tally
) -> None:
    """Each system runs while the producer appends `rows` new records; timed from the first
    append until it has processed them, then the other catches up, untimed."""

    def ripple() -> None:
        c.resume_ripple()
        caught_up_s(c.rig)
        with t.spending(c, "ripple"):
            t0 = time.monotonic()
            t.note("produce_rows_per_s", rows / produce_s(c.rig, rows, chunk, seed))
            caught_up_s(c.rig)
            t.figures["ripple"].append(rows / (time.monotonic() - t0))

    def ss() -> None:
        c.pause_ripple()
        c.ss_caught_up()
        first = len(c.ss.batches)
        c.ss.start()
        try:
            with t.spending(c, "ss"):
                t0 = time.monotonic()
                t.note("produce_rows_per_s", rows / produce_s(c.rig, rows, chunk, seed + 1))
                c.ss.wait_rows(c.total_rows(), CATCH_UP_TIMEOUT_S)
                t.figures["ss"].append(rows / (time.monotonic() - t0))
        finally:
            c.ss.stop()
        c.check_ss_rows()
        t.ss_batches.extend(c.ss.batches[first:])

    for step in (ss, ripple) if ss_first else (ripple, ss):
        step()
    c.resume_ripple()
    caught_up_s(c.rig)


class Load:
    """bench/freshness.py's steady producer, in a thread: `LOAD_ROWS` records over
    `LOAD_KEYS` keys every `LOAD_EVERY_S`."""

    def __init__(self, rig: PipelineRig) -> None:
        self.rig = rig
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        seed = 1_000_000
        try:
            while not self._stop.is_set():
                self.rig.producer.produce(generate(LOAD_ROWS, LOAD_KEYS, seed=seed))
                self.produced += LOAD_ROWS
                seed += 1
                self._stop.wait(LOAD_EVERY_S)
        except BaseException as exc:  # seen by the benchmark's thread in `stop`
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=LOAD_JOIN_TIMEOUT_S)
        if self.error is not None:
            raise RuntimeError(f"the load producer failed: {self.error}") from self.error


def _lookup_s(look: Callable[[], object]) -> float:
    """Median seconds of one lookup (`look()`), over `LOOKUPS`."""
    seconds = []
    for _ in range(LOOKUPS):
        t0 = time.monotonic()
        look()
        seconds.append(time.monotonic() - t0)
    return statistics.median(seconds)


def ss_probe_s(c: Contenders, n: int) -> float:
    """Produce one record of the fresh key `FRESH{n}`: seconds until the peer's sink shows
    it (polled every `POLL_S`, at most `VISIBLE_TIMEOUT_S`)."""
    key = f"FRESH{n:06d}"
    val = float(n)
    c.rig.producer.produce([(key, val)])
    t0 = time.monotonic()
    while time.monotonic() - t0 < VISIBLE_TIMEOUT_S:
        if c.ss.last(key) == val:
            return time.monotonic() - t0
        time.sleep(POLL_S)
    raise RuntimeError(f"{key} not in the query's sink after {VISIBLE_TIMEOUT_S} s")


class Freshness:
    """The probes of both systems, block by block, under one steady load; each probe's
    seconds are its system's figures in `tally`."""

    def __init__(self, c: Contenders, load: Load, settle_s: float) -> None:
        self.c = c
        self.load = load
        self.settle_s = settle_s
        self.rng = random.Random(7)
        self.next_key = 0
        self.load_rows = dict.fromkeys(SYSTEMS, 0)
        self.lookup_s: dict[str, list[float]] = {who: [] for who in SYSTEMS}
        self.tally = Tally()

    def _probes(self, who: str, probes: int, probe: Callable[[int], float]) -> None:
        produced = self.load.produced
        with self.tally.spending(self.c, who):
            for _ in range(probes):
                self.tally.figures[who].append(probe(self.next_key))
                self.next_key += 1
                self.c.ss.poll()
                time.sleep(self.rng.uniform(0.0, 0.3))  # probes not in phase with the batches
        self.load_rows[who] += self.load.produced - produced

    def ripple_block(self, probes: int) -> None:
        c = self.c
        c.resume_ripple()
        c.ripple_reached(c.ends())
        time.sleep(self.settle_s)
        owners = {x["partition"]: x["owner"] for x in c.rig.table()}
        self._probes("ripple", probes, lambda n: ripple_probe_s(c.rig, n, owners))
        p = next(iter(owners))
        url = c.rig.worker_url(owners[p]) + f"/v1/partitions/{p}/keys/none"
        self.lookup_s["ripple"].append(_lookup_s(lambda: call("GET", url)))

    def ss_block(self, probes: int) -> None:
        c = self.c
        c.pause_ripple()
        c.ss.start()
        try:
            c.ss.wait_rows(c.total_rows(), CATCH_UP_TIMEOUT_S)
            time.sleep(self.settle_s)
            c.ss.poll()
            first = len(c.ss.batches)
            self._probes("ss", probes, lambda n: ss_probe_s(c, n))
            c.ss.poll()
            self.tally.ss_batches.extend(c.ss.batches[first:])
            self.lookup_s["ss"].append(_lookup_s(lambda: c.ss.last("none")))
        finally:
            c.ss.stop()

    def rows(self) -> Rows:
        out: Rows = {}
        for who in SYSTEMS:
            seconds = self.tally.figures[who]
            out[f"freshness/{who}"] = {
                "probes": len(seconds),
                "p50_s": percentile(seconds, 50),
                "p99_s": percentile(seconds, 99),
                "max_s": max(seconds),
                "load_rows_per_s": self.load_rows[who] / self.tally.wall_s[who],
                "lookup_s": statistics.median(self.lookup_s[who]),
            }
        base = out["freshness/ss"]["p50_s"]
        for row in out.values():
            row["ratio"] = row["p50_s"] / base if base else 0.0
        return out


def check_equal(c: Contenders) -> None:
    """Both systems, caught up on the whole log, hold the same aggregates."""
    produce_s(c.rig, FINAL_ROWS, FINAL_ROWS, seed=999)
    c.resume_ripple()
    parts = c.rig.wait_caught_up(CATCH_UP_TIMEOUT_S)
    ripple = c.rig.state(parts)
    c.pause_ripple()
    c.ss_caught_up()
    ss = c.ss.state()
    c.resume_ripple()
    if ripple != ss:
        differ = sorted(k for k in ripple.keys() | ss.keys() if ripple.get(k) != ss.get(k))
        raise RuntimeError(
            f"the two systems' aggregates differ on {len(differ)} keys: {differ[:5]}"
        )


def _measure(c: Contenders, sizes: Sizes) -> Rows:
    backlog, streaming = Tally(), Tally()
    if sizes.warm_rows:
        produce_s(c.rig, sizes.warm_rows, sizes.warm_rows // 5, seed=1)
        caught_up_s(c.rig)
        c.pause_ripple()
        c.ss_caught_up()
        c.resume_ripple()
    rows, chunk = sizes.rows, sizes.chunk
    for r in range(sizes.rounds):
        backlog_round(c, rows, chunk, 100 + r, r % 2 == 1, backlog)
        streaming_round(c, rows, chunk, 300 + 2 * r, r % 2 == 0, streaming)
    load = Load(c.rig)
    fresh = Freshness(c, load, sizes.settle_s)
    load.start()
    try:
        for b in range(sizes.blocks):
            order = (fresh.ripple_block, fresh.ss_block)
            for block in order if b % 2 == 0 else order[::-1]:
                block(sizes.probes_per_block)
    finally:
        load.stop()
    check_equal(c)

    produce = {"produce_rows_per_s": streaming.median("produce_rows_per_s")}
    return {
        "backlog/ripple": {"rows": rows, **backlog.rates("ripple")},
        "backlog/ss": {
            "rows": rows,
            **backlog.rates("ss"),
            "batch_rows_per_s": backlog.median("batch_rows_per_s"),
        },
        "streaming/ripple": {"rows": rows, **streaming.rates("ripple"), **produce},
        "streaming/ss": {"rows": rows, **streaming.rates("ss"), **produce},
        **fresh.rows(),
        **backlog.cost_rows("backlog"),
        **streaming.cost_rows("streaming"),
        **fresh.tally.cost_rows("freshness"),
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    with scratch("structured-streaming") as root:
        server = SparkConnectServer(str(root / "spark"))
        with pipeline_rig(root, SETTINGS, spark=server) as rig:
            for wid in ("w1", "w2", "w3"):
                rig.start_worker(wid, batch_interval_s=BATCH_INTERVAL_S_DEFAULT)
            caught_up_s(rig)
            source = rig.store.local_path("source")
            if source is None or server.pid is None:
                raise RuntimeError("the peer reads the store's files: needs a local store")
            # The glob names the partition directories (pipeline.source's layout), each
            # listed as one directory: a glob of the files themselves is one path per file,
            # which Spark lists with a job of its own on every trigger once there are more
            # than 32.
            ss = StreamingAggregation(rig.spark, f"{source}/p*", str(root / "ss-checkpoint"))
            c = Contenders(rig, ss, server.pid)
            try:
                return _measure(c, QUICK if quick else FULL)
            finally:
                c.resume_ripple()
                ss.close()
