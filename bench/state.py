"""State at scale: Ripple's recorded pipeline against Structured Streaming with the RocksDB
state store, over the same input on the same Spark, in one run (`python -m bench state`; the
"Done when" benchmark of issue 38). `python -m bench.state --keys N` runs it at N keys.

Rig: testkit.pipeline_rig's three coordinators and three `ripple worker`s (each with slots
for recorded pipelines) on one local Spark Connect server and a local store, the liveness
timeouts of bench/structured_streaming.py (a paused worker is never taken for dead). Per
key distribution (`uniform`, `zipf`: bench/state_figures.py) one recorded pipeline of 8
partitions with a count and a sum per key and its key cap raised to the run's key count,
and its peer: a Structured Streaming query with the RocksDB provider and changelog
checkpointing, count and sum per key in update mode, fed hard links of the pipeline's own
segments (bench/state_peer.py). While one system is measured the other does nothing: the
workers are stopped (SIGSTOP), the peer is fed nothing (its trigger finds no new file). The
systems take turns; which goes first alternates between the distributions.

- `backlog`: `keys` records, each key once, plus `extra_share` of that many drawn by the
  distribution, appended while neither runs; then each processes all of it: rows per second
  from the workers' resume (the peer's feed) until every row is processed.
- `live`: the producer appends `live_rows_per_s` for `live_s` seconds in ticks while the
  system runs; rows per second from the first append until all are processed.
- `freshness`: one record of a fresh key, the clock started when `produce` returns, until
  the key shows its value (Ripple: `ripple get` through the SDK; the peer: its sink), polled
  every `POLL_S`; p50 over `probes`, both idle otherwise.
- `rss_mib`: the workers' resident memory after the backlog (the largest of the three);
  the peer's is the Spark Connect JVM's (driver and executor in one), which Ripple's Spark
  jobs share.
- `checkpoint`: bytes written to the checkpoint area by an interval touching 1% of the keys
  (one record each), over a full checkpoint: Ripple's newest checkpoint per partition after
  the backlog, the peer's bytes its backlog batches added.
- `get_p99_ms`: `gets` SDK reads of existing keys, one at a time.

Then no key may have gone to the dead letters and a sample of keys must read the same from
both systems, or the run fails. The `goal/` rows read the figures against the issue's goals
(ratio over the peer's, or an absolute bound); the warm move and the rescale rows are not
measured here yet.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

from bench.contenders import Contenders
from bench.harness import percentile, pipeline_rig, scratch
from bench.state_figures import (
    added_bytes,
    draw_keys,
    goal_rows,
    key_name,
    load_keys,
    touch_keys,
)
from bench.state_rig import Case, keys_sample, open_case, ripple_rss_mib
from bench.structured_streaming import SETTINGS as SS_SETTINGS
from pipeline.spark_server import SparkConnectServer
from pipeline.worker import BATCH_INTERVAL_S_DEFAULT
from shared.errors import ClientError

Rows = dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    keys: int  # distinct keys in each pipeline's state
    extra_share: float  # backlog rows beyond one per key, drawn by the distribution, per key
    chunk: int  # rows per produce call
    live_rows_per_s: int
    live_s: float
    probes: int
    gets: int
    timeout_s: float  # any one wait for a system to catch up
    # The cluster's checkpoint rounds: a full run keeps the default (what `ripple up` runs),
    # a quick one the test rig's, so its waits for a checkpoint stay short.
    checkpoint_interval_s: float


# Sized to take about a quarter of an hour on a quiet 2-core machine (an estimate from quick
# runs: no full run has finished yet; on a loaded one it takes far longer).
FULL = Sizes(
    keys=1_000_000,
    extra_share=0.25,
    chunk=100_000,
    live_rows_per_s=10_000,
    live_s=10.0,
    probes=10,
    gets=1_000,
    timeout_s=1_800.0,
    checkpoint_interval_s=10.0,
)
QUICK = Sizes(
    keys=20_000,
    extra_share=0.5,
    chunk=10_000,
    live_rows_per_s=2_000,
    live_s=3.0,
    probes=3,
    gets=200,
    timeout_s=300.0,
    checkpoint_interval_s=1.0,
)
CASES = {"uniform": False, "zipf": True}  # name -> Zipf keys
WORKERS = ("w1", "w2", "w3")
SLOTS = "24"  # each worker's: room for both pipelines' 16 partitions however they land
TICK_S = 0.5  # the live producer's period
POLL_S = 0.01
VISIBLE_TIMEOUT_S = 60.0
MIB = 1 << 20
DEAD_LETTERS = "ripple_worker_dead_letter_keys_total"
LOOKUPS = 5  # timed looks at one key, for `lookup_s`
CHECKS = 50  # keys compared between the two systems at the end
WARM_ROWS = 1_000  # an uncounted first batch of each system (cold JVM code)


@dataclass(slots=True)
class Figures:
    """One system's figures in one case."""

    backlog_rows_per_s: float = 0.0
    live_rows_per_s: float = 0.0
    freshness_p50_s: float = 0.0
    freshness_p99_s: float = 0.0
    lookup_s: float = 0.0  # one look at a key, median: part of each freshness poll
    rss_mib: float = 0.0
    full_checkpoint_bytes: float = 0.0
    touched_checkpoint_bytes: float = 0.0


