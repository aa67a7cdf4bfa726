"""The wire shapes of the pipeline routes (`coordinator/service/http/pipeline_routes.py`):
the create request, one pipeline as a list shows it, one as describe shows it.

Kept beside `coordinator/service/models.py` as the rescale's shapes are; the same rules hold:
requests are strict and refuse unknown fields, and every string, list and number has its
bound (the core's, from `coordinator/core/model.py`, so the API refuses what apply would).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from coordinator.core.model import (
    BATCH_INTERVAL_MS_MAX,
    BATCH_INTERVAL_MS_MIN,
    CHECKPOINT_INTERVAL_MS_MAX,
    CHECKPOINT_INTERVAL_MS_MIN,
    KEYS_PER_PARTITION_MAX,
    PIPELINE_PARTITIONS_MAX,
    POOL_LABELS_MAX,
    RESCALE_PARTITIONS_MAX,
    RETENTION_MS_MAX,
    SPEC_TEXT_BYTES_MAX,
    PipelineState,
)
from shared.messages.session import ID_REGEX

__all__ = [
    "PIPELINE_STATES",
    "PipelineChange",
    "PipelineCreateRequest",
    "PipelineDescription",
    "PipelineGenerationView",
    "PipelineRescaleRequest",
    "PipelineRescaleView",
    "PipelineSettingsBody",
    "PipelineSettingsView",
    "PipelineUpdateRequest",
    "PipelineView",
    "PipelinesResponse",
]

# The states a pipeline shows, as the API names them (the core's PipelineState values).
PIPELINE_STATES = tuple(s.value for s in PipelineState)
# The one pattern of every id of the core, a pipeline's name and its pool labels' included.
_Id = Annotated[str, Field(pattern=ID_REGEX)]


def _integral(value: object) -> object:
    """5.0 is the integer 5 (JSON Schema says so); a fraction, bool or string still fails."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_BatchMs = Annotated[
    int, Field(ge=BATCH_INTERVAL_MS_MIN, le=BATCH_INTERVAL_MS_MAX), BeforeValidator(_integral)
]
_CheckpointMs = Annotated[
    int,
    Field(ge=CHECKPOINT_INTERVAL_MS_MIN, le=CHECKPOINT_INTERVAL_MS_MAX),
    BeforeValidator(_integral),
]
_Keys = Annotated[int, Field(ge=1, le=KEYS_PER_PARTITION_MAX), BeforeValidator(_integral)]
_RetentionMs = Annotated[int, Field(ge=0, le=RETENTION_MS_MAX), BeforeValidator(_integral)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PipelineSettingsBody(_Strict):
    """Per-pipeline settings; a field left out keeps the worker's default."""

    batch_interval_ms: _BatchMs | None = None
    checkpoint_interval_ms: _CheckpointMs | None = None
    max_keys_per_partition: _Keys | None = None
    retention_ms: _RetentionMs | None = None


class PipelineCreateRequest(_Strict):
    """Create pipeline `name` from `spec_text` (the owner's TOML, transform embedded; its
    UTF-8 is at most the spec format's bound, which the handler checks in bytes)."""

    name: _Id
    spec_text: Annotated[str, Field(min_length=1, max_length=SPEC_TEXT_BYTES_MAX)]
    # Left out: the cluster file's `total_partitions`, as the cluster's own pipeline began.
    partitions: (
        Annotated[int, Field(ge=1, le=PIPELINE_PARTITIONS_MAX), BeforeValidator(_integral)] | None
    ) = None
    # The worker pool: a worker is in it when it carries every label; none is every worker.
    pool: Annotated[dict[_Id, _Id], Field(max_length=POOL_LABELS_MAX)] = Field(default_factory=dict)
    settings: PipelineSettingsBody = Field(default_factory=PipelineSettingsBody)


_RescalePartitions = Annotated[
    int, Field(ge=1, le=RESCALE_PARTITIONS_MAX), BeforeValidator(_integral)
]


class PipelineRescaleRequest(_Strict):
    """Rescale a recorded pipeline to `partitions` on fresh partition numbers; `dry_run`: only
    say what it would cost."""

    partitions: _RescalePartitions
    dry_run: bool = False


class PipelineUpdateRequest(_Strict):
    """Update a recorded pipeline's spec to `spec` (the owner's TOML, checked as a create's
    is and keeping the key column), at `partitions` (left out: the count it has)."""

    spec: Annotated[str, Field(min_length=1, max_length=SPEC_TEXT_BYTES_MAX)]
    partitions: _RescalePartitions | None = None


class PipelineGenerationView(BaseModel):
    """The partition numbers one earlier routing generation was carried under:
    first_slot .. first_slot + partitions - 1."""

    model_config = ConfigDict(frozen=True)

    first_slot: int
    partitions: int
    routing_generation: int


class PipelineRescaleView(BaseModel):
    """A recorded pipeline's newest rescale or spec update (kept after `done`)."""

    model_config = ConfigDict(frozen=True)

    generation: int  # the routing generation it makes
    partitions: int  # its partition count
    previous: int  # the count it replaces
    # The first of the fresh numbers reserved for the new generation at its start.
    first_slot: int
    phase: str  # cutting | moving | hosting | done
    spec_version: int
    spec_sha256: str
    # The new spec's text while an update is under way and the record carries it; else null.
    spec_text: str | None
    cuts_done: int  # old partitions whose cut checkpoint is recorded (of `previous`)
    base_epoch: int | None  # set by the last cut: where the new generation's epochs start
    by: str
    started_at_ms: int
    updated_at_ms: int


class PipelineView(BaseModel):
    """One pipeline as the list shows it (`default` included: incarnation 0, spec version 0,
    no spec text)."""

    model_config = ConfigDict(frozen=True)

    name: str
    incarnation: int
    state: str  # one of PIPELINE_STATES
    spec_version: int
    partitions: int
    # The number its partition 0 is carried under in the cluster's partition table and the
    # store (its partition p is first_slot + p); 0 for `default`, and until it is set up.
    first_slot: int
    routing_generation: int
    pool: dict[str, str]
    purge: bool  # dropping: its objects go too
    # Each earlier routing generation's numbers, oldest first (a purge deletes them too).
    past: list[PipelineGenerationView]
    rescale: PipelineRescaleView | None
    created_at_ms: int
    updated_at_ms: int
    by: str


class PipelineChange(BaseModel):
    """Where a pipeline is after a write: its state (or `gone`) and whether the write
    changed it (false: it already was as asked, or the request was a repeat)."""

    model_config = ConfigDict(frozen=True)

    name: str
    incarnation: int
    state: str  # one of PIPELINE_STATES, or "gone"
    spec_version: int
    changed: bool


class PipelineSettingsView(BaseModel):
    model_config = ConfigDict(frozen=True)

    batch_interval_ms: int
    checkpoint_interval_ms: int
    max_keys_per_partition: int
    retention_ms: int


class PipelineDescription(PipelineView):
    """One pipeline whole: its record, its settings and its spec (text and sha256)."""

    generation: int
    applied_index: int
    stale: bool
    spec_sha256: str
    spec_text: str
    settings: PipelineSettingsView
    # Its partitions by status (unassigned, assigning, online): none until it is set up.
    partition_states: dict[str, int]
    # Why its unassigned partitions have nowhere to go among the ACTIVE workers the state
    # holds (coordinator/core/pools.py), or "".
    unplaceable: str


class PipelinesResponse(BaseModel):
    model_config = ConfigDict(frozen=True)

    generation: int
    applied_index: int
    stale: bool
    pipelines: list[PipelineView]
