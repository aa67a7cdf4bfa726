"""`CoordinatorNode.submit` turns a committed result into the proposed command's own result
type, or into the request's error, and refuses a command above the finalized command-set
version before proposing it. The log is a fake that answers each proposal with the
bytes a machine would; Raft itself is tests/integration's.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from coordinator.config import ClusterConfig
from coordinator.core.codec import decode_command, encode_result
from coordinator.core.commands import (
    BackupResult,
    Barrier,
    BarrierResult,
    FinalizeVersion,
    Ok,
    RecordBackup,
    RegisterResult,
    RegisterWorker,
    ReportVersions,
    Result,
    rejected,
)
from coordinator.core.model import WorkerId
from coordinator.core.state import ClusterState, apply
from coordinator.service.metrics import Metrics
from coordinator.service.node import CoordinatorNode
from shared.clock import FakeClock
from shared.errors import RequestError, UnavailableError
from shared.http_statuses import status_of

W1 = WorkerId("w1")
PROPOSE_MS = 7
REGISTER = RegisterWorker(worker_id=W1, address="http://w1:1", now_ms=1)


class AnsweringLog:
    """Answers every proposal with `answer`, as the machine's encoded result."""

    def __init__(self, answer: Result, clock: FakeClock | None = None) -> None:
        self.answer = answer
        # A commit takes PROPOSE_MS on this clock (the node times it for its metric).
        self.clock = clock
        self.request_ids: list[str] = []
        self.is_ready_leader = True

    async def propose(self, entry: bytes, _timeout_s: float) -> bytes:
        request_id, _ = decode_command(entry)
        self.request_ids.append(request_id)
        if self.clock is not None:
            self.clock.advance(PROPOSE_MS)
        return encode_result(self.answer)


def _node(answer: Result) -> SimpleNamespace:
    clock = FakeClock()
    return SimpleNamespace(
        config=ClusterConfig(),
        log=AnsweringLog(answer, clock),
        metrics=Metrics(),
        clock=clock,
    )


async def test_submit_returns_the_commands_own_result_type() -> None:
    registered = RegisterResult(worker_id=W1, incarnation=3, rehosted=(1, 4))
    node = _node(Ok(value=registered))
    value = await CoordinatorNode.submit(node, REGISTER, "rid-1")  # type: ignore[arg-type]
    assert value == registered and value.incarnation == 3
    assert node.log.request_ids == ["rid-1"]


async def test_a_proposals_latency_is_read_on_the_nodes_clock() -> None:
    node = _node(Ok(value=RegisterResult(worker_id=W1, incarnation=1, rehosted=())))
    await CoordinatorNode.submit(node, REGISTER, "rid-1")  # type: ignore[arg-type]
    [latency] = [
        m for m in node.metrics.registry.collect() if m.name == "ripple_proposal_latency_seconds"
    ]
    total = [s.value for s in latency.samples if s.name.endswith("_sum")]
    assert total == [PROPOSE_MS / 1000]


async def test_a_result_of_another_command_is_a_conflict() -> None:
    """A request id recorded for another command answers that command, not this one."""
    node = _node(Ok(value=BarrierResult(nonce="n")))
    with pytest.raises(RequestError) as exc:
        await CoordinatorNode.submit(node, REGISTER, "rid-1")  # type: ignore[arg-type]
    assert (status_of(exc.value), exc.value.code) == (409, "conflict")
    barrier = await CoordinatorNode.submit(node, Barrier(nonce="n"))  # type: ignore[arg-type]
    assert barrier == BarrierResult(nonce="n")


async def test_a_rejection_is_the_requests_error() -> None:
    node = _node(rejected("not_found", "unknown worker w1", "worker_id"))
    with pytest.raises(RequestError) as exc:
        await CoordinatorNode.submit(node, REGISTER)  # type: ignore[arg-type]
    assert (status_of(exc.value), exc.value.code, exc.value.field) == (
        404,
        "not_found",
        "worker_id",
    )


def _state_with(*reports: tuple[str, int]) -> ClusterState:
    state = ClusterState()
    for i, (node_id, high) in enumerate(reports):
        cmd = ReportVersions(
            node_id=node_id, min_version=1, max_version=high, package_version="0.2.0", now_ms=1
        )
        assert isinstance(apply(state, f"v{i}", cmd), Ok)
    return state


async def test_a_command_above_the_finalized_version_is_refused_before_it_is_proposed() -> None:
    backup = RecordBackup(
        cluster_id="c1",
        applied_index=3,
        term=1,
        sha256="ab" * 32,
        size_bytes=1,
        created_at_ms=1,
        now_ms=1,
    )
    state = _state_with(("n1", 2), ("n2", 1))
    node = _node(Ok(value=BackupResult(applied_index=3, latest=True)))
    node.read = lambda: contextlib.nullcontext(state)
    node.voters = lambda: ("n1", "n2")
    with pytest.raises(RequestError) as behind:
        await CoordinatorNode.submit(node, backup)  # type: ignore[arg-type]
    assert (status_of(behind.value), behind.value.code) == (409, "version_unsupported")
    assert "n2 speaks 1..1" in behind.value.message
    apply(
        state,
        "v-n2",
        ReportVersions(
            node_id="n2", min_version=1, max_version=2, package_version="0.2.0", now_ms=2
        ),
    )
    with pytest.raises(UnavailableError) as soon:
        await CoordinatorNode.submit(node, backup)  # type: ignore[arg-type]
    assert soon.value.code == "version_not_finalized"
    assert node.log.request_ids == []  # neither was proposed
    apply(state, "f", FinalizeVersion(version=2, voters=("n1", "n2"), now_ms=3))
    assert await CoordinatorNode.submit(node, backup, "rid-b") == BackupResult(  # type: ignore[arg-type]
        applied_index=3, latest=True
    )
    assert node.log.request_ids == ["rid-b"]
