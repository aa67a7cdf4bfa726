"""Where and when pysyncobj ticks: on the asyncio event loop, and on a stall guard thread
while the loop is stuck.

Owns the node's Raft lock and the two places a tick runs. On the loop, a tick runs right
after each pass that had Raft events or a proposal (`kick`, `tick_now`), and at least every
TICK_PERIOD_S for Raft's timers (elections, heartbeats, reconnects, the transport's
deadlines). The guard thread wakes every GUARD_PERIOD_S and, only once the loop has not
ticked for LOOP_STALL_S (busy with a long request, a big plan, a collection), polls the Raft
sockets and ticks in the loop's place, so a leader keeps sending heartbeats and a follower
keeps hearing them through the stall. Invariants:

- Every tick holds the Raft lock, as does closing the node: never contended on the loop,
  taken by the guard for its round. (Appending an entry needs none: it goes through
  pysyncobj's thread-safe command queue, and the next tick takes it from there.)
- No tick starts on the loop while the loop holds the apply lock (a read): the tick applies
  under it and would wait for itself.
- After `close`, nothing ticks and nothing stays registered with the loop.

A tick may wait for the disk: with `fsync` on it syncs the journal before and after
pysyncobj's own tick (`RaftNode._onTick`), and the loop (or the guard) waits as long as the
disk takes (`ReplicatedLog.sync_stats` times it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Callable

from replication.errors import SyncFailedError
from replication.poller import LoopPoller
from replication.raft_node import RaftNode
from shared.clock import Clock
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["GUARD_PERIOD_S", "LOOP_STALL_S", "TICK_PERIOD_S", "Ticker"]

log = logging.getLogger(__name__)

TICK_PERIOD_S = 0.02  # a tick on the loop at least this often: Raft's timers are checked in it
SHUTDOWN_JOIN_S = 5.0
# The guard ticks in the loop's place every GUARD_PERIOD_S once the loop has not for
# LOOP_STALL_S (two and a half of the loop's own TICK_PERIOD_S, so never while the loop keeps
# up): while the loop is busy, each Raft message then waits at most about 60 ms, a fifth of
# the shortest election timeout, so a cluster whose loops are busy with reads still elects a
# leader within its timeouts. It logs at most once per GUARD_LOG_INTERVAL_S.
LOOP_STALL_S = 0.05
GUARD_PERIOD_S = 0.01
GUARD_LOG_INTERVAL_S = 10.0


class Ticker:
    """Ticks `node` on the event loop `start` is called on, and on the guard thread while
    that loop is stuck. `after_tick` runs inside every tick, with the Raft lock held. A stall
    is measured on `clock`, which both threads read."""

    def __init__(
        self,
        node: RaftNode,
        poller: LoopPoller,
        raft_lock: threading.Lock,
        apply_lock: threading.Lock,
        after_tick: Callable[[], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._node = node
        self._poller = poller
        self._raft_lock = raft_lock
        self._apply_lock = apply_lock
        self._after_tick = after_tick
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._guard = threading.Thread(target=self._guard_forever, name="raft-guard", daemon=True)
        self._tick_pending = False  # a tick is due on the loop (`_kick`)
        self._tick_timer: asyncio.Handle | None = None
        self._last_turn_ms = clock.monotonic_ms()  # the loop's last tick or Raft event
        self._guard_rounds = 0
        self._guard_logged_at_ms = -math.inf

    def start(self) -> None:
        """On the event loop Raft is to run on."""
        self._loop = loop = asyncio.get_running_loop()
        self._last_turn_ms = self._clock.monotonic_ms()
        self._poller.attach(loop, self._kick, self._turned)
        self._tick_timer = loop.call_soon(self._tick_periodically)
        self._guard.start()

    def close(self) -> None:
        """Stop ticking, then close the node's Raft port and journal (on the loop)."""
        self._stop.set()
        if self._guard.is_alive():
            self._guard.join(SHUTDOWN_JOIN_S)
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        with self._raft_lock, contextlib.suppress(Exception):
            self._node.destroy()  # autoTick is off: closes sockets and the journal now
        self._poller.close()

    @property
    def guard_ticks(self) -> int:
        """Ticks the stall guard ran because the event loop was busy (so far)."""
        return self._guard_rounds

    def tick_now(self) -> None:
        """On the loop: tick now, so an entry just appended goes out in this pass of the loop
        rather than the next. Not inside a tick (a commit freed a slot: the same tick sends
        it), nor while the guard ticks (its kick does), nor under a read (the apply lock:
        the tick applies under it)."""
        if self._stop.is_set() or self._apply_lock.locked():
            return
        if self._raft_lock.acquire(blocking=False):
            self._tick_pending = False  # the tick the append kicked: this is it
            try:
                self._tick()
            finally:
                self._raft_lock.release()

    def _tick(self) -> None:
        """One pysyncobj tick, on the loop or on the guard, with the Raft lock held."""
        try:
            try:
                self._node.doTick(0.0)
                self._node.restore_loaded_snapshot()
            except SyncFailedError:
                pass  # the disk failed: recorded, and `after_tick` halts the node
            self._after_tick()
        except Exception:
            log.exception("raft tick failed")

    def _turned(self) -> None:
        self._last_turn_ms = self._clock.monotonic_ms()

    def _tick_on_loop(self) -> None:
        self._tick_pending = False  # this tick serves every kick made before it
        with self._raft_lock:
            self._tick()
        self._last_turn_ms = self._clock.monotonic_ms()

    def _kick(self) -> None:
        """Tick on the loop once the events of this pass are handled (at most one due)."""
        loop = self._loop
        if loop is None:
            return
        if not self._poller.on_loop():
            loop.call_soon_threadsafe(self._kicked)  # from the guard
        elif not self._tick_pending:
            self._tick_pending = True
            loop.call_soon(self._kicked)

    def _kicked(self) -> None:
        if self._tick_pending and not self._stop.is_set():
            self._tick_on_loop()

    def _tick_periodically(self) -> None:
        if self._stop.is_set() or self._loop is None:
            return
        self._tick_on_loop()
        self._tick_timer = self._loop.call_later(TICK_PERIOD_S, self._tick_periodically)

    def _guard_forever(self) -> None:
        """The stall guard's thread: does nothing while the loop keeps up."""
        poller, clock = self._poller, self._clock
        stall_ms, log_interval_ms = LOOP_STALL_S * 1000, GUARD_LOG_INTERVAL_S * 1000
        while not self._stop.wait(GUARD_PERIOD_S):
            stalled_ms = clock.monotonic_ms() - self._last_turn_ms
            if stalled_ms < stall_ms:
                continue
            with self._raft_lock:
                if self._stop.is_set() or clock.monotonic_ms() - self._last_turn_ms < stall_ms:
                    continue
                self._guard_rounds += 1
                poller.dispatch_ready()
                self._tick()
            now_ms = clock.monotonic_ms()
            if now_ms - self._guard_logged_at_ms > log_interval_ms:
                self._guard_logged_at_ms = now_ms
                log.warning(
                    "event loop busy for %d ms: Raft ticked on the guard thread "
                    "(%d guard ticks so far)",
                    stalled_ms,
                    self._guard_rounds,
                )
