"""Durable acknowledgements at the file level, against pysyncobj's own file format.

- The journal's sync mark (`dirty`, `synced_index`) and its synced image follow the syncs:
  the image lags the file until a sync and equals it after one, also when records were cut
  from the end or all cleared; an image torn by a kill in the middle of its update is still
  a whole-record prefix of the log before or after that sync.
- The trim after a compaction replaces the journal whole, with the bytes pysyncobj's
  in-place rewrite would leave.
- `durable_replace` syncs the file, renames it, then syncs the directory, in that order,
  and so does the term/vote record and a dump pysyncobj's serializer writes.
- With fsync off nothing is synced and no image is kept.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.serializer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.journal import FileJournal

import replication.durable_journal
from replication.disk_faults import DiskFaults
from replication.durability import (
    SYNCED_IMAGE_SUFFIX,
    SYNCED_IMAGES_ENV,
    SyncedImage,
    SyncTimes,
    durable_replace,
    make_directory,
)
from replication.durable_journal import DurableJournal
from replication.journal import LAST_OFFSET_AT, repair_journal_tail

Entry = tuple[bytes, int, int]


def entries(count: int, start: int = 1, term: int = 1) -> list[Entry]:
    return [(b"cmd-%d;" % i * (i % 4 + 1), i, term) for i in range(start, start + count)]


def log_of(journal_bytes: bytes, scratch: Path) -> list[Entry]:
    """The log pysyncobj reads from these journal bytes (a torn tail repaired first)."""
    path = scratch / "read.journal"
    path.write_bytes(journal_bytes)
    repair_journal_tail(str(path))
    j = FileJournal(str(path))
    try:
        return [j[i] for i in range(len(j))]
    finally:
        j._destroy()
        path.unlink()


def end_of(journal_bytes: bytes) -> int:
    return int.from_bytes(journal_bytes[LAST_OFFSET_AT : LAST_OFFSET_AT + 4], "little")


def image_of(path: Path) -> Path:
    return Path(str(path) + SYNCED_IMAGE_SUFFIX)


@pytest.fixture
def images(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SYNCED_IMAGES_ENV, "1")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


class SyncSpy:
    """Records every fsync (the inode, and whether it is a directory) and every rename, in
    order, and does them: the order is what a power cut could observe."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, int, bool]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            st_ = os.fstat(fd)
            self.events.append(("fsync", st_.st_ino, stat.S_ISDIR(st_.st_mode)))
            real_fsync(fd)

        def replace(src: Any, dst: Any) -> None:
            self.events.append(("replace", os.stat(src).st_ino, False))
            real_replace(src, dst)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)


def test_the_sync_mark_and_the_image_follow_the_syncs(
    tmp_path: Path, scratch: Path, images: None
) -> None:
    path = tmp_path / "raft.journal"
    times = SyncTimes()
    j = DurableJournal(str(path), times, fsync=True)
    image = image_of(path)
    assert not j.dirty and j.synced_index == 0
    assert image.read_bytes() == path.read_bytes()[: end_of(image.read_bytes())]

    for e in entries(5):
        j.add(*e)
    assert j.dirty and j.synced_index == 0
    assert log_of(image.read_bytes(), scratch) == []  # the image lags the file
    assert log_of(path.read_bytes(), scratch) == entries(5)

    assert j.sync() and not j.dirty and j.synced_index == 5
    synced = image.read_bytes()
    assert synced == path.read_bytes()[: end_of(synced)]
    assert log_of(synced, scratch) == entries(5)
    assert not j.sync()  # nothing written since

    for e in entries(3, start=6):
        j.add(*e)
    j.deleteEntriesFrom(3)  # a follower's conflicting tail: entries 4.. go
    assert j.dirty and j.synced_index == 3
    assert log_of(image.read_bytes(), scratch) == entries(5)
    for e in entries(2, start=4, term=2):
        j.add(*e)
    assert j.sync() and j.synced_index == 5
    expected = entries(3) + entries(2, start=4, term=2)
    assert log_of(image.read_bytes(), scratch) == expected
    assert image.read_bytes() == path.read_bytes()[: end_of(image.read_bytes())]

    j.clear()
    assert j.synced_index == 0 and j.dirty
    j.add(*entries(1, start=9, term=3)[0])
    j.sync()
    assert log_of(image.read_bytes(), scratch) == entries(1, start=9, term=3)

    assert times.stats().journal_syncs == 3
    j._destroy()
    assert log_of(path.read_bytes(), scratch) == entries(1, start=9, term=3)


