"""Backoff: bounds, growth, determinism under a seeded Rng; the per-key retry schedule."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.backoff import BackoffPolicy, RetrySchedule, delay_ms

POLICY = BackoffPolicy(base_ms=100, cap_ms=10_000)


class FixedRng:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@given(
    base_ms=st.integers(1, 10_000),
    extra_ms=st.integers(0, 1_000_000),
    multiplier=st.floats(1.0, 10.0),
    attempt=st.integers(0, 10_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_delay_stays_between_half_base_and_cap(
    base_ms: int, extra_ms: int, multiplier: float, attempt: int, seed: int
) -> None:
    policy = BackoffPolicy(base_ms=base_ms, cap_ms=base_ms + extra_ms, multiplier=multiplier)
    d = delay_ms(policy, attempt, random.Random(seed))
    assert (base_ms + 1) // 2 <= d <= policy.cap_ms


def test_first_attempt_is_around_base_and_extremes_of_jitter() -> None:
    assert delay_ms(POLICY, 0, FixedRng(0.0)) == 50
    assert delay_ms(POLICY, 0, FixedRng(0.999999)) == 100
    assert delay_ms(POLICY, 0, FixedRng(1.0)) == 100  # a sloppy Rng cannot exceed the step


def test_grows_exponentially_until_the_cap() -> None:
    floors = [delay_ms(POLICY, n, FixedRng(0.0)) for n in range(10)]
    assert floors == [50, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]
    assert delay_ms(POLICY, 10**9, FixedRng(0.999999)) == 10_000


def test_deterministic_for_a_seed() -> None:
    a = [delay_ms(POLICY, n, random.Random(7)) for n in range(20)]
    b = [delay_ms(POLICY, n, random.Random(7)) for n in range(20)]
    assert a == b


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(base_ms=0, cap_ms=10)
    with pytest.raises(ValueError):
        BackoffPolicy(base_ms=10, cap_ms=5)
    with pytest.raises(ValueError):
        BackoffPolicy(base_ms=10, cap_ms=50, multiplier=0.5)
    with pytest.raises(ValueError):
        delay_ms(POLICY, -1, FixedRng(0.5))


def test_retry_schedule_tracks_attempts_and_due_times() -> None:
    sched: RetrySchedule[tuple[str, int]] = RetrySchedule(POLICY)
    key = ("host", 3)
    assert sched.due(key, 0) and sched.attempts(key) == 0 and sched.pending() == []
    due = sched.failed(key, 1_000, FixedRng(0.0))
    assert due == 1_050 and sched.next_due_ms(key) == 1_050
    assert not sched.due(key, 1_049) and sched.due(key, 1_050)
    assert sched.failed(key, 1_050, FixedRng(0.0)) == 1_150
    assert sched.attempts(key) == 2
    sched.failed(("host", 1), 1_000, FixedRng(0.0))
    assert sched.pending() == [("host", 1), key]
    sched.succeeded(key)
    assert sched.attempts(key) == 0 and sched.due(key, 0)
    sched.forget(("host", 1))
    assert sched.pending() == []


def test_retry_schedule_replays_with_the_same_seed() -> None:
    def run(seed: int) -> list[int]:
        rng = random.Random(seed)
        sched: RetrySchedule[str] = RetrySchedule(POLICY)
        return [sched.failed("k", n * 1000, rng) for n in range(8)]

    assert run(42) == run(42)
