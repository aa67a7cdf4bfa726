"""A pipeline's records applied to a ClusterState: every accept and reject path of
CreatePipeline .. ForgetPipeline, the lifecycle they follow, the version gate, request-id
idempotence, the snapshot, the implicit `default`, and the invariants after every step
(also under random sequences of commands)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import lifecycle
from coordinator.core.commands import (
    ActivatePipeline,
    Bootstrap,
    Command,
    CreatePipeline,
    DropPipeline,
    FinalizeVersion,
    ForgetPipeline,
    Ok,
    PausePipeline,
    PipelineResult,
    Rejected,
    ReportVersions,
    Result,
    ResumePipeline,
    StartRescale,
)
from coordinator.core.invariants import Ledger, state_violations, step_violations, view
from coordinator.core.model import (
    BATCH_INTERVAL_MS_MIN,
    DEFAULT_PIPELINE,
    DEFAULT_PIPELINE_SETTINGS,
    PIPELINE_PARTITIONS_MAX,
    PIPELINES_MAX,
    POOL_LABELS_MAX,
    RETENTION_MS_MAX,
    SPEC_TEXT_BYTES_MAX,
    SPEC_TEXT_BYTES_TOTAL_MAX,
    TOTAL_PARTITIONS_MAX,
    Label,
    PipelineName,
    PipelineState,
)
from coordinator.core.pipelines import pipeline_named, pipelines_view
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from coordinator.core.versions import INTRODUCED_IN, SPOKEN, finalizable, refusal, version_of
from shared.spec.parse import parse_spec
from tests.unit.test_core_codec import GOLDEN_STATE_PRE_FALLBACK
from tests.unit.test_core_state import rejects

SPEC = """[schema]
ddl = "k STRING, v BIGINT"
key = "k"

