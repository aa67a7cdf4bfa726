"""The wire shapes of a pipeline's token routes (`coordinator/service/http/token_routes.py`).

Requests are strict and refuse unknown fields. A token's secret appears in exactly one
answer, the issue's; a list shows ids, roles and who issued them, never a hash.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coordinator.core.model import PIPELINE_TOKENS_MAX

__all__ = ["TokenIssueRequest", "TokenIssued", "TokenRevoked", "TokenView", "TokensResponse"]

Role = Literal["operate"]


class TokenIssueRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role


class TokenIssued(BaseModel):
    """The new token, whole: the only time its secret is shown."""

    model_config = ConfigDict(frozen=True)

    pipeline: str
    token_id: str
    role: Role
    token: str  # what the holder presents: Authorization: Bearer <token>


class TokenView(BaseModel):
    model_config = ConfigDict(frozen=True)

    token_id: str
    role: Role
    created_at_ms: int
    by: str


class TokensResponse(BaseModel):
    model_config = ConfigDict(frozen=True)

    pipeline: str
    tokens: list[TokenView] = Field(max_length=PIPELINE_TOKENS_MAX)


class TokenRevoked(BaseModel):
    """changed false: the token was not there (revoked already, or never issued)."""

    model_config = ConfigDict(frozen=True)

    pipeline: str
    token_id: str
    changed: bool
