"""The build call of a recorded pipeline's rescale: its new generation's starting checkpoints
and dead letters, from its old partitions' cuts (docs/pipeline.md "Rescaling a recorded
pipeline").

`PipelineBuild.run` is the whole job: read the pipeline's describe from the coordinator for
its old spec (the text of the generation that ends) and its new one (the text whose sha256
the call names: the rescale's, or the current one's once it is recorded), read each cut
checkpoint (checked to be its partition's at its offset), run `rescale_build.build` in a
thread, then write each new number's checkpoint under its canonical name (number, epoch,
generation_base(g)) and its dead letters, each create-only. A windowed pipeline's cuts' own
`closed` rows (final windows not yet published when the cut was written) are published
first, under each old partition's cut name (`results.windows_key(name, incarnation, p,
cut)`): the leader recorded the cut, so it is accepted, and the old partition may never
report it (its owner may die after the cut, and nobody hosts it again). The old owner's own
publish of its cut, if it gets there, writes the same rows under the same name (create-only):
a cut's `closed` holds only rows in no other file, since the cut first publishes what its
owner carried from the checkpoint it loaded (pipeline.cutting). `Rebuild` (pipeline/rebuild.py)
runs it, one build at a time. Invariant: the job is a pure function of the call and the
recorded specs, and every object it writes is create-only with deterministic bytes, so a
rerun (another worker, a new leader) writes nothing new and answers the same checkpoints.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from pipeline.checkpoint import CheckpointCorrupt, CheckpointStore
from pipeline.source import generation_base
from pipeline.spec.aggregations import SketchOps, outputs_of
from pipeline.spec.partition_state import KEYS_UNLIMITED, SpecCheckpoint
from pipeline.spec.rescale_build import RescaleBuildError, build
from pipeline.spec.results import ResultsStore, publish
from pipeline.spec.run import dead_letter_bytes, ranges_of
from shared.messages.pipeline_rescale import PipelineBuildRequest
from shared.messages.rescale import BuiltCheckpoint
from shared.routing import Routing
from shared.spec.model import PipelineSpec
from shared.spec.parse import parse_spec

__all__ = ["PipelineBuild", "specs_of"]

log = logging.getLogger(__name__)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def specs_of(call: PipelineBuildRequest, body: Mapping[str, Any]) -> tuple[str, str]:
    """The old and the new spec's text of the build `call`, from the pipeline's describe:
    the old one is the ending generation's (its range's own text, else the current one's:
    a cut of another version is refused by the build), the new one the text that hashes to
    the call's spec_sha256. Raises RescaleBuildError when the describe does not say."""
    if int(body["incarnation"]) != call.incarnation:
        raise RescaleBuildError(
            f"pipeline {call.pipeline} is incarnation {body['incarnation']}, the build names "
            f"{call.incarnation}"
        )
    current = str(body["spec_text"])
    ranges = ranges_of(body)
    ending = next((r for r in ranges if r.generation == call.generation - 1), None)
    if ending is None:
        raise RescaleBuildError(
            f"pipeline {call.pipeline} shows no generation {call.generation - 1} yet"
        )
    old = current if ending.spec_text is None else ending.spec_text
    texts = [current, *(r.spec_text for r in ranges if r.spec_text is not None)]
    new = next((t for t in texts if _sha256(t) == call.spec_sha256), None)
    if new is None:
        raise RescaleBuildError(
            f"pipeline {call.pipeline} shows no spec with sha256 {call.spec_sha256} yet"
        )
    return old, new


class _OnFirstUse:
    """Sketch operations asked for only when the build merges a sketch (a key found in two
    cuts): a worker without Spark builds every other rescale."""

    def __init__(self, make: Callable[[], SketchOps]) -> None:
        self._make = make
        self._ops: SketchOps | None = None

    def _get(self) -> SketchOps:
        if self._ops is None:
            self._ops = self._make()
        return self._ops

    def union(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        return self._get().union(pairs)

    def estimate(self, sketches: Sequence[bytes]) -> list[int]:
        return self._get().estimate(sketches)


class PipelineBuild:
    def __init__(
        self,
        get: Callable[[str], Awaitable[dict[str, Any]]],
        checkpoints: CheckpointStore,
        sketches: Callable[[], SketchOps],
        results: ResultsStore,
    ) -> None:
        self._get = get  # a GET of the coordinator's API
        self.checkpoints = checkpoints
        self.results = results  # where the cuts' final windows are published
        self.sketches = sketches

    async def run(self, call: PipelineBuildRequest) -> tuple[BuiltCheckpoint, ...]:
        """The build of `call`: its checkpoints, by number."""
        body = await self._get(f"/v1/pipelines/{call.pipeline}")
        old, new = specs_of(call, body)
        # The pipeline's own key limit; 0 in its settings: none, as its partitions merge.
        max_keys = int(body["settings"]["max_keys_per_partition"]) or KEYS_UNLIMITED
        return await asyncio.to_thread(
            self._build, call, parse_spec(old), parse_spec(new), max_keys
        )

    def _build(
        self, call: PipelineBuildRequest, old: PipelineSpec, new: PipelineSpec, max_keys: int
    ) -> tuple[BuiltCheckpoint, ...]:
        """Blocking: read the cuts, build, write."""
        cuts: dict[int, bytes] = {}
        closed: dict[int, SpecCheckpoint] = {}
        for cut in call.cuts:
            data, held = self.checkpoints.read_checked(cut.uri)
            if not isinstance(held, SpecCheckpoint) or (held.partition, held.offset) != (
                cut.partition,
                cut.offset,
            ):
                raise CheckpointCorrupt(
                    f"cut checkpoint {cut.uri!r} is not partition {cut.partition}'s at "
                    f"offset {cut.offset}"
                )
            cuts[cut.partition] = data
            if held.state.closed:
                closed[cut.partition] = held
        routing = Routing(generation=call.generation, partitions=call.partitions)
        sketches = _OnFirstUse(self.sketches)
        built = build(old, new, cuts, routing, call.first_slot, call.epoch, max_keys, sketches)
        for p, held in sorted(closed.items()):
            # Only final windows (a windowed spec has no snapshot, and an unwindowed one no
            # closed rows): no sketch is estimated.
            publish(self.results, call.pipeline, call.incarnation, old,
                    outputs_of(old), p, held.offset, held.state, self.sketches)  # fmt: skip
        base = generation_base(call.generation)
        out: list[BuiltCheckpoint] = []
        for number in call.numbers:
            made = built[number]
            if made.dead:
                # Named at the new partition's base: the keys its first range refused.
                data = dead_letter_bytes(number, made.dead)
                self.checkpoints.write_dead_letter_encoded(number, call.epoch, base, base, data)
            uri = self.checkpoints.write_encoded(number, call.epoch, base, made.checkpoint)
            out.append(BuiltCheckpoint(partition=number, offset=base, uri=uri))
        log.info(
            "pipeline %s: built generation %d (%d partitions from %d cuts)",
            call.pipeline,
            call.generation,
            call.partitions,
            len(call.cuts),
        )
        return tuple(out)
