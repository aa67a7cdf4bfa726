"""A recorded pipeline's source log across a rescale: a later generation's partitions under
fresh numbers with offsets from its base, and a producer that follows a seal to it by reading
the pipeline's description again. A local-directory store; no Spark."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pipeline.source import generation_base, generation_of
from pipeline.spec.produce import SpecProducer, key_text
from pipeline.spec.run import PipelineInfo, PipelineRun
from pipeline.store import LocalStore
from shared.errors import RippleError, UnavailableError
from shared.routing import SLOT_BASE, Routing

SPEC = """
[schema]
ddl = "k STRING, seq BIGINT"
key = "k"

[[aggregations]]
name = "n"
fn = "count"
"""

OLD = PipelineInfo(
    name="orders",
    incarnation=2,
    first_slot=SLOT_BASE + 10,
    partitions=3,
    spec_text=SPEC,
    max_keys_per_partition=0,
)
NEW = dataclasses.replace(OLD, first_slot=SLOT_BASE + 40, partitions=5, generation=1)


def rows(start: int, n: int) -> list[dict[str, Any]]:
    return [{"k": f"key{i % 23}", "seq": i} for i in range(start, start + n)]


def seal(store: LocalStore, numbers: range) -> dict[int, int]:
    """Seal the old generation's partitions `numbers` for NEW's routing; their cuts."""
    log = PipelineRun(OLD, store).log.followed_by(NEW.routing)
    return {p: log.seal(p, 0) for p in numbers}


def landed(store: LocalStore, info: PipelineInfo) -> dict[int, list[dict[str, Any]]]:
    """Every row of `info`'s generation, per partition number, in offset order."""
    run = PipelineRun(info, store)
    base = generation_base(info.generation)
    numbers = range(info.first_slot, info.first_slot + info.partitions)
    return {p: run.read(p, base, 10**6)[0].to_pylist() for p in numbers}


def test_a_description_without_a_generation_is_generation_0() -> None:
    body = {
        "name": "orders",
        "incarnation": 2,
        "first_slot": SLOT_BASE,
        "partitions": 4,
        "spec_text": SPEC,
        "settings": {"max_keys_per_partition": 0},
    }
    assert PipelineInfo.from_describe(body).routing == Routing(generation=0, partitions=4)
    later = PipelineInfo.from_describe({**body, "routing_generation": 3})
    assert later.generation == 3 and later.routing.by_key_groups


def test_a_producer_follows_a_seal_to_the_next_generation_s_fresh_partitions(
    tmp_path: Path,
) -> None:
    store = LocalStore(str(tmp_path))
    described: list[PipelineInfo] = []

    def describe() -> PipelineInfo:
        described.append(NEW)
        return NEW

    producer = SpecProducer(store, OLD, describe)
    first = producer.produce(rows(0, 60))
    assert set(first) <= set(range(OLD.first_slot, OLD.first_slot + 3))
    cuts = seal(store, range(OLD.first_slot, OLD.first_slot + 3))
    firsts = producer.produce(rows(60, 100))
    assert len(described) == 1 and producer.info == NEW
    assert set(firsts) <= set(range(NEW.first_slot, NEW.first_slot + 5))
    assert all(generation_of(o) == 1 for o in firsts.values())
    new = landed(store, NEW)
    for p, got in new.items():
        assert [r["offset"] for r in got] == list(
            range(generation_base(1), generation_base(1) + len(got))
        )
        assert all(NEW.routing.partition_for(key_text(r["k"])) == p - NEW.first_slot for r in got)
    assert sorted(r["seq"] for got in new.values() for r in got) == list(range(60, 160))
    old = landed(store, OLD)
    assert {p: len(got) for p, got in old.items()} == cuts  # nothing past a cut
    assert sorted(r["seq"] for got in old.values() for r in got) == list(range(60))


