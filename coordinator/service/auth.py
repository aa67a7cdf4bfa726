"""Who a caller is and what they may do: the credentials, and the admission policy built
on them (`Admission`), which turns a request's headers into a typed principal.

Every key is derived from the cluster secret with HKDF-SHA256 under its own `info` label
(`derive_key`), so knowing one derived value (a worker token's MAC key cannot be recovered
from tokens anyway, but say the Raft password leaked from a process listing) gives nothing
about the others.

- Worker token, `<worker_id>.<incarnation>.<expires_at_ms>.<hex HMAC>`: what a worker
  presents to the coordinator. Bound to one worker id and one incarnation, so a worker
  cannot speak for another and an old process cannot speak for its re-registered
  successor; it expires (wall-clock ms: tokens are checked by whichever node leads, and
  monotonic clocks do not cross machines) and the leader renews it on a heartbeat once
  half its lifetime has passed. A verified token's claims are kept (bounded), so its MAC
  is computed once, not on every heartbeat. Step-safe: when the leader first verifies a
  token it also notes how long it had left on its own monotonic clock, and a kept token is
  valid while either clock says so. A wall-clock step forward (NTP, a VM resume) then
  expires no token the leader already holds; a step back lengthens one by at most the
  step; a token the leader first sees after a forward step is shortened by the step.
- Call token, `<incarnation>.<hex HMAC>`: what the leader presents to a worker on host /
  release / checkpoint calls. Given to the worker at registration; bound to its id and
  incarnation; it does not expire (the worker accepts it only for its current incarnation).
- Admin and join tokens: shared secrets from the cluster file, compared in constant time.

Everything parsed from a header is checked to be printable ASCII before it is used: a
non-ASCII or undecodable header is a 401, never an exception.

Admission answers in two steps, in this order on every route: from the headers alone, who
the caller is (401 without a credential, 403 with one that may not do this), before the
body is read; then, against the state, whether that principal may act now (a worker's
incarnation is current; a live worker id is taken over only with its own token or the
admin's). A principal's `scope` keys its Idempotency-Keys, so one caller's key never
answers another's request.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from coordinator.config import ClusterConfig
from coordinator.core.model import WorkerId, WorkerState
from coordinator.core.state import ClusterState
from shared.clock import Clock
from shared.errors import RequestError
from shared.messages.common import WORKER_TOKEN_HEADER
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "TOKEN_LEN_MAX",
    "VERIFIED_TOKENS_CACHED_MAX",
    "WORKER_TOKEN_HEADER",
    "Admin",
    "Admission",
    "Registrant",
    "WorkerClaims",
    "bearer",
    "call_token",
    "derive_key",
    "first_cluster_id",
    "issue_token",
    "raft_password",
    "read_worker_token",
    "token_matches",
    "verify_token",
]

TOKEN_LEN_MAX = 256  # a worker id (64) + incarnation + expiry + 64 hex digits, with room
INCARNATION_DIGITS_MAX = 12
EXPIRY_DIGITS_MAX = 15

WORKER_TOKEN_INFO = b"ripple/worker-token/v1"
CALL_TOKEN_INFO = b"ripple/leader-call/v1"
RAFT_PASSWORD_INFO = b"ripple/raft-password/v1"
CLUSTER_ID_INFO = b"ripple/cluster-id/v1"
# Derived keys and their HMAC pad states kept: (secret, purpose) pairs, a handful per
# process (tests and tools use a few secrets).
DERIVED_KEYS_CACHED_MAX = 32


@functools.lru_cache(maxsize=DERIVED_KEYS_CACHED_MAX)
def derive_key(secret: str, info: bytes) -> bytes:
    """A 32-byte key for one purpose (`info`), derived from the cluster secret."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info)
    return hkdf.derive(secret.encode())


def raft_password(secret: str) -> str:
    """What pysyncobj gets as `password`: neither the secret nor any token key."""
    return derive_key(secret, RAFT_PASSWORD_INFO).hex()


def first_cluster_id(secret: str) -> str:
    """The cluster id a node writes at its first start (`replication/identity.py`): derived
    from the secret, so the nodes of a new cluster agree on it without talking, and telling
    nothing of it. A restored or recovered cluster gets a random one instead."""
    return derive_key(secret, CLUSTER_ID_INFO)[:16].hex()


_SHA256_BLOCK_BYTES = 64


