"""A failing or slow disk under one node: each decision driven by an injected failure.

A sync that raises halts the node for good (no retry: fsyncgate), ENOSPC on the journal
likewise, a compaction's dump that fails is retried after a backoff, the restart trusts the
journal only through its synced index, and a run of slow syncs makes a leader stand aside.
Injected through the real calls (os.fsync, os.posix_fallocate, the journal's msync) or the
test-only control file; time through FakeClock; nothing sleeps.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from pathlib import Path

import pytest

import replication.durable_journal
from replication.disk_faults import (
    DUMP_RETRY_MAX_S,
    DUMP_RETRY_MIN_S,
    FAULTS_ENV,
    DiskFaults,
    DumpBackoff,
)
from replication.durability import SyncTimes
from replication.durable_journal import DurableJournal, register_dump
from replication.errors import SyncFailedError
from replication.journal import (
    UNSYNCED_MARK_SUFFIX,
    drop_unsynced_tail,
    mark_unsynced_tail,
    read_journal,
)
from replication.slow_disk import SLOW_SYNC_WINDOW, SlowDisk
from replication.ticker import Ticker
from shared.clock import FakeClock
from tests.unit.test_ticker_clock import FakeNode, FakePoller


def raising(code: int):  # type: ignore[no-untyped-def]
    def fail(*_args: object) -> None:
        raise OSError(code, os.strerror(code))

    return fail


def journal(tmp_path: Path, faults: DiskFaults) -> DurableJournal:
    return DurableJournal(str(tmp_path / "raft.journal"), SyncTimes(), faults, fsync=True)


def test_a_failed_journal_sync_is_recorded_once_and_never_retried(tmp_path: Path) -> None:
    faults = DiskFaults()
    j = journal(tmp_path, faults)
    j.add(b"one", 1, 1)
    assert j.sync() and j.synced_index == 1
    j.add(b"two", 2, 1)
    msyncs: list[str] = []
    j.flush = raising(errno.EIO)  # type: ignore[method-assign]
    with pytest.raises(SyncFailedError, match="EIO"):
        j.sync()
    failure = faults.failure
    assert failure is not None
    assert (failure.op, failure.errno, failure.kind) == ("journal sync", errno.EIO, "sync_failed")
    assert failure.path.endswith("raft.journal")
    assert "restart the node: it rejoins and catches up from the others" in failure.reason
    # A second fsync could report success for pages the kernel dropped: never tried again.
    j.flush = lambda: msyncs.append("msync")  # type: ignore[method-assign]
    with pytest.raises(SyncFailedError):
        j.sync()
    with pytest.raises(SyncFailedError):
        j.add(b"three", 3, 1)
    assert msyncs == []
    assert j.dirty and j.synced_index == 1  # no answer ever waits its way out
    j._destroy()  # closed without a sync
    assert msyncs == []


def test_the_first_failure_stands(tmp_path: Path) -> None:
    faults = DiskFaults()
    faults.fail("journal write", "a", OSError(errno.ENOSPC, "full"))
    faults.fail("journal sync", "b", OSError(errno.EIO, "io"))
    assert faults.failure is not None and faults.failure.op == "journal write"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_on_a_journal_write_halts_with_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faults = DiskFaults()
    j = journal(tmp_path, faults)
    monkeypatch.setattr(os, "posix_fallocate", raising(code))
    name = errno.errorcode[code]
    j.add(b"small", 1, 1)  # within what the journal allocated when it opened
    with pytest.raises(SyncFailedError, match=rf"disk_full: journal write .* {name}"):
        j.add(b"x" * 4096, 2, 1)  # past it: the file must grow
    assert faults.failure is not None and faults.failure.kind == "disk_full"
    j._destroy()
    # Nothing half-written: the record that did not fit never reached the mapping.
    assert [r[1] for r in read_journal(str(tmp_path / "raft.journal"))] == [1]


def test_a_filesystem_without_fallocate_is_written_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "posix_fallocate", raising(errno.EOPNOTSUPP))
    j = journal(tmp_path, DiskFaults())
    for i in (1, 2):
        j.add(b"cmd" * 1000, i, 1)  # grows the file: pysyncobj's own way
    assert j.sync() and j.faults.failure is None
    j._destroy()
    assert [r[1] for r in read_journal(str(tmp_path / "raft.journal"))] == [1, 2]


def test_a_failed_term_vote_record_raises_before_the_vote_goes_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults = DiskFaults()
    j = journal(tmp_path, faults)
    monkeypatch.setattr(os, "fsync", raising(errno.EIO))
    with pytest.raises(SyncFailedError, match="term/vote record"):
        j.setCurrentTerm(7, "n2")
    assert faults.failure is not None and faults.failure.op == "term/vote record"
    j._destroy()


def test_the_control_file_fails_and_only_when_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = tmp_path / "faults.json"
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    DiskFaults.from_env().before_sync()  # production: no control file, nothing read
    monkeypatch.setenv(FAULTS_ENV, str(control))
    faults = DiskFaults.from_env()
    faults.before_sync()  # no file yet: no fault
    control.write_text(json.dumps({"journal_write_errno": "ENOSPC"}))
    faults.before_sync()
    with pytest.raises(OSError) as caught:
        faults.before_write()
    assert caught.value.errno == errno.ENOSPC
    control.write_text(json.dumps({"journal_sync_errno": "EIO"}))
    j = journal(tmp_path, faults)
    j.add(b"one", 1, 1)
    with pytest.raises(SyncFailedError, match=r"journal sync .* EIO"):
        j.sync()
    j._destroy()


def test_a_received_dump_that_fails_halts_and_a_compactions_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "raft.dump"
    faults = DiskFaults()
    register_dump(str(dump), SyncTimes(), faults)
    try:
        monkeypatch.setattr(os, "fsync", raising(errno.EIO))
        compaction_tmp = tmp_path / "raft.dump.tmp"
        compaction_tmp.write_bytes(b"dump")
        with pytest.raises(OSError):
            replication.durable_journal._replace_dump(str(compaction_tmp), str(dump))
        assert faults.failure is None  # retried later (DumpBackoff), the journal intact
        received_tmp = tmp_path / "raft.dump.1.tmp"
        received_tmp.write_bytes(b"dump")
        with pytest.raises(SyncFailedError, match="dump"):
            replication.durable_journal._replace_dump(str(received_tmp), str(dump))
        assert faults.failure is not None and faults.failure.op == "dump"
        assert not dump.exists()  # never renamed over the last good dump
    finally:
        register_dump(str(dump), None, faults)


def test_a_failed_dump_waits_a_doubling_backoff() -> None:
    clock = FakeClock()
    backoff = DumpBackoff()
    assert not backoff.waiting(clock.monotonic_ms())
    assert backoff.failed(clock.monotonic_ms()) == DUMP_RETRY_MIN_S
    clock.advance(int(DUMP_RETRY_MIN_S * 1000) - 1)
    assert backoff.waiting(clock.monotonic_ms())
    clock.advance(1)
    assert not backoff.waiting(clock.monotonic_ms())
    assert backoff.failed(clock.monotonic_ms()) == 2 * DUMP_RETRY_MIN_S
    for _ in range(20):
        last = backoff.failed(clock.monotonic_ms())
    assert last == DUMP_RETRY_MAX_S and backoff.failures == 22
    backoff.succeeded()
    assert not backoff.waiting(clock.monotonic_ms())
    assert backoff.failed(clock.monotonic_ms()) == DUMP_RETRY_MIN_S  # the streak restarts


def test_the_restart_drops_what_was_never_synced(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = journal(tmp_path, DiskFaults())
    for i in range(1, 6):
        j.add(b"cmd-%d" % i, i, 1)
    j.sync()
    j._destroy()
    assert drop_unsynced_tail(str(path)) == -1  # no mark: untouched
    mark_unsynced_tail(str(path), 3)
    assert drop_unsynced_tail(str(path)) == 2
    assert [(c, i) for c, i, _t in read_journal(str(path))] == [
        (b"cmd-1", 1),
        (b"cmd-2", 2),
        (b"cmd-3", 3),
    ]
    assert not Path(str(path) + UNSYNCED_MARK_SUFFIX).exists()
    again = journal(tmp_path, DiskFaults())  # pysyncobj opens what is left
    assert len(again) == 3 and again.synced_index == 3
    again._destroy()


def test_a_torn_mark_trusts_no_record(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = journal(tmp_path, DiskFaults())
    j.add(b"cmd", 1, 1)
    j.sync()
    j._destroy()
    Path(str(path) + UNSYNCED_MARK_SUFFIX).write_text("")
    assert drop_unsynced_tail(str(path)) == 1
    assert read_journal(str(path)) == []


def test_a_run_of_slow_syncs_makes_the_disk_slow_and_one_outlier_does_not() -> None:
    clock = FakeClock()
    disk = SlowDisk(bound_ms=1000, cooldown_s=30)
    for seconds in (0.002, 2.5, 0.003, 0.002):
        disk.synced(seconds, clock.monotonic_ms())
        assert not disk.slow and disk.may_stand(clock.monotonic_ms())
    disk.synced(2.0, clock.monotonic_ms())
    assert not disk.slow  # one slow of the last three
    disk.synced(1.5, clock.monotonic_ms())
    assert disk.slow and disk.median_ms == 1500
    assert not disk.may_stand(clock.monotonic_ms())


def test_a_slow_node_stands_again_only_after_the_cooldown_of_fast_syncs() -> None:
    clock = FakeClock()
    disk = SlowDisk(bound_ms=1000, cooldown_s=30)
    for _ in range(SLOW_SYNC_WINDOW):
        disk.synced(2.0, clock.monotonic_ms())
    assert disk.slow
    clock.advance(10_000)
    for _ in range(SLOW_SYNC_WINDOW):
        disk.synced(2.0, clock.monotonic_ms())  # still slow as a follower: cooldown restarts
    for _ in range(SLOW_SYNC_WINDOW):
        disk.synced(0.001, clock.monotonic_ms())
    assert not disk.slow
    clock.advance(29_999)
    assert not disk.may_stand(clock.monotonic_ms())
    clock.advance(1)
    assert disk.may_stand(clock.monotonic_ms())


def test_a_bound_of_zero_turns_the_verdict_off() -> None:
    clock = FakeClock()
    disk = SlowDisk(bound_ms=0, cooldown_s=30)
    for _ in range(2 * SLOW_SYNC_WINDOW):
        disk.synced(10.0, clock.monotonic_ms())
    assert not disk.slow and disk.may_stand(clock.monotonic_ms())


class FailingNode(FakeNode):
    """A node whose tick meets a failed sync."""

    def doTick(self, time_to_wait: float) -> None:
        super().doTick(time_to_wait)
        raise SyncFailedError("sync_failed: journal sync of raft.journal failed with EIO")


def test_a_tick_that_meets_a_failed_sync_goes_on_to_the_halt_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after: list[str] = []
    ticker = Ticker(
        FailingNode(),  # type: ignore[arg-type]
        FakePoller(),  # type: ignore[arg-type]
        threading.Lock(),
        threading.Lock(),
        after_tick=lambda: after.append("halt check"),
        clock=FakeClock(),
    )
    with caplog.at_level(logging.ERROR):
        ticker._tick()
    assert after == ["halt check"]  # the log's after_tick halts the node there
    assert "raft tick failed" not in caplog.text  # the halt logs it once, not a traceback
