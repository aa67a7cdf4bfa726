"""The Raft journal as a file on disk: pysyncobj's layout, and what a crash can leave of it.

Owns the knowledge of pysyncobj's `FileJournal` file (format version 1): a 40-byte header
whose last 4 bytes are the end offset of the last record, then records
``size:u32 | idx:u64 term:u64 command | size:u32`` (little-endian). Invariant: a journal this
module touched or wrote is a whole-record prefix of what was written, which pysyncobj can open.

A write is sure to be on disk only once synced (`replication.raft_node.DurableJournal`);
bytes appended after the last sync may reach it in part, so a crash can leave the header's
end offset pointing past the bytes that did, and pysyncobj then dies at start-up reading a
short record (chaos scenario e). `repair_journal_tail` keeps the longest run of whole
records, as etcd's WAL repair does: Raft-safe, since a node acknowledges only what it synced
(with `fsync` off, only while a majority kept the tail). `sync_writes` says what a sync
covered, for the synced images of power-cut tests (`replication.durability`), and
`encode_journal` writes a whole journal for the trim after a compaction.

A node halted by a failed sync (`replication.disk_faults`) cannot trust the bytes written
after its last good sync: the kernel may have dropped them, or kept some. It leaves a mark
beside the journal (`mark_unsynced_tail`, the last index a sync covered) and its restart cuts
the journal there (`drop_unsynced_tail`) before pysyncobj opens it: Raft-safe, since the node
acknowledged nothing past that index, and the leader sends the rest again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Callable, Iterable

__all__ = [
    "FIRST_RECORD_OFFSET",
    "LAST_OFFSET_AT",
    "UNSYNCED_MARK_SUFFIX",
    "drop_unsynced_tail",
    "encode_journal",
    "mark_unsynced_tail",
    "read_journal",
    "repair_journal_tail",
    "sync_writes",
]

log = logging.getLogger(__name__)

FIRST_RECORD_OFFSET = 40
LAST_OFFSET_AT = 36  # where the header keeps the end offset of the last record
RECORD_SIZE_MIN = 16  # idx and term come before any command

_U32 = struct.Struct("<I")
_IDX_TERM = struct.Struct("<QQ")
UNSYNCED_MARK_SUFFIX = ".unsynced"


def mark_unsynced_tail(path: str, synced_index: int) -> None:
    """Leave beside the journal at `path` the last index its syncs covered; raises OSError
    when even that cannot be written (the restart then has only `repair_journal_tail`)."""
    mark = path + UNSYNCED_MARK_SUFFIX
    with open(mark, "w", encoding="ascii") as f:
        f.write(f"{synced_index}\n")
        f.flush()
        os.fsync(f.fileno())


def drop_unsynced_tail(path: str) -> int:
    """Cut the journal at `path` after the index its mark names, then remove the mark;
    return the records dropped, -1 without a mark."""
    mark = path + UNSYNCED_MARK_SUFFIX
    try:
        with open(mark, encoding="ascii") as f:
            synced_index = int(f.read().strip() or 0)
    except FileNotFoundError:
        return -1
    except ValueError:
        synced_index = 0  # a torn mark: trust nothing of the journal's records
    dropped = 0
    with contextlib.suppress(FileNotFoundError), open(path, "r+b") as f:
        data = f.read()
        if len(data) >= FIRST_RECORD_OFFSET:
            records, _ = _whole_records(data)
            end = FIRST_RECORD_OFFSET
            for command, idx, _term in records:
                if idx > synced_index:
                    break
                end += 4 + _IDX_TERM.size + len(command) + 4
            dropped = sum(1 for _c, idx, _t in records if idx > synced_index)
            f.seek(LAST_OFFSET_AT)
            f.write(_U32.pack(end))
            f.flush()
            os.fsync(f.fileno())
    log.warning(
        "journal %s: the node halted on a failed sync; %d entries after index %d (never "
        "synced, so never acknowledged) dropped: the leader sends them again",
        path,
        dropped,
        synced_index,
    )
    os.remove(mark)
    return dropped


def repair_journal_tail(path: str) -> int:
    """Cut a torn tail off the journal at `path`; return the records kept, -1 if untouched
    (no file, no header, or nothing torn)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return -1
    if len(data) < FIRST_RECORD_OFFSET:
        return -1
    (end,) = _U32.unpack_from(data, LAST_OFFSET_AT)
    records, offset = _whole_records(data)
    if offset == end:
        return -1
    log.warning("journal %s: torn tail cut at byte %d (header said %d)", path, offset, end)
    with open(path, "r+b") as f:
        f.seek(LAST_OFFSET_AT)
        f.write(_U32.pack(offset))
    return len(records)


def read_journal(path: str) -> list[tuple[bytes, int, int]]:
    """The records ((command, idx, term), in order) of the journal at `path` that a start
    would keep: its longest run of whole records. Reads only; a torn tail is left as it is."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < FIRST_RECORD_OFFSET:
        return []
    return _whole_records(data)[0]


def _whole_records(data: bytes) -> tuple[list[tuple[bytes, int, int]], int]:
    """The whole records up to the header's end offset, and where they end."""
    (end,) = _U32.unpack_from(data, LAST_OFFSET_AT)
    offset = FIRST_RECORD_OFFSET
    records: list[tuple[bytes, int, int]] = []
    while offset < end:
        if offset + 4 > len(data):
            break
        (size,) = _U32.unpack_from(data, offset)
        stop = offset + 4 + size + 4
        if size < RECORD_SIZE_MIN or stop > min(end, len(data)):
            break
        if _U32.unpack_from(data, offset + 4 + size)[0] != size:
            break
        idx, term = _IDX_TERM.unpack_from(data, offset + 4)
        records.append((data[offset + 4 + _IDX_TERM.size : offset + 4 + size], idx, term))
        offset = stop
    return records, offset


def encode_journal(header: bytes, records: Iterable[tuple[bytes, int, int]]) -> bytes:
    """A whole journal file holding `records` ((command, idx, term), in order) under the
    first LAST_OFFSET_AT bytes of an existing journal's `header` (pysyncobj's name, version
    and format), byte for byte what pysyncobj writes for them."""
    body = bytearray()
    for command, idx, term in records:
        size = _U32.pack(_IDX_TERM.size + len(command))
        body += size + _IDX_TERM.pack(idx, term) + command + size
    end = FIRST_RECORD_OFFSET + len(body)
    return bytes(header[:LAST_OFFSET_AT]) + _U32.pack(end) + bytes(body)


def sync_writes(
    read: Callable[[int, int], bytes], low: int, synced_end: int, end: int
) -> list[tuple[int, bytes]]:
    """What a sync made durable in a journal whose records now end at `end`, as
    (offset, bytes) to write in order over a copy of it as of the last sync (records then
    ending at `synced_end`), when everything written since lies at or above `low`, header
    aside. `read(offset, size)` reads the journal. The end offset comes last, so a copy
    torn anywhere in between is still a whole-record prefix; when the records were cut
    below `synced_end`, the copy's end offset is lowered to `low` first, so old records
    beyond the cut are never read as part of it."""
    writes = []
    if low < synced_end:
        writes.append((LAST_OFFSET_AT, _U32.pack(low)))
    if end > low:
        writes.append((low, read(low, end - low)))
    writes.append((LAST_OFFSET_AT, read(LAST_OFFSET_AT, 4)))
    return writes
