"""What a partition route makes of `?pipeline=` and `{p}` (`request.query_pipeline`,
`path_partition`, `Scope`): `default` when absent, a 404 naming `pipeline` for a name the
state does not hold, a pipeline's own numbers 0 .. count - 1 and no other, nothing to find
while it is CREATING, and refusals worded in its own numbers."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from coordinator.core.commands import ActivatePipeline
from coordinator.core.model import DEFAULT_PIPELINE, SLOT_BASE, PipelineName
from coordinator.core.state import ClusterState
from coordinator.service.http.request import Scope, path_partition, query_pipeline
from shared.errors import RequestError
from tests.unit.test_core_pipelines import ORDERS, cluster, create, step

CLICKS = PipelineName("clicks")


@pytest.fixture
def s() -> ClusterState:
    state = cluster(total=4)
    step(state, create(partitions=3))
    step(state, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(state, create(name=CLICKS, partitions=2))  # left CREATING
    return state


def found(s: ClusterState, query: str, p: str | None = None) -> tuple[Scope, int | None]:
    request = make_mocked_request(
        "GET", "/v1/partitions" + query, match_info={} if p is None else {"p": p}
    )
    scope = query_pipeline(request, s)
    if p is None:
        return scope, None
    return scope, path_partition(request, s, scope).partition


def refused(s: ClusterState, query: str, p: str | None = None) -> RequestError:
    with pytest.raises(RequestError) as caught:
        found(s, query, p)
    return caught.value


def test_absent_is_default_and_its_numbers_are_the_tables(s: ClusterState) -> None:
    scope, number = found(s, "", "3")
    assert scope.pipeline == DEFAULT_PIPELINE and number == 3
    assert found(s, "?pipeline=default", "0")[1] == 0
    assert refused(s, "", "4").field == "partition"
    # A recorded pipeline's partition is not found by its table number under `default`.
    past = refused(s, "", str(SLOT_BASE))
    assert (past.code, past.field) == ("not_found", "partition")


def test_a_pipelines_own_numbers_and_no_other(s: ClusterState) -> None:
    for p in range(3):
        scope, number = found(s, "?pipeline=orders", str(p))
        assert number == SLOT_BASE + p and scope.local(SLOT_BASE + p) == p
        assert s.partitions[SLOT_BASE + p].pipeline == ORDERS
    gone = refused(s, "?pipeline=orders", "3")
    assert (gone.code, gone.field, gone.message) == (
        "not_found",
        "partition",
        "partition 3 does not exist",
    )
    assert refused(s, "?pipeline=orders", "x1").code == "invalid"


def test_unknown_and_creating_pipelines(s: ClusterState) -> None:
    unknown = refused(s, "?pipeline=nope")
    assert (unknown.code, unknown.field, unknown.message) == (
        "not_found",
        "pipeline",
        "no pipeline nope",
    )
    assert refused(s, "?pipeline=a%20b").code == "invalid"
    # CREATING: the name is known, its partitions are not in the table yet.
    scope, _ = found(s, "?pipeline=clicks")
    assert list(scope.numbers) == [] and list(s.partitions.of(CLICKS)) == []
    early = refused(s, "?pipeline=clicks", "0")
    assert early.code == "not_found"
    assert early.message == "partition 0 does not exist (pipeline clicks is not set up yet)"


def test_refusals_say_the_pipelines_own_numbers(s: ClusterState) -> None:
    scope, _ = found(s, "?pipeline=orders")
    with pytest.raises(RequestError) as caught, scope.speaking():
        raise RequestError(
            f"moves[0]: partition {SLOT_BASE + 2} has no owner; partition 1 is default's",
            code="conflict",
            field="partition",
        )
    said = caught.value
    assert said.message == "moves[0]: partition 2 has no owner; partition 1 is default's"
    assert (said.code, said.field) == ("conflict", "partition")
    # A refusal naming none of its partitions goes out as it was.
    original = RequestError("maintenance mode is on", code="conflict")
    with pytest.raises(RequestError) as kept, scope.speaking():
        raise original
    assert kept.value is original
