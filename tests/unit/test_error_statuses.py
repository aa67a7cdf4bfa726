"""Every error code answers the HTTP status and JSON body it always has, through the one table.

The core and `shared.errors` speak codes and kinds; `shared.http_statuses` alone turns a kind
into a status. These tests pin the whole code -> status table (the values the coordinator,
the worker and the client answered with when each error still carried its status), check
that the table is total and names nothing extra, and send one error of every code through
the coordinator's and the worker's HTTP edges and back through the client's.
"""

from __future__ import annotations

import json
from typing import get_args

import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from coordinator.client import _error
from coordinator.core.commands import REJECT_CODES, RejectCode, Rejected, rejected
from coordinator.core.result_codec import WIRE_STATUS_OF_CODE, decode_result, encode_result
from coordinator.service.http.answers import error_response, raise_rejected
from coordinator.service.http.leader import LeaderRedirect
from coordinator.service.http.request import PlainRequest
from pipeline.http_api import _error_middleware
from shared.errors import (
    KIND_OF,
    ClientError,
    ErrorCode,
    ErrorKind,
    RequestError,
    RippleError,
    UnavailableError,
)
from shared.http_statuses import (
    ERROR_CODE_OF_STATUS,
    STATUS_OF_KIND,
    kind_of_status,
    status_of,
)

# The status each code answered with before statuses left the errors: the core's table
# (400 invalid, 404 not_found, 409 its conflicts, 503 not_bootstrapped / version_not_finalized
# / halted, 500 internal), the services' and the worker's `status=` at each raise, and the
# classes' defaults (RequestError 400, UnavailableError 503, RippleError and ClientError 500,
# LeaderRedirect 307). The one code that answered two: not_bootstrapped was 409 from the
# rescale dry run only, 503 from every command; the dry run now answers as StartRescale does.
HTTP_STATUS_BEFORE: dict[str, int] = {
    "invalid": 400,
    "invalid_config": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "unknown_worker": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "stale_epoch": 409,
    "fenced": 409,
    "version_unsupported": 409,
    "rescale_in_flight": 409,
    "same_partition_count": 409,
    "not_online": 409,
    "rescaled": 409,
    "worker_active": 409,
    "stale_incarnation": 409,
    "store_mismatch": 409,
    "stale_generation": 409,
    "build_in_flight": 409,
    "hosted": 409,
    "routing_conflict": 409,
    "too_large": 413,
    "unavailable": 503,
    "not_bootstrapped": 503,
    "version_not_finalized": 503,
    "halted": 503,
    "not_ready": 503,
    "overloaded": 503,
    "unreachable": 503,
    "store_failed": 503,
    "no_lease": 503,
    "checkpoint_unavailable": 503,
    "warm_refused": 503,
    "warm_failed": 503,
    "stopping": 503,
    "routing_unknown": 503,
    "not_leader": 307,
    "internal": 500,
    "client": 500,
    "invalid_reply": 500,
    "bad_backup": 500,
}
# Codes only the command line raises: they never reach HTTP; their kind picks the exit code
# (2 for a usage error or bad input, 1 otherwise), as their old exit-code hints did.
CLI_EXIT_BEFORE: dict[str, int] = {"usage": 2, "timeout": 1}

CODES: tuple[str, ...] = get_args(ErrorCode)


def test_the_vocabulary_is_the_pinned_codes() -> None:
    assert set(CODES) == set(HTTP_STATUS_BEFORE) | set(CLI_EXIT_BEFORE)
    assert len(CODES) == len(set(CODES))


@pytest.mark.parametrize("code", sorted(HTTP_STATUS_BEFORE))
def test_each_code_answers_the_status_it_always_did(code: str) -> None:
    assert STATUS_OF_KIND[KIND_OF[code]] == HTTP_STATUS_BEFORE[code]


@pytest.mark.parametrize("code", sorted(CLI_EXIT_BEFORE))
def test_command_line_codes_keep_their_exit_codes(code: str) -> None:
    assert (2 if KIND_OF[code] is ErrorKind.INVALID else 1) == CLI_EXIT_BEFORE[code]


def test_the_status_table_is_total_and_names_no_kind_without_a_code() -> None:
    assert set(STATUS_OF_KIND) == set(ErrorKind)  # every code's kind has a status
    assert {KIND_OF[c] for c in CODES} == set(ErrorKind)  # every entry is some code's
    assert len(set(STATUS_OF_KIND.values())) == len(STATUS_OF_KIND)  # read back unambiguously
    for kind, status in STATUS_OF_KIND.items():
        assert kind_of_status(status) is kind
    assert kind_of_status(502) is ErrorKind.INTERNAL  # a proxy's: nothing to act on


