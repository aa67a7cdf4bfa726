"""Leader duties: the I/O executor of the pure planner (`coordinator.core.planner`).

Owns the loop that runs only on the ready leader: read the applied state, ask the planner
for a batch, commit the commands its `BatchRun` hands out (`coordinator/core/executor.py`
keeps the order-and-skip rule), make its worker calls, feed every outcome back, sleep until
the run's wake-up. Every decision is the planner's; this module holds none. The planner's
settings come from the config (`coordinator/planner_config.py`), each committed command's
log line and count from `command_log`, and the HTTP API reaches the planner through
`planner_door`.

The loop is supervised: an exception in one step (any exception, not just a RippleError) is
logged with its traceback, counted in `ripple_duty_errors_total`, and the loop goes on after
a bounded backoff. The task has a done-callback, and `running` tells `/v1/health` whether a
leader's duties are actually running.

Time comes from one `Clock`: the planner gets monotonic time for every decision and wall
time only for the timestamps it stamps into commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

import aiohttp

from coordinator.core.commands import FinalCheckpoint
from coordinator.core.effects import (
    BuildCall,
    CheckpointCall,
    CheckpointDone,
    CommitOutcome,
    CutCall,
    HostCall,
    HostDone,
    ReleaseCall,
    ReleaseDone,
    ReleaseOutcome,
    WarmCall,
    WarmDone,
    WorkerCall,
    WorkerResult,
)
from coordinator.core.executor import BatchRun
from coordinator.core.planner import Planner
from coordinator.planner_config import planner_settings
from coordinator.service import command_log
from coordinator.service.auth import call_token
from coordinator.service.node_parts import DutyNode
from coordinator.service.planner_door import PlannerDoor
from coordinator.service.rescale_calls import rescale_call
from replication.log import RaftRole
from shared.checkpoint_ref import reference_problem
from shared.clock import Clock
from shared.errors import RequestError, RippleError
from shared.system_clock import SYSTEM_CLOCK
from shared.tls import client_context
from shared.worker_calls import (
    STATUS_OK,
    STATUS_SCHEDULED,
    STATUS_STALE,
    WARM_HOLD_S_MAX,
    CheckpointRequest,
    ErrorReply,
    HostRequest,
    JsonObject,
    ReleasedCheckpoint,
    ReleaseReply,
    ReleaseRequest,
    SentCheckpoint,
    WarmReply,
    WarmRequest,
    WorkerRequest,
    authorization,
)

log = logging.getLogger(__name__)

# After a failed step the loop waits base * 2**n (capped): a persistent bug logs a few
# lines a second at most instead of spinning, and a transient one costs one short pause.
ERROR_BACKOFF_BASE_S = 0.1
ERROR_BACKOFF_CAP_S = 5.0
# The longest the loop sleeps between plans, whatever wake-up the batch asked for.
SLEEP_MAX_S = 1.0
# A warm call asks the target to hold its answer for the copy's next step for at most this
# share of the call's timeout (and WARM_HOLD_S_MAX), so a held answer still comes in time.
WARM_HOLD_SHARE = 0.5
# The status a worker call is recorded with when no HTTP answer came (refused, timed out).
NO_ANSWER = 0


def final_checkpoint_from_release_reply(
    store: str, call: ReleaseCall, ck: ReleasedCheckpoint | None
) -> FinalCheckpoint | None:
    """THE place a release reply's checkpoint becomes a FinalCheckpoint (its reference is
    checked here, its shape by `ReleaseReply.checkpoint_of`).

    A reply without a well-formed, canonical checkpoint yields None: fenced like a report,
    the hand-off then keeps the last accepted checkpoint and the new owner replays the
    source from there, which loses nothing (replay is deterministic)."""
    if ck is None:
        return None
    problem = reference_problem(store, call.partition, call.epoch, ck.offset, ck.uri)
    if problem is not None:
        log.warning(
            "release of p%d by %s named checkpoint %r: fenced (%s)",
            call.partition,
            call.worker_id,
            ck.uri,
            problem,
        )
        return None
    return FinalCheckpoint(offset=ck.offset, uri=ck.uri, epoch=call.epoch)


class LeaderDuties(PlannerDoor):
    """The loop, with the HTTP API's door to its planner (`planner_door.PlannerDoor`)."""

    def __init__(
        self,
        node: DutyNode,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock)
        self.node = node
        self.rng = rng or random.Random()
        self._calls: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._http: aiohttp.ClientSession | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def on_role(self, _role: RaftRole) -> None:
        """Called on the event loop for every role change and when leadership is ready."""
        if self.node.is_ready_leader:
            if self._loop_task is None or self._loop_task.done():
                self._loop_task = asyncio.get_running_loop().create_task(self._run())
                self._loop_task.add_done_callback(self._loop_done)
        else:
            self.stop()

    @property
    def running(self) -> bool:
        return self._loop_task is not None and not self._loop_task.done()

    def _loop_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("leader duties ended by %r", exc, exc_info=exc)
            self.node.metrics.duty_errors.labels(step="loop").inc()

    def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            self._loop_task = None
        for task in self._calls:
            task.cancel()
        self._calls.clear()
        self.planner = None
        self.failing.clear()

    async def close(self) -> None:
        self.stop()
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=self.node.config.worker_call_timeout_s)
            # https:// worker addresses are verified against tls_ca (or the system's roots).
            connector = aiohttp.TCPConnector(ssl=client_context(self.node.config.tls_ca or None))
            self._http = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._http

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        log.info(
            "leader duties starting on %s (term %d)",
            self.node.node_id,
            self.node.leader_info().status.term,
        )
        with self.node.read() as state:
            if 0 < state.total_partitions != self.node.config.total_partitions:
                log.error(
                    "cluster was bootstrapped with %d partitions; config says %d (ignored)",
                    state.total_partitions,
                    self.node.config.total_partitions,
                )
            self.planner = Planner(
                planner_settings(self.node.config), self.rng, state, self.clock.monotonic_ms()
            )
        failures = 0
        try:
            while True:
                try:
                    wake_at = await self.step()
                    failures = 0
                    delay = (wake_at - self.clock.monotonic_ms()) / 1000
                except RippleError as exc:
                    # Expected in a cluster (no quorum, a leadership change): no traceback.
                    log.warning("leader duty step failed: %s", exc.message)
                    if self.node.is_ready_leader:
                        # A leader stepping down loses its commits by design: not an error
                        # to alert on (the loop is stopped by the role change anyway).
                        self.node.metrics.duty_errors.labels(step="commit").inc()
                    failures += 1
                    delay = min(ERROR_BACKOFF_CAP_S, ERROR_BACKOFF_BASE_S * 2 ** min(failures, 16))
                except Exception:
                    log.exception("leader duty step raised; continuing after a pause")
                    self.node.metrics.duty_errors.labels(step="plan").inc()
                    failures += 1
                    delay = min(ERROR_BACKOFF_CAP_S, ERROR_BACKOFF_BASE_S * 2 ** min(failures, 16))
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), min(delay, SLEEP_MAX_S))
        except asyncio.CancelledError:
            log.info("leader duties stopped on %s", self.node.node_id)
            raise

    async def step(self) -> int:
        """One plan-and-execute round; returns the monotonic time to plan again."""
        planner = self.planner
        if planner is None:
            raise RuntimeError("step() without a planner (not the ready leader)")
        self._wake.clear()  # a result arriving from here on wakes the next sleep
        with self.node.read() as state:
            batch = planner.plan(state, self.clock.monotonic_ms(), self.clock.wall_ms())
        run = BatchRun(planner, batch)
        await self._commit(run)
        for call in run.calls():
            task = asyncio.get_running_loop().create_task(self._call(planner, call))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
        return run.wake_at_ms(self.clock.monotonic_ms())

    async def _commit(self, run: BatchRun) -> None:
        """Commit what the run hands out, one command at a time, and tell it each outcome;
        an outcome not known in time is raised once the run has it, so the loop backs off."""
        while (cmd := run.next_command()) is not None:
            error: RippleError
            try:
                await self.node.submit(cmd)
            except RequestError as exc:
                outcome, error = CommitOutcome.REJECTED, exc
            except RippleError as exc:
                outcome, error = CommitOutcome.UNKNOWN, exc
            else:
                run.outcome(cmd, CommitOutcome.OK, self.clock.monotonic_ms())
                command_log.committed(cmd, self.node.metrics, self.planner)
                continue
            run.outcome(cmd, outcome, self.clock.monotonic_ms())
            log.info("%s not committed (%s): %s", type(cmd).__name__, outcome.value, error.message)
            if outcome is CommitOutcome.UNKNOWN:
                raise error

    # -- calls to workers ------------------------------------------------------------------------

    async def _post(self, call: WorkerCall, request: WorkerRequest) -> tuple[int, JsonObject]:
        """POST `request` to the called worker; its status and JSON object (`{}` when it
        sent none), or NO_ANSWER and the transport's complaint as the message."""
        token = call_token(self.node.config.cluster_secret, call.worker_id, call.incarnation)
        try:
            async with self._session().post(
                f"{call.address}{request.path}",
                json=request.to_json(),
                headers={"Authorization": authorization(token)},
            ) as resp:
                try:
                    body: object = await resp.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    body = {}
                return resp.status, body if isinstance(body, dict) else {}
        except (aiohttp.ClientError, TimeoutError) as exc:
            return NO_ANSWER, {"message": str(exc)}

    async def _call(self, planner: Planner, call: WorkerCall) -> None:
        result: WorkerResult
        if isinstance(call, HostCall):
            ck = call.checkpoint
            sent = (
                None if ck is None else SentCheckpoint(offset=ck.offset, uri=ck.uri, epoch=ck.epoch)
            )
            request = HostRequest(
                partition=call.partition,
                epoch=call.epoch,
                checkpoint=sent,
                routing=call.routing or None,
            )
            status, body = await self._post(call, request)
            ok = status == STATUS_OK
            self.node.metrics.host_calls.labels(outcome="ok" if ok else "failed").inc()
            error = ErrorReply.from_json(body)
            result = HostDone(call=call, ok=ok, code=error.error or None, message=error.message)
            if not ok:
                log.info(
                    "host p%d e%d on %s failed (%s %s)",
                    call.partition,
                    call.epoch,
                    call.worker_id,
                    status,
                    result.message,
                )
        elif isinstance(call, ReleaseCall):
            release = ReleaseRequest(
                partition=call.partition, epoch=call.epoch, migration_id=call.migration_id
            )
            status, body = await self._post(call, release)
            if status == STATUS_OK:
                final = final_checkpoint_from_release_reply(
                    self.node.config.store, call, ReleaseReply.checkpoint_of(body)
                )
                result = ReleaseDone(call=call, outcome=ReleaseOutcome.RELEASED, checkpoint=final)
            elif status == STATUS_STALE:
                # The source does not hold this epoch (restarted, or never hosted it).
                result = ReleaseDone(call=call, outcome=ReleaseOutcome.REFUSED)
            else:
                log.info("release %s of p%d failed (%s)", call.migration_id, call.partition, status)
                result = ReleaseDone(call=call, outcome=ReleaseOutcome.FAILED)
        elif isinstance(call, WarmCall):
            result = await self._warm(call)
        elif isinstance(call, CutCall | BuildCall):
            result = await rescale_call(self._post, self.node.config.store, call)
        else:
            assert isinstance(call, CheckpointCall)
            status, _ = await self._post(call, CheckpointRequest())
            result = CheckpointDone(call=call, ok=status in (STATUS_OK, STATUS_SCHEDULED))
        if planner is self.planner:  # a reply to a previous leadership changes nothing
            planner.on_result(result, self.clock.monotonic_ms(), self.clock.wall_ms())
            self._wake.set()

    async def _warm(self, call: WarmCall) -> WarmDone:
        ck = call.checkpoint
        sent = None if ck is None else SentCheckpoint(offset=ck.offset, uri=ck.uri, epoch=ck.epoch)
        # Held for the copy's next step: the release decided on this answer then reaches the
        # source while the target's batch in flight reads past the source's last one, so the
        # target's first batch as owner is that one, not the batch after (docs/design.md §5).
        hold_s = min(WARM_HOLD_S_MAX, self.node.config.worker_call_timeout_s * WARM_HOLD_SHARE)
        request = WarmRequest(
            partition=call.partition,
            migration_id=call.migration_id,
            checkpoint=sent,
            routing=call.routing or None,
            hold_s=hold_s,
        )
        status, body = await self._post(call, request)
        reply = WarmReply.from_json(body) if status == STATUS_OK else None
        if reply is not None:
            return WarmDone(
                call=call, ok=True, loaded=reply.loaded, offset=reply.offset, head=reply.head
            )
        if status == NO_ANSWER:
            return WarmDone(call=call, ok=False)  # unreachable: its liveness decides
        error = ErrorReply.from_json(body)
        log.info(
            "warm-up %s of p%d on %s refused (%s %s): the move goes cold",
            call.migration_id,
            call.partition,
            call.worker_id,
            status,
            error.message,
        )
        return WarmDone(call=call, ok=False, code=error.error or str(status))
