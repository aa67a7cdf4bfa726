"""Group commit's envelope (replication/batch.py): golden bytes, round trips, and refusal of
anything malformed without reading past the buffer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.codec import encode_command
from coordinator.core.commands import Barrier
from replication.batch import (
    BATCH_MAGIC,
    ITEMS_MAX,
    BatchFormatError,
    decode_batch,
    decode_results,
    encode_batch,
    encode_results,
    is_batch,
)


def test_golden_bytes_of_a_batch_and_its_results() -> None:
    # Never change these bytes: journals hold them. A new layout gets a new magic.
    assert encode_batch([b"ab", b"", b"c"]) == (
        b"\xc1RB1\x03\x00\x00\x00\x02\x00\x00\x00ab\x00\x00\x00\x00\x01\x00\x00\x00c"
    )
    assert encode_results([b"ok"]) == b"\xc1RR1\x01\x00\x00\x00\x02\x00\x00\x00ok"
    assert encode_batch([]) == b"\xc1RB1\x00\x00\x00\x00"


def test_no_machine_entry_or_barrier_is_taken_for_a_batch() -> None:
    # Commands are msgpack arrays; 0xC1 is the one byte msgpack never writes.
    entry = encode_command(Barrier(nonce="n"), "rid")
    assert not is_batch(entry)
    assert not is_batch(b"")
    assert is_batch(encode_batch([entry]))
    assert BATCH_MAGIC[0] == 0xC1


@given(st.lists(st.binary(max_size=64), max_size=40))
def test_round_trip(items: list[bytes]) -> None:
    assert decode_batch(encode_batch(items)) == items
    assert decode_results(encode_results(items)) == items


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1RB1",  # no count
        b"\xc1RB1\x01\x00\x00\x00",  # one item claimed, none there
        b"\xc1RB1\x01\x00\x00\x00\xff\xff\xff\x7f",  # an item claiming 2 GiB
        b"\xc1RB1\x00\x00\x00\x00trailing",
        b"\xc1RB1" + (ITEMS_MAX + 1).to_bytes(4, "little"),
        b"\xc1RR1\x00\x00\x00\x00",  # results are not a batch
    ],
)
def test_malformed_batches_are_refused(data: bytes) -> None:
    with pytest.raises(BatchFormatError):
        decode_batch(data)


@given(st.binary(max_size=80))
def test_arbitrary_bytes_decode_exactly_or_raise_the_format_error(data: bytes) -> None:
    try:
        items = decode_batch(BATCH_MAGIC + data)
    except BatchFormatError:
        return
    assert encode_batch(items) == BATCH_MAGIC + data  # nothing skipped, nothing invented
