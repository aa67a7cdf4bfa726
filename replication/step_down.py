"""The leader's side of a slow disk: when it hands its leadership over, and to whom.

Owns `StepDown`: after every tick of a leader whose journal syncs are slow
(`replication.slow_disk`), one hand-over at a time, as a task on the event loop, to the
voter that holds the most of its log (Raft's TimeoutNow through `Reconfiguration`, new
writes held meanwhile). Invariants:

- At most one hand-over runs; none starts on a closed node.
- A hand-over that fails (no follower takes it: each stands aside on a slow disk of its
  own) is tried again only after `leader_sync_cooldown_s`, so new writes are not held over
  and over, and the slow leader leads on: a slow leader beats none.
- A step-down is counted once this node no longer leads.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from replication.errors import ReplicationError
from replication.raft_node import RaftNode
from replication.reconfig import Reconfiguration
from replication.settings import RaftSettings
from replication.slow_disk import SlowDisk
from shared.clock import Clock

__all__ = ["SLOW_DISK_TRANSFER_S", "StepDown"]

log = logging.getLogger(__name__)

# How long a leader with a slow disk tries to hand its leadership over (new writes wait
# meanwhile): a tick of a slow leader takes two syncs, so the follower may need a few to catch
# up.
SLOW_DISK_TRANSFER_S = 5.0


class StepDown:
    """Hands the leadership over while `slow` says the disk is slow (module doc)."""

    def __init__(
        self,
        slow: SlowDisk,
        node: RaftNode,
        raft_lock: threading.Lock,
        reconfig: Reconfiguration,
        settings: RaftSettings,
        clock: Clock,
    ) -> None:
        self._slow = slow
        self._node = node
        self._raft_lock = raft_lock
        self._reconfig = reconfig
        self._settings = settings
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._pending = False  # a hand-over is scheduled or running
        self._after_ms = 0  # none before (a failed one waits out the cooldown)
        self._closed = False

    def after_tick(self, leading: bool, loop: asyncio.AbstractEventLoop | None) -> None:
        """After a tick (the Raft lock held, on the loop or the guard thread)."""
        if (
            leading
            and loop is not None
            and self._slow.slow
            and not self._pending
            and self._clock.monotonic_ms() >= self._after_ms
        ):
            self._pending = True  # the hand-over awaits: a task on the loop, from any thread
            loop.call_soon_threadsafe(self._start)

    def close(self) -> None:
        """On the loop: no hand-over from now on, and the running one cancelled."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    def _start(self) -> None:
        if self._closed:
            self._pending = False
        else:
            self._task = asyncio.get_running_loop().create_task(self._hand_over())

    async def _hand_over(self) -> None:
        """Hand the leadership to the voter holding the most of this leader's log."""
        try:
            with self._raft_lock:
                progress = self._node.progress()
                voters = {m.raft: m for m in self._node.membership().voters}
            candidates = [(match, r) for r, (match, _age) in progress.items() if r in voters]
            if not candidates:
                return
            _match, raft = max(candidates)
            settings = self._settings
            log.warning(
                "raft: this leader's journal syncs are slow (median %d ms of the last ones, "
                "bound %d ms): handing the leadership to %s and standing for no election "
                "until the disk is fast again for %g s; check the disk",
                self._slow.median_ms,
                settings.leader_sync_slow_ms,
                voters[raft].id,
                settings.leader_sync_cooldown_s,
            )
            await self._reconfig.transfer_leadership(voters[raft], timeout_s=SLOW_DISK_TRANSFER_S)
            self._slow.stepped_down()  # counted once this node no longer leads
        except ReplicationError as exc:
            cooldown_s = self._settings.leader_sync_cooldown_s
            self._after_ms = self._clock.monotonic_ms() + int(cooldown_s * 1000)
            log.warning(
                "raft: handing the leadership over for a slow disk failed (%s): leading on, "
                "tried again in %g s",
                exc,
                cooldown_s,
            )
        finally:
            self._task = None
            self._pending = False
