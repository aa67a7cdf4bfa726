"""Per-partition gates and the worker lease, with a fake clock."""

from __future__ import annotations

import pytest

from pipeline.gate import Accepted, Gate, Gates, GateStatus, Refused
from pipeline.lease import Lease


def test_gate_transition_table() -> None:
    gate = Gate()
    assert not gate.admits(1)
    opened = gate.host(2)
    assert isinstance(opened, Accepted) and opened.changed
    gate = opened.gate
    assert gate == Gate(status=GateStatus.OPEN, epoch=2) and gate.admits(2)
    assert not gate.admits(1) and not gate.admits(3)
    same = gate.host(2)
    assert isinstance(same, Accepted) and not same.changed and same.gate == gate
    stale = gate.host(1)
    assert isinstance(stale, Refused) and stale.status_hint == 409 and stale.gate == gate
    newer = gate.host(5)
    assert isinstance(newer, Accepted) and newer.gate.epoch == 5
    gate = newer.gate
    assert isinstance(gate.close(2), Refused)  # only the current epoch can be released
    released = gate.close(5)
    assert isinstance(released, Accepted) and released.gate.status is GateStatus.RELEASED
    gate = released.gate
    assert not gate.admits(5)
    again = gate.close(5)
    assert isinstance(again, Accepted) and not again.changed
    assert isinstance(gate.host(5), Refused)  # a released epoch never reopens here
    assert isinstance(gate.host(4), Refused)
    reopened = gate.host(6)
    assert isinstance(reopened, Accepted) and reopened.gate.admits(6)
    assert isinstance(Gate().host(0), Refused)
    assert isinstance(Gate().close(1), Refused)


def test_gates_reconcile_plans_without_changing() -> None:
    gates = Gates()
    gates.host(1, 3)
    gates.host(2, 1)
    gates.host(4, 2)
    gates.close(4, 2)
    plan = gates.reconcile({1: 3, 3: 1, 4: 1, 2: 2})
    assert plan.to_open == {3: 1, 2: 2}
    assert plan.to_close == {}
    assert plan.stale == {4: 1}
    plan = gates.reconcile({3: 1})
    assert plan.to_open == {3: 1} and plan.to_close == {1: 3, 2: 1}
    assert gates.open_partitions() == {1: 3, 2: 1}  # reconcile only plans
    gates.close(1, 3)
    assert not gates.admits(1, 3) and gates.admits(2, 1)
    assert isinstance(gates.host(1, 2), Refused)


def test_lease_expires_without_renewal() -> None:
    lease = Lease(lease_ms=1_000)
    assert not lease.valid(0)  # no heartbeat acknowledged yet
    lease = lease.renewed(10_000)
    assert lease.valid(10_000) and lease.valid(10_999)
    assert lease.remaining_ms(10_400) == 600
    assert not lease.valid(11_000)
    # A late acknowledgement of an older heartbeat does not extend or shorten the lease.
    assert lease.renewed(9_000) == lease
    lease = lease.renewed(10_800)
    assert lease.valid(11_700) and not lease.valid(11_800)
    with pytest.raises(ValueError):
        Lease(lease_ms=0)


def test_a_reply_older_than_an_opening_does_not_close_that_gate() -> None:
    """A heartbeat reply computed before a failover assigned p here arrives after the host
    call that opened p: it closes only what was open when its request left."""
    gates = Gates()
    assert isinstance(gates.host(1, 2), Accepted)
    sent = gates.mark()
    assert isinstance(gates.host(5, 7), Accepted)  # the host call, while the heartbeat flies
    assert gates.reconcile({}, opened_by=sent).to_close == {1: 2}
    assert gates.reconcile({}).to_close == {1: 2, 5: 7}  # without a mark: everything unlisted
    again = gates.mark()
    assert gates.reconcile({}, opened_by=again).to_close == {1: 2, 5: 7}
    assert isinstance(gates.host(5, 7), Accepted) and gates.mark() == again  # no new opening
    assert Gates(openings=again).mark() == again
