"""The HTTP contract checked by a tool nobody here wrote: schemathesis reads the coordinator's
own OpenAPI document (GET /v1/openapi.json) from a live three-node cluster and throws
generated requests at every operation -- valid ones and ones that break the schema -- then
checks each answer: never a 5xx, the status documented, the body matching the documented
schema, bad input refused with a 4xx.

Bounded: `EXAMPLES_MAX` examples per operation, `STEPS_MAX` steps per stateful run. The
stateful run follows the document's links (a registered worker's id into its assignment,
heartbeat and drain; a planned migration's id into its abort).

Calls go to the leader (a follower would answer writes with a documented 307). Admin
operations get the admin token and worker operations a registered worker's token, so the
generated input reaches the handlers' parsing instead of stopping at the auth check; the
unauthenticated answers are covered by the negative cases and the security tests. The
membership changes (`/v1/admin/nodes...`) go without the token: generated node ids such as
`n3` name the cluster's own nodes, and a removal (of the leader, even) would change what
every later call finds; their parsing and refusals are test_nodes.py's.

The cluster sets `worker_networks = 127.0.0.0/8`: generated registrations name random hosts,
and the leader calls registered workers, so only loopback addresses may be accepted (no call
leaves the machine). One check is left out where the schema cannot say the whole rule:
"a schema-valid request is accepted" (positive_data_acceptance) for registration (the
address must be in worker_networks), for reassign (moves name partitions and workers that
must exist, in a state that allows the move), for the membership changes (sent without
the token, below) and for the pipelines' writes (a spec must parse and check, and a pause,
resume, drop, rescale or update names a pipeline that exists, in a state that allows it).
Every other check runs on every operation. The pipeline routes get the admin token, so
generated creates and updates reach the spec check.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.parameters import ParameterLocation

from coordinator.service.http.app import openapi_document
from testkit.cluster import ADMIN, Cluster
from testkit.http import call

EXAMPLES_MAX = 30
STEPS_MAX = 12
CALL_TIMEOUT_S = 10.0
HYPOTHESIS = settings(
    max_examples=EXAMPLES_MAX,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same examples on every run: a failure replays
    print_blob=True,
)


class Live:
    """The cluster under test and the tokens generated calls carry."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.leader = cluster.ready()
        self.url = cluster.url(self.leader)
        reg = cluster.post(
            self.leader,
            "/v1/workers",
            {"worker_id": "contract-w1", "address": "http://127.0.0.1:9"},
        )
        assert reg.status == 200, reg.body
        self.worker_token = str(reg.body["token"])

    def headers(self, case: Case) -> dict[str, str]:
        if _headers_mutated(case):
            return {}  # a negative case that dropped or broke the token must go out that way
        path = case.operation.path
        if path.startswith("/v1/admin/nodes"):
            return {}  # generated ids name real nodes: a removal would change every later call
        if path.startswith(("/v1/admin/", "/v1/pipelines")) or path.endswith("/drain"):
            return {"Authorization": f"Bearer {ADMIN}"}
        if path.endswith("/heartbeat") or path == "/v1/checkpoints":
            return {"Authorization": f"Bearer {self.worker_token}"}
        return {}

    def kwargs(self, case: Case) -> dict[str, Any]:
        excluded = [positive_data_acceptance] if case.operation.label in STATE_RULES else []
        return {
            "base_url": self.url,
            "headers": self.headers(case),
            "timeout": CALL_TIMEOUT_S,
            "excluded_checks": excluded,
        }


def _headers_mutated(case: Case) -> bool:
    meta = case.meta
    info = None if meta is None else meta.components.get(ParameterLocation.HEADER)
    return info is not None and info.mode is GenerationMode.NEGATIVE


# Operations whose acceptance depends on more than the request's own shape (see the top).
STATE_RULES = frozenset(
    {
        "POST /v1/workers",
        "POST /v1/admin/reassign",
        "POST /v1/admin/nodes",
        "DELETE /v1/admin/nodes/{node_id}",
        "POST /v1/admin/nodes/{node_id}/replace",
        "POST /v1/pipelines",
        "POST /v1/pipelines/{name}/pause",
        "POST /v1/pipelines/{name}/resume",
        "POST /v1/pipelines/{name}/rescale",
        "POST /v1/pipelines/{name}/update",
        "DELETE /v1/pipelines/{name}",
    }
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root: Path = tmp_path_factory.mktemp("contract")
    cluster = Cluster(root, total_partitions=8, worker_networks="127.0.0.0/8")
    cluster.start_all()
    try:
        yield Live(cluster)
    finally:
        cluster.stop_all()


# The document the code serves, loaded at collection time (schemathesis's lazy fixture
# loader reads a pytest internal that pytest 9 renamed); test_served_document_is_this_one
# shows that GET /v1/openapi.json on every node answers exactly this.
schema = schemathesis.openapi.from_dict(openapi_document())


def test_served_document_is_this_one(live: Live) -> None:
    for spec in live.cluster.specs:
        served = live.cluster.get(spec.id, "/v1/openapi.json")
        assert served.status == 200
        assert served.body == openapi_document()


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_answers_as_documented(case: Case, live: Live) -> None:
    case.call_and_validate(**live.kwargs(case))


def test_linked_calls_answer_as_documented(live: Live) -> None:
    """Stateful: sequences that follow the links (register -> assignment / heartbeat /
    drain, partitions -> one partition / its history, reassign or migrations -> abort)."""
    links = schema.as_state_machine()

    class Machine(links):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            kw = live.kwargs(case)
            kw.pop("excluded_checks")
            return kw

        def validate_response(self, response: Any, case: Case, **kwargs: Any) -> None:
            excluded = live.kwargs(case)["excluded_checks"]
            case.validate_response(response, excluded_checks=excluded)

    Machine.run(
        settings=settings(
            max_examples=EXAMPLES_MAX,
            stateful_step_count=STEPS_MAX,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
    )


def test_allow_names_every_method_of_a_path(live: Live) -> None:
    """What schemathesis found (ST205): GET and POST /v1/workers were two aiohttp resources,
    and OPTIONS answered `Allow: GET, OPTIONS`."""
    for path, methods in (("/v1/workers", "GET, OPTIONS, POST"), ("/v1/health", "GET, OPTIONS")):
        reply = live.cluster.get(live.leader, path)  # the path exists
        assert reply.status == 200
        options = call("OPTIONS", live.url + path)
        assert options.status == 204 and options.headers["Allow"] == methods
        put = call("PUT", live.url + path)
        assert put.status == 405
        assert {m.strip() for m in put.headers["Allow"].split(",")} == set(methods.split(", "))
