"""Async SDK for the coordinator's HTTP API.

`CoordinatorClient` talks to any node of a cluster: reads go to whichever node answers,
writes follow `307` redirects to the leader (remembering it) and wait out `503` with its
`Retry-After`, all within named bounds. Each attempt is bounded by `timeout_s` (or by a
call's own, for a call that must try another node sooner), and a node that failed an attempt
is asked last from then on: a node that holds calls without answering (a leader whose disk
stalls its loop) costs one attempt, not every call's whole deadline. The nodes it knows grow
with the cluster: a redirect's leader is remembered, and every NODES_REFRESH_S the node that
answered is asked for the voters (`/v1/health`), so a client outlives the replacement of
every node it was started with. Errors come back as `ClientError` carrying the
server's JSON error (code, message, field) and the kind its HTTP status names
(`shared.http_statuses`: the client's edge reads the status back). Every bound in time is
read on the `Clock` the client is given (the process's real one by default), so a test can
drive it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp

from shared.clock import Clock
from shared.errors import ClientError, ErrorKind
from shared.http_statuses import kind_of_status
from shared.routing import Routing
from shared.system_clock import SYSTEM_CLOCK
from shared.tls import client_context

__all__ = ["CoordinatorClient", "KeyRouter"]

REDIRECTS_MAX = 5
UNAVAILABLE_RETRIES_MAX = 20
RETRY_AFTER_MAX_S = 2.0
REQUEST_TIMEOUT_S = 10.0
NODES_REFRESH_S = 10.0
URLS_MAX = 64  # nodes remembered; the cluster has a handful, this only bounds a bad answer
DOWNLOAD_CHUNK_BYTES = 1024 * 1024

_T = TypeVar("_T")


class CoordinatorClient:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        token: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        deadline_s: float = 30.0,
        ca_file: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`ca_file`: the CA bundle that https:// coordinators and workers are verified
        against (default: the system's roots). Servers are always verified."""
        if not urls:
            raise ValueError("at least one coordinator URL is required")
        self.urls = [u.rstrip("/") for u in urls]
        self.token = token
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self._preferred = self.urls[0]
        self.ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None
        self.clock = clock
        self._refreshed_at_ms = clock.monotonic_ms()

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(ssl=client_context(self.ca_file)),
            )
        return self._session

    def _order(self) -> list[str]:
        return [self._preferred] + [u for u in self.urls if u != self._preferred]

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """One API call with leader-following, node failover and bounded retries; each
        attempt bounded by `timeout_s` when given, else by the client's."""
        return await self._call(method, path, json, token, headers, _body, timeout_s)

    async def download(self, path: str, *, bytes_max: int, token: str | None = None) -> bytes:
        """A GET whose answer is a file of at most `bytes_max` bytes (a backup), with the
        same leader-following and retries as `request`."""

        async def read(resp: aiohttp.ClientResponse) -> bytes:
            if resp.content_length is not None and resp.content_length > bytes_max:
                raise _too_large(path, bytes_max)
            data = bytearray()
            async for chunk in resp.content.iter_chunked(DOWNLOAD_CHUNK_BYTES):
                data += chunk
                if len(data) > bytes_max:
                    raise _too_large(path, bytes_max)
            return bytes(data)

        return await self._call("GET", path, None, token, None, read)

    async def _call(
        self,
        method: str,
        path: str,
        json: Any,
        token: str | None,
        headers: dict[str, str] | None,
        read: Callable[[aiohttp.ClientResponse], Awaitable[_T]],
        timeout_s: float | None = None,
    ) -> _T:
        attempt = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        deadline_ms = self.clock.monotonic_ms() + round(self.deadline_s * 1000)
        hdrs = dict(headers or {})
        bearer = token or self.token
        if bearer:
            hdrs["Authorization"] = f"Bearer {bearer}"
        last: Exception | None = None
        unavailable = 0
        while self.clock.monotonic_ms() < deadline_ms:
            for base in self._order():
                url = base + path
                for _ in range(REDIRECTS_MAX):
                    try:
                        async with self._http().request(
                            method,
                            url,
                            json=json,
                            headers=hdrs,
                            allow_redirects=False,
                            timeout=attempt,
                        ) as resp:
                            if resp.status == 307 and "Location" in resp.headers:
                                url = resp.headers["Location"]
                                continue
                            if resp.status == 503:
                                unavailable += 1
                                last = _error(resp.status, await _body(resp))
                                wait = float(resp.headers.get("Retry-After", "0.2") or 0.2)
                                await asyncio.sleep(min(wait, RETRY_AFTER_MAX_S) / 4)
                                break
                            if resp.status >= 400:
                                raise _error(resp.status, await _body(resp))
                            value = await read(resp)
                            self._preferred = (
                                url[: len(url) - len(path)] if url.endswith(path) else base
                            )
                            self._learn([self._preferred])
                            await self._refresh_nodes(
                                path, value if isinstance(value, dict) else {}
                            )
                            return value
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        last = exc
                        self._demote(base)
                        break
                if unavailable > UNAVAILABLE_RETRIES_MAX:
                    break
            if unavailable > UNAVAILABLE_RETRIES_MAX:
                break
            await asyncio.sleep(0.1)
        if isinstance(last, ClientError):
            raise last
        raise ClientError(
            f"no coordinator answered {method} {path}: {last}",
            code="unreachable",
            kind=ErrorKind.UNAVAILABLE,
        )

    def _demote(self, base: str) -> None:
        """`base` failed an attempt: the next known node is asked first from now on."""
        if base == self._preferred and len(self.urls) > 1:
            at = self.urls.index(base) if base in self.urls else -1
            self._preferred = self.urls[(at + 1) % len(self.urls)]

    def _learn(self, urls: list[str]) -> None:
        for url in urls:
            base = url.rstrip("/")
            if base.startswith(("http://", "https://")) and base not in self.urls:
                if len(self.urls) >= URLS_MAX:
                    return
                self.urls.append(base)

    async def _refresh_nodes(self, path: str, body: dict[str, Any]) -> None:
        """Learn the voters from a health answer, and ask for one every NODES_REFRESH_S
        (a failed ask changes nothing: the known nodes stay)."""
        if path.startswith("/v1/health"):
            self._learn([str(n.get("url", "")) for n in body.get("nodes", [])])
            self._refreshed_at_ms = self.clock.monotonic_ms()
            return
        now_ms = self.clock.monotonic_ms()
        if now_ms - self._refreshed_at_ms < NODES_REFRESH_S * 1000:
            return
        self._refreshed_at_ms = now_ms
        try:
            async with self._http().get(self._preferred + "/v1/health") as resp:
                if resp.status == 200:
                    health = await _body(resp)
                    self._learn([str(n.get("url", "")) for n in health.get("nodes", [])])
        except (aiohttp.ClientError, TimeoutError):
            pass

    async def get(self, path: str, *, consistent: bool = False) -> dict[str, Any]:
        sep = "&" if "?" in path else "?"
        return await self.request("GET", path + (f"{sep}consistent=true" if consistent else ""))

    async def post(
        self,
        path: str,
        json: Any,
        *,
        token: str | None = None,
        idempotency_key: str | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self.request(
            "POST", path, json=json, token=token, headers=headers, timeout_s=timeout_s
        )


async def _body(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        data = await resp.json(content_type=None)
    except (ValueError, aiohttp.ContentTypeError):
        return {"message": (await resp.text())[:200]}
    return data if isinstance(data, dict) else {"value": data}


def _too_large(path: str, bytes_max: int) -> ClientError:
    return ClientError(
        f"the answer to GET {path} is over {bytes_max} bytes",
        code="too_large",
        kind=ErrorKind.TOO_LARGE,
    )


def _error(status: int, body: dict[str, Any]) -> ClientError:
    return ClientError(
        str(body.get("message", f"HTTP {status}")),
        code=str(body.get("error", "http_error")),
        kind=kind_of_status(status),
        field=body.get("field"),
    )


LOOKUP_ATTEMPTS_MAX = 6
TABLE_CHECK_S = 2.0


class KeyRouter:
    """Routes key lookups to the worker that owns the key's partition.

    The partition table, worker addresses and routing generations (`cluster.routing` of
    `/v1/health`; one generation when a coordinator does not say) are cached from any
    coordinator node. A key routes by the newest routing generation, and its read names
    that generation, so a worker hosting another generation's partition under the same
    number answers 409 `stale_generation` rather than another key set's answer. The cache
    is refreshed when the cluster's generation changes (checked at most every
    `TABLE_CHECK_S` through `/v1/health`), and at once when a worker answers 409 (it no
    longer owns the partition, or the routing moved on) or cannot be reached. Bounded:
    `LOOKUP_ATTEMPTS_MAX` tries. With `pipeline`, a recorded pipeline's key: routed over its
    partitions (one routing generation), its owner read from `?pipeline=` and the worker
    asked for the partition by the number it is carried under (`first_slot` + p).
    """

    def __init__(self, client: CoordinatorClient, pipeline: str | None = None) -> None:
        self.client = client
        self.pipeline = pipeline
        self.first_slot = 0
        self.generation = -1
        self.owners: list[str | None] = []
        self.addresses: dict[str, str] = {}
        self.routing = Routing(generation=0, partitions=1)
        self._checked_at_ms = 0  # on the client's clock

    async def refresh(self) -> None:
        if self.pipeline is not None:
            await self._refresh_pipeline(self.pipeline)
            return
        health = await self.client.get("/v1/health")
        table = await self.client.get("/v1/partitions")
        workers = await self.client.get("/v1/workers")
        self.owners = [p["owner"] for p in table["partitions"]]
        self.addresses = {w["worker_id"]: w["address"] for w in workers["workers"]}
        self.generation = int(table["generation"])
        counts = health["cluster"].get("routing") or [len(self.owners)]
        self.routing = Routing(generation=len(counts) - 1, partitions=int(counts[-1]))
        self._checked_at_ms = self.client.clock.monotonic_ms()

    async def _refresh_pipeline(self, name: str) -> None:
        described = await self.client.get(f"/v1/pipelines/{quote(name, safe='')}")
        table = await self.client.get(f"/v1/partitions?pipeline={quote(name, safe='')}")
        workers = await self.client.get("/v1/workers")
        self.owners = [p["owner"] for p in table["partitions"]]
        self.addresses = {w["worker_id"]: w["address"] for w in workers["workers"]}
        self.generation = int(table["generation"])
        self.first_slot = int(described["first_slot"])
        self.routing = Routing(generation=0, partitions=max(1, int(described["partitions"])))
        self._checked_at_ms = self.client.clock.monotonic_ms()

    async def _fresh(self) -> None:
        if not self.owners:
            await self.refresh()
        elif self.client.clock.monotonic_ms() - self._checked_at_ms > TABLE_CHECK_S * 1000:
            health = await self.client.get("/v1/health")
            if int(health["cluster"]["generation"]) != self.generation:
                await self.refresh()
            self._checked_at_ms = self.client.clock.monotonic_ms()

    def route(self, key: str) -> tuple[int, str | None]:
        p = self.routing.partition_for(key)
        # The table and the routing were read apart: a table of another count is stale.
        owner = self.owners[p] if len(self.owners) == self.routing.partitions else None
        return p, None if owner is None else self.addresses.get(owner)

    async def get(self, key: str) -> dict[str, Any]:
        """The key's state from its owner: {key, count, sum, min, max, last, partition,
        epoch, offset}. Raises ClientError (code not_found) for a key with no records."""
        last: str = "no attempt"
        for attempt in range(LOOKUP_ATTEMPTS_MAX):
            await (self.refresh() if attempt else self._fresh())
            p, address = self.route(key)
            if address is None:
                last = f"partition {p} has no owner yet"
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            url = (
                f"{address}/v1/partitions/{p}/keys/{quote(key, safe='')}"
                f"?generation={self.routing.generation}"
                if self.pipeline is None
                else f"{address}/v1/partitions/{self.first_slot + p}/keys/{quote(key, safe='')}"
            )
            try:
                async with self.client._http().get(url) as resp:
                    body = await _body(resp)
                    if resp.status == 200:
                        if self.pipeline is not None:
                            body["partition"] = p  # the pipeline's own number, not the slot
                        return body
                    if resp.status == 404:
                        raise _error(resp.status, body)
                    last = f"{address} answered {resp.status}: {body.get('message')}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = f"{address} unreachable: {exc}"
            await asyncio.sleep(0.1 * (attempt + 1))
        raise ClientError(
            f"lookup of {key!r} failed after {LOOKUP_ATTEMPTS_MAX} tries: {last}",
            code="unavailable",
            kind=ErrorKind.UNAVAILABLE,
        )
