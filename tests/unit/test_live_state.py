"""A hosted partition's live state on disk (`pipeline.spec.live_state`): it decides what the
in-memory merge decides (admission under the limit, dead letters, windows closed and evicted)
for the same batches, has no key limit at 0, converts to and from the format-2 state without
loss, reads a key's rows or a bounded head without the whole state, shares one block cache
between a worker's stores, and leaves nothing on disk once destroyed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pipeline.spec.aggregations import KeyState, outputs_of
from pipeline.spec.live_state import LiveState, worker_cache
from pipeline.spec.partition_state import SpecPartitionState, merge_spec_batch
from pipeline.spec.windows import US_PER_S
from shared.spec.parse import parse_spec
from tests.unit.test_pipeline_spec_merge import SetSketches
from tests.unit.test_spec_windows import BASE, MINUTE, windowed

PLAIN = parse_spec(BASE)
WINDOWED = parse_spec(windowed('column = "at"\nsize = "1m"\nslide = "30s"\nlateness = "30s"'))
BATCHES = 12


def batches(seed: int, window: bool) -> list[tuple[dict[Any, KeyState], dict[Any, int], int]]:
    """Random batches of partial states: keys drawn from a few hosts (and window starts),
    offsets growing, each batch with its largest event time."""
    rng = random.Random(seed)
    out = []
    offset = 0
    for i in range(BATCHES):
        values: dict[Any, KeyState] = {}
        firsts: dict[Any, int] = {}
        for _ in range(rng.randint(0, 6)):
            host = rng.choice(["a", "b", "c", "d", "e", None])
            key: Any = host if not window else (host, (i // 2 + rng.randint(0, 2)) * MINUTE // 2)
            values[key] = {
                "n": rng.randint(1, 3),
                "slowest": rng.choice([None, rng.randint(0, 99)]),
            }
            firsts.setdefault(key, offset)
            offset += 1
        out.append((values, firsts, (i // 2 + 2) * MINUTE // 2 + US_PER_S))
    return out


@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("max_keys", [0, 3])
@pytest.mark.parametrize("seed", range(4))
def test_merging_into_the_store_decides_what_the_dict_merge_decides(
    tmp_path: Path, window: bool, max_keys: int, seed: int
) -> None:
    spec = WINDOWED if window else PLAIN
    outputs, sketches = outputs_of(spec), SetSketches()
    live = LiveState.create(tmp_path / "p", spec.window)
    expected = SpecPartitionState()
    limit = max_keys or 10**9  # the dict merge needs a bound; 0 is "none" only on disk
    try:
        for values, firsts, top in batches(seed, window):
            expected, dead = merge_spec_batch(
                outputs, expected, values, firsts, limit, sketches, spec.window, top
            )
            assert live.merge(outputs, values, firsts, max_keys, sketches, top) == dead
            got = live.snapshot()
            assert got.values == expected.values and got.firsts == expected.firsts
            assert got.basis_us == expected.basis_us and got.closed == expected.closed
            assert len(live) == len(expected)
        if window:
            assert expected.closed, "the batches close some windows"
    finally:
        live.destroy()


def test_no_key_limit_at_zero_and_a_positive_one_counts_the_rows_held(tmp_path: Path) -> None:
    outputs, sketches = outputs_of(PLAIN), SetSketches()
    many = {f"h{i:05d}": {"n": 1, "slowest": i} for i in range(5000)}
    firsts = {k: i for i, k in enumerate(many)}
    free = LiveState.create(tmp_path / "free", None)
    assert free.merge(outputs, many, firsts, 0, sketches) == {} and len(free) == 5000
    capped = LiveState.create(tmp_path / "capped", None)
    dead = capped.merge(outputs, many, firsts, 2000, sketches)
    assert len(capped) == 2000 and set(dead) == set(list(many)[2000:])
    # A known key still merges at the limit; a new one is refused.
    more: dict[str, KeyState] = {"h00000": {"n": 1, "slowest": None}, "new": {"n": 1, "slowest": 1}}
    assert set(capped.merge(outputs, more, {"h00000": 9, "new": 9}, 2000, sketches)) == {"new"}
    assert capped.values_of(["h00000"]).values["h00000"]["n"] == 2
    with pytest.raises(ValueError, match="max_keys"):
        capped.merge(outputs, {}, {}, -1, sketches)
    free.destroy()
    capped.destroy()


def test_a_state_converts_to_the_store_and_back_without_loss(tmp_path: Path) -> None:
    state = SpecPartitionState(
        values={("a", MINUTE): {"n": 3, "slowest": 4}, (None, 0): {"n": 1, "slowest": None}},
        firsts={("a", MINUTE): 7, (None, 0): 3},
        basis_us=MINUTE + 5,
        closed=[{"key": "b", "window_start": 0, "window_end": MINUTE, "n": 1, "slowest": 2}],
    )
    live = LiveState.from_state(tmp_path / "p", WINDOWED.window, state)
    assert live.snapshot() == state and live.open_starts == {0, MINUTE}
    # A key reads as its rows in every open window, the rest of the state unread.
    assert live.values_of(["a"]).values == {("a", MINUTE): {"n": 3, "slowest": 4}}
    assert live.values_of(["zz"]).values == {}
    head, more = live.head(1)
    assert len(head.values) == 1 and more
    assert live.head(2) == (
        SpecPartitionState(values=state.values, firsts=state.firsts, basis_us=state.basis_us),
        False,
    )
    live.trim_closed(1)
    assert live.closed == []
    live.destroy()


def test_stores_share_one_cache_and_a_destroyed_one_leaves_nothing(tmp_path: Path) -> None:
    cache = worker_cache(8 * 1024 * 1024)
    outputs, sketches = outputs_of(PLAIN), SetSketches()
    one = LiveState.create(tmp_path / "one", None, cache)
    two = LiveState.create(tmp_path / "two", None, cache)
    one.merge(outputs, {"a": {"n": 1, "slowest": 1}}, {"a": 0}, 0, sketches)
    two.merge(outputs, {"b": {"n": 2, "slowest": 2}}, {"b": 0}, 0, sketches)
    assert one.values_of(["a", "b"]).values == {"a": {"n": 1, "slowest": 1}}
    assert cache.get_usage() > 0
    one.destroy()
    assert not (tmp_path / "one").exists()
    # Created again in the same place (hosted again): the old rows are gone.
    two.close()
    again = LiveState.create(tmp_path / "two", None, cache)
    assert len(again) == 0
    again.destroy()


def test_a_state_that_fails_to_load_leaves_no_store(tmp_path: Path) -> None:
    broken = SpecPartitionState(values={"a": {"n": 1, "slowest": 1}}, firsts={})  # no first
    with pytest.raises(KeyError):
        LiveState.from_state(tmp_path / "p", None, broken)
    assert not (tmp_path / "p").exists()
