"""`bench.streaming_query.Ledger`: the Structured Streaming peer's rows are counted from its
progress reports, which the benchmark reads again at every poll; each batch must count once,
and a trigger that found no data must not hide the batch that later takes its id.

The reports are stand-ins with the properties the ledger reads (a StreamingQueryProgress
derives numInputRows; it is not a stored key)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench.streaming_query import Ledger, phase_means


def report(batch_id: int, rows: int, *, at: str = "t0", commit_ms: tuple[int, ...] = ()) -> Any:
    return SimpleNamespace(
        batchId=batch_id,
        numInputRows=rows,
        timestamp=at,
        durationMs={"triggerExecution": 1500, "addBatch": 1000, "walCommit": 40},
        stateOperators=[SimpleNamespace(commitTimeMs=ms) for ms in commit_ms],
    )


def test_a_batch_read_again_counts_once() -> None:
    ledger = Ledger()
    ledger.absorb("run1", [report(0, 100), report(1, 50)])
    ledger.absorb("run1", [report(0, 100), report(1, 50), report(2, 7)])
    assert ledger.rows == 157
    assert [b.rows for b in ledger.batches] == [100, 50, 7]


def test_a_no_data_report_does_not_hide_the_batch_that_takes_its_id() -> None:
    ledger = Ledger()
    ledger.absorb("run1", [report(3, 0)])
    assert ledger.rows == 0 and not ledger.batches
    ledger.absorb("run1", [report(3, 0), report(3, 25, at="t1")])
    assert ledger.rows == 25


def test_reports_of_two_runs_are_told_apart_by_the_run_id() -> None:
    # A restarted query goes on from its checkpoint's next batch id; the ledger does not
    # depend on that: the same batch id in another run is another batch.
    ledger = Ledger()
    ledger.absorb("run1", [report(0, 10)])
    ledger.absorb("run2", [report(0, 20)])
    assert ledger.rows == 30


def test_news_is_true_once_per_latest_report() -> None:
    ledger = Ledger()
    assert ledger.news("run1", report(4, 10))
    assert not ledger.news("run1", report(4, 10))
    assert ledger.news("run1", report(4, 0, at="t9"))  # an idle report after the batch
    assert ledger.news("run2", report(4, 0, at="t9"))


def test_phases_are_seconds_with_the_state_commits_summed() -> None:
    ledger = Ledger()
    ledger.absorb("run1", [report(0, 1, commit_ms=(200, 300)), report(1, 1, commit_ms=(100,))])
    means = phase_means(ledger.batches)
    assert means["trigger"] == pytest.approx(1.5)
    assert means["add_batch"] == pytest.approx(1.0)
    assert means["wal_commit"] == pytest.approx(0.04)
    assert means["state_commit"] == pytest.approx(0.3)
    assert means["latest_offset"] == 0.0
    assert phase_means([])["trigger"] == 0.0
