"""The node's HTTP front door: the hot routes on a lean HTTP/1.1 path, everything else aiohttp's.

Workers' heartbeats, registrations and checkpoint acks are nearly every request a leader
serves (docs/operations.md, "Sizing one cluster"), and aiohttp's request machinery around
each costs more than the heartbeat handler itself (docs/benchmarks.md). This protocol reads
them with llhttp, the parser aiohttp's C extension is built on, through `httptools`, and
answers them through the handler functions aiohttp's routes call
(`worker_routes.register`, `worker_routes.heartbeat_now`, `worker_routes.checkpoints`),
with the same error mapping, CORS headers and request counts (`answers.error_response`,
`app.finish`), all in `coordinator/service/http/`.

It serves a request only when `front_reader.RequestReader` recognises it as exactly a hot
one. At the first request that is anything else (a GET, chunked, malformed, too large) it
hands the connection to aiohttp's `RequestHandler` with every byte it has read, untouched,
so each answer aiohttp gives is unchanged.

Invariants: one request at a time per connection, answers in order (pipelined requests
wait in the buffer, which is bounded: reading pauses past `BUFFER_BYTES_MAX`); a connection
serves at most `REQUESTS_PER_TURN_MAX` of its buffered requests per turn of the event loop,
then waits for the next turn, so a client pipelining many requests does not hold the loop
while other connections' heartbeats (and Raft, on the same loop) wait unread; a connection
idle past `IDLE_TIMEOUT_S` or part-way through a request past `REQUEST_READ_TIMEOUT_S` is
closed (the site's monotonic clock, `shared.clock`, injectable); on shutdown, requests in
flight are answered within the grace. Every hot request is admitted by its class first
(`admission_load.py`: heartbeats and registrations are liveness, never shed for lag;
checkpoint acks are writes). The aiohttp internals the hand-over needs are
`front_aiohttp.py`'s, named there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import cast

from aiohttp import web

from coordinator.service.admission_load import RequestClass
from coordinator.service.event_metrics import FrontDoorCounts
from coordinator.service.front_aiohttp import HandOverSite
from coordinator.service.front_reader import (
    BODY_BYTES_MAX,
    HEAD_BYTES_MAX,
    HEADERS_MAX,
    HOT_ROUTES,
    Head,
    NotHot,
    RequestReader,
    parse_head,
)
from coordinator.service.http.answers import error_response
from coordinator.service.http.app import LOAD_GATE_KEY, finish
from coordinator.service.http.context import NODE_KEY
from coordinator.service.http.request import ApiRequest, PlainRequest
from coordinator.service.http.worker_routes import checkpoints, heartbeat_now, register
from shared.clock import Clock
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "BODY_BYTES_MAX",
    "HEADERS_MAX",
    "HEAD_BYTES_MAX",
    "HOT_ROUTES",
    "FrontDoorSite",
    "NotHot",
    "RequestReader",
    "parse_head",
]

log = logging.getLogger(__name__)

# Bytes a connection may hold while one of its requests is in flight (pipelined requests
# behind it); past it the connection stops reading until the answer is out.
BUFFER_BYTES_MAX = 64 * 1024
# aiohttp's keep-alive default: an idle connection is closed after this.
IDLE_TIMEOUT_S = 75.0
# A request whose head or body has begun to arrive but not finished within this is dropped.
REQUEST_READ_TIMEOUT_S = 30.0
SWEEP_PERIOD_S = 5.0
# Buffered requests one connection serves before the loop's other ready callbacks run: a
# flood pipelined on many connections then costs a heartbeat on another connection one
# request per flooding connection, not every request they have buffered.
REQUESTS_PER_TURN_MAX = 1


class _DateHeader:
    """The `Date` header's value, formatted once per second (a timestamp, no decision)."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = SYSTEM_CLOCK.wall_ms() // 1000
        if second != self._second:
            self._second, self._text = second, formatdate(second, usegmt=True)
        return self._text


_DATE = _DateHeader()


