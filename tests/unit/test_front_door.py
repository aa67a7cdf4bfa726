"""The front door's own bounds and hand-over (coordinator/service/front.py), in this process.

A `FrontDoorSite` on a loopback port serves an app whose node is a fake that knows no leader,
so every hot request answers 503 (`no leader known`) through the real handlers and error
mapping, and every other request is aiohttp's (one GET route). What the answers are is
tests/integration/test_front_door.py's subject; here: what the front door itself keeps --
the head's strict reading, the buffer bound while a client is not reading, and the time
bounds on idle and half-sent requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.service import front
from coordinator.service.admission_load import LoadGate, RequestClass
from coordinator.service.event_metrics import FrontDoorCounts
from coordinator.service.http.app import LOAD_GATE_KEY
from coordinator.service.http.context import NODE_KEY, ORIGINS_KEY
from replication.log import RaftRole
from shared.clock import Clock, FakeClock
from shared.ports import free_ports
from shared.system_clock import SYSTEM_CLOCK
from testkit.wait import wait_until_async

HEARTBEAT = (
    b"POST /v1/workers/w1/heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)
WAIT_S = 10.0


class _Counts:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    def inc(self, route: str, method: str, status: int) -> None:
        self.seen.append((route, method, status))


def _fake_node() -> SimpleNamespace:
    info = SimpleNamespace(role=RaftRole.FOLLOWER, ready=False, leader=None)
    return SimpleNamespace(
        is_ready_leader=False,
        halted=None,
        node_id="n1",
        leader_info=lambda: info,
        metrics=SimpleNamespace(requests=_Counts(), front_door=FrontDoorCounts()),
    )


@pytest.fixture
async def site() -> AsyncIterator[front.FrontDoorSite]:
    async with _site() as door:
        yield door


@contextlib.asynccontextmanager
async def _site(clock: Clock = SYSTEM_CLOCK) -> AsyncIterator[front.FrontDoorSite]:
    app = web.Application()
    app[NODE_KEY] = _fake_node()  # type: ignore[assignment]
    app[ORIGINS_KEY] = frozenset()
    app[LOAD_GATE_KEY] = LoadGate(
        in_flight_max=dict.fromkeys(RequestClass, 8), shed_lag_ms={}, retry_after_s=1
    )

    async def ping(_request: web.Request) -> web.Response:
        return web.Response(text="pong")

    app.router.add_get("/ping", ping)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    (port,) = free_ports(1)
    door = front.FrontDoorSite(
        runner, "127.0.0.1", port, body_bytes_max=1024, grace_s=1.0, clock=clock
    )
    await door.start()
    try:
        yield door
    finally:
        await runner.cleanup()


async def _connect(site: front.FrontDoorSite) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", site._port)


def test_parse_head_reads_only_strict_hot_requests() -> None:
    good = HEARTBEAT.split(b"\r\n\r\n")[0]
    head = front.parse_head(good, 1024)
    assert head is not None
    assert (head.route, head.worker_id, head.length, head.close) == (
        "/v1/workers/{worker_id}/heartbeat",
        "w1",
        2,
        False,
    )
    assert head.headers["authorization"] == "Bearer t"
    register = front.parse_head(b"POST /v1/workers HTTP/1.1\r\nContent-Length: 0", 1024)
    assert register is not None and register.route == "/v1/workers"
    closing = front.parse_head(good + b"\r\nConnection: keep-alive, close", 1024)
    assert closing is not None and closing.close
    refused = [
        good.replace(b"POST", b"GET"),
        good.replace(b"HTTP/1.1", b"HTTP/1.0"),
        good.replace(b"/heartbeat", b"/heartbeat?x=1"),
        good.replace(b"/w1/", b"/w%31/"),
        good.replace(b"POST ", b"POST  "),
        # llhttp reads these, the front door serves only the plain request line:
        good.replace(b" HTTP/1.1", b"  HTTP/1.1"),
        b"\r\n" + good,
        good.replace(b"HTTP/1.1", b"HTTP/2.0"),
        good.replace(b"POST /v1", b"POST http://x/v1"),
        good + b"\r\nTransfer-Encoding: chunked",
        good + b"\r\nExpect: 100-continue",
        good + b"\r\nUpgrade: websocket",
        good + b"\r\nConnection: upgrade",
        good + b"\r\nContent-Length: 2",  # a second one
        good.replace(b"Content-Length: 2", b"Content-Length: +2"),
        good.replace(b"Content-Length: 2", b"Content-Length: 2000"),  # over the body bound
        good.replace(b"Content-Length: 2", b"Transfer-Encoding: x"),
        good.replace(b"Content-Length: 2", b"X-No-Length: 1"),
        good + b"\r\nX-A : 1",
        good + b"\r\n folded",
        good + b"\r\nX-A: \x01",
        f"{good.decode()}\r\nX-A: caf\u00e9".encode(),
        good + b"\r\nX-A: 1\nX-B: 2",
        good + b"".join(b"\r\nX-%d: 1" % i for i in range(front.HEADERS_MAX)),
    ]
    for text in refused:
        assert front.parse_head(text, 1024) is None, text


def test_reader_takes_requests_whole_however_the_bytes_arrive() -> None:
    """Two pipelined heartbeats and a GET, fed to one reader a byte at a time: each hot
    request is taken once it is whole, with its body, and the GET raises NotHot at its first
    line with the buffer holding its bytes as they came (what a hand-over gives aiohttp)."""
    data = HEARTBEAT + HEARTBEAT.replace(b"/w1/", b"/w2/") + PING
    reader, buf, taken = front.RequestReader(1024), bytearray(), []
    with pytest.raises(front.NotHot):
        for byte in data:
            buf.append(byte)
            got = reader.take(buf, eof=False)
            if got is not None:
                taken.append((got[0].worker_id, got[1]))
    assert taken == [("w1", b"{}"), ("w2", b"{}")]
    assert buf == PING[: len(buf)] and len(buf) > 0
    whole = front.RequestReader(1024)
    got = whole.take(bytearray(HEARTBEAT), eof=False)
    assert got is not None and got[0] == front.parse_head(HEARTBEAT.split(b"\r\n\r\n")[0], 1024)
    cut = front.RequestReader(1024)  # a body cut short by the end of the stream
    assert cut.take(bytearray(HEARTBEAT[:-1]), eof=False) is None
    with pytest.raises(front.NotHot):
        cut.take(bytearray(HEARTBEAT[:-1]), eof=True)


async def test_hot_requests_then_a_cold_one_on_one_connection(site: front.FrontDoorSite) -> None:
    reader, writer = await _connect(site)
    writer.write(HEARTBEAT + HEARTBEAT + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while data.count(b"HTTP/1.1 ") < 3 or not data.endswith(b"pong"):
        chunk = await asyncio.wait_for(reader.read(65536), WAIT_S)
        assert chunk, data
        data += chunk
    assert data.count(b"HTTP/1.1 503 ") == 2 and b"no leader known" in data
    assert data.count(b"Retry-After: 1") == 2
    assert b"HTTP/1.1 200 OK" in data.split(b"HTTP/1.1 503")[-1]
    counts = site.app[NODE_KEY].metrics.requests.seen  # type: ignore[attr-defined]
    assert counts == [("/v1/workers/{worker_id}/heartbeat", "POST", 503)] * 2
    assert not site.connections  # the connection is aiohttp's now
    assert (site.counts.served, site.counts.handed_over) == (2, 1)
    writer.close()


async def test_a_full_class_is_shed_with_retry_after_and_counts_stay_balanced(
    site: front.FrontDoorSite,
) -> None:
    """Hot requests are admitted by class: heartbeats served leave the liveness count as it
    was; with the class full the next is answered 503 overloaded, never handled."""
    gate = site.app[LOAD_GATE_KEY]
    reader, writer = await _connect(site)

    async def answers(n: int) -> bytes:
        data = b""
        while data.count(b"HTTP/1.1 ") < n or not data.endswith(b"}"):
            chunk = await asyncio.wait_for(reader.read(65536), WAIT_S)
            assert chunk, data
            data += chunk
        return data

    writer.write(HEARTBEAT)
    assert b"no leader known" in await answers(1)  # handled: the fake node leads nobody
    assert gate.in_flight[RequestClass.LIVENESS] == 0
    gate.in_flight[RequestClass.LIVENESS] = 8  # the class is full
    writer.write(HEARTBEAT)
    data = await answers(1)
    assert b"HTTP/1.1 503 " in data and b'"overloaded"' in data and b"Retry-After: 1" in data
    assert gate.shed[RequestClass.LIVENESS] == 1
    assert gate.in_flight[RequestClass.LIVENESS] == 8
    writer.close()


async def test_buffer_is_bounded_while_the_client_reads_no_answer(
    site: front.FrontDoorSite,
) -> None:
    """A client that pipelines requests and never reads the answers: once the socket's send
    buffer is full the front door stops serving, and past BUFFER_BYTES_MAX stops reading."""
    reader, writer = await _connect(site)
    await wait_until_async(lambda: site.connections, "the connection is accepted")
    (conn,) = site.connections
    conn.pause_writing()  # what the transport says when the client reads nothing
    writer.write(HEARTBEAT * (4 * front.BUFFER_BYTES_MAX // len(HEARTBEAT)))
    await wait_until_async(lambda: conn._reading_paused, "reading pauses")
    held = len(conn._buf)
    assert front.BUFFER_BYTES_MAX < held <= front.BUFFER_BYTES_MAX + 256 * 1024
    assert conn._transport is not None and not conn._transport.is_reading()
    for _ in range(5):  # loop passes: the rest of the pipelined bytes are waiting unread
        await asyncio.sleep(0)
    assert len(conn._buf) == held  # nothing more is read
    conn.resume_writing()  # the client reads again: everything is answered
    want = 4 * front.BUFFER_BYTES_MAX // len(HEARTBEAT)
    data = bytearray()
    while data.count(b"HTTP/1.1 503 ") < want:
        chunk = await asyncio.wait_for(reader.read(1 << 20), WAIT_S)
        assert chunk
        data += chunk
    assert data.count(b"HTTP/1.1 503 ") == want and not conn._reading_paused
    writer.close()


class _Wire:
    """A connection's transport that records what the front door writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _door(site: front.FrontDoorSite) -> tuple[front.FrontDoor, _Wire]:
    wire = _Wire()
    door = front.FrontDoor(site)
    door.connection_made(wire)  # type: ignore[arg-type]
    return door, wire


