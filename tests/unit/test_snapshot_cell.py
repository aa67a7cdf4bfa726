"""The one object pysyncobj dumps (`replication.entry.SnapshotCell`): it pickles to the
machine's snapshot bytes under the unpickler's name that dumps on disk carry, byte for byte
as pysyncobj writes it, and reads back as a snapshot waiting to be restored."""

from __future__ import annotations

import pysyncobj.pickle as syncobj_pickle
import pytest

import replication.log
from replication.entry import MachineHaltedError, PendingSnapshot, SnapshotCell

# pysyncobj's dump of {"_cell": SnapshotCell(machine)} whose snapshot is b"state-bytes".
DUMPED = bytes.fromhex(
    "80027d710058050000005f63656c6c7101637265706c69636174696f6e2e6c6f670a5f756e7069636b6c"
    "655f736e617073686f740a7102635f636f646563730a656e636f64650a7103580b00000073746174652d"
    "6279746573710458060000006c6174696e317105867106527107857108527109732e"
)


class Snapshotting:
    def snapshot(self) -> bytes:
        return b"state-bytes"

    def apply(self, entry: bytes) -> bytes:
        raise AssertionError("a dump never applies")

    def restore(self, data: bytes) -> None:
        raise AssertionError("a dump never restores")

    def halted(self) -> str | None:
        return None


class Halted(Snapshotting):
    def halted(self) -> str | None:
        return "an entry of a newer command set"


def test_the_dump_format_stays_byte_for_byte() -> None:
    assert syncobj_pickle.dumps({"_cell": SnapshotCell(Snapshotting())}) == DUMPED


def test_a_dump_reads_back_as_a_pending_snapshot() -> None:
    cell = syncobj_pickle.loads(DUMPED)["_cell"]
    assert isinstance(cell, PendingSnapshot) and cell.data == b"state-bytes"
    assert callable(replication.log._unpickle_snapshot)  # the name the dump carries


def test_a_halted_machine_is_never_dumped() -> None:
    """Its state lags the index pysyncobj would give the dump: the dump must fail (pysyncobj
    then keeps the last good one and the journal after it)."""
    with pytest.raises(MachineHaltedError, match="newer command set"):
        syncobj_pickle.dumps({"_cell": SnapshotCell(Halted())})
