"""The operator's routes: reassign, abort a migration, reset a partition, take and record a
backup, maintenance mode, a barrier.

Each is leader-only and needs the admin token, checked before the body is read. A plan is
made by the leader's planner (a pure query) and proposed whole; a dry run or an empty plan
proposes nothing. A backup is the state at one applied index, after a barrier (so it holds
every write acknowledged before the request), encoded outside the apply lock and sent in
chunks (`coordinator/core/backup.py` is its format).
"""

from __future__ import annotations

import asyncio
import dataclasses

from aiohttp import web

from coordinator.core.backup import encode_backup
from coordinator.core.commands import (
    AbortMigration,
    Barrier,
    MaintenanceOff,
    MaintenanceOn,
    PlanMigrations,
    RecordBackup,
    ResetPartition,
)
from coordinator.core.model import DEFAULT_PIPELINE, MigrationId, MigrationReason, valid_id
from coordinator.core.snapshot import encode_state
from coordinator.service import dashboard
from coordinator.service import models as m
from coordinator.service.http.answers import json_reply, migration_refs, raise_rejected
from coordinator.service.http.context import ADMISSION_KEY, DUTIES_KEY, ORIGINS_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import (
    idempotency_key,
    parse,
    path_partition,
    query_pipeline,
)
from coordinator.service.node_parts import Writes
from coordinator.service.stamps import new_request_id, now_ms
from shared.errors import RequestError
from shared.version import PACKAGE_VERSION

__all__ = ["BACKUP_CHUNK_BYTES", "ROUTES"]

BACKUP_CHUNK_BYTES = 1024 * 1024  # one write of a backup to the socket


async def reassign(request: web.Request) -> web.Response:
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, m.ReassignRequest)
    if (body.strategy is None) == (body.moves is None):
        raise RequestError("give exactly one of strategy or moves", field="strategy")
    planner, now = request.app[DUTIES_KEY].query()
    with node.read() as state:
        scope = query_pipeline(request, state)
        if body.strategy is not None and scope.pipeline != DEFAULT_PIPELINE:
            # The planner balances `default`'s partitions; a record's are placed by its pool.
            raise RequestError(
                f"balance places default's partitions only; move {scope.pipeline}'s "
                "with explicit moves",
                field="pipeline",
            )
        asked = []
        for i, mv in enumerate(body.moves or []):
            if mv.partition >= len(scope.numbers):
                raise RequestError(
                    f"moves[{i}]: partition {mv.partition} does not exist", field="partition"
                )
            asked.append((scope.numbers[mv.partition], mv.to))
        with scope.speaking():
            moves = raise_rejected(
                planner.plan_reassign(state, now, balance=body.strategy == "balance", moves=asked)
            )
    if body.dry_run or not moves:
        refs = migration_refs(moves, scope)
        return json_reply(m.ReassignResponse(dry_run=body.dry_run, migrations=refs), status=202)
    with scope.speaking():
        planned = await node.submit(
            PlanMigrations(moves=moves, reason=MigrationReason.ADMIN, now_ms=now_ms()),
            idempotency_key(request, admin.scope, "reassign"),
        )
    return json_reply(
        m.ReassignResponse(dry_run=False, migrations=migration_refs(planned.migrations, scope)),
        status=202,
    )


async def abort_migration(request: web.Request) -> web.Response:
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    mid = request.match_info["migration_id"]
    if not valid_id(mid):
        raise RequestError("migration id must match [A-Za-z0-9._-]{1,64}", field="migration_id")
    await node.submit(
        AbortMigration(migration_id=MigrationId(mid), note="aborted by operator", now_ms=now_ms()),
        idempotency_key(request, admin.scope, f"abort:{mid}"),
    )
    with node.read() as state:
        mig = state.migrations.get(MigrationId(mid))
        phase = "aborted" if mig is None else mig.phase.value
    return json_reply(m.AbortResponse(id=mid, phase=phase))


async def reset_partition(request: web.Request) -> web.Response:
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    with node.read() as state:
        scope = query_pipeline(request, state)
        p = path_partition(request, state, scope).partition
    with scope.speaking():
        reset = await node.submit(
            ResetPartition(partition=p, note="reset by operator", now_ms=now_ms()),
            idempotency_key(request, admin.scope, f"reset:{p}"),
        )
    return json_reply(
        m.ResetResponse(
            partition=scope.local(reset.partition), pipeline=scope.pipeline, epoch=reset.epoch
        )
    )


