"""Baseline node: pysyncobj as it comes, a counting machine behind one aiohttp handler.

    python -m bench.raw_node --index I --raft A:P,B:P,C:P --http A:P,B:P,C:P --dir DIR

A plain `SyncObj` subclass on pysyncobj's own threading (its `autoTick` thread ticks Raft; a
write crosses to that thread and its commit back to the event loop), with none of Ripple's
corrections to pysyncobj (`replication.raft_node`): what the coordinator's write path is
measured against. It keeps what makes the comparison fair: the same Raft port
(`replication.transport.HardenedTransport`), the same timeouts and journal plus dump
(`RaftSettings` defaults through `syncobj_conf`), one log entry per write (the body bytes),
the coordinator's event loop, GIL switch interval and gc thresholds (`run_node_process`).
No codec, no state beyond a count, no auth, no pydantic, no idempotency table, no duties.

`POST /write` appends the body and answers 200 once it is committed and applied here; a
follower answers 307 to the leader's `/write` (like the coordinator), 503 when no leader is
known or the commit fails or times out. `GET /health` reports whether this node leads and
is ready; `POST /echo` parses a JSON body and answers without touching Raft (the heartbeat
baseline). Run as a subprocess so a benchmark can kill -9 it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from pysyncobj import FAIL_REASON, SyncObj, replicated

from coordinator.service.server import run_node_process
from replication.group_commit import DEFAULT_PROPOSE_TIMEOUT_S
from replication.raft_node import syncobj_conf
from replication.refusals import Refusals
from replication.settings import RaftSettings
from replication.transport import HardenedTransport

SECRET = "bench-raw-node-secret-0123456789"
# pysyncobj's tick thread waits this long on its sockets when nothing happens, as long as
# the coordinator's own tick period (replication's TICK_PERIOD_S): Raft's timers are checked
# as often on both.
AUTO_TICK_PERIOD_S = 0.02
SHUTDOWN_WAIT_S = 5.0


class RawNode(SyncObj):  # type: ignore[misc]
    """pysyncobj with its own tick thread and one replicated method that counts writes.
    `count` is set after SyncObj's constructor, so pysyncobj writes it into its dump."""

    def __init__(self, settings: RaftSettings) -> None:
        transport = HardenedTransport.factory(
            limits=settings.transport_limits(), secret=settings.secret, refusals=Refusals()
        )
        super().__init__(
            settings.self_addr,
            list(settings.partners),
            syncobj_conf(settings, autoTick=True, autoTickPeriod=AUTO_TICK_PERIOD_S),
            transportClass=transport,
        )
        self.count = 0

    @replicated  # type: ignore[untyped-decorator]
    def apply_write(self, entry: bytes) -> bytes:
        self.count += 1
        return b"ok"


async def serve(index: int, rafts: list[str], https: list[str], data_dir: Path) -> None:
    settings = RaftSettings(
        self_addr=rafts[index],
        partners=tuple(a for i, a in enumerate(rafts) if i != index),
        bind_addr=rafts[index],
        secret=SECRET,
        journal_path=str(data_dir / f"raw{index}.journal"),
        dump_path=str(data_dir / f"raw{index}.dump"),
    )
    settings.validate()
    data_dir.mkdir(parents=True, exist_ok=True)
    node = RawNode(settings)
    node.waitBinded()  # the tick thread binds the port: fail here, not silently
    loop = asyncio.get_running_loop()

    def ready() -> bool:
        return bool(node._isLeader() and node.isReady())

    def leader_http() -> str | None:
        leader = node._getLeader()
        addr = None if leader is None else str(leader.address)
        return https[rafts.index(addr)] if addr in rafts else None

    def settle(fut: asyncio.Future[tuple[Any, int]], result: Any, err: int) -> None:
        if not fut.done():
            fut.set_result((result, err))

    async def write(request: web.Request) -> web.Response:
        if not ready():
            target = leader_http()
            if target is not None and target != https[index]:
                raise web.HTTPTemporaryRedirect(f"http://{target}/write")
            return web.json_response({"error": "unavailable"}, status=503)
        body = await request.read()
        fut: asyncio.Future[tuple[Any, int]] = loop.create_future()
        node.apply_write(
            body or b"x",
            # On pysyncobj's tick thread: the outcome crosses back to the loop.
            callback=lambda result, err: loop.call_soon_threadsafe(settle, fut, result, err),
        )
        try:
            async with asyncio.timeout(DEFAULT_PROPOSE_TIMEOUT_S):
                _result, err = await fut
        except TimeoutError:
            return web.json_response({"error": "no commit in time"}, status=503)
        if err != FAIL_REASON.SUCCESS:
            return web.json_response({"error": f"pysyncobj failure {err}"}, status=503)
        return web.json_response({"ok": True})

    async def echo(request: web.Request) -> web.Response:
        # The heartbeat baseline: parse a JSON body, answer JSON, no Raft and no state.
        body = await request.json()
        return web.json_response({"generation": 0, "assignment": [], "seen": len(body)})

    async def health(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "leader": bool(node._isLeader()),
                "ready": ready(),
                "term": int(node.raftCurrentTerm),
                "applied_index": int(node.raftLastApplied),
            }
        )

    app = web.Application()
    app.router.add_post("/write", write)
    app.router.add_post("/echo", echo)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = https[index].rsplit(":", 1)
    await web.TCPSite(runner, host, int(port)).start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        node.destroy()  # the tick thread closes the port and the journal, then ends
        deadline = time.monotonic() + SHUTDOWN_WAIT_S
        while node.tick_thread_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.raw_node")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--raft", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    run_node_process(serve(a.index, a.raft.split(","), a.http.split(","), Path(a.dir)))


if __name__ == "__main__":
    main()
