"""The adapter the replication layer calls: bytes in, bytes out, never an exception.

Owns the boundary between the replicated log and the pure state: it decodes an entry,
applies it to ``state`` and encodes the result. ``apply`` is total; ``snapshot`` and
``restore`` use the same codec as the log.

It also owns the rule that keeps a replica from diverging when it meets a command set it does
not speak (docs/design.md §10): an entry with a tag this code does not know, a command of a
command-set version above what this node speaks, or a state finalized above it, is never
skipped. The machine halts instead: it keeps the state it had, applies nothing from then on
(every later entry is answered ``halted``) and says why (``halted()``), and the replication
layer stops the node's Raft (no vote, no dump of the frozen state) while it answers health.
"""

from __future__ import annotations

from coordinator.core.codec import (
    CodecError,
    NewerCommandError,
    decode_command,
    decode_state,
    encode_result,
    encode_state,
)
from coordinator.core.commands import Ok, Rejected, Result, rejected
from coordinator.core.state import ClusterState, apply
from coordinator.core.versions import SPOKEN, VersionRange, version_of

__all__ = ["ClusterState", "Machine", "Ok", "Rejected", "Result"]


class Machine:
    def __init__(self, state: ClusterState | None = None, speaks: VersionRange = SPOKEN) -> None:
        self.state = state if state is not None else ClusterState()
        self.speaks = speaks
        self._halted: str | None = None

    def halted(self) -> str | None:
        """Why this machine stopped applying entries, or None while it applies them."""
        return self._halted

    def apply(self, entry: bytes) -> bytes:
        """Apply one committed entry; return the encoded Result. Never raises.

        pysyncobj retries a replicated method that raised, on every node, forever: one bad
        entry would stall the whole cluster. So malformed input is an ``invalid`` value and
        anything unexpected (a bug) is an ``internal`` value, logged by the shell that reads it.
        An entry of a newer command set halts the machine (see the module docstring).
        """
        try:
            if self._halted is not None:
                return encode_result(rejected("halted", f"this node halted: {self._halted}"))
            try:
                request_id, cmd = decode_command(entry)
            except NewerCommandError as exc:
                self._halt(f"{exc.message}: an entry of a newer command set than {self.speaks}")
                result: Result = rejected("invalid", exc.message, exc.field)
            except CodecError as exc:
                result = rejected("invalid", exc.message, exc.field)
            else:
                version = version_of(cmd)
                if version > self.speaks.max_version:
                    self._halt(
                        f"{type(cmd).__name__} (tag {cmd.TAG}) is of command-set version "
                        f"{version}; this node speaks {self.speaks}"
                    )
                    result = rejected("invalid", f"unknown command tag {cmd.TAG}", "tag")
                else:
                    result = apply(self.state, request_id, cmd)
                    self._check_finalized()
            return encode_result(result)
        except Exception as exc:  # the last line of defence, see the docstring
            message = f"internal error: {type(exc).__name__}"
            return encode_result(rejected("internal", message))

    def snapshot(self) -> bytes:
        """The whole state as bytes. Takes no lock: pysyncobj calls it on the apply thread."""
        return encode_state(self.state)

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot; CodecError (state unchanged) if it is malformed.
        A halted machine keeps the state it halted at."""
        if self._halted is not None:
            return
        self.state = decode_state(data)
        self._check_finalized()

    def _check_finalized(self) -> None:
        finalized = self.state.finalized_version
        if finalized > self.speaks.max_version:
            self._halt(
                f"the cluster is finalized at command-set version {finalized}; this node "
                f"speaks {self.speaks}"
            )

    def _halt(self, reason: str) -> None:
        if self._halted is None:
            self._halted = reason
