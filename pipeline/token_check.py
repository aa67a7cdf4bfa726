"""Who may produce to a pipeline through this worker: the coordinator's verdicts, kept briefly.

Owns the worker's cache of tokens the coordinator said may produce to a pipeline
(`POST /v1/pipelines/{name}/tokens/verify`, asked with the worker's own worker token): the
worker holds no token hash. Invariants: only a positive verdict is kept, keyed by the
pipeline and the SHA-256 of the token (never its text), for at most `VERIFIED_TTL_MS` on the
monotonic clock, so a token revoked on the coordinator stops admitting here within that
time; at most `VERIFIED_ENTRIES_MAX` verdicts are kept, the oldest dropped first. A refusal
is asked afresh each time, so a token issued a moment ago works at once.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

from coordinator.client import CoordinatorClient
from shared.clock import Clock
from shared.errors import ClientError, ErrorKind, RequestError, UnavailableError

__all__ = [
    "VERIFIED_ENTRIES_MAX",
    "VERIFIED_TTL_MS",
    "TokenCheck",
    "Verdict",
    "ask_coordinator",
]

VERIFIED_TTL_MS = 5_000  # how long a revoked token may still produce through a worker
VERIFIED_ENTRIES_MAX = 1_024  # producers a worker remembers at once (pipelines x tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """A token may produce to `pipeline`: as the admin (token_id None) or as `role`."""

    pipeline: str
    role: str
    token_id: str | None


# (pipeline, token) -> the verdict; raises RequestError (401/403) for a token that may not.
Ask = Callable[[str, str], Awaitable[Verdict]]


class TokenCheck:
    def __init__(
        self,
        ask: Ask,
        clock: Clock,
        *,
        ttl_ms: int = VERIFIED_TTL_MS,
        entries_max: int = VERIFIED_ENTRIES_MAX,
    ) -> None:
        self._ask = ask
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._entries_max = entries_max
        # (pipeline, sha256 of the token) -> (monotonic ms it expires at, the verdict)
        self._kept: OrderedDict[tuple[str, str], tuple[int, Verdict]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    async def verify(self, pipeline: str, token: str) -> Verdict:
        """The verdict on `token` for `pipeline`, kept or asked; RequestError if it may not."""
        key = (pipeline, hashlib.sha256(token.encode()).hexdigest())
        kept = self._kept.get(key)
        if kept is not None:
            if self._clock.monotonic_ms() < kept[0]:
                return kept[1]
            del self._kept[key]
        verdict = await self._ask(pipeline, token)
        # Stamped after the answer: the verdict is as old as the coordinator's reading.
        self._kept[key] = (self._clock.monotonic_ms() + self._ttl_ms, verdict)
        self._kept.move_to_end(key)
        while len(self._kept) > self._entries_max:
            self._kept.popitem(last=False)
        return verdict


def ask_coordinator(client: CoordinatorClient, worker_token: Callable[[], str]) -> Ask:
    """Ask the coordinator's verify route as this worker (`worker_token()`, read at each call:
    heartbeats renew it). A refusal is the caller's 403 (or 401); the worker's own token
    refused, or the coordinator unreachable, is a 503: the producer may retry."""

    async def ask(pipeline: str, token: str) -> Verdict:
        path = f"/v1/pipelines/{quote(pipeline, safe='')}/tokens/verify"
        try:
            body = await client.post(path, {"token": token}, token=worker_token())
        except ClientError as exc:
            # The route's only 403 is about the presented token; a 400 is a token no
            # pipeline could hold (too long). Anything else is this worker's trouble.
            if exc.kind in (ErrorKind.FORBIDDEN, ErrorKind.INVALID):
                raise RequestError(exc.message, code="forbidden") from exc
            raise UnavailableError(
                f"this worker cannot verify tokens now ({exc.code}: {exc.message})"
            ) from exc
        token_id = body.get("token_id")
        return Verdict(
            pipeline=str(body["pipeline"]),
            role=str(body["role"]),
            token_id=None if token_id is None else str(token_id),
        )

    return ask
