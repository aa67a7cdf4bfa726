"""The pipeline routes under /v1/pipelines: create, list, describe, pause, resume, drop,
rescale and update (a spec change, at the same count or another).

Owns how an operator's request becomes a pipeline command. Writes are leader-only (a
follower answers 307) and read top-down: parse the path, admit the caller (`admit`, the one
place that decides who may act on which pipeline), read the body, check it, propose, reply.
A create's or an update's spec is parsed and checked by `coordinator/service/spec_check.py`
in a child process before anything is proposed, so a bad spec is a 400 naming the field and
changes nothing; an update must also keep the key column. Each write is deduplicated by its
Idempotency-Key, scoped to the caller and the command. Reads are any node's
(`?consistent=true`: the leader's after a barrier) and show `default` first
(`coordinator/core/pipelines.py`). What the leader does after a create's or a drop's commit
point is `coordinator/service/pipeline_duty.py`'s; a rescale's or an update's is its start
only (StartPipelineRescale), whose later steps the leader drives.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace

from aiohttp import web

from coordinator.core import pools
from coordinator.core.commands import (
    CreatePipeline,
    DropPipeline,
    PausePipeline,
    PipelineResult,
    ResumePipeline,
    StartPipelineRescale,
)
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    DEFAULT_PIPELINE_SETTINGS,
    SPEC_TEXT_BYTES_MAX,
    Label,
    PartitionStatus,
    Pipeline,
    PipelineName,
    PipelineRescale,
    PipelineSettings,
    TokenRole,
    valid_id,
)
from coordinator.core.pipeline_rescale import in_flight
from coordinator.core.pipelines import pipeline_named, pipelines_view
from coordinator.service.auth import Admin
from coordinator.service.http.answers import json_reply
from coordinator.service.http.context import ADMISSION_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import idempotency_key, parse, query_bool
from coordinator.service.http.rescale_routes import dry_run_answer
from coordinator.service.http.views import ReadView, read_view
from coordinator.service.pipeline_models import (
    PipelineChange,
    PipelineCreateRequest,
    PipelineDescription,
    PipelineGenerationView,
    PipelineRescaleRequest,
    PipelineRescaleView,
    PipelineSettingsBody,
    PipelineSettingsView,
    PipelinesResponse,
    PipelineUpdateRequest,
    PipelineView,
)
from coordinator.service.pipeline_tokens import PipelineHolder, admit_pipeline
from coordinator.service.rescale_models import RescaleDryRunResponse
from coordinator.service.rescale_preview import preview
from coordinator.service.spec_check import SpecChecker, key_of, window_of
from coordinator.service.stamps import now_ms
from shared.errors import RequestError

__all__ = ["ROUTES", "SPEC_CHECKER_KEY", "admit"]

# The app's one spec checker: its bound on checks at once holds across requests.
SPEC_CHECKER_KEY = web.AppKey("spec_checker", SpecChecker)


def admit(request: web.Request, name: PipelineName | None) -> Admin | PipelineHolder:
    """Who may change pipeline `name`: the cluster's admin token, or a token of that
    pipeline in the operate role (read from its record on this node, the leader); only the
    admin may create one (`name` None)."""
    admission = request.app[ADMISSION_KEY]
    if name is None:
        return admission.admit_admin(request.headers)
    with require_leader(request).read() as state:
        p = state.pipelines.get(name)
        tokens = () if p is None else p.tokens
    return admit_pipeline(admission, request.headers, name, tokens, TokenRole.OPERATE)


def _path_name(request: web.Request) -> PipelineName:
    name = request.match_info["name"]
    if not valid_id(name):
        raise RequestError("pipeline name must match [A-Za-z0-9._-]{1,64}", field="name")
    return PipelineName(name)


def _settings(body: PipelineSettingsBody) -> PipelineSettings:
    """The settings asked for, each field left out at the worker's default."""
    asked = {k: v for k, v in body.model_dump().items() if v is not None}
    return replace(DEFAULT_PIPELINE_SETTINGS, **asked)


