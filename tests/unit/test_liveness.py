"""Failure detector: thresholds against a fake clock, failover seeding, observe resets, the
holds of restarting workers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.liveness import STALL_CREDIT_MAX_SHARE, Detector, Liveness, Verdict


class FakeClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


def make() -> Detector:
    return Detector(suspect_after_ms=10_000, dead_after_ms=30_000)


def test_alive_then_suspected_then_dead() -> None:
    clock = FakeClock(1_000)
    d = make()
    d.observe("w1", clock.now_ms, 0.2)
    assert d.status("w1", clock.advance(10_000)) is Liveness.ALIVE  # exactly at threshold
    assert d.status("w1", clock.advance(1)) is Liveness.SUSPECTED
    assert d.evaluate(clock.now_ms) == Verdict(suspected=frozenset({"w1"}), dead=frozenset())
    assert d.status("w1", clock.advance(19_999)) is Liveness.SUSPECTED  # exactly 30 s
    assert d.status("w1", clock.advance(1)) is Liveness.DEAD
    assert d.evaluate(clock.now_ms) == Verdict(suspected=frozenset(), dead=frozenset({"w1"}))


def test_observe_resets_and_records_load() -> None:
    d = make()
    d.observe("w1", 0, 0.1)
    assert d.status("w1", 25_000) is Liveness.SUSPECTED
    d.observe("w1", 25_000, 0.7)
    assert d.status("w1", 25_000) is Liveness.ALIVE
    assert d.load("w1") == 0.7
    assert d.last_seen_ms("w1") == 25_000


def test_seed_after_failover_keeps_everyone_alive() -> None:
    # A new leader has no heartbeat history; it must not declare the cluster dead.
    d = make()
    d.seed(["w1", "w2", "w3"], 1_000_000)
    verdict = d.evaluate(1_000_000)
    assert verdict.dead == frozenset() and verdict.suspected == frozenset()
    assert d.load("w1") is None
    d.observe("w1", 1_025_000, 0.3)
    verdict = d.evaluate(1_031_000)
    assert verdict.dead == frozenset({"w2", "w3"})
    assert d.status("w1", 1_031_000) is Liveness.ALIVE


def test_seed_never_rewinds_a_fresher_heartbeat() -> None:
    d = make()
    d.observe("w1", 50_000, 0.5)
    d.seed(["w1"], 40_000)
    assert d.last_seen_ms("w1") == 50_000
    assert d.load("w1") == 0.5


def test_time_going_backwards_counts_as_no_elapsed_time() -> None:
    d = make()
    d.observe("w1", 100_000, 0.0)
    assert d.status("w1", 0) is Liveness.ALIVE
    d.observe("w1", 90_000, 0.4)  # late heartbeat: load updates, last-seen does not rewind
    assert d.last_seen_ms("w1") == 100_000
    assert d.load("w1") == 0.4


def test_unknown_and_forgotten_workers_have_no_status() -> None:
    d = make()
    assert d.status("ghost", 0) is None
    assert d.load("ghost") is None and d.last_seen_ms("ghost") is None
    d.observe("w1", 0, 0.0)
    d.forget("w1")
    d.forget("w1")
    assert d.status("w1", 100_000) is None
    assert d.evaluate(100_000) == Verdict(suspected=frozenset(), dead=frozenset())


def test_a_held_worker_is_restarting_until_its_hold_ends_then_judged_again() -> None:
    d = make()
    d.observe("w1", 0, 0.5)
    d.observe("w2", 0, 0.5)
    d.hold("w1", 60_000)
    assert d.status("w1", 31_000) is Liveness.RESTARTING
    assert d.evaluate(31_000) == Verdict(suspected=frozenset(), dead=frozenset({"w2"}))
    assert d.dead(31_000) == frozenset({"w2"})
    assert d.holds(59_999) == frozenset({"w1"}) and d.held("w1", 59_999)
    # A heartbeat during the hold does not end it (only a registration or a drain does).
    d.observe("w1", 40_000, 0.1)
    assert d.status("w1", 59_999) is Liveness.RESTARTING
    # At its end the last heartbeat judges it: seen at 40 s, so suspected at 60 s...
    assert d.status("w1", 60_000) is Liveness.SUSPECTED
    assert d.holds(60_000) == frozenset() and d.hold_ends_ms("w1") is None
    # ... and dead once 30 s have passed since that heartbeat.
    assert d.dead(70_001) == frozenset({"w1", "w2"})


def test_unhold_and_forget_end_a_hold_and_an_unknown_worker_is_never_held() -> None:
    d = make()
    d.hold("ghost", 10**9)
    assert d.status("ghost", 0) is None and d.holds(0) == frozenset()
    d.observe("w1", 0, 0.0)
    d.hold("w1", 100_000)
    d.unhold("w1")
    assert d.dead(31_000) == frozenset({"w1"})
    d.hold("w1", 100_000)
    d.forget("w1")
    d.observe("w1", 50_000, 0.0)
    assert d.status("w1", 90_000) is Liveness.DEAD  # the forgotten hold did not come back


def test_rejects_bad_thresholds_and_load() -> None:
    with pytest.raises(ValueError):
        Detector(suspect_after_ms=30_000, dead_after_ms=30_000)
    with pytest.raises(ValueError):
        Detector(suspect_after_ms=0, dead_after_ms=10)
    with pytest.raises(ValueError):
        make().observe("w1", 0, float("nan"))


def test_the_leaders_stall_since_a_heartbeat_is_not_the_workers_silence() -> None:
    # 35 s since w1's heartbeat, 20 s of it the leader's loop stalled: 15 s of silence.
    d = make()
    d.observe("w1", 0, 0.5)
    d.observe("w2", 0, 0.5)
    d.stalled(20_000)
    assert d.status("w1", 35_000) is Liveness.SUSPECTED
    assert d.dead(35_000) == frozenset()
    assert d.evaluate(35_000) == Verdict(suspected=frozenset({"w1", "w2"}), dead=frozenset())
    # Without the stall told, the same silence is a death.
    plain = make()
    plain.observe("w1", 0, 0.5)
    assert plain.status("w1", 35_000) is Liveness.DEAD
    # A heartbeat stamps the stall so far: only a stall after it is credited.
    d.observe("w2", 36_000, 0.5)
    assert d.status("w2", 66_001) is Liveness.DEAD
    d.stalled(21_000)
    assert d.status("w2", 66_001) is Liveness.SUSPECTED
    assert d.status("w1", 51_000) is Liveness.SUSPECTED  # 51 - 21 = 30 s: still in time
    assert d.status("w1", 51_001) is Liveness.DEAD
    assert d.dead(51_001) == frozenset({"w1"})


def test_a_leader_stalled_for_good_still_declares_a_silent_worker_dead() -> None:
    # The credit is capped: a loop that never catches up (every millisecond of the silence
    # its stall) declares the worker dead once the silence passes the cap on top.
    d = make()
    d.observe("w1", 0, 0.5)
    limit_ms = int(d.dead_after_ms * (1 + STALL_CREDIT_MAX_SHARE))
    for now in range(0, limit_ms + 1, 1_000):
        d.stalled(now)
        assert d.status("w1", now) is not Liveness.DEAD, now
    d.stalled(limit_ms + 1)
    assert d.status("w1", limit_ms + 1) is Liveness.DEAD
    assert d.dead(limit_ms + 1) == frozenset({"w1"})


def test_an_older_worker_credited_more_does_not_hide_a_newer_dead_one() -> None:
    # Told a stall larger than the time between two heartbeats (a total read late), the
    # older worker has more credit than the newer: the oldest-first reading must go on past
    # it rather than stop at the first one alive.
    d = Detector(suspect_after_ms=1_000, dead_after_ms=3_000)
    d.observe("w1", 0, 0.5)
    d.stalled(3_000)
    d.observe("w2", 100, 0.5)
    assert d.status("w1", 3_500) is Liveness.ALIVE
    assert d.status("w2", 3_500) is Liveness.DEAD
    assert d.dead(3_500) == frozenset({"w2"})
    assert d.evaluate(3_500) == Verdict(suspected=frozenset(), dead=frozenset({"w2"}))


def test_a_smaller_stall_total_changes_nothing() -> None:
    d = make()
    d.observe("w1", 0, 0.5)
    d.stalled(10_000)
    d.stalled(5_000)  # a stale total told late
    assert d.status("w1", 40_000) is Liveness.SUSPECTED  # 40 - 10 = 30 s


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["observe", "seed", "forget", "hold", "unhold", "stalled"]),
        st.sampled_from(["w1", "w2", "w3", "w4", "w5"]),
        st.integers(min_value=0, max_value=5_000),  # any order: a caller's clock may step back
    ),
    max_size=60,
)


@given(_OPS, st.integers(min_value=0, max_value=10_000))
def test_evaluate_reads_only_the_oldest_but_judges_like_a_full_scan(
    ops: list[tuple[str, str, int]], now: int
) -> None:
    d = Detector(suspect_after_ms=1_000, dead_after_ms=3_000)
    for op, wid, t in ops:
        if op == "observe":
            d.observe(wid, t, 0.5)
        elif op == "seed":
            d.seed([wid], t)
        elif op == "hold":
            d.hold(wid, t + 2_000)
        elif op == "unhold":
            d.unhold(wid)
        elif op == "stalled":
            # Any total, in any order: the credit must not break the oldest-first reading.
            d.stalled(t)
        else:
            d.forget(wid)
    full = {w: d.status(w, now) for w in d.known()}
    verdict = d.evaluate(now)
    assert verdict.dead == {w for w, s in full.items() if s is Liveness.DEAD}
    assert verdict.suspected == {w for w, s in full.items() if s is Liveness.SUSPECTED}
    assert d.dead(now) == verdict.dead
    assert d.holds(now) == {w for w, s in full.items() if s is Liveness.RESTARTING}
