"""The admission policy (coordinator/service/auth.py `Admission`), without HTTP.

Who a caller is comes from the headers alone (401 without a credential, 403 with one that
may not do this); whether they may act now is checked against a state. The routes' order of
the two steps, and their answers on the wire, are tests/integration/test_http_security.py's.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.core.commands import Bootstrap, DeclareDead, Ok, RegisterWorker
from coordinator.core.model import WorkerId
from coordinator.core.state import ClusterState, apply
from coordinator.service.auth import (
    ADMIN,
    WORKER_TOKEN_HEADER,
    Admission,
    Registrant,
    WorkerClaims,
    issue_token,
)
from shared.errors import RequestError
from shared.http_statuses import status_of

SECRET = "unit-secret-0123456789abcdef"
ADMIN_TOKEN = "admin-token-0123456789"
JOIN_TOKEN = "join-token-0123456789"
NOW_MS = 1_000_000
LIFETIME_S = 60.0
W1, W2 = WorkerId("w1"), WorkerId("w2")


def _admission(*, join_token: str = JOIN_TOKEN, open_registration: bool = False) -> Admission:
    return Admission(
        secret=SECRET,
        admin_token=ADMIN_TOKEN,
        join_token=join_token,
        open_registration=open_registration,
        worker_token_lifetime_s=LIFETIME_S,
    )


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _refused(call: Callable[[], object], status: int, code: str) -> None:
    with pytest.raises(RequestError) as exc:
        call()
    assert (status_of(exc.value), exc.value.code) == (status, code), exc.value


def _state() -> ClusterState:
    """w1 at incarnation 2 (ACTIVE), w2 DEAD."""
    s = ClusterState()
    for i, cmd in enumerate(
        [
            Bootstrap(total_partitions=2, now_ms=1),
            RegisterWorker(worker_id=W1, address="http://w1:1", now_ms=2),
            RegisterWorker(worker_id=W1, address="http://w1:1", now_ms=3),
            RegisterWorker(worker_id=W2, address="http://w2:1", now_ms=3),
            DeclareDead(worker_ids=(W2,), assignments=(), now_ms=4),
        ]
    ):
        assert isinstance(apply(s, f"r{i}", cmd), Ok), cmd
    return s


def _token(worker_id: str, incarnation: int) -> str:
    return issue_token(SECRET, worker_id, incarnation, NOW_MS + 10_000)


def test_registration_by_admin_join_or_open() -> None:
    closed = _admission()
    assert closed.admit_registration(_bearer(ADMIN_TOKEN)).scope == "admin"
    assert closed.admit_registration(_bearer(JOIN_TOKEN)).scope == "join"
    _refused(lambda: closed.admit_registration({}), 401, "unauthorized")
    _refused(lambda: closed.admit_registration(_bearer("not-the-join-token")), 403, "forbidden")
    # A join token, once configured, is needed even when registration is also open.
    both = _admission(open_registration=True)
    _refused(lambda: both.admit_registration({}), 401, "unauthorized")
    anyone = _admission(join_token="", open_registration=True)
    assert anyone.admit_registration({}).scope == "open"
    # No join token and registration not open: nobody but the admin registers.
    _refused(lambda: _admission(join_token="").admit_registration({}), 401, "unauthorized")
    shut = _admission(join_token="")
    _refused(lambda: shut.admit_registration(_bearer("x" * 20)), 403, "forbidden")


def test_a_live_id_is_taken_over_only_with_its_current_token_or_the_admins() -> None:
    admission, state = _admission(), _state()

    def registrant(worker_token: str | None) -> Registrant:
        headers = _bearer(JOIN_TOKEN)
        if worker_token is not None:
            headers[WORKER_TOKEN_HEADER] = worker_token
        return admission.admit_registration(headers)

    def take(worker_token: str | None, wid: WorkerId = W1) -> None:
        admission.admit_id(registrant(worker_token), state, wid, NOW_MS)

    take(_token("w1", 2))
    for wrong in (None, _token("w1", 1), _token("w2", 2), "w1.2.9.bad"):
        _refused(lambda: take(wrong), 409, "worker_active")  # noqa: B023 (called at once)
    take(None, W2)  # DEAD: free to take
    take(None, WorkerId("w-new"))  # unknown: free to take
    admin = admission.admit_registration(_bearer(ADMIN_TOKEN))
    admission.admit_id(admin, state, W1, NOW_MS)


def test_a_worker_is_admitted_by_its_token_then_by_its_current_incarnation() -> None:
    admission, state = _admission(), _state()
    claims = admission.admit_worker(_bearer(_token("w1", 2)), NOW_MS, W1)
    assert claims.scope == "worker:w1"
    assert admission.current_incarnation(state, claims) == 2
    _refused(lambda: admission.admit_worker({}, NOW_MS), 401, "unauthorized")
    _refused(lambda: admission.admit_worker(_bearer(_token("w1", 2)), NOW_MS, W2), 403, "forbidden")
    expired = issue_token(SECRET, "w1", 2, NOW_MS)
    _refused(lambda: admission.admit_worker(_bearer(expired), NOW_MS), 401, "unauthorized")
    old = admission.admit_worker(_bearer(_token("w1", 1)), NOW_MS)
    _refused(lambda: admission.current_incarnation(state, old), 409, "stale_incarnation")
    for gone in ("w2", "w-unknown"):
        claims = admission.admit_worker(_bearer(_token(gone, 1)), NOW_MS)
        _refused(
            lambda: admission.current_incarnation(state, claims),  # noqa: B023 (called at once)
            404,
            "unknown_worker",
        )


def test_drain_admits_the_admin_or_that_worker() -> None:
    admission = _admission()
    assert admission.admit_worker_or_admin(_bearer(ADMIN_TOKEN), NOW_MS, W1) is ADMIN
    assert ADMIN.scope == "admin"
    worker = admission.admit_worker_or_admin(_bearer(_token("w1", 2)), NOW_MS, W1)
    assert isinstance(worker, WorkerClaims) and worker.worker_id == "w1"
    _refused(
        lambda: admission.admit_worker_or_admin(_bearer(_token("w2", 1)), NOW_MS, W1),
        403,
        "forbidden",
    )
    _refused(lambda: admission.admit_admin(_bearer(_token("w1", 2))), 403, "forbidden")
    assert admission.admit_admin(_bearer(ADMIN_TOKEN)) is ADMIN


def test_a_heartbeat_hands_back_its_token_until_half_its_lifetime_is_gone() -> None:
    admission = _admission()
    token, expires_at_ms = admission.worker_token("w1", 2, NOW_MS)
    assert expires_at_ms == NOW_MS + int(LIFETIME_S * 1000)
    claims = admission.admit_worker(_bearer(token), NOW_MS)
    half_ms = int(LIFETIME_S * 500)
    assert admission.heartbeat_token(claims, 2, NOW_MS + half_ms - 1) == (token, expires_at_ms)
    later = NOW_MS + half_ms
    renewed, renewed_expiry = admission.heartbeat_token(claims, 2, later)
    assert renewed != token and renewed_expiry == later + int(LIFETIME_S * 1000)
    assert admission.admit_worker(_bearer(renewed), later).incarnation == 2