def _rescale_view(r: PipelineRescale | None) -> PipelineRescaleView | None:
    if r is None:
        return None
    return PipelineRescaleView(
        generation=r.generation,
        partitions=r.partitions,
        previous=r.previous,
        first_slot=r.first_slot,
        phase=r.phase.value,
        spec_version=r.spec_version,
        spec_sha256=r.spec_sha256,
        spec_text=r.spec_text or None,
        cuts_done=r.cuts_done(),
        base_epoch=r.base_epoch,
        by=r.by,
        started_at_ms=r.started_at_ms,
        updated_at_ms=r.updated_at_ms,
    )


def _view(p: Pipeline) -> PipelineView:
    return PipelineView(
        name=p.name,
        incarnation=p.incarnation,
        state=p.state.value,
        spec_version=p.spec_version,
        partitions=p.partitions,
        first_slot=p.first_slot,
        routing_generation=p.routing_generation,
        pool=p.pool_labels(),
        purge=p.purge,
        past=[
            PipelineGenerationView(
                first_slot=g.first_slot,
                partitions=g.partitions,
                routing_generation=g.routing_generation,
            )
            for g in p.past
        ],
        rescale=_rescale_view(p.rescale),
        created_at_ms=p.created_at_ms,
        updated_at_ms=p.updated_at_ms,
        by=p.by,
    )


def _change(r: PipelineResult) -> PipelineChange:
    return PipelineChange(
        name=r.name,
        incarnation=r.incarnation,
        state="gone" if r.state is None else r.state.value,
        spec_version=r.spec_version,
        changed=r.changed,
    )


async def create_pipeline(request: web.Request) -> web.Response:
    node = require_leader(request)
    admin = admit(request, None)
    body = await parse(request, PipelineCreateRequest)
    text = body.spec_text.encode()
    if len(text) > SPEC_TEXT_BYTES_MAX:
        raise RequestError(f"spec_text is over {SPEC_TEXT_BYTES_MAX} bytes", field="spec_text")
    await request.app[SPEC_CHECKER_KEY].check(body.spec_text)
    sha256 = hashlib.sha256(text).hexdigest()
    done = await node.submit(
        CreatePipeline(
            name=PipelineName(body.name),
            spec_text=body.spec_text,
            spec_sha256=sha256,
            partitions=body.partitions or node.config.total_partitions,
            pool=tuple(Label(key=k, value=v) for k, v in sorted(body.pool.items())),
            settings=_settings(body.settings),
            by=admin.scope,
            now_ms=now_ms(),
        ),
        idempotency_key(request, admin.scope, f"pipeline:create:{body.name}:{sha256}"),
    )
    return json_reply(_change(done), status=202)


async def pipelines(request: web.Request) -> web.Response:
    view = await read_view(request)
    with view.node.read() as state:
        body = PipelinesResponse(
            **view.envelope(state), pipelines=[_view(p) for p in pipelines_view(state)]
        )
    return json_reply(body)


async def pipeline(request: web.Request) -> web.Response:
    name = _path_name(request)
    return json_reply(_described(await read_view(request), name))


def _described(view: ReadView, name: PipelineName) -> PipelineDescription:
    with view.node.read() as state:
        p = pipeline_named(state, name)
        if p is None:
            raise RequestError(f"no pipeline {name}", code="not_found", field="name")
        s = p.settings
        counts = {x.value: 0 for x in PartitionStatus}
        for part in state.partitions.of(p.name):
            counts[part.status.value] += 1
        return PipelineDescription(
            partition_states=counts,
            unplaceable=pools.unplaceable(state, p, state.active_workers()),
            **view.envelope(state),
            **_view(p).model_dump(),
            spec_sha256=p.spec_sha256,
            spec_text=p.spec_text,
            settings=PipelineSettingsView(
                batch_interval_ms=s.batch_interval_ms,
                checkpoint_interval_ms=s.checkpoint_interval_ms,
                max_keys_per_partition=s.max_keys_per_partition,
                retention_ms=s.retention_ms,
            ),
        )


