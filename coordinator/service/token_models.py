"""The wire shapes of a pipeline's token routes (`coordinator/service/http/token_routes.py`).

Requests are strict and refuse unknown fields. A token's secret appears in exactly one
answer, the issue's; a list shows ids, roles and who issued them, never a hash.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coordinator.core.model import PIPELINE_TOKENS_MAX

__all__ = [
    "TokenIssueRequest",
    "TokenIssued",
    "TokenRevoked",
    "TokenVerified",
    "TokenVerifyRequest",
    "TokenView",
    "TokensResponse",
]

# A presented token's text: `rpt_` + 12 hex digits + `_` + 64 hex digits, or the admin
# token; anything longer is nobody's.
PRESENTED_TOKEN_CHARS_MAX = 1024

Role = Literal["operate", "produce"]


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


class TokenVerifyRequest(BaseModel):
    """A worker asks what a token presented to it may do to this pipeline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(min_length=1, max_length=PRESENTED_TOKEN_CHARS_MAX)


class TokenVerified(BaseModel):
    """The token may produce to the pipeline: as the admin (token_id None) or as the holder
    of token `token_id` in `role`. One that may not is a 403, never this."""

    model_config = ConfigDict(frozen=True)

    pipeline: str
    role: Literal["admin", "operate", "produce"]
    token_id: str | None
