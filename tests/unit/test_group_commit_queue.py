"""`replication.group_commit.GroupCommit` alone, against a fake log that records each append
and answers when the test says: a lone proposal goes out as itself; proposals made while a
batch is in flight go out together as one batch entry, each caller with its own result; the
queue refuses past its bounds; pysyncobj's failures become the right errors; a proposal whose
caller gave up is never appended; an answer from another thread reaches the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pysyncobj import FAIL_REASON

from replication.batch import decode_batch, encode_results, is_batch
from replication.errors import NoLeaderError, OutcomeUnknownError, QueueFullError
from replication.group_commit import GroupCommit, GroupCommitLimits

WAIT_S = 5.0


class FakeLog:
    """Records what the group commit appends; the test answers each append itself."""

    def __init__(self) -> None:
        self.appended: list[tuple[bytes, Callable[[Any, int], None]]] = []
        self.sent = 0
        self.on_loop = True

    def append(self, payload: bytes, callback: Callable[[Any, int], None]) -> None:
        self.appended.append((payload, callback))

    def after_send(self) -> None:
        self.sent += 1

    def group(self, **limits: int) -> GroupCommit:
        return GroupCommit(
            GroupCommitLimits(**limits),
            append=self.append,
            on_loop=lambda: self.on_loop,
            sent=self.after_send,
        )

    def commit(self, i: int) -> None:
        """Answer append `i` as the machine would: its results, one per item."""
        payload, callback = self.appended[i]
        items = decode_batch(payload) if is_batch(payload) else [payload]
        results = [b"ok:" + item for item in items]
        callback(results[0] if len(items) == 1 else encode_results(results), FAIL_REASON.SUCCESS)


async def passes(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_lone_proposal_goes_out_as_itself_at_once() -> None:
    fake = FakeLog()
    group = fake.group()
    task = asyncio.ensure_future(group.propose(b"a", 5.0))
    await passes()
    assert [p for p, _ in fake.appended] == [b"a"] and fake.sent == 1
    assert group.in_flight == 1
    fake.commit(0)
    assert await task == b"ok:a"
    await passes()
    assert group.in_flight == 0
    stats = group.stats()
    assert (stats.entries, stats.proposals) == (1, 1)


async def test_proposals_made_while_a_batch_is_in_flight_share_the_next_entry() -> None:
    fake = FakeLog()
    group = fake.group()
    first = asyncio.ensure_future(group.propose(b"a", 5.0))
    await passes()
    rest = [asyncio.ensure_future(group.propose(b"x%d" % i, 5.0)) for i in range(5)]
    await passes()
    assert len(fake.appended) == 1  # the one slot is taken: they queue
    fake.commit(0)
    assert await first == b"ok:a"
    await passes()
    assert len(fake.appended) == 2
    payload = fake.appended[1][0]
    assert is_batch(payload) and decode_batch(payload) == [b"x%d" % i for i in range(5)]
    fake.commit(1)
    assert await asyncio.gather(*rest) == [b"ok:x%d" % i for i in range(5)]
    stats = group.stats()
    assert (stats.entries, stats.proposals) == (2, 6)


async def test_a_batch_respects_its_entry_and_byte_bounds() -> None:
    fake = FakeLog()
    group = fake.group(entries_max=3, bytes_max=10)
    first = asyncio.ensure_future(group.propose(b"a", 5.0))
    await passes()
    rest = [asyncio.ensure_future(group.propose(b"%d" % i, 5.0)) for i in range(4)]
    big = asyncio.ensure_future(group.propose(b"b" * 10, 5.0))
    await passes()
    fake.commit(0)
    await first
    await passes()
    assert decode_batch(fake.appended[1][0]) == [b"0", b"1", b"2"]  # entries_max
    fake.commit(1)
    await passes()
    assert fake.appended[2][0] == b"3"  # with the next 10 bytes it would pass bytes_max
    fake.commit(2)
    await passes()
    assert fake.appended[3][0] == b"b" * 10
    fake.commit(3)
    results = await asyncio.gather(*rest, big)
    assert results == [b"ok:0", b"ok:1", b"ok:2", b"ok:3", b"ok:" + b"b" * 10]


async def test_the_queue_refuses_past_its_bounds() -> None:
    fake = FakeLog()
    group = fake.group(queued_max=2, queued_bytes_max=100)
    first = asyncio.ensure_future(group.propose(b"a", 5.0))
    await passes()
    queued = [asyncio.ensure_future(group.propose(b"q", 5.0)) for _ in range(2)]
    await passes()
    with pytest.raises(QueueFullError, match="queue full"):
        await group.propose(b"one too many", 5.0)
    assert group.stats().queue_full == 1
    fake.commit(0)
    await first
    await passes()
    fake.commit(1)
    assert await asyncio.gather(*queued) == [b"ok:q", b"ok:q"]
    fake2 = FakeLog()
    by_bytes = fake2.group(queued_bytes_max=10)
    with pytest.raises(QueueFullError):
        await by_bytes.propose(b"x" * 11, 5.0)


@pytest.mark.parametrize(
    ("err", "raised"),
    [
        (FAIL_REASON.NOT_LEADER, NoLeaderError),
        (FAIL_REASON.MISSING_LEADER, NoLeaderError),
        (FAIL_REASON.QUEUE_FULL, NoLeaderError),
        (FAIL_REASON.REQUEST_DENIED, NoLeaderError),
        (FAIL_REASON.LEADER_CHANGED, OutcomeUnknownError),
        (FAIL_REASON.DISCARDED, OutcomeUnknownError),
    ],
)
async def test_pysyncobj_failures_become_the_errors_callers_act_on(
    err: int, raised: type[Exception]
) -> None:
    fake = FakeLog()
    group = fake.group()
    batch = [asyncio.ensure_future(group.propose(b"a", 5.0))]
    await passes()
    batch += [asyncio.ensure_future(group.propose(b"b%d" % i, 5.0)) for i in range(2)]
    await passes()
    fake.appended[0][1](None, err)
    await passes()
    fake.appended[1][1](None, err)  # a failed batch: every proposal in it learns of it
    outcomes = await asyncio.gather(*batch, return_exceptions=True)
    assert all(type(o) is raised for o in outcomes), outcomes


async def test_a_proposal_whose_caller_gave_up_is_never_appended() -> None:
    fake = FakeLog()
    group = fake.group()
    first = asyncio.ensure_future(group.propose(b"first", 5.0))
    await passes()
    with pytest.raises(OutcomeUnknownError, match="no commit within"):
        await group.propose(b"late", 0.05)
    third = asyncio.ensure_future(group.propose(b"third", 5.0))
    await passes()
    fake.commit(0)
    await first
    await passes()
    assert [p for p, _ in fake.appended] == [b"first", b"third"]
    fake.commit(1)
    assert await third == b"ok:third"


async def test_an_answer_from_another_thread_reaches_the_loop() -> None:
    """The stall guard's tick calls back off the loop: the outcome crosses to the loop."""
    fake = FakeLog()
    group = fake.group()
    task = asyncio.ensure_future(group.propose(b"a", 5.0))
    await passes()
    fake.on_loop = False
    t = threading.Thread(target=fake.commit, args=(0,))
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive()
    assert await asyncio.wait_for(task, WAIT_S) == b"ok:a"
    await passes()
    assert group.in_flight == 0