async def rescale_pipeline(request: web.Request) -> web.Response:
    require_leader(request)
    name = _path_name(request)
    admin = admit(request, name)
    body = await parse(request, PipelineRescaleRequest)
    if body.dry_run:
        return await _dry_run(request, name, body.partitions)
    p = _recorded(request, name)
    return await _start_rescale(request, p, admin.scope, body.partitions, "", "")


async def _dry_run(request: web.Request, name: PipelineName, partitions: int) -> web.Response:
    """What rescaling `name` to `partitions` would cost, from its generations' counts (as
    `/v1/admin/rescale`'s dry run does for `default`); proposes nothing."""
    p = _recorded(request, name)
    if in_flight(p):
        assert p.rescale is not None
        raise RequestError(
            f"pipeline {name}'s rescale to generation {p.rescale.generation} is in flight "
            f"({p.rescale.phase.value})",
            code="rescale_in_flight",
        )
    # One count per routing generation, oldest first: the past ones, then the current one.
    counts = [g.partitions for g in sorted(p.past, key=lambda g: g.routing_generation)]
    counts.append(p.partitions)
    # Up to a few hundred ms for a large generation 0: off the event loop.
    shown = await asyncio.to_thread(preview, counts, partitions)
    return json_reply(dry_run_answer(shown))


async def update_pipeline(request: web.Request) -> web.Response:
    require_leader(request)
    name = _path_name(request)
    admin = admit(request, name)
    body = await parse(request, PipelineUpdateRequest)
    text = body.spec.encode()
    if len(text) > SPEC_TEXT_BYTES_MAX:
        raise RequestError(f"spec is over {SPEC_TEXT_BYTES_MAX} bytes", field="spec")
    current = _recorded(request, name)
    summary = await request.app[SPEC_CHECKER_KEY].check(body.spec, field="spec")
    # Producers route by the key as written, and every checkpoint is keyed by it: a spec
    # change that changed the key column would split one key's state across partitions.
    kept = key_of(current.spec_text)
    if kept is not None and kept != (summary.key, summary.key_type):
        raise RequestError(
            f"spec.schema.key: an update keeps the key column {kept[0]} {kept[1]} "
            f"(this spec's is {summary.key} {summary.key_type})",
            field="spec.schema.key",
        )
    partitions = current.partitions if body.partitions is None else body.partitions
    sha256 = hashlib.sha256(text).hexdigest()
    # The incarnation whose key was checked: a namesake made since is refused by apply.
    return await _start_rescale(request, current, admin.scope, partitions, body.spec, sha256)


def _recorded(request: web.Request, name: PipelineName) -> Pipeline:
    """Recorded pipeline `name` as the leader holds it (`default` has no spec to change)."""
    with require_leader(request).read() as state:
        p = state.pipelines.get(name)
    if p is not None:
        return p
    if name == DEFAULT_PIPELINE:
        raise RequestError(
            "default is the cluster's own pipeline: rescale it with /v1/admin/rescale",
            field="name",
        )
    raise RequestError(f"no pipeline {name}", code="not_found", field="name")


async def _start_rescale(
    request: web.Request, p: Pipeline, by: str, partitions: int, spec: str, sha256: str
) -> web.Response:
    """Propose StartPipelineRescale for incarnation `p` (apply refuses a paused, dropping or
    busy pipeline, or one of another incarnation) and answer 202 with the pipeline as the
    state now records it."""
    node = require_leader(request)
    name = p.name
    if spec and window_of(spec) != window_of(p.spec_text):
        # Open windows and their watermark mean nothing under another window (docs/pipeline.md
        # "Windows"): refused before anything is proposed, so the pipeline runs on unchanged.
        raise RequestError(
            f"pipeline {name}: a spec update keeps the [window] table as it is (adding, "
            "removing or changing a window makes a new pipeline)",
            code="conflict",
            field="spec",
        )
    await node.submit(
        StartPipelineRescale(
            name=name,
            incarnation=p.incarnation,
            partitions=partitions,
            spec_text=spec,
            spec_sha256=sha256,
            by=by,
            now_ms=now_ms(),
        ),
        idempotency_key(
            request, by, f"pipeline:rescale:{name}:{p.incarnation}:{partitions}:{sha256}"
        ),
    )
    # The leader's state after the commit: not stale.
    view = ReadView(node=node, stale=False, applied_index=node.log.status().applied_index)
    return json_reply(_described(view, name), status=202)


