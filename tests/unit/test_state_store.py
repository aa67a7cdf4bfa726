"""The disk state store: every method, reopen, delta semantics, keys of every type, and the
codec's deterministic bytes."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pytest

from pipeline.spec.state_codec import (
    StateCodecError,
    pack_key,
    pack_value,
    unpack_key,
    unpack_value,
)
from pipeline.spec.state_store import StateStore, StateStoreError

KEYS: list[Any] = [
    None,
    True,
    0,
    -7,
    2**62,
    1.5,
    "customer-1",
    "",
    b"\x00raw",
    decimal.Decimal("12.30"),
    datetime.date(2026, 11, 29),
    ("svc", datetime.datetime(2026, 11, 29, 13, 0)),
    ("svc", datetime.datetime(2026, 11, 29, 13, 0, tzinfo=datetime.UTC)),
    (1, ("nested", None)),
]
STATE = {
    "n": 3,
    "total": decimal.Decimal("10.05"),
    "mean": (decimal.Decimal("7.5"), 2),
    "last": (41, datetime.datetime(2026, 1, 2, 3, 4, 5)),
    "sketch": b"\x02\x01\x07",
    "min": None,
}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = StateStore.open(tmp_path / "p1")
    yield s
    s.close()


def test_codec_round_trips_every_key_type_and_state() -> None:
    for key in KEYS:
        assert unpack_key(pack_key(key)) == key
    assert unpack_value(pack_value(STATE)) == STATE


def test_codec_bytes_are_deterministic() -> None:
    reordered = dict(reversed(list(STATE.items())))
    assert pack_value(reordered) == pack_value(STATE)
    assert pack_key(("a", 1)) == pack_key(("a", 1))
    assert len({pack_key(k) for k in KEYS}) == len(KEYS)  # distinct keys, distinct bytes


def test_codec_refuses_what_it_cannot_encode() -> None:
    with pytest.raises(StateCodecError):
        pack_value({"x": object()})
    with pytest.raises(StateCodecError):
        pack_key({"a": 1})
    with pytest.raises(StateCodecError):
        unpack_value(b"\xc1")


def test_put_get_count_and_rows_in_key_order(store: StateStore) -> None:
    store.put_many((k, {"i": i, **STATE}) for i, k in enumerate(KEYS))
    assert store.count() == len(KEYS)
    got = store.get_many([*KEYS, "missing"])
    assert set(got) == set(KEYS)
    assert got[("svc", datetime.datetime(2026, 11, 29, 13, 0))]["i"] == 11
    rows = list(store.rows())
    assert [pack_key(k) for k, _ in rows] == sorted(pack_key(k) for k in KEYS)
    assert [k for k, _ in store.raw_rows()] == sorted(pack_key(k) for k in KEYS)
    assert store.raw_get_many([pack_key("customer-1"), pack_key("nope")])[1] is None


def test_put_updates_and_delete_keep_the_count(store: StateStore) -> None:
    store.put_many([("a", 1), ("b", 2), ("a", 3)])  # the later row of a key wins
    assert store.count() == 2 and store.get_many(["a"]) == {"a": 3}
    store.put_many([("a", 4)])
    assert store.count() == 2
    store.delete_many(["a", "never"])
    assert store.count() == 1 and store.get_many(["a", "b"]) == {"b": 2}


def test_reopen_after_close_keeps_rows_count_and_marks(tmp_path: Path) -> None:
    s = StateStore.open(tmp_path / "p")
    s.put_many([("a", STATE), (("k", 1), 2)])
    s.take_delta()
    s.put_many([("c", 3)])
    s.close()
    s.close()  # twice is harmless
    with pytest.raises(StateStoreError):
        s.get_many(["a"])
    again = StateStore.open(tmp_path / "p")
    try:
        assert again.count() == 3
        assert again.get_many(["a", ("k", 1)]) == {"a": STATE, ("k", 1): 2}
        assert again.take_delta().decoded() == ([("c", 3)], [])
    finally:
        again.close()


def test_one_process_opens_a_store_once(store: StateStore) -> None:
    with pytest.raises(StateStoreError):
        StateStore.open(store.directory)


def test_destroy_removes_the_directory(tmp_path: Path) -> None:
    s = StateStore.open(tmp_path / "gone")
    s.put_many([("a", 1)])
    s.destroy()
    assert not (tmp_path / "gone").exists()
    fresh = StateStore.open(tmp_path / "gone")
    assert fresh.count() == 0
    fresh.close()


def test_take_delta_returns_changes_since_the_previous_call(store: StateStore) -> None:
    store.put_many([("a", 1), ("b", 2), ("c", 3)])
    first = store.take_delta()
    assert first.decoded() == ([("a", 1), ("b", 2), ("c", 3)], [])
    assert not list(store.take_delta().entries())  # nothing since
    store.put_many([("b", 20), ("d", 4)])
    store.delete_many(["c"])
    rows, deletes = store.take_delta().decoded()
    assert rows == [("b", 20), ("d", 4)] and deletes == ["c"]


def test_update_then_delete_is_a_delete_and_delete_then_put_an_upsert(store: StateStore) -> None:
    store.put_many([("a", 1), ("b", 2)])
    store.take_delta()
    store.put_many([("a", 10)])
    store.delete_many(["a"])
    store.delete_many(["b"])
    store.put_many([("b", 5)])
    assert store.take_delta().decoded() == ([("b", 5)], ["a"])


def test_a_write_after_take_delta_is_in_the_next_delta(store: StateStore) -> None:
    store.put_many([("a", 1)])
    taken = store.take_delta()
    store.put_many([("a", 2)])
    assert taken.decoded() == ([("a", 1)], [])
    assert store.take_delta().decoded() == ([("a", 2)], [])


def test_apply_deletes_after_upserts_in_one_batch(store: StateStore) -> None:
    store.put_many([("a", 1)])
    store.take_delta()
    store.apply([(pack_key("a"), pack_value(2)), (pack_key("n"), pack_value(1))], [pack_key("a")])
    assert store.count() == 1 and store.get_many(["a", "n"]) == {"n": 1}
    assert store.take_delta().decoded() == ([("n", 1)], ["a"])


def test_append_new_writes_rows_without_marks(store: StateStore) -> None:
    rows = sorted((pack_key(i), pack_value({"n": i})) for i in range(100))
    store.append_new(rows[:50])
    store.append_new(rows[50:])
    assert store.count() == 100 and not list(store.take_delta().entries())
    assert store.get_many([7]) == {7: {"n": 7}}
