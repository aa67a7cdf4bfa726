"""pysyncobj's poller on the asyncio event loop, and the notifier that kicks a tick there.

Owns which Raft sockets the event loop watches. A readable Raft socket is read in the loop's
own poll, and a tick (`kick`) runs right after the events of that pass, with no pipe, no
thread wake-up and no GIL hand-over between a write and its commit.

Invariants. Every use of pysyncobj and of this poller holds `lock` (the node's Raft lock): on
the loop it is never contended, and it lets the stall guard run Raft from its own thread
while the loop is stuck in other work. From that thread, registrations with the loop and the
closing of sockets the loop may still watch are deferred to the loop (`_reconcile`): a
descriptor closed while the loop watches it could be reused by a new socket and confuse the
loop's poller. Every event delivered on the loop is followed by a kick, so nothing read
waits for the next periodic tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable

from pysyncobj.poller import POLL_EVENT_TYPE

from replication.pysyncobj_pin import check_pysyncobj_version

check_pysyncobj_version()  # pysyncobj's poller interface, as SyncObj and its transport use it

__all__ = ["KickNotifier", "LoopPoller"]

log = logging.getLogger(__name__)

_READ = POLL_EVENT_TYPE.READ
_WRITE = POLL_EVENT_TYPE.WRITE


class LoopPoller:
    """pysyncobj's poller interface (`subscribe`, `unsubscribe`, `poll`) on the asyncio event
    loop. Subscriptions made before `attach` (the Raft port binds in SyncObj's constructor)
    are registered there. `poll` never waits: the loop (or the guard's `dispatch_ready`) has
    delivered the events. An error on a socket shows as readable or writable (epoll and
    libuv both report it so), and the connection's own read or write then meets it."""

    __slots__ = (
        "_graveyard",
        "_kick",
        "_lock",
        "_loop",
        "_loop_thread",
        "_on_turn",
        "_registered",
        "_subs",
    )

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._kick: Callable[[], None] = _nothing
        self._on_turn: Callable[[], None] = _nothing
        self._subs: dict[int, tuple[Callable[[int, int], None], int]] = {}
        self._registered: dict[int, int] = {}  # what the loop watches: descriptor -> mask
        self._graveyard: list[socket.socket] = []  # closed by the loop once unwatched

    def attach(
        self,
        loop: asyncio.AbstractEventLoop,
        kick: Callable[[], None],
        on_turn: Callable[[], None],
    ) -> None:
        """On the loop's thread."""
        self._loop, self._kick, self._on_turn = loop, kick, on_turn
        self._loop_thread = threading.get_ident()
        with self._lock:
            self._sync()

    def on_loop(self) -> bool:
        """On the thread of the loop it is attached to."""
        return threading.get_ident() == self._loop_thread

    def kick(self) -> None:
        """Ask for a tick on the loop (what `attach` was given)."""
        self._kick()

    # -- pysyncobj's Poller ------------------------------------------------------------------

    def subscribe(self, descr: int, callback: Callable[[int, int], None], eventMask: int) -> None:
        mask = (_READ if eventMask & (_READ | POLL_EVENT_TYPE.ERROR) else 0) | (eventMask & _WRITE)
        self._subs[descr] = (callback, mask)
        self._changed()

    def unsubscribe(self, descr: int) -> None:
        if self._subs.pop(descr, None) is not None:
            self._changed()

    def poll(self, timeout: float) -> None:
        """pysyncobj calls this at the end of each tick: the loop polls instead."""

    # -- the transport's sockets -------------------------------------------------------------

    def release(self, sock: socket.socket) -> None:
        """Close a socket the transport is done with (after `unsubscribe`). Off the loop the
        peer is told at once (shutdown) and the descriptor is closed by the loop."""
        if self.on_loop():
            sock.close()
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        self._graveyard.append(sock)
        self._changed()

    def close(self) -> None:
        """On the loop's thread, after the transport closed: nothing stays watched."""
        with self._lock:
            self._subs.clear()
            self._sync()

    # -- the guard thread ---------------------------------------------------------------------

    def dispatch_ready(self) -> None:
        """Deliver what is ready now, the way pysyncobj's own poller does (guard thread,
        under the lock)."""
        p = select.poll()
        for descr, (_callback, mask) in self._subs.items():
            p.register(
                descr,
                (select.POLLIN if mask & _READ else 0) | (select.POLLOUT if mask & _WRITE else 0),
            )
        for descr, ev in p.poll(0):
            sub = self._subs.get(descr)
            if sub is None:
                continue  # unsubscribed by an earlier event of this round
            event = (_READ if ev & (select.POLLIN | select.POLLERR | select.POLLHUP) else 0) | (
                _WRITE if ev & select.POLLOUT else 0
            )
            try:
                sub[0](descr, event)
            except Exception:
                log.exception("raft socket event failed")

    # -- internals ---------------------------------------------------------------------------

    def _changed(self) -> None:
        if self._loop is None:
            return  # before attach: registered there
        if self.on_loop():
            self._sync()
        else:
            self._loop.call_soon_threadsafe(self._reconcile)

    def _reconcile(self) -> None:
        with self._lock:
            self._sync()

    def _sync(self) -> None:
        """Make what the loop watches match the subscriptions, then close the sockets left
        for the loop (on the loop's thread, under the lock)."""
        loop = self._loop
        if loop is None:
            return
        registered = self._registered
        for descr in set(registered) | set(self._subs):
            old = registered.get(descr, 0)
            sub = self._subs.get(descr)
            new = 0 if sub is None else sub[1]
            if new == old:
                continue
            if new & _READ and not old & _READ:
                loop.add_reader(descr, self._fire, descr, _READ)
            elif old & _READ and not new & _READ:
                loop.remove_reader(descr)
            if new & _WRITE and not old & _WRITE:
                loop.add_writer(descr, self._fire, descr, _WRITE)
            elif old & _WRITE and not new & _WRITE:
                loop.remove_writer(descr)
            if new:
                registered[descr] = new
            else:
                del registered[descr]
        graveyard, self._graveyard = self._graveyard, []
        for sock in graveyard:
            with contextlib.suppress(OSError):
                sock.close()

    def _fire(self, descr: int, event: int) -> None:
        with self._lock:
            sub = self._subs.get(descr)
            if sub is not None:
                try:
                    sub[0](descr, event)
                except Exception:
                    log.exception("raft socket event failed")
        self._on_turn()
        self._kick()


class KickNotifier:
    """Stands in for pysyncobj's PipeNotifier on the loop: a proposal made on the loop
    schedules a tick directly instead of writing a byte to a pipe."""

    __slots__ = ("_poller",)

    def __init__(self, poller: LoopPoller) -> None:
        self._poller = poller

    def notify(self) -> None:
        self._poller.kick()


def _nothing() -> None:
    return None
