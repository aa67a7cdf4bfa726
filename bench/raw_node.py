"""Baseline node: `replication.log.ReplicatedLog` with a trivial machine behind one aiohttp
handler. It is what the coordinator would be without its domain: no codec, no state, no
auth, no pydantic, no idempotency table, no leader duties.

    python -m bench.raw_node --index I --raft A:P,B:P,C:P --http A:P,B:P,C:P --dir DIR

`POST /write` proposes the body bytes and answers 200 once committed and applied here; a
follower answers 307 to the leader's `/write` (like the coordinator), 503 when no leader is
known. `GET /health` reports role and readiness; `POST /echo` parses a JSON body and answers
without touching Raft (the heartbeat baseline). Same Raft timeouts as the coordinator's
defaults (RaftSettings), so the failover and write baselines differ only in what is above
the log. Run as a subprocess so a benchmark can kill -9 it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from aiohttp import web

from coordinator.service.server import run_node_process
from replication.log import RaftRole, RaftSettings, ReplicatedLog, ReplicationError

SECRET = "bench-raw-node-secret-0123456789"


class CountingMachine:
    """The trivial machine: counts entries, snapshot is the count."""

    def __init__(self) -> None:
        self.count = 0

    def apply(self, entry: bytes) -> bytes:
        self.count += 1
        return b"ok"

    def snapshot(self) -> bytes:
        return str(self.count).encode()

    def restore(self, data: bytes) -> None:
        self.count = int(data or b"0")


async def serve(index: int, rafts: list[str], https: list[str], data_dir: Path) -> None:
    settings = RaftSettings(
        self_addr=rafts[index],
        partners=tuple(a for i, a in enumerate(rafts) if i != index),
        bind_addr=rafts[index],
        secret=SECRET,
        journal_path=str(data_dir / f"raw{index}.journal"),
        dump_path=str(data_dir / f"raw{index}.dump"),
        # The per-entry baseline: one pysyncobj entry per write (group commit off).
        group_commit_entries_max=1,
        # pysyncobj's own threading: Raft on a tick thread of its own (Ripple ticks on its
        # event loop, RaftSettings.tick_on_event_loop).
        tick_on_event_loop=False,
    )
    log = ReplicatedLog(settings, CountingMachine())
    log.start()

    def leader_http() -> str | None:
        addr = log.status().leader_addr
        return https[rafts.index(addr)] if addr in rafts else None

    async def write(request: web.Request) -> web.Response:
        if not log.is_ready_leader:
            target = leader_http()
            if target is not None and target != https[index]:
                raise web.HTTPTemporaryRedirect(f"http://{target}/write")
            return web.json_response({"error": "unavailable"}, status=503)
        body = await request.read()
        try:
            await log.propose(body or b"x")
        except ReplicationError as exc:
            return web.json_response({"error": str(exc)}, status=503)
        return web.json_response({"ok": True})

    async def echo(request: web.Request) -> web.Response:
        # The heartbeat baseline: parse a JSON body, answer JSON, no Raft and no state.
        body = await request.json()
        return web.json_response({"generation": 0, "assignment": [], "seen": len(body)})

    async def health(request: web.Request) -> web.Response:
        st = log.status()
        return web.json_response(
            {
                "role": st.role.value,
                "ready": st.ready,
                "leader": st.role is RaftRole.LEADER,
                "applied_index": st.applied_index,
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
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        log.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.raw_node")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--raft", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    # The coordinator's event loop (uvloop), GIL switch interval and gc thresholds, so the
    # baselines differ only above the log.
    run_node_process(serve(a.index, a.raft.split(","), a.http.split(","), Path(a.dir)))


if __name__ == "__main__":
    main()
