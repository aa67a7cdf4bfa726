"""The source log across routing generations: the existing layout is generation 0, seals cut
a generation, every generation tiles its offsets, and nothing is lost or doubled at a cut."""

from __future__ import annotations

import io
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.source import (
    GENERATION_OFFSETS,
    SCHEMA,
    Producer,
    SourceCorrupt,
    SourceLog,
    SourceSealed,
    generate,
    generation_base,
    generation_of,
    segment_key,
)
from pipeline.state import PartitionState, aggregate_records
from pipeline.store import LocalStore, ObjectStore, S3Store
from shared.routing import Routing

SEALERS_AND_PRODUCERS = 4


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    client, bucket = request.getfixturevalue("s3_bucket")
    return S3Store(bucket, "ripple", client=client)


def rows(log: SourceLog) -> list[tuple[str, float, int]]:
    """Every record of every generation, as (key, value, offset)."""
    out: list[tuple[str, float, int]] = []
    for segment in log.all_segments():
        t = log.read_segment(segment).to_pydict()
        out += zip(t["key"], t["value"], t["offset"], strict=True)
    return out


def visible(state: PartitionState) -> dict[str, tuple[int, float, float, float, float]]:
    """What the guarantee compares: count, sum, min, max, last (offsets differ per layout)."""
    return {k: (s.count, s.sum, s.min, s.max, s.last) for k, s in state.items()}


