"""Leader duties: failure detection, assignment, host tasks, migrations, drain, checkpoints.

They run only on the ready leader (its committed log applied), stop the moment it loses
leadership, and keep no durable state of their own: every piece of pending work is read
back from the replicated state on each tick (ASSIGNING partitions, migrations not DONE or
ABORTED, DRAINING workers), so a new leader rolls forward whatever its predecessor
committed (seed 002's commit points). Decisions are computed by the pure core
(placement, liveness, backoff) and committed as ONE command before any worker is told.

What lives only here, in memory: heartbeat liveness and load (seed 004: compact and
non-durable), retry schedules, and the calls in flight to workers. A fresh leader seeds
liveness with every ACTIVE worker as seen at takeover, so a failover never kills workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from coordinator.core.backoff import BackoffPolicy, RetrySchedule
from coordinator.core.checkpoint_ref import reference_problem
from coordinator.core.commands import (
    AbortMigration,
    Assignment,
    AssignPartitions,
    Bootstrap,
    DeclareDead,
    DrainWorker,
    FinalCheckpoint,
    HandOff,
    Move,
    PartitionOnline,
    PlanMigrations,
    StartRelease,
)
from coordinator.core.liveness import Detector, Liveness
from coordinator.core.model import (
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionStatus,
    WorkerId,
    WorkerState,
)
from coordinator.core.placement import PlacementStrategy, plan
from coordinator.core.state import ClusterState, check_moves
from coordinator.errors import RequestError, RippleError
from coordinator.service import models as m
from coordinator.service.auth import call_token
from coordinator.service.failing import FailingReports
from coordinator.service.node import CoordinatorNode, now_ms
from coordinator.tls import client_context
from replication.log import RaftRole

log = logging.getLogger(__name__)

DUTY_TICK_S = 0.1
CHECKPOINT_SCAN_MS_MAX = 1_000
WORKER_CALLS_MAX = 64  # concurrent calls from the leader to workers
OWNING = (WorkerState.ACTIVE, WorkerState.DRAINING)
TERMINAL = (MigrationPhase.DONE, MigrationPhase.ABORTED)


class LeaderDuties:
    def __init__(self, node: CoordinatorNode, rng: random.Random | None = None) -> None:
        self.node = node
        cfg = node.config
        self.strategy = PlacementStrategy(cfg.placement_strategy)
        self.rng = rng or random.Random()
        self.detector = Detector(
            suspect_after_ms=int(cfg.suspect_after_s * 1000),
            dead_after_ms=int(cfg.heartbeat_timeout_s * 1000),
        )
        policy = BackoffPolicy(base_ms=cfg.host_retry_base_ms, cap_ms=cfg.host_retry_cap_ms)
        self.host_retry: RetrySchedule[tuple[int, int]] = RetrySchedule(policy)
        self.release_retry: RetrySchedule[str] = RetrySchedule(policy)
        self.checkpoint_next_ms: dict[str, int] = {}
        self._checkpoint_scan_at_ms = 0
        self.checkpoint_missed: set[str] = set()
        self.reported: dict[str, dict[int, tuple[int, int]]] = {}
        self.failing = FailingReports()
        self._calls: dict[Any, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def on_role(self, _role: RaftRole) -> None:
        """Called on the event loop for every role change and when leadership is ready."""
        if self.node.is_ready_leader:
            if self._loop_task is None or self._loop_task.done():
                self._loop_task = asyncio.get_running_loop().create_task(self._run())
        else:
            self.stop()

    def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            self._loop_task = None
        for task in self._calls.values():
            task.cancel()
        self._calls.clear()
        self.detector = Detector(
            suspect_after_ms=self.detector.suspect_after_ms,
            dead_after_ms=self.detector.dead_after_ms,
        )
        self.host_retry = RetrySchedule(self.host_retry.policy)
        self.release_retry = RetrySchedule(self.release_retry.policy)
        self.checkpoint_next_ms.clear()
        self._checkpoint_scan_at_ms = 0
        self.checkpoint_missed.clear()
        self.reported.clear()
        self.failing.clear()

    async def close(self) -> None:
        self.stop()
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=self.node.config.worker_call_timeout_s)
            cfg = self.node.config
            # https:// worker addresses are verified against tls_ca (or the system's roots).
            connector = aiohttp.TCPConnector(ssl=client_context(cfg.tls_ca or None))
            self._http = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._http

    async def _run(self) -> None:
        log.info(
            "leader duties starting on %s (term %d)", self.node.node_id, self.node.log.status().term
        )
        try:
            await self._bootstrap_if_needed()
            now = now_ms()
            with self.node.read() as state:
                live = [w.worker_id for w in state.workers.values() if w.state in OWNING]
            self.detector.seed(live, now)
            while True:
                try:
                    await self.tick(now_ms())
                except RippleError as exc:
                    log.warning("leader duty step failed: %s", exc.message)
                await asyncio.sleep(DUTY_TICK_S)
        except asyncio.CancelledError:
            log.info("leader duties stopped on %s", self.node.node_id)
            raise

    async def _bootstrap_if_needed(self) -> None:
        with self.node.read() as state:
            done = state.total_partitions > 0
        if not done:
            await self.node.submit(
                Bootstrap(total_partitions=self.node.config.total_partitions, now_ms=now_ms())
            )
        else:
            with self.node.read() as state:
                total = state.total_partitions
            if total != self.node.config.total_partitions:
                log.error(
                    "cluster was bootstrapped with %d partitions; config says %d (ignored)",
                    total,
                    self.node.config.total_partitions,
                )

    async def tick(self, now: int) -> None:
        await self._detect_failures(now)
        await self._assign_unassigned(now)
        await self._rebalance_on_join()
        await self._drive_migrations(now)
        await self._drive_drains()
        self._drive_hosts(now)
        self._drive_checkpoints(now)

    # -- hooks used by the HTTP API --------------------------------------------------------------

    def observe(
        self,
        worker_id: str,
        load: float,
        now: int,
        partitions: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        self.detector.observe(worker_id, now, load)
        if partitions is not None:
            self.reported[worker_id] = partitions

    def checkpoint_due(self, worker_id: str, now: int) -> bool:
        """True when the leader's last checkpoint request to this worker did not get
        through: the heartbeat reply then carries it."""
        if worker_id in self.checkpoint_missed:
            self.checkpoint_missed.discard(worker_id)
            return True
        return False

    def liveness_of(self, worker_id: str, now: int) -> str | None:
        if not self.node.is_ready_leader:
            return None
        status = self.detector.status(worker_id, now)
        return None if status is None else status.value

    def load_of(self, worker_id: str) -> float | None:
        return self.detector.load(worker_id) if self.node.is_ready_leader else None

    # -- failure detection -----------------------------------------------------------------------

    def _eligible(
        self, state: ClusterState, exclude: set[str] | frozenset[str] = frozenset()
    ) -> list[str]:
        """ACTIVE workers the leader currently hears from: a worker that registered but went
        quiet (SUSPECTED) receives nothing new until it heartbeats again."""
        now = now_ms()
        return [
            w
            for w in state.active_workers()
            if w not in exclude and self.detector.status(w, now) is Liveness.ALIVE
        ]

    def _placement(self, state: ClusterState, eligible: list[str]) -> list[str | None]:
        owners = [p.owner for p in state.partitions]
        return plan(self.strategy, owners, eligible, virtual_nodes=self.node.config.virtual_nodes)

    async def _detect_failures(self, now: int) -> None:
        verdict = self.detector.evaluate(now)
        if not verdict.dead:
            return
        with self.node.read() as state:
            dead = sorted(
                w
                for w in verdict.dead
                if (rec := state.workers.get(WorkerId(w))) is not None and rec.state in OWNING
            )
            for w in verdict.dead:
                if w not in dead:
                    self.detector.forget(w)
            if not dead:
                return
            eligible = self._eligible(state, set(dead))
            target = self._placement(state, eligible) if eligible else []
            dead_set = set(dead)
            assignments = []
            for p in state.partitions:
                if p.owner not in dead_set:
                    continue
                new_owner: str | None = target[p.partition] if eligible else None
                if p.migration is not None:
                    mig = state.migrations[p.migration]
                    # A dead source hands off to its migration's target (with the last
                    # accepted checkpoint) instead of a fresh placement choice.
                    if (
                        mig.source == p.owner
                        and mig.target in eligible
                        and mig.phase in (MigrationPhase.PLANNED, MigrationPhase.RELEASING)
                    ):
                        new_owner = mig.target
                assignments.append(
                    Assignment(
                        partition=p.partition,
                        owner=None if new_owner is None else WorkerId(new_owner),
                    )
                )
        log.warning("declaring dead: %s; reassigning %d partitions", dead, len(assignments))
        await self.node.submit(
            DeclareDead(
                worker_ids=tuple(WorkerId(w) for w in dead),
                assignments=tuple(assignments),
                now_ms=now,
            )
        )
        self.node.metrics.workers_declared_dead.inc(len(dead))
        for w in dead:
            self.detector.forget(w)

    # -- assignment ------------------------------------------------------------------------------

    async def _assign_unassigned(self, now: int) -> None:
        with self.node.read() as state:
            unassigned = [
                p.partition for p in state.partitions if p.status is PartitionStatus.UNASSIGNED
            ]
            if not unassigned:
                return
            if len(state.active_workers()) < self.node.config.min_cluster_size:
                return  # no liveness scan of every worker while too few are registered
            eligible = self._eligible(state)
            if len(eligible) < self.node.config.min_cluster_size:
                return
            target = self._placement(state, eligible)
            assignments = tuple(
                Assignment(partition=p, owner=WorkerId(o))
                for p in unassigned
                if (o := target[p]) is not None
            )
        if assignments:
            log.info("assigning %d partitions over %d workers", len(assignments), len(eligible))
            await self.node.submit(AssignPartitions(assignments=assignments, now_ms=now))

    def _balance_moves(self, state: ClusterState) -> list[Move]:
        eligible = self._eligible(state)
        if not eligible:
            return []
        target = self._placement(state, eligible)
        moves = []
        for p in state.partitions:
            new = target[p.partition]
            if p.owner is not None and new is not None and new != p.owner:
                moves.append(Move(partition=p.partition, source=p.owner, target=WorkerId(new)))
        return moves

    async def _rebalance_on_join(self) -> None:
        if not self.node.config.rebalance_on_join:
            return
        with self.node.read() as state:
            if state.in_flight_migrations() or any(
                p.status is not PartitionStatus.ONLINE for p in state.partitions
            ):
                return
            if any(w.state is WorkerState.DRAINING for w in state.workers.values()):
                return
            moves = self._balance_moves(state)
        if moves:
            log.info("rebalance_on_join: planning %d moves", len(moves))
            await self.node.submit(
                PlanMigrations(moves=tuple(moves), reason=MigrationReason.ADMIN, now_ms=now_ms())
            )

    # -- admin reassignment --------------------------------------------------------------------

    async def reassign(self, body: m.ReassignRequest, request_id: str) -> m.ReassignResponse:
        with self.node.read() as state:
            if body.strategy == "balance":
                if state.in_flight_migrations():
                    raise RequestError(
                        "migrations are in flight; balance when they finish",
                        code="conflict",
                        status=409,
                        field="strategy",
                    )
                moves = self._balance_moves(state)
            else:
                moves = []
                for i, mv in enumerate(body.moves or []):
                    if mv.partition >= state.total_partitions:
                        raise RequestError(
                            f"moves[{i}]: partition {mv.partition} does not exist",
                            field="partition",
                        )
                    owner = state.partitions[mv.partition].owner
                    if owner is None:
                        raise RequestError(
                            f"moves[{i}]: partition {mv.partition} has no owner",
                            code="conflict",
                            status=409,
                            field="partition",
                        )
                    moves.append(Move(partition=mv.partition, source=owner, target=WorkerId(mv.to)))
            problem = check_moves(state, tuple(moves), None)
            if problem is not None:
                raise RequestError(
                    problem.message, code=problem.code, status=problem.status, field=problem.field
                )
        if body.dry_run or not moves:
            return m.ReassignResponse(
                dry_run=body.dry_run,
                migrations=[
                    m.MigrationRef(id=None, partition=x.partition, from_=x.source, to=x.target)
                    for x in moves
                ],
            )
        value = await self.node.submit(
            PlanMigrations(moves=tuple(moves), reason=MigrationReason.ADMIN, now_ms=now_ms()),
            request_id,
        )
        return m.ReassignResponse(
            dry_run=False,
            migrations=[
                m.MigrationRef(id=x["id"], partition=x["partition"], from_=x["from"], to=x["to"])
                for x in value["migrations"]
            ],
        )

    async def abort(self, migration_id: str, request_id: str) -> str:
        await self.node.submit(
            AbortMigration(
                migration_id=MigrationId(migration_id), note="aborted by operator", now_ms=now_ms()
            ),
            request_id,
        )
        with self.node.read() as state:
            mig = state.migrations.get(MigrationId(migration_id))
            return "aborted" if mig is None else mig.phase.value

    def plan_drain(self, state: ClusterState, worker_id: WorkerId) -> tuple[Move, ...]:
        """Moves that take `worker_id`'s partitions (not already moving) to the others."""
        eligible = self._eligible(state, {worker_id})
        owned = [p for p in state.partitions if p.owner == worker_id and p.migration is None]
        if not owned:
            return ()
        if not eligible:
            raise RequestError(
                "no other ACTIVE worker can take its partitions",
                code="conflict",
                status=409,
                field="worker_id",
            )
        target = self._placement(state, eligible)
        return tuple(
            Move(
                partition=p.partition,
                source=worker_id,
                target=WorkerId(target[p.partition] or eligible[0]),
            )
            for p in owned
        )

    async def _drive_drains(self) -> None:
        """A drain migration that aborted (say its target died) leaves partitions on the
        DRAINING worker: plan them again."""
        with self.node.read() as state:
            draining = [
                w.worker_id for w in state.workers.values() if w.state is WorkerState.DRAINING
            ]
            plans = []
            for wid in draining:
                try:
                    moves = self.plan_drain(state, wid)
                except RequestError:
                    continue
                owned_unmoving = moves != ()
                in_flight = any(x.source == wid for x in state.in_flight_migrations())
                if owned_unmoving or not in_flight:
                    plans.append((wid, moves))
        for wid, moves in plans:
            await self.node.submit(DrainWorker(worker_id=wid, moves=moves, now_ms=now_ms()))

    # -- calls to workers ------------------------------------------------------------------------

    def _spawn(self, key: Any, coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        if key in self._calls or len(self._calls) >= WORKER_CALLS_MAX:
            return False
        task = asyncio.get_running_loop().create_task(coro_fn())
        self._calls[key] = task

        def done(_task: asyncio.Task[None]) -> None:
            self._calls.pop(key, None)

        task.add_done_callback(done)
        return True

    async def _post(
        self, url: str, token: str, payload: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        async with self._session().post(
            url, json=payload, headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            try:
                body = await resp.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError):
                body = {}
            return resp.status, body if isinstance(body, dict) else {}

    def _paused(self, worker_id: str, now: int) -> bool:
        return self.detector.status(worker_id, now) is not Liveness.ALIVE

    # -- host tasks ------------------------------------------------------------------------------

    def _drive_hosts(self, now: int) -> None:
        with self.node.read() as state:
            wanted = []
            for p in state.partitions:
                if p.status is not PartitionStatus.ASSIGNING or p.owner is None:
                    continue
                key = (p.partition, p.epoch)
                if key in self._calls or not self.host_retry.due(key, now):
                    continue
                worker = state.workers.get(p.owner)
                if worker is None or worker.state not in OWNING:
                    continue
                if self._paused(p.owner, now):
                    continue  # SUSPECTED: wait; DEAD: the failure path takes it over
                ck = p.checkpoint
                wanted.append(
                    (
                        key,
                        worker.worker_id,
                        worker.address,
                        worker.incarnation,
                        None
                        if ck is None
                        else {"offset": ck.offset, "uri": ck.uri, "epoch": ck.epoch},
                    )
                )
            live_keys = {
                (p.partition, p.epoch)
                for p in state.partitions
                if p.status is PartitionStatus.ASSIGNING
            }
        for key in self.host_retry.pending():
            if key not in live_keys:
                self.host_retry.forget(key)
        for key, wid, address, incarnation, checkpoint in wanted:

            def call(
                key: tuple[int, int] = key,
                wid: str = wid,
                address: str = address,
                incarnation: int = incarnation,
                checkpoint: dict[str, Any] | None = checkpoint,
            ) -> Coroutine[Any, Any, None]:
                return self._host(key, wid, address, incarnation, checkpoint)

            if not self._spawn(("host", key), call):
                break

    async def _host(
        self,
        key: tuple[int, int],
        worker_id: str,
        address: str,
        incarnation: int,
        checkpoint: dict[str, Any] | None,
    ) -> None:
        partition, epoch = key
        token = call_token(self.node.config.cluster_secret, worker_id, incarnation)
        try:
            status, body = await self._post(
                f"{address}/v1/partitions/{partition}/host",
                token,
                {"epoch": epoch, "checkpoint": checkpoint},
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, body = 0, {"message": str(exc)}
        if status != 200:
            self.node.metrics.host_calls.labels(outcome="failed").inc()
            failed_at = now_ms()
            # failed() returns when the retry is due, not the delay (scenario f, seed 606).
            delay = self.host_retry.failed(key, failed_at, self.rng) - failed_at
            log.info(
                "host p%d e%d on %s failed (%s %s); retry in %d ms",
                partition,
                epoch,
                worker_id,
                status,
                body.get("message", ""),
                delay,
            )
            return
        self.node.metrics.host_calls.labels(outcome="ok").inc()
        try:
            await self.node.submit(
                PartitionOnline(
                    partition=partition, epoch=epoch, owner=WorkerId(worker_id), now_ms=now_ms()
                )
            )
            self.host_retry.succeeded(key)
        except RequestError as exc:
            # An ack for an old epoch changes nothing: the partition moved on meanwhile.
            log.info("host ack p%d e%d not committed: %s", partition, epoch, exc.message)
            self.host_retry.forget(key)
        except RippleError as exc:
            log.warning("host ack p%d e%d outcome unknown: %s", partition, epoch, exc.message)
            self.host_retry.failed(key, now_ms(), self.rng)

    # -- migrations ------------------------------------------------------------------------------

    async def _drive_migrations(self, now: int) -> None:
        limit = self.node.config.max_concurrent_migrations
        with self.node.read() as state:
            in_flight = state.in_flight_migrations()
            active = [x for x in in_flight if x.phase is not MigrationPhase.PLANNED]
            to_start = [x.migration_id for x in in_flight if x.phase is MigrationPhase.PLANNED][
                : max(0, limit - len(active))
            ]
            aborts = []
            releases = []
            for x in in_flight:
                if x.phase not in (MigrationPhase.PLANNED, MigrationPhase.RELEASING):
                    continue
                target = state.workers.get(x.target)
                if target is None or target.state is not WorkerState.ACTIVE:
                    aborts.append((x.migration_id, "target is not active"))
                    continue
                if x.phase is MigrationPhase.RELEASING:
                    source = state.workers[x.source]
                    part = state.partitions[x.partition]
                    releases.append(
                        (
                            x.migration_id,
                            x.partition,
                            part.epoch,
                            source.worker_id,
                            source.address,
                            source.incarnation,
                        )
                    )
        for mid, note in aborts:
            await self.node.submit(AbortMigration(migration_id=mid, note=note, now_ms=now))
        for mid in to_start:
            if mid not in {a[0] for a in aborts}:
                await self.node.submit(StartRelease(migration_id=mid, now_ms=now))
        for mid, partition, epoch, wid, address, incarnation in releases:
            if self._paused(wid, now) or not self.release_retry.due(mid, now):
                continue

            def call(
                mid: MigrationId = mid,
                partition: int = partition,
                epoch: int = epoch,
                wid: str = wid,
                address: str = address,
                incarnation: int = incarnation,
            ) -> Coroutine[Any, Any, None]:
                return self._release(mid, partition, epoch, wid, address, incarnation)

            self._spawn(("release", mid), call)

    async def _release(
        self,
        mid: MigrationId,
        partition: int,
        epoch: int,
        worker_id: str,
        address: str,
        incarnation: int,
    ) -> None:
        token = call_token(self.node.config.cluster_secret, worker_id, incarnation)
        try:
            status, body = await self._post(
                f"{address}/v1/partitions/{partition}/release",
                token,
                {"epoch": epoch, "migration_id": mid},
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, body = 0, {"message": str(exc)}
        final: FinalCheckpoint | None = None
        if status == 200:
            ck = body.get("checkpoint")
            if (
                isinstance(ck, dict)
                and isinstance(ck.get("offset"), int)
                and isinstance(ck.get("uri"), str)
            ):
                problem = reference_problem(
                    self.node.config.store, partition, epoch, ck["offset"], ck["uri"]
                )
                if problem is None:
                    final = FinalCheckpoint(offset=ck["offset"], uri=ck["uri"], epoch=epoch)
                else:
                    # Fenced like a report: the hand-off falls back to the last accepted
                    # checkpoint, and the new owner replays the source from there.
                    log.warning(
                        "release of p%d by %s named checkpoint %r: fenced (%s)",
                        partition,
                        worker_id,
                        ck["uri"],
                        problem,
                    )
        elif status == 409:
            # The source does not hold this epoch (restarted, or never hosted it): hand off
            # with the last accepted checkpoint.
            log.info(
                "release of p%d refused by %s (%s); using last accepted checkpoint",
                partition,
                worker_id,
                body.get("message", ""),
            )
        else:
            failed_at = now_ms()
            delay = self.release_retry.failed(mid, failed_at, self.rng) - failed_at
            log.info(
                "release %s of p%d on %s failed (%s); retry in %d ms",
                mid,
                partition,
                worker_id,
                status,
                delay,
            )
            return
        self.release_retry.forget(mid)
        with contextlib.suppress(RequestError):
            value = await self.node.submit(
                HandOff(migration_id=mid, checkpoint=final, now_ms=now_ms())
            )
            log.info(
                "migration %s handed off p%d (%s checkpoint)",
                mid,
                partition,
                value.get("checkpoint"),
            )

    # -- checkpoints -----------------------------------------------------------------------------

    def _drive_checkpoints(self, now: int) -> None:
        interval_ms = int(self.node.config.checkpoint_interval_s * 1000)
        # The scan reads every worker: at most every CHECKPOINT_SCAN_MS_MAX (or a tenth of
        # the interval), not every duty tick (at 10,000 workers it was a tenth of the
        # leader's event loop). A round is then at most that much late.
        if now < self._checkpoint_scan_at_ms:
            return
        self._checkpoint_scan_at_ms = now + min(CHECKPOINT_SCAN_MS_MAX, interval_ms // 10)
        with self.node.read() as state:
            due = []
            for w in state.workers.values():
                if w.state not in OWNING or self._paused(w.worker_id, now):
                    continue
                nxt = self.checkpoint_next_ms.get(w.worker_id)
                if nxt is None:
                    # Stagger first requests over one interval so workers don't all
                    # checkpoint at once (per worker, no cluster-wide barrier).
                    self.checkpoint_next_ms[w.worker_id] = now + int(
                        self.rng.random() * interval_ms
                    )
                    continue
                if now >= nxt:
                    self.checkpoint_next_ms[w.worker_id] = now + interval_ms
                    due.append((w.worker_id, w.address, w.incarnation))
        for wid, address, incarnation in due:

            def call(
                wid: str = wid, address: str = address, incarnation: int = incarnation
            ) -> Coroutine[Any, Any, None]:
                return self._request_checkpoint(wid, address, incarnation)

            self._spawn(("checkpoint", wid), call)

    async def _request_checkpoint(self, worker_id: str, address: str, incarnation: int) -> None:
        token = call_token(self.node.config.cluster_secret, worker_id, incarnation)
        try:
            status, _ = await self._post(f"{address}/v1/checkpoint", token, {})
        except (aiohttp.ClientError, TimeoutError):
            status = 0
        if status not in (200, 202):
            self.checkpoint_missed.add(worker_id)
