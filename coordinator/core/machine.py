"""The adapter the replication layer calls: bytes in, bytes out, never an exception.

Owns the boundary between the replicated log and the pure state: it decodes an entry,
applies it to ``state`` and encodes the result. ``apply`` is total; ``snapshot`` and
``restore`` use the same codec as the log.
"""

from __future__ import annotations

from coordinator.core.codec import (
    CodecError,
    decode_command,
    decode_state,
    encode_result,
    encode_state,
)
from coordinator.core.commands import Ok, Rejected, Result, rejected
from coordinator.core.state import ClusterState, apply

__all__ = ["ClusterState", "Machine", "Ok", "Rejected", "Result"]


class Machine:
    def __init__(self, state: ClusterState | None = None) -> None:
        self.state = state if state is not None else ClusterState()

    def apply(self, entry: bytes) -> bytes:
        """Apply one committed entry; return the encoded Result. Never raises.

        pysyncobj retries a replicated method that raised, on every node, forever: one bad
        entry would stall the whole cluster. So malformed input is an ``invalid`` value and
        anything unexpected (a bug) is an ``internal`` value, logged by the shell that reads it.
        """
        try:
            try:
                request_id, cmd = decode_command(entry)
            except CodecError as exc:
                result: Result = rejected("invalid", exc.message, exc.field)
            else:
                result = apply(self.state, request_id, cmd)
            return encode_result(result)
        except Exception as exc:  # the last line of defence, see the docstring
            message = f"internal error: {type(exc).__name__}"
            return encode_result(rejected("internal", message))

    def snapshot(self) -> bytes:
        """The whole state as bytes. Takes no lock: pysyncobj calls it on the apply thread."""
        return encode_state(self.state)

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot; CodecError (state unchanged) if it is malformed."""
        self.state = decode_state(data)
