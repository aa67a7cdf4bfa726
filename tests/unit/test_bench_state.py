"""The pure parts of `python -m bench state` (bench/state_figures.py, bench/state_peer.py's
listing): the input holds exactly the key count asked for, a checkpoint's bytes are what a
listing added, and each goal of issue 38 is read the way it points."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.state import ratio
from bench.state_figures import (
    GOALS,
    NOT_MEASURED,
    added_bytes,
    draw_keys,
    goal_rows,
    load_keys,
    touch_keys,
)
from bench.state_peer import dir_files


def test_a_backlog_holds_every_key_once_plus_the_extra_draws() -> None:
    for zipf in (False, True):
        keys = load_keys(1_000, 500, zipf, seed=3)
        assert len(keys) == 1_500
        assert set(keys) == set(range(1_000))
        assert keys == load_keys(1_000, 500, zipf, seed=3)  # a seed is the same input


def test_zipf_draws_favour_the_first_keys_and_uniform_ones_do_not() -> None:
    zipf = Counter(draw_keys(1_000, 20_000, True, seed=5))
    uniform = Counter(draw_keys(1_000, 20_000, False, seed=5))
    assert zipf[0] > 10 * zipf[500]
    assert uniform.most_common(1)[0][1] < 60  # about 20 each
    assert all(0 <= k < 1_000 for k in zipf | uniform)


def test_an_interval_touches_one_percent_of_the_keys_each_once() -> None:
    touched = touch_keys(20_000, seed=1)
    assert len(touched) == len(set(touched)) == 200
    assert len(touch_keys(10, seed=1)) == 1  # never none


def test_added_bytes_counts_new_and_rewritten_files_only() -> None:
    before = {"a": 10, "b": 20, "gone": 5}
    after = {"a": 10, "b": 25, "c": 7}
    assert added_bytes(before, after) == 25 + 7
    assert added_bytes(after, after) == 0


def test_dir_files_lists_sizes_under_a_root(tmp_path: Path) -> None:
    (tmp_path / "state" / "0").mkdir(parents=True)
    (tmp_path / "state" / "0" / "1.changelog").write_bytes(b"x" * 12)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_bytes(b"yy")
    assert dir_files(str(tmp_path)) == {"state/0/1.changelog": 12, "offsets/0": 2}
    assert dir_files(str(tmp_path / "missing")) == {}


def test_goal_rows_read_each_goal_its_way_and_show_no_figure_for_what_is_not_measured() -> None:
    figures = {
        "backlog_rate_ratio": 2.0,  # at least 1.5: met
        "live_rate_ratio": 1.0,  # not met
        "freshness_p50_ratio": 0.5,  # at most 1: met
        "worker_rss_mib": 2048.0,  # at most 1024: not met
        "checkpoint_share": 1.0,  # at most 0.03: not met
    }
    rows = goal_rows(figures, "goal/uniform")
    assert rows["goal/uniform/backlog_rate_ratio"] == {
        "goal": 1.5,
        "value": 2.0,
        "value_over_goal": 2.0 / 1.5,
        "meets": 1.0,
    }
    assert rows["goal/uniform/live_rate_ratio"]["meets"] == 0.0
    assert rows["goal/uniform/freshness_p50_ratio"]["meets"] == 1.0
    assert rows["goal/uniform/worker_rss_mib"]["meets"] == 0.0
    assert rows["goal/uniform/checkpoint_share"]["meets"] == 0.0
    assert rows["goal/uniform/get_p99_ms"] == {"goal": 10.0}  # no figure: no value, no verdict
    for name in NOT_MEASURED:
        assert rows[f"goal/uniform/{name}/not_measured_yet"] == {}
    assert len(rows) == len(GOALS) + len(NOT_MEASURED)


def test_a_ratio_over_nothing_is_zero_not_an_error() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(3.0, 0.0) == 0.0
