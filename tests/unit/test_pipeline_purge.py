"""A purge deletes the objects of every number range a pipeline ever had, as its describe view
names them (current, past generations, a rescale's reserved numbers), and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.spec.purge import numbers_ever, purge_all
from pipeline.store import LocalStore
from shared.routing import SLOT_BASE

A = SLOT_BASE  # its first generation: 2 partitions
B = SLOT_BASE + 10  # its current one: 3 partitions
C = SLOT_BASE + 20  # the rescale under way reserved 4
OTHER = SLOT_BASE + 30  # another pipeline's


def described(rescale: bool = True) -> dict[str, Any]:
    return {
        "first_slot": B,
        "partitions": 3,
        "past": [{"first_slot": A, "partitions": 2, "routing_generation": 0}],
        "rescale": (
            {"first_slot": C, "partitions": 4, "phase": "cutting", "generation": 2}
            if rescale
            else None
        ),
    }


def objects(numbers: range) -> list[str]:
    return [
        key
        for n in numbers
        for key in (
            f"source/p{n:05d}/00000000000000000000.jsonl",
            f"checkpoints/p{n:05d}/e3-o7.json",
            f"deadletter/p{n:05d}/x.json",
        )
    ]


def test_the_ranges_of_every_generation_oldest_first() -> None:
    assert numbers_ever(described()) == (range(A, A + 2), range(B, B + 3), range(C, C + 4))
    assert numbers_ever(described(rescale=False)) == (range(A, A + 2), range(B, B + 3))
    # From HOSTING on the rescale's numbers are the current ones: named once.
    hosting = described() | {"rescale": {"first_slot": B, "partitions": 3}}
    assert numbers_ever(hosting) == (range(A, A + 2), range(B, B + 3))
    never = {"first_slot": 0, "partitions": 3, "past": [], "rescale": None}
    assert numbers_ever(never) == ()


def test_a_purge_deletes_every_generation_and_nothing_else(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    mine = objects(range(A, A + 2)) + objects(range(B, B + 3)) + objects(range(C, C + 4))
    theirs = [*objects(range(OTHER, OTHER + 2)), "source/p00001/0.jsonl"]
    for key in mine + theirs:
        assert store.put_if_absent(key, b"x")
    assert purge_all(store, numbers_ever(described())) == len(mine)
    left = sorted(k for prefix in ("source/", "checkpoints/", "deadletter/")
                  for k in store.list_keys(prefix))  # fmt: skip
    assert left == sorted(theirs)
    assert purge_all(store, numbers_ever(described())) == 0  # again: nothing left to delete
