"""The heartbeat reply built without an encoder (coordinator/service/replies.py): the same JSON
as the model describes, a worker's assignment text renewed with the generation, bounded."""

from __future__ import annotations

import json

import pytest

from coordinator.core.commands import (
    Assignment,
    AssignPartitions,
    Bootstrap,
    DeclareDead,
    RegisterWorker,
)
from coordinator.core.model import WorkerId
from coordinator.core.state import ClusterState, apply
from coordinator.service import models as m
from coordinator.service import replies
from coordinator.service.auth import issue_token
from coordinator.service.replies import AssignmentTexts, heartbeat_body

W1, W2 = WorkerId("w-1.a_b"), WorkerId("w2")


def _ok(s: ClusterState, cmd: object, rid: str) -> None:
    result = apply(s, rid, cmd)  # type: ignore[arg-type]
    assert type(result).__name__ == "Ok", result


def _state() -> ClusterState:
    s = ClusterState()
    _ok(s, Bootstrap(total_partitions=4, now_ms=1), "b")
    for i, w in enumerate((W1, W2)):
        _ok(s, RegisterWorker(worker_id=w, address="http://127.0.0.1:9", now_ms=2), f"r{i}")
    assign = tuple(Assignment(partition=p, owner=(W1, W2)[p % 2]) for p in range(4))
    _ok(s, AssignPartitions(assignments=assign, now_ms=3), "a")
    return s


def test_the_body_is_the_models_json() -> None:
    s = _state()
    texts = AssignmentTexts()
    token = issue_token("s" * 32, W1, 3, 1_700_000_000_123)
    for due in (True, False):
        body = heartbeat_body(s.generation, texts.text(s, W1), due, token, 1_700_000_000_123)
        expected = {
            "generation": s.generation,
            "assignment": [{"partition": p, "epoch": e} for p, e in s.assignment_of(W1)],
            "checkpoint_due": due,
            "token": token,
            "token_expires_at_ms": 1_700_000_000_123,
        }
        assert json.loads(body) == expected
        assert m.HeartbeatResponse.model_validate_json(body).model_dump() == expected
    assert [e["partition"] for e in json.loads(texts.text(s, W1))] == [0, 2]
    assert json.loads(texts.text(s, WorkerId("nobody"))) == []


@pytest.mark.parametrize("token", ['w1.1.2.ab"', "w1.1.2.ab\\", "w1.1.2.\u00e9"])
def test_a_token_that_would_need_escaping_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="worker token"):
        heartbeat_body(1, "[]", False, token, 2)


def test_a_new_generation_or_state_renews_the_text() -> None:
    s = _state()
    texts = AssignmentTexts()
    before = texts.text(s, W1)
    assert texts.text(s, W1) is before  # kept within the generation
    # W2 dies and its partitions go to W1: a new generation, a new text for W1.
    moved = tuple(Assignment(partition=p, owner=W1) for p in (1, 3))
    _ok(s, DeclareDead(worker_ids=(W2,), assignments=moved, now_ms=4), "d")
    assert [e["partition"] for e in json.loads(texts.text(s, W1))] == [0, 1, 2, 3]
    # Another state object at the same generation (a snapshot installed) is not trusted.
    other = _state()
    other.generation = s.generation
    assert [e["partition"] for e in json.loads(texts.text(other, W1))] == [0, 2]


def test_kept_texts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replies, "ASSIGNMENT_TEXTS_CACHED_MAX", 1)
    s = _state()
    texts = AssignmentTexts()
    assert texts.text(s, W1) and texts.text(s, W2)
    assert len(texts) == 1
    # Past the bound the text is still right, only made per request.
    assert [e["partition"] for e in json.loads(texts.text(s, W2))] == [1, 3]
