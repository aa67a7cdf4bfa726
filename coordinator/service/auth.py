"""Worker identity tokens and admin authentication.

A worker token is `<incarnation>.<hex HMAC-SHA256(secret, worker_id NUL incarnation)>`:
bound to one worker id and one incarnation, so a worker cannot speak for another and a
restarted (re-registered) worker's old process cannot speak for the new one. Comparisons
are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac

from coordinator.errors import RequestError

TOKEN_LEN_MAX = 128


def issue_token(secret: str, worker_id: str, incarnation: int) -> str:
    mac = hmac.new(secret.encode(), f"{worker_id}\x00{incarnation}".encode(), hashlib.sha256)
    return f"{incarnation}.{mac.hexdigest()}"


def bearer(header: str | None) -> str | None:
    if not header or not header.startswith("Bearer "):
        return None
    token = header[len("Bearer ") :].strip()
    return token if 0 < len(token) <= TOKEN_LEN_MAX else None


def verify_worker_token(
    secret: str, worker_id: str, header: str | None, current_incarnation: int | None
) -> int:
    """Return the token's incarnation. 401 when missing or forged; 409 when genuine but
    for an incarnation that is no longer current (the worker must re-register)."""
    token = bearer(header)
    if token is None:
        raise RequestError("missing bearer token", code="unauthorized", status=401)
    inc_text, _, _ = token.partition(".")
    if not inc_text.isdigit() or len(inc_text) > 12:
        raise RequestError("malformed worker token", code="unauthorized", status=401)
    incarnation = int(inc_text)
    if not hmac.compare_digest(token, issue_token(secret, worker_id, incarnation)):
        raise RequestError("invalid worker token", code="unauthorized", status=401)
    if current_incarnation is not None and incarnation != current_incarnation:
        raise RequestError(
            f"token is for incarnation {incarnation}, current is {current_incarnation}; "
            "re-register",
            code="stale_incarnation",
            status=409,
        )
    return incarnation


def verify_token(expected: str, header: str | None, what: str) -> None:
    """A shared secret bearer token (admin, join): 401 when missing, 403 when wrong."""
    token = bearer(header)
    if token is None:
        raise RequestError(
            f"{what} token required (Authorization: Bearer ...)", code="unauthorized", status=401
        )
    if not hmac.compare_digest(token.encode(), expected.encode()):
        raise RequestError(f"wrong {what} token", code="forbidden", status=403)
