"""The worker -> coordinator messages (`shared/messages/session.py`): the one declaration
the worker builds its requests with and the coordinator parses them with, so a limit has one
value at both ends, and the JSON a worker sends is what it always sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator.service import models as m
from coordinator.service.http.request import parse_body
from pipeline.holdings import BATCH_FAILURES_REPORTED_MIN, PartitionRuntime
from pipeline.session import partition_report
from shared.errors import RequestError
from shared.messages.common import RATE_PER_S_MAX
from shared.messages.session import (
    BATCH_ERROR_LEN_MAX,
    CheckpointEntry,
    CheckpointsRequest,
    HeartbeatRequest,
    PartitionReport,
    RegisterRequest,
    RestartingRequest,
)


def test_the_coordinator_parses_with_the_declarations_the_worker_builds_with() -> None:
    assert m.HeartbeatRequest is HeartbeatRequest
    assert m.PartitionReport is PartitionReport
    assert m.RegisterRequest is RegisterRequest
    assert m.RestartingRequest is RestartingRequest
    assert m.CheckpointsRequest is CheckpointsRequest
    assert m.BATCH_ERROR_LEN_MAX == BATCH_ERROR_LEN_MAX


def test_requests_are_the_json_workers_have_always_sent() -> None:
    """Fields at their defaults are left out (a coordinator reads them as the default), so
    a heartbeat of a healthy partition is {epoch, offset} and nothing more."""
    register = RegisterRequest(worker_id="w1", address="http://127.0.0.1:9000")
    assert register.to_json() == {"worker_id": "w1", "address": "http://127.0.0.1:9000"}
    beat = HeartbeatRequest(
        incarnation=3,
        load=2.0,
        partitions={
            "4": PartitionReport(epoch=2, offset=10),
            "5": PartitionReport(epoch=1, offset=0, source_end=9, rate=1.5),
        },
    )
    assert beat.to_json() == {
        "incarnation": 3,
        "load": 2.0,
        "partitions": {
            "4": {"epoch": 2, "offset": 10},
            "5": {"epoch": 1, "offset": 0, "source_end": 9, "rate": 1.5},
        },
    }
    assert RestartingRequest(incarnation=2).to_json() == {"incarnation": 2}
    report = CheckpointsRequest(
        worker_id="w1",
        incarnation=2,
        checkpoints=[CheckpointEntry(partition=1, epoch=2, offset=3, uri="s3://b/k")],
    )
    assert report.to_json() == {
        "worker_id": "w1",
        "incarnation": 2,
        "checkpoints": [{"partition": 1, "epoch": 2, "offset": 3, "uri": "s3://b/k"}],
    }
    for message in (register, beat, report):
        assert type(message).model_validate(message.to_json()) == message


def test_a_failing_partitions_report_fits_the_coordinators_limits() -> None:
    """The worker cuts the error text and the rate to the limits the coordinator parses
    with: the one value each, so a report never makes the whole heartbeat a 400."""
    rt = PartitionRuntime(epoch=2, offset=5, failures=BATCH_FAILURES_REPORTED_MIN)
    rt.error = "x" * (BATCH_ERROR_LEN_MAX * 3)
    rt.input_rate.rate_per_s = RATE_PER_S_MAX * 10
    report = partition_report(rt)
    assert len(report.error) == BATCH_ERROR_LEN_MAX and report.rate == RATE_PER_S_MAX
    body = HeartbeatRequest(incarnation=1, partitions={"0": report}).to_json()
    parsed = parse_body(json.dumps(body).encode(), m.HeartbeatRequest)
    assert parsed.partitions["0"].failures == BATCH_FAILURES_REPORTED_MIN
    healthy = partition_report(PartitionRuntime(epoch=2, offset=5, failures=1, error="e"))
    assert healthy.to_json() == {"epoch": 2, "offset": 5}


@pytest.mark.parametrize(
    "report",
    [
        {"epoch": 1, "offset": 0, "error": "x" * (BATCH_ERROR_LEN_MAX + 1)},
        {"epoch": 1, "offset": 0, "rate": RATE_PER_S_MAX * 2},
        {"epoch": True, "offset": 0},
        {"epoch": 1, "offset": -1},
    ],
)
def test_the_coordinator_refuses_what_the_declaration_does_not_allow(
    report: dict[str, Any],
) -> None:
    body = json.dumps({"incarnation": 1, "partitions": {"0": report}}).encode()
    with pytest.raises(RequestError):
        parse_body(body, m.HeartbeatRequest)
