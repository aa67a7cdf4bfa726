"""Records produced through a worker (`pipeline/ingest.py`, `pipeline/token_check.py`): the
verify cache's bounds, expiry and revocation on a fake clock; the records route of a real
worker app against a fake coordinator (one aiohttp test server on 127.0.0.1) and a
local-directory store, refusing without a 500; and `PipelineClient` producing with a token
through the workers the coordinator lists, past one that cannot be reached."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from pipeline.ingest import RECORDS_BODY_BYTES_MAX, RECORDS_PER_CALL_MAX
from pipeline.spec.sdk import PipelineClient
from pipeline.store import LocalStore, StoreError
from pipeline.token_check import TokenCheck, Verdict
from pipeline.worker import Worker
from shared.clock import FakeClock
from shared.errors import ClientError, ErrorKind, RequestError
from tests.unit.test_pipeline_sdk import FIRST_SLOT, Cluster, appended, rows
from tests.unit.test_pipeline_worker import offline_settings

GOOD = "rpt_aaaaaaaaaaaa_" + "1" * 64  # a produce token of orders, as the fake says
OTHER = "rpt_bbbbbbbbbbbb_" + "2" * 64  # another pipeline's
WORKER_TOKEN = "the-worker-token"


# -- the verify cache ----------------------------------------------------------------------


class Coordinator:
    """The verify route's answers: tokens in `valid` may produce to orders; counts asks."""

    def __init__(self) -> None:
        self.valid = {GOOD}
        self.asked: list[str] = []

    async def ask(self, pipeline: str, token: str) -> Verdict:
        self.asked.append(token)
        if pipeline != "orders" or token not in self.valid:
            raise RequestError("this token may not produce pipeline orders", code="forbidden")
        return Verdict(pipeline=pipeline, role="produce", token_id=token[4:16])


async def test_a_verdict_is_kept_for_its_time_then_asked_again_and_a_revoked_one_stops() -> None:
    clock, coordinator = FakeClock(), Coordinator()
    check = TokenCheck(coordinator.ask, clock, ttl_ms=5_000)
    first = await check.verify("orders", GOOD)
    assert first.role == "produce" and coordinator.asked == [GOOD]
    clock.advance(4_999)
    assert await check.verify("orders", GOOD) == first
    assert coordinator.asked == [GOOD]  # kept: not asked again
    coordinator.valid.clear()  # revoked on the coordinator
    assert await check.verify("orders", GOOD) == first  # within the time it still admits
    clock.advance(1)
    with pytest.raises(RequestError) as refused:
        await check.verify("orders", GOOD)
    assert refused.value.code == "forbidden" and len(check) == 0
    assert coordinator.asked == [GOOD, GOOD]


async def test_a_refusal_is_not_kept_and_the_cache_is_bounded_oldest_first() -> None:
    clock, coordinator = FakeClock(), Coordinator()
    check = TokenCheck(coordinator.ask, clock, ttl_ms=60_000, entries_max=2)
    for _ in range(2):
        with pytest.raises(RequestError):
            await check.verify("orders", OTHER)
    assert coordinator.asked == [OTHER, OTHER] and len(check) == 0
    coordinator.valid.update({"t1", "t2", "t3"})
    for token in ("t1", "t2", "t3"):
        await check.verify("orders", token)
    assert len(check) == 2
    coordinator.asked.clear()
    await check.verify("orders", "t3")
    await check.verify("orders", "t2")
    assert coordinator.asked == []  # the two newest are kept
    await check.verify("orders", "t1")
    assert coordinator.asked == ["t1"]  # the oldest was dropped
    # A verdict is per pipeline: the same token for another is asked (and refused).
    with pytest.raises(RequestError):
        await check.verify("other", "t1")


# -- the records route on a real worker's app ----------------------------------------------


class FakeCoordinator(Cluster):
    """`Cluster`'s describe and workers, plus the verify route a worker asks."""

    def __init__(self) -> None:
        super().__init__()
        self.verify_status = 200
        self.presented: list[str] = []
        self.workers: list[dict[str, str]] = []

    async def read(self, request: web.Request) -> web.Response:
        if request.path == "/v1/workers":
            return web.json_response({"workers": self.workers})
        return await self.answer(request)

    async def verify(self, request: web.Request) -> web.Response:
        self.presented.append(request.headers.get("Authorization", ""))
        if self.verify_status != 200:
            body = {"error": "unauthorized", "message": "worker token expired"}
            return web.json_response(body, status=self.verify_status)
        token = (await request.json())["token"]
        name = request.match_info["name"]
        if name != "orders" or token != GOOD:
            body = {"error": "forbidden", "message": f"this token may not produce {name}"}
            return web.json_response(body, status=403)
        return web.json_response({"pipeline": name, "role": "produce", "token_id": "aaaa"})


@dataclasses.dataclass
class Rig:
    coordinator: FakeCoordinator
    store: LocalStore
    worker: Worker
    client: TestClient[web.Request, web.Application]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    fake = FakeCoordinator()
    app = web.Application()
    app.router.add_post("/v1/pipelines/{name}/tokens/verify", fake.verify)
    app.router.add_get("/{tail:.*}", fake.read)
    async with TestServer(app, host="127.0.0.1") as server:
        fake.address = str(server.make_url("")).rstrip("/")
        settings = dataclasses.replace(
            offline_settings(tmp_path, "w1"), coordinators=(fake.address,)
        )
        store = LocalStore(str(tmp_path / "store"))
        worker = Worker(settings, store)
        worker.session.token = WORKER_TOKEN
        try:
            async with TestClient(TestServer(worker.app(), host="127.0.0.1")) as client:
                yield Rig(fake, store, worker, client)
        finally:
            await worker.client.close()


