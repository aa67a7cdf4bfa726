"""The token routes of a pipeline: issue, list, revoke, verify (/v1/pipelines/{name}/tokens).

Owns how an admin's request becomes IssueToken or RevokeToken. Only the admin token may
issue, list or revoke; what a token then admits is `coordinator/service/pipeline_tokens.py`'s.
Verify answers a worker (its own worker token admits it) whether a token presented to it may
produce to the pipeline, read on the leader so a revocation counts as soon as it commits;
the worker holds no token hash.
An issue makes the secret here, on the leader, proposes only its hash, and answers the text
once: a lost answer is recovered by issuing another and revoking the one the list shows
unclaimed, so an issue takes no Idempotency-Key (a retry would need the secret again).
"""

from __future__ import annotations

from aiohttp import web

from coordinator.core.commands import IssueToken, RevokeToken
from coordinator.core.model import TOKEN_ID_LEN_MAX, PipelineName, TokenRole, valid_id
from coordinator.core.pipelines import pipeline_named
from coordinator.service.http.answers import json_reply
from coordinator.service.http.context import ADMISSION_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import idempotency_key, parse
from coordinator.service.http.views import read_view
from coordinator.service.pipeline_tokens import PipelineHolder, admit_pipeline, new_pipeline_token
from coordinator.service.stamps import now_ms
from coordinator.service.token_models import (
    TokenIssued,
    TokenIssueRequest,
    TokenRevoked,
    TokensResponse,
    TokenVerified,
    TokenVerifyRequest,
    TokenView,
)
from shared.errors import RequestError

__all__ = ["ROUTES"]


def _name(request: web.Request) -> PipelineName:
    name = request.match_info["name"]
    if not valid_id(name):
        raise RequestError("pipeline name must match [A-Za-z0-9._-]{1,64}", field="name")
    return PipelineName(name)


def _token_id(request: web.Request) -> str:
    token_id = request.match_info["token_id"]
    if not (valid_id(token_id) and len(token_id) <= TOKEN_ID_LEN_MAX):
        raise RequestError(
            f"token_id must be an id of at most {TOKEN_ID_LEN_MAX} chars", field="token_id"
        )
    return token_id


async def issue_token(request: web.Request) -> web.Response:
    node = require_leader(request)
    name = _name(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, TokenIssueRequest)
    token_id, text, sha256 = new_pipeline_token()
    role = TokenRole(body.role)
    await node.submit(
        IssueToken(
            name=name, token_id=token_id, role=role, sha256=sha256, by=admin.scope, now_ms=now_ms()
        )
    )
    issued = TokenIssued(pipeline=name, token_id=token_id, role=body.role, token=text)
    return json_reply(issued, status=201)


async def tokens(request: web.Request) -> web.Response:
    name = _name(request)
    request.app[ADMISSION_KEY].admit_admin(request.headers)
    view = await read_view(request)
    with view.node.read() as state:
        p = pipeline_named(state, name)
        if p is None:
            raise RequestError(f"no pipeline {name}", code="not_found", field="name")
        listed = [
            TokenView(
                token_id=t.token_id, role=t.role.value, created_at_ms=t.created_at_ms, by=t.by
            )
            for t in p.tokens
        ]
    return json_reply(TokensResponse(pipeline=name, tokens=listed))


async def revoke_token(request: web.Request) -> web.Response:
    node = require_leader(request)
    name = _name(request)
    token_id = _token_id(request)
    admin = request.app[ADMISSION_KEY].admit_admin(request.headers)
    done = await node.submit(
        RevokeToken(name=name, token_id=token_id, by=admin.scope, now_ms=now_ms()),
        idempotency_key(request, admin.scope, f"pipeline:revoke:{name}:{token_id}"),
    )
    return json_reply(TokenRevoked(pipeline=name, token_id=token_id, changed=done.changed))


async def verify_token(request: web.Request) -> web.Response:
    node = require_leader(request)
    name = _name(request)
    admission = request.app[ADMISSION_KEY]
    claims = admission.admit_worker(request.headers, now_ms())  # before the body is read
    body = await parse(request, TokenVerifyRequest)
    with node.read() as state:
        admission.current_incarnation(state, claims)
        p = state.pipelines.get(name)
        tokens = () if p is None else p.tokens
    presented = {"Authorization": f"Bearer {body.token}"}
    who = admit_pipeline(admission, presented, name, tokens, TokenRole.PRODUCE)
    if isinstance(who, PipelineHolder):
        verified = TokenVerified(pipeline=name, role=who.role.value, token_id=who.token_id)
    else:
        verified = TokenVerified(pipeline=name, role="admin", token_id=None)
    return json_reply(verified)


ROUTES: tuple[Route, ...] = (
    Route(
        method="POST",
        path="/v1/pipelines/{name}/tokens",
        handler=issue_token,
        summary=(
            "Issue a token scoped to this pipeline (its secret is shown once; version 6, "
            "the produce role version 7)"
        ),
        request=TokenIssueRequest,
        response=TokenIssued,
        status=201,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="GET",
        path="/v1/pipelines/{name}/tokens",
        handler=tokens,
        summary="A pipeline's tokens: ids, roles, who issued them (never a secret)",
        response=TokensResponse,
        auth="admin",
    ),
    Route(
        method="DELETE",
        path="/v1/pipelines/{name}/tokens/{token_id}",
        handler=revoke_token,
        summary="Revoke a pipeline's token",
        response=TokenRevoked,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="POST",
        path="/v1/pipelines/{name}/tokens/verify",
        handler=verify_token,
        summary="Worker: may a token presented to it produce to this pipeline (403 if not)",
        request=TokenVerifyRequest,
        response=TokenVerified,
        leader_only=True,
        auth="worker",
    ),
)
