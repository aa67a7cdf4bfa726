"""The heartbeat path's shortcuts: the reply built without an encoder
(coordinator/service/replies.py) is the model's JSON, a worker's assignment text is renewed
with the generation and bounded; a body read from the buffer in one call keeps the limit."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request

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
from coordinator.service.http.context import NODE_KEY
from coordinator.service.http.request import read_body
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


def _request(chunks: list[bytes], eof: bool, limit: int) -> web.Request:
    app = web.Application(client_max_size=limit)
    app[NODE_KEY] = SimpleNamespace(config=SimpleNamespace(body_bytes_max=limit))  # type: ignore[assignment]
    protocol = mock.Mock(_reading_paused=False, connected=True)
    payload = StreamReader(protocol, 2**16, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    for chunk in chunks:
        payload.feed_data(chunk)
    if eof:
        payload.feed_eof()
    return make_mocked_request("POST", "/v1/x", app=app, payload=payload, client_max_size=limit)


async def test_a_whole_body_is_taken_at_once_and_held_to_the_limit() -> None:
    body = b'{"incarnation":1,"load":0.5,"partitions":{}}'
    request = _request([body[:10], body[10:]], eof=True, limit=len(body))
    assert await read_body(request) == body
    too_big = _request([body + b" "], eof=True, limit=len(body))
    with pytest.raises(web.HTTPRequestEntityTooLarge):
        await read_body(too_big)
    empty = _request([], eof=True, limit=len(body))
    assert await read_body(empty) == b""


async def test_a_body_still_arriving_goes_through_the_read_loop() -> None:
    body = b'{"incarnation":1}'
    request = _request([body[:5]], eof=False, limit=100)
    reading = asyncio.ensure_future(read_body(request))
    await asyncio.sleep(0)
    assert not reading.done()  # waits for the rest, as aiohttp's read does
    request.content.feed_data(body[5:])
    request.content.feed_eof()
    assert await asyncio.wait_for(reading, 5) == body
    # The loop keeps aiohttp's own limit.
    big = _request([b"x" * 80], eof=False, limit=100)
    reading = asyncio.ensure_future(read_body(big))
    await asyncio.sleep(0)
    big.content.feed_data(b"x" * 80)
    with pytest.raises(web.HTTPRequestEntityTooLarge):
        await asyncio.wait_for(reading, 5)
