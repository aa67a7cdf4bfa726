"""Spark faults in the micro-batch loop, with a fake Spark behind the processor's seams (its
`feed` runs the job, its `aggregator` interrupts and reconnects): a job past
spark_job_timeout_s is interrupted and retried on a new session with nothing merged; a
session the server lost is replaced before the next batch, a failed replacement is counted
and shown (health, metrics) until one works; the errors the pyspark Connect client really
raises are named for what they mean."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pyspark.errors.exceptions.connect import SparkConnectException as ConnectError
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from pipeline.datapath import PlannedBatch
from pipeline.holdings import PartitionRuntime
from pipeline.lease import Lease
from pipeline.spark_link import BatchFault, SparkJobTimeout, SparkLink, classify, first_line
from pipeline.state import KeyState, PartitionState
from pipeline.store import LocalStore
from pipeline.worker import Worker
from testkit.prom import parse, value
from tests.unit.test_pipeline_worker import offline_settings

JOB_TIMEOUT_S = 0.3
HUNG_JOB_WAIT_S = 30.0  # a fake job never waits this long: its interrupt releases it


def session_lost() -> Exception:
    """What the client raised on every call after the server restarted under it."""
    return ConnectError(errorClass="NO_ACTIVE_SESSION", messageParameters={})


def unreachable() -> Exception:
    return SparkConnectGrpcException(
        message="failed to connect to all addresses; last error: Connection refused",
        grpc_status_code=grpc.StatusCode.UNAVAILABLE,
    )


class FakeSpark:
    """The feed and the aggregator at once: a batch of one segment per open partition,
    each adding one record of key "k"; `run` fails, hangs or answers as told."""

    def __init__(self) -> None:
        self.fetched = 0
        self.head = 0
        self.mode = "ok"  # ok | hang | lost
        self.reconnect_errors: list[Exception] = []
        self.reconnects = 0
        self.interrupts = 0
        self.done_batches = 0
        self._released = threading.Event()

    # -- the feed's part ----------------------------------------------------------------------
    def plan(self, offsets: dict[int, int]) -> PlannedBatch:
        ends = {p: off + 1 for p, off in offsets.items()}
        return PlannedBatch(
            keys=[f"seg-{p}-{o}" for p, o in offsets.items()], ends=ends, heads=ends
        )

    def run(self, aggregator: Any, batch: PlannedBatch) -> dict[int, PartitionState]:
        if self.mode == "hang":
            # A stuck stage: only an interrupt ends it, and then as Spark's cancel does.
            if not self._released.wait(HUNG_JOB_WAIT_S):
                raise AssertionError("the hung job was never interrupted")
            raise ConnectError(errorClass="OPERATION_CANCELED", messageParameters={})
        if self.mode == "lost":
            raise session_lost()
        return {
            p: {
                "k": KeyState(
                    count=1,
                    sum=1.0,
                    min=1.0,
                    max=1.0,
                    last=1.0,
                    last_offset=end - 1,
                    first_offset=end - 1,
                )
            }
            for p, end in batch.ends.items()
        }

    def done(self, batch: PlannedBatch) -> None:
        self.done_batches += 1

    # -- the aggregator's part ----------------------------------------------------------------
    def interrupt(self) -> None:
        self.interrupts += 1
        self._released.set()

    def reconnect(self) -> None:
        if self.reconnect_errors:
            raise self.reconnect_errors.pop(0)
        self.reconnects += 1
        self.mode = "ok"


def hosting(worker: Worker, partitions: Iterable[int], *, epoch: int) -> None:
    """`worker` holds a long lease and every one of `partitions` open at `epoch`, loaded."""
    worker.lease = Lease(lease_ms=600_000).renewed(worker.clock.monotonic_ms())
    for p in partitions:
        rt = PartitionRuntime(epoch=epoch)
        rt.loaded.set()
        worker.parts[p] = rt
        worker.holdings.gates.host(p, epoch)


@pytest.fixture
async def rig(tmp_path: Path) -> Any:
    settings = dataclasses.replace(
        offline_settings(tmp_path, "w1"),
        spark_job_timeout_s=JOB_TIMEOUT_S,
        spark_reconnect_backoff_s_min=0.5,
        spark_reconnect_backoff_s_max=4.0,
    )
    worker = Worker(settings, LocalStore(str(tmp_path / "s")))
    spark = FakeSpark()
    worker.processor.feed = spark  # type: ignore[assignment]
    worker.processor.aggregator = spark  # type: ignore[assignment]
    worker.processor.warming = None
    hosting(worker, (0, 1), epoch=3)
    try:
        yield worker, spark
    finally:
        await worker.client.close()


async def test_a_hung_job_is_interrupted_and_the_batch_retried_on_a_new_session(
    rig: tuple[Worker, FakeSpark],
) -> None:
    worker, spark = rig
    processor = worker.processor
    spark.mode = "hang"
    with pytest.raises(SparkJobTimeout, match=r"spark_job_timeout_s=0\.3"):
        await processor.process_once()
    assert spark.interrupts == 1
    # Nothing merged, no offset moved, the input kept for the retry.
    assert [(rt.offset, rt.state) for rt in worker.parts.values()] == [(0, {}), (0, {})]
    assert spark.done_batches == 0
    assert processor.failed_batches["spark_timeout"] == 1
    assert processor.link.lost and processor.link.fault is BatchFault.SPARK_TIMEOUT
    assert worker.parts[0].error is not None and "interrupted" in worker.parts[0].error

    # The next batch first replaces the session, then runs the same input whole.
    assert await processor.process_once() == 2
    assert spark.reconnects == 1 and worker.stats["spark_reconnects"] == 1
    assert not processor.link.lost
    assert [(rt.offset, rt.state["k"].count) for rt in worker.parts.values()] == [(1, 1), (1, 1)]
    assert [rt.epoch for rt in worker.parts.values()] == [3, 3]


async def test_a_lost_session_is_replaced_and_shown_until_it_is(
    rig: tuple[Worker, FakeSpark],
) -> None:
    worker, spark = rig
    spark.mode = "lost"  # the server restarted under the session
    processor = worker.processor
    with pytest.raises(ConnectError, match="NO_ACTIVE_SESSION"):
        await processor.process_once()
    assert processor.failed_batches["spark_session_lost"] == 1
    # The server is still coming back: two attempts at a session fail.
    spark.reconnect_errors = [unreachable(), unreachable()]
    for attempt in (2, 3):
        with pytest.raises(SparkConnectGrpcException):
            await processor.process_once()
        assert processor.link.attempts == attempt
    assert processor.failed_batches["spark_unreachable"] == 2
    assert processor.link.pause_s() == 2.0  # 0.5, doubled per failed attempt after the first
    assert worker.parts[0].failures == 3  # reported to the leader as failing
    async with TestClient(TestServer(worker.app())) as client:
        health = await (await client.get("/v1/health")).json()
        assert health["spark"]["reachable"] is False
        assert health["spark"]["fault"] == "spark_unreachable"
        assert "Connection refused" in health["spark"]["error"]
        metrics = parse(await (await client.get("/metrics")).text())
        assert value(metrics, "ripple_worker_spark_reachable") == 0
        assert value(metrics, "ripple_worker_failed_batches_total", reason="spark_unreachable") == 2

        assert await processor.process_once() == 2
        health = await (await client.get("/v1/health")).json()
        assert health["spark"]["reachable"] is True and health["spark"]["reconnects"] == 1
        metrics = parse(await (await client.get("/metrics")).text())
        assert value(metrics, "ripple_worker_spark_reachable") == 1
        assert value(metrics, "ripple_worker_spark_reconnects_total") == 1
    assert worker.parts[0].failures == 0 and worker.parts[0].offset == 1


def test_the_clients_errors_are_named_for_what_they_mean() -> None:
    assert classify(session_lost()) is BatchFault.SPARK_SESSION_LOST
    changed = ConnectError(
        message="[INVALID_HANDLE.SESSION_CHANGED] The existing Spark server driver instance "
        "has restarted. Please reconnect."
    )
    assert classify(changed) is BatchFault.SPARK_SESSION_LOST
    assert classify(unreachable()) is BatchFault.SPARK_UNREACHABLE
    try:
        try:
            raise unreachable()
        except Exception as inner:
            raise RuntimeError("the probe failed") from inner
    except RuntimeError as wrapped:
        assert classify(wrapped) is BatchFault.SPARK_UNREACHABLE
    assert classify(SparkJobTimeout("past it")) is BatchFault.SPARK_TIMEOUT
    bad_column = ConnectError(message="[UNRESOLVED_COLUMN.WITH_SUGGESTION] no_such_column")
    assert classify(bad_column) is BatchFault.SPARK_JOB
    assert not BatchFault.SPARK_JOB.needs_new_session and not BatchFault.PLAN.needs_new_session


def test_the_reconnect_pause_doubles_within_its_bounds() -> None:
    link = SparkLink(0.5, 10.0)
    assert not link.failed(BatchFault.SPARK_JOB, "a bad plan", 0.0)  # no new session for it
    assert not link.lost
    assert link.failed(BatchFault.SPARK_SESSION_LOST, "gone", 1.0)  # the outage begins
    pauses = [link.pause_s()]
    for now in range(2, 9):
        assert not link.failed(BatchFault.SPARK_UNREACHABLE, "refused", float(now))
        pauses.append(link.pause_s())
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert link.health(5.0)["unreachable_s"] == 4.0
    assert link.reconnected(31.0) == 30.0
    assert link.health(31.0) == {
        "reachable": True,
        "unreachable_s": None,
        "fault": None,
        "error": None,
        "attempts": 0,
        "reconnects": 1,
    }


def test_a_raw_grpc_error_is_shown_by_its_status_and_detail() -> None:
    class RefusedCall(grpc.RpcError):
        """What the Connect client raises once its retries of a refused connection end."""

        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "failed to connect to all addresses; last error: Connection refused"

        def __str__(self) -> str:
            return "<_InactiveRpcError of RPC that terminated with:\n\tstatus = ..."

    refused = RefusedCall()
    assert classify(refused) is BatchFault.SPARK_UNREACHABLE
    assert first_line(refused) == (
        "gRPC UNAVAILABLE: failed to connect to all addresses; last error: Connection refused"
    )
    # pyspark's wrapping of the same error, by its text.
    wrapped = SparkConnectGrpcException(
        message="<_InactiveRpcError of RPC that terminated with:\n\tstatus = "
        'StatusCode.UNAVAILABLE\n\tdetails = "failed to connect to all addresses"\n>',
        grpc_status_code=grpc.StatusCode.UNAVAILABLE,
    )
    assert classify(wrapped) is BatchFault.SPARK_UNREACHABLE
    assert first_line(wrapped) == "gRPC UNAVAILABLE: failed to connect to all addresses"
    assert first_line(ValueError("one\ntwo")) == "one"


def test_a_transforms_exception_is_what_the_error_says() -> None:
    """Spark Connect's text for a Python UDF that raised starts with a line that says nothing;
    the operator is shown the exception's own line."""
    raised = RuntimeError(
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "<spec transform>", line 2, in transform\n'
        "ValueError: no good row\n"
    )
    assert first_line(raised) == "ValueError: no good row"
    bare = RuntimeError("An exception was thrown from the Python worker.\nno traceback here")
    assert first_line(bare) == "An exception was thrown from the Python worker."