async def test_a_pipelining_connection_serves_its_share_per_turn_and_others_get_theirs(
    site: front.FrontDoorSite,
) -> None:
    """A client with many requests pipelined is served REQUESTS_PER_TURN_MAX of them per
    turn of the loop: a heartbeat arriving on another connection meanwhile is answered in
    its own first turn, not after the whole pipeline."""
    flood, flood_wire = _door(site)
    worker, worker_wire = _door(site)
    pipelined = 6 * front.REQUESTS_PER_TURN_MAX
    flood.data_received(HEARTBEAT * pipelined)
    assert len(flood_wire.written) == front.REQUESTS_PER_TURN_MAX
    worker.data_received(HEARTBEAT)
    assert len(worker_wire.written) == 1  # not behind the flood's pipeline
    assert len(flood_wire.written) == front.REQUESTS_PER_TURN_MAX
    turns = 0
    while len(flood_wire.written) < pipelined:
        await asyncio.sleep(0)
        turns += 1
        assert len(flood_wire.written) <= front.REQUESTS_PER_TURN_MAX * (turns + 1)
    assert turns == pipelined // front.REQUESTS_PER_TURN_MAX - 1
    assert all(b"no leader known" in w for w in flood_wire.written)
    assert not flood_wire.closed


async def test_a_client_that_ends_with_requests_waiting_their_turn_gets_them_all(
    site: front.FrontDoorSite,
) -> None:
    door, wire = _door(site)
    pipelined = 3 * front.REQUESTS_PER_TURN_MAX + 1
    door.data_received(HEARTBEAT * pipelined)
    assert door.eof_received()  # kept open: the transport is not closed under the waiting
    await wait_until_async(lambda: wire.closed, "every request answered, then the close")
    assert len(wire.written) == pipelined
    assert b"Connection: close" in wire.written[-1]


