"""What the Raft port refused, by reason: the counts an operator reads and the rate-limited log.

Owns the list of refusal reasons (`REFUSAL_REASONS`) and their counters. Invariants: every
reason has a counter from the start (so `counts()` may copy them from any thread while a
Raft tick increments one), an unknown reason is a programming error, and each reason is
logged at most once per `log_interval_s`, with how many were left unlogged since.
"""

from __future__ import annotations

import logging
import math

from shared.clock import Clock
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["LOG_INTERVAL_S", "REFUSAL_REASONS", "Refusals"]

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0  # at most one warning per refusal reason per interval

REFUSAL_REASONS = (
    "address_not_allowed",  # accepted from a host that is not a current node's
    "unauthenticated_limit",  # evicted: too many connections in the handshake at once
    "handshake_timeout",  # no complete handshake within handshake_timeout_s
    "bad_handshake",  # not our protocol (wrong magic): a stranger or an old node
    "bad_proof",  # the other side does not know the cluster secret
    "bad_version",  # holds the secret, but no transport version both sides speak
    "wrong_cluster",  # holds the secret, but its cluster id is another cluster's
    "unknown_peer",  # authenticated, but claims no current node, or from the wrong host
    "removed_node",  # a node removed from the voter set (by its host or its claimed name)
    "frame_too_large",  # a frame over frame_bytes_max (on the wire or decompressed)
    "bad_frame",  # a frame that fails to open (altered, replayed, reordered) or decode
    "idle_timeout",  # an authenticated connection silent for idle_timeout_s
)


class Refusals:
    """Connections the transport refused or closed, counted by reason, logged at a rate limit."""

    def __init__(
        self,
        log_interval_s: float = LOG_INTERVAL_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._log_interval_s = log_interval_s
        self._log_interval_ms = round(log_interval_s * 1000)
        self._clock = clock
        # Every key exists from the start: a reader on another thread copies the dict while
        # a Raft tick increments it, and a dict that never changes size can always be copied.
        self._counts = dict.fromkeys(REFUSAL_REASONS, 0)
        self._suppressed = dict.fromkeys(REFUSAL_REASONS, 0)
        self._last_logged_ms: dict[str, float] = dict.fromkeys(REFUSAL_REASONS, -math.inf)
        self.logged = 0  # warnings actually written (tests check the rate limit)

    def refuse(self, reason: str, peer: str, detail: str = "") -> None:
        if reason not in self._counts:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self._counts[reason] += 1
        now_ms = self._clock.monotonic_ms()
        if now_ms - self._last_logged_ms[reason] < self._log_interval_ms:
            self._suppressed[reason] += 1
            return
        suppressed, self._suppressed[reason] = self._suppressed[reason], 0
        self._last_logged_ms[reason] = now_ms
        self.logged += 1
        log.warning(
            "raft transport: %s from %s%s (%d more not logged in the last %.0f s; total %d)",
            reason,
            peer,
            f": {detail}" if detail else "",
            suppressed,
            self._log_interval_s,
            self._counts[reason],
        )

    def counts(self) -> dict[str, int]:
        return dict(self._counts)