def test_existing_layout_is_generation_zero(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    Producer(store, 4).produce(generate(100, 10, seed=1))
    names = store.list_keys("source/")
    assert names and all(n.startswith("source/p") for n in names)
    assert SourceLog(store, [4]).all_segments() == SourceLog(store, 4).all_segments()
    assert segment_key(3, 7) == "source/p00003/00000000000000000007.parquet"
    assert segment_key(3, generation_base(2) + 7).startswith("source/g00002/p00003/")
    assert generation_of(GENERATION_OFFSETS - 1) == 0 and generation_of(GENERATION_OFFSETS) == 1
    with pytest.raises(ValueError):
        generation_base(-1)


def test_a_seal_cuts_a_generation_and_appends_learn_the_next(store: ObjectStore) -> None:
    old = SourceLog(store, 2)
    old.append(1, [("a", 1.0), ("b", 2.0)])
    both = SourceLog(store, [2, 3])
    with pytest.raises(ValueError):
        old.seal(1, 0)  # a log that knows no next generation cannot name one
    assert both.cut(1, 0) is None
    assert both.seal(1, 0) == 2
    assert both.seal(1, 0) == 2  # idempotent: the cut again
    assert both.cut(1, 0) == 2 and both.end_offset(1, 0) == 2
    assert both.seal(0, 0) == 0  # an empty partition is cut at its base
    with pytest.raises(SourceSealed) as caught:
        SourceLog(store, 2).append(1, [("c", 3.0)])
    assert caught.value.cut == 2 and caught.value.routing == Routing(generation=1, partitions=3)
    with pytest.raises(SourceCorrupt):
        SourceLog(store, [2, 5]).seal(1, 0)  # sealed for another next generation
    # The cut generation stays readable for replay; the next starts at its own base.
    assert old.read(1).to_pydict()["key"] == ["a", "b"]
    assert [s.first_offset for s in old.segments(1)] == [0]
    base = generation_base(1)
    assert both.append(2, [("d", 4.0)]) == base
    assert both.append(2, [("e", 5.0), ("f", 6.0)]) == base + 1
    assert [(s.first_offset, s.count, s.generation) for s in both.segments(2, base)] == [
        (base, 1, 1),
        (base + 1, 2, 1),
    ]
    assert both.read(2, base + 1).to_pydict()["offset"] == [base + 1, base + 2]
    assert both.end_offset(2) == base + 3


def test_a_zero_row_tail_that_is_no_seal_is_corrupt(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    sink = io.BytesIO()
    pq.write_table(SCHEMA.empty_table(), sink)
    store.put_if_absent(segment_key(0, 0), sink.getvalue())
    with pytest.raises(SourceCorrupt):
        SourceLog(store, 1).segments(0)


def test_a_later_generation_keeps_the_tiling_invariant(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    log = SourceLog(store, [1, 1])
    log.append(0, [("a", 1.0)])
    data = (tmp_path / segment_key(0, generation_base(1))).read_bytes()
    store.put_if_absent(segment_key(0, generation_base(1) + 5), data)  # a gap after 1 record
    with pytest.raises(SourceCorrupt):
        log.read(0, generation_base(1))
    with pytest.raises(SourceCorrupt):  # offsets below the base in a generation's prefix
        store.put_if_absent("source/g00001/p00000/00000000000000000000.parquet", data)
        log.segments(0, generation_base(1))


def test_a_producer_follows_seals_and_every_record_lands_once(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    producer = Producer(store, 4)
    first = generate(400, 30, seed=1)
    producer.produce(first)
    sealer = SourceLog(store, [4, 6])
    for p in (0, 2):  # half the partitions cut: the producer meets a seal mid-call
        sealer.seal(p, 0)
    second = generate(400, 30, seed=2)
    firsts = producer.produce(second)
    assert producer.log.routing == Routing(generation=1, partitions=6)
    assert any(generation_of(o) == 1 for o in firsts.values())
    got = rows(SourceLog(store, [4, 6]))
    assert Counter((k, v) for k, v, _ in got) == Counter(first + second)
    # Each key's records in offset order are its records in the order produced.
    for key in {k for k, _ in first + second}:
        mine = sorted((o, v) for k, v, o in got if k == key)
        assert [v for _, v in mine] == [v for k, v in first + second if k == key]


def test_racing_producers_and_sealers_lose_and_double_nothing(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    batches = [generate(60, 12, seed=s) for s in range(12)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(SEALERS_AND_PRODUCERS + 1)

    def produce(i: int) -> None:
        producer = Producer(store, 3)  # each its own instance, like separate processes
        try:
            barrier.wait(timeout=10)
            for batch in batches[i::SEALERS_AND_PRODUCERS]:
                producer.produce(batch)
        except BaseException as exc:
            errors.append(exc)

    def seal() -> None:
        try:
            barrier.wait(timeout=10)
            for p in range(3):
                SourceLog(store, [3, 5]).seal(p, 0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(SEALERS_AND_PRODUCERS)]
    threads.append(threading.Thread(target=seal))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    log = SourceLog(store, [3, 5])
    got = rows(log)
    assert Counter((k, v) for k, v, _ in got) == Counter(r for b in batches for r in b)
    for p in range(3):
        cut = log.cut(p, 0)
        assert cut is not None and log.end_offset(p, 0) == cut
        assert log.read(p).to_pydict()["offset"] == list(range(cut))
    for p in range(5):
        end = log.end_offset(p)
        assert log.read(p, generation_base(1)).to_pydict()["offset"] == list(
            range(generation_base(1), end)
        )


RECORDS = st.lists(
    st.tuples(st.sampled_from([f"K{i}" for i in range(9)]), st.integers(-640, 640)),
    max_size=60,
)


@given(RECORDS, RECORDS, st.integers(1, 5), st.integers(1, 7))
@settings(max_examples=25, deadline=None)
def test_batch_job_over_all_generations_equals_one_generation(
    before: list[tuple[str, int]], after: list[tuple[str, int]], old_n: int, new_n: int
) -> None:
    records = [(k, t / 64) for k, t in before], [(k, t / 64) for k, t in after]
    with tempfile.TemporaryDirectory() as cut_dir, tempfile.TemporaryDirectory() as one_dir:
        cut_store, one_store = LocalStore(cut_dir), LocalStore(one_dir)
        producer = Producer(cut_store, old_n)
        producer.produce(records[0])
        sealer = SourceLog(cut_store, [old_n, new_n])
        for p in range(old_n):
            sealer.seal(p, 0)
        producer.produce(records[1])
        one = Producer(one_store, old_n)
        for part in records:
            one.produce(part)
        across = aggregate_records(rows(SourceLog(cut_store, [old_n, new_n])))
        single = aggregate_records(rows(SourceLog(one_store, old_n)))
        assert visible(across) == visible(single)
