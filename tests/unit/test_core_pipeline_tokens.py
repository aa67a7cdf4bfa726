"""Tokens scoped to one pipeline: IssueToken and RevokeToken in the core (bounds, idempotence,
refusals that change nothing, the snapshot, the drop, the version gate), and what a token
admits at the HTTP edge (`coordinator/service/pipeline_tokens.py`)."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from coordinator.core.commands import (
    Bootstrap,
    DropPipeline,
    FinalizeVersion,
    ForgetPipeline,
    IssueToken,
    Ok,
    ReportVersions,
    RevokeToken,
    TokenResult,
)
from coordinator.core.model import PIPELINE_TOKENS_MAX, PipelineName, TokenRole
from coordinator.core.pipeline_fields import pipeline_plain
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from coordinator.core.versions import INTRODUCED_IN, refusal, version_of
from coordinator.service.auth import ADMIN, Admission
from coordinator.service.pipeline_tokens import PipelineHolder, admit_pipeline, new_pipeline_token
from shared.errors import RequestError
from tests.unit.test_core_pipelines import ORDERS, create, step
from tests.unit.test_core_state import rejects

SHA = hashlib.sha256(b"secret").hexdigest()


def cluster(version: int = 6) -> ClusterState:
    s = ClusterState()
    for i, cmd in enumerate(
        [
            ReportVersions(
                node_id="n1", min_version=1, max_version=7, package_version="x", now_ms=1
            ),
            FinalizeVersion(version=version, voters=("n1",), now_ms=1),
            Bootstrap(total_partitions=4, now_ms=1),
        ]
    ):
        assert isinstance(apply(s, f"boot-{i}", cmd), Ok)
    return s


def issue(
    token_id: str = "t1",
    sha256: str = SHA,
    name: str = ORDERS,
    role: TokenRole = TokenRole.OPERATE,
) -> IssueToken:
    return IssueToken(
        name=PipelineName(name),
        token_id=token_id,
        role=role,
        sha256=sha256,
        by="admin",
        now_ms=200,
    )


def revoke(token_id: str = "t1") -> RevokeToken:
    return RevokeToken(name=ORDERS, token_id=token_id, by="admin", now_ms=201)


def token_step(s: ClusterState, cmd: IssueToken | RevokeToken) -> TokenResult:
    result = apply(s, f"tok-{cmd.token_id}-{cmd.TAG}-{len(s.pipelines[ORDERS].tokens)}", cmd)
    assert isinstance(result, Ok), result
    assert isinstance(result.value, TokenResult)
    return result.value


@pytest.fixture
def s() -> ClusterState:
    state = cluster()
    step(state, create())
    return state


def test_issue_records_only_the_hash_and_a_retry_changes_nothing(s: ClusterState) -> None:
    done = token_step(s, issue())
    assert (done.issued, done.changed) == (True, True)
    (t,) = s.pipelines[ORDERS].tokens
    assert (t.token_id, t.role, t.sha256, t.by, t.created_at_ms) == (
        "t1",
        TokenRole.OPERATE,
        SHA,
        "admin",
        200,
    )
    again = token_step(s, issue())
    assert (again.issued, again.changed) == (True, False)
    assert len(s.pipelines[ORDERS].tokens) == 1


def test_bad_issues_are_refused_with_their_field_and_change_nothing(s: ClusterState) -> None:
    token_step(s, issue())
    rejects(s, issue(sha256=hashlib.sha256(b"other").hexdigest()), "conflict", "token_id")
    rejects(s, issue(token_id="t/2"), "invalid", "token_id")
    rejects(s, issue(token_id="t" * 33), "invalid", "token_id")
    rejects(s, issue(token_id="t2", sha256="AB" * 32), "invalid", "sha256")
    rejects(s, issue(token_id="t2", sha256="ab"), "invalid", "sha256")
    rejects(s, issue(token_id="t2", name="nobody"), "not_found", "name")
    rejects(s, issue(token_id="t2", name="default"), "conflict", "name")
    rejects(s, dataclasses.replace(issue(token_id="t2"), by=""), "invalid", "by")


def test_a_pipeline_holds_a_bounded_number_of_tokens(s: ClusterState) -> None:
    for i in range(PIPELINE_TOKENS_MAX):
        token_step(s, issue(token_id=f"t{i}"))
    rejects(s, issue(token_id="one-more"), "conflict", "name", match="revoke one first")
    token_step(s, revoke("t0"))
    assert token_step(s, issue(token_id="one-more")).changed


def test_revoke_removes_it_and_a_second_revoke_changes_nothing(s: ClusterState) -> None:
    token_step(s, issue("t1"))
    token_step(s, issue("t2"))
    done = token_step(s, revoke("t1"))
    assert (done.issued, done.changed) == (False, True)
    assert [t.token_id for t in s.pipelines[ORDERS].tokens] == ["t2"]
    again = token_step(s, revoke("t1"))
    assert (again.issued, again.changed) == (False, False)


def test_a_dropping_pipeline_takes_no_token_and_its_tokens_leave_with_it(
    s: ClusterState,
) -> None:
    token_step(s, issue())
    step(s, DropPipeline(name=ORDERS, purge=False, by="admin", now_ms=300))
    rejects(s, issue(token_id="t2"), "conflict", "name", match="being dropped")
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=301))
    assert ORDERS not in s.pipelines


def test_tokens_round_trip_in_a_snapshot_and_a_record_without_keeps_its_form(
    s: ClusterState,
) -> None:
    before = pipeline_plain(s.pipelines[ORDERS])
    assert len(before) == 15  # the record's form before tokens existed
    token_step(s, issue())
    data = encode_state(s)
    assert SHA.encode() in data  # the hash is what the snapshot holds
    restored = decode_state(data)
    assert restored.pipelines == s.pipelines and encode_state(restored) == data
    token_step(s, revoke())
    assert pipeline_plain(s.pipelines[ORDERS]) == before  # no token: that form again


def test_the_token_commands_wait_for_command_set_version_6() -> None:
    s = cluster(version=5)
    step(s, create())
    for cmd in (issue(), revoke()):
        assert INTRODUCED_IN[cmd.TAG] == 6
        rejects(s, cmd, "version_not_finalized", "command_set_version")


def test_a_produce_token_waits_for_command_set_version_7() -> None:
    s = cluster(version=6)
    step(s, create())
    produce = issue(token_id="p1", role=TokenRole.PRODUCE)
    assert version_of(produce) == 7 and version_of(issue()) == 6
    # The leader refuses to propose it (n1 speaks 7, so: finalize first, retry) ...
    refused = refusal(s, "IssueToken", version_of(produce), ("n1",))
    assert refused is not None and refused.code == "version_not_finalized"
    # ... and a voter that speaks only 6 is named: the 409 version_unsupported.
    apply(
        s,
        "n2-6",
        ReportVersions(node_id="n2", min_version=1, max_version=6, package_version="y", now_ms=2),
    )
    behind = refusal(s, "IssueToken", 7, ("n1", "n2"))
    assert behind is not None and behind.code == "version_unsupported" and "n2" in behind.message
    # Every replica's apply rejects it alike, and an operate token still issues at 6.
    rejects(s, produce, "version_not_finalized", "command_set_version")
    assert token_step(s, issue()).changed
    s7 = cluster(version=7)
    step(s7, create())
    assert token_step(s7, produce).changed
    assert s7.pipelines[ORDERS].tokens[0].role is TokenRole.PRODUCE


# -- what a token admits -------------------------------------------------------------------------


class _Admission:
    admin_token = "the-admin-token"


def _admit(
    header: str | None,
    tokens: tuple[object, ...],
    pipeline: str = "orders",
    role: TokenRole = TokenRole.OPERATE,
) -> object:
    headers = {} if header is None else {"Authorization": header}
    admission = _Admission()
    return admit_pipeline(admission, headers, pipeline, tokens, role)  # type: ignore[arg-type]


def test_a_token_admits_its_holder_to_its_own_pipeline_only(s: ClusterState) -> None:
    token_id, text, sha256 = new_pipeline_token()
    assert text.startswith(f"rpt_{token_id}_") and sha256 not in text
    token_step(s, issue(token_id=token_id, sha256=sha256))
    tokens = s.pipelines[ORDERS].tokens
    holder = _admit(f"Bearer {text}", tokens)
    assert holder == PipelineHolder(pipeline="orders", token_id=token_id, role=TokenRole.OPERATE)
    assert isinstance(holder, PipelineHolder) and holder.scope == f"token {token_id}"
    assert _admit("Bearer the-admin-token", ()) is ADMIN
    with pytest.raises(RequestError) as missing:
        _admit(None, tokens)
    assert missing.value.code == "unauthorized"
    _, other_text, _ = new_pipeline_token()
    for wrong in (
        other_text,  # a token of nobody's
        text[:-1] + ("0" if text[-1] != "0" else "1"),  # its secret altered
        f"rpt_{token_id}",  # no secret at all
        "the-join-token",
    ):
        with pytest.raises(RequestError) as refused:
            _admit(f"Bearer {wrong}", tokens)
        assert refused.value.code == "forbidden", wrong
    # Another pipeline's record holds no such token; a revoked one is not in the record.
    with pytest.raises(RequestError):
        _admit(f"Bearer {text}", (), pipeline="other")
    token_step(s, revoke(token_id))
    with pytest.raises(RequestError):
        _admit(f"Bearer {text}", s.pipelines[ORDERS].tokens)


def test_a_produce_token_only_produces_and_an_operate_token_also_produces() -> None:
    s = cluster(version=7)
    step(s, create())
    produce_id, produce_text, produce_sha = new_pipeline_token()
    operate_id, operate_text, operate_sha = new_pipeline_token()
    token_step(s, issue(produce_id, produce_sha, role=TokenRole.PRODUCE))
    token_step(s, issue(operate_id, operate_sha))
    tokens = s.pipelines[ORDERS].tokens
    as_producer = _admit(f"Bearer {produce_text}", tokens, role=TokenRole.PRODUCE)
    assert as_producer == PipelineHolder(
        pipeline="orders", token_id=produce_id, role=TokenRole.PRODUCE
    )
    operator = _admit(f"Bearer {operate_text}", tokens, role=TokenRole.PRODUCE)
    assert isinstance(operator, PipelineHolder) and operator.role is TokenRole.OPERATE
    with pytest.raises(RequestError) as refused:  # pause, resume, drop: operate only
        _admit(f"Bearer {produce_text}", tokens, role=TokenRole.OPERATE)
    assert refused.value.code == "forbidden"
    with pytest.raises(RequestError) as elsewhere:
        _admit(f"Bearer {produce_text}", (), pipeline="other", role=TokenRole.PRODUCE)
    assert elsewhere.value.code == "forbidden"


def test_admission_is_the_real_class() -> None:
    # The stand-in above has exactly the attribute admit_pipeline reads of the real one.
    assert "admin_token" in Admission.__dataclass_fields__