async def backup(request: web.Request) -> web.StreamResponse:
    node = require_leader(request)
    request.app[ADMISSION_KEY].admit_admin(request.headers)
    await node.barrier()
    state, applied_index, term = node.snapshot_at()
    body = await asyncio.to_thread(encode_state, state)
    limit = node.config.backup_bytes_max
    if len(body) > limit:
        raise RequestError(
            f"the state is {len(body)} bytes, over backup_bytes_max = {limit}",
            code="too_large",
            field="backup_bytes_max",
        )
    header, data = encode_backup(
        body,
        cluster_id=node.cluster_id,
        applied_index=applied_index,
        term=term,
        package_version=PACKAGE_VERSION,
        command_set_version=state.finalized_version,
        created_at_ms=now_ms(),
    )
    name = f"ripple-{header.cluster_id}-{header.applied_index}.backup"
    resp = web.StreamResponse(
        headers={
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'attachment; filename="{name}"',
            "X-Content-Type-Options": "nosniff",
        }
    )
    resp.content_length = len(data)
    # Sent before the first chunk: `finish` adds its CORS headers too late for a stream.
    dashboard.cors_headers(request, resp, request.app[ORIGINS_KEY])
    await resp.prepare(request)
    for start in range(0, len(data), BACKUP_CHUNK_BYTES):
        await resp.write(data[start : start + BACKUP_CHUNK_BYTES])
    await resp.write_eof()
    return resp


async def record_backup(request: web.Request) -> web.Response:
    """The cluster learns of a backup once the operator's tool has stored it. RecordBackup is
    of command-set version 2: refused (409, naming the node behind) until every voter
    speaks it."""
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, m.RecordBackupRequest)
    recorded = await node.submit(
        RecordBackup(**body.model_dump(), now_ms=now_ms()),
        idempotency_key(request, admin.scope, f"backup:{body.sha256}"),
    )
    return json_reply(
        m.RecordBackupResponse(applied_index=recorded.applied_index, latest=recorded.latest)
    )


async def maintenance_on(request: web.Request) -> web.Response:
    """Maintenance mode on: the leader proposes no automatic balance until it ends (failure
    recovery goes on). Its commands are of command-set version 3: refused (409, naming the
    node behind) until every voter speaks it."""
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, m.MaintenanceOnRequest)
    now = now_ms()
    until = None if body.for_s is None else now + round(body.for_s * 1000)
    cmd = MaintenanceOn(by=admin.scope, reason=body.reason, until_ms=until, now_ms=now)
    request_id = idempotency_key(request, admin.scope, "maintenance:on")
    return await _maintenance_reply(node, cmd, request_id)


async def maintenance_off(request: web.Request) -> web.Response:
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, m.MaintenanceOffRequest)
    reason = body.reason or "turned off by an operator"
    cmd = MaintenanceOff(by=admin.scope, reason=reason, since_ms=None, now_ms=now_ms())
    request_id = idempotency_key(request, admin.scope, "maintenance:off")
    return await _maintenance_reply(node, cmd, request_id)


async def _maintenance_reply(
    node: Writes, cmd: MaintenanceOn | MaintenanceOff, request_id: str
) -> web.Response:
    done = await node.submit(cmd, request_id)
    with node.read() as state:
        record = state.maintenance
    view = None if record is None else m.MaintenanceView(**dataclasses.asdict(record))
    return json_reply(m.MaintenanceResponse(maintenance=view, changed=done.changed))


async def admin_barrier(request: web.Request) -> web.Response:
    node = require_leader(request)
    request.app[ADMISSION_KEY].admit_admin(request.headers)
    fenced = await node.submit(Barrier(nonce=new_request_id()))
    return json_reply({"ok": True, "nonce": fenced.nonce})


ROUTES: tuple[Route, ...] = (
    Route(
        method="POST",
        path="/v1/admin/reassign",
        handler=reassign,
        summary="Plan and start migrations (balance or explicit moves)",
        request=m.ReassignRequest,
        response=m.ReassignResponse,
        status=202,
        leader_only=True,
        auth="admin",
        pipeline=True,
    ),
    Route(
        method="POST",
        path="/v1/admin/migrations/{migration_id}/abort",
        handler=abort_migration,
        summary="Abort a migration that has not handed off",
        response=m.AbortResponse,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="POST",
        path="/v1/admin/partitions/{p}/reset",
        handler=reset_partition,
        summary="Forget an ASSIGNING partition's checkpoints; its owner replays it from offset 0",
        response=m.ResetResponse,
        leader_only=True,
        auth="admin",
        pipeline=True,
    ),
    Route(
        method="GET",
        path="/v1/admin/backup",
        handler=backup,
        summary="The state at one applied index, after a barrier: a backup file",
        leader_only=True,
        auth="admin",
        binary=True,
    ),
    Route(
        method="POST",
        path="/v1/admin/backups",
        handler=record_backup,
        summary="Record a backup that `ripple backup` stored (command-set version 2)",
        request=m.RecordBackupRequest,
        response=m.RecordBackupResponse,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="POST",
        path="/v1/admin/maintenance/on",
        handler=maintenance_on,
        summary="Maintenance mode on: no automatic balance until it ends (command-set version 3)",
        request=m.MaintenanceOnRequest,
        response=m.MaintenanceResponse,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="POST",
        path="/v1/admin/maintenance/off",
        handler=maintenance_off,
        summary="Maintenance mode off: automatic balance resumes (command-set version 3)",
        request=m.MaintenanceOffRequest,
        response=m.MaintenanceResponse,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="POST",
        path="/v1/admin/barrier",
        handler=admin_barrier,
        summary="Commit a no-op command (tests, drills)",
        leader_only=True,
        auth="admin",
    ),
)
