"""The build call of a recorded pipeline's rescale (docs/pipeline.md "Rescaling a recorded
pipeline"): its new generation's starting checkpoints, from its old partitions' cuts.

    POST /v1/rescale/build/pipeline   PipelineBuildRequest {pipeline, incarnation, generation,
                                      first_slot, partitions, epoch, spec_sha256,
                                      cuts: [{partition, offset, uri}]}
    -> 200 BuildReply {generation, done, checkpoints: [{partition, offset, uri}]}, the
       partitions by number; 409 another build is running; repeated until done

A recorded pipeline's old partitions are cut with CutRequest, named by number; the build
differs from `default`'s (`rescale.BuildRequest`) in naming the pipeline, the new
generation's fresh numbers (first_slot .. first_slot + partitions - 1, none of them an old
one) and the new spec (by the sha256 of its text: the worker reads the text from the
coordinator and builds under it only if it hashes to this).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, TypeGuard

from shared.messages.common import (
    ROUTING_GENERATIONS_MAX,
    InvalidCallBody,
    JsonObject,
    epoch_field,
    fields_of,
    is_int,
    is_offset,
)
from shared.messages.rescale import BUILD_ROUTE, CUTS_MAX
from shared.routing import KEY_GROUPS, SLOT_BASE

__all__ = ["PIPELINE_BUILD_ROUTE", "PipelineBuildRequest", "PipelineCut"]

PIPELINE_BUILD_ROUTE = f"{BUILD_ROUTE}/pipeline"
# A pipeline's name, as the coordinator admits one.
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Partition numbers come from a counter that only grows: up to int64.
NUMBER_MAX = 2**63 - 1


def _is_number(value: object) -> TypeGuard[int]:
    return is_int(value) and SLOT_BASE <= value <= NUMBER_MAX


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineCut:
    """One old partition's cut: its checkpoint at `offset`."""

    partition: int  # its number
    offset: int
    uri: str

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "offset": self.offset, "uri": self.uri}

    @classmethod
    def from_json(cls, value: object) -> PipelineCut:
        if isinstance(value, dict):
            p, offset, uri = value.get("partition"), value.get("offset"), value.get("uri")
            if _is_number(p) and is_offset(offset) and isinstance(uri, str) and uri:
                return cls(partition=p, offset=offset, uri=uri)
        raise InvalidCallBody(f"each cut must be {{partition >= {SLOT_BASE}, offset, uri}}", "cuts")


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineBuildRequest:
    """Build `pipeline`'s generation `generation` (numbers first_slot .. + partitions - 1)
    under the spec hashing to `spec_sha256`, from `cuts`, one per old partition, writing at
    `epoch`; repeated, it answers progress."""

    path: ClassVar[str] = PIPELINE_BUILD_ROUTE

    pipeline: str
    incarnation: int
    generation: int  # the new generation (>= 1)
    first_slot: int
    partitions: int
    epoch: int
    spec_sha256: str  # of the new spec's text
    cuts: tuple[PipelineCut, ...]  # by number

    @property
    def numbers(self) -> range:
        return range(self.first_slot, self.first_slot + self.partitions)

    def to_json(self) -> JsonObject:
        return {
            "pipeline": self.pipeline,
            "incarnation": self.incarnation,
            "generation": self.generation,
            "first_slot": self.first_slot,
            "partitions": self.partitions,
            "epoch": self.epoch,
            "spec_sha256": self.spec_sha256,
            "cuts": [c.to_json() for c in self.cuts],
        }

    @classmethod
    def from_json(cls, body: object) -> PipelineBuildRequest:
        fields = fields_of(body)
        name = fields.get("pipeline")
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise InvalidCallBody("pipeline must match [A-Za-z0-9._-]{1,64}", "pipeline")
        incarnation = fields.get("incarnation")
        if not is_int(incarnation) or incarnation < 1:
            raise InvalidCallBody("incarnation must be a positive integer", "incarnation")
        generation = fields.get("generation")
        if not is_int(generation) or not 1 <= generation < ROUTING_GENERATIONS_MAX:
            raise InvalidCallBody(
                f"generation must be an integer in 1..{ROUTING_GENERATIONS_MAX - 1}", "generation"
            )
        first_slot, partitions = fields.get("first_slot"), fields.get("partitions")
        if not _is_number(first_slot):
            raise InvalidCallBody(f"first_slot must be a number >= {SLOT_BASE}", "first_slot")
        if not is_int(partitions) or not 1 <= partitions <= KEY_GROUPS:
            raise InvalidCallBody(f"partitions must be an integer in 1..{KEY_GROUPS}", "partitions")
        epoch = epoch_field(fields)
        sha = fields.get("spec_sha256")
        if not isinstance(sha, str) or _SHA256.fullmatch(sha) is None:
            raise InvalidCallBody("spec_sha256 must be 64 lowercase hex digits", "spec_sha256")
        raw = fields.get("cuts")
        if not isinstance(raw, list) or not 1 <= len(raw) <= CUTS_MAX:
            raise InvalidCallBody(f"cuts must be a list of 1..{CUTS_MAX}", "cuts")
        cuts = tuple(sorted((PipelineCut.from_json(c) for c in raw), key=lambda c: c.partition))
        numbers = [c.partition for c in cuts]
        if len(set(numbers)) != len(numbers):
            raise InvalidCallBody("cuts must name each old partition once", "cuts")
        if any(first_slot <= n < first_slot + partitions for n in numbers):
            raise InvalidCallBody("the new partitions' numbers must not be old ones", "first_slot")
        return cls(
            pipeline=name,
            incarnation=incarnation,
            generation=generation,
            first_slot=first_slot,
            partitions=partitions,
            epoch=epoch,
            spec_sha256=sha,
            cuts=cuts,
        )
