"""The leader's HTTP client for its calls to workers.

Owns one aiohttp session (bounded by `worker_call_timeout_s`, https verified against
`tls_ca`) and the mapping from an HTTP exchange to a transport-neutral `Answer`
(`coordinator/service/call_results.py`): 200 and 202 are OK, 409 STALE, any other status
REFUSED, no answer at all UNREACHABLE. Every call carries the call token of the worker's
incarnation. Invariant: `post` never raises for what the network or the worker did; what
an answer means is decided in `call_results`, never here.
"""

from __future__ import annotations

import aiohttp

from coordinator.core.effects import WorkerCall
from coordinator.service.auth import call_token
from shared.messages.common import (
    STATUS_OK,
    STATUS_SCHEDULED,
    STATUS_STALE,
    Answer,
    Outcome,
    WorkerRequest,
    authorization,
)
from shared.tls import client_context

__all__ = ["WorkerClient", "outcome_of"]


def outcome_of(status: int) -> Outcome:
    if status in (STATUS_OK, STATUS_SCHEDULED):
        return Outcome.OK
    return Outcome.STALE if status == STATUS_STALE else Outcome.REFUSED


class WorkerClient:
    def __init__(self, *, cluster_secret: str, timeout_s: float, tls_ca: str | None) -> None:
        self.cluster_secret = cluster_secret
        self.timeout_s = timeout_s
        self.tls_ca = tls_ca
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            # https:// worker addresses are verified against tls_ca (or the system's roots).
            connector = aiohttp.TCPConnector(ssl=client_context(self.tls_ca))
            self._http = aiohttp.ClientSession(timeout=timeout, connector=connector)
        return self._http

    async def post(self, call: WorkerCall, request: WorkerRequest) -> Answer:
        """POST `request` to the called worker; how it answered and its JSON object (`{}`
        when it sent none), or UNREACHABLE with the transport's complaint as the message."""
        token = call_token(self.cluster_secret, call.worker_id, call.incarnation)
        try:
            async with self._session().post(
                f"{call.address}{request.path}",
                json=request.to_json(),
                headers={"Authorization": authorization(token)},
            ) as resp:
                try:
                    body: object = await resp.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    body = {}
                fields = body if isinstance(body, dict) else {}
                return Answer(outcome=outcome_of(resp.status), body=fields)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Answer(outcome=Outcome.UNREACHABLE, body={"message": str(exc)})

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