def test_the_frameworks_own_errors_answer_codes_of_their_status() -> None:
    for status, code in ERROR_CODE_OF_STATUS.items():
        assert STATUS_OF_KIND[KIND_OF[code]] == status


def test_the_core_refuses_with_codes_of_the_vocabulary_and_keeps_its_wire_slot() -> None:
    assert set(get_args(RejectCode)) == REJECT_CODES <= set(CODES)
    # An older node in a mixed cluster answers HTTP with the slot: as a new node does.
    assert {c: HTTP_STATUS_BEFORE[c] for c in REJECT_CODES} == WIRE_STATUS_OF_CODE


def _error_of(code: str) -> RippleError:
    """An error of `code` as the product raises it: a transient one as UnavailableError."""
    if code == "not_leader":
        return LeaderRedirect("http://127.0.0.1:1/v1/x", "n2")
    if KIND_OF[code] is ErrorKind.UNAVAILABLE:
        return UnavailableError("m", code=code, field="f", retry_after_s=2)  # type: ignore[arg-type]
    return RequestError("m", code=code, field="f")  # type: ignore[arg-type]


def _request() -> PlainRequest:
    headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
    return PlainRequest(web.Application(), "POST", "/v1/x", {}, headers, b"")


def _json(response: web.StreamResponse) -> object:
    assert isinstance(response, web.Response) and isinstance(response.body, bytes)
    return json.loads(response.body)


@pytest.mark.parametrize("code", sorted(HTTP_STATUS_BEFORE))
def test_the_coordinator_answers_each_code_with_its_status_and_shape(code: str) -> None:
    response = error_response(_request(), _error_of(code))
    assert response.status == HTTP_STATUS_BEFORE[code]
    if code == "not_leader":
        assert _json(response) == {
            "error": "not_leader",
            "message": "this node is not the leader; the leader is n2",
            "leader_id": "n2",
        }
        assert response.headers["Location"] == "http://127.0.0.1:1/v1/x"
        return
    assert _json(response) == {"error": code, "message": "m", "field": "f"}
    transient = KIND_OF[code] is ErrorKind.UNAVAILABLE
    assert response.headers.get("Retry-After") == ("2" if transient else None)


@pytest.mark.parametrize("code", sorted(REJECT_CODES))
def test_a_refusal_of_the_core_answers_its_status(code: RejectCode) -> None:
    wired = decode_result(encode_result(rejected(code, "m", "f")))
    assert isinstance(wired, Rejected)
    with pytest.raises(RequestError) as raised:
        raise_rejected(wired)
    response = error_response(_request(), raised.value)
    assert response.status == HTTP_STATUS_BEFORE[code]
    assert _json(response) == {"error": code, "message": "m", "field": "f"}


@pytest.mark.parametrize("code", sorted(HTTP_STATUS_BEFORE))
async def test_the_worker_answers_each_code_with_its_status_and_shape(code: str) -> None:
    error = _error_of(code)

    async def handler(request: web.Request) -> web.StreamResponse:
        raise error

    response = await _error_middleware(_request(), handler)  # type: ignore[arg-type]
    assert response.status == HTTP_STATUS_BEFORE[code]
    if code == "not_leader":  # no worker raises it; the shape holds all the same
        assert _json(response) == {"error": code, "message": error.message}
    else:
        assert _json(response) == {"error": code, "message": "m", "field": "f"}


@pytest.mark.parametrize("code", sorted(HTTP_STATUS_BEFORE))
def test_the_client_reads_each_answer_back_to_its_kind(code: str) -> None:
    got = _error(HTTP_STATUS_BEFORE[code], {"error": code, "message": "m", "field": "f"})
    assert (got.code, got.message, got.field, got.kind) == (code, "m", "f", KIND_OF[code])
    assert status_of(got) == HTTP_STATUS_BEFORE[code]  # and passes it on unchanged


def test_a_client_error_of_a_code_this_release_does_not_know_keeps_it() -> None:
    got = _error(409, {"error": "from_a_newer_release", "message": "m"})
    assert (got.code, got.kind, status_of(got)) == ("from_a_newer_release", ErrorKind.CONFLICT, 409)
    assert ClientError("m").kind is ErrorKind.INTERNAL