@functools.lru_cache(maxsize=DERIVED_KEYS_CACHED_MAX)
def _pads(secret: str, info: bytes) -> tuple[hashlib._Hash, hashlib._Hash]:
    """SHA-256 states after HMAC's inner and outer key blocks (RFC 2104) for one derived key."""
    key = derive_key(secret, info).ljust(_SHA256_BLOCK_BYTES, b"\x00")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))
    return inner, outer


def _mac(secret: str, info: bytes, *parts: object) -> str:
    """Hex HMAC-SHA256 of the parts, under the key derived for `info`.

    From the pad states, not `hmac.digest`: that one call releases the GIL, so with another
    thread runnable every token would wait for the GIL to come back. hashlib keeps the GIL
    for short messages, and the pads save hashing the key blocks each time. The
    golden-token tests hold the bytes to `hmac`'s."""
    msg = "\x00".join(str(p) for p in parts).encode()
    inner, outer = _pads(secret, info)
    h = inner.copy()
    h.update(msg)
    o = outer.copy()
    o.update(h.digest())
    return o.hexdigest()


def issue_token(secret: str, worker_id: str, incarnation: int, expires_at_ms: int) -> str:
    mac = _mac(secret, WORKER_TOKEN_INFO, worker_id, incarnation, expires_at_ms)
    return f"{worker_id}.{incarnation}.{expires_at_ms}.{mac}"


