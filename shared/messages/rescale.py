"""The rescale's calls (docs/pipeline.md "Rescaling"): cut ends an old partition's
generation at a seal, build makes the next generation's starting checkpoints from the cuts.

    POST /v1/partitions/{p}/cut   CutRequest {epoch, generation, partitions, routing: [counts
                                  of generations 0..g]}
    -> 200 CutReply {partition, epoch, offset, done, uri | null}; 409 the worker does not
       host p at that epoch; repeated until done
    POST /v1/rescale/build        BuildRequest {generation, routing, epoch, cuts: [{partition,
                                  offset, uri, epoch}]}
    -> 200 BuildReply {generation, done, checkpoints: [{partition, offset, uri}]}; 409
       another generation's build is running; repeated until done
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shared.messages.common import (
    GENERATION0_PARTITIONS_MAX,
    ROUTING_GENERATIONS_MAX,
    InvalidCallBody,
    JsonObject,
    epoch_field,
    fields_of,
    is_epoch,
    is_int,
    is_offset,
    routing_field,
)
from shared.routing import KEY_GROUPS

__all__ = [
    "BUILD_ROUTE",
    "CUTS_MAX",
    "CUT_ROUTE",
    "BuildReply",
    "BuildRequest",
    "BuiltCheckpoint",
    "CutCheckpoint",
    "CutReply",
    "CutRequest",
]

CUT_ROUTE = "/v1/partitions/{p}/cut"
BUILD_ROUTE = "/v1/rescale/build"
# Cut checkpoints one build reads: one per old partition.
CUTS_MAX = GENERATION0_PARTITIONS_MAX


@dataclass(frozen=True, slots=True, kw_only=True)
class CutRequest:
    """Seal `partition` of `generation` for the next one (`partitions` of them), process up
    to the seal and checkpoint exactly there; repeated, it answers whether that is done.
    A recorded pipeline's partition is named by its number; its `generation` and `routing`
    are its pipeline's (the worker seals its run's log and learns no cluster routing)."""

    partition: int  # in the path, not the body
    epoch: int
    generation: int  # the generation that ends
    partitions: int  # the next generation's partition count
    routing: tuple[int, ...]  # counts of generations 0..generation

    @property
    def path(self) -> str:
        return CUT_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        return {
            "epoch": self.epoch,
            "generation": self.generation,
            "partitions": self.partitions,
            "routing": list(self.routing),
        }

    @classmethod
    def from_json(cls, partition: int, body: object) -> CutRequest:
        fields = fields_of(body)
        epoch = epoch_field(fields)
        generation = fields.get("generation")
        if not is_int(generation) or not 0 <= generation < ROUTING_GENERATIONS_MAX - 1:
            raise InvalidCallBody(
                f"generation must be an integer in 0..{ROUTING_GENERATIONS_MAX - 2}", "generation"
            )
        partitions = fields.get("partitions")
        if not is_int(partitions) or not 1 <= partitions <= KEY_GROUPS:
            raise InvalidCallBody(f"partitions must be an integer in 1..{KEY_GROUPS}", "partitions")
        routing = routing_field(fields, generation + 1)
        return cls(
            partition=partition,
            epoch=epoch,
            generation=generation,
            partitions=partitions,
            routing=routing,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CutReply:
    partition: int
    epoch: int
    offset: int  # the cut: the seal's offset
    done: bool  # a checkpoint at exactly (partition, epoch, offset) is written
    uri: str | None  # that checkpoint, once done

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "epoch": self.epoch,
            "offset": self.offset,
            "done": self.done,
            "uri": self.uri,
        }

    @staticmethod
    def from_json(body: object) -> CutReply | None:
        """The reply, or None when it is not well-formed (done needs a uri)."""
        if not isinstance(body, dict):
            return None
        p, epoch, offset = body.get("partition"), body.get("epoch"), body.get("offset")
        done, uri = body.get("done"), body.get("uri")
        if not (is_int(p) and is_epoch(epoch) and is_offset(offset)):
            return None
        if not isinstance(done, bool) or not (uri is None or isinstance(uri, str)):
            return None
        if done and uri is None:
            return None
        return CutReply(partition=p, epoch=epoch, offset=offset, done=done, uri=uri)


@dataclass(frozen=True, slots=True, kw_only=True)
class CutCheckpoint:
    """One old partition's cut: its checkpoint at `offset`, written at `epoch`."""

    partition: int
    offset: int
    uri: str
    epoch: int

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "uri": self.uri,
            "epoch": self.epoch,
        }

    @classmethod
    def from_json(cls, value: object) -> CutCheckpoint:
        if isinstance(value, dict):
            p, offset = value.get("partition"), value.get("offset")
            uri, epoch = value.get("uri"), value.get("epoch")
            if (
                is_int(p)
                and p >= 0
                and is_offset(offset)
                and is_epoch(epoch)
                and isinstance(uri, str)
                and uri
            ):
                return cls(partition=p, offset=offset, uri=uri, epoch=epoch)
        raise InvalidCallBody("each cut must be {partition, offset, uri, epoch}", "cuts")


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltCheckpoint:
    """A new partition's starting checkpoint, written by a build."""

    partition: int
    offset: int
    uri: str

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "offset": self.offset, "uri": self.uri}


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildRequest:
    """Build generation `generation`'s starting checkpoints from `cuts`, one per partition of
    the generation before it, writing them at `epoch`; repeated, it answers progress."""

    path: ClassVar[str] = BUILD_ROUTE

    generation: int  # the new generation (>= 1)
    routing: tuple[int, ...]  # counts of generations 0..generation
    epoch: int  # the rescale's base epoch
    cuts: tuple[CutCheckpoint, ...]  # by old partition 0..routing[generation - 1] - 1

    def to_json(self) -> JsonObject:
        return {
            "generation": self.generation,
            "routing": list(self.routing),
            "epoch": self.epoch,
            "cuts": [c.to_json() for c in self.cuts],
        }

    @classmethod
    def from_json(cls, body: object) -> BuildRequest:
        fields = fields_of(body)
        generation = fields.get("generation")
        if not is_int(generation) or not 1 <= generation < ROUTING_GENERATIONS_MAX:
            raise InvalidCallBody(
                f"generation must be an integer in 1..{ROUTING_GENERATIONS_MAX - 1}", "generation"
            )
        routing = routing_field(fields, generation + 1)
        epoch = epoch_field(fields)
        raw = fields.get("cuts")
        if not isinstance(raw, list) or len(raw) > CUTS_MAX:
            raise InvalidCallBody(f"cuts must be a list of at most {CUTS_MAX}", "cuts")
        cuts = tuple(sorted((CutCheckpoint.from_json(c) for c in raw), key=lambda c: c.partition))
        previous = routing[generation - 1]
        if [c.partition for c in cuts] != list(range(previous)):
            raise InvalidCallBody(
                f"cuts must name each partition 0..{previous - 1} of generation "
                f"{generation - 1} exactly once",
                "cuts",
            )
        return cls(generation=generation, routing=routing, epoch=epoch, cuts=cuts)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildReply:
    generation: int
    done: bool
    checkpoints: tuple[BuiltCheckpoint, ...]  # one per new partition once done, else empty

    def to_json(self) -> JsonObject:
        return {
            "generation": self.generation,
            "done": self.done,
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }

    @staticmethod
    def from_json(body: object) -> BuildReply | None:
        """The reply, or None when it is not well-formed."""
        if not isinstance(body, dict):
            return None
        generation, done, raw = body.get("generation"), body.get("done"), body.get("checkpoints")
        if not (is_int(generation) and isinstance(done, bool) and isinstance(raw, list)):
            return None
        checkpoints: list[BuiltCheckpoint] = []
        for ck in raw:
            q = ck.get("partition") if isinstance(ck, dict) else None
            offset = ck.get("offset") if isinstance(ck, dict) else None
            uri = ck.get("uri") if isinstance(ck, dict) else None
            if not (is_int(q) and is_offset(offset) and isinstance(uri, str)):
                return None
            checkpoints.append(BuiltCheckpoint(partition=q, offset=offset, uri=uri))
        if done and not checkpoints:
            return None
        return BuildReply(generation=generation, done=done, checkpoints=tuple(checkpoints))
