"""The checkpoint call: the leader asks a worker to checkpoint every open partition now;
the worker reports them on its own request (`POST /v1/checkpoints`).

    POST /v1/checkpoint   {} -> 202 {"scheduled": true}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shared.messages.common import JsonObject

__all__ = ["CHECKPOINT_ROUTE", "CheckpointReply", "CheckpointRequest"]

CHECKPOINT_ROUTE = "/v1/checkpoint"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRequest:
    """Checkpoint every open partition now and report them; the body is empty (and a
    worker does not read it)."""

    path: ClassVar[str] = CHECKPOINT_ROUTE

    def to_json(self) -> JsonObject:
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointReply:
    scheduled: bool = True

    def to_json(self) -> JsonObject:
        return {"scheduled": self.scheduled}