async def test_idle_and_half_sent_requests_are_closed(
    site: front.FrontDoorSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(front, "IDLE_TIMEOUT_S", 0.3)
    monkeypatch.setattr(front, "REQUEST_READ_TIMEOUT_S", 0.6)
    site._sweeper.cancel()  # type: ignore[union-attr]
    monkeypatch.setattr(front, "SWEEP_PERIOD_S", 0.05)
    site._sweeper = asyncio.get_running_loop().create_task(site._sweep_forever())
    loop = asyncio.get_running_loop()
    for start in (b"", HEARTBEAT[:40], HEARTBEAT[:-1]):
        reader, writer = await _connect(site)
        began = loop.time()
        writer.write(start)
        assert await asyncio.wait_for(reader.read(), WAIT_S) == b""  # closed, no answer
        limit = front.REQUEST_READ_TIMEOUT_S if start else front.IDLE_TIMEOUT_S
        assert loop.time() - began >= limit - 0.05
        writer.close()
    assert not site.connections


async def test_the_sweep_reads_the_sites_clock() -> None:
    """Idle and half-sent limits, measured on an injected clock: nothing closes at the
    limit, each closes one millisecond past its own."""
    clock = FakeClock()
    async with _site(clock) as site:
        site._sweeper.cancel()  # type: ignore[union-attr]  # only the test sweeps
        idle_reader, idle_writer = await _connect(site)
        half_reader, half_writer = await _connect(site)
        half_writer.write(HEARTBEAT[:40])
        await wait_until_async(
            lambda: len(site.connections) == 2 and any(c._buf for c in site.connections),
            "both connections are accepted and one holds half a request",
        )
        read_ms = int(front.REQUEST_READ_TIMEOUT_S * 1000)
        idle_ms = int(front.IDLE_TIMEOUT_S * 1000)
        clock.advance(read_ms)
        site.sweep()
        assert len(site.connections) == 2
        clock.advance(1)
        site.sweep()
        assert await asyncio.wait_for(half_reader.read(), WAIT_S) == b""
        (idle,) = site.connections
        assert not idle._buf
        clock.advance(idle_ms - read_ms - 1)
        site.sweep()
        assert site.connections == {idle}
        clock.advance(1)
        site.sweep()
        assert await asyncio.wait_for(idle_reader.read(), WAIT_S) == b""
        assert not site.connections
        idle_writer.close()
        half_writer.close()


PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_a_hand_over_while_reading_is_paused_reads_on(
    site: front.FrontDoorSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cold request is handed over while the front door has stopped reading: aiohttp
    answers it and the requests still unread in the socket behind it. Few and small, so
    aiohttp's own flow control never pauses and resumes reading for it."""
    monkeypatch.setattr(front, "BUFFER_BYTES_MAX", len(HEARTBEAT))
    reader, writer = await _connect(site)
    await wait_until_async(lambda: site.connections, "the connection is accepted")
    (conn,) = site.connections
    conn.pause_writing()
    writer.write(HEARTBEAT * 2 + PING)
    await wait_until_async(lambda: conn._reading_paused, "reading pauses")
    behind = 5
    writer.write(HEARTBEAT * behind)  # stays in the socket: the front door reads no more
    await writer.drain()
    conn.resume_writing()
    want = 2 + 1 + behind
    data = bytearray()
    while data.count(b"HTTP/1.1 ") < want:
        chunk = await asyncio.wait_for(reader.read(1 << 20), WAIT_S)
        assert chunk, data.count(b"HTTP/1.1 ")
        data += chunk
    assert b"pong" in data and site.counts.handed_over == 1
    writer.close()


# A body about as long as the head, so that cuts land in bodies as often as in heads.
_BODY = b'{"incarnation":1,"load":0.25,"partitions":{"3":{"epoch":2,"offset":77}}}' * 2
LONG_HEARTBEAT = (
    b"POST /v1/workers/w1/heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)


@given(st.binary(max_size=600))
def test_parse_head_never_raises(head: bytes) -> None:
    """Any bytes at all: a Head or None (aiohttp then reads them), never an exception."""
    parsed = front.parse_head(head, 1024)
    assert parsed is None or parsed.length <= 1024


@settings(max_examples=60, deadline=None)
@given(
    hot=st.integers(min_value=1, max_value=6),
    cold_at=st.none() | st.integers(min_value=0, max_value=6),
    cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=16),
)
def test_answers_do_not_depend_on_how_the_bytes_arrive(
    hot: int, cold_at: int | None, cuts: list[int]
) -> None:
    """The same requests sent whole or cut into any pieces get the same answers in order:
    `hot` heartbeats (503s through the front door) with a GET (aiohttp's 200 pong) at
    position `cold_at`, after which the connection and everything on it is aiohttp's."""
    requests = [LONG_HEARTBEAT] * hot
    if cold_at is not None:
        requests.insert(min(cold_at, hot), PING)
    data = b"".join(requests)
    pieces, at = [], 0
    for cut in cuts:
        if at >= len(data):
            break
        pieces.append(data[at : at + cut])
        at += cut
    pieces.append(data[at:])

    async def run() -> list[bytes]:
        async with _site() as door:
            reader, writer = await _connect(door)
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            got = b""
            while got.count(b"HTTP/1.1 ") < len(requests) or (
                cold_at is not None and b"pong" not in got
            ):
                chunk = await asyncio.wait_for(reader.read(65536), WAIT_S)
                assert chunk, got
                got += chunk
            writer.close()
        return re.findall(rb"HTTP/1\.1 (\d{3}) ", got)

    statuses = asyncio.run(run())
    # Before the GET: the front door's 503s; the GET: aiohttp's pong; after it: aiohttp's
    # answers too (this app has no heartbeat route there: 404).
    split = len(requests) if cold_at is None else requests.index(PING)
    want = [b"503"] * split + [b"200"] * (cold_at is not None)
    want += [b"404"] * (len(requests) - len(want))
    assert statuses == want
