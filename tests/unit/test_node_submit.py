"""`CoordinatorNode.submit` turns a committed result into the proposed command's own result
type, or into the request's error. The log is a fake that answers each proposal with the
bytes a machine would; Raft itself is tests/integration's.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coordinator.config import ClusterConfig
from coordinator.core.codec import decode_command, encode_result
from coordinator.core.commands import (
    Barrier,
    BarrierResult,
    Ok,
    RegisterResult,
    RegisterWorker,
    Result,
    rejected,
)
from coordinator.core.model import WorkerId
from coordinator.service.metrics import Metrics
from coordinator.service.node import CoordinatorNode
from shared.errors import RequestError

W1 = WorkerId("w1")
REGISTER = RegisterWorker(worker_id=W1, address="http://w1:1", now_ms=1)


class AnsweringLog:
    """Answers every proposal with `answer`, as the machine's encoded result."""

    def __init__(self, answer: Result) -> None:
        self.answer = answer
        self.request_ids: list[str] = []
        self.is_ready_leader = True

    async def propose(self, entry: bytes, _timeout_s: float) -> bytes:
        request_id, _ = decode_command(entry)
        self.request_ids.append(request_id)
        return encode_result(self.answer)


def _node(answer: Result) -> SimpleNamespace:
    return SimpleNamespace(config=ClusterConfig(), log=AnsweringLog(answer), metrics=Metrics())


async def test_submit_returns_the_commands_own_result_type() -> None:
    registered = RegisterResult(worker_id=W1, incarnation=3, rehosted=(1, 4))
    node = _node(Ok(value=registered))
    value = await CoordinatorNode.submit(node, REGISTER, "rid-1")  # type: ignore[arg-type]
    assert value == registered and value.incarnation == 3
    assert node.log.request_ids == ["rid-1"]


async def test_a_result_of_another_command_is_a_conflict() -> None:
    """A request id recorded for another command answers that command, not this one."""
    node = _node(Ok(value=BarrierResult(nonce="n")))
    with pytest.raises(RequestError) as exc:
        await CoordinatorNode.submit(node, REGISTER, "rid-1")  # type: ignore[arg-type]
    assert (exc.value.status, exc.value.code) == (409, "conflict")
    barrier = await CoordinatorNode.submit(node, Barrier(nonce="n"))  # type: ignore[arg-type]
    assert barrier == BarrierResult(nonce="n")


async def test_a_rejection_is_the_requests_error() -> None:
    node = _node(rejected("not_found", "unknown worker w1", "worker_id"))
    with pytest.raises(RequestError) as exc:
        await CoordinatorNode.submit(node, REGISTER)  # type: ignore[arg-type]
    assert (exc.value.status, exc.value.code, exc.value.field) == (404, "not_found", "worker_id")