def response_bytes(response: web.Response, close: bool) -> bytes:
    """`response` on the wire as HTTP/1.1, with its length, the date and, when the connection
    ends after it, `Connection: close`."""
    body = response.body
    if not isinstance(body, bytes):
        raise TypeError("a hot route answers a bytes body")
    lines = [f"HTTP/1.1 {response.status} {response.reason}"]
    for name, value in response.headers.items():
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name} holds a line break")
        if name.lower() not in ("content-length", "connection", "date"):
            lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    lines.append(f"Date: {_DATE.now()}")
    if close:
        lines.append("Connection: close")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + body


_INTERNAL_BODY = b'{"error":"internal","message":"internal error"}'
_INTERNAL = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_INTERNAL_BODY)
) + _INTERNAL_BODY


class FrontDoor(asyncio.Protocol):
    """One client connection, until it is closed or handed to aiohttp."""

    def __init__(self, site: FrontDoorSite) -> None:
        self._site = site
        self._loop = site.loop
        self._clock = site.clock
        self._buf = bytearray()  # the bytes of the requests not yet served, as they arrived
        self._reader = RequestReader(site.body_bytes_max)
        self._transport: asyncio.Transport | None = None
        self._busy = False  # a request is being answered
        self._deferred = False  # served its share of this loop turn: the rest waits a turn
        self._closing = False  # close once the request in flight is answered
        self._eof = False  # the client sends no more: close once what it sent is answered
        self._reading_paused = False
        self._writing_paused = False
        self._since_ms = self._clock.monotonic_ms()  # start of the idle spell or of the request

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._site.connections.add(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._site.connections.discard(self)
        self._transport = None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._next()

    def eof_received(self) -> bool:
        # The client will send no more: answer what it sent (its requests may still wait
        # their turns), then close.
        self._eof = True
        if not self._busy:
            self._next()
        return self._transport is not None  # still ours: shut once answered

    def data_received(self, data: bytes) -> None:
        if not self._buf and not self._busy:
            self._since_ms = self._clock.monotonic_ms()
        self._buf += data
        self._next()

    # -- requests ----------------------------------------------------------------------------

    def _next(self) -> None:
        self._serve_buffered()
        self._flow()

    def _serve_buffered(self) -> None:
        """Serve the requests the buffer holds, one at a time and at most
        REQUESTS_PER_TURN_MAX in this turn of the loop (the rest in the next turns); hand the
        connection over at the first one that is not a hot request."""
        served = 0
        while (
            not self._busy
            and not self._deferred
            and not self._writing_paused
            and self._transport is not None
        ):
            if not self._buf:
                if self._closing or self._eof:
                    self._shut()
                return
            if served == REQUESTS_PER_TURN_MAX:
                self._deferred = True
                self._loop.call_soon(self._next_turn)
                return
            served += 1
            try:
                request = self._reader.take(self._buf, self._eof)
            except NotHot:
                self._hand_over()
                return
            if request is None:
                return
            self._serve(*request)

    def _next_turn(self) -> None:
        self._deferred = False
        self._next()

    def _flow(self) -> None:
        """Bound what waits in the buffer: while no request can be served (one is in flight,
        or the client is not reading its answers) reading pauses past BUFFER_BYTES_MAX. When
        a request can be served the buffer is bounded already: a head within HEAD_BYTES_MAX
        and a body within body_bytes_max, or it is handed over."""
        transport = self._transport
        if transport is None:
            return
        stalled = self._busy or self._writing_paused or self._deferred
        if stalled and not self._reading_paused and len(self._buf) > BUFFER_BYTES_MAX:
            transport.pause_reading()
            self._reading_paused = True
        elif not stalled and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def _serve(self, head: Head, body: bytes) -> None:
        site = self._site
        site.counts.served += 1
        request = PlainRequest(
            site.app,
            "POST",
            head.path,
            {} if head.worker_id is None else {"worker_id": head.worker_id},
            head.headers,
            body,
        )
        self._closing = self._closing or head.close
        # Admitted by class like aiohttp's requests (http/app.py's shed_middleware): the
        # liveness class has a bound of its own, which reads and writes never take.
        gate = site.app[LOAD_GATE_KEY]
        cls = RequestClass.WRITES if head.route == HOT_ROUTES[2] else RequestClass.LIVENESS
        if not gate.enter(cls):
            self._answer(request, error_response(request, gate.refusal(cls)), head.route)
            return
        if head.worker_id is not None:  # a heartbeat: answered here, no task
            try:
                response = heartbeat_now(request)
            except Exception as exc:
                response = error_response(request, exc)
            gate.leave(cls)
            self._answer(request, response, head.route)
            return
        handler = register if head.route == HOT_ROUTES[0] else checkpoints
        self._busy = True
        task = self._loop.create_task(self._serve_async(request, handler, head.route, cls))
        site.tasks.add(task)
        task.add_done_callback(site.tasks.discard)

    async def _serve_async(
        self,
        request: PlainRequest,
        handler: Callable[[ApiRequest], Awaitable[web.Response]],
        route: str,
        cls: RequestClass,
    ) -> None:
        try:
            response = await handler(request)
        except Exception as exc:
            response = error_response(request, exc)
        finally:
            self._site.app[LOAD_GATE_KEY].leave(cls)
        self._busy = False
        self._answer(request, response, route)
        self._next()

    def _answer(self, request: PlainRequest, response: web.Response, route: str) -> None:
        self._since_ms = self._clock.monotonic_ms()
        transport = self._transport
        if transport is None:
            return  # the client left; the command (if any) still committed or failed alone
        # After the client's end, the last of what it sent closes the connection.
        close = self._closing or (self._eof and not self._buf)
        try:
            data = response_bytes(finish(request, response, route), close)
        except Exception:
            log.exception("could not encode the answer to POST %s", request.path)
            data, close = _INTERNAL, True
        transport.write(data)
        if close:
            self._shut()

    def _shut(self) -> None:
        transport, self._transport = self._transport, None
        self._buf.clear()
        if transport is not None:
            transport.close()

    def _hand_over(self) -> None:
        """From now on the connection is aiohttp's, starting with the bytes not yet served."""
        transport = self._transport
        if transport is None:
            return
        self._site.connections.discard(self)
        self._site.counts.handed_over += 1
        self._transport = None
        data = bytes(self._buf)
        self._buf.clear()
        self._site.hand_over(transport, data, resume=self._reading_paused)

    # -- the site's sweep --------------------------------------------------------------------

    def expired(self, now_ms: int) -> bool:
        if self._busy:
            return False
        limit_s = REQUEST_READ_TIMEOUT_S if self._buf else IDLE_TIMEOUT_S
        return now_ms - self._since_ms > limit_s * 1000

    def close(self) -> None:
        """Close now if idle, else once the request in flight is answered."""
        self._closing = True
        if not self._busy:
            self._shut()


class FrontDoorSite(HandOverSite):
    """aiohttp's TCPSite with the front door as each connection's first protocol. The
    runner's cleanup stops it like any site: no new connections, idle ones closed, those
    with a request in flight closed once it is answered (within the grace)."""

    __slots__ = (
        "_grace_s",
        "_host",
        "_port",
        "_sweeper",
        "app",
        "body_bytes_max",
        "clock",
        "connections",
        "counts",
        "loop",
        "tasks",
    )

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        body_bytes_max: int,
        ssl_context: ssl.SSLContext | None = None,
        grace_s: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._grace_s = grace_s
        self.body_bytes_max = min(body_bytes_max, BODY_BYTES_MAX)
        self.app = runner.app
        self.counts: FrontDoorCounts = self.app[NODE_KEY].metrics.front_door
        self.loop = asyncio.get_running_loop()
        self.clock = clock
        self.connections: set[FrontDoor] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port} (front door)"

    async def start(self) -> None:
        await super().start()
        await self.listen(lambda: FrontDoor(self), self._host, self._port)
        self._sweeper = self.loop.create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_PERIOD_S)
            self.sweep()

    def sweep(self) -> None:
        """Close the connections idle or half-read past their limit, by the site's clock."""
        now_ms = self.clock.monotonic_ms()
        for conn in [c for c in self.connections if c.expired(now_ms)]:
            conn.close()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await super().stop()
        for conn in list(self.connections):
            conn.close()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=self._grace_s)
