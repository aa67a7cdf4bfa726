"""The partitions this worker holds: each one's runtime (state, offset, epoch) and its gate.

Invariant: a partition is processed, checkpointed or served only while its runtime is
loaded and its gate is open at the runtime's epoch (`open_now`, `held`); the lease is the
caller's second condition. Everything here is touched on the event loop only, and the
partition state changes under `batch_lock` whenever it must not interleave with a
micro-batch (a checkpoint round, a release). A recorded pipeline's partition keeps its state
in a store on local disk (`pipeline.spec.live_state`), in a directory of its own runtime's
(never reused, so a store being destroyed and the next host's never meet); dropping the
runtime destroys its store, under the batch lock, so no merge or checkpoint is reading it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.gate import Gates
from pipeline.input_rate import InputRate
from pipeline.spec.live_state import LiveState, worker_cache
from pipeline.state import PartitionState
from shared.clock import monotonic_s
from shared.system_clock import SYSTEM_CLOCK

if TYPE_CHECKING:
    from pipeline.spec.partition_state import SpecPartitionState
    from pipeline.spec.run import PipelineRun

__all__ = [
    "BATCH_FAILURES_REPORTED_MIN",
    "STORES_DIR",
    "Holdings",
    "PartitionRuntime",
    "count_failures",
]

log = logging.getLogger(__name__)

# A partition is reported as failing (heartbeat, health, metrics) after this many micro-batches
# in a row failed: one failure can be a blip, three in a row is something an operator fixes.
BATCH_FAILURES_REPORTED_MIN = 3
STORES_DIR = "stores"  # recorded pipelines' partition stores, under the worker's state dir


@dataclass(slots=True)
class PartitionRuntime:
    epoch: int
    state: PartitionState = field(default_factory=dict)
    offset: int = 0  # the next source offset to process
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    checkpoint_offset: int = -1
    checkpoint_uri: str = ""
    # A recorded pipeline's: the offset whose accepted checkpoint was last published to the
    # results tables (pipeline.spec.results); -1: none yet by this runtime.
    published_offset: int = -1
    failures: int = 0  # micro-batches in a row that failed with this partition in them
    error: str = ""  # the last failure's first line
    source_end: int | None = None  # the source log's end when last listed (lag metric)
    # How fast the source grows (heartbeats report it: load-aware placement).
    input_rate: InputRate = field(default_factory=InputRate)
    # Monotonic time (`monotonic_s` of the worker's clock) the state was last covered by a
    # checkpoint: loaded from one, or one written or confirmed for the leader (checkpoint age
    # metric). Its default, the hosting time, is read on the process's clock.
    covered_at_s: float = field(default_factory=lambda: monotonic_s(SYSTEM_CLOCK))
    # A recorded pipeline's partition: its run, and its state in `spec_state` (`state` stays
    # empty). None: one of `default`'s.
    run: PipelineRun | None = None
    spec_state: LiveState | None = None
    # The state of the last checkpoint this runtime wrote, until it is published (a windowed
    # spec's: its basis and closed windows only, all its publication reads).
    checkpointed: SpecPartitionState | None = None

    def checkpoint_bytes(self, partition: int, epoch: int) -> bytes | None:
        """A recorded pipeline's checkpoint of this state (None for `default`'s, whose
        CheckpointStore.write encodes). Blocking: run it in a thread, under the batch lock
        (the store is not written meanwhile). A format-2 checkpoint holds the whole state:
        it is read from the store into memory for the encoding (the documented limit)."""
        if self.run is None or self.spec_state is None:
            return None
        state = self.spec_state.snapshot()
        encoded = self.run.encode(partition, epoch, self.offset, state)
        if self.run.spec.window is not None:
            state = dataclasses.replace(state, values={}, firsts={})
        self.checkpointed = state
        return encoded


class Holdings:
    """The gates and runtimes of one worker; a new incarnation starts from none."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.gates = Gates()
        self.parts: dict[int, PartitionRuntime] = {}
        # The process is stopping to start again: no partition is opened here any more.
        self.stopping = False
        # One writer of partition state at a time: a micro-batch, a checkpoint round, a release.
        self.batch_lock = asyncio.Lock()
        # Where recorded pipelines' partition stores live: STORES_DIR under the worker's
        # state directory, emptied on first use (a process never resumes from a previous
        # one's rows: it loads checkpoints); None: a temporary directory, removed with this
        # object. And the block cache they share.
        self._state_dir = None if state_dir is None else state_dir / STORES_DIR
        self._emptied = False
        self._temporary: tempfile.TemporaryDirectory[str] | None = None
        self.cache = worker_cache()
        self._stores = itertools.count()
        self._destroying: set[asyncio.Task[None]] = set()

    def store_directory(self, partition: int, epoch: int) -> Path:
        """A new directory for a store of `partition` hosted at `epoch`: never one before."""
        if self._state_dir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="ripple-state-")
            self._state_dir, self._emptied = Path(self._temporary.name), True
        if not self._emptied:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._emptied = True
        return self._state_dir / f"p{partition}-e{epoch}-{next(self._stores)}"

    def _discard(self, rt: PartitionRuntime) -> None:
        """Destroy a dropped runtime's store once no merge or checkpoint holds the lock."""
        live, rt.spec_state, rt.checkpointed = rt.spec_state, None, None
        if live is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            live.destroy()  # no loop: nothing else can be reading it
            return
        task = loop.create_task(self._destroy(live))
        self._destroying.add(task)
        task.add_done_callback(self._destroying.discard)

    async def _destroy(self, live: LiveState) -> None:
        async with self.batch_lock:
            try:
                await asyncio.to_thread(live.destroy)
            except Exception:  # a store left on disk costs space, not correctness
                log.exception("removing the state store in %s failed", live.store.directory)

    def reset(self) -> None:
        """Drop everything: a new incarnation's gates were all fenced by the coordinator."""
        # Numbering goes on, so a heartbeat in flight across the reset still meets only the
        # openings before its mark.
        self.gates = Gates(openings=self.gates.mark())
        for rt in self.parts.values():
            self._discard(rt)
        self.parts.clear()

    def open_now(self) -> dict[int, PartitionRuntime]:
        """The loaded partitions whose gate is open at their epoch, in the order they came."""
        return {
            p: rt
            for p, rt in self.parts.items()
            if rt.loaded.is_set() and self.gates.admits(p, rt.epoch)
        }

    def held(self, partition: int) -> PartitionRuntime | None:
        """The partition's runtime if it is loaded and open here, else None."""
        rt = self.parts.get(partition)
        if rt is None or not rt.loaded.is_set() or not self.gates.admits(partition, rt.epoch):
            return None
        return rt

    def close_unassigned(
        self, assignment: Mapping[int, int], opened_by: int | None = None
    ) -> dict[int, int]:
        """Close and drop what the coordinator no longer assigns here (moved while we were
        away), leaving the gates opened after `opened_by` (a `Gates.mark`); returns the closed
        partitions and their epochs."""
        closed = self.gates.reconcile(assignment, opened_by).to_close
        for p, epoch in closed.items():
            self.gates.close(p, epoch)
            rt = self.parts.pop(p, None)
            if rt is not None:
                self._discard(rt)
        return closed

    def drop(self, partition: int, rt: PartitionRuntime) -> None:
        """Forget `rt` unless a newer runtime has taken the partition's place meanwhile; its
        store goes either way (a replaced runtime's is no one's)."""
        if self.parts.get(partition) is rt:
            self.parts.pop(partition)
        self._discard(rt)

    def failing(self) -> list[int]:
        return [p for p, rt in self.parts.items() if rt.failures >= BATCH_FAILURES_REPORTED_MIN]


def count_failures(parts: Mapping[int, PartitionRuntime], text: str, whose: str) -> None:
    """One more failed micro-batch for each of `parts`, logged once a partition reaches
    BATCH_FAILURES_REPORTED_MIN in a row (`whose`: what names its pipeline, if not default)."""
    for p, rt in parts.items():
        rt.failures += 1
        rt.error = text
        if rt.failures == BATCH_FAILURES_REPORTED_MIN:
            log.error(
                "%spartition %d epoch %d: %d micro-batches in a row failed; reporting it: %s",
                whose,
                p,
                rt.epoch,
                rt.failures,
                text,
            )
