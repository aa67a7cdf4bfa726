"""The warm call: a warm move's target loads the partition's checkpoint and follows the
source log read-only, so the hand-off pauses the partition for a step, not a replay.

    POST /v1/partitions/{p}/warm   WarmRequest {migration_id, checkpoint: {offset, uri, epoch}
                                   | null, routing?, hold_s?}
    -> 200 WarmReply {partition, loaded, offset, head}; 409 the worker hosts the partition,
       503 it cannot warm it up (the move goes cold)

The unwarm call: the move a warm copy was made for ended without a hand-off (aborted), so
the target drops the copy now instead of following the source log until it idles out.

    POST /v1/partitions/{p}/unwarm   UnwarmRequest {migration_id}
    -> 200 UnwarmReply {partition, dropped}; dropped is false when no copy of p for that
       migration was here (never made, idled out, taken by a host call, or another move's)
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.messages.common import (
    InvalidCallBody,
    JsonObject,
    SentCheckpoint,
    fields_of,
    is_int,
    optional_routing,
    with_routing,
)

__all__ = [
    "MIGRATION_ID_LEN_MAX",
    "UNWARM_ROUTE",
    "WARM_HOLD_S_MAX",
    "WARM_ROUTE",
    "UnwarmReply",
    "UnwarmRequest",
    "WarmReply",
    "WarmRequest",
]

WARM_ROUTE = "/v1/partitions/{p}/warm"
UNWARM_ROUTE = "/v1/partitions/{p}/unwarm"
MIGRATION_ID_LEN_MAX = 64
# The longest a warm call may ask the worker to hold its answer for the copy's next step.
WARM_HOLD_S_MAX = 10.0


def _migration_id(fields: dict[str, object]) -> str:
    mid = fields.get("migration_id")
    if not isinstance(mid, str) or not 1 <= len(mid) <= MIGRATION_ID_LEN_MAX:
        raise InvalidCallBody(
            f"migration_id must be a string of 1..{MIGRATION_ID_LEN_MAX} chars", "migration_id"
        )
    return mid


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmRequest:
    """Warm `partition` up for migration `migration_id`: load `checkpoint` (None: from offset
    0) and follow the source log, read-only, until hosted or idle; repeated, it answers how
    far the warm copy is."""

    partition: int  # in the path, not the body
    migration_id: str
    checkpoint: SentCheckpoint | None = None
    routing: tuple[int, ...] | None = None  # as HostRequest.routing
    # Once the copy is loaded, answer after its next micro-batch step (or after this long):
    # a release decided on that answer reaches the source while the target's batch in
    # flight reads past the source's last one. 0 (and a worker that predates it): at once.
    hold_s: float = 0.0

    @property
    def path(self) -> str:
        return WARM_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        ck = self.checkpoint
        body: JsonObject = {
            "migration_id": self.migration_id,
            "checkpoint": None if ck is None else ck.to_json(),
        }
        if self.hold_s > 0:
            body["hold_s"] = self.hold_s
        return with_routing(body, self.routing)

    @classmethod
    def from_json(cls, partition: int, body: object) -> WarmRequest:
        fields = fields_of(body)
        mid = _migration_id(fields)
        ck = fields.get("checkpoint")
        hold = fields.get("hold_s", 0.0)
        if (
            isinstance(hold, bool)
            or not isinstance(hold, int | float)
            or not 0 <= hold <= WARM_HOLD_S_MAX
        ):
            raise InvalidCallBody(
                f"hold_s must be a number of seconds from 0 to {WARM_HOLD_S_MAX:g}", "hold_s"
            )
        return cls(
            partition=partition,
            migration_id=mid,
            checkpoint=None if ck is None else SentCheckpoint.from_json(ck),
            routing=optional_routing(fields),
            hold_s=float(hold),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmReply:
    partition: int
    # The checkpoint is in and a micro-batch has replayed into the copy (or had nothing to).
    loaded: bool
    offset: int  # the next source offset the warm copy would read
    head: int  # the source log's end when the copy last listed it

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "loaded": self.loaded,
            "offset": self.offset,
            "head": self.head,
        }

    @staticmethod
    def from_json(body: object) -> WarmReply | None:
        """The reply's progress, or None when it is not well-formed (asked again later)."""
        if not isinstance(body, dict):
            return None
        p, loaded, offset, head = (body.get(k) for k in ("partition", "loaded", "offset", "head"))
        if is_int(p) and isinstance(loaded, bool) and is_int(offset) and is_int(head):
            return WarmReply(partition=p, loaded=loaded, offset=offset, head=head)
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnwarmRequest:
    """Drop the warm copy of `partition` made for migration `migration_id`, if it is here."""

    partition: int  # in the path, not the body
    migration_id: str

    @property
    def path(self) -> str:
        return UNWARM_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        return {"migration_id": self.migration_id}

    @classmethod
    def from_json(cls, partition: int, body: object) -> UnwarmRequest:
        return cls(partition=partition, migration_id=_migration_id(fields_of(body)))


@dataclass(frozen=True, slots=True, kw_only=True)
class UnwarmReply:
    partition: int
    dropped: bool  # a copy for that migration was here and is gone now

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "dropped": self.dropped}