def call_token(secret: str, worker_id: str, incarnation: int) -> str:
    return f"{incarnation}.{_mac(secret, CALL_TOKEN_INFO, worker_id, incarnation)}"


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _ascii_digits(text: str, digits_max: int) -> bool:
    # str.isdigit() is true for '²' and '\u0661' too; int() of those raises or reads them as 1.
    return 0 < len(text) <= digits_max and text.isascii() and text.isdigit()


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when absent or not
    printable ASCII (aiohttp hands undecodable header bytes over as surrogate escapes)."""
    if not header or not header.startswith("Bearer "):
        return None
    token = header[len("Bearer ") :].strip()
    if not 0 < len(token) <= TOKEN_LEN_MAX or not _printable_ascii(token):
        return None
    return token


@dataclass(frozen=True, slots=True)
class WorkerClaims:
    worker_id: str
    incarnation: int
    expires_at_ms: int
    # The exact token text these claims were read from (a heartbeat hands it back while it
    # has more than half its lifetime left).
    token: str
    # Its expiry on this process's monotonic clock (what it had left when first verified
    # here), so a wall-clock step does not expire it; None when read without that clock.
    expires_at_mono_ms: int | None = None

    def left_ms(self, now_ms: int, mono_ms: int | None) -> int:
        """Time left: the longer of the wall clock's and the monotonic clock's answers."""
        wall_left_ms = self.expires_at_ms - now_ms
        if mono_ms is None or self.expires_at_mono_ms is None:
            return wall_left_ms
        return max(wall_left_ms, self.expires_at_mono_ms - mono_ms)

    def renew_in_ms(self, now_ms: int, mono_ms: int | None) -> int:
        """Time left by the shorter answer: renewal comes early rather than late."""
        wall_left_ms = self.expires_at_ms - now_ms
        if mono_ms is None or self.expires_at_mono_ms is None:
            return wall_left_ms
        return min(wall_left_ms, self.expires_at_mono_ms - mono_ms)

    @property
    def scope(self) -> str:
        return f"worker:{self.worker_id}"


# Worker tokens verified so far: (cluster secret, the exact Authorization header) -> its
# claims. A worker presents the same token on every heartbeat until the leader renews it at
# half its lifetime, so the header is parsed and the HMAC computed about once per token
# instead of once per heartbeat, the leader's most frequent request. Only a token whose MAC
# verified enters; expiry is checked on every use, hit or not. Cleared whole when full:
# 10,000 workers hold at most two live tokens each.
VERIFIED_TOKENS_CACHED_MAX = 32_768
_verified: dict[tuple[str, str], WorkerClaims] = {}


def _verify_worker_token(secret: str, token: str) -> WorkerClaims:
    """The claims of a token whose MAC is genuine (expired or not); 401 otherwise."""
    # Worker ids may contain dots: the three numeric fields are split off the right.
    fields = token.rsplit(".", 3)
    if (
        len(fields) != 4
        or not fields[0]
        or not _ascii_digits(fields[1], INCARNATION_DIGITS_MAX)
        or not _ascii_digits(fields[2], EXPIRY_DIGITS_MAX)
    ):
        raise RequestError("malformed worker token", code="unauthorized")
    worker_id, inc_text, exp_text, mac = fields
    claims = WorkerClaims(worker_id, int(inc_text), int(exp_text), token)
    expected = _mac(secret, WORKER_TOKEN_INFO, worker_id, claims.incarnation, claims.expires_at_ms)
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        raise RequestError("invalid worker token", code="unauthorized")
    return claims


def read_worker_token(
    secret: str, header: str | None, now_ms: int, mono_ms: int | None = None
) -> WorkerClaims:
    """The claims of a genuine, unexpired worker token; 401 otherwise. Whether the claimed
    worker and incarnation are current is the caller's question (it holds the state).
    With `mono_ms` (this process's monotonic clock) the token is step-safe (`left_ms`)."""
    # Keyed by the whole header as sent: a hit needs no parsing at all (the header's token
    # was parsed and its MAC verified when it entered).
    claims = _verified.get((secret, header)) if header is not None else None
    if claims is None:
        token = bearer(header)
        if token is None:
            raise RequestError("missing bearer token", code="unauthorized")
        claims = _verify_worker_token(secret, token)
        if len(_verified) >= VERIFIED_TOKENS_CACHED_MAX:
            _verified.clear()
        _verified[(secret, header or "")] = claims
    if mono_ms is not None and claims.expires_at_mono_ms is None:
        claims = dataclasses.replace(
            claims, expires_at_mono_ms=mono_ms + claims.expires_at_ms - now_ms
        )
        _verified[(secret, header or "")] = claims
    if claims.left_ms(now_ms, mono_ms) <= 0:
        raise RequestError("worker token expired; register again", code="unauthorized")
    return claims


def token_matches(expected: str, header: str | None) -> bool:
    """Constant-time check of a shared bearer token (admin, join). An empty `expected`
    (the setting is off) matches nothing."""
    token = bearer(header)
    if token is None or not expected:
        return False
    return hmac.compare_digest(token.encode(), expected.encode())


def verify_token(expected: str, header: str | None, what: str) -> None:
    """A shared secret bearer token (admin, join): 401 when missing, 403 when wrong."""
    if bearer(header) is None:
        raise RequestError(
            f"{what} token required (Authorization: Bearer ...)", code="unauthorized"
        )
    if not token_matches(expected, header):
        raise RequestError(f"wrong {what} token", code="forbidden")


# -- admission ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admin:
    """The operator, by the admin token."""

    scope: ClassVar[str] = "admin"


ADMIN = Admin()


@dataclass(frozen=True, slots=True, kw_only=True)
class Registrant:
    """A caller who may register a worker: by the admin token, the join token, or anyone
    when registration is open (no join token and `open_registration`)."""

    via: Literal["admin", "join", "open"]
    # What a registration presents in WORKER_TOKEN_HEADER: a live id's current token.
    worker_token: str | None

    @property
    def scope(self) -> str:
        return self.via


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """The cluster's admission policy: its secrets and the lifetime of the tokens it issues.

    The `admit_*` methods read headers only and are called before a body is read; the
    state checks (`admit_id`, `current_incarnation`) are called under the node's read lock.
    Every method raises a `RequestError` (401, 403, 404 or 409) or returns the principal."""

    secret: str
    admin_token: str
    join_token: str
    open_registration: bool
    worker_token_lifetime_s: float
    # Only its monotonic reading is used here: what makes kept tokens step-safe.
    clock: Clock = SYSTEM_CLOCK

    @classmethod
    def of(cls, config: ClusterConfig) -> Admission:
        return cls(
            secret=config.cluster_secret,
            admin_token=config.admin_token,
            join_token=config.join_token,
            open_registration=config.open_registration,
            worker_token_lifetime_s=config.worker_token_lifetime_s,
        )

    # -- who the caller is (headers only) -------------------------------------------------

    def admit_admin(self, headers: Mapping[str, str]) -> Admin:
        verify_token(self.admin_token, headers.get("Authorization"), "admin")
        return ADMIN

    def admit_worker(
        self, headers: Mapping[str, str], now_ms: int, worker_id: WorkerId | None = None
    ) -> WorkerClaims:
        """A genuine worker token unexpired at wall time `now_ms` (for `worker_id` when
        given). Whether its incarnation is current is `current_incarnation`."""
        claims = read_worker_token(
            self.secret, headers.get("Authorization"), now_ms, self.clock.monotonic_ms()
        )
        if worker_id is not None and claims.worker_id != worker_id:
            raise RequestError("the token is another worker's", code="forbidden")
        return claims

    def admit_worker_or_admin(
        self, headers: Mapping[str, str], now_ms: int, worker_id: WorkerId
    ) -> WorkerClaims | Admin:
        """The admin, or the worker `worker_id` itself."""
        if token_matches(self.admin_token, headers.get("Authorization")):
            return ADMIN
        return self.admit_worker(headers, now_ms, worker_id)

    def admit_registration(self, headers: Mapping[str, str]) -> Registrant:
        header = headers.get("Authorization")
        if token_matches(self.admin_token, header):
            via: Literal["admin", "join", "open"] = "admin"
        elif self.join_token or not self.open_registration:
            verify_token(self.join_token, header, "join")
            via = "join"
        else:
            via = "open"
        return Registrant(via=via, worker_token=headers.get(WORKER_TOKEN_HEADER))

    # -- whether they may act now (against the state) --------------------------------------

    def admit_id(
        self, registrant: Registrant, state: ClusterState, worker_id: WorkerId, now_ms: int
    ) -> None:
        """A live worker id (ACTIVE or DRAINING) is re-registered only by the holder of its
        current token or the admin: the join token alone, which every worker holds, must
        not let one worker take another's id, host calls and checkpoint references."""
        if registrant.via == "admin":
            return
        worker = state.workers.get(worker_id)
        if worker is None or worker.state in (WorkerState.DEAD, WorkerState.LEFT):
            return
        presented = registrant.worker_token
        try:
            claims = read_worker_token(
                self.secret,
                f"Bearer {presented}" if presented else None,
                now_ms,
                self.clock.monotonic_ms(),
            )
        except RequestError:
            claims = None
        if (
            claims is None
            or claims.worker_id != worker_id
            or claims.incarnation != worker.incarnation
        ):
            raise RequestError(
                f"worker {worker_id} is {worker.state.value}: re-registering it needs its "
                f"current token ({WORKER_TOKEN_HEADER}) or the admin token",
                code="worker_active",
                field="worker_id",
            )

    @staticmethod
    def current_incarnation(state: ClusterState, claims: WorkerClaims) -> int:
        """The claims' incarnation: 404 when their worker is unknown, DEAD or LEFT; 409 when
        it is not the current one (the worker must re-register)."""
        worker = state.workers.get(WorkerId(claims.worker_id))
        if worker is None or worker.state in (WorkerState.DEAD, WorkerState.LEFT):
            what = "unknown worker" if worker is None else f"worker is {worker.state.value}"
            raise RequestError(f"{what}; register again", code="unknown_worker", field="worker_id")
        if claims.incarnation != worker.incarnation:
            raise RequestError(
                f"token is for incarnation {claims.incarnation}, current is "
                f"{worker.incarnation}; re-register",
                code="stale_incarnation",
            )
        return claims.incarnation

    # -- what an admitted worker is given ---------------------------------------------------

    def worker_token(self, worker_id: str, incarnation: int, now_ms: int) -> tuple[str, int]:
        """A new worker token and its expiry (wall ms)."""
        expires_at_ms = now_ms + int(self.worker_token_lifetime_s * 1000)
        return issue_token(self.secret, worker_id, incarnation, expires_at_ms), expires_at_ms

    def heartbeat_token(
        self, claims: WorkerClaims, incarnation: int, now_ms: int
    ) -> tuple[str, int]:
        """The token a heartbeat hands back: the one it presented (just verified, for this
        worker's current incarnation) while more than half its lifetime is left, else a
        renewed one. So a heartbeat costs no HMAC, a worker's reply changes only with the
        generation and about once per half lifetime, and a heartbeating worker's token
        never lapses."""
        half_life_ms = int(self.worker_token_lifetime_s * 500)
        if claims.renew_in_ms(now_ms, self.clock.monotonic_ms()) > half_life_ms:
            return claims.token, claims.expires_at_ms
        return self.worker_token(claims.worker_id, incarnation, now_ms)

    def leader_call_token(self, worker_id: str, incarnation: int) -> str:
        """What the leader presents on its calls to this incarnation of the worker."""
        return call_token(self.secret, worker_id, incarnation)
