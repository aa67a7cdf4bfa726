"""`ripple up --demo`: show the pipeline end to end on the local cluster `ripple up` started.

Produces sample market data, waits until every partition's owner has processed it, prints
a few keys and checks every key against one Spark batch job over the same input; then
kills one worker with SIGKILL, waits for the coordinator to declare it dead and for its
partitions to replay elsewhere from their checkpoints, and checks the equality again.
Every wait is bounded; the killed worker is one of `ripple up`'s own children, by PID.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

from coordinator.client import CoordinatorClient, KeyRouter
from coordinator.config import ClusterConfig
from shared.clock import monotonic_s
from shared.errors import ClientError

DEMO_RECORDS = 20_000
DEMO_KEYS = 50
SHOW_KEYS = ("SYM0000", "SYM0001", "SYM0002", "SYM0003", "SYM0004")
CATCH_UP_TIMEOUT_S = 180.0
POLL_S = 0.5


async def _caught_up(
    client: CoordinatorClient, ends: dict[int, int], addresses: dict[str, str]
) -> bool:
    import aiohttp

    table = await client.get("/v1/partitions")
    parts = table["partitions"]
    if any(p["status"] != "online" for p in parts):
        return False
    healths: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http:
        for owner in {p["owner"] for p in parts}:
            try:
                async with http.get(f"{addresses[owner]}/v1/health") as resp:
                    healths[owner] = await resp.json()
            except (aiohttp.ClientError, TimeoutError, KeyError):
                return False
    for p in parts:
        mine = healths[p["owner"]]["partitions"].get(str(p["partition"]))
        if not mine or mine["epoch"] != p["epoch"] or mine["offset"] != ends[p["partition"]]:
            return False
    return True


async def _wait_caught_up(client: CoordinatorClient, ends: dict[int, int]) -> float:
    started = monotonic_s(client.clock)
    while monotonic_s(client.clock) - started < CATCH_UP_TIMEOUT_S:
        workers = await client.get("/v1/workers")
        addresses = {w["worker_id"]: w["address"] for w in workers["workers"]}
        try:
            if await _caught_up(client, ends, addresses):
                return monotonic_s(client.clock) - started
        except ClientError:
            pass
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"pipeline did not catch up within {CATCH_UP_TIMEOUT_S} s")


async def _show_and_check(
    client: CoordinatorClient, spark_url: str, store_dir: Path, total: int
) -> None:
    from pipeline.aggregate import Aggregator, stage
    from pipeline.source import SourceLog
    from pipeline.store import open_store

    router = KeyRouter(client)
    rows = []
    for key in SHOW_KEYS:
        b = await router.get(key)
        rows.append(
            f"  {key}  count={b['count']:<5} sum={b['sum']:<12.4f} min={b['min']:<9.4f}"
            f" max={b['max']:<9.4f} last={b['last']:<9.4f} partition={b['partition']}"
            f" epoch={b['epoch']} offset={b['offset']}"
        )
    print("\n".join(rows))
    store = open_store(f"file://{store_dir}")
    source = SourceLog(store, total)
    paths = [stage(store, s, str(store_dir)) for p in range(total) for s in source.segments(p)]
    # Synchronous on purpose (a demo can block its own loop for a second): a Spark Connect
    # session left on an executor thread kept asyncio.run() from returning.
    aggregator = Aggregator(spark_url)
    try:
        oracle = aggregator.batch_job(paths)
    finally:
        aggregator.close()
    mismatched = 0
    for key, want in oracle.items():
        got = await router.get(key)
        if (got["count"], got["sum"], got["min"], got["max"], got["last"]) != (
            want.count,
            want.sum,
            want.min,
            want.max,
            want.last,
        ):
            mismatched += 1
    verdict = "equal" if mismatched == 0 else f"{mismatched} keys DIFFER"
    print(f"  all {len(oracle)} keys vs one Spark batch job over the same input: {verdict}")


async def run_demo(
    config: ClusterConfig,
    urls: list[str],
    spark_url: str,
    workers: dict[str, subprocess.Popen[bytes]],
) -> None:
    from pipeline.source import Producer, SourceLog, generate
    from pipeline.store import open_store

    store_dir = (Path(config.data_dir) / "store").resolve()
    store = open_store(f"file://{store_dir}")
    total = config.total_partitions
    async with CoordinatorClient(urls) as client:
        print(f"\n[demo] producing {DEMO_RECORDS} records over {DEMO_KEYS} keys ...")
        Producer(store, total).produce(generate(DEMO_RECORDS, DEMO_KEYS, seed=42))
        source = SourceLog(store, total)
        ends = {p: source.end_offset(p) for p in range(total)}
        took = await _wait_caught_up(client, ends)
        print(f"[demo] every partition processed on Spark in {took:.1f} s; some keys:")
        await _show_and_check(client, spark_url, store_dir, total)

        owner = (await client.get("/v1/partitions/0"))["owner"]
        proc = workers[owner]
        print(
            f"\n[demo] failover: kill -9 {owner} (pid {proc.pid}), owner of partition 0; the "
            f"coordinator declares it dead after heartbeat_timeout_s="
            f"{config.heartbeat_timeout_s:g} s ..."
        )
        proc.send_signal(signal.SIGKILL)
        killed = monotonic_s(client.clock)
        took = await _wait_caught_up(client, ends)
        moved = await client.get("/v1/partitions/0")
        print(
            f"[demo] partition 0 now on {moved['owner']} at epoch {moved['epoch']}; all "
            f"partitions replayed from checkpoints and caught up "
            f"{monotonic_s(client.clock) - killed:.1f} s after the kill:"
        )
        await _show_and_check(client, spark_url, store_dir, total)
        print("[demo] done; the cluster keeps running until Ctrl-C.")
