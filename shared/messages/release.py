"""The release call: a migration's source stops a partition and hands over its final
checkpoint.

    POST /v1/partitions/{p}/release   ReleaseRequest {epoch, migration_id?}
    -> 200 ReleaseReply {partition, epoch, checkpoint: {offset, uri}}; 409 the worker does
       not hold that epoch (the hand-off goes on without it)
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.messages.common import InvalidCallBody, JsonObject, epoch_field, fields_of, is_int

__all__ = ["RELEASE_ROUTE", "ReleaseReply", "ReleaseRequest", "ReleasedCheckpoint"]

RELEASE_ROUTE = "/v1/partitions/{p}/release"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRequest:
    """Stop `partition` at `epoch` and hand over a final checkpoint."""

    partition: int  # in the path, not the body
    epoch: int
    migration_id: str | None = None  # named in the worker's log; the leader always sends it

    @property
    def path(self) -> str:
        return RELEASE_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        body: JsonObject = {"epoch": self.epoch}
        if self.migration_id is not None:
            body["migration_id"] = self.migration_id
        return body

    @classmethod
    def from_json(cls, partition: int, body: object) -> ReleaseRequest:
        fields = fields_of(body)
        epoch = epoch_field(fields)
        migration_id = fields.get("migration_id")
        if migration_id is not None and not isinstance(migration_id, str):
            raise InvalidCallBody("migration_id must be a string", "migration_id")
        return cls(partition=partition, epoch=epoch, migration_id=migration_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasedCheckpoint:
    """The final checkpoint a release hands over, written at the released epoch."""

    offset: int
    uri: str

    def to_json(self) -> JsonObject:
        return {"offset": self.offset, "uri": self.uri}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseReply:
    partition: int
    epoch: int
    checkpoint: ReleasedCheckpoint

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "epoch": self.epoch,
            "checkpoint": self.checkpoint.to_json(),
        }

    @staticmethod
    def checkpoint_of(body: object) -> ReleasedCheckpoint | None:
        """The final checkpoint a 200 release reply names, or None when it names none
        well-formed: the hand-off then keeps the last accepted checkpoint and the new owner
        replays the source from there, which loses nothing."""
        ck = body.get("checkpoint") if isinstance(body, dict) else None
        if isinstance(ck, dict):
            offset, uri = ck.get("offset"), ck.get("uri")
            if is_int(offset) and isinstance(uri, str):
                return ReleasedCheckpoint(offset=offset, uri=uri)
        return None
