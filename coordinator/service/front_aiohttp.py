"""The aiohttp internals the front door relies on, in one place, each named with its reason.

aiohttp has no public way to take a connection over part-way, nor to add a site that listens
with another protocol, so `front.py` goes through this module for both and touches no
private name of aiohttp itself. `INTERNALS` lists every name used below that aiohttp does
not document; `setup.cfg` pins aiohttp to the minor series they were checked against, and
tests/unit/test_dependency_pins.py checks each of them in the installed aiohttp, so a bump
that moves one fails CI instead of a worker's heartbeat.

Invariant: a handed-over connection gets exactly the protocol a `web.TCPSite` would have made
for it, fed every byte the front door read and did not serve.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = ["INTERNALS", "HandOverSite"]

# (name, why): every aiohttp name used here that is not documented API.
INTERNALS: tuple[tuple[str, str], ...] = (
    (
        "aiohttp.web_protocol.RequestHandler",
        "the protocol a handed-over connection continues with; fed the bytes read so far "
        "through its asyncio.Protocol methods connection_made and data_received",
    ),
    (
        "aiohttp.web.BaseRunner.server",
        "the runner's web.Server: calling it makes that RequestHandler, as TCPSite does",
    ),
    (
        "aiohttp.web.BaseSite._runner",
        "the runner whose server makes the handlers",
    ),
    (
        "aiohttp.web.BaseSite._ssl_context",
        "the TLS context BaseSite.__init__ keeps, which the listening socket uses",
    ),
    (
        "aiohttp.web.BaseSite._backlog",
        "the listen backlog BaseSite.__init__ keeps",
    ),
    (
        "aiohttp.web.BaseSite._server",
        "the listening server: BaseSite.stop closes it and BaseRunner.addresses reads it",
    ),
)


class HandOverSite(web.BaseSite):
    """A `web.BaseSite` that listens with its own protocol and can give a connection to the
    runner's aiohttp protocol later; `start`/`stop` stay aiohttp's (the runner's cleanup
    stops it like any site)."""

    __slots__ = ()

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self._ssl_context

    async def listen(self, protocol: Callable[[], asyncio.Protocol], host: str, port: int) -> None:
        """Listen on (host, port) with `protocol`; after `BaseSite.start`, as TCPSite does."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            protocol,
            host,
            port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
        )

    def hand_over(self, transport: asyncio.Transport, data: bytes, *, resume: bool) -> None:
        """Make `transport` the runner's aiohttp connection, starting with `data`; `resume`
        when the front door had paused reading (aiohttp's protocol starts reading)."""
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is cleaned up: no aiohttp server to hand over to")
        handler: RequestHandler = server()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if resume:
            transport.resume_reading()
        if data:
            handler.data_received(data)
