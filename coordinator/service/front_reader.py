"""The front door's request reader: which bytes are a hot request, read by llhttp (sans-IO).

Owns the recognition rule of the front door (`coordinator/service/front.py`): a request is
served there only when llhttp reads it without error and it is exactly a hot one -- the
request line `POST <path> HTTP/1.1` with one of `HOT_ROUTES`' paths and no query, one
`Content-Length` within `body_bytes_max` and `BODY_BYTES_MAX`, no `Transfer-Encoding`,
`Expect` or `Upgrade`, `Connection` only `keep-alive`/`close`, ASCII header values, at most
`HEADERS_MAX` headers in `HEAD_BYTES_MAX`. Anything else raises `NotHot`, and the bytes it
was given are left as they arrived. It does no I/O: the protocol feeds it its buffer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = [
    "BODY_BYTES_MAX",
    "HEADERS_MAX",
    "HEAD_BYTES_MAX",
    "HOT_ROUTES",
    "Head",
    "NotHot",
    "RequestReader",
    "parse_head",
]

# A request head longer than this goes to aiohttp (whose own limits answer it): the hot
# routes' heads are a few hundred bytes.
HEAD_BYTES_MAX = 8192
HEADERS_MAX = 64
# A hot request's body is read here only up to this (workers' heartbeats and acks are a
# few KiB); a larger one goes to aiohttp, whose handlers check the token before reading a
# body, so a stranger cannot make the front door hold more than this per connection.
BODY_BYTES_MAX = 64 * 1024

_REGISTER_PATH = b"/v1/workers"
_CHECKPOINTS_PATH = b"/v1/checkpoints"
_HEARTBEAT_PATH = re.compile(rb"/v1/workers/([A-Za-z0-9._-]{1,64})/heartbeat")
# The metric route labels aiohttp gives the same routes (resource.canonical).
HOT_ROUTES = ("/v1/workers", "/v1/workers/{worker_id}/heartbeat", "/v1/checkpoints")
_HEAD_END = b"\r\n\r\n"
_REFUSED_HEADERS = frozenset((b"transfer-encoding", b"expect", b"upgrade"))
_CONNECTION_TOKENS = frozenset((b"keep-alive", b"close"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """A hot request's head, as `RequestReader` read it."""

    route: str  # the metric label aiohttp gives the route (HOT_ROUTES)
    path: str
    worker_id: str | None  # the heartbeat's path parameter
    headers: CIMultiDictProxy[str]
    length: int  # Content-Length
    close: bool  # the connection ends after the answer (llhttp's keep-alive reading)


class NotHot(Exception):
    """The request is not one the front door serves: the connection goes to aiohttp."""


