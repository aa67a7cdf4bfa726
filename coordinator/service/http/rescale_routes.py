"""The operator's rescale route, and the rescale record every read shows.

`POST /v1/admin/rescale` is leader-only and needs the admin token, checked before the body
is read. A dry run reads the routing generations under the apply lock, computes the preview
outside it (`coordinator/service/rescale_preview.py`; pure, it proposes nothing) and answers
200; otherwise `StartRescale` is proposed and the 202 carries the rescale as the state now
records it. Either way a body that fails its model is refused before anything is read or
proposed (docs/pipeline.md "Rescaling" has the lifecycle the leader then drives).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from coordinator.core.commands import StartRescale
from coordinator.core.model import DEFAULT_PIPELINE, PartitionStatus, RescalePhase
from coordinator.core.state import ClusterState
from coordinator.service.http.answers import json_reply
from coordinator.service.http.context import ADMISSION_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import idempotency_key, parse
from coordinator.service.rescale_models import RescaleDryRunResponse, RescaleRequest, RescaleView
from coordinator.service.rescale_preview import RescalePreview, preview
from coordinator.service.stamps import now_ms
from shared.errors import RequestError

__all__ = ["ROUTES", "dry_run_answer", "rescale_view"]

# Phases in which the partition table is the new generation's (its ONLINE count is progress).
_NEW_TABLE = (RescalePhase.HOSTING, RescalePhase.DONE)


def rescale_view(state: ClusterState) -> RescaleView | None:
    """The newest rescale as the API shows it (None: the cluster never rescaled)."""
    r = state.rescale
    if r is None:
        return None
    online = 0
    if r.phase in _NEW_TABLE:
        online = sum(
            1 for p in state.partitions.of(DEFAULT_PIPELINE) if p.status is PartitionStatus.ONLINE
        )
    return RescaleView(
        generation=r.generation,
        partitions=r.partitions,
        previous=r.previous,
        phase=r.phase.value,
        cuts_done=sum(1 for c in r.cuts if c is not None),
        online=online,
        by=r.by,
        started_at_ms=r.started_at_ms,
        updated_at_ms=r.updated_at_ms,
    )


def dry_run_answer(shown: RescalePreview) -> RescaleDryRunResponse:
    """A dry run's answer, `default`'s or a recorded pipeline's."""
    return RescaleDryRunResponse(
        from_=shown.previous,
        to=shown.partitions,
        generation=shown.generation,
        moved_fraction=shown.moved_fraction,
        feeders_max=shown.feeders_max,
        checkpoints_read=shown.checkpoints_read,
        partitions_built=shown.partitions_built,
    )


async def rescale(request: web.Request) -> web.Response:
    node = require_leader(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, RescaleRequest)
    if body.dry_run:
        with node.read() as state:
            routing = state.routing
            current = state.rescale
        if current is not None and current.phase is not RescalePhase.DONE:
            raise RequestError(
                f"a rescale to generation {current.generation} is in flight "
                f"({current.phase.value})",
                code="rescale_in_flight",
            )
        # Up to a few hundred ms for a large generation 0: off the event loop.
        shown = await asyncio.to_thread(preview, routing, body.partitions)
        return json_reply(dry_run_answer(shown))
    await node.submit(
        StartRescale(partitions=body.partitions, by=admin.scope, now_ms=now_ms()),
        idempotency_key(request, admin.scope, f"rescale:{body.partitions}"),
    )
    with node.read() as state:
        view = rescale_view(state)
    assert view is not None  # StartRescale committed: the state records a rescale
    return json_reply(view, status=202)


ROUTES: tuple[Route, ...] = (
    Route(
        method="POST",
        path="/v1/admin/rescale",
        handler=rescale,
        summary="Change the partition count (command-set version 4); dry_run: its cost only",
        request=RescaleRequest,
        response=RescaleView,
        status=202,
        leader_only=True,
        auth="admin",
        also=((200, RescaleDryRunResponse, "A dry run: what it would do; nothing changed"),),
    ),
)
