"""One worker process: its parts wired together, and its lifecycle (start, signals, drain).

The parts, one job each: `settings` (what the command line says), `session` (registration,
heartbeats, the lease, every request to the coordinator), `holdings` (the partitions held
and their gates), `processing` (Spark micro-batches through the data path),
`checkpointing` (write, report, load a sent one), `hosting` (the leader's host and release
calls applied) and `http_api` (the routes).
docs/design.md §5 is the contract they keep together: nothing is processed, checkpointed or
served as the owner unless the gate is open and the lease holds, and the coordinator waits
`heartbeat_timeout_s` > `lease_s` before it moves partitions, so a paused worker stops before
anyone else starts.

Invariant kept here: nothing is processed before the start-up probe passed (a worker whose
Spark cannot read its input never registers); SIGTERM restarts (the last checkpoints are
written and reported, every gate closed, the leader told to hold the partitions for the
process started again under this id: `stop_for_restart`), or with `leave_on_sigterm` drains
(the leader moves the partitions away first); SIGINT stops at once; every task the worker
starts is cancelled when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from coordinator.client import CoordinatorClient
from pipeline.aggregate import Transform, identity
from pipeline.checkpoint import CheckpointStore
from pipeline.checkpointing import Checkpointer
from pipeline.cutting import Cutting
from pipeline.datapath import ProbeFailed
from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.hosting import Hosting
from pipeline.http_api import WorkerApi
from pipeline.ingest import Ingest
from pipeline.lease import Lease
from pipeline.metrics import WorkerMetrics, new_stats
from pipeline.pipeline_build import PipelineBuild
from pipeline.processing import Processor
from pipeline.rebuild import Move, Rebuild, spark_move
from pipeline.session import Session
from pipeline.settings import BATCH_INTERVAL_S_DEFAULT, StartRefused, WorkerSettings
from pipeline.spec.aggregations import SketchOps
from pipeline.spec.run import PipelineRuns
from pipeline.spec.sketches import SparkSketches
from pipeline.state_move import move_states
from pipeline.store import CountedStore, ObjectStore
from pipeline.token_check import TokenCheck, ask_coordinator
from pipeline.warming import Warming
from shared.clock import Clock, monotonic_s
from shared.errors import UnavailableError
from shared.system_clock import SYSTEM_CLOCK

# What `ripple worker` and the benchmarks import: the worker, its settings and their default.
__all__ = ["BATCH_INTERVAL_S_DEFAULT", "Worker", "WorkerSettings", "run_worker"]

log = logging.getLogger(__name__)

# One request to the coordinator: each attempt, and all of them with redirects and retries.
COORDINATOR_TIMEOUT_S = 5.0
COORDINATOR_DEADLINE_S = 5.0
DRAIN_POLL_S = 0.2


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        store: ObjectStore,
        transform: Transform = identity,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.clock = clock
        # Every store call of the worker goes through the count its metric and alert read.
        self.store = CountedStore(store)
        store = self.store
        self.address = settings.address
        self.client = CoordinatorClient(
            list(settings.coordinators),
            deadline_s=COORDINATOR_DEADLINE_S,
            timeout_s=COORDINATOR_TIMEOUT_S,
            ca_file=settings.tls_ca,
            clock=clock,
        )
        self.stopped = asyncio.Event()
        self.stats = new_stats()
        # Recorded pipelines' partition stores: under --state-dir, else a temporary directory.
        self.holdings = Holdings(None if settings.state_dir is None else Path(settings.state_dir))
        self.session = Session(
            settings, self.client, self.holdings, clock, self.stopped, self.schedule_checkpoint
        )
        checkpoints = CheckpointStore(store)
        self.checkpointer = Checkpointer(
            checkpoints,
            self.holdings,
            self.session,
            self.stats,
            clock,
            results=self.store,
            sketches=self._sketches,
        )
        self.processor = Processor(
            settings, store, transform, checkpoints, self.holdings, self.session, self.stats, clock
        )
        self.warming = Warming(
            self.holdings,
            self.checkpointer,
            copies_max=settings.warm_copies_max,
            idle_s=settings.warm_copy_idle_s,
            clock=clock,
        )
        self.processor.warming = self.warming
        runs = PipelineRuns(self.client.get, store)
        self.hosting = Hosting(
            self.holdings,
            self.checkpointer,
            self.warming,
            generations=self.session.generations,
            cluster_routing=self.session.cluster_routing,
            runs=runs,
        )
        self.processor.pipelines.runs = runs
        self.cutting = Cutting(
            store, self.holdings, self.checkpointer, self.session.generations, self.lease_valid
        )
        pipeline_build = PipelineBuild(
            self.client.get, checkpoints, self._sketches, results=self.store
        )
        self.rebuild = Rebuild(
            checkpoints, self._move, settings.max_keys_per_partition, pipeline_build
        )
        self.metrics = WorkerMetrics(
            self.stats,
            self.processor.batch_seconds,
            self.holdings,
            self.session.lease_valid,
            self.warming.counts,
            clock,
            failed_batches=self.processor.failed_batches,
            spark_reachable=lambda: not self.processor.link.lost,
            store_errors=self.store.errors,
        )
        self.api = WorkerApi(
            settings,
            self.session,
            self.holdings,
            self.hosting,
            self.schedule_checkpoint,
            self.health,
            self.not_ready,
            self.metrics.render,
            self.cutting,
            self.rebuild,
            self._sketches,
            Ingest(
                store,
                self.client,
                TokenCheck(ask_coordinator(self.client, lambda: self.session.token), clock),
            ),
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeats: asyncio.Task[None] | None = None
        self._stopping = False  # a SIGTERM is being handled (a second one changes nothing)

    def _sketches(self) -> SketchOps:
        """Sketch reads on the micro-batches' Spark session (a recorded pipeline's results)."""
        aggregator = self.processor.aggregator
        if aggregator is None:
            raise UnavailableError("Spark is not connected yet", code="unavailable")
        return SparkSketches(aggregator.spark)

    # -- the handles tests and tools reach for -------------------------------------------------

    @property
    def parts(self) -> dict[int, PartitionRuntime]:
        return self.holdings.parts

    @property
    def checkpoints(self) -> CheckpointStore:
        return self.checkpointer.checkpoints

    @property
    def lease(self) -> Lease:
        return self.session.lease

    @lease.setter
    def lease(self, lease: Lease) -> None:
        self.session.lease = lease

    @property
    def call_token(self) -> str:
        return self.session.call_token

    @call_token.setter
    def call_token(self, token: str) -> None:
        self.session.call_token = token

    @property
    def total_partitions(self) -> int:
        return self.session.total_partitions

    @total_partitions.setter
    def total_partitions(self, total: int) -> None:
        self.session.total_partitions = total

    def lease_valid(self) -> bool:
        return self.session.lease_valid()

    def app(self) -> web.Application:
        return self.api.app()

    def site(self, runner: web.AppRunner) -> web.TCPSite:
        return self.api.site(runner)

    # -- what the parts share ------------------------------------------------------------------

    def _move(self) -> Move:
        """A rescale's state move: on Spark once the worker has its session, else here."""
        if self.processor.aggregator is None:
            return move_states
        return spark_move(self.settings.spark_remote)

    def schedule_checkpoint(self) -> None:
        """Checkpoint and report in the background (the leader asked, or a heartbeat did)."""
        self._spawn(self.checkpointer.checkpoint_and_report())

    def health(self) -> dict[str, object]:
        session, holdings = self.session, self.holdings
        return {
            "worker_id": self.settings.worker_id,
            "incarnation": session.incarnation,
            "lease_valid": session.lease_valid(),
            "draining": session.draining,
            "stopping": holdings.stopping,
            "partitions": {
                str(p): {
                    "epoch": rt.epoch,
                    "offset": rt.offset,
                    "keys": len(rt.state),
                    "open": holdings.gates.admits(p, rt.epoch),
                    "failures": rt.failures,
                    "error": rt.error or None,
                }
                for p, rt in sorted(holdings.parts.items())
            },
            "stats": self.stats,
            # Why batches failed (store, staging_disk, spark_...) and the store calls that
            # failed past their retries: what an operator reads first when lag grows.
            "failed_batches": dict(self.processor.failed_batches),
            "store_errors": dict(self.store.errors),
            "data_path": self.processor.data_path.value,
            "spark": self.processor.link.health(monotonic_s(self.clock)),
            "batch_seconds": {k: round(v, 3) for k, v in self.processor.batch_seconds.items()},
        }

    def not_ready(self) -> str | None:
        """Why this worker is not back at work, or None when it is: registered, holding a
        lease, and every partition the leader's last heartbeat reply assigned here open at
        its epoch. What a rolling restart waits for before it stops the next worker."""
        session, holdings = self.session, self.holdings
        if holdings.stopping or session.draining:
            return "stopping"
        if not session.token:
            return "not registered"
        if not session.lease_valid():
            return "no lease (no heartbeat acknowledged lately)"
        waiting = sorted(
            p
            for p, epoch in session.assigned.items()
            if holdings.held(p) is None or holdings.parts[p].epoch != epoch
        )
        if waiting:
            return f"{len(waiting)} assigned partitions not open yet (first: {waiting[0]})"
        return None

    # -- lifecycle -----------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def on_sigterm(self) -> None:
        """What SIGTERM means: a restart (the default), or a leave (`leave_on_sigterm`)."""
        if self._stopping:
            return
        self._stopping = True
        self._spawn(self.drain() if self.settings.leave_on_sigterm else self.stop_for_restart())

    async def stop_for_restart(self) -> None:
        """Stop so that the process started again under this id gets the same partitions:
        last checkpoints written and reported (the restarted process replays little), every
        gate closed, heartbeats stopped, the leader told to hold the partitions for its
        rejoin grace. Bounded by `stop_timeout_s`; the worker exits in any case."""
        try:
            await asyncio.wait_for(self._hand_back(), self.settings.stop_timeout_s)
        except TimeoutError:
            log.warning(
                "stopping for a restart took over %g s; exiting anyway",
                self.settings.stop_timeout_s,
            )
        finally:
            self.stopped.set()

    async def _hand_back(self) -> None:
        entries = await self.checkpointer.close_for_restart()
        if not self.session.token:
            return  # never registered: the leader holds nothing of ours
        await self.checkpointer.report(entries)
        if self._heartbeats is not None:
            # Before the notice: a heartbeat after it must not find a worker still running.
            self._heartbeats.cancel()
            await asyncio.gather(self._heartbeats, return_exceptions=True)
        await self.session.announce_restart()
        log.info(
            "stopped for a restart at %d checkpointed partitions; start again with the same "
            "--worker-id and --state-dir to rejoin",
            len(entries),
        )

    async def drain(self) -> None:
        """Graceful leave: ask the leader to move our partitions, wait until they are gone."""
        if self.session.draining or not self.session.token:
            self.stopped.set()
            return
        if not await self.session.request_drain():
            self.stopped.set()
            return
        deadline = monotonic_s(self.clock) + self.settings.drain_timeout_s
        while monotonic_s(self.clock) < deadline and not self.stopped.is_set():
            if not self.holdings.parts:
                break
            await asyncio.sleep(DRAIN_POLL_S)
        self.stopped.set()

    async def run(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        await self.site(runner).start()
        loop = asyncio.get_running_loop()
        # SIGTERM is a restart (or with leave_on_sigterm a graceful leave); SIGINT stops at
        # once, which is what `ripple up` uses when the whole local cluster goes down.
        loop.add_signal_handler(signal.SIGTERM, self.on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self.stopped.set)
        try:
            token_file = self.session.token_file
            if token_file is not None:
                # Before anything else: a worker that cannot keep its token cannot rejoin.
                try:
                    await asyncio.to_thread(token_file.prepare)
                except OSError as exc:
                    raise StartRefused(
                        f"cannot use --state-dir {token_file.dir}: {exc.strerror or exc}"
                    ) from None
            routing = await self.session.cluster_routing()
            self.session.generations.learn(routing)
            self.session.total_partitions = routing[-1]
            # Before registering: a worker whose Spark cannot read its input must never
            # take partitions (they would stay ONLINE and silently never move).
            await self.processor.start(self.session.generations.counts)
            log.info(
                "worker %s on %s: %d partitions, spark %s, data path %s (probe passed)",
                self.settings.worker_id,
                self.address,
                self.session.total_partitions,
                self.settings.spark_remote,
                self.processor.data_path.value,
            )
            self._heartbeats = loop.create_task(self.session.heartbeat_loop())
            tasks = [self._heartbeats, loop.create_task(self.processor.loop(self.stopped))]
            await self.stopped.wait()
            for t in tasks + self._tasks:
                t.cancel()
            self.rebuild.close()
            if self.session.refused is not None:
                raise self.session.refused
        finally:
            await self.client.close()
            await runner.cleanup()
            await self.processor.close()
            if self.session.token_file is not None:
                self.session.token_file.release()


def run_worker(settings: WorkerSettings, store: ObjectStore, transform: Transform) -> int:
    """Run until stopped; 0, or 2 when it refused to start (the start-up probe failed, its
    state directory cannot be used...; the message on stderr)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        asyncio.run(Worker(settings, store, transform).run())
    except (ProbeFailed, StartRefused) as exc:
        log.error("refusing to start: %s", exc)
        print(f"ripple worker: refusing to start: {exc}", file=sys.stderr)
        return 2
    return 0
