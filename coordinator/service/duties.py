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
time only for the timestamps it stamps into commands. Beside the loop, while it runs, a
sampler measures the event loop's stall (`coordinator/service/loop_stall.py`) and tells the
planner its total at every wake and before every plan, so a heartbeat that waited unread
behind a stalled loop does not make its worker look silent (`coordinator/core/liveness.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from coordinator.core.effects import CommitOutcome, HostDone, WorkerCall
from coordinator.core.executor import BatchRun
from coordinator.core.planner import Planner
from coordinator.planner_config import planner_settings
from coordinator.service import command_log
from coordinator.service.call_results import request_of, result_of, store_fence
from coordinator.service.loop_stall import STALL_SAMPLE_PERIOD_MS, LoopStall
from coordinator.service.node_parts import DutyNode
from coordinator.service.planner_door import PlannerDoor
from coordinator.service.worker_client import WorkerClient
from replication.log import RaftRole
from shared.clock import Clock
from shared.errors import RequestError, RippleError
from shared.messages.warm import WARM_HOLD_S_MAX
from shared.system_clock import SYSTEM_CLOCK

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
        # The loop's stall since this leadership's planner was built (each planner is told
        # totals from zero, the count it seeded its workers at).
        self.stall = LoopStall()
        cfg = node.config
        self._client = WorkerClient(
            cluster_secret=cfg.cluster_secret,
            timeout_s=cfg.worker_call_timeout_s,
            tls_ca=cfg.tls_ca or None,
        )

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
        await self._client.close()

    # -- the loop ----------------------------------------------------------------------------

    async def _sample_stall(self, stall: LoopStall) -> None:
        """Measure the loop's stall into `stall` and tell the planner of this leadership,
        until cancelled with the loop."""
        clock = self.clock
        while True:
            stall.sleeping(clock.monotonic_ms() + STALL_SAMPLE_PERIOD_MS)
            await asyncio.sleep(STALL_SAMPLE_PERIOD_MS / 1000)
            now = clock.monotonic_ms()
            stall.woke(now)
            if self.planner is not None and stall is self.stall:
                self.planner.stalled(stall.total_ms(now))

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
        stall = self.stall = LoopStall()
        sampler = asyncio.get_running_loop().create_task(self._sample_stall(stall))
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
        finally:
            sampler.cancel()

    async def step(self) -> int:
        """One plan-and-execute round; returns the monotonic time to plan again."""
        planner = self.planner
        if planner is None:
            raise RuntimeError("step() without a planner (not the ready leader)")
        self._wake.clear()  # a result arriving from here on wakes the next sleep
        now = self.clock.monotonic_ms()
        # The stall so far, the one in progress included: a death check right after a stall
        # must not count it as the workers' silence.
        planner.stalled(self.stall.total_ms(now))
        with self.node.read() as state:
            batch = planner.plan(state, now, self.clock.wall_ms())
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

    async def _call(self, planner: Planner, call: WorkerCall) -> None:
        # Held for the copy's next step: the release decided on a warm answer then reaches
        # the source while the target's batch in flight reads past the source's last one, so
        # the target's first batch as owner is that one, not the batch after (docs/design.md §5).
        hold_s = min(WARM_HOLD_S_MAX, self.node.config.worker_call_timeout_s * WARM_HOLD_SHARE)
        answer = await self._client.post(call, request_of(call, warm_hold_s=hold_s))
        result = result_of(call, answer, store_fence(self.node.config.store))
        if isinstance(result, HostDone):
            self.node.metrics.host_calls.labels(outcome="ok" if result.ok else "failed").inc()
        if planner is self.planner:  # a reply to a previous leadership changes nothing
            planner.on_result(result, self.clock.monotonic_ms(), self.clock.wall_ms())
            self._wake.set()
