"""The backup file: a header naming where the snapshot was taken, then the snapshot.

Owns the file's bytes and every check that refuses a damaged one (docs/design.md §10). A
backup is the whole replicated state at ONE applied index, in the snapshot codec
(`coordinator/core/codec.encode_state`), behind a header:

    MAGIC (8 bytes) | header length (u32, big-endian) | header (UTF-8 JSON) | body

The header says which cluster, applied index and term the body is of, which release and
finalized command-set version wrote it, when, and the body's length and sha256. Invariant:
`load_backup` returns a state only from a file whose magic, header, length and checksum are
all right and whose body decodes to a state agreeing with the header; anything else is a
`BackupError` saying what is wrong, so a restore from it writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass, fields

from coordinator.core.cluster import ClusterState
from coordinator.core.codec import CodecError, decode_state

__all__ = [
    "BACKUP_FORMAT",
    "HEADER_BYTES_MAX",
    "MAGIC",
    "BackupError",
    "BackupHeader",
    "encode_backup",
    "load_backup",
    "read_backup",
]

MAGIC = b"RPLBKUP\n"
BACKUP_FORMAT = 1
HEADER_BYTES_MAX = 64 * 1024  # a header is a few hundred bytes: more is not a header
_LENGTH = struct.Struct(">I")
PREFIX_BYTES = len(MAGIC) + _LENGTH.size


class BackupError(ValueError):
    """A file that is not a whole, undamaged backup; the message says what is wrong."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackupHeader:
    format: int
    cluster_id: str
    applied_index: int
    term: int
    package_version: str
    command_set_version: int  # the cluster's finalized version at the applied index
    created_at_ms: int
    body_bytes: int
    body_sha256: str


_HEADER_TYPES = {f.name: f.type for f in fields(BackupHeader)}


def encode_backup(
    body: bytes,
    *,
    cluster_id: str,
    applied_index: int,
    term: int,
    package_version: str,
    command_set_version: int,
    created_at_ms: int,
) -> tuple[BackupHeader, bytes]:
    """The header of a backup of `body` (a snapshot), and the whole file's bytes."""
    header = BackupHeader(
        format=BACKUP_FORMAT,
        cluster_id=cluster_id,
        applied_index=applied_index,
        term=term,
        package_version=package_version,
        command_set_version=command_set_version,
        created_at_ms=created_at_ms,
        body_bytes=len(body),
        body_sha256=hashlib.sha256(body).hexdigest(),
    )
    text = json.dumps(asdict(header), sort_keys=True).encode()
    return header, MAGIC + _LENGTH.pack(len(text)) + text + body


def read_backup(data: bytes) -> tuple[BackupHeader, bytes]:
    """The header and the body, once the magic, header, length and checksum are right."""
    if len(data) < PREFIX_BYTES:
        raise BackupError(f"not a backup: {len(data)} bytes, shorter than its prefix")
    if data[: len(MAGIC)] != MAGIC:
        raise BackupError("not a backup: wrong magic (the file does not start as one)")
    (size,) = _LENGTH.unpack_from(data, len(MAGIC))
    if size > HEADER_BYTES_MAX:
        raise BackupError(f"bad header: its length {size} is over {HEADER_BYTES_MAX} bytes")
    if PREFIX_BYTES + size > len(data):
        raise BackupError("truncated: the file ends inside the header")
    header = _header(data[PREFIX_BYTES : PREFIX_BYTES + size])
    body = data[PREFIX_BYTES + size :]
    if len(body) != header.body_bytes:
        raise BackupError(
            f"truncated or padded: the header says {header.body_bytes} bytes of state, "
            f"the file has {len(body)}"
        )
    digest = hashlib.sha256(body).hexdigest()
    if digest != header.body_sha256:
        raise BackupError(
            f"bad checksum: the state's sha256 is {digest}, the header says "
            f"{header.body_sha256} (the file is damaged)"
        )
    return header, body


def load_backup(data: bytes) -> tuple[BackupHeader, ClusterState]:
    """`read_backup`, and the body decoded to the state the header says it is."""
    header, body = read_backup(data)
    try:
        state = decode_state(body)
    except CodecError as exc:
        raise BackupError(f"the state does not decode: {exc.message}") from None
    if state.finalized_version != header.command_set_version:
        raise BackupError(
            f"bad header: command-set version {header.command_set_version}, the state is "
            f"finalized at {state.finalized_version}"
        )
    return header, state


def _header(raw: bytes) -> BackupHeader:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BackupError("bad header: not JSON") from None
    if not isinstance(obj, dict) or set(obj) != set(_HEADER_TYPES):
        raise BackupError("bad header: need exactly " + ", ".join(sorted(_HEADER_TYPES)))
    for name, kind in _HEADER_TYPES.items():
        value = obj[name]
        ok = (
            isinstance(value, str) and bool(value)
            if kind == "str"
            else type(value) is int and value >= 0
        )
        if not ok:
            raise BackupError(f"bad header: {name} = {value!r}")
    header = BackupHeader(**obj)
    if header.format != BACKUP_FORMAT:
        raise BackupError(f"bad header: backup format {header.format}, this release reads 1")
    return header