class Turns:
    """Whose turn it is: the workers stopped while the peer is measured, and back after."""

    def __init__(self, c: Contenders) -> None:
        self.c = c

    @contextmanager
    def ripple(self) -> Iterator[None]:
        self.c.resume_ripple()
        yield

    @contextmanager
    def peer(self) -> Iterator[None]:
        self.c.pause_ripple()
        try:
            yield
        finally:
            self.c.resume_ripple()


def backlog(case: Case, turns: Turns, sizes: Sizes, ss_first: bool) -> tuple[float, float, float]:
    """(Ripple's, the peer's) rows per second over the backlog, and the bytes the peer's
    checkpoint took for it; both idle and caught up before."""
    keys = load_keys(sizes.keys, round(sizes.keys * sizes.extra_share), case.zipf, seed=11)
    with turns.peer():  # neither runs while it is appended
        case.produce(keys, sizes.chunk, seed=12)
    peer_bytes = 0.0

    def ripple() -> float:
        with turns.ripple():
            return len(keys) / case.wait_ripple()

    def peer() -> float:
        nonlocal peer_bytes
        with turns.peer():
            before = case.peer.checkpoint_files()
            rate = len(keys) / case.wait_peer()
            peer_bytes = float(added_bytes(before, case.peer.checkpoint_files()))
            return rate

    order: tuple[Callable[[], float], ...] = (peer, ripple) if ss_first else (ripple, peer)
    rates = {f: f() for f in order}
    return rates[ripple], rates[peer], peer_bytes


def live_rate(case: Case, sizes: Sizes, feed: bool) -> float:
    """Produce `live_rows_per_s` for `live_s` in ticks (feeding the peer each tick when
    `feed`), then wait until processed: rows per second from the first append."""
    ticks = max(1, round(sizes.live_s / TICK_S))
    per_tick = int(sizes.live_rows_per_s * TICK_S)
    t0 = time.monotonic()
    for i in range(ticks):
        keys = draw_keys(sizes.keys, per_tick, case.zipf, seed=200 * (1 + int(feed)) + i)
        case.produce(keys, sizes.chunk, seed=100 + i)
        if feed:
            case.feed_peer()
        time.sleep(max(0.0, t0 + (i + 1) * TICK_S - time.monotonic()))
    if feed:
        case.wait_peer()
    else:
        case.wait_ripple()
    return ticks * per_tick / (time.monotonic() - t0)


def ripple_probe_s(case: Case, n: int) -> float:
    key = f"fresh{n:06d}"
    case.producer.produce([{"k": key, "v": n}])
    t0 = time.monotonic()
    while time.monotonic() - t0 < VISIBLE_TIMEOUT_S:
        try:
            if case.get(key).get("s") == float(n):
                return time.monotonic() - t0
        except ClientError as exc:
            if exc.code != "not_found":
                raise
        time.sleep(POLL_S)
    raise RuntimeError(f"{key} not visible in Ripple after {VISIBLE_TIMEOUT_S} s")


def peer_probe_s(case: Case, n: int) -> float:
    key = f"fresh{n:06d}"
    case.producer.produce([{"k": key, "v": n}])
    t0 = time.monotonic()
    case.feed_peer()
    while time.monotonic() - t0 < VISIBLE_TIMEOUT_S:
        if case.peer.figures(key) == (1, float(n)):
            return time.monotonic() - t0
        time.sleep(POLL_S)
    raise RuntimeError(f"{key} not in the peer's sink after {VISIBLE_TIMEOUT_S} s")