class Killed(Exception):
    """The process died in the middle of an image update."""


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 4)),
            st.tuples(st.just("cut"), st.integers(0, 6)),
        ),
        min_size=1,
        max_size=8,
    ),
    torn_at=st.integers(0, 3),
)
def test_an_image_torn_by_a_kill_is_the_log_before_or_after_the_sync(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]], torn_at: int
) -> None:
    tmp = tmp_path_factory.mktemp("torn")
    scratch = tmp / "scratch"
    scratch.mkdir()
    path = tmp / "raft.journal"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SYNCED_IMAGES_ENV, "1")
        j = DurableJournal(str(path), SyncTimes(), fsync=True)
        for e in entries(6):
            j.add(*e)
        j.sync()
        before = [j[i] for i in range(len(j))]
        term = 2
        for op, n in ops:
            if op == "add":
                last = j[-1][1] if len(j) else 0
                for e in entries(n, start=last + 1, term=term):
                    j.add(*e)
            elif n < len(j):
                j.deleteEntriesFrom(n)
                term += 1
        after = [j[i] for i in range(len(j))]

        def torn_write(self: SyncedImage, writes: list[tuple[int, bytes]], size: int) -> None:
            with open(self.path, "r+b") as f:
                for offset, data in writes[:torn_at]:
                    f.seek(offset)
                    f.write(data)
            raise Killed

        mp.setattr(SyncedImage, "write", torn_write)
        if j.dirty:
            with pytest.raises(Killed):
                j.sync()
        else:
            assert not j.sync() and after == before  # nothing written: nothing to tear
    seen = log_of(image_of(path).read_bytes(), scratch)  # before a close syncs it
    j._destroy()
    assert seen in (before[: len(seen)], after[: len(seen)]), (seen, before, after)


