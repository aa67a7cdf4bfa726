"""Load generator, run as its own process so the client never shares a GIL with what it
measures. Prints one JSON object on its last stdout line.

    python -m bench.load ops --url URL --count N --concurrency C [--register]
    python -m bench.load heartbeats --url LEADER --workers N --duration-s D --concurrency C
    python -m bench.load register --url LEADER --workers N --out FILE

`ops` POSTs N bodies to URL with C in flight (no redirects followed: aim it at the leader).
With `--register` each body is a worker registration with a fresh id; otherwise raw bytes.
`heartbeats` registers N workers (concurrency 64), then sends their heartbeats round-robin,
each with the worker's own token, for D seconds with C in flight. `register` only registers
and writes each worker's id, incarnation and token to FILE, for `wrk` (bench/wrk/).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from bench.stats import percentile

REQUEST_TIMEOUT_S = 10.0
REGISTER_CONCURRENCY = 64
ADDRESS = "http://127.0.0.1:9"  # discard port: nothing ever listens there


async def _drive(
    concurrency: int, next_call: Callable[[], Awaitable[int] | None], deadline: float
) -> tuple[list[float], dict[int, int], float]:
    """Run calls from `next_call` (None = no more) with `concurrency` in flight.
    Returns (latencies_s of 2xx calls, non-2xx answers by status (0 = none), elapsed_s)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def lane() -> None:
        while time.monotonic() < deadline:
            call = next_call()
            if call is None:
                return
            t0 = time.perf_counter()
            try:
                status = await call
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            if 200 <= status < 300:
                latencies.append(time.perf_counter() - t0)
            else:
                statuses[status] = statuses.get(status, 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    if statuses:
        print(f"non-2xx answers by status (0 = no answer): {statuses}", file=sys.stderr)
    return latencies, statuses, time.perf_counter() - t0


def _report(latencies: list[float], statuses: dict[int, int], elapsed_s: float) -> dict[str, float]:
    return {
        "ops": len(latencies),
        "errors": sum(statuses.values()),
        # The usual non-2xx answers, named: a leader change mid-run (the client does not
        # follow redirects), no leader or a full proposal queue, no answer in time.
        "redirects": statuses.get(307, 0),
        "unavailable": statuses.get(503, 0),
        "no_answer": statuses.get(0, 0),
        "elapsed_s": elapsed_s,
        "ops_per_s": len(latencies) / elapsed_s if elapsed_s else 0.0,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


async def _post(
    session: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str] | None = None
) -> int:
    async with session.post(url, json=body, headers=headers, allow_redirects=False) as r:
        await r.read()
        return r.status


def _session(concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency, force_close=False),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
    )


async def register_workers(
    session: aiohttp.ClientSession, url: str, n: int, prefix: str, address: str = ADDRESS
) -> tuple[list[tuple[str, int, str]], dict[str, float]]:
    workers: list[tuple[str, int, str]] = []
    ids = iter(range(n))

    async def one(i: int) -> int:
        wid = f"{prefix}{i}"
        async with session.post(
            f"{url}/v1/workers", json={"worker_id": wid, "address": address}
        ) as r:
            if r.status == 200:
                body = await r.json()
                workers.append((wid, int(body["incarnation"]), str(body["token"])))
            else:
                await r.read()
            return r.status

    def next_call() -> Awaitable[int] | None:
        i = next(ids, None)
        return None if i is None else one(i)

    lat, err, el = await _drive(REGISTER_CONCURRENCY, next_call, time.monotonic() + 600)
    return workers, _report(lat, err, el)


async def ops(url: str, count: int, concurrency: int, register: bool) -> dict[str, float]:
    async with _session(concurrency) as session:
        if register:
            prefix = f"w{uuid.uuid4().hex[:6]}-"
            seq = iter(range(count))

            def next_call() -> Awaitable[int] | None:
                i = next(seq, None)
                if i is None:
                    return None
                return _post(session, url, {"worker_id": f"{prefix}{i}", "address": ADDRESS})

        else:
            seq = iter(range(count))

            def next_call() -> Awaitable[int] | None:
                i = next(seq, None)
                return None if i is None else _post(session, url, {"i": i})

        lat, err, el = await _drive(concurrency, next_call, time.monotonic() + 600)
        return _report(lat, err, el)


async def heartbeats(
    url: str, n_workers: int, duration_s: float, concurrency: int
) -> dict[str, float]:
    async with _session(max(concurrency, REGISTER_CONCURRENCY)) as session:
        workers, reg = await register_workers(session, url, n_workers, "hb-")
        if not workers:
            raise SystemExit(f"no worker registered: {reg}")
        cycle = itertools.cycle(workers)

        def next_call() -> Awaitable[int]:
            wid, inc, token = next(cycle)
            return _post(
                session,
                f"{url}/v1/workers/{wid}/heartbeat",
                {"incarnation": inc, "load": 1.0, "partitions": {}},
                {"Authorization": f"Bearer {token}"},
            )

        lat, err, el = await _drive(concurrency, next_call, time.monotonic() + duration_s)
        out = _report(lat, err, el)
        out["workers"] = len(workers)
        out["register_per_s"] = reg["ops_per_s"]
        return out


async def register_only(url: str, n_workers: int, out: str, address: str) -> dict[str, float]:
    """Register `n_workers` at `address` and write "worker_id incarnation token" lines to
    `out` (for bench/wrk/heartbeats.lua and bench.checkpoints)."""
    async with _session(REGISTER_CONCURRENCY) as session:
        workers, reg = await register_workers(session, url, n_workers, "hb-", address)
    if not workers:
        raise SystemExit(f"no worker registered: {reg}")
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(f"{wid} {inc} {token}\n" for wid, inc, token in workers)
    return {"workers": len(workers), "register_per_s": reg["ops_per_s"]}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.load")
    sub = p.add_subparsers(dest="mode", required=True)
    o = sub.add_parser("ops")
    o.add_argument("--url", required=True)
    o.add_argument("--count", type=int, required=True)
    o.add_argument("--concurrency", type=int, required=True)
    o.add_argument("--register", action="store_true")
    h = sub.add_parser("heartbeats")
    h.add_argument("--url", required=True)
    h.add_argument("--workers", type=int, required=True)
    h.add_argument("--duration-s", type=float, required=True)
    h.add_argument("--concurrency", type=int, required=True)
    g = sub.add_parser("register")
    g.add_argument("--url", required=True)
    g.add_argument("--workers", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--address", default=ADDRESS, help="where the workers say they listen")
    a = p.parse_args()
    if a.mode == "register":
        result = asyncio.run(register_only(a.url, a.workers, a.out, a.address))
    elif a.mode == "ops":
        result = asyncio.run(ops(a.url, a.count, a.concurrency, a.register))
    else:
        result = asyncio.run(heartbeats(a.url, a.workers, a.duration_s, a.concurrency))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
