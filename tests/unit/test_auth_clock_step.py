"""Worker tokens across a wall-clock step on the leader (coordinator/service/auth.py): a step
forward expires no token the leader already verified, a step back lengthens one by at most
the step, a heartbeat renews early rather than late, and with no step a token lapses when
its lifetime says (issue 39's clock cells run the same on real processes)."""

from __future__ import annotations

import pytest

from coordinator.service.auth import Admission, issue_token
from shared.clock import FakeClock
from shared.errors import RequestError

SECRET = "s" * 32
LIFETIME_S = 3600.0
LIFETIME_MS = int(LIFETIME_S * 1000)
HOUR_MS = 3_600_000


def _admission(clock: FakeClock) -> Admission:
    return Admission(
        secret=SECRET,
        admin_token="admin-token-0123456789",
        join_token="",
        open_registration=True,
        worker_token_lifetime_s=LIFETIME_S,
        clock=clock,
    )


def _issue(admission: Admission, clock: FakeClock, worker: str) -> dict[str, str]:
    token, _ = admission.worker_token(worker, 1, clock.wall_ms())
    return {"Authorization": f"Bearer {token}"}


def test_a_forward_step_expires_no_token_already_verified() -> None:
    clock = FakeClock()
    admission = _admission(clock)
    headers = _issue(admission, clock, "w-fwd")
    admission.admit_worker(headers, clock.wall_ms())  # the leader verifies it once
    clock.advance(LIFETIME_MS // 2 + 1)  # the wall says half an hour and a bit left
    clock.step_wall(HOUR_MS)  # ...and now an hour less: expired by the wall alone
    claims = admission.admit_worker(headers, clock.wall_ms())
    assert claims.expires_at_ms < clock.wall_ms()
    # The heartbeat after the step renews it, valid on the stepped clock.
    renewed, expires_at_ms = admission.heartbeat_token(claims, 1, clock.wall_ms())
    assert renewed != claims.token and expires_at_ms == clock.wall_ms() + LIFETIME_MS
    clock.step_wall(-HOUR_MS)  # stepped back: the renewed token is good an hour longer
    admission.admit_worker({"Authorization": f"Bearer {renewed}"}, clock.wall_ms())


def test_without_a_step_a_token_lapses_on_time_and_a_back_step_adds_at_most_the_step() -> None:
    clock = FakeClock()
    admission = _admission(clock)
    headers = _issue(admission, clock, "w-lapse")
    admission.admit_worker(headers, clock.wall_ms())
    clock.advance(LIFETIME_MS - 1)
    admission.admit_worker(headers, clock.wall_ms())
    clock.advance(1)
    with pytest.raises(RequestError, match="expired"):
        admission.admit_worker(headers, clock.wall_ms())
    clock.step_wall(-HOUR_MS)  # a back step revives it on the wall: by the step, no more
    admission.admit_worker(headers, clock.wall_ms())
    clock.advance(HOUR_MS)
    with pytest.raises(RequestError, match="expired"):
        admission.admit_worker(headers, clock.wall_ms())


def test_a_token_first_seen_after_a_forward_step_is_judged_on_the_wall() -> None:
    clock = FakeClock()
    admission = _admission(clock)
    token = issue_token(SECRET, "w-late", 1, clock.wall_ms() + LIFETIME_MS)
    clock.step_wall(LIFETIME_MS)  # a new leader, already stepped, has never seen it
    with pytest.raises(RequestError, match="expired"):
        admission.admit_worker({"Authorization": f"Bearer {token}"}, clock.wall_ms())


def test_a_heartbeat_renews_by_the_shorter_clock() -> None:
    clock = FakeClock()
    admission = _admission(clock)
    headers = _issue(admission, clock, "w-renew")
    claims = admission.admit_worker(headers, clock.wall_ms())
    same, _ = admission.heartbeat_token(claims, 1, clock.wall_ms())
    assert same == claims.token  # fresh: handed back as it is
    clock.step_wall(-HOUR_MS)  # the wall now says 2 h left; monotonic still says 1 h
    clock.advance(LIFETIME_MS // 2 + 1)
    claims = admission.admit_worker(headers, clock.wall_ms())
    renewed, _ = admission.heartbeat_token(claims, 1, clock.wall_ms())
    assert renewed != claims.token
