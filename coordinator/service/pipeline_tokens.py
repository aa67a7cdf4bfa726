"""Tokens scoped to one pipeline: how they are made, and who they admit.

A pipeline token is `rpt_<token_id>_<hex secret>`. The leader makes one when an admin
issues it (`new_pipeline_token`), hands its text back once, and records in the pipeline's
replicated record only the id, the role and the secret's SHA-256 (IssueToken), so the log,
a snapshot or a backup holds nothing a caller could present. A 256-bit random secret needs
no slow hash. Invariant: a token admits its holder only to its role's routes of its one
pipeline (`admit_pipeline`; an operate token also produces, a produce token does nothing
else), and stops working on a node once that node has applied its revocation or the
pipeline's drop; the admin token admits everywhere.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.model import PipelineToken, TokenRole
from coordinator.service.auth import ADMIN, Admin, Admission, bearer, token_matches
from shared.errors import RequestError

__all__ = [
    "GRANTS",
    "PIPELINE_TOKEN_PREFIX",
    "PipelineHolder",
    "admit_pipeline",
    "new_pipeline_token",
]

PIPELINE_TOKEN_PREFIX = "rpt_"
PIPELINE_TOKEN_ID_BYTES = 6  # 12 hex digits: names a token among its pipeline's few
PIPELINE_TOKEN_SECRET_BYTES = 32

# A token's role -> the roles it acts in: operating a pipeline includes feeding it.
GRANTS: dict[TokenRole, frozenset[TokenRole]] = {
    TokenRole.OPERATE: frozenset({TokenRole.OPERATE, TokenRole.PRODUCE}),
    TokenRole.PRODUCE: frozenset({TokenRole.PRODUCE}),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineHolder:
    """The holder of a token scoped to one pipeline, by its token's role."""

    pipeline: str
    token_id: str
    role: TokenRole

    @property
    def scope(self) -> str:
        # What the record's `by` names and what keys the holder's Idempotency-Keys.
        return f"token {self.token_id}"


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_pipeline_token() -> tuple[str, str, str]:
    """A new token: (its id, its whole text for the holder, its secret's sha256)."""
    token_id = secrets.token_hex(PIPELINE_TOKEN_ID_BYTES)
    secret = secrets.token_hex(PIPELINE_TOKEN_SECRET_BYTES)
    return token_id, f"{PIPELINE_TOKEN_PREFIX}{token_id}_{secret}", _sha256(secret)


def _holder(
    pipeline: str, tokens: tuple[PipelineToken, ...], token: str, role: TokenRole
) -> PipelineHolder | None:
    if not token.startswith(PIPELINE_TOKEN_PREFIX):
        return None
    token_id, _, secret = token[len(PIPELINE_TOKEN_PREFIX) :].partition("_")
    for t in tokens:
        if (
            t.token_id == token_id
            and role in GRANTS[t.role]
            and hmac.compare_digest(_sha256(secret), t.sha256)
        ):
            return PipelineHolder(pipeline=pipeline, token_id=token_id, role=t.role)
    return None


def admit_pipeline(
    admission: Admission,
    headers: Mapping[str, str],
    pipeline: str,
    tokens: tuple[PipelineToken, ...],
    role: TokenRole,
) -> Admin | PipelineHolder:
    """The admin, or the holder of one of `pipeline`'s tokens (`tokens`, from its record)
    whose role grants `role`: 401 without a credential, 403 with any other."""
    header = headers.get("Authorization")
    if token_matches(admission.admin_token, header):
        return ADMIN
    token = bearer(header)
    if token is None:
        raise RequestError(
            "admin token or a token of this pipeline required (Authorization: Bearer ...)",
            code="unauthorized",
        )
    holder = _holder(pipeline, tokens, token, role)
    if holder is None:
        raise RequestError(f"this token may not {role.value} pipeline {pipeline}", code="forbidden")
    return holder