def checkpoint_interval(case: Case, turns: Turns, sizes: Sizes) -> tuple[float, float]:
    """Bytes each system's checkpoints took for one interval touching 1% of the keys:
    (Ripple's, the peer's). Both caught up and checkpointed before."""
    with turns.ripple():
        case.wait_ripple()
        case.wait_checkpointed()
    with turns.peer():
        ripple_before = case.checkpoint_files()
        case.produce(touch_keys(sizes.keys, seed=31), sizes.chunk, seed=32)
        peer_before = case.peer.checkpoint_files()
        case.wait_peer()
        peer_bytes = added_bytes(peer_before, case.peer.checkpoint_files())
    with turns.ripple():
        case.wait_ripple()
        case.wait_checkpointed()
        ripple_bytes = added_bytes(ripple_before, case.checkpoint_files())
    return float(ripple_bytes), float(peer_bytes)


def get_p99_ms(case: Case, sizes: Sizes) -> float:
    keys = keys_sample(sizes.keys, sizes.gets, seed=41)
    case.get(keys[0])  # the routing, read once
    seconds = []
    for key in keys:
        t0 = time.perf_counter()
        case.get(key)
        seconds.append(time.perf_counter() - t0)
    return percentile(seconds, 99) * 1000


def lookup_s(look: Callable[[], object]) -> float:
    """Median seconds of one `look()` over LOOKUPS."""
    seconds = []
    for _ in range(LOOKUPS):
        t0 = time.perf_counter()
        look()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def check_same(case: Case, sizes: Sizes) -> None:
    """No key went to the dead letters, and a sample of keys reads the same (count, sum)
    from both systems."""
    refused = sum(case.rig.metric(w, DEAD_LETTERS) for w in WORKERS)
    if refused:
        raise RuntimeError(f"{refused} keys went to the dead letters: the key cap is too low")
    for key in [key_name(0), *keys_sample(sizes.keys, CHECKS, seed=51)]:
        got = case.get(key)
        ripple = (int(got["n"]), float(got["s"]))
        peer = case.peer.figures(key)
        if ripple != peer:
            raise RuntimeError(f"{case.name}: key {key} is {ripple} in Ripple, {peer} in the peer")


def measure(
    case: Case, turns: Turns, sizes: Sizes, server: SparkConnectServer, ss_first: bool
) -> Rows:
    ripple, peer = Figures(), Figures()
    warm = load_keys(WARM_ROWS, 0, False, seed=1)
    with turns.peer():
        case.produce(warm, sizes.chunk, seed=2)
        case.wait_peer()
    with turns.ripple():
        case.wait_ripple()
    ripple.backlog_rows_per_s, peer.backlog_rows_per_s, peer_full = backlog(
        case, turns, sizes, ss_first
    )
    with turns.ripple():
        case.wait_checkpointed()
        full = case.newest_checkpoints() or {}
        ripple.full_checkpoint_bytes = float(sum(size for _, size in full.values()))
        ripple.rss_mib = max(ripple_rss_mib(case.rig))
    peer.rss_mib = (server.rss_bytes() or 0) / MIB
    peer.full_checkpoint_bytes = peer_full
    ripple.touched_checkpoint_bytes, peer.touched_checkpoint_bytes = checkpoint_interval(
        case, turns, sizes
    )
    # Each system catches up, untimed, on what the other's turn appended before its own.
    with turns.ripple():
        case.wait_ripple()
        ripple.live_rows_per_s = live_rate(case, sizes, feed=False)
    with turns.peer():
        case.wait_peer()
        peer.live_rows_per_s = live_rate(case, sizes, feed=True)
    fresh: dict[str, list[float]] = {"ripple": [], "ss": []}
    for i in range(sizes.probes):  # each probe from a system caught up (untimed)
        with turns.ripple():
            case.wait_ripple()
            fresh["ripple"].append(ripple_probe_s(case, 2 * i))
        with turns.peer():
            case.wait_peer()
            fresh["ss"].append(peer_probe_s(case, 2 * i + 1))
    for who, figures in (("ripple", ripple), ("ss", peer)):
        figures.freshness_p50_s = percentile(fresh[who], 50)
        figures.freshness_p99_s = percentile(fresh[who], 99)
    peer.lookup_s = lookup_s(lambda: case.peer.figures(key_name(0)))
    with turns.peer():
        case.wait_peer()
    with turns.ripple():
        case.wait_ripple()
        get_ms = get_p99_ms(case, sizes)
        ripple.lookup_s = lookup_s(lambda: case.get(key_name(0)))
        check_same(case, sizes)
    return rows_of(case.name, sizes, ripple, peer, get_ms)


