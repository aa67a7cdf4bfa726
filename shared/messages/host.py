"""The host call: the leader asks a partition's owner to open it at an epoch.

POST /v1/partitions/{p}/host   HostRequest {epoch, checkpoint: {offset, uri, epoch} | null,
                               routing?: [counts]}
-> 200 HostReply {partition, epoch, offset}; 409 the worker holds a newer epoch,
   503 the checkpoint could not be loaded (the leader retries)
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.messages.common import (
    JsonObject,
    SentCheckpoint,
    epoch_field,
    fields_of,
    optional_routing,
    with_routing,
)

__all__ = ["HOST_ROUTE", "HostReply", "HostRequest"]

# The aiohttp route template; `{p}` is the partition.
HOST_ROUTE = "/v1/partitions/{p}/host"


@dataclass(frozen=True, slots=True, kw_only=True)
class HostRequest:
    """Open `partition` at `epoch`, from `checkpoint` or (None) by replaying from offset 0."""

    partition: int  # in the path, not the body
    epoch: int
    checkpoint: SentCheckpoint | None = None
    # Every routing generation's count (None: the worker's own, as before any rescale); a
    # checkpoint offset of generation g >= 1 needs it to read that generation's source log.
    routing: tuple[int, ...] | None = None

    @property
    def path(self) -> str:
        return HOST_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        ck = self.checkpoint
        body: JsonObject = {"epoch": self.epoch, "checkpoint": None if ck is None else ck.to_json()}
        return with_routing(body, self.routing)

    @classmethod
    def from_json(cls, partition: int, body: object) -> HostRequest:
        fields = fields_of(body)
        epoch = epoch_field(fields)
        ck = fields.get("checkpoint")
        return cls(
            partition=partition,
            epoch=epoch,
            checkpoint=None if ck is None else SentCheckpoint.from_json(ck),
            routing=optional_routing(fields),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HostReply:
    partition: int
    epoch: int
    offset: int  # the next source offset the partition will process

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "epoch": self.epoch, "offset": self.offset}
