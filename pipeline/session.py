"""The worker's session with the coordinator: registration, heartbeats, the lease, the tokens.

Owns who this worker is to the cluster right now (incarnation, worker token, the call token
the leader presents) and every request it makes to the coordinator. Invariant: the lease is
renewed only from the send time of a heartbeat the leader acknowledged, on the monotonic
clock, so a worker that has not heard from the leader for `lease_s` holds no lease (and
pauses) before the coordinator's `heartbeat_timeout_s` lets anyone else take its
partitions. A (re-)registration drops every partition held: the coordinator has already
given them new epochs. With a state directory, the current worker token is saved whenever
it changes and presented when the process registers again, so a restarted worker rejoins as
the member it was (`pipeline/token_file.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from coordinator.client import CoordinatorClient
from pipeline.coordinator_replies import (
    CheckpointVerdict,
    HeartbeatReply,
    Registration,
    checkpoint_verdicts,
    partition_owner,
    routing,
    store_set,
)
from pipeline.generations import Generations
from pipeline.holdings import BATCH_FAILURES_REPORTED_MIN, Holdings, PartitionRuntime
from pipeline.lease import Lease
from pipeline.settings import StartRefused, WorkerSettings
from pipeline.token_file import TokenFile
from shared.clock import Clock
from shared.errors import ClientError
from shared.messages.common import RATE_PER_S_MAX, WORKER_TOKEN_HEADER
from shared.messages.session import (
    BATCH_ERROR_LEN_MAX,
    CheckpointEntry,
    CheckpointsRequest,
    HeartbeatRequest,
    PartitionReport,
    RegisterRequest,
    RestartingRequest,
)

__all__ = ["CheckpointEntry", "PartitionReport", "Session", "partition_report"]

log = logging.getLogger(__name__)

# Coordinator error codes that mean "this incarnation is over": register again.
SESSION_LOST_CODES = ("unknown_worker", "stale_incarnation", "unauthorized")
# Registration refusals that trying again cannot mend: the worker stops and says why.
REFUSED_CODES = ("store_mismatch",)
# Attempts at a heartbeat (one node each) that fit in one lease, once registered.
ATTEMPTS_PER_LEASE = 2


def partition_report(rt: PartitionRuntime) -> PartitionReport:
    """What a heartbeat says about one held partition: failures only once failing batches
    are worth reporting, the rate within what the coordinator accepts."""
    rate = rt.input_rate.rate_per_s
    failing = rt.failures >= BATCH_FAILURES_REPORTED_MIN
    return PartitionReport(
        epoch=rt.epoch,
        offset=rt.offset,
        source_end=rt.source_end,
        rate=None if rate is None else min(round(rate, 3), RATE_PER_S_MAX),
        failures=rt.failures if failing else 0,
        error=rt.error[:BATCH_ERROR_LEN_MAX] if failing else "",
    )


class Session:
    def __init__(
        self,
        settings: WorkerSettings,
        client: CoordinatorClient,
        holdings: Holdings,
        clock: Clock,
        stopped: asyncio.Event,
        checkpoint_due: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.client = client
        self.holdings = holdings
        # The lease runs on clock.monotonic_ms: a wall-clock step must not stretch it (two
        # workers could then process one partition) nor cut it short.
        self.clock = clock
        self.stopped = stopped
        self.checkpoint_due = checkpoint_due
        self.lease = Lease(lease_ms=1)
        self.heartbeat_interval_s = 1.0
        self.heartbeat_attempt_s: float | None = None  # the client's own until registered
        self.token = ""  # what we present to the coordinator (renewed by each heartbeat)
        self.call_token = ""  # what the leader presents to us
        self.incarnation = 0
        self.total_partitions = 0
        # The routing generations known (docs/pipeline.md "Rescaling"); grows by host calls.
        self.generations = Generations()
        self.draining = False
        # What the leader's last heartbeat reply assigned here (partition -> epoch).
        self.assigned: dict[int, int] = {}
        # Why the coordinator refused this worker for good (the worker exits with it).
        self.refused: StartRefused | None = None
        # The token kept across restarts (None without a state directory).
        self.token_file = (
            None
            if settings.state_dir is None
            else TokenFile(settings.state_dir, settings.worker_id)
        )

    def lease_valid(self) -> bool:
        return self.lease.valid(self.clock.monotonic_ms())

    async def cluster_partitions(self) -> int:
        """The cluster's partition count, from any coordinator's health (which also says
        when the cluster cannot record checkpoints at all)."""
        return (await self.cluster_routing())[-1]

    async def cluster_routing(self) -> tuple[int, ...]:
        """Every routing generation's partition count, from any coordinator's health."""
        health = await self.client.get("/v1/health")
        if not store_set(health):
            log.warning(
                "the cluster file sets no store: every checkpoint this worker writes is "
                "fenced, and its partitions recover only by replaying the source log"
            )
        return routing(health)

    async def register(self) -> None:
        # The saved token of the previous process under this id, if any: with it the leader
        # lets this one take over the id while it still holds the old one's partitions.
        saved = None if self.token_file is None else await asyncio.to_thread(self.token_file.load)
        request = RegisterRequest(
            worker_id=self.settings.worker_id,
            address=self.settings.address,
            store=self.settings.store_uri,
            labels=dict(self.settings.labels) if self.settings.profiled else None,
            slots=self.settings.slots,
        )
        body = await self.client.request(
            "POST",
            "/v1/workers",
            json=request.to_json(),
            token=self.settings.join_token,
            headers={WORKER_TOKEN_HEADER: saved} if saved else None,
        )
        registration = Registration.from_json(body)
        self.holdings.reset()
        self.assigned = {}
        await self._keep(registration.token)
        self.call_token = registration.call_token
        self.incarnation = registration.incarnation
        self.heartbeat_interval_s = registration.heartbeat_interval_s
        self.lease = Lease(lease_ms=int(registration.lease_s * 1000))
        # A heartbeat that waits on a node holding calls unanswered (a leader whose disk
        # stalls it) gives up in time to reach another node within the lease; else each
        # beat spent it all on that node, and a new leader declared this worker dead. Only
        # heartbeats: a registration or a report retried after a lost answer is not.
        attempt_s = registration.lease_s / ATTEMPTS_PER_LEASE
        self.heartbeat_attempt_s = min(self.client.timeout_s, attempt_s)
        log.info("registered %s incarnation %d", self.settings.worker_id, self.incarnation)

    async def heartbeat_once(self) -> None:
        sent_at = self.clock.monotonic_ms()
        # The reply is computed from the state as it is when this request arrives: a gate a
        # host call opens while it is in flight is not the reply's to close.
        opened_by = self.holdings.gates.mark()
        parts = self.holdings.parts
        heartbeat = HeartbeatRequest(
            incarnation=self.incarnation,
            load=float(len(parts)),
            partitions={str(p): partition_report(rt) for p, rt in parts.items()},
        )
        body = await self.client.post(
            f"/v1/workers/{self.settings.worker_id}/heartbeat",
            heartbeat.to_json(),
            token=self.token,
            timeout_s=self.heartbeat_attempt_s,
        )
        self.lease = self.lease.renewed(sent_at)
        reply = HeartbeatReply.from_json(body)
        if reply.token is not None and reply.token != self.token:
            await self._keep(reply.token)
        self.assigned = dict(reply.assignment)
        for p, epoch in self.holdings.close_unassigned(reply.assignment, opened_by).items():
            log.info("partition %d epoch %d no longer assigned here; closed", p, epoch)
        if reply.checkpoint_due:
            self.checkpoint_due()

    async def _keep(self, token: str) -> None:
        """Use `token` from now on, and save it for the next process under this id."""
        self.token = token
        if self.token_file is None:
            return
        try:
            await asyncio.to_thread(self.token_file.save, token)
        except OSError as exc:
            log.warning(
                "could not save the worker token in %s (%s): a restart will not rejoin as "
                "this member",
                self.token_file.path,
                exc.strerror,
            )

    async def heartbeat_loop(self) -> None:
        while not self.stopped.is_set():
            try:
                if not self.token:
                    if self.draining:
                        return
                    await self.register()
                await self.heartbeat_once()
            except ClientError as exc:
                if exc.code in REFUSED_CODES:
                    log.error("the coordinator refuses this worker: %s", exc.message)
                    self.refused = StartRefused(exc.message)
                    self.stopped.set()
                    return
                if exc.code in SESSION_LOST_CODES:
                    if self.draining:
                        log.info("coordinator no longer knows us (%s): drained", exc.message)
                        self.stopped.set()
                        return
                    log.warning("re-registering: %s", exc.message)
                    self.token = ""
                else:
                    what = "heartbeat" if self.token else "registration"
                    log.warning("%s failed: %s", what, exc.message)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopped.wait(), self.heartbeat_interval_s)

    async def request_drain(self) -> bool:
        """Ask the leader to move this worker's partitions away; False when it could not be
        asked (the worker then just stops)."""
        self.draining = True
        try:
            await self.client.post(
                f"/v1/workers/{self.settings.worker_id}/drain", {}, token=self.token
            )
        except ClientError as exc:
            log.warning("drain request failed (%s); stopping anyway", exc.message)
            return False
        return True

    async def announce_restart(self) -> bool:
        """Tell the leader this process stops to start again under the same id, so it holds
        this worker's partitions for its rejoin grace; False when it could not be told."""
        if not self.incarnation:
            log.warning("restart notice not sent: this worker never registered")
            return False
        try:
            body = await self.client.post(
                f"/v1/workers/{self.settings.worker_id}/restarting",
                RestartingRequest(incarnation=self.incarnation).to_json(),
                token=self.token,
            )
        except ClientError as exc:
            log.warning(
                "restart notice failed (%s): the leader moves this worker's partitions after "
                "heartbeat_timeout_s unless it is back by then",
                exc.message,
            )
            return False
        log.info(
            "restart announced: the leader holds %s partitions for %s s",
            body.get("partitions"),
            body.get("rejoin_grace_s"),
        )
        return True

    async def report_checkpoints(self, entries: list[CheckpointEntry]) -> list[CheckpointVerdict]:
        """Report written checkpoints to the leader; its verdict on each, or none when the
        report did not get through (logged: the next round reports again)."""
        if not self.incarnation:
            return []  # not registered: no leader would take the report
        try:
            report = CheckpointsRequest(
                worker_id=self.settings.worker_id,
                incarnation=self.incarnation,
                checkpoints=entries,
            )
            body = await self.client.post("/v1/checkpoints", report.to_json(), token=self.token)
            return checkpoint_verdicts(body)
        except ClientError as exc:
            log.warning("checkpoint report failed: %s", exc.message)
            return []

    async def owner_of(self, partition: int) -> str | None:
        """Who the coordinator says owns `partition`, or None if it cannot say."""
        with contextlib.suppress(ClientError):
            return partition_owner(await self.client.get(f"/v1/partitions/{partition}"))
        return None
