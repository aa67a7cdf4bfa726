"""A worker's heartbeat reaches another coordinator within its lease when the node it talks to
holds calls unanswered (a leader whose disk stalls its loop for seconds), and later calls skip
that node. Two fake coordinators (aiohttp test servers on 127.0.0.1): `stalled` answers the
registration, then holds every heartbeat until the test ends; `healthy` answers everything.

Without a bound per attempt tied to the lease, every beat spent a whole 5 s attempt on the
stalled node first, past the lease and the coordinator's heartbeat timeout, while a new leader
elsewhere waited for it and declared the worker dead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from pipeline.session import ATTEMPTS_PER_LEASE
from pipeline.store import LocalStore
from pipeline.worker import Worker, WorkerSettings

LEASE_S = 2.0
HELD_S_MAX = 60.0  # the stalled node's hold, ended by the fixture long before


class FakeCoordinator:
    def __init__(self, *, stalls: bool) -> None:
        self.stalls = stalls
        self.release = asyncio.Event()
        self.heartbeats = 0

    async def register(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "worker_id": "w1",
                "incarnation": 1,
                "token": "w1.1.1700000000000." + "ab" * 32,
                "token_expires_at_ms": 1,
                "call_token": "call",
                "heartbeat_interval_s": 0.2,
                "lease_s": LEASE_S,
            }
        )

    async def heartbeat(self, request: web.Request) -> web.Response:
        self.heartbeats += 1
        if self.stalls:
            await asyncio.wait_for(self.release.wait(), HELD_S_MAX)
        return web.json_response({"generation": 1, "assignment": [], "checkpoint_due": False})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/workers", self.register)
        app.router.add_post("/v1/workers/w1/heartbeat", self.heartbeat)
        return app


@pytest.fixture
async def coordinators() -> AsyncIterator[tuple[FakeCoordinator, str, FakeCoordinator, str]]:
    stalled, healthy = FakeCoordinator(stalls=True), FakeCoordinator(stalls=False)
    servers = [TestServer(f.app(), host="127.0.0.1") for f in (stalled, healthy)]
    for s in servers:
        await s.start_server()
    urls = [str(s.make_url("")).rstrip("/") for s in servers]
    try:
        yield stalled, urls[0], healthy, urls[1]
    finally:
        stalled.release.set()
        for s in servers:
            await s.close()


async def test_a_heartbeat_leaves_a_stalled_coordinator_within_the_lease(
    tmp_path: Path, coordinators: tuple[FakeCoordinator, str, FakeCoordinator, str]
) -> None:
    stalled, stalled_url, healthy, healthy_url = coordinators
    settings = WorkerSettings(
        coordinators=(stalled_url, healthy_url),
        worker_id="w1",
        listen="127.0.0.1:0",
        spark_remote="sc://127.0.0.1:9",
        staging_dir=str(tmp_path / "stage"),
    )
    worker = Worker(settings, LocalStore(str(tmp_path / "store")))
    try:
        await worker.session.register()  # the stalled node still answers this
        assert worker.session.heartbeat_attempt_s == LEASE_S / ATTEMPTS_PER_LEASE
        started = time.monotonic()
        await worker.session.heartbeat_once()
        took_s = time.monotonic() - started
        assert (stalled.heartbeats, healthy.heartbeats) == (1, 1)
        assert worker.session.lease_valid()
        # One attempt at the stalled node, then the healthy one: well inside two attempts.
        assert took_s < 2 * LEASE_S / ATTEMPTS_PER_LEASE, took_s
        # The stalled node is asked last from now on: the next beat goes straight through.
        await worker.session.heartbeat_once()
        assert (stalled.heartbeats, healthy.heartbeats) == (1, 2)
    finally:
        await worker.client.close()
