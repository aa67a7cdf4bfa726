"""Load-aware placement: the leader's load book, the weighted planner's rule and properties,
the planner's fall-back to counts, the worker's input-rate estimate and the settings."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import placement_skew
from coordinator.config_file import load_config
from coordinator.core.commands import Assignment, AssignPartitions, Bootstrap, RegisterWorker
from coordinator.core.load import LoadBook
from coordinator.core.model import PartitionId, PartitionStatus, WorkerId
from coordinator.core.placement import moves, moves_lower_bound, plan_balanced
from coordinator.core.planner import Planner
from coordinator.core.state import ClusterState, apply
from coordinator.core.weighted import plan_weighted, weighted_spread
from coordinator.service import models as m
from coordinator.service.http.request import parse_body
from pipeline.input_rate import RATE_SAMPLE_S_MIN, InputRate
from shared.errors import ConfigError, ErrorKind, RequestError
from tests.planner_base import quick_settings

POOL = [f"w{i:02d}" for i in range(12)]


def zipf_keys(partitions: int, keys: int, rng: random.Random) -> list[float]:
    """Partition weights of Zipf-distributed keys (exponent 1) hashed to partitions."""
    weights = [0.0] * partitions
    for rank in range(1, keys + 1):
        weights[rng.randrange(partitions)] += 1.0 / rank
    return weights


def loads_of(owners: list[str | None], weights: list[float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p, w in enumerate(owners):
        if w is not None:
            out[w] = out.get(w, 0.0) + weights[p]
    return out


# -- the load book ------------------------------------------------------------------------------


def test_weights_only_when_every_partition_is_fresh() -> None:
    book = LoadBook(stale_after_ms=1_000, now_ms=0)
    book.record(0, 5.0, 3, now_ms=0)
    assert book.weights(2, now_ms=0) is None  # partition 1 never reported
    book.record(1, 2.0, None, now_ms=500)
    assert book.weights(2, now_ms=1_000) == [5.0, 2.0]
    # Partition 0's report is now older than the bound: the whole round balances counts.
    assert book.weights(2, now_ms=1_001) is None
    assert book.fresh(1, 1_001) and not book.fresh(0, 1_001)


def test_an_older_report_does_not_replace_a_newer_one() -> None:
    book = LoadBook(stale_after_ms=1_000, now_ms=0)
    book.record(0, 5.0, None, now_ms=900)
    book.record(0, 1.0, None, now_ms=100)
    load = book.of(0)
    assert load is not None and load.rate_per_s == 5.0 and load.reported_ms == 900


@pytest.mark.parametrize("rate", [-1.0, float("nan"), float("inf"), 2e9])
def test_a_rate_out_of_bounds_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        LoadBook(stale_after_ms=1, now_ms=0).record(0, rate, None, now_ms=0)


def test_a_new_leader_listens_until_every_owner_is_heard_or_the_window_ends() -> None:
    book = LoadBook(stale_after_ms=1_000, now_ms=0)
    assert book.listening({"a", "b"}, 10)
    book.heard("a")
    assert book.listening({"a", "b"}, 10)
    book.heard("b")
    assert not book.listening({"a", "b"}, 10)
    assert not book.listening({"a", "b", "c"}, 10)  # once over, it stays over
    late = LoadBook(stale_after_ms=1_000, now_ms=0)
    assert not late.listening({"a"}, 1_000)


# -- the weighted rule --------------------------------------------------------------------------


def test_homeless_partitions_go_heaviest_first_to_the_lightest() -> None:
    weights = [9.0, 1.0, 1.0, 5.0, 4.0]
    after = plan_weighted([None] * 5, ["a", "b"], weights, tolerance=0.5)
    # 9 -> a; 5 -> b; 4 -> b (9 vs 5); then 1 -> b (9 vs 9, fewer partitions: a); ...
    assert loads_of(after, weights) == {"a": 10.0, "b": 10.0}


def test_within_the_tolerance_nothing_moves() -> None:
    owners: list[str | None] = ["a", "a", "b", "b"]
    weights = [6.0, 5.0, 5.0, 5.0]  # a = 11, b = 10, mean 10.5: within 10%
    assert plan_weighted(owners, ["a", "b"], weights, tolerance=0.1) == owners
    # Tighter than the imbalance, yet no move helps (6 and 5 both exceed the gap of 1).
    assert plan_weighted(owners, ["a", "b"], weights, tolerance=0.01) == owners


def test_beyond_the_tolerance_the_move_nearest_half_the_gap() -> None:
    owners: list[str | None] = ["a", "a", "a", "b"]
    weights = [1.0, 4.0, 8.0, 1.0]  # a = 13, b = 1: the gap is 12, half of it 6
    after = plan_weighted(owners, ["a", "b"], weights, tolerance=0.1)
    # 4 and 8 are both 2 from 6: the lighter moves (a = 9, b = 5); then the gap is 4 and
    # 1 moves (a = 8, b = 6); then only 8 is left on a, heavier than the gap of 2.
    assert after == ["b", "b", "a", "b"]
    assert loads_of(after, weights) == {"a": 8.0, "b": 6.0}


def test_a_partition_heavier_than_the_gap_never_moves() -> None:
    owners: list[str | None] = ["a", "b"]
    assert plan_weighted(owners, ["a", "b"], [100.0, 1.0], tolerance=0.1) == owners


def test_zero_weights_place_like_counts() -> None:
    after = plan_weighted([None] * 6, ["a", "b", "c"], [0.0] * 6)
    assert sorted(after.count(w) for w in "abc") == [2, 2, 2]


def test_the_zipf_case_is_within_the_goal_where_counts_are_not() -> None:
    weights = zipf_keys(256, 20_000, random.Random(3))
    workers = [f"w{i}" for i in range(8)]
    counted = plan_balanced([None] * 256, workers)
    weighted = plan_weighted(counted, workers, weights)
    assert weighted_spread(counted, workers, weights) > 1.3
    assert weighted_spread(weighted, workers, weights) <= 1.15


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="length mismatch"):
        plan_weighted([None], ["a"], [1.0, 2.0])
    with pytest.raises(ValueError, match="tolerance"):
        plan_weighted([None], ["a"], [1.0], tolerance=-0.1)
    assert plan_weighted([None, "a"], [], [1.0, 1.0]) == [None, None]


weights_st = st.lists(
    st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1e4, allow_nan=False)),
    min_size=1,
    max_size=60,
)


@given(
    weights=weights_st,
    n_before=st.integers(1, 8),
    change=st.sampled_from(["join", "leave", "both", "none"]),
    tolerance=st.sampled_from([0.05, 0.1, 0.3]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=300, deadline=None)
def test_weighted_properties(
    weights: list[float], n_before: int, change: str, tolerance: float, seed: int
) -> None:
    rng = random.Random(seed)
    before_workers = POOL[:n_before]
    owners = plan_weighted([None] * len(weights), before_workers, weights, tolerance=tolerance)
    settled = plan_weighted(owners, before_workers, weights, tolerance=tolerance)
    # A settled plan is a fixed point: planning again moves nothing.
    assert plan_weighted(settled, before_workers, weights, tolerance=tolerance) == settled
    workers = list(before_workers)
    if change in ("join", "both"):
        workers.append(POOL[n_before])
    if change in ("leave", "both") and len(workers) > 1:
        workers.remove(rng.choice(before_workers))
    after = plan_weighted(settled, workers, weights, tolerance=tolerance)
    assert all(o in workers for o in after)
    shuffled = list(workers)
    rng.shuffle(shuffled)
    assert plan_weighted(settled, shuffled, weights, tolerance=tolerance) == after
    if change == "none":
        assert after == settled
    else:
        # A join or a leave moves no more partitions than count balancing would.
        assert moves(settled, after) <= moves_lower_bound(settled, workers)
    # Every partition of a departed worker moved; every other move relieved someone.
    gone = set(before_workers) - set(workers)
    assert all(after[p] not in gone for p in range(len(weights)))


# -- the planner: weighted when every load is fresh, counts otherwise ---------------------------


def online_cluster(owners: list[str]) -> ClusterState:
    state = ClusterState()
    apply(state, "b", Bootstrap(total_partitions=len(owners), now_ms=0))
    for w in sorted(set(owners)):
        apply(
            state, f"r{w}", RegisterWorker(worker_id=WorkerId(w), address=f"http://{w}", now_ms=0)
        )
    apply(
        state,
        "a",
        AssignPartitions(
            assignments=tuple(
                Assignment(partition=PartitionId(p), owner=WorkerId(w))
                for p, w in enumerate(owners)
            ),
            now_ms=0,
        ),
    )
    for p in state.partitions:
        state.put_partition(replace(p, status=PartitionStatus.ONLINE))
    return state


def report_all(planner: Planner, state: ClusterState, rates: list[float], now_ms: int) -> None:
    for w in {p.owner for p in state.partitions if p.owner}:
        planner.heartbeat(w, 0.0, now_ms)
        kept = planner.partition_loads(
            state,
            w,
            [
                (p.partition, p.epoch, rates[p.partition], 0)
                for p in state.partitions
                if p.owner == w
            ],
            now_ms,
        )
        assert kept == sum(1 for p in state.partitions if p.owner == w)


def test_the_planner_balances_load_then_falls_back_to_counts_when_load_goes_stale() -> None:
    state = online_cluster(["a", "b", "a", "b", "a", "b"])
    s = quick_settings(total_partitions=6, load_stale_ms=1_000, balance_tolerance=0.1)
    planner = Planner(s, random.Random(0), state, 0)
    rates = [10.0, 1.0, 10.0, 1.0, 1.0, 1.0]  # a = 21, b = 3
    report_all(planner, state, rates, 0)
    weighted = planner.balance_moves(state, 0)
    assert len(weighted) == 1 and weighted[0].source == "a" and weighted[0].target == "b"
    # Counts are equal, so once a load is stale nothing moves.
    assert planner.balance_moves(state, 1_001) == ()


def test_a_rescale_forgets_the_old_tables_load() -> None:
    """Reports name partitions of one routing generation: once a rescale has replaced the
    table, the old reports weigh nothing, and the round balances counts until the new
    owners report."""
    state = online_cluster(["a", "b", "a", "b", "a", "b"])
    s = quick_settings(total_partitions=6, load_stale_ms=1_000, balance_tolerance=0.1)
    planner = Planner(s, random.Random(0), state, 0)
    report_all(planner, state, [10.0, 1.0, 10.0, 1.0, 1.0, 1.0], 0)
    assert len(planner.balance_moves(state, 0)) == 1  # by load
    state.routing = (*state.routing, 6)  # a rescale's new generation (rescale.py)
    assert planner.balance_moves(state, 0) == ()  # counts are equal: nothing moves
    assert planner.loads.of(0) is None


def test_reports_from_a_non_owner_or_an_old_epoch_are_ignored() -> None:
    state = online_cluster(["a", "b"])
    planner = Planner(quick_settings(total_partitions=2), random.Random(0), state, 0)
    epoch = state.partitions[0].epoch
    reports = [(0, epoch, 5.0, None), (1, epoch - 1, 5.0, None), (9, epoch, 1.0, None)]
    assert planner.partition_loads(state, WorkerId("b"), reports, 0) == 0
    assert planner.partition_loads(state, WorkerId("a"), reports, 0) == 1
    assert planner.loads.fresh(0, 0) and not planner.loads.fresh(1, 0)


def test_a_new_leader_does_not_rebalance_before_it_hears_the_owners() -> None:
    state = online_cluster(["a", "a", "a", "b"])  # counts off by two: count balance moves one
    s = quick_settings(total_partitions=4, rebalance_on_join=True, load_stale_ms=5_000)
    planner = Planner(s, random.Random(0), state, 0)
    assert planner.plan(state, 100, 100).commands == ()
    planner.heartbeat(WorkerId("a"), 0.0, 200)
    planner.heartbeat(WorkerId("b"), 0.0, 200)
    (cmd,) = planner.plan(state, 300, 300).commands
    assert type(cmd).__name__ == "PlanMigrations"


# -- the worker's estimate ----------------------------------------------------------------------


def test_input_rate_is_smoothed_and_never_negative() -> None:
    rate = InputRate()
    rate.observe(100, 0.0)
    assert rate.rate_per_s is None
    rate.observe(150, RATE_SAMPLE_S_MIN / 2)  # too soon: folded into the next sample
    assert rate.rate_per_s is None
    rate.observe(200, 10.0)
    assert rate.rate_per_s == pytest.approx(10.0)
    rate.observe(1200, 20.0)  # a burst: 100/s for 10 s moves the average part of the way
    assert rate.rate_per_s is not None and 10.0 < rate.rate_per_s < 100.0
    rate.observe(0, 30.0)  # the end went backwards (a new source): a new baseline
    before = rate.rate_per_s
    rate.observe(0, 40.0)
    assert rate.rate_per_s is not None and 0.0 <= rate.rate_per_s < before


# -- the settings -------------------------------------------------------------------------------


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "cluster.toml"
    secrets = (
        'cluster_secret = "unit-secret-0123456789abcdef"\nadmin_token = "unit-admin-0123456789"'
    )
    path.write_text(f"{secrets}\n{body}\n")
    return path


@pytest.mark.parametrize(
    ("body", "key", "rule"),
    [
        ("balance_tolerance = 0", "balance_tolerance", "> 0"),
        ("balance_tolerance = 11", "balance_tolerance", "<= 10"),
        ("load_stale_s = 0", "load_stale_s", "> 0"),
        ("heartbeat_interval_s = 5\nload_stale_s = 4", "load_stale_s", "> heartbeat_interval_s"),
    ],
)
def test_bad_load_settings_name_the_setting(tmp_path: Path, body: str, key: str, rule: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, body), env={})
    assert err.value.field == key and rule in err.value.message


def test_load_stale_s_follows_the_timeout(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "heartbeat_timeout_s = 12"), env={})
    assert config.load_stale_s == pytest.approx(6.0) and config.balance_tolerance == 0.1


def test_the_skewed_bench_meets_its_goal() -> None:
    """`python -m bench placement`'s Zipf case, quick: load-aware within 1.15 of the mean
    where count-based is not, and a join or leave within the count lower bound."""
    rows = placement_skew.run(quick=True)
    for name, row in rows.items():
        if name.endswith("/load_aware"):
            assert row["load_max_over_mean"] <= 1.15, (name, row)
            if "/join/" in name or "/leave/" in name:
                assert row["moves"] <= row["moves_lower_bound"], (name, row)
        if name.endswith("/balance/count_based"):
            assert row["load_max_over_mean"] > 1.3, (name, row)


@pytest.mark.parametrize(("rate", "why"), [("-1", "greater than or equal"), ("NaN", "finite")])
def test_a_heartbeat_with_a_bad_rate_is_a_400(rate: str, why: str) -> None:
    body = '{"incarnation": 1, "partitions": {"0": {"epoch": 1, "offset": 0, "rate": %s}}}'
    with pytest.raises(RequestError) as err:
        parse_body((body % rate).encode(), m.HeartbeatRequest)
    assert err.value.kind is ErrorKind.INVALID and why in err.value.message
    ok = parse_body((body % "2.5").encode(), m.HeartbeatRequest)
    assert ok.partitions["0"].rate == 2.5