async def pause_pipeline(request: web.Request) -> web.Response:
    return await _switch(request, PausePipeline, "pause")


async def resume_pipeline(request: web.Request) -> web.Response:
    return await _switch(request, ResumePipeline, "resume")


async def _switch(
    request: web.Request, command: type[PausePipeline | ResumePipeline], verb: str
) -> web.Response:
    node = require_leader(request)
    name = _path_name(request)
    admin = admit(request, name)
    done = await node.submit(
        command(name=name, by=admin.scope, now_ms=now_ms()),
        idempotency_key(request, admin.scope, f"pipeline:{verb}:{name}"),
    )
    return json_reply(_change(done))


async def drop_pipeline(request: web.Request) -> web.Response:
    node = require_leader(request)
    name = _path_name(request)
    admin = admit(request, name)
    purge = query_bool(request, "purge")
    done = await node.submit(
        DropPipeline(name=name, purge=purge, by=admin.scope, now_ms=now_ms()),
        idempotency_key(request, admin.scope, f"pipeline:drop:{name}:{purge}"),
    )
    return json_reply(_change(done), status=202)


ROUTES: tuple[Route, ...] = (
    Route(
        method="POST",
        path="/v1/pipelines",
        handler=create_pipeline,
        summary="Create a pipeline from its spec (checked first; command-set version 5)",
        request=PipelineCreateRequest,
        response=PipelineChange,
        status=202,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="GET",
        path="/v1/pipelines",
        handler=pipelines,
        summary="Every pipeline and its state, `default` first",
        response=PipelinesResponse,
    ),
    Route(
        method="GET",
        path="/v1/pipelines/{name}",
        handler=pipeline,
        summary="One pipeline: its record, settings, pool and spec",
        response=PipelineDescription,
    ),
    Route(
        method="DELETE",
        path="/v1/pipelines/{name}",
        handler=drop_pipeline,
        summary="Drop a pipeline (purge: its objects in the store too)",
        response=PipelineChange,
        status=202,
        leader_only=True,
        auth="admin-or-pipeline",
        flags=("purge",),
    ),
    Route(
        method="POST",
        path="/v1/pipelines/{name}/rescale",
        handler=rescale_pipeline,
        summary="Rescale a pipeline onto fresh partition numbers (command-set version 7); "
        "dry_run: its cost only",
        request=PipelineRescaleRequest,
        response=PipelineDescription,
        status=202,
        leader_only=True,
        auth="admin-or-pipeline",
        also=((200, RescaleDryRunResponse, "A dry run: what it would do; nothing changed"),),
    ),
    Route(
        method="POST",
        path="/v1/pipelines/{name}/update",
        handler=update_pipeline,
        summary="Change a pipeline's spec from a cut, at the same count or another (checked "
        "first; command-set version 7)",
        request=PipelineUpdateRequest,
        response=PipelineDescription,
        status=202,
        leader_only=True,
        auth="admin-or-pipeline",
    ),
    Route(
        method="POST",
        path="/v1/pipelines/{name}/pause",
        handler=pause_pipeline,
        summary="Pause a pipeline: processing stops, offsets kept",
        response=PipelineChange,
        leader_only=True,
        auth="admin-or-pipeline",
    ),
    Route(
        method="POST",
        path="/v1/pipelines/{name}/resume",
        handler=resume_pipeline,
        summary="Resume a paused pipeline",
        response=PipelineChange,
        leader_only=True,
        auth="admin-or-pipeline",
    ),
)