def test_a_seal_met_part_way_sends_each_row_once_in_order(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    producer = SpecProducer(store, OLD, lambda: NEW)
    # Only the last old partition is sealed: the call appends to the first two, then meets
    # the seal and routes the rest (that partition's rows) by the new generation.
    seal(store, range(OLD.first_slot + 2, OLD.first_slot + 3))
    firsts = producer.produce(rows(0, 200))
    old, new = landed(store, OLD), landed(store, NEW)
    assert set(firsts) >= {OLD.first_slot, OLD.first_slot + 1} and old[OLD.first_slot + 2] == []
    sealed_keys = {r["k"] for r in rows(0, 200) if OLD.routing.partition_for(r["k"]) == 2}
    assert {r["k"] for got in new.values() for r in got} == sealed_keys
    every = [r for got in (*old.values(), *new.values()) for r in got]
    assert sorted(r["seq"] for r in every) == list(range(200))
    for got in (*old.values(), *new.values()):
        assert [r["seq"] for r in got] == sorted(r["seq"] for r in got)


def test_a_producer_that_cannot_see_the_next_generation_yet_refuses_to_guess(
    tmp_path: Path,
) -> None:
    store = LocalStore(str(tmp_path))
    seal(store, range(OLD.first_slot, OLD.first_slot + 3))
    with pytest.raises(UnavailableError, match="no pipeline description"):
        SpecProducer(store, OLD).produce(rows(0, 5))
    with pytest.raises(UnavailableError, match="does not show generation 1"):
        SpecProducer(store, OLD, lambda: OLD).produce(rows(0, 5))
    other = dataclasses.replace(NEW, incarnation=3)
    with pytest.raises(RippleError, match="is gone") as info:
        SpecProducer(store, OLD, lambda: other).produce(rows(0, 5))
    assert info.value.code == "conflict"
    assert all(got == [] for got in landed(store, NEW).values())


def test_rows_after_a_spec_update_are_typed_by_the_new_schema(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    wider = dataclasses.replace(
        NEW, spec_text=SPEC.replace("seq BIGINT", "seq BIGINT, note STRING")
    )
    seal(store, range(OLD.first_slot, OLD.first_slot + 3))
    SpecProducer(store, OLD, lambda: wider).produce(rows(0, 30))
    got = [r for part in landed(store, wider).values() for r in part]
    assert sorted(r["seq"] for r in got) == list(range(30))
    assert all(r["note"] is None for r in got)


def test_a_later_generation_s_run_reads_its_own_partitions_from_its_base(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))
    run = PipelineRun(NEW, store)
    with pytest.raises(ValueError, match="not in"):
        run.log.segments(OLD.first_slot, generation_base(1))  # an old number is not its
    producer = SpecProducer(store, NEW)
    firsts = producer.produce(rows(0, 40))
    p, start = min(firsts.items())
    table, end = run.read(p, start, 10**6)
    assert table.num_rows == end - generation_base(1) > 0
    assert tmp_path.joinpath("source", "g00001", f"p{p:05d}").is_dir()


def test_a_rescale_s_reserved_numbers_are_followed_from_its_start(tmp_path: Path) -> None:
    """While the rescale is still cutting, the describe's current generation is the old one;
    its `rescale` names the reserved numbers, which a producer meeting a seal writes to at
    once instead of refusing until the new partitions join the table."""
    body: dict[str, Any] = {
        "name": OLD.name,
        "incarnation": OLD.incarnation,
        "first_slot": OLD.first_slot,
        "partitions": OLD.partitions,
        "routing_generation": 0,
        "spec_text": SPEC,
        "settings": {"max_keys_per_partition": 0},
        "past": [],
        "rescale": None,
    }
    assert PipelineInfo.newest(body) == OLD
    cutting = {
        **body,
        "rescale": {
            "generation": 1,
            "first_slot": NEW.first_slot,
            "partitions": 5,
            "phase": "cutting",
        },
    }
    assert PipelineInfo.newest(cutting) == NEW
    # Once hosting, the rescale's range is the current one: the current is chosen.
    hosting = {
        **cutting,
        "first_slot": NEW.first_slot,
        "partitions": 5,
        "routing_generation": 1,
        "past": [{"first_slot": OLD.first_slot, "partitions": 3, "routing_generation": 0}],
        "rescale": {**cutting["rescale"], "phase": "hosting", "spec_text": ""},
    }
    assert PipelineInfo.newest(hosting) == NEW
    store = LocalStore(str(tmp_path))
    seal(store, range(OLD.first_slot, OLD.first_slot + 3))
    firsts = SpecProducer(store, OLD, lambda: PipelineInfo.newest(cutting)).produce(rows(0, 40))
    assert set(firsts) <= set(range(NEW.first_slot, NEW.first_slot + 5))
    got = [r for part in landed(store, NEW).values() for r in part]
    assert sorted(r["seq"] for r in got) == list(range(40))
