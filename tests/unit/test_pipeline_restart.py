"""A worker's restart against a fake coordinator (an aiohttp test server that records what it
is sent): no Spark, a real local store.

SIGTERM's stop writes and reports the last checkpoints before the notice and closes every
gate; the process started again presents the token the previous one saved and saves each
new one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from pipeline.checkpoint import CheckpointStore
from pipeline.holdings import PartitionRuntime
from pipeline.hosting import Hosting
from pipeline.lease import Lease
from pipeline.state import KeyState
from pipeline.store import LocalStore
from pipeline.token_file import TokenFile
from pipeline.worker import Worker, WorkerSettings
from shared.errors import UnavailableError
from shared.messages.common import WORKER_TOKEN_HEADER
from shared.messages.host import HostRequest

ISSUED = "w1.2.1700000000000." + "cd" * 32
RENEWED = "w1.2.1800000000000." + "ef" * 32


class FakeCoordinator:
    """Answers registration, heartbeats, checkpoint reports and the restart notice; keeps
    every request in `seen` as (path, headers, body)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], Any]] = []

    async def record(self, request: web.Request) -> Any:
        body = await request.json() if request.can_read_body else None
        self.seen.append((request.path, dict(request.headers), body))
        return body

    async def register(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response(
            {
                "worker_id": "w1",
                "incarnation": 2,
                "token": ISSUED,
                "token_expires_at_ms": 1,
                "call_token": "call",
                "heartbeat_interval_s": 0.2,
                "lease_s": 60.0,
            }
        )

    async def heartbeat(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response(
            {"generation": 1, "assignment": [], "checkpoint_due": False, "token": RENEWED}
        )

    async def checkpoints(self, request: web.Request) -> web.Response:
        body = await self.record(request)
        results = [{"partition": c["partition"], "status": "accepted"} for c in body["checkpoints"]]
        return web.json_response({"results": results})

    async def restarting(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response(
            {"worker_id": "w1", "incarnation": 2, "partitions": 2, "rejoin_grace_s": 60.0},
            status=202,
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/workers", self.register)
        app.router.add_post("/v1/workers/w1/heartbeat", self.heartbeat)
        app.router.add_post("/v1/checkpoints", self.checkpoints)
        app.router.add_post("/v1/workers/w1/restarting", self.restarting)
        return app


@pytest.fixture
async def coordinator() -> AsyncIterator[tuple[FakeCoordinator, str]]:
    fake = FakeCoordinator()
    server = TestServer(fake.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield fake, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def make_worker(tmp_path: Path, url: str) -> Worker:
    settings = WorkerSettings(
        coordinators=(url,),
        worker_id="w1",
        listen="127.0.0.1:0",
        spark_remote="sc://127.0.0.1:9",
        staging_dir=str(tmp_path / "stage"),
        state_dir=str(tmp_path / "state"),
    )
    (tmp_path / "state").mkdir(mode=0o700, exist_ok=True)  # Worker.run's prepare makes it
    return Worker(settings, LocalStore(str(tmp_path / "store")))


async def test_each_token_is_saved_and_the_next_process_presents_the_last_one(
    tmp_path: Path, coordinator: tuple[FakeCoordinator, str]
) -> None:
    fake, url = coordinator
    saved = TokenFile(tmp_path / "state", "w1")
    for process, presented in ((1, None), (2, RENEWED)):
        worker = make_worker(tmp_path, url)
        try:
            await worker.session.register()
            path, headers, _ = fake.seen[-1]
            assert path == "/v1/workers", process
            assert headers.get(WORKER_TOKEN_HEADER) == presented, process
            assert saved.load() == ISSUED  # the new incarnation's, for the next restart
            assert worker.not_ready() == "no lease (no heartbeat acknowledged lately)"
            await worker.session.heartbeat_once()
            assert worker.session.token == RENEWED and saved.load() == RENEWED
            assert worker.not_ready() is None  # registered, leased, nothing assigned
        finally:
            await worker.client.close()


async def test_the_stop_for_a_restart_reports_last_checkpoints_then_tells_the_leader(
    tmp_path: Path, coordinator: tuple[FakeCoordinator, str]
) -> None:
    fake, url = coordinator
    worker = make_worker(tmp_path, url)
    try:
        await worker.session.register()
        worker.lease = Lease(lease_ms=60_000).renewed(worker.clock.monotonic_ms())
        state = {"SYM0001": KeyState.of(12.5, 4)}
        for p, epoch, offset in ((2, 3, 17), (5, 1, 40)):
            rt = PartitionRuntime(epoch=epoch, state=dict(state), offset=offset)
            rt.loaded.set()
            worker.parts[p] = rt
            worker.holdings.gates.host(p, epoch)
        worker.session.assigned = {2: 3, 5: 1, 7: 2}
        assert worker.not_ready() == "1 assigned partitions not open yet (first: 7)"
        async with TestClient(TestServer(worker.app())) as client:
            r = await client.get("/v1/ready")
            assert r.status == 503 and (await r.json())["reason"].startswith("1 assigned")
            worker.session.assigned = {2: 3, 5: 1}
            r = await client.get("/v1/ready")
            assert r.status == 200 and await r.json() == {"ready": True}
            await worker.stop_for_restart()
            r = await client.get("/v1/ready")
            assert (r.status, (await r.json())["reason"]) == (503, "stopping")
        assert worker.stopped.is_set()
        paths = [path for path, _, _ in fake.seen]
        assert paths[-2:] == ["/v1/checkpoints", "/v1/workers/w1/restarting"]
        entries = fake.seen[-2][2]["checkpoints"]
        assert {(c["partition"], c["epoch"], c["offset"]) for c in entries} == {
            (2, 3, 17),
            (5, 1, 40),
        }
        assert fake.seen[-1][2] == {"incarnation": 2}
        for c in entries:
            assert CheckpointStore(worker.store).read(c["uri"]).state == state
        # Every gate is closed: nothing more is processed here, and nothing is opened again.
        assert worker.holdings.open_now() == {} and worker.parts == {}
        with pytest.raises(UnavailableError):
            await Hosting(worker.holdings, worker.checkpointer).host(
                HostRequest(partition=1, epoch=4, checkpoint=None)
            )
    finally:
        await worker.client.close()