def test_the_trim_after_a_compaction_replaces_the_journal_whole(
    tmp_path: Path, scratch: Path, images: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "raft.journal"
    times = SyncTimes()
    j = DurableJournal(str(path), times, fsync=True)
    for e in entries(10):
        j.add(*e)
    inode = path.stat().st_ino
    spy = SyncSpy(monkeypatch)
    j.deleteEntriesTo(6)
    assert [e[0] for e in spy.events] == ["fsync", "replace", "fsync", "replace"]
    assert path.stat().st_ino != inode  # a new file, not the old one rewritten in place
    assert not j.dirty and j.synced_index == 10
    assert times.stats().journal_rewrites == 1

    # The bytes pysyncobj's own in-place trim leaves, and the image holds them.
    plain = FileJournal(str(tmp_path / "plain.journal"))
    for e in entries(10):
        plain.add(*e)
    plain.deleteEntriesTo(6)
    plain._destroy()
    theirs = (tmp_path / "plain.journal").read_bytes()
    ours = path.read_bytes()
    assert ours[: end_of(ours)] == theirs[: end_of(theirs)]
    assert image_of(path).read_bytes() == ours[: end_of(ours)]

    j.add(*entries(1, start=11)[0])  # the journal keeps working on the new file
    j.sync()
    j._destroy()
    assert log_of(path.read_bytes(), scratch) == entries(5, start=7)
    assert log_of(image_of(path).read_bytes(), scratch) == entries(5, start=7)


def test_durable_replace_syncs_the_file_renames_then_syncs_the_directory(
    tmp_path: Path, images: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, tmp = tmp_path / "raft.dump", tmp_path / "raft.dump.tmp"
    path.write_bytes(b"old")
    tmp.write_bytes(b"new dump")
    file_inode, dir_inode = tmp.stat().st_ino, tmp_path.stat().st_ino
    spy = SyncSpy(monkeypatch)
    durable_replace(str(tmp), str(path))
    assert spy.events[:3] == [
        ("fsync", file_inode, False),
        ("replace", file_inode, False),
        ("fsync", dir_inode, True),
    ]
    assert path.read_bytes() == b"new dump" == image_of(path).read_bytes()
    assert not tmp.exists()


def test_a_new_directory_is_synced_into_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    spy = SyncSpy(monkeypatch)
    make_directory(str(tmp_path / "data" / "n1" / "raft"), durable=True)
    parents = [tmp_path / "data", tmp_path / "data" / "n1"]
    assert spy.events == [("fsync", p.stat().st_ino, True) for p in parents]
    make_directory(str(tmp_path / "data" / "n1" / "raft"), durable=True)  # there already
    make_directory(str(tmp_path / "data" / "n2"), durable=False)
    assert len(spy.events) == 2 and (tmp_path / "data" / "n2").is_dir()


def test_the_term_and_vote_are_stored_durably(
    tmp_path: Path, images: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "raft.journal"
    times = SyncTimes()
    j = DurableJournal(str(path), times, fsync=True)
    spy = SyncSpy(monkeypatch)
    j.setCurrentTerm(7, "n2")
    meta = tmp_path / "raft.journal.meta"
    assert [e[0] for e in spy.events[:3]] == ["fsync", "replace", "fsync"]
    assert spy.events[1][1] == meta.stat().st_ino and spy.events[2][2]  # then the directory
    assert image_of(meta).read_bytes() == meta.read_bytes()
    assert times.stats().meta_syncs == 1
    j._destroy()
    again = FileJournal(str(path))
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "n2")
    again._destroy()


@pytest.fixture
def durable_dump(tmp_path: Path) -> Iterator[tuple[Path, SyncTimes]]:
    path = tmp_path / "raft.dump"
    times = SyncTimes()
    registry = replication.durable_journal._DURABLE_DUMPS  # what a node with fsync on registers
    registry[str(path)] = (times, DiskFaults())
    try:
        yield path, times
    finally:
        registry.pop(str(path), None)


def serialize(path: Path, data: Any) -> None:
    s = pysyncobj.serializer.Serializer(str(path), 1024, False, None, None, None)
    s.serialize(data, 1)
    assert s.checkSerializing()[0] == pysyncobj.serializer.SERIALIZER_STATE.SUCCESS


def test_a_dump_pysyncobj_writes_is_replaced_durably(
    durable_dump: tuple[Path, SyncTimes], images: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, times = durable_dump
    spy = SyncSpy(monkeypatch)
    serialize(path, ("state", ("e", 2, 1), ("e", 1, 1)))
    assert [e[0] for e in spy.events[:3]] == ["fsync", "replace", "fsync"]
    assert image_of(path).read_bytes() == path.read_bytes()
    assert times.stats().dump_syncs == 1


def test_with_fsync_off_nothing_is_synced_and_no_image_kept(
    tmp_path: Path, scratch: Path, images: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "raft.journal"
    times = SyncTimes()
    j = DurableJournal(str(path), times, fsync=False)
    spy = SyncSpy(monkeypatch)
    for e in entries(8):
        j.add(*e)
    assert not j.dirty and not j.sync()
    j.setCurrentTerm(3, None)
    j.deleteEntriesTo(4)
    serialize(tmp_path / "raft.dump", ("state", ("e", 2, 1), ("e", 1, 1)))  # not registered
    j._destroy()
    assert not [e for e in spy.events if e[0] == "fsync"]
    assert not list(tmp_path.glob("*" + SYNCED_IMAGE_SUFFIX))
    assert times.stats() == SyncTimes().stats()
    assert log_of(path.read_bytes(), scratch) == entries(4, start=5)


def test_a_journal_written_before_opens_as_it_is(tmp_path: Path, scratch: Path) -> None:
    """Existing data directories start: pysyncobj's own journal opens as a DurableJournal,
    and what the DurableJournal writes opens in pysyncobj's."""
    path = tmp_path / "raft.journal"
    plain = FileJournal(str(path))
    for e in entries(4):
        plain.add(*e)
    plain._destroy()
    j = DurableJournal(str(path), SyncTimes(), fsync=True)
    assert [j[i] for i in range(len(j))] == entries(4) and j.synced_index == 4
    j.add(*entries(1, start=5)[0])
    j._destroy()
    shutil.copy(path, scratch / "copy")
    assert log_of((scratch / "copy").read_bytes(), scratch) == entries(5)
