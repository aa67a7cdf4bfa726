"""The build call of a rescale: every new partition's starting checkpoint, from the old
partitions' cut checkpoints (docs/pipeline.md "Rescaling", the MOVING step).

`build_checkpoints` is the whole job: read each cut checkpoint (checking it holds what the
call says), move the states (`pipeline/state_move.py`: on Spark when the worker has a
session, in this process otherwise: both give the same result), then write, for each new
partition q, its dead-letter rows and its checkpoint at (q, epoch, generation_base(g)).
`Rebuild` runs one such job at a time in the background, this one or a recorded pipeline's
(pipeline/pipeline_build.py): the first call starts it, later calls answer its progress, a
failed job is reported once and started again by the next call.
Invariant: the job is a pure function of the call, and every object it writes is create-only
with deterministic bytes and names, so a rerun (another worker, a new leader) writes nothing
new and answers the same checkpoints.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.checkpoint import CheckpointCorrupt, CheckpointStore
from pipeline.pipeline_build import PipelineBuild
from pipeline.source import generation_base, generation_of
from pipeline.state import KeyState
from pipeline.state_move import MovedState, move_on_spark
from shared.errors import RequestError, UnavailableError
from shared.messages.pipeline_rescale import PipelineBuildRequest
from shared.messages.rescale import BuildReply, BuildRequest, BuiltCheckpoint
from shared.routing import Routing

__all__ = ["Move", "Rebuild", "build_checkpoints", "spark_move"]

log = logging.getLogger(__name__)

# The state move: old partition -> its state at the cut, the new routing, the key limit.
Move = Callable[[Mapping[int, Mapping[str, KeyState]], Routing, int], dict[int, MovedState]]


def build_checkpoints(
    checkpoints: CheckpointStore, call: BuildRequest, move: Move, max_keys: int
) -> tuple[BuiltCheckpoint, ...]:
    """Blocking: the build. Raises CheckpointCorrupt when a cut checkpoint is not what the
    call says, StoreError when the store fails."""
    ending = call.generation - 1
    old: dict[int, Mapping[str, KeyState]] = {}
    for cut in call.cuts:
        if generation_of(cut.offset) != ending:
            raise CheckpointCorrupt(
                f"cut of partition {cut.partition} at {cut.offset} is not in generation {ending}"
            )
        data = checkpoints.read(cut.uri)
        held = (data.partition, data.epoch, data.offset)
        if held != (cut.partition, cut.epoch, cut.offset):
            raise CheckpointCorrupt(f"cut checkpoint {cut.uri!r} holds {held}")
        old[cut.partition] = data.state
    new = Routing(generation=call.generation, partitions=call.routing[call.generation])
    moved = move(old, new, max_keys)
    base = generation_base(call.generation)
    built: list[BuiltCheckpoint] = []
    for q in range(new.partitions):
        if moved[q].dead:
            # Named at the new partition's base: the keys its first range refused.
            checkpoints.write_dead_letter(q, call.epoch, base, base, moved[q].dead)
        uri = checkpoints.write(q, call.epoch, base, moved[q].state)
        built.append(BuiltCheckpoint(partition=q, offset=base, uri=uri))
    return tuple(built)


def spark_move(spark_remote: str) -> Move:
    """The move as one job on a Spark Connect session of its own, stopped after it (the
    micro-batches' session is renewed on its own schedule, which must not end a build)."""

    def move(
        old: Mapping[int, Mapping[str, KeyState]], new: Routing, max_keys: int
    ) -> dict[int, MovedState]:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(spark_remote).create()
        try:
            return move_on_spark(spark, old, new, max_keys)
        finally:
            spark.stop()

    return move


@dataclass(slots=True)
class _Job:
    call: BuildRequest | PipelineBuildRequest
    task: asyncio.Task[tuple[BuiltCheckpoint, ...]]


class Rebuild:
    """At most one build at a time on this worker, `default`'s or a recorded pipeline's; the
    last one's result is kept."""

    def __init__(
        self,
        checkpoints: CheckpointStore,
        move: Callable[[], Move],
        max_keys: int,
        pipelines: PipelineBuild | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.move = move  # asked per job: whether the worker has Spark may change
        self.max_keys = max_keys
        self.pipelines = pipelines  # a recorded pipeline's build
        self._job: _Job | None = None

    def build(self, call: BuildRequest) -> BuildReply:
        """Start the build of `call` or answer how it is going. A build of another call
        while one runs is a 409 `build_in_flight` (the leader asks one worker at a time)."""
        return self._answer(call, call.generation, lambda: self._default_job(call))

    def build_pipeline(self, call: PipelineBuildRequest) -> BuildReply:
        """`build` of a recorded pipeline's generation (pipeline/pipeline_build.py)."""
        pipelines = self.pipelines
        if pipelines is None:
            raise UnavailableError("this worker builds no recorded pipeline", code="unavailable")
        return self._answer(call, call.generation, lambda: pipelines.run(call))

    def _answer(
        self,
        call: BuildRequest | PipelineBuildRequest,
        generation: int,
        start: Callable[[], Coroutine[Any, Any, tuple[BuiltCheckpoint, ...]]],
    ) -> BuildReply:
        job = self._job
        if job is not None and job.call != call:
            if not job.task.done():
                raise RequestError(
                    f"the build of generation {job.call.generation} is running here",
                    field="generation",
                    code="build_in_flight",
                )
            job = None
        if job is None:
            task = asyncio.get_running_loop().create_task(start())
            task.add_done_callback(_log_end)
            job = self._job = _Job(call=call, task=task)
        if not job.task.done():
            return BuildReply(generation=generation, done=False, checkpoints=())
        error = job.task.exception()
        if error is not None:
            self._job = None  # the next call starts it again
            raise UnavailableError(
                f"the build of generation {generation} failed: {error}",
                code="checkpoint_unavailable",
            )
        return BuildReply(generation=generation, done=True, checkpoints=job.task.result())

    async def wait(self) -> None:
        """Until the running build, if any, has ended."""
        if self._job is not None:
            await asyncio.gather(self._job.task, return_exceptions=True)

    async def _default_job(self, call: BuildRequest) -> tuple[BuiltCheckpoint, ...]:
        move = self.move()
        log.info(
            "building generation %d: %d partitions from %d cuts",
            call.generation,
            call.routing[call.generation],
            len(call.cuts),
        )
        return await asyncio.to_thread(
            build_checkpoints, self.checkpoints, call, move, self.max_keys
        )

    def close(self) -> None:
        if self._job is not None:
            self._job.task.cancel()


def _log_end(task: asyncio.Task[tuple[BuiltCheckpoint, ...]]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.warning("a rescale build failed (the next build call starts it again): %s", error)
    else:
        log.info("a rescale build wrote %d checkpoints", len(task.result()))
