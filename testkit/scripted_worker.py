"""A scripted worker for coordinator tests: speaks the worker HTTP contract (the leader's
calls through `shared/messages/`, as a real worker does), computes nothing.

Run as `python -m testkit.scripted_worker --coordinator URL ... --worker-id W --port P`
(`--label K=V ... --slots N`: the profile recorded pipelines' pools select on).
It registers (following redirects), heartbeats with its gates' epochs and offsets, obeys
host / release / checkpoint / warm / unwarm calls (verifying the coordinator's bearer
token), and exposes `GET /test/state` (gates and a log of every call), `POST
/test/heartbeats {"enabled"}` (so a test can make it fall silent without killing it), `POST
/test/release-uri {"uri"}` (name
this object in release replies, as a compromised worker could), `POST /test/refuse-release
{"refuse"}` (answer release calls 503, as a worker whose store is down) and `POST /test/progress
{"lag_records", "failing": {p: error}, "rate"}` (heartbeats then report a source log that far
ahead, partitions whose batches fail, and each open partition's input rate),
`POST /test/lose-checkpoints {"lost"}` (answer every host call that names a checkpoint 503
`checkpoint_unavailable`, as a worker whose store lost them),
`POST /test/restart {"notice"}` (stop as a restarting process does: tell the leader when
`notice`, go silent, forget every gate, keep the token as a process keeps it on disk) and
`POST /test/rejoin {"with_token"}` (register again, presenting the kept token or not; the
answer's status and body come back), `POST /test/warm-hold {"hold"}` (answer warm calls
"still loading", so a move stays WARMING until the hold is lifted or its deadline passes).
A warm call is otherwise answered at once as a copy loaded at the sent checkpoint and level
with the log, so moves into a scripted worker go warm, as into a real one. A rescale's cut
call seals the hosted partition at its current offset (it advances no further) and answers
done at once, naming the canonical checkpoint there; a build call answers done at once with
one checkpoint per new partition at the generation's base offset (2^40 per generation),
named canonically at the sent epoch, so the same call gives the same answer anywhere.
Offsets advance by one per
heartbeat for each open gate, standing in for processed input.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from aiohttp import web

from coordinator.client import CoordinatorClient
from shared.checkpoint_ref import canonical_uri
from shared.errors import ClientError
from shared.http_statuses import status_of
from shared.messages.checkpoint import CHECKPOINT_ROUTE, CheckpointReply
from shared.messages.common import (
    STATUS_SCHEDULED,
    STATUS_STALE,
    STATUS_UNAUTHORIZED,
    STATUS_UNAVAILABLE,
    WORKER_TOKEN_HEADER,
    ErrorReply,
    InvalidCallBody,
    authorized,
)
from shared.messages.host import HOST_ROUTE, HostReply, HostRequest
from shared.messages.release import RELEASE_ROUTE, ReleasedCheckpoint, ReleaseReply, ReleaseRequest
from shared.messages.rescale import (
    BUILD_ROUTE,
    CUT_ROUTE,
    BuildReply,
    BuildRequest,
    BuiltCheckpoint,
    CutReply,
    CutRequest,
)
from shared.messages.session import (
    CheckpointEntry,
    CheckpointsRequest,
    HeartbeatRequest,
    PartitionReport,
    RegisterRequest,
)
from shared.messages.warm import (
    UNWARM_ROUTE,
    WARM_ROUTE,
    UnwarmReply,
    UnwarmRequest,
    WarmReply,
    WarmRequest,
)
from shared.tls import server_context

log = logging.getLogger("scripted_worker")


def error_response(status: int, error: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response(
        ErrorReply(error=error, message=message, field=field).to_json(), status=status
    )


def invalid_response(exc: InvalidCallBody) -> web.Response:
    return error_response(status_of(exc), exc.code, exc.message, exc.field)


class ScriptedWorker:
    def __init__(
        self,
        urls: list[str],
        worker_id: str,
        port: int,
        interval_s: float,
        store: str,
        labels: dict[str, str] | None = None,
        slots: int | None = None,
    ) -> None:
        self.store = store  # references are named as a real worker's (nothing is written)
        # Its profile (--label, --slots): which recorded pipelines' partitions it may take.
        self.labels, self.slots = labels, slots
        self.release_uri: str | None = None
        self.refuse_release = False  # answer release calls 503, as a worker whose store is down
        self.checkpoints_lost = False  # answer host calls naming a checkpoint 503
        self.warm_hold = False  # answer warm calls "still loading"
        self.client = CoordinatorClient(urls, deadline_s=5.0, timeout_s=3.0)
        self.worker_id = worker_id
        self.address = f"http://127.0.0.1:{port}"
        self.interval_s = interval_s
        self.token = ""
        self.call_token = ""
        self.incarnation = 0
        self.gates: dict[int, dict[str, Any]] = {}  # p -> {epoch, offset, open}
        self.calls: list[dict[str, Any]] = []
        self.heartbeats_enabled = True
        # Set through POST /test/progress: what heartbeats say beyond epoch and offset.
        self.lag_records: int | None = None  # report source_end = offset + this
        self.failing: dict[int, str] = {}  # partition -> error its batches "fail" with
        self.rate: float | None = None  # records per second reported for each partition
        self.generation = -1

    async def register(self, headers: dict[str, str] | None = None) -> None:
        body = await self.client.request(
            "POST",
            "/v1/workers",
            json=RegisterRequest(
                worker_id=self.worker_id, address=self.address, labels=self.labels, slots=self.slots
            ).to_json(),
            headers=headers,
        )
        self.token, self.incarnation = body["token"], body["incarnation"]
        self.call_token = body["call_token"]
        self.gates.clear()
        self.calls.append({"call": "register", "incarnation": self.incarnation})

    async def heartbeat_loop(self) -> None:
        while True:
            if self.heartbeats_enabled:
                try:
                    if not self.token:
                        await self.register()
                    for g in self.gates.values():
                        if g["open"] and not g.get("sealed"):
                            g["offset"] += 1
                    heartbeat = HeartbeatRequest(
                        incarnation=self.incarnation,
                        load=0.1,
                        partitions={
                            str(p): self.partition_report(p, g)
                            for p, g in self.gates.items()
                            if g["open"]
                        },
                    )
                    body = await self.client.post(
                        f"/v1/workers/{self.worker_id}/heartbeat",
                        heartbeat.to_json(),
                        token=self.token,
                    )
                    self.generation = body["generation"]
                    self.token = body.get("token") or self.token
                    assigned = {a["partition"]: a["epoch"] for a in body["assignment"]}
                    for p, g in self.gates.items():
                        if g["open"] and assigned.get(p) != g["epoch"]:
                            g["open"] = False  # reconcile: no longer ours at this epoch
                    if body["checkpoint_due"]:
                        await self.report_checkpoints()
                except ClientError as exc:
                    if exc.code in ("unknown_worker", "stale_incarnation"):
                        self.token = ""
                    log.info("heartbeat failed: %s %s", exc.code, exc.message)
            await asyncio.sleep(self.interval_s)

    async def report_checkpoints(self) -> list[dict[str, Any]]:
        entries = [
            CheckpointEntry(
                partition=p,
                epoch=g["epoch"],
                offset=g["offset"],
                uri=canonical_uri(self.store, p, g["epoch"], g["offset"]),
            )
            for p, g in sorted(self.gates.items())
            if g["open"]
        ]
        if not entries:
            return []
        report = CheckpointsRequest(
            worker_id=self.worker_id, incarnation=self.incarnation, checkpoints=entries
        )
        body = await self.client.post("/v1/checkpoints", report.to_json(), token=self.token)
        self.calls.append({"call": "checkpoints", "results": body["results"]})
        return list(body["results"])

    def authorized(self, request: web.Request) -> bool:
        return authorized(request.headers.get("Authorization", ""), self.call_token)

    async def host(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        try:
            call = HostRequest.from_json(int(request.match_info["p"]), await request.json())
        except InvalidCallBody as exc:
            return invalid_response(exc)
        p, epoch, ck = call.partition, call.epoch, call.checkpoint
        gate = self.gates.get(p)
        if gate is not None and epoch < gate["epoch"]:
            return error_response(STATUS_STALE, "stale_epoch", "lower epoch")
        if ck is not None and self.checkpoints_lost:
            self.calls.append({"call": "host-failed", "partition": p, "epoch": epoch})
            return error_response(
                STATUS_UNAVAILABLE, "checkpoint_unavailable", f"{ck.uri}: NoSuchKey"
            )
        if gate is None or epoch > gate["epoch"] or not gate["open"]:
            offset = 0 if ck is None else ck.offset
            gate = self.gates[p] = {"epoch": epoch, "offset": offset, "open": True}
        self.calls.append(
            {
                "call": "host",
                "partition": p,
                "epoch": epoch,
                "checkpoint": None if ck is None else ck.to_json(),
            }
        )
        return web.json_response(
            HostReply(partition=p, epoch=epoch, offset=gate["offset"]).to_json()
        )

    async def release(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        try:
            call = ReleaseRequest.from_json(int(request.match_info["p"]), await request.json())
        except InvalidCallBody as exc:
            return invalid_response(exc)
        if self.refuse_release:
            return error_response(
                STATUS_UNAVAILABLE, "unavailable", "final checkpoint cannot be written"
            )
        p = call.partition
        gate = self.gates.get(p)
        if gate is None or gate["epoch"] != call.epoch:
            return error_response(STATUS_STALE, "stale_epoch", "not hosted")
        gate["open"] = False
        self.calls.append(
            {
                "call": "release",
                "partition": p,
                "epoch": gate["epoch"],
                "migration_id": call.migration_id,
            }
        )
        # A test may make this worker name any object (a compromised worker would).
        uri = self.release_uri or canonical_uri(self.store, p, gate["epoch"], gate["offset"])
        final = ReleasedCheckpoint(offset=gate["offset"], uri=uri)
        return web.json_response(
            ReleaseReply(partition=p, epoch=gate["epoch"], checkpoint=final).to_json()
        )

    async def warm(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        try:
            call = WarmRequest.from_json(int(request.match_info["p"]), await request.json())
        except InvalidCallBody as exc:
            return invalid_response(exc)
        p, ck = call.partition, call.checkpoint
        gate = self.gates.get(p)
        if gate is not None and gate["open"]:
            return error_response(STATUS_STALE, "hosted", f"partition {p} is hosted here")
        self.calls.append(
            {
                "call": "warm",
                "partition": p,
                "migration_id": call.migration_id,
                "checkpoint": None if ck is None else ck.to_json(),
            }
        )
        offset = 0 if ck is None else ck.offset
        reply = WarmReply(partition=p, loaded=not self.warm_hold, offset=offset, head=offset)
        return web.json_response(reply.to_json())

    async def unwarm(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        try:
            call = UnwarmRequest.from_json(int(request.match_info["p"]), await request.json())
        except InvalidCallBody as exc:
            return invalid_response(exc)
        p = call.partition
        self.calls.append({"call": "unwarm", "partition": p, "migration_id": call.migration_id})
        # Its warm copies are only ever answered, never kept: there is none to drop.
        return web.json_response(UnwarmReply(partition=p, dropped=False).to_json())

    async def cut(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        try:
            call = CutRequest.from_json(int(request.match_info["p"]), await request.json())
        except InvalidCallBody as exc:
            return invalid_response(exc)
        p = call.partition
        gate = self.gates.get(p)
        if gate is None or not gate["open"] or gate["epoch"] != call.epoch:
            return error_response(STATUS_STALE, "stale_epoch", "not hosted at that epoch")
        gate["sealed"] = True
        self.calls.append({"call": "cut", "partition": p, "epoch": call.epoch})
        uri = canonical_uri(self.store, p, gate["epoch"], gate["offset"])
        reply = CutReply(partition=p, epoch=call.epoch, offset=gate["offset"], done=True, uri=uri)
        return web.json_response(reply.to_json())

    async def build(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        try:
            call = BuildRequest.from_json(await request.json())
        except InvalidCallBody as exc:
            return invalid_response(exc)
        self.calls.append({"call": "build", "generation": call.generation})
        base = call.generation << 40
        built = tuple(
            BuiltCheckpoint(
                partition=q, offset=base, uri=canonical_uri(self.store, q, call.epoch, base)
            )
            for q in range(call.routing[-1])
        )
        reply = BuildReply(generation=call.generation, done=True, checkpoints=built)
        return web.json_response(reply.to_json())

    async def checkpoint(self, request: web.Request) -> web.Response:
        if not self.authorized(request):
            return error_response(STATUS_UNAUTHORIZED, "unauthorized", "bad token")
        asyncio.get_running_loop().create_task(self._report_quietly())
        return web.json_response(CheckpointReply().to_json(), status=STATUS_SCHEDULED)

    async def _report_quietly(self) -> None:
        try:
            await self.report_checkpoints()
        except ClientError as exc:
            log.info("checkpoint report failed: %s", exc.message)

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "worker_id": self.worker_id,
                "incarnation": self.incarnation,
                "generation": self.generation,
                "gates": {str(p): g for p, g in self.gates.items()},
                "calls": self.calls,
            }
        )

    def partition_report(self, p: int, gate: dict[str, Any]) -> PartitionReport:
        return PartitionReport(
            epoch=gate["epoch"],
            offset=gate["offset"],
            source_end=None if self.lag_records is None else gate["offset"] + self.lag_records,
            failures=3 if p in self.failing else 0,
            error=self.failing.get(p, ""),
            rate=self.rate,
        )

    async def set_progress(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.lag_records = body.get("lag_records")
        self.failing = {int(p): str(e) for p, e in body.get("failing", {}).items()}
        self.rate = body.get("rate")
        return web.json_response(
            {"lag_records": self.lag_records, "failing": self.failing, "rate": self.rate}
        )

    async def set_heartbeats(self, request: web.Request) -> web.Response:
        self.heartbeats_enabled = bool((await request.json())["enabled"])
        return web.json_response({"enabled": self.heartbeats_enabled})

    async def set_refuse_release(self, request: web.Request) -> web.Response:
        self.refuse_release = bool((await request.json())["refuse"])
        return web.json_response({"refuse": self.refuse_release})

    async def set_checkpoints_lost(self, request: web.Request) -> web.Response:
        self.checkpoints_lost = bool((await request.json())["lost"])
        return web.json_response({"lost": self.checkpoints_lost})

    async def set_warm_hold(self, request: web.Request) -> web.Response:
        self.warm_hold = bool((await request.json())["hold"])
        return web.json_response({"hold": self.warm_hold})

    async def set_release_uri(self, request: web.Request) -> web.Response:
        self.release_uri = (await request.json())["uri"]
        return web.json_response({"uri": self.release_uri})

    async def restart(self, request: web.Request) -> web.Response:
        """Stop like a restarting process: the notice (when asked), then nothing."""
        notice = bool((await request.json())["notice"])
        answer: dict[str, Any] = {}
        if notice:
            answer = await self.client.post(
                f"/v1/workers/{self.worker_id}/restarting",
                {"incarnation": self.incarnation},
                token=self.token,
            )
        self.heartbeats_enabled = False
        self.gates.clear()
        self.calls.append({"call": "restart", "notice": notice})
        return web.json_response(answer)

    async def rejoin(self, request: web.Request) -> web.Response:
        """Register again as a restarted process would, with its kept token or without."""
        with_token = bool((await request.json())["with_token"])
        headers = {WORKER_TOKEN_HEADER: self.token} if with_token and self.token else None
        try:
            await self.register(headers)
        except ClientError as exc:
            body = {"error": exc.code, "message": exc.message}
            return web.json_response(body, status=status_of(exc))
        self.heartbeats_enabled = True
        return web.json_response({"incarnation": self.incarnation})

    async def report_now(self, request: web.Request) -> web.Response:
        return web.json_response({"results": await self.report_checkpoints()})


async def main(args: argparse.Namespace) -> None:
    labels = dict(pair.split("=", 1) for pair in args.label) if args.label else None
    w = ScriptedWorker(
        args.coordinator,
        args.worker_id,
        args.port,
        args.heartbeat_interval,
        args.store,
        labels,
        args.slots,
    )
    ssl_context = None
    if args.tls_cert:  # TLS like a real worker's: https:// address, coordinators verified
        ssl_context = server_context(args.tls_cert, args.tls_key)
        w.address = f"https://127.0.0.1:{args.port}"
        w.client = CoordinatorClient(args.coordinator, deadline_s=5.0, ca_file=args.tls_ca)
    app = web.Application()
    app.router.add_post(HOST_ROUTE, w.host)
    app.router.add_post(RELEASE_ROUTE, w.release)
    app.router.add_post(CHECKPOINT_ROUTE, w.checkpoint)
    app.router.add_post(WARM_ROUTE, w.warm)
    app.router.add_post(UNWARM_ROUTE, w.unwarm)
    app.router.add_post(CUT_ROUTE, w.cut)
    app.router.add_post(BUILD_ROUTE, w.build)
    app.router.add_get("/test/state", w.state)
    app.router.add_post("/test/heartbeats", w.set_heartbeats)
    app.router.add_post("/test/progress", w.set_progress)
    app.router.add_post("/test/report-checkpoints", w.report_now)
    app.router.add_post("/test/release-uri", w.set_release_uri)
    app.router.add_post("/test/refuse-release", w.set_refuse_release)
    app.router.add_post("/test/lose-checkpoints", w.set_checkpoints_lost)
    app.router.add_post("/test/warm-hold", w.set_warm_hold)
    app.router.add_post("/test/restart", w.restart)
    app.router.add_post("/test/rejoin", w.rejoin)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=ssl_context).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = loop.create_task(w.heartbeat_loop())
    await stop.wait()
    task.cancel()
    await w.client.close()
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", action="append", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--heartbeat-interval", type=float, default=0.3)
    parser.add_argument("--store", required=True, help="the cluster's store setting")
    parser.add_argument("--label", action="append", help="KEY=VALUE, of its profile")
    parser.add_argument("--slots", type=int, help="recorded pipelines' partitions it takes")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--tls-ca")
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(parser.parse_args()))
