"""Checkpoints: round trip, create-only, read exactly the recorded URI; dead-letter segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline.checkpoint import (
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointStore,
    checkpoint_key,
    encode,
)
from pipeline.state import KeyState
from pipeline.store import LocalStore, S3Store, StoreKeyMissing
from shared.checkpoint_ref import checkpoint_key_parts, checkpoints_prefix

# Fixtures are imported by name so pytest finds them here; test parameters then "redefine"
# those names, which is how pytest fixtures work, hence the file-wide F811 waiver.

STATE = {
    "SYM0001": KeyState(
        count=3, sum=6.0, min=1.0, max=3.0, last=2.0, last_offset=7, first_offset=1
    ),
    "SYM0000": KeyState.of(0.5, 4),
}


def test_round_trip_local(tmp_path: Path) -> None:
    ckpt = CheckpointStore(LocalStore(str(tmp_path)))
    uri = ckpt.write(3, 2, 10, STATE)
    assert uri == f"file://{tmp_path}/{checkpoint_key(3, 2, 10)}"
    assert uri.endswith("checkpoints/p00003/e0000000002-o00000000000000000010.ckpt")
    offset, state, partition, epoch = ckpt.read(uri)
    assert (offset, state, partition, epoch) == (10, STATE, 3, 2)


def test_round_trip_s3(s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    ckpt = CheckpointStore(S3Store(bucket, "r", client=client))
    uri = ckpt.write(0, 1, 0, {})
    assert uri == f"s3://{bucket}/r/{checkpoint_key(0, 1, 0)}"
    assert ckpt.read(uri) == (0, {}, 0, 1)
    assert ckpt.write(0, 1, 0, {}) == uri  # a retried identical write is a no-op
    with pytest.raises(CheckpointConflict):
        ckpt.write(0, 1, 0, STATE)


def test_create_only_identical_ok_different_refused(tmp_path: Path) -> None:
    ckpt = CheckpointStore(LocalStore(str(tmp_path)))
    uri = ckpt.write(1, 1, 5, STATE)
    # Same state built in another order encodes to the same bytes.
    assert ckpt.write(1, 1, 5, dict(reversed(list(STATE.items())))) == uri
    with pytest.raises(CheckpointConflict):
        ckpt.write(1, 1, 5, {})
    assert ckpt.read(uri).state == STATE


def test_read_loads_exactly_the_recorded_uri(tmp_path: Path) -> None:
    ckpt = CheckpointStore(LocalStore(str(tmp_path)))
    recorded = ckpt.write(1, 1, 5, STATE)
    ckpt.write(1, 2, 9, {})  # newer object, e.g. from a fenced owner: must not be picked
    assert ckpt.read(recorded).offset == 5
    with pytest.raises(StoreKeyMissing):
        ckpt.read(f"file://{tmp_path}/{checkpoint_key(1, 3, 0)}")
    with pytest.raises(CheckpointCorrupt):
        ckpt.read("file:///elsewhere/" + checkpoint_key(1, 1, 5))
    with pytest.raises(CheckpointCorrupt):
        ckpt.read(f"file://{tmp_path}/checkpoints/p00001/latest")


def test_name_and_body_must_agree(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    store.put_if_absent(checkpoint_key(1, 1, 5), encode(1, 1, 6, STATE))
    store.put_if_absent(checkpoint_key(1, 1, 7), b"\x93garbage")
    ckpt = CheckpointStore(store)
    with pytest.raises(CheckpointCorrupt):
        ckpt.read(store.uri(checkpoint_key(1, 1, 5)))
    with pytest.raises(CheckpointCorrupt):
        ckpt.read(store.uri(checkpoint_key(1, 1, 7)))


def test_dead_letter_segment(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    ckpt = CheckpointStore(store)
    uri = ckpt.write_dead_letter(2, 3, 100, 150, STATE)
    assert ckpt.write_dead_letter(2, 3, 100, 150, STATE) == uri
    (key,) = ckpt.dead_letter_keys(2)
    table = pq.read_table(store.local_path(key)).to_pydict()
    assert table["key"] == ["SYM0000", "SYM0001"]
    assert table["partition"] == [2, 2] and table["count"] == [1, 3]
    with pytest.raises(CheckpointConflict):
        ckpt.write_dead_letter(2, 3, 100, 150, {})


def test_a_checkpoint_key_reads_back_as_its_partition_epoch_and_offset() -> None:
    key = checkpoint_key(3, 7, 42)
    assert key.startswith(checkpoints_prefix(3)) and not key.startswith(checkpoints_prefix(30))
    assert checkpoint_key_parts(key) == (3, 7, 42)
    for other in ("checkpoints/p00003/e0000000007-o42.ckpt", "dead/" + key, key + ".tmp"):
        assert checkpoint_key_parts(other) is None, other
    # A recorded pipeline's numbers (SLOT_BASE and up) read back too; a spelling
    # `checkpoint_key` never writes (a leading zero past five digits) does not.
    slot = checkpoint_key(1 << 20, 1, 2)
    assert checkpoint_key_parts(slot) == (1 << 20, 1, 2)
    assert checkpoint_key_parts(slot.replace("/p1", "/p01")) is None
