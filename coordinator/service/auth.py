"""Credentials: worker identity tokens, leader-to-worker call tokens, shared bearer tokens.

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
  is computed once, not on every heartbeat.
- Call token, `<incarnation>.<hex HMAC>`: what the leader presents to a worker on host /
  release / checkpoint calls. Given to the worker at registration; bound to its id and
  incarnation; it does not expire (the worker accepts it only for its current incarnation).
- Admin and join tokens: shared secrets from the cluster file, compared in constant time.

Everything parsed from a header is checked to be printable ASCII before it is used: a
non-ASCII or undecodable header is a 401, never an exception.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.errors import RequestError

__all__ = [
    "TOKEN_LEN_MAX",
    "VERIFIED_TOKENS_CACHED_MAX",
    "WorkerClaims",
    "bearer",
    "call_token",
    "derive_key",
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

    From the pad states, not `hmac.digest`: that one call releases the GIL, so with the Raft
    tick thread runnable every token waited for the GIL to come back (253 us a call against
    1.3 us from the pads, with a busy thread beside it, measured; two per registration).
    hashlib keeps the GIL for short messages, and the pads save hashing the key blocks each
    time. The golden-token tests hold the bytes to `hmac`'s."""
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


# Worker tokens verified so far: (cluster secret, the exact Authorization header) -> its
# claims. A worker presents the same token on every heartbeat until the leader renews it at
# half its lifetime, so the header is parsed and the HMAC computed about once per token
# instead of once per request (profiled: the token check was 8% of the leader's event loop
# at 10,000 workers). Only a token whose MAC verified enters; expiry is checked on every
# use, hit or not. Cleared whole when full: 10,000 workers hold at most two live tokens
# each.
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
        raise RequestError("malformed worker token", code="unauthorized", status=401)
    worker_id, inc_text, exp_text, mac = fields
    claims = WorkerClaims(worker_id, int(inc_text), int(exp_text), token)
    expected = _mac(secret, WORKER_TOKEN_INFO, worker_id, claims.incarnation, claims.expires_at_ms)
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        raise RequestError("invalid worker token", code="unauthorized", status=401)
    return claims


def read_worker_token(secret: str, header: str | None, now_ms: int) -> WorkerClaims:
    """The claims of a genuine, unexpired worker token; 401 otherwise. Whether the claimed
    worker and incarnation are current is the caller's question (it holds the state)."""
    # Keyed by the whole header as sent: a hit needs no parsing at all (the header's token
    # was parsed and its MAC verified when it entered).
    claims = _verified.get((secret, header)) if header is not None else None
    if claims is None:
        token = bearer(header)
        if token is None:
            raise RequestError("missing bearer token", code="unauthorized", status=401)
        claims = _verify_worker_token(secret, token)
        if len(_verified) >= VERIFIED_TOKENS_CACHED_MAX:
            _verified.clear()
        _verified[(secret, header or "")] = claims
    if claims.expires_at_ms <= now_ms:
        raise RequestError("worker token expired; register again", code="unauthorized", status=401)
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
            f"{what} token required (Authorization: Bearer ...)", code="unauthorized", status=401
        )
    if not token_matches(expected, header):
        raise RequestError(f"wrong {what} token", code="forbidden", status=403)
