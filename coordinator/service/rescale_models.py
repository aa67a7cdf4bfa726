"""The wire shapes of a rescale (docs/pipeline.md "Rescaling"): the admin request, the dry
run's answer and the rescale record `/v1/status` and the 202 of a started rescale carry.

Kept beside `coordinator/service/models.py` (which imports `RescaleView` for the status
answer) rather than in it; the same rules hold: requests are strict and refuse unknown
fields, and every number has a bound.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from coordinator.core.model import RescalePhase
from shared.routing import KEY_GROUPS

__all__ = ["RescaleDryRunResponse", "RescaleRequest", "RescaleView"]

# The phases of a rescale, as the API names them (the core's RescalePhase values).
RESCALE_PHASES = tuple(p.value for p in RescalePhase)


def _integral(value: object) -> object:
    """5.0 is the integer 5 (JSON Schema says so, and clients that hold numbers as doubles
    send it); a fraction, a bool or a string still fails the strict check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class RescaleRequest(BaseModel):
    """Rescale to `partitions` (1..KEY_GROUPS, not the current count); `dry_run`: only say
    what it would cost."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    partitions: Annotated[int, Field(ge=1, le=KEY_GROUPS), BeforeValidator(_integral)]
    dry_run: bool = False


class RescaleDryRunResponse(BaseModel):
    """What a rescale from `from` to `to` partitions would do, proposing nothing."""

    model_config = ConfigDict(frozen=True)

    from_: int = Field(serialization_alias="from")
    to: int
    generation: int  # the routing generation it would make
    moved_fraction: float  # share of keys whose partition number changes (0..1)
    feeders_max: int  # the most old partitions any new partition is built from
    checkpoints_read: int  # every old partition's cut checkpoint
    partitions_built: int  # every new partition's starting checkpoint


class RescaleView(BaseModel):
    """The newest rescale (kept after DONE until the next one starts)."""

    model_config = ConfigDict(frozen=True)

    generation: int  # the routing generation it makes
    partitions: int  # its partition count
    previous: int  # the count it replaces
    phase: Annotated[str, Field(description=" | ".join(RESCALE_PHASES))]
    cuts_done: int  # old partitions whose cut checkpoint is recorded (of `previous`)
    online: int  # new partitions ONLINE (of `partitions`; 0 before HOSTING)
    by: str
    started_at_ms: int
    updated_at_ms: int
