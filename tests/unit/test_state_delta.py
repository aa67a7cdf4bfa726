"""Incremental checkpoints: a base and deltas round trip, compaction policy, a broken chain
is detected before anything loads, and a retried encoding has identical bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from pipeline.spec import state_delta
from pipeline.spec.state_delta import (
    COMPACT_DELTA_FRACTION,
    COMPACT_DELTAS_MAX,
    ChainBroken,
    ChainStats,
    CheckpointId,
    encode_base,
    encode_delta,
    header_of,
    load,
)
from pipeline.spec.state_store import StateStore

P = 1_000_003


@pytest.fixture
def source(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore.open(tmp_path / "source")
    yield s
    s.close()


def _chain(source: StateStore) -> list[bytes]:
    """A base of 50 keys, then two deltas (updates, inserts, deletes)."""
    source.put_many((f"k{i:03d}", {"n": i}) for i in range(50))
    source.take_delta()
    base = b"".join(encode_base(CheckpointId(P, 1, 100), source.raw_rows()))
    source.put_many([("k001", {"n": 1001}), ("new", {"n": -1})])
    source.delete_many(["k002"])
    d1 = b"".join(encode_delta(CheckpointId(P, 1, 200), header_of(base), source.take_delta()))
    source.delete_many(["new"])
    source.put_many([("k003", {"n": 3003})])
    d2 = b"".join(encode_delta(CheckpointId(P, 2, 300), header_of(d1), source.take_delta()))
    return [base, d1, d2]


def _loaded(tmp_path: Path, chain: list[bytes], name: str = "target") -> list[object]:
    target = StateStore.open(tmp_path / name)
    try:
        load(chain, target)
        assert not list(target.take_delta().entries())  # a loaded chain leaves no dirty marks
        return list(target.rows())
    finally:
        target.close()


def test_base_plus_deltas_round_trip(tmp_path: Path, source: StateStore) -> None:
    chain = _chain(source)
    assert _loaded(tmp_path, chain) == list(source.rows())
    head = header_of(chain[-1])
    assert head.parent == CheckpointId(P, 1, 200) and head.base == CheckpointId(P, 1, 100)
    assert head.seq == 2 and head.kind == "delta"


def test_a_prefix_of_the_chain_is_that_checkpoint(tmp_path: Path, source: StateStore) -> None:
    chain = _chain(source)
    rows = dict(_loaded(tmp_path, chain[:2]))  # type: ignore[arg-type]
    assert rows["k001"] == {"n": 1001} and rows["new"] == {"n": -1} and "k002" not in rows


def test_retried_encoding_is_byte_identical(tmp_path: Path, source: StateStore) -> None:
    source.put_many((i, {"v": i}) for i in range(10_000))
    first = b"".join(encode_base(CheckpointId(P, 1, 1), source.raw_rows()))
    again = b"".join(encode_base(CheckpointId(P, 1, 1), source.raw_rows()))
    assert first == again
    source.take_delta()
    source.put_many((i, {"v": -i}) for i in range(0, 10_000, 100))
    delta = source.take_delta()
    once = b"".join(encode_delta(CheckpointId(P, 1, 2), header_of(first), delta))
    source.put_many([(5, {"v": 0}), (100, {"v": 1})])  # later writes do not change a taken delta
    assert b"".join(encode_delta(CheckpointId(P, 1, 2), header_of(first), delta)) == once


def test_a_base_streams_in_bounded_pieces(source: StateStore) -> None:
    source.put_many((i, i) for i in range(3 * state_delta.FRAME_ROWS))
    pieces = list(encode_base(CheckpointId(P, 1, 1), source.raw_rows()))
    assert len(pieces) == 1 + 3 + 1  # header, frames, trailer
    assert max(len(p) for p in pieces) < 64 * state_delta.FRAME_ROWS


@pytest.mark.parametrize(
    "broken",
    [
        lambda c: c[1:],  # the base is missing
        lambda c: [c[0], c[2]],  # a delta is missing
        lambda c: [c[0], c[2], c[1]],  # out of order
        lambda c: [c[0], c[1][:-5], c[2]],  # cut short
        lambda c: [c[0][:40] + bytes([c[0][40] ^ 1]) + c[0][41:], c[1], c[2]],  # a flipped bit
        lambda c: [c[0], c[1], c[2] + b"\x00"],  # trailing bytes
        lambda c: [b"not a checkpoint"],
        lambda c: [],
    ],
)
def test_a_broken_chain_is_detected_before_any_row_loads(
    tmp_path: Path, source: StateStore, broken: object
) -> None:
    chain = broken(_chain(source))  # type: ignore[operator]
    target = StateStore.open(tmp_path / "target")
    try:
        with pytest.raises(ChainBroken):
            load(chain, target)
        assert target.count() == 0
    finally:
        target.close()


def _forged(frames: list[list[list[bytes | None]]]) -> bytes:
    """A base whose checksum is right but whose entries are not (a writer's bug, not noise)."""
    head = {"base": [P, 1, 1], "id": [P, 1, 1], "kind": "base", "parent": None, "seq": 0, "v": 3}
    body = b"".join(msgpack.packb(x, use_bin_type=True) for x in [head, *frames])
    rows = sum(len(f) for f in frames)
    trailer = {"rows": rows, "sha256": hashlib.sha256(body).hexdigest()}
    return body + msgpack.packb(trailer, use_bin_type=True)


@pytest.mark.parametrize(
    "frames",
    [
        [[[b"b", b"1"]], [[b"a", b"2"]]],  # out of order across frames
        [[[b"a", b"1"], [b"a", b"2"]]],  # a key twice
        [[[b"a", None]]],  # a base that deletes
    ],
)
def test_a_base_with_wrong_entries_is_refused(
    tmp_path: Path, frames: list[list[list[bytes | None]]]
) -> None:
    target = StateStore.open(tmp_path / "t")
    try:
        with pytest.raises(ChainBroken):
            load([_forged(frames)], target)
        assert target.count() == 0
        load([_forged([[[b"a", b"1"], [b"b", b"2"]]])], target)  # the forger is right otherwise
        assert target.count() == 2
    finally:
        target.close()


def test_a_delta_of_another_base_is_refused(tmp_path: Path, source: StateStore) -> None:
    chain = _chain(source)
    other_base = b"".join(encode_base(CheckpointId(P, 1, 150), source.raw_rows()))
    target = StateStore.open(tmp_path / "t")
    try:
        with pytest.raises(ChainBroken):
            load([other_base, chain[1]], target)
    finally:
        target.close()


def test_a_delta_must_follow_its_parent(source: StateStore) -> None:
    base = b"".join(encode_base(CheckpointId(P, 2, 100), source.raw_rows()))
    with pytest.raises(ValueError):
        encode_delta(CheckpointId(P, 1, 200), header_of(base), source.take_delta())


def test_compaction_policy_by_bytes_and_by_count() -> None:
    stats = ChainStats(base_bytes=1000)
    assert not stats.needs_base()
    assert stats.with_delta(int(1000 * COMPACT_DELTA_FRACTION) + 1).needs_base()
    small = stats
    for _ in range(COMPACT_DELTAS_MAX - 1):
        small = small.with_delta(1)
    assert not small.needs_base()
    assert small.with_delta(1).needs_base()