[[aggregations]]
name = "n"
fn = "count"
"""
ORDERS = PipelineName("orders")
_ids = itertools.count()


def step(s: ClusterState, cmd: Command, request_id: str | None = None) -> PipelineResult:
    """Apply `cmd` (it must commit) and hold the state and the step to the invariants."""
    before = view(s)
    result = apply(s, request_id or f"p-{next(_ids)}", cmd)
    assert isinstance(result, Ok), result
    assert state_violations(s) == []
    assert step_violations(before, s, cmd) == []
    assert isinstance(result.value, PipelineResult)
    return result.value


def create(name: str = ORDERS, text: str = SPEC, **fields: object) -> CreatePipeline:
    base = CreatePipeline(
        name=PipelineName(name),
        spec_text=text,
        spec_sha256=hashlib.sha256(text.encode()).hexdigest(),
        partitions=16,
        pool=(Label(key="zone", value="b"), Label(key="gpu", value="true")),
        settings=DEFAULT_PIPELINE_SETTINGS,
        by="admin",
        now_ms=100,
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def cluster(version: int = 5, total: int = 8) -> ClusterState:
    s = ClusterState()
    for i, cmd in enumerate(
        [
            ReportVersions(
                node_id="n1", min_version=1, max_version=5, package_version="x", now_ms=1
            ),
            FinalizeVersion(version=version, voters=("n1",), now_ms=1),
            Bootstrap(total_partitions=total, now_ms=1),
        ]
    ):
        assert isinstance(apply(s, f"boot-{i}", cmd), Ok)
    return s


@pytest.fixture
def s() -> ClusterState:
    return cluster()


def test_the_spec_in_the_examples_is_what_a_create_carries(s: ClusterState) -> None:
    parse_spec(SPEC)  # the proposer's check (shared/spec), which apply trusts
    r = step(s, create())
    assert (r.name, r.incarnation, r.state, r.spec_version, r.changed) == (
        ORDERS,
        1,
        PipelineState.CREATING,
        1,
        True,
    )
    p = s.pipelines[ORDERS]
    assert p.spec_text == SPEC and p.partitions == 16 and p.routing_generation == 0
    assert p.pool_labels() == {"gpu": "true", "zone": "b"}
    assert [label.key for label in p.pool] == ["gpu", "zone"]  # kept sorted: one form
    assert (p.created_at_ms, p.by, p.purge) == (100, "admin", False)


def test_the_whole_lifecycle_and_its_commit_points(s: ClusterState) -> None:
    step(s, create())
    assert step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101)).changed
    assert step(s, PausePipeline(name=ORDERS, by="ops", now_ms=102)).state is PipelineState.PAUSED
    assert s.pipelines[ORDERS].by == "ops" and s.pipelines[ORDERS].updated_at_ms == 102
    assert step(s, ResumePipeline(name=ORDERS, by="ops", now_ms=103)).state is PipelineState.ACTIVE
    r = step(s, DropPipeline(name=ORDERS, purge=True, by="ops", now_ms=104))
    assert r.state is PipelineState.DROPPING and s.pipelines[ORDERS].purge
    gone = step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=105))
    assert gone.state is None and gone.changed and ORDERS not in s.pipelines
    # The name is free again, under a new incarnation.
    assert step(s, create(now_ms=106)).incarnation == 2 and s.pipeline_seq == 2


def test_a_create_that_never_finished_is_dropped(s: ClusterState) -> None:
    step(s, create())
    step(s, DropPipeline(name=ORDERS, purge=False, by="leader", now_ms=101))
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=102))
    assert s.pipelines == {}


@pytest.mark.parametrize(
    ("cmd", "code", "field"),
    [
        (create(name="bad name"), "invalid", "name"),
        (create(name=DEFAULT_PIPELINE), "conflict", "name"),
        (create(by=""), "invalid", "by"),
        (create(spec_sha256="00" * 32), "invalid", "spec_sha256"),
        (create(spec_sha256="ab"), "invalid", "spec_sha256"),
        (create(text="x" * (SPEC_TEXT_BYTES_MAX + 1)), "invalid", "spec_text"),
        (create(text="é" * (SPEC_TEXT_BYTES_MAX // 2 + 1)), "invalid", "spec_text"),  # bytes
        (create(partitions=0), "invalid", "partitions"),
        (create(partitions=PIPELINE_PARTITIONS_MAX + 1), "invalid", "partitions"),
        (
            create(pool=tuple(Label(key=f"k{i}", value="v") for i in range(POOL_LABELS_MAX + 1))),
            "invalid",
            "pool",
        ),
        (create(pool=(Label(key="a", value="1"), Label(key="a", value="2"))), "invalid", "pool"),
        (create(pool=(Label(key="a b", value="1"),)), "invalid", "pool"),
        (
            create(settings=dataclasses.replace(DEFAULT_PIPELINE_SETTINGS, batch_interval_ms=1)),
            "invalid",
            "settings.batch_interval_ms",
        ),
        (
            create(
                settings=dataclasses.replace(
                    DEFAULT_PIPELINE_SETTINGS,
                    batch_interval_ms=5_000,
                    checkpoint_interval_ms=2_000,
                )
            ),
            "invalid",
            "settings.checkpoint_interval_ms",
        ),
        (
            create(
                settings=dataclasses.replace(DEFAULT_PIPELINE_SETTINGS, max_keys_per_partition=0)
            ),
            "invalid",
            "settings.max_keys_per_partition",
        ),
        (
            create(
                settings=dataclasses.replace(
                    DEFAULT_PIPELINE_SETTINGS, retention_ms=RETENTION_MS_MAX + 1
                )
            ),
            "invalid",
            "settings.retention_ms",
        ),
    ],
)
def test_a_bad_create_is_refused_with_its_field_and_changes_nothing(
    s: ClusterState, cmd: CreatePipeline, code: str, field: str
) -> None:
    rejects(s, cmd, code, field)


def test_names_are_unique_and_a_create_sent_again_is_the_one_it_made(s: ClusterState) -> None:
    first = step(s, create())
    again = step(s, create(now_ms=200))  # a new request id: the same create
    assert (again.incarnation, again.changed) == (first.incarnation, False)
    assert s.pipelines[ORDERS].created_at_ms == 100
    rejects(s, create(partitions=8), "conflict", "name", "exists")
    step(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=201))
    rejects(s, create(), "conflict", "name", "dropping")


def test_a_retry_under_its_request_id_returns_the_first_result(s: ClusterState) -> None:
    step(s, create(), "create-1")
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101), "act-1")
    step(s, PausePipeline(name=ORDERS, by="ops", now_ms=102))
    # The activation's retry: its recorded result, not a second change (the pipeline is
    # PAUSED now, and stays so).
    retried = apply(s, "act-1", ActivatePipeline(name=ORDERS, incarnation=1, now_ms=103))
    assert isinstance(retried, Ok) and isinstance(retried.value, PipelineResult)
    assert retried.value.state is PipelineState.ACTIVE and retried.value.changed
    assert s.pipelines[ORDERS].state is PipelineState.PAUSED
    # Under a new request id, the leader's repeated step changes nothing either.
    assert not step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=104)).changed
    assert not step(s, PausePipeline(name=ORDERS, by="ops", now_ms=105)).changed


def test_a_step_of_another_incarnation_is_refused(s: ClusterState) -> None:
    step(s, create())
    step(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=101))
    step(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=102))
    step(s, create(now_ms=103))  # incarnation 2, CREATING
    # A deposed leader's step for the first one lands on neither.
    rejects(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=104), "conflict", "incarnation")
    rejects(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=104), "conflict", "incarnation")


def test_moves_outside_the_table_are_conflicts(s: ClusterState) -> None:
    step(s, create())
    rejects(s, PausePipeline(name=ORDERS, by="ops", now_ms=101), "conflict", "name")
    rejects(s, ResumePipeline(name=ORDERS, by="ops", now_ms=101), "conflict", "name")
    rejects(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=101), "conflict", "name")
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))
    step(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=102))
    rejects(s, ResumePipeline(name=ORDERS, by="ops", now_ms=103), "conflict", "name")
    rejects(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=103), "conflict", "name")
    # A drop asked again changes nothing; asked again with purge, it purges too.
    assert not step(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=104)).changed
    assert step(s, DropPipeline(name=ORDERS, purge=True, by="ops", now_ms=105)).changed
    assert s.pipelines[ORDERS].purge


def test_apply_asks_the_table(s: ClusterState, monkeypatch: pytest.MonkeyPatch) -> None:
    step(s, create())
    edges = dict(lifecycle.PIPELINE_EDGES)
    key = (PipelineState.CREATING, PipelineState.ACTIVE)
    edges[key] = edges[key] - {"ActivatePipeline"}
    monkeypatch.setattr(lifecycle, "PIPELINE_EDGES", edges)
    r = rejects(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101), "conflict")
    assert "ActivatePipeline cannot make it active" in r.message
    monkeypatch.undo()
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=101))


def test_unknown_and_default_names(s: ClusterState) -> None:
    rejects(s, PausePipeline(name=ORDERS, by="ops", now_ms=1), "not_found", "name")
    rejects(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=1), "not_found", "name")
    for cmd in (
        PausePipeline(name=DEFAULT_PIPELINE, by="ops", now_ms=1),
        DropPipeline(name=DEFAULT_PIPELINE, purge=True, by="ops", now_ms=1),
    ):
        rejects(s, cmd, "conflict", "name", "cluster's own pipeline")
    rejects(s, PausePipeline(name=ORDERS, by="", now_ms=1), "invalid", "by")


def test_the_number_of_pipelines_and_their_partitions_are_bounded() -> None:
    s = cluster(total=8)
    for i in range(15):  # 15 of the largest and the cluster's own 8: 983 048 partitions
        assert isinstance(
            apply(s, f"big{i}", create(name=f"big{i}", partitions=PIPELINE_PARTITIONS_MAX)), Ok
        )
    room = TOTAL_PARTITIONS_MAX - 8 - 15 * PIPELINE_PARTITIONS_MAX
    rejects(s, create(name="a", partitions=room + 1), "conflict", "partitions")
    step(s, create(name="a", partitions=room))
    s2 = cluster()
    for i in range(PIPELINES_MAX):
        assert isinstance(apply(s2, f"c{i}", create(name=f"p{i}", partitions=1)), Ok)
    rejects(s2, create(name="one-more", partitions=1), "conflict", None, "the most")


def test_the_spec_text_of_all_pipelines_together_is_bounded() -> None:
    # apply checks a spec's size and hash, never its content (the proposer parses it).
    s = cluster()
    big = "#" * SPEC_TEXT_BYTES_MAX
    fit = SPEC_TEXT_BYTES_TOTAL_MAX // SPEC_TEXT_BYTES_MAX
    for i in range(fit - 1):
        assert isinstance(apply(s, f"big{i}", create(name=f"big{i}", text=big)), Ok)
    step(s, create(name="almost", text=big[:-10]))
    rejects(s, create(name="over", text="#" * 11), "conflict", "spec_text", "bytes of spec text")
    step(s, create(name="last", text="#" * 10))


def test_the_commands_wait_for_command_set_version_5() -> None:
    s = cluster(version=4)
    for cmd in (create(), PausePipeline(name=ORDERS, by="ops", now_ms=1)):
        assert INTRODUCED_IN[cmd.TAG] == 5
        rejects(s, cmd, "version_not_finalized", "command_set_version")
    s = ClusterState()  # finalized at 5 but not bootstrapped
    apply(
        s,
        "r",
        ReportVersions(node_id="n", min_version=1, max_version=5, package_version="x", now_ms=1),
    )
    apply(s, "f", FinalizeVersion(version=5, voters=("n",), now_ms=1))
    rejects(s, create(), "not_bootstrapped", None)


def test_the_records_round_trip_in_a_snapshot(s: ClusterState) -> None:
    step(s, create())
    step(s, create(name="b", pool=(), now_ms=101))
    step(s, ActivatePipeline(name=ORDERS, incarnation=1, now_ms=102))
    step(s, DropPipeline(name=PipelineName("b"), purge=True, by="ops", now_ms=103))
    data = encode_state(s)
    restored = decode_state(data)
    assert restored.pipelines == s.pipelines and restored.pipeline_seq == 2
    assert encode_state(restored) == data
    # Forgotten all: the counter stays in the snapshot, so no incarnation is issued twice.
    step(s, ForgetPipeline(name=PipelineName("b"), incarnation=2, now_ms=104))
    restored = decode_state(encode_state(s))
    assert restored.pipeline_seq == 2 and list(restored.pipelines) == [ORDERS]


def test_a_snapshot_without_pipelines_keeps_its_bytes_and_loads() -> None:
    old = decode_state(bytes.fromhex(GOLDEN_STATE_PRE_FALLBACK))
    assert old.pipelines == {} and old.pipeline_seq == 0
    assert encode_state(old).hex() == GOLDEN_STATE_PRE_FALLBACK
    (default,) = pipelines_view(old)
    assert default.name == DEFAULT_PIPELINE and default.partitions == old.total_partitions


def test_a_malformed_pipeline_record_is_a_codec_error(s: ClusterState) -> None:
    import msgpack

    from coordinator.core.codec import CodecError

    step(s, create())
    good = msgpack.unpackb(encode_state(s))
    row = good["pipelines"][1][0]
    for bad in (
        {**good, "pipelines": [1, [row, row]]},  # one name twice
        {**good, "pipelines": [1, [row[:-1]]]},
        {**good, "pipelines": [1, [[*row[:9], "weird", *row[10:]]]]},
        {**good, "pipelines": [1, [[*row[:7], [["a b", "c"]], *row[8:]]]]},
    ):
        with pytest.raises(CodecError):
            decode_state(msgpack.packb(bad))


def test_default_is_the_clusters_own_pipeline(s: ClusterState) -> None:
    assert pipelines_view(ClusterState()) == ()
    (default,) = pipelines_view(s)
    assert (default.name, default.state, default.spec_version) == (
        DEFAULT_PIPELINE,
        PipelineState.ACTIVE,
        0,
    )
    assert (default.partitions, default.routing_generation, default.pool) == (8, 0, ())
    step(s, create(name="zeta"))
    step(s, create(name="alpha"))
    assert [p.name for p in pipelines_view(s)] == [DEFAULT_PIPELINE, "alpha", "zeta"]
    assert pipeline_named(s, "alpha") is s.pipelines[PipelineName("alpha")]
    assert pipeline_named(s, "nope") is None
    # It follows the cluster's own table: a rescale's new generation and count are its.
    s.routing, s.total_partitions = (8, 4), 4
    default = pipeline_named(s, DEFAULT_PIPELINE)
    assert default is not None and (default.partitions, default.routing_generation) == (4, 1)


def test_a_rescale_of_the_cluster_leaves_the_records_alone(s: ClusterState) -> None:
    step(s, create())
    before = encode_state(s)
    assert isinstance(apply(s, "rs", StartRescale(partitions=4, by="ops", now_ms=5)), Ok)
    assert s.pipelines[ORDERS].partitions == 16 and encode_state(s) != before


def test_the_invariants_catch_a_broken_record(s: ClusterState) -> None:
    step(s, create())
    before = view(s)
    p = s.pipelines[ORDERS]
    s.pipelines[ORDERS] = dataclasses.replace(p, spec_version=0, incarnation=9)
    found = state_violations(s)
    assert any("incarnation 9 of 1" in v for v in found)
    assert any("spec version 0" in v for v in found)
    cmd = PausePipeline(name=ORDERS, by="x", now_ms=1)
    found = step_violations(before, s, cmd)
    assert any("incarnation" in v for v in found)
    s.pipelines[ORDERS] = dataclasses.replace(p, state=PipelineState.PAUSED)
    assert any("not in lifecycle.py" in v for v in step_violations(before, s, cmd))
    s.pipelines[ORDERS] = dataclasses.replace(
        p, settings=dataclasses.replace(p.settings, batch_interval_ms=BATCH_INTERVAL_MS_MIN - 1)
    )
    assert any("out of bounds" in v for v in state_violations(s))
    del s.pipelines[ORDERS]
    assert any("removed pipeline" in v for v in step_violations(before, s, cmd))


_names = st.sampled_from(["a", "b", "c", DEFAULT_PIPELINE])
_commands = st.one_of(
    st.builds(
        lambda n, parts, t: create(name=n, partitions=parts, now_ms=t),
        _names,
        st.integers(0, 40),
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda n, i, t: ActivatePipeline(name=PipelineName(n), incarnation=i, now_ms=t),
        _names,
        st.integers(0, 6),
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda n, t: PausePipeline(name=PipelineName(n), by="ops", now_ms=t),
        _names,
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda n, t: ResumePipeline(name=PipelineName(n), by="ops", now_ms=t),
        _names,
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda n, purge, t: DropPipeline(name=PipelineName(n), purge=purge, by="ops", now_ms=t),
        _names,
        st.booleans(),
        st.integers(0, 10**6),
    ),
    st.builds(
        lambda n, i, t: ForgetPipeline(name=PipelineName(n), incarnation=i, now_ms=t),
        _names,
        st.integers(0, 6),
        st.integers(0, 10**6),
    ),
)


def checked(s: ClusterState, cmd: Command, request_id: str) -> Result:
    """Apply `cmd`, whatever it answers: a refusal changed nothing, and an Ok holds the
    state and the step to the invariants."""
    before, data = view(s), encode_state(s)
    result = apply(s, request_id, cmd)
    if isinstance(result, Rejected):
        assert encode_state(s) == data, (cmd, result)
    else:
        assert state_violations(s) == [], cmd
        assert step_violations(before, s, cmd) == [], cmd
    return result


@given(st.lists(_commands, max_size=30))
@settings(max_examples=150, deadline=None)
def test_any_sequence_holds_the_invariants_and_a_refusal_changes_nothing(
    cmds: list[Command],
) -> None:
    s = cluster()
    for i, cmd in enumerate(cmds):
        checked(s, cmd, f"h-{i}")
    restored = decode_state(encode_state(s))
    assert restored.pipelines == s.pipelines and restored.pipeline_seq == s.pipeline_seq


def test_the_ledger_sees_a_replica_go_back(s: ClusterState) -> None:
    ledger = Ledger()
    step(s, create())
    assert ledger.observe("n1", s) == []
    s.pipelines[ORDERS] = dataclasses.replace(s.pipelines[ORDERS], spec_version=3)
    assert ledger.observe("n1", s) == []
    s.pipelines[ORDERS] = dataclasses.replace(s.pipelines[ORDERS], spec_version=2)
    s.pipeline_seq = 0
    found = ledger.observe("n1", s)
    assert any("spec version went back to 2" in v for v in found)
    assert any("pipeline counter went back to 0" in v for v in found)
    assert ledger.observe("n2", s) == []  # each replica on its own


def test_the_leader_refuses_a_create_while_a_voter_speaks_only_4() -> None:
    s = cluster(version=4)
    behind = ReportVersions(
        node_id="n2", min_version=1, max_version=4, package_version="0.4", now_ms=2
    )
    assert isinstance(apply(s, "n2", behind), Ok)
    r = refusal(s, "CreatePipeline", version_of(create()), ["n1", "n2"])
    assert r is not None and r.code == "version_unsupported" and "n2 speaks 1..4" in r.message
    r = refusal(s, "CreatePipeline", version_of(create()), ["n1"])
    assert r is not None and r.code == "version_not_finalized"
    assert finalizable(s, ["n1"], SPOKEN) == 5 and finalizable(s, ["n1", "n2"], SPOKEN) is None
