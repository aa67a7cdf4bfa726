"""The heartbeat reply, the leader's hottest answer, built without a JSON encoder per request.

A worker's assignment changes only with the generation (docs/design.md §3: `generation`
grows by one per command that changes some (owner, epoch) pair), so its JSON text is made
once per worker and generation and kept; the reply around it is one format string, so a
heartbeat encodes no JSON.
"""

from __future__ import annotations

import json

from coordinator.core.model import WorkerId
from coordinator.core.state import ClusterState

# Assignment texts kept for the current generation, at most: one per worker that heartbeats
# in it. Past the bound a worker's text is made per request (correct, only slower).
ASSIGNMENT_TEXTS_CACHED_MAX = 32_768


class AssignmentTexts:
    """Each worker's assignment as the JSON array a heartbeat reply carries, kept for one
    generation of one state object (a new state object, as after a snapshot install, or a
    new generation starts afresh)."""

    __slots__ = ("_generation", "_state", "_texts")

    def __init__(self) -> None:
        # The state object itself, not its id(): an id can be reused once the old object is
        # gone. Holding it keeps one superseded state alive until the next heartbeat.
        self._state: ClusterState | None = None
        self._generation = -1
        self._texts: dict[WorkerId, str] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def text(self, state: ClusterState, worker_id: WorkerId) -> str:
        if self._generation != state.generation or self._state is not state:
            self._texts = {}
            self._generation = state.generation
            self._state = state
        text = self._texts.get(worker_id)
        if text is None:
            text = json.dumps(
                [{"partition": p, "epoch": e} for p, e in state.assignment_of(worker_id)],
                separators=(",", ":"),
            )
            if len(self._texts) < ASSIGNMENT_TEXTS_CACHED_MAX:
                self._texts[worker_id] = text
        return text


def heartbeat_body(
    generation: int, assignment_text: str, checkpoint_due: bool, token: str, expires_at_ms: int
) -> bytes:
    """The JSON of `m.HeartbeatResponse` (the OpenAPI contract test and
    test_heartbeat_path hold the two together). `token` is a worker token this node issued or
    verified: its worker id matched `[A-Za-z0-9._-]{1,64}` and the rest is digits, dots and
    hex, so it needs no escaping; anything else is refused rather than written unescaped."""
    if not token.isascii() or '"' in token or "\\" in token:
        raise ValueError("a worker token holds only [A-Za-z0-9._-]")
    due = "true" if checkpoint_due else "false"
    return (
        f'{{"generation":{generation:d},"assignment":{assignment_text},'
        f'"checkpoint_due":{due},"token":"{token}","token_expires_at_ms":{expires_at_ms:d}}}'
    ).encode()
