"""Regression for chaos scenario e (truncated journal tail): a pysyncobj journal cut at any
byte is repaired to a prefix of whole records, and pysyncobj then opens it."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.journal import FileJournal

from replication.journal import repair_journal_tail

RECORDS = [(f"cmd-{i}".encode() * (i + 1), i + 1, 1 + i // 3) for i in range(12)]


def _journal(path: Path) -> int:
    j = FileJournal(str(path))
    for rec in RECORDS:
        j.add(*rec)
    j._destroy()
    return path.stat().st_size


@settings(max_examples=60, deadline=None)
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_scenario_e_truncated_journal_tail(tmp_path_factory, cut: float) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("j") / "raft.journal"
    _journal(path)
    data = path.read_bytes()
    used = 40 + sum(16 + len(c) + 8 for c, _, _ in RECORDS)
    keep = 40 + int(cut * (used - 40))
    path.write_bytes(data[:keep])
    kept = repair_journal_tail(str(path))
    j = FileJournal(str(path))  # raised struct.error before the repair
    entries = [j[i] for i in range(len(j))]
    j._destroy()
    assert entries == RECORDS[: len(entries)]
    assert kept in (-1, len(entries))


def test_whole_journal_untouched(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    _journal(path)
    before = path.read_bytes()
    assert repair_journal_tail(str(path)) == -1
    assert path.read_bytes() == before
    assert repair_journal_tail(str(tmp_path / "missing")) == -1
