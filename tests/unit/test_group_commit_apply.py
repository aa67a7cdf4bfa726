"""A batch entry applied to the coordinator's machine (replication.entry.apply_entry, the code
the Raft apply path runs): each command in order with its own request id, dedup and
result; a rejected or malformed command affects no other; a batch leaves exactly the state
the same commands leave as single entries; single entries (a lone proposal) still apply."""

from __future__ import annotations

from coordinator.core.codec import decode_result, encode_command
from coordinator.core.commands import Bootstrap, Ok, RegisterWorker, Rejected
from coordinator.core.machine import Machine
from coordinator.core.model import WorkerId
from replication.batch import decode_results, encode_batch
from replication.entry import apply_entry

BOOT = encode_command(Bootstrap(total_partitions=4, now_ms=1000), "boot")
UNKNOWN_TAG = b"\x94\x01\x63\xa1x\x80"  # [1, 99, "x", {}]: no command has tag 99
# [1, 2, "x", {}]: a RegisterWorker without its fields, malformed on every replica alike.
MALFORMED = b"\x94\x01\x02\xa1x\x80"


def register(wid: str, rid: str) -> bytes:
    cmd = RegisterWorker(worker_id=WorkerId(wid), address="127.0.0.1:9", now_ms=2000)
    return encode_command(cmd, rid)


def apply_batch(machine: Machine, items: list[bytes]) -> list[Ok | Rejected]:
    raw = decode_results(apply_entry(machine, encode_batch(items)))
    assert len(raw) == len(items)
    return [decode_result(r) for r in raw]


def test_each_command_of_a_batch_in_order_with_its_own_result() -> None:
    machine = Machine()
    apply_entry(machine, BOOT)  # a single entry, as a lone proposal leaves it
    results = apply_batch(
        machine, [register("a", "ra"), MALFORMED, register("b", "rb"), b"\x00junk"]
    )
    assert isinstance(results[0], Ok) and results[0].value.worker_id == "a"
    assert isinstance(results[1], Rejected) and results[1].code == "invalid"
    assert isinstance(results[2], Ok) and results[2].value.worker_id == "b"
    assert isinstance(results[3], Rejected) and results[3].code == "invalid"
    assert list(machine.state.workers) == ["a", "b"]  # in batch order


def test_a_retried_request_id_applies_once_inside_and_across_batches() -> None:
    machine = Machine()
    apply_entry(machine, BOOT)
    first, again = apply_batch(machine, [register("a", "ra"), register("a", "ra")])
    assert first == again  # the second is the recorded result, not a second registration
    assert machine.state.workers[WorkerId("a")].incarnation == 1
    (later,) = apply_batch(machine, [register("a", "ra")])
    assert later == first
    assert decode_result(apply_entry(machine, register("a", "ra"))) == first
    # A new request id for the same worker really re-registers: the dedup is by id.
    (fresh,) = apply_batch(machine, [register("a", "ra2")])
    assert isinstance(fresh, Ok) and fresh.value.incarnation == 2


def test_a_batch_leaves_the_state_single_entries_leave() -> None:
    items = [register(f"w{i % 7}", f"r{i % 11}") for i in range(40)] + [MALFORMED]
    singles, batched = Machine(), Machine()
    apply_entry(singles, BOOT)
    apply_entry(batched, BOOT)
    one_by_one = [apply_entry(singles, item) for item in items]
    assert decode_results(apply_entry(batched, encode_batch(items))) == one_by_one
    assert singles.snapshot() == batched.snapshot()


def test_a_malformed_batch_is_an_error_value_and_changes_nothing() -> None:
    machine = Machine()
    apply_entry(machine, BOOT)
    before = machine.snapshot()
    result = apply_entry(machine, encode_batch([register("a", "ra")])[:-3])
    assert result.startswith(b"\xc0")  # machine_error_result
    assert machine.snapshot() == before


def test_an_unknown_tag_in_a_batch_halts_the_machine_for_the_rest() -> None:
    """A tag this code does not know comes only from a newer release, whose other replicas
    apply it: skipping it would diverge, so the machine stops applying at it."""
    machine = Machine()
    apply_entry(machine, BOOT)
    results = apply_batch(machine, [register("a", "ra"), UNKNOWN_TAG, register("b", "rb")])
    assert isinstance(results[0], Ok)
    assert isinstance(results[1], Rejected) and results[1].code == "invalid"
    assert isinstance(results[2], Rejected) and results[2].code == "halted"
    assert list(machine.state.workers) == ["a"]
    assert "unknown command tag 99" in (machine.halted() or "")
