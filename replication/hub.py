"""What all of one node's Raft connections share: their bounds (`TransportLimits`) and the
`Hub` that holds the live and pending connections and closes the doomed ones on the tick.

Owns the rule that a connection other than the one whose poll event is being handled is
closed only on the next tick (`Hub.doom`), and the clock every connection's deadline is read
on. Runs where pysyncobj ticks (`replication.ticker`); nothing here blocks.
"""

from __future__ import annotations

import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from replication.refusals import Refusals
from replication.wire import TRANSPORT_VERSION, TRANSPORT_VERSION_MIN
from shared.clock import Clock, monotonic_s
from shared.system_clock import SYSTEM_CLOCK

if TYPE_CHECKING:
    from replication.connection import Connection

__all__ = [
    "FRAME_BYTES_MAX_DEFAULT",
    "HANDSHAKE_TIMEOUT_S_DEFAULT",
    "UNAUTHENTICATED_MAX_DEFAULT",
    "Hub",
    "TransportLimits",
]

# Largest legitimate frame: an append_entries batch (pysyncobj stops adding entries past
# 64 KiB, so at most 64 KiB plus one entry, an entry being one group-commit batch of at most
# group_commit_bytes_max, 1 MiB by default) or a 64 KiB snapshot chunk, pickled, perhaps
# compressed, then sealed (17 bytes more). 64 MiB is far above that and still a bounded cost
# per authenticated peer.
FRAME_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
HANDSHAKE_TIMEOUT_S_DEFAULT = 2.0
UNAUTHENTICATED_MAX_DEFAULT = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportLimits:
    frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S_DEFAULT
    idle_timeout_s: float = 1.5
    unauthenticated_max: int = UNAUTHENTICATED_MAX_DEFAULT

    def validate(self) -> None:
        if self.frame_bytes_max < 1 << 16:
            raise ValueError("frame_bytes_max must be at least 64 KiB (a snapshot chunk)")
        if self.handshake_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("handshake_timeout_s and idle_timeout_s must be positive")
        if self.unauthenticated_max < 1:
            raise ValueError("unauthenticated_max must be at least 1")


class Hub:
    """What all connections of one node share: limits, key, counters, poller, clock, and the live
    and pending sets the tick sweeps. Closing a connection other than the one whose poll
    event is being handled is deferred to the next tick (`doom`): pysyncobj's poller looks
    up each ready descriptor's callback by number and fails on one closed in the same round."""

    def __init__(
        self,
        *,
        poller: Any,
        limits: TransportLimits,
        key: bytes,
        refusals: Refusals,
        conf: Any,
        versions: tuple[int, int] = (TRANSPORT_VERSION_MIN, TRANSPORT_VERSION),
        cluster_id: str = "",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.poller = poller
        self.clock = clock  # the connections' deadlines and idle times are on it
        self.limits = limits
        self.key = key
        self.versions = versions  # the transport versions this node accepts
        self.cluster_id = cluster_id
        self.refusals = refusals
        self.conf = conf
        self.live: set[Connection] = set()
        self.pending: OrderedDict[Connection, None] = OrderedDict()  # accepted, not proven
        self.doomed: list[tuple[Connection, socket.socket | None, str | None]] = []

    def release(self, sock: socket.socket) -> None:
        """Close a socket already unsubscribed from the poller. Raft on the event loop
        (replication.poller.LoopPoller) may defer the close to the loop's thread."""
        release = getattr(self.poller, "release", None)
        if release is not None:
            release(sock)
        else:
            sock.close()

    def doom(self, conn: Connection, reason: str | None) -> None:
        conn.doomed = True
        self.pending.pop(conn, None)
        self.doomed.append((conn, conn.sock, reason))

    def tick(self) -> None:
        doomed, self.doomed = self.doomed, []
        for conn, sock, reason in doomed:
            if conn.sock is sock:  # not already closed (and perhaps reconnected) since
                conn.close(reason)
        now = monotonic_s(self.clock)
        for conn in list(self.live):
            conn.sweep(now)
