"""The linearizability checker on small histories whose verdict is known by hand."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.history import History, Op, check_epochs, check_history, check_register


def op(kind: str, value: Any, start: float, end: float | None, status: str = "ok") -> Op:
    return Op(key="k", kind=kind, value=value, invoke_s=start, complete_s=end, status=status)


GOOD = {
    "sequential": [op("write", 1, 0, 1), op("read", 1, 2, 3)],
    "read_overlapping_write_sees_old": [op("write", 1, 0, 5), op("read", None, 1, 2)],
    "read_overlapping_write_sees_new": [op("write", 1, 0, 5), op("read", 1, 1, 2)],
    "concurrent_writes_either_order": [
        op("write", 1, 0, 5),
        op("write", 2, 0, 5),
        op("read", 1, 6, 7),
    ],
    "unknown_write_took_effect_late": [
        op("write", 1, 0, None, "unknown"),
        op("read", None, 1, 2),
        op("read", 1, 3, 4),
    ],
    "unknown_write_never_took_effect": [
        op("write", 1, 0, None, "unknown"),
        op("read", None, 10, 11),
    ],
    "failed_write_ignored": [op("write", 1, 0, 1, "fail"), op("read", None, 2, 3)],
    "empty": [],
}

BAD = {
    "lost_acknowledged_write": [op("write", 1, 0, 1), op("read", None, 2, 3)],
    "read_of_never_written_value": [op("write", 1, 0, 1), op("read", 2, 2, 3)],
    "stale_read_after_newer_read": [
        op("write", 1, 0, 10),
        op("read", 1, 1, 2),
        op("read", None, 3, 4),
    ],
    "failed_write_observed": [op("write", 1, 0, 1, "fail"), op("read", 1, 2, 3)],
    "unknown_write_flickers": [
        op("write", 1, 0, None, "unknown"),
        op("read", 1, 1, 2),
        op("read", None, 3, 4),
    ],
    "write_order_violated": [
        op("write", 1, 0, 1),
        op("write", 2, 2, 3),
        op("read", 1, 4, 5),
    ],
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_linearizable(name: str) -> None:
    assert check_register(GOOD[name]).ok, name


@pytest.mark.parametrize("name", sorted(BAD))
def test_not_linearizable(name: str) -> None:
    res = check_register(BAD[name])
    assert not res.ok, name
    assert res.reason


def test_keys_are_checked_independently() -> None:
    ops = [
        Op(key="a", kind="write", value=1, invoke_s=0, complete_s=1, status="ok"),
        Op(key="b", kind="read", value=1, invoke_s=2, complete_s=3, status="ok"),
    ]
    res = check_history(ops)
    assert not res.ok and res.key == "b"


def test_recorder_and_checker_many_reads() -> None:
    """Sixty concurrent-ish reads around one write stay fast (memoized search)."""
    h = History()
    w = h.invoke("k", "write", "x")
    reads = [h.invoke("k", "read") for _ in range(30)]
    for r in reads:
        h.ok(r, None)
    h.ok(w)
    later = [h.invoke("k", "read") for _ in range(30)]
    for r in later:
        h.ok(r, "x")
    assert check_history(h.ops).ok
    assert h.counts() == {"write_ok": 1, "read_ok": 60}


def epoch_read(epoch: int, owner: str, start: float, end: float, key: str = "p0") -> Op:
    return Op(
        key=key, kind="read", value=(epoch, owner), invoke_s=start, complete_s=end, status="ok"
    )


EPOCHS_GOOD = {
    "growing": [epoch_read(1, "a", 0, 1), epoch_read(2, "b", 2, 3), epoch_read(2, "b", 4, 5)],
    # Overlapping reads may see the change in either order.
    "overlap_sees_new_then_old": [epoch_read(2, "b", 0, 5), epoch_read(1, "a", 1, 2)],
    "partitions_independent": [epoch_read(5, "a", 0, 1), epoch_read(1, "b", 2, 3, key="p1")],
}
EPOCHS_BAD = {
    "epoch_went_back": [epoch_read(2, "b", 0, 1), epoch_read(1, "a", 2, 3)],
    "went_back_later": [
        epoch_read(1, "a", 0, 1),
        epoch_read(3, "c", 2, 3),
        epoch_read(2, "b", 3.5, 4),
    ],
    "one_epoch_two_owners": [epoch_read(2, "a", 0, 1), epoch_read(2, "b", 2, 3)],
}


@pytest.mark.parametrize("name", sorted(EPOCHS_GOOD))
def test_epoch_histories_that_are_linearizable(name: str) -> None:
    assert check_epochs(EPOCHS_GOOD[name]).ok


@pytest.mark.parametrize("name", sorted(EPOCHS_BAD))
def test_epoch_histories_that_are_not(name: str) -> None:
    res = check_epochs(EPOCHS_BAD[name])
    assert not res.ok and res.key == "p0" and res.reason
