"""What a proposer stamps into a command: a request id that never repeats, and the wall time.

Owns the two per-command stamps every writer (the HTTP routes, the duties, the membership
and version records) puts on a command before it is proposed. Wall time here is for
timestamps only, never for a decision: `apply` stays deterministic on every replica because
the proposer stamps the time, not the machine.
"""

from __future__ import annotations

import itertools
import secrets

from shared.system_clock import SYSTEM_CLOCK

__all__ = ["new_request_id", "now_ms"]


def now_ms() -> int:
    """Wall time, for timestamps stamped into commands only (never for a decision)."""
    return SYSTEM_CLOCK.wall_ms()


# A request id is the dedup table's key for a command sent without an Idempotency-Key: it
# must never repeat. A random 64-bit prefix per process and a counter within it, not uuid4:
# os.urandom releases the GIL, a handoff to any runnable thread on every write. At most 32
# characters, like a uuid4's hex; a client's key is hashed to 64 (`idempotency_key`), so
# the two never meet.
_REQUEST_ID_PREFIX = secrets.token_hex(8)
_REQUEST_IDS = itertools.count()


def new_request_id() -> str:
    return f"{_REQUEST_ID_PREFIX}{next(_REQUEST_IDS):x}"
