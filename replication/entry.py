"""What a committed entry does to the state machine, and what pysyncobj's dump holds of it.

Owns the one path from a committed entry to the machine (`apply_entry`) and the one object
pysyncobj writes into its dump (`SnapshotCell`). Invariants:

- `apply_entry` never raises. An exception inside pysyncobj's replicated method makes it
  retry the same entry on every tick forever, stalling the whole cluster, so a failing entry
  becomes an error *value* (`machine_error_result`) and the log moves on.
- A batch (`replication.batch`) applies its items in order, each as if it were its own
  entry with its own result and its own failure; an empty item is a barrier the machine
  never sees.
- The dump holds the machine's own snapshot bytes, never a machine object: pysyncobj's
  dump is pickle, and a domain object in it would tie the file to the classes of the day.
- No dump is ever written of a halted machine (one that met an entry it could neither apply
  nor skip, `StateMachine.halted`): its state lags the index pysyncobj would label it with,
  and a restart must replay the journal from the last good dump instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from replication.batch import BatchFormatError, decode_batch, encode_results, is_batch

__all__ = [
    "MachineHaltedError",
    "PendingSnapshot",
    "SnapshotCell",
    "StateMachine",
    "apply_entry",
    "machine_error_result",
    "unpickle_snapshot",
]

log = logging.getLogger(__name__)


class StateMachine(Protocol):
    """What the log drives. `apply` must be deterministic and should not raise. `halted`
    says why the machine stopped applying entries (one it must neither apply nor skip, such
    as a command of a newer release), None while it applies them: the log then stops this
    node's Raft (`replication.log`)."""

    def apply(self, entry: bytes) -> bytes: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...

    def halted(self) -> str | None: ...


class MachineHaltedError(Exception):
    """A dump was asked of a halted machine: refused, so none is written."""


def machine_error_result(exc: BaseException) -> bytes:
    """What the entry point returns when the machine raised anyway. Opaque to us; the
    machine's codec is expected to never need it, it is the last line of defence."""
    return b"\xc0" + repr(exc).encode("utf-8", "replace")[:512]


def apply_entry(machine: StateMachine, entry: bytes) -> bytes:
    """What one committed entry does to `machine` and the result bytes it leaves. A batch
    applies its items in order, each as if it were its own entry (one call holds the lock,
    so readers see all of a batch or none of it). Never raises."""
    if not is_batch(entry):
        return _apply_one(machine, entry)
    try:
        items = decode_batch(entry)
    except BatchFormatError as exc:
        log.error("malformed batch entry (%s); every caller gets an error", exc)
        return machine_error_result(exc)
    return encode_results([_apply_one(machine, item) for item in items])


def _apply_one(machine: StateMachine, entry: bytes) -> bytes:
    """One entry (alone or inside a batch): an exception in it is its own error value and
    touches no other entry of the batch."""
    if not entry:
        return b""
    try:
        return machine.apply(entry)
    except Exception as exc:
        log.exception("state machine raised on a committed entry; returning an error")
        return machine_error_result(exc)


class PendingSnapshot:
    """A machine snapshot read back from a dump, waiting to be restored into the machine."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def unpickle_snapshot(data: bytes) -> PendingSnapshot:
    return PendingSnapshot(data)


# A dump names this function as pickle names any global, by module and name, so that name is
# part of the dump's format: dumps on disk say `replication.log._unpickle_snapshot`, which
# replication.log keeps importable, and new dumps must say the same to be read by any node.
unpickle_snapshot.__module__ = "replication.log"
unpickle_snapshot.__qualname__ = unpickle_snapshot.__name__ = "_unpickle_snapshot"


class SnapshotCell:
    """The only attribute pysyncobj dumps. Pickling it writes the machine's snapshot bytes
    (in the machine's codec), never the machine object itself; unpickling yields a
    `PendingSnapshot`. The dump is written in a forked child, so `snapshot()` must not take
    locks (a lock held by another thread at fork time would never be released in the child)."""

    __slots__ = ("machine",)

    def __init__(self, machine: StateMachine) -> None:
        self.machine = machine

    def __reduce__(self) -> tuple[Callable[[bytes], PendingSnapshot], tuple[bytes]]:
        reason = self.machine.halted()
        if reason is not None:
            # pysyncobj writes the dump in a forked child, which exits with an error on this:
            # no file replaces the last good dump, and the journal is not trimmed.
            raise MachineHaltedError(reason)
        return (unpickle_snapshot, (self.machine.snapshot(),))