class RequestReader:
    """A connection's requests, the first in its buffer at a time, read by llhttp (sans-IO).

    llhttp reads copies and reports no offsets, so the reader frames each request itself and
    has llhttp agree: it feeds a head up to its first blank line (a strict head ends nowhere
    else), then exactly `Content-Length` bytes, and takes the request only if llhttp's message
    ended there too. The buffer is left untouched until a request is taken, so a hand-over
    gives aiohttp every byte as it arrived. After `NotHot` the parser is spent."""

    __slots__ = (
        "_body_bytes_max",
        "_complete",
        "_fed",
        "_head",
        "_headers_done",
        "_length",
        "_pairs",
        "_parser",
        "_url",
    )

    def __init__(self, body_bytes_max: int) -> None:
        self._body_bytes_max = body_bytes_max
        self._parser = httptools.HttpRequestParser(self)
        self._fed = 0  # bytes of the buffer llhttp has read
        self._head: Head | None = None  # the first request's, once its head is read whole
        self._url = b""
        self._pairs: list[tuple[str, str]] = []
        self._length = -1
        self._headers_done = self._complete = False

    def take(self, buf: bytearray, eof: bool) -> tuple[Head, bytes] | None:
        """The first request in `buf` with its body, removed from `buf`, once it is whole;
        None while it is not (and `eof` is False). Raises NotHot when it is not a hot one."""
        head = self._head
        if head is None:
            end = buf.find(_HEAD_END, max(self._fed - 3, 0), HEAD_BYTES_MAX)
            upto = end + 4 if end >= 0 else min(len(buf), HEAD_BYTES_MAX)
            self._feed(buf[self._fed : upto])  # in pieces: a malformed head fails early
            self._fed = upto
            if end < 0:
                if upto >= HEAD_BYTES_MAX or eof:
                    raise NotHot
                return None
            head = self._head = self._recognise(buf)
        stop = self._fed + head.length
        if len(buf) < stop:
            if eof:
                raise NotHot  # a body cut short: aiohttp says so
            return None
        body = bytes(buf[self._fed : stop])
        if body:
            self._feed(body)
        if not self._complete:
            raise NotHot
        del buf[:stop]
        self._fed, self._head, self._url, self._pairs, self._length = 0, None, b"", [], -1
        self._headers_done = self._complete = False
        return head, body

    def _feed(self, data: bytes | bytearray) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            raise NotHot from exc

    def _recognise(self, raw: bytes | bytearray) -> Head:
        """The request whose head llhttp has just read, if it is a hot one (`raw` starts
        with it)."""
        length, target = self._length, self._url
        if not self._headers_done or not 0 <= length <= self._body_bytes_max:
            raise NotHot
        # llhttp allows runs of spaces and empty lines before the request line; the front
        # door serves only the plain form, which also pins the method and the version.
        if not raw.startswith(b"POST %s HTTP/1.1\r\n" % target):
            raise NotHot
        worker_id: str | None = None
        if target == _REGISTER_PATH:
            route = HOT_ROUTES[0]
        elif target == _CHECKPOINTS_PATH:
            route = HOT_ROUTES[2]
        else:
            matched = _HEARTBEAT_PATH.fullmatch(target)
            if matched is None:
                raise NotHot
            route, worker_id = HOT_ROUTES[1], matched.group(1).decode("ascii")
        return Head(
            route=route,
            path=target.decode("ascii"),
            worker_id=worker_id,
            headers=CIMultiDictProxy(CIMultiDict(self._pairs)),
            length=length,
            close=not self._parser.should_keep_alive(),
        )

    # -- llhttp's callbacks (httptools finds them by name; what they raise stops it) ----------

    def on_message_begin(self) -> None:
        if self._complete:  # a second message inside one request's bytes: the framings differ
            raise NotHot

    def on_url(self, url: bytes) -> None:
        # Only a POST can be hot: anything else goes to aiohttp at its first line.
        if not self._url and self._parser.get_method() != b"POST":
            raise NotHot
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        pairs = self._pairs
        # llhttp allows obs-text in values, which aiohttp would not decode as ASCII.
        if len(pairs) >= HEADERS_MAX or not value.isascii():
            raise NotHot
        value = value.rstrip(b" \t")  # llhttp drops the leading whitespace, not the trailing
        lowered = name.lower()
        if lowered == b"content-length":
            self._length = int(value)  # digits only: llhttp refuses any other value, or two
        elif lowered in _REFUSED_HEADERS:
            raise NotHot
        elif lowered == b"connection":
            tokens = {token.strip(b" \t").lower() for token in value.split(b",")}
            if not tokens <= _CONNECTION_TOKENS:
                raise NotHot
        pairs.append((name.decode("ascii"), value.decode("ascii")))

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_message_complete(self) -> None:
        self._complete = True


def parse_head(head: bytes, body_bytes_max: int) -> Head | None:
    """`head` (the bytes before the blank line) as a hot request, or None when it is anything
    else, read as a connection reads it: aiohttp then reads the same bytes."""
    data = head + _HEAD_END
    if len(data) > HEAD_BYTES_MAX or data.find(_HEAD_END) != len(head):
        return None
    reader = RequestReader(body_bytes_max)
    try:
        reader._feed(data)
        return reader._recognise(data)
    except NotHot:
        return None