def _share(figures: Figures) -> float:
    full = figures.full_checkpoint_bytes
    return figures.touched_checkpoint_bytes / full if full else 0.0


def rows_of(name: str, sizes: Sizes, ripple: Figures, peer: Figures, get_ms: float) -> Rows:
    """The case's two rows and its `goal/` rows."""

    def row(f: Figures) -> dict[str, float]:
        return {
            "keys": float(sizes.keys),
            "backlog_rows_per_s": f.backlog_rows_per_s,
            "live_rows_per_s": f.live_rows_per_s,
            "freshness_p50_s": f.freshness_p50_s,
            "freshness_p99_s": f.freshness_p99_s,
            "lookup_s": f.lookup_s,
            "rss_mib": f.rss_mib,
            "full_checkpoint_bytes": f.full_checkpoint_bytes,
            "touched_checkpoint_bytes": f.touched_checkpoint_bytes,
            "checkpoint_share": _share(f),
        }

    figures = {
        "backlog_rate_ratio": ratio(ripple.backlog_rows_per_s, peer.backlog_rows_per_s),
        "live_rate_ratio": ratio(ripple.live_rows_per_s, peer.live_rows_per_s),
        "freshness_p50_ratio": ratio(ripple.freshness_p50_s, peer.freshness_p50_s),
        "worker_rss_mib": ripple.rss_mib,
        "checkpoint_share": _share(ripple),
        "get_p99_ms": get_ms,
    }
    return {
        f"{name}/ripple": {**row(ripple), "get_p99_ms": get_ms},
        f"{name}/ss": row(peer),
        **goal_rows(figures, f"goal/{name}"),
    }


def ratio(value: float, base: float) -> float:
    return value / base if base else 0.0


def run(quick: bool, keys: int | None = None) -> Rows:
    """Both distributions' rows; `keys` overrides the mode's key count."""
    sizes = QUICK if quick else FULL
    if keys is not None:
        sizes = replace(sizes, keys=keys)
    out: Rows = {}
    with scratch("state") as root, ExitStack() as stack:
        server = SparkConnectServer(str(root / "spark"))
        settings = {**SS_SETTINGS, "checkpoint_interval_s": sizes.checkpoint_interval_s}
        rig = stack.enter_context(pipeline_rig(root, settings, spark=server))
        for wid in WORKERS:
            rig.start_worker(wid, "--slots", SLOTS, batch_interval_s=BATCH_INTERVAL_S_DEFAULT)
        rig.wait_ready()
        if server.pid is None:
            raise RuntimeError("the Spark Connect server has no pid")
        cases = []
        for name, zipf in CASES.items():
            case = open_case(
                rig, rig.spark, root, name, zipf=zipf, keys=sizes.keys, timeout_s=sizes.timeout_s
            )
            stack.callback(case.close)
            cases.append(case)
        c = Contenders(rig, cases[0].peer, server.pid)
        stack.callback(c.resume_ripple)
        turns = Turns(c)
        for i, case in enumerate(cases):
            out.update(measure(case, turns, sizes, server, ss_first=i % 2 == 1))
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.state [--keys N] [--quick]`: this benchmark at another key count (a
    full run at the default count is `python -m bench state`)."""
    from bench import results as committed
    from bench.__main__ import render

    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__)
    parser.add_argument("--keys", type=int, default=FULL.keys, help="distinct keys per case")
    parser.add_argument("--quick", action="store_true", help="quick sizes but --keys")
    args = parser.parse_args(argv)
    started = committed.begin(args.quick)
    t0 = time.perf_counter()
    rows = run(args.quick, args.keys)
    print(render("state", rows))
    if not args.quick:
        name = "state" if args.keys == FULL.keys else f"state_keys_{args.keys}"
        print(f"(results: {committed.write(name, rows, started, time.perf_counter() - t0)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