def as_json(row: dict[str, Any]) -> dict[str, Any]:
    def plain(v: Any) -> Any:
        if isinstance(v, decimal.Decimal):
            return str(v)
        if isinstance(v, datetime.date):
            return v.isoformat()
        return v

    return {k: plain(v) for k, v in row.items()}


def json_rows(seed: int, n: int) -> list[dict[str, Any]]:
    return [as_json(r) for r in rows(seed)[:n]]


async def post(rig: Rig, body: Any, token: str | None = GOOD, name: str = "orders") -> Any:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = await rig.client.post(f"/v1/pipelines/{name}/records", data=data, headers=headers)
    answer = await r.json()
    return r.status, answer


async def test_rows_are_appended_with_the_worker_asking_as_itself(rig: Rig) -> None:
    status, answer = await post(rig, {"rows": json_rows(5, 6)})
    assert status == 200, answer
    assert answer["pipeline"] == "orders" and answer["rows"] == 6
    assert set(answer["firsts"]) <= {"0", "1"} and appended(rig.store, FIRST_SLOT) == 6
    assert rig.coordinator.presented == [f"Bearer {WORKER_TOKEN}"]
    rig.coordinator.state = "paused"  # rows go to a paused pipeline, as the SDK's do
    status, answer = await post(rig, {"rows": json_rows(6, 2)})
    assert status == 200 and appended(rig.store, FIRST_SLOT) == 8
    assert len(rig.coordinator.presented) == 1  # the verdict was kept
    rig.coordinator.state = "dropping"
    status, answer = await post(rig, {"rows": json_rows(6, 2)})
    assert (status, answer["error"]) == (409, "conflict")


async def test_the_route_refuses_callers_and_bodies_and_never_answers_500(rig: Rig) -> None:
    good = json_rows(7, 3)
    cases: list[tuple[Any, str | None, str, int, str]] = [
        ({"rows": good}, None, "orders", 401, "unauthorized"),
        ({"rows": good}, OTHER, "orders", 403, "forbidden"),  # not a token of orders
        ({"rows": good}, GOOD, "other", 403, "forbidden"),  # orders' token, another pipeline
        ({"rows": good}, GOOD, "bad name!", 400, "invalid"),
        (b"{not json", GOOD, "orders", 400, "invalid"),
        ([good], GOOD, "orders", 400, "invalid"),
        ({"rows": good, "more": 1}, GOOD, "orders", 400, "invalid"),
        ({"rows": []}, GOOD, "orders", 400, "invalid"),
        ({"rows": [1]}, GOOD, "orders", 400, "invalid"),
        ({"rows": [{}] * (RECORDS_PER_CALL_MAX + 1)}, GOOD, "orders", 413, "too_large"),
        (b" " * (RECORDS_BODY_BYTES_MAX + 1), GOOD, "orders", 413, "too_large"),
    ]
    for body, token, name, status, code in cases:
        got, answer = await post(rig, body, token, name)
        assert (got, answer["error"]) == (status, code), (str(body)[:60], token, name, answer)
    assert appended(rig.store, FIRST_SLOT) == 0


async def test_a_bad_row_names_its_row_and_column_and_nothing_is_appended(rig: Rig) -> None:
    bad = json_rows(8, 4)
    bad[2] = {**bad[2], "amount": "not a number"}
    status, answer = await post(rig, {"rows": bad})
    assert (status, answer["field"]) == (400, "amount")
    assert "row 2" in answer["message"]
    status, answer = await post(rig, {"rows": [*json_rows(8, 2), {"nope": 1}]})
    assert (status, answer["field"]) == (400, "nope") and "row 2" in answer["message"]
    assert appended(rig.store, FIRST_SLOT) == 0


async def test_coordinator_or_store_trouble_is_a_503(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.coordinator.verify_status = 401  # the worker's own token refused
    status, answer = await post(rig, {"rows": json_rows(9, 2)})
    assert (status, answer["error"]) == (503, "unavailable")
    rig.coordinator.verify_status = 200

    def down(*_: object) -> bool:
        raise StoreError("503 (store down)")

    monkeypatch.setattr(LocalStore, "put_if_absent", down)
    status, answer = await post(rig, {"rows": json_rows(9, 2)})
    assert (status, answer["error"]) == (503, "unavailable")


# -- the SDK with a token --------------------------------------------------------------------


async def test_the_sdk_produces_with_a_token_through_a_worker_past_a_dead_one(rig: Rig) -> None:
    fake = rig.coordinator
    fake.workers = [
        {"worker_id": "dead", "address": "http://127.0.0.1:9", "state": "active"},
        {"worker_id": "w1", "address": str(rig.client.make_url("")).rstrip("/"), "state": "active"},
        {"worker_id": "gone", "address": "http://127.0.0.1:9", "state": "dead"},
    ]
    async with PipelineClient([fake.address], "orders", token=GOOD) as pipeline:
        # Whichever worker it starts from, the dead one costs one try of WORKER_ATTEMPTS_MAX.
        for _ in range(4):
            firsts = await pipeline.produce(json_rows(10, 3))
            assert set(firsts) <= {0, 1}
        with pytest.raises(ClientError) as bad:
            await pipeline.produce([{"customer": "c1", "amount": "x"}])
        assert bad.value.kind is ErrorKind.INVALID
    assert appended(rig.store, FIRST_SLOT) == 12
    async with PipelineClient([fake.address], "orders", token=OTHER) as pipeline:
        with pytest.raises(ClientError) as refused:
            await pipeline.produce(json_rows(10, 1))
        assert refused.value.kind is ErrorKind.FORBIDDEN
