"""The Raft journal as a file on disk: pysyncobj's layout, and what a crash can leave of it.

Owns the knowledge of pysyncobj's `FileJournal` file (format version 1): a 40-byte header
whose last 4 bytes are the end offset of the last record, then records
``size:u32 | idx:u64 term:u64 command | size:u32`` (little-endian). Invariant: a journal this
module touched is a whole-record prefix of what was written, which pysyncobj can open.

Nothing is fsynced (docs/design.md §2), so a crash can leave the header's end offset pointing
past the bytes that reached the disk; pysyncobj then dies at start-up reading a short record
(chaos scenario e). `repair_journal_tail` keeps the longest run of whole records: Raft-safe
for this node alone, which catches up from the leader, and what etcd's WAL repair does.
"""

from __future__ import annotations

import logging
import struct

__all__ = ["repair_journal_tail"]

log = logging.getLogger(__name__)

FIRST_RECORD_OFFSET = 40
LAST_OFFSET_AT = 36  # where the header keeps the end offset of the last record
RECORD_SIZE_MIN = 16  # idx and term come before any command

_U32 = struct.Struct("<I")


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
    offset, kept = FIRST_RECORD_OFFSET, 0
    while offset < end:
        if offset + 4 > len(data):
            break
        (size,) = _U32.unpack_from(data, offset)
        stop = offset + 4 + size + 4
        if size < RECORD_SIZE_MIN or stop > min(end, len(data)):
            break
        if _U32.unpack_from(data, offset + 4 + size)[0] != size:
            break
        offset, kept = stop, kept + 1
    if offset == end:
        return -1
    log.warning("journal %s: torn tail cut at byte %d (header said %d)", path, offset, end)
    with open(path, "r+b") as f:
        f.seek(LAST_OFFSET_AT)
        f.write(_U32.pack(offset))
    return kept
