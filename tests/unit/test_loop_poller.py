"""`replication.poller.LoopPoller`: pysyncobj's poller interface on a real asyncio loop, with a
real socket pair. What pysyncobj and the Raft transport rely on: subscriptions made before
the loop is known take effect at `attach`; a changed mask adds or drops only the write
interest; `unsubscribe` stops the events; a failing callback is logged and the tick still
comes; `poll` never waits. From another thread (the stall guard), registrations and closes
wait for the loop, and `dispatch_ready` delivers events itself."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from pysyncobj.poller import POLL_EVENT_TYPE

from replication.poller import LoopPoller
from testkit.wait import wait_until_async

READ, WRITE, ERROR = POLL_EVENT_TYPE.READ, POLL_EVENT_TYPE.WRITE, POLL_EVENT_TYPE.ERROR
WAIT_S = 5.0


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[int, int]] = []
        self.kicks = 0
        self.turns = 0

    def on_event(self, descr: int, event: int) -> None:
        self.events.append((descr, event))

    def kick(self) -> None:
        self.kicks += 1

    def turn(self) -> None:
        self.turns += 1


def new_poller() -> LoopPoller:
    return LoopPoller(threading.Lock())


Attached = tuple[LoopPoller, "Recorder", asyncio.AbstractEventLoop]


def attach(poller: LoopPoller, rec: Recorder) -> asyncio.AbstractEventLoop:
    loop = asyncio.get_running_loop()
    poller.attach(loop, rec.kick, rec.turn)
    return loop


def off_loop(fn) -> None:  # type: ignore[no-untyped-def]
    """Run `fn` on another thread (as the stall guard does) and wait for it."""
    t = threading.Thread(target=fn)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive()


async def passes(n: int = 5) -> None:
    """Let the loop run `n` passes: each polls for I/O without waiting (a task is ready), so
    an event already due is delivered within them."""
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.fixture
async def attached() -> AsyncIterator[tuple[LoopPoller, Recorder, asyncio.AbstractEventLoop]]:
    rec = Recorder()
    poller = new_poller()
    loop = attach(poller, rec)
    try:
        yield poller, rec, loop
    finally:
        poller.close()


async def test_a_subscription_made_before_attach_fires_after_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    rec = Recorder()
    poller = new_poller()
    poller.subscribe(a.fileno(), rec.on_event, READ | ERROR)
    b.send(b"x")
    await passes()
    assert rec.events == []  # no loop yet: nothing can fire
    attach(poller, rec)
    try:
        await wait_until_async(lambda: rec.events, "the read event", WAIT_S)
        assert rec.events[0] == (a.fileno(), READ)
        assert rec.kicks >= 1 and rec.turns >= 1  # every event: a tick, and the loop is alive
    finally:
        poller.close()


async def test_write_interest_follows_the_mask_and_unsubscribe_stops_events(
    pair: tuple[socket.socket, socket.socket], attached: Attached
) -> None:
    a, _b = pair
    poller, rec, _loop = attached
    poller.subscribe(a.fileno(), rec.on_event, READ | WRITE | ERROR)
    await wait_until_async(lambda: (a.fileno(), WRITE) in rec.events, "writable", WAIT_S)
    poller.subscribe(a.fileno(), rec.on_event, READ | ERROR)  # drop write interest
    await passes()
    rec.events.clear()
    await passes()
    assert rec.events == []  # a writable socket no longer fires once WRITE is dropped
    poller.subscribe(a.fileno(), rec.on_event, READ | WRITE | ERROR)
    await wait_until_async(lambda: rec.events, "writable again", WAIT_S)
    poller.unsubscribe(a.fileno())
    await passes()
    rec.events.clear()
    await passes()
    assert rec.events == []


async def test_an_error_only_subscription_still_learns_of_a_closed_peer(
    pair: tuple[socket.socket, socket.socket], attached: Attached
) -> None:
    a, b = pair
    poller, rec, _loop = attached
    poller.subscribe(a.fileno(), rec.on_event, ERROR)
    b.close()  # the peer goes away: shows as readable, and recv meets the end
    await wait_until_async(lambda: rec.events, "the peer's close", WAIT_S)
    assert a.recv(16) == b""


async def test_a_failing_callback_is_logged_and_the_tick_still_comes(
    pair: tuple[socket.socket, socket.socket],
    attached: Attached,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = pair
    poller, rec, _loop = attached
    calls = 0

    def boom(descr: int, event: int) -> None:
        nonlocal calls
        calls += 1
        a.recv(16)
        raise RuntimeError("callback failed")

    poller.subscribe(a.fileno(), boom, READ)
    with caplog.at_level(logging.ERROR, logger="replication.poller"):
        b.send(b"x")
        await wait_until_async(lambda: calls == 1 and rec.kicks == 1, "the failing event", WAIT_S)
    assert "raft socket event failed" in caplog.text
    b.send(b"y")  # the subscription survives the failure
    await wait_until_async(lambda: calls == 2, "the next event", WAIT_S)


async def test_poll_never_waits_and_close_drops_every_subscription(
    pair: tuple[socket.socket, socket.socket], attached: Attached
) -> None:
    a, b = pair
    poller, rec, loop = attached
    started = time.monotonic()
    poller.poll(5.0)
    assert time.monotonic() - started < 1.0
    poller.subscribe(a.fileno(), rec.on_event, READ | WRITE)
    poller.subscribe(b.fileno(), rec.on_event, READ)
    poller.close()
    assert not loop.remove_reader(a.fileno())  # nothing left registered
    assert not loop.remove_writer(a.fileno())
    assert not loop.remove_reader(b.fileno())


async def test_off_the_loop_registrations_and_closes_wait_for_the_loop(
    attached: Attached,
) -> None:
    """The guard thread subscribes and releases; the loop applies both on its next pass, and
    closes the released socket only after it stopped watching it."""
    poller, rec, loop = attached
    c, d = socket.socketpair()
    c.setblocking(False)
    try:
        off_loop(lambda: poller.subscribe(c.fileno(), rec.on_event, READ))
        d.send(b"x")
        await wait_until_async(
            lambda: (c.fileno(), READ) in rec.events, "the event of a guard subscription", WAIT_S
        )
        assert c.recv(16) == b"x"
        fd = c.fileno()

        def drop() -> None:
            poller.unsubscribe(fd)
            poller.release(c)

        off_loop(drop)
        assert c.fileno() == fd  # not closed yet: the loop may still watch it
        await wait_until_async(lambda: c.fileno() == -1, "the loop to close it", WAIT_S)
        assert not loop.remove_reader(fd)
        assert d.recv(16) == b""  # the peer was told at once (shutdown), then closed
    finally:
        c.close()
        d.close()


async def test_dispatch_ready_delivers_what_the_loop_has_not(
    pair: tuple[socket.socket, socket.socket], attached: Attached
) -> None:
    """While the loop is stuck, the guard polls the subscribed sockets itself."""
    a, b = pair
    poller, rec, _loop = attached
    poller.subscribe(a.fileno(), rec.on_event, READ | ERROR)
    poller.subscribe(b.fileno(), rec.on_event, WRITE)
    b.send(b"x")  # in a's buffer at once; the loop runs nothing until this test awaits

    def guard() -> None:
        with poller._lock:
            poller.dispatch_ready()

    off_loop(guard)
    assert sorted(rec.events) == sorted([(a.fileno(), READ), (b.fileno(), WRITE)])
