"""Retry timing: capped exponential backoff with equal jitter, and a per-key schedule.

Owns when the leader may try an action again (host a partition, ask for a release). The
caller passes the clock (`now_ms`) and the randomness (`Rng`), so a seeded run replays.

Invariant: every delay lies in [ceil(step / 2), step] where step = min(cap, base * m**n), so
delays grow with attempts, never exceed `cap_ms`, and never collapse to zero -- the fixed
half keeps a retry storm from re-synchronising, the random half spreads it out.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["BackoffPolicy", "RetrySchedule", "Rng", "delay_ms"]


class Rng(Protocol):
    """The part of `random.Random` the core needs; tests pass a seeded instance."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BackoffPolicy:
    base_ms: int
    cap_ms: int
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.base_ms < 1:
            raise ValueError(f"base_ms must be >= 1, got {self.base_ms}")
        if self.cap_ms < self.base_ms:
            raise ValueError(f"cap_ms ({self.cap_ms}) must be >= base_ms ({self.base_ms})")
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1.0):
            raise ValueError(f"multiplier must be finite and >= 1, got {self.multiplier}")


def _step_ms(policy: BackoffPolicy, attempt: int) -> int:
    # Compare in log space: base * m**attempt overflows a float long before attempt is
    # absurd, and once past the cap the exact value no longer matters.
    if policy.multiplier == 1.0:
        return policy.base_ms
    if attempt * math.log(policy.multiplier) >= math.log(policy.cap_ms / policy.base_ms):
        return policy.cap_ms
    return min(policy.cap_ms, round(policy.base_ms * policy.multiplier**attempt))


def delay_ms(policy: BackoffPolicy, attempt: int, rng: Rng) -> int:
    """Delay before retry number `attempt` (0 = after the first failure), equal jitter."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    step = _step_ms(policy, attempt)
    fixed = (step + 1) // 2
    spread = step - fixed
    # min() guards an Rng that returns exactly 1.0, which random.Random never does.
    return fixed + min(spread, int(rng.random() * (spread + 1)))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry:
    attempts: int
    due_ms: int


K = TypeVar("K", bound=Hashable)


class RetrySchedule(Generic[K]):
    """Attempt count and next-due time per key; a key never failed is always due."""

    __slots__ = ("_entries", "policy")

    def __init__(self, policy: BackoffPolicy) -> None:
        self.policy = policy
        self._entries: dict[K, _Entry] = {}

    def due(self, key: K, now_ms: int) -> bool:
        entry = self._entries.get(key)
        return entry is None or now_ms >= entry.due_ms

    def failed(self, key: K, now_ms: int, rng: Rng) -> int:
        """Record a failed attempt; returns when the next one is due."""
        entry = self._entries.get(key)
        attempts = 0 if entry is None else entry.attempts
        due = now_ms + delay_ms(self.policy, attempts, rng)
        self._entries[key] = _Entry(attempts=attempts + 1, due_ms=due)
        return due

    def succeeded(self, key: K) -> None:
        self._entries.pop(key, None)

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)

    def attempts(self, key: K) -> int:
        entry = self._entries.get(key)
        return 0 if entry is None else entry.attempts

    def next_due_ms(self, key: K) -> int | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.due_ms

    def pending(self) -> list[K]:
        """Keys waiting for a retry, soonest first (ties in the order they first failed)."""
        return sorted(self._entries, key=lambda k: self._entries[k].due_ms)
