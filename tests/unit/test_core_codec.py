"""Wire formats: golden bytes per command, round-trips, and strict rejection of bad input."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import get_args

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.codec import (
    FORMAT_VERSION,
    CodecError,
    decode_command,
    decode_result,
    encode_command,
    encode_result,
)
from coordinator.core.commands import (
    COMMAND_BY_TAG,
    COMMAND_TYPES,
    REJECT_CODES,
    AbortMigration,
    AbortResult,
    ActivatePipeline,
    Assignment,
    AssignPartitions,
    AssignResult,
    Barrier,
    BarrierResult,
    Bootstrap,
    BootstrapResult,
    BuiltCheckpoint,
    CheckpointReport,
    CheckpointsResult,
    CheckpointVerdict,
    Command,
    CommandResult,
    CreatePipeline,
    CutResult,
    DeclareDead,
    DeclareDeadResult,
    DrainResult,
    DrainWorker,
    DropPipeline,
    FallBack,
    FallBackResult,
    FinalCheckpoint,
    FinalizeVersion,
    FinishPipelineRescale,
    FinishRescale,
    ForgetPipeline,
    HandOff,
    HandOffResult,
    IssueToken,
    MaintenanceOff,
    MaintenanceOn,
    MaintenanceResult,
    MarkStuck,
    Move,
    NewMigration,
    Ok,
    OnlineResult,
    PartitionOnline,
    PausePipeline,
    PipelineResult,
    PipelineStatesBuilt,
    PlanMigrations,
    PlanResult,
    ProfileWorker,
    RecordBackup,
    RecordCheckpoints,
    RecordCut,
    RecordPipelineCut,
    RegisterResult,
    RegisterWorker,
    Rejected,
    ReleaseResult,
    ReportVersions,
    RescaleResult,
    ResetPartition,
    ResetResult,
    ResumePipeline,
    RetireResult,
    RetireWorkers,
    RevokeToken,
    StartPipelineRescale,
    StartRelease,
    StartRescale,
    StartWarm,
    StatesBuilt,
    StuckResult,
    rejected,
)
from coordinator.core.model import (
    BATCH_ITEMS_MAX,
    REQUEST_ID_LEN_MAX,
    URI_LEN_MAX,
    Label,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PipelineName,
    PipelineSettings,
    PipelineState,
    RescalePhase,
    TokenRole,
    WorkerId,
    WorkerState,
)
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply

W1, W2, W3, W4 = WorkerId("w1"), WorkerId("w2"), WorkerId("w3"), WorkerId("w4")
SPEC_TEXT = '[schema]\nddl = "k STRING"\nkey = "k"\n\n[[aggregations]]\nname = "n"\nfn = "count"\n'
SPEC_SHA256 = hashlib.sha256(SPEC_TEXT.encode()).hexdigest()
TOKEN_SHA256 = hashlib.sha256(b"a pipeline token's secret").hexdigest()
SETTINGS = PipelineSettings(
    batch_interval_ms=500,
    checkpoint_interval_ms=10_000,
    max_keys_per_partition=2_000,
    retention_ms=0,
)

# (request_id, command, expected bytes as hex). Computed once and pasted: a change here is a
# wire-format change, which needs a new FORMAT_VERSION or a new tag, never an edit.
GOLDEN: list[tuple[str, Command, str]] = [
    (
        "r-1",
        Bootstrap(total_partitions=8, now_ms=1000),
        "940101a3722d3182b0746f74616c5f706172746974696f6e7308a66e6f775f6d73cd03e8",
    ),
    (
        "r-2",
        RegisterWorker(worker_id=W1, address="http://127.0.0.1:9001", now_ms=1001),
        "940102a3722d3283a9776f726b65725f6964a27731a761646472657373b5687474703a2f2f3132372e30"
        "2e302e313a39303031a66e6f775f6d73cd03e9",
    ),
    (
        "r-3",
        DeclareDead(
            worker_ids=(W1,),
            assignments=(
                Assignment(partition=0, owner=W2),
                Assignment(partition=1, owner=None),
            ),
            now_ms=1002,
        ),
        "940103a3722d3383aa776f726b65725f69647391a27731ab61737369676e6d656e74739282a970617274"
        "6974696f6e00a56f776e6572a2773282a9706172746974696f6e01a56f776e6572c0a66e6f775f6d73cd"
        "03ea",
    ),
    (
        "r-4",
        AssignPartitions(assignments=(Assignment(partition=2, owner=W3),), now_ms=1003),
        "940104a3722d3482ab61737369676e6d656e74739182a9706172746974696f6e02a56f776e6572a27733"
        "a66e6f775f6d73cd03eb",
    ),
    (
        "r-5",
        PartitionOnline(partition=2, epoch=1, owner=W3, now_ms=1004),
        "940105a3722d3584a9706172746974696f6e02a565706f636801a56f776e6572a27733a66e6f775f6d73"
        "cd03ec",
    ),
    (
        "r-6",
        PlanMigrations(
            moves=(Move(partition=2, source=W3, target=W2),),
            reason=MigrationReason.ADMIN,
            now_ms=1005,
        ),
        "940106a3722d3683a56d6f7665739183a9706172746974696f6e02a6736f75726365a27733a674617267"
        "6574a27732a6726561736f6ea561646d696ea66e6f775f6d73cd03ed",
    ),
    (
        "r-7",
        StartRelease(migration_id=MigrationId("m-1"), now_ms=1006),
        "940107a3722d3782ac6d6967726174696f6e5f6964a36d2d31a66e6f775f6d73cd03ee",
    ),
    (
        "r-8",
        HandOff(
            migration_id=MigrationId("m-1"),
            checkpoint=FinalCheckpoint(offset=42, uri="s3://b/p2/e1/42", epoch=1),
            now_ms=1007,
        ),
        "940108a3722d3883ac6d6967726174696f6e5f6964a36d2d31aa636865636b706f696e7483a66f666673"
        "65742aa3757269af73333a2f2f622f70322f65312f3432a565706f636801a66e6f775f6d73cd03ef",
    ),
    (
        "r-8b",
        HandOff(migration_id=MigrationId("m-1"), checkpoint=None, now_ms=1007),
        "940108a4722d386283ac6d6967726174696f6e5f6964a36d2d31aa636865636b706f696e74c0a66e6f77"
        "5f6d73cd03ef",
    ),
    (
        "r-9",
        AbortMigration(migration_id=MigrationId("m-2"), note="operator", now_ms=1008),
        "940109a3722d3983ac6d6967726174696f6e5f6964a36d2d32a46e6f7465a86f70657261746f72a66e6f"
        "775f6d73cd03f0",
    ),
    (
        "r-10",
        RecordCheckpoints(
            worker_id=W2,
            incarnation=3,
            entries=(CheckpointReport(partition=0, epoch=2, offset=17, uri="file:///c/0"),),
            now_ms=1009,
        ),
        "94010aa4722d313084a9776f726b65725f6964a27732ab696e6361726e6174696f6e03a7656e74726965"
        "739184a9706172746974696f6e00a565706f636802a66f666673657411a3757269ab66696c653a2f2f2f"
        "632f30a66e6f775f6d73cd03f1",
    ),
    (
        "r-11",
        DrainWorker(worker_id=W2, moves=(Move(partition=0, source=W2, target=W3),), now_ms=1010),
        "94010ba4722d313183a9776f726b65725f6964a27732a56d6f7665739183a9706172746974696f6e00a6"
        "736f75726365a27732a6746172676574a27733a66e6f775f6d73cd03f2",
    ),
    ("r-12", Barrier(nonce="n-1"), "94010ca4722d313281a56e6f6e6365a36e2d31"),
    (
        "r-13",
        FallBack(
            partition=3,
            epoch=4,
            checkpoint=FinalCheckpoint(offset=9, uri="file:///c/3", epoch=2),
            note="fallback",
            now_ms=1012,
        ),
        "94010da4722d313385a9706172746974696f6e03a565706f636804aa636865636b706f696e7483a66f"
        "666673657409a3757269ab66696c653a2f2f2f632f33a565706f636802a46e6f7465a866616c6c6261"
        "636ba66e6f775f6d73cd03f4",
    ),
    (
        "r-13b",
        FallBack(partition=3, epoch=5, checkpoint=None, note="replay", now_ms=1013),
        "94010da5722d31336285a9706172746974696f6e03a565706f636805aa636865636b706f696e74c0a4"
        "6e6f7465a67265706c6179a66e6f775f6d73cd03f5",
    ),
    (
        "r-14",
        MarkStuck(partition=3, epoch=6, note="stuck", now_ms=1014),
        "94010ea4722d313484a9706172746974696f6e03a565706f636806a46e6f7465a5737475636ba66e6f"
        "775f6d73cd03f6",
    ),
    (
        "r-15",
        ResetPartition(partition=3, note="reset by operator", now_ms=1015),
        "94010fa4722d313583a9706172746974696f6e03a46e6f7465b17265736574206279206f7065726174"
        "6f72a66e6f775f6d73cd03f7",
    ),
    (
        "r-16",
        ReportVersions(
            node_id="n1", min_version=1, max_version=2, package_version="0.2.0", now_ms=1016
        ),
        "940110a4722d313685a76e6f64655f6964a26e31ab6d696e5f76657273696f6e01ab6d61785f76657273"
        "696f6e02af7061636b6167655f76657273696f6ea5302e322e30a66e6f775f6d73cd03f8",
    ),
    (
        "r-17",
        FinalizeVersion(version=2, voters=("n1", "n2", "n3"), now_ms=1017),
        "940111a4722d313783a776657273696f6e02a6766f7465727393a26e31a26e32a26e33a66e6f775f6d73"
        "cd03f9",
    ),
    (
        "r-18",
        RecordBackup(
            cluster_id="c0ffee",
            applied_index=1234,
            term=3,
            sha256="ab" * 32,
            size_bytes=4096,
            created_at_ms=1018,
            now_ms=1019,
        ),
        "940112a4722d313887aa636c75737465725f6964a6633066666565ad6170706c6965645f696e646578cd"
        "04d2a47465726d03a6736861323536d94061626162616261626162616261626162616261626162616261"
        "626162616261626162616261626162616261626162616261626162616261626162616261626162aa7369"
        "7a655f6279746573cd1000ad637265617465645f61745f6d73cd03faa66e6f775f6d73cd03fb",
    ),
    (
        "r-19",
        MaintenanceOn(by="admin", reason="kernel upgrade", until_ms=1_700_003_600_000, now_ms=1019),
        "940113a4722d313984a26279a561646d696ea6726561736f6eae6b65726e656c2075706772616465a875"
        "6e74696c5f6d73cf0000018bd01c5680a66e6f775f6d73cd03fb",
    ),
    (
        "r-20",
        MaintenanceOff(by="leader", reason="its time was up (--for)", since_ms=1019, now_ms=1020),
        "940114a4722d323084a26279a66c6561646572a6726561736f6eb76974732074696d6520776173207570"
        "20282d2d666f7229a873696e63655f6d73cd03fba66e6f775f6d73cd03fc",
    ),
    (
        "r-21",
        RetireWorkers(
            worker_ids=(WorkerId("w4"), WorkerId("w9.x")), departed_by_ms=1020, now_ms=1021
        ),
        "940115a4722d323183aa776f726b65725f69647392a27734a477392e78ae64657061727465645f62795f"
        "6d73cd03fca66e6f775f6d73cd03fd",
    ),
    (
        "r-23",
        StartWarm(migration_id=MigrationId("m-7"), now_ms=1023),
        "940117a4722d323382ac6d6967726174696f6e5f6964a36d2d37a66e6f775f6d73cd03ff",
    ),
    (
        "r-24",
        StartRescale(partitions=200, by="admin", now_ms=1024),
        ("940118a4722d323483aa706172746974696f6e73ccc8a26279a561646d696ea66e6f775f6d73cd0400"),
    ),
    (
        "r-25",
        RecordCut(partition=3, epoch=7, offset=4096, uri="s3://b/cp/3-7-4096", now_ms=1025),
        (
            "940119a4722d323585a9706172746974696f6e03a565706f636807a66f6666736574cd1000a37572"
            "69b273333a2f2f622f63702f332d372d34303936a66e6f775f6d73cd0401"
        ),
    ),
    (
        "r-26",
        StatesBuilt(
            generation=1,
            checkpoints=(
                BuiltCheckpoint(partition=0, offset=1 << 40, uri="s3://b/cp/0-9"),
                BuiltCheckpoint(partition=1, offset=1 << 40, uri="s3://b/cp/1-9"),
            ),
            now_ms=1026,
        ),
        (
            "94011aa4722d323683aa67656e65726174696f6e01ab636865636b706f696e74739283a970617274"
            "6974696f6e00a66f6666736574cf0000010000000000a3757269ad73333a2f2f622f63702f302d39"
            "83a9706172746974696f6e01a66f6666736574cf0000010000000000a3757269ad73333a2f2f622f"
            "63702f312d39a66e6f775f6d73cd0402"
        ),
    ),
    (
        "r-27",
        FinishRescale(generation=1, now_ms=1027),
        "94011ba4722d323782aa67656e65726174696f6e01a66e6f775f6d73cd0403",
    ),
    (
        "r-28",
        CreatePipeline(
            name=PipelineName("orders"),
            spec_text=SPEC_TEXT,
            spec_sha256=SPEC_SHA256,
            partitions=16,
            pool=(Label(key="gpu", value="true"),),
            settings=SETTINGS,
            by="admin",
            now_ms=1028,
        ),
        (
            "94011ca4722d323888a46e616d65a66f7264657273a9737065635f74657874d94e5b736368656d61"
            "5d0a64646c203d20226b20535452494e47220a6b6579203d20226b220a0a5b5b6167677265676174"
            "696f6e735d5d0a6e616d65203d20226e220a666e203d2022636f756e74220aab737065635f736861"
            "323536d9406233363834383439666365656438316561396330376635343466393233336337386265"
            "3639373363393764643631313539306330663031663237306636643936aa706172746974696f6e73"
            "10a4706f6f6c9182a36b6579a3677075a576616c7565a474727565a873657474696e677384b16261"
            "7463685f696e74657276616c5f6d73cd01f4b6636865636b706f696e745f696e74657276616c5f6d"
            "73cd2710b66d61785f6b6579735f7065725f706172746974696f6ecd07d0ac726574656e74696f6e"
            "5f6d7300a26279a561646d696ea66e6f775f6d73cd0404"
        ),
    ),
    (
        "r-29",
        ActivatePipeline(name=PipelineName("orders"), incarnation=1, now_ms=1029),
        (
            "94011da4722d323983a46e616d65a66f7264657273ab696e6361726e6174696f6e01a66e6f775f6d"
            "73cd0405"
        ),
    ),
    (
        "r-30",
        PausePipeline(name=PipelineName("orders"), by="admin", now_ms=1030),
        ("94011ea4722d333083a46e616d65a66f7264657273a26279a561646d696ea66e6f775f6d73cd0406"),
    ),
    (
        "r-31",
        ResumePipeline(name=PipelineName("orders"), by="admin", now_ms=1031),
        ("94011fa4722d333183a46e616d65a66f7264657273a26279a561646d696ea66e6f775f6d73cd0407"),
    ),
    (
        "r-32",
        DropPipeline(name=PipelineName("orders"), purge=True, by="admin", now_ms=1032),
        (
            "940120a4722d333284a46e616d65a66f7264657273a57075726765c3a26279a561646d696ea66e6f"
            "775f6d73cd0408"
        ),
    ),
    (
        "r-33",
        ForgetPipeline(name=PipelineName("orders"), incarnation=1, now_ms=1033),
        (
            "940121a4722d333383a46e616d65a66f7264657273ab696e6361726e6174696f6e01a66e6f775f6d"
            "73cd0409"
        ),
    ),
    (
        "r-34",
        ProfileWorker(
            worker_id=WorkerId("w3"),
            incarnation=2,
            labels=(Label(key="gpu", value="true"),),
            slots=40,
            now_ms=1034,
        ),
        (
            "940122a4722d333485a9776f726b65725f6964a27733ab696e6361726e6174696f6e02a66c616265"
            "6c739182a36b6579a3677075a576616c7565a474727565a5736c6f747328a66e6f775f6d73cd040a"
        ),
    ),
    (
        "r-35",
        IssueToken(
            name=PipelineName("tok"),
            token_id="ab12cd34ef56",
            role=TokenRole.OPERATE,
            sha256=TOKEN_SHA256,
            by="admin",
            now_ms=1035,
        ),
        "940123a4722d333586a46e616d65a3746f6ba8746f6b656e5f6964ac616231326364333465663536a4726f6c65a76f706572617465a6736861323536d94038663331336439383430303465396334636264396632306338316366316565356238616531363565323930653432393536373564626232363364333830616638a26279a561646d696ea66e6f775f6d73cd040b",
    ),
    (
        "r-36",
        RevokeToken(name=PipelineName("tok"), token_id="ab12cd34ef56", by="admin", now_ms=1036),
        "940124a4722d333684a46e616d65a3746f6ba8746f6b656e5f6964ac616231326364333465663536a26279a561646d696ea66e6f775f6d73cd040c",
    ),
    # A recorded pipeline's rescale and spec update (command-set version 7).
    (
        "r-38",
        StartPipelineRescale(
            name=PipelineName("orders"),
            incarnation=1,
            partitions=4,
            spec_text="",
            spec_sha256="",
            by="admin",
            now_ms=1038,
        ),
        "940126a4722d333887a46e616d65a66f7264657273ab696e6361726e6174696f6e01aa706172746974696f6e7304a9737065635f74657874a0ab737065635f736861323536a0a26279a561646d696ea66e6f775f6d73cd040e",
    ),
    (
        "r-39",
        RecordPipelineCut(
            name=PipelineName("orders"),
            incarnation=1,
            partition=1_048_576,
            epoch=3,
            offset=120,
            uri="s3://b/c",
            now_ms=1039,
        ),
        "940127a4722d333987a46e616d65a66f7264657273ab696e6361726e6174696f6e01a9706172746974696f6ece00100000a565706f636803a66f666673657478a3757269a873333a2f2f622f63a66e6f775f6d73cd040f",
    ),
    (
        "r-40",
        PipelineStatesBuilt(
            name=PipelineName("orders"),
            incarnation=1,
            generation=1,
            checkpoints=(BuiltCheckpoint(partition=1_048_580, offset=0, uri="s3://b/n"),),
            now_ms=1040,
        ),
        "940128a4722d343085a46e616d65a66f7264657273ab696e6361726e6174696f6e01aa67656e65726174696f6e01ab636865636b706f696e74739183a9706172746974696f6ece00100004a66f666673657400a3757269a873333a2f2f622f6ea66e6f775f6d73cd0410",
    ),
    (
        "r-41",
        FinishPipelineRescale(
            name=PipelineName("orders"), incarnation=1, generation=1, now_ms=1041
        ),
        "940129a4722d343184a46e616d65a66f7264657273ab696e6361726e6174696f6e01aa67656e65726174696f6e01a66e6f775f6d73cd0411",
    ),
]


def _golden(cls: type[Command]) -> Command:
    """GOLDEN's example of command `cls`."""
    return next(cmd for _, cmd, _ in GOLDEN if isinstance(cmd, cls))


def test_every_command_has_a_golden_example() -> None:
    assert {type(cmd) for _, cmd, _ in GOLDEN} == set(COMMAND_TYPES)


def test_tags_are_fixed() -> None:
    # Tags are part of the wire format: never renumber, never reuse.
    assert [cls.TAG for cls in COMMAND_TYPES] == [*range(1, 22), *range(23, 37), *range(38, 42)]


@pytest.mark.parametrize(("request_id", "cmd", "hex_bytes"), GOLDEN, ids=lambda v: str(v)[:12])
def test_golden_bytes(request_id: str, cmd: Command, hex_bytes: str) -> None:
    assert encode_command(cmd, request_id).hex() == hex_bytes
    assert decode_command(bytes.fromhex(hex_bytes)) == (request_id, cmd)


# A value a later command-set version added inside a command keeps its bytes, like a tag.
GOLDEN_VALUES: list[tuple[str, Command, str]] = [
    (
        "r-37",
        IssueToken(
            name=PipelineName("tok"),
            token_id="ab12cd34ef56",
            role=TokenRole.PRODUCE,  # command-set version 7
            sha256=TOKEN_SHA256,
            by="admin",
            now_ms=1037,
        ),
        "940123a4722d333786a46e616d65a3746f6ba8746f6b656e5f6964ac616231326364333465663536a4726f6c65a770726f64756365a6736861323536d94038663331336439383430303465396334636264396632306338316366316565356238616531363565323930653432393536373564626232363364333830616638a26279a561646d696ea66e6f775f6d73cd040d",
    ),
]


@pytest.mark.parametrize(("request_id", "cmd", "hex_bytes"), GOLDEN_VALUES, ids=lambda v: str(v))
def test_golden_bytes_of_later_values(request_id: str, cmd: Command, hex_bytes: str) -> None:
    test_golden_bytes(request_id, cmd, hex_bytes)


# --- strategies (also used by the machine tests) ----------------------------------------------

ids = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=8)
worker_ids = ids.map(WorkerId)
migration_ids = ids.map(MigrationId)
pipeline_names = ids.map(PipelineName)
nats = st.integers(min_value=0, max_value=2**63 - 1)
small = st.integers(min_value=0, max_value=20)
short_text = st.text(max_size=20)
request_ids = st.text(min_size=1, max_size=REQUEST_ID_LEN_MAX)
moves = st.builds(Move, partition=small, source=worker_ids, target=worker_ids)
assignments = st.builds(Assignment, partition=small, owner=st.none() | worker_ids)

commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(Bootstrap, total_partitions=nats, now_ms=nats),
    st.builds(RegisterWorker, worker_id=worker_ids, address=ids, now_ms=nats),
    st.builds(
        DeclareDead,
        worker_ids=st.lists(worker_ids, max_size=4).map(tuple),
        assignments=st.lists(assignments, max_size=4).map(tuple),
        now_ms=nats,
    ),
    st.builds(
        AssignPartitions, assignments=st.lists(assignments, max_size=4).map(tuple), now_ms=nats
    ),
    st.builds(PartitionOnline, partition=small, epoch=nats, owner=worker_ids, now_ms=nats),
    st.builds(
        PlanMigrations,
        moves=st.lists(moves, max_size=4).map(tuple),
        reason=st.sampled_from(MigrationReason),
        now_ms=nats,
    ),
    st.builds(StartRelease, migration_id=migration_ids, now_ms=nats),
    st.builds(
        HandOff,
        migration_id=migration_ids,
        checkpoint=st.none() | st.builds(FinalCheckpoint, offset=nats, uri=short_text, epoch=nats),
        now_ms=nats,
    ),
    st.builds(AbortMigration, migration_id=migration_ids, note=short_text, now_ms=nats),
    st.builds(
        RecordCheckpoints,
        worker_id=worker_ids,
        incarnation=nats,
        entries=st.lists(
            st.builds(CheckpointReport, partition=small, epoch=nats, offset=nats, uri=short_text),
            max_size=4,
        ).map(tuple),
        now_ms=nats,
    ),
    st.builds(
        DrainWorker, worker_id=worker_ids, moves=st.lists(moves, max_size=4).map(tuple), now_ms=nats
    ),
    st.builds(Barrier, nonce=short_text),
    st.builds(
        FallBack,
        partition=small,
        epoch=nats,
        checkpoint=st.none() | st.builds(FinalCheckpoint, offset=nats, uri=short_text, epoch=nats),
        note=short_text,
        now_ms=nats,
    ),
    st.builds(MarkStuck, partition=small, epoch=nats, note=short_text, now_ms=nats),
    st.builds(ResetPartition, partition=small, note=short_text, now_ms=nats),
    st.builds(
        RetireWorkers,
        worker_ids=st.lists(worker_ids, max_size=4).map(tuple),
        departed_by_ms=nats,
        now_ms=nats,
    ),
    st.builds(
        MaintenanceOn, by=short_text, reason=short_text, until_ms=st.none() | nats, now_ms=nats
    ),
    st.builds(
        MaintenanceOff, by=short_text, reason=short_text, since_ms=st.none() | nats, now_ms=nats
    ),
    st.builds(StartWarm, migration_id=migration_ids, now_ms=nats),
    st.builds(StartRescale, partitions=nats, by=short_text, now_ms=nats),
    st.builds(RecordCut, partition=nats, epoch=nats, offset=nats, uri=short_text, now_ms=nats),
    st.builds(
        StatesBuilt,
        generation=nats,
        checkpoints=st.lists(
            st.builds(BuiltCheckpoint, partition=nats, offset=nats, uri=short_text), max_size=4
        ).map(tuple),
        now_ms=nats,
    ),
    st.builds(FinishRescale, generation=nats, now_ms=nats),
    st.builds(
        CreatePipeline,
        name=pipeline_names,
        spec_text=st.text(min_size=1, max_size=40),
        spec_sha256=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        partitions=nats,
        pool=st.lists(st.builds(Label, key=ids, value=ids), max_size=3).map(tuple),
        settings=st.builds(
            PipelineSettings,
            batch_interval_ms=nats,
            checkpoint_interval_ms=nats,
            max_keys_per_partition=nats,
            retention_ms=nats,
        ),
        by=short_text,
        now_ms=nats,
    ),
    st.builds(ActivatePipeline, name=pipeline_names, incarnation=nats, now_ms=nats),
    st.builds(PausePipeline, name=pipeline_names, by=short_text, now_ms=nats),
    st.builds(ResumePipeline, name=pipeline_names, by=short_text, now_ms=nats),
    st.builds(DropPipeline, name=pipeline_names, purge=st.booleans(), by=short_text, now_ms=nats),
    st.builds(ForgetPipeline, name=pipeline_names, incarnation=nats, now_ms=nats),
    st.builds(
        ProfileWorker,
        worker_id=ids.map(WorkerId),
        incarnation=nats,
        labels=st.lists(st.builds(Label, key=ids, value=ids), max_size=3).map(tuple),
        slots=nats,
        now_ms=nats,
    ),
    st.builds(
        IssueToken,
        name=pipeline_names,
        token_id=ids,
        role=st.sampled_from(TokenRole),
        sha256=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        by=short_text,
        now_ms=nats,
    ),
    st.builds(RevokeToken, name=pipeline_names, token_id=ids, by=short_text, now_ms=nats),
)

json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def tuples(items: st.SearchStrategy[object]) -> st.SearchStrategy[tuple[object, ...]]:
    return st.lists(items, max_size=4).map(tuple)


new_migrations = st.builds(
    NewMigration, id=migration_ids, partition=small, source=worker_ids, target=worker_ids
)
verdicts = st.builds(
    CheckpointVerdict,
    partition=small,
    status=st.sampled_from(["accepted", "fenced"]),
    reason=st.none() | short_text,
)
result_values: st.SearchStrategy[CommandResult] = st.one_of(
    st.builds(BootstrapResult, total_partitions=nats, created=st.booleans()),
    st.builds(RegisterResult, worker_id=worker_ids, incarnation=nats, rehosted=tuples(small)),
    st.builds(
        DeclareDeadResult,
        dead=tuples(worker_ids),
        reassigned=nats,
        handed_off=tuples(migration_ids),
        aborted=tuples(migration_ids),
    ),
    st.builds(AssignResult, assigned=nats),
    st.builds(
        OnlineResult,
        partition=small,
        epoch=nats,
        changed=st.booleans(),
        migration_done=st.none() | migration_ids,
        left=st.none() | worker_ids,
    ),
    st.builds(PlanResult, migrations=tuples(new_migrations)),
    st.builds(
        ReleaseResult,
        migration_id=migration_ids,
        phase=st.sampled_from(MigrationPhase),
        changed=st.booleans(),
    ),
    st.builds(
        HandOffResult,
        migration_id=migration_ids,
        partition=small,
        owner=st.none() | worker_ids,
        epoch=nats,
        checkpoint=st.sampled_from([None, "final", "last_accepted"]),
        changed=st.booleans(),
    ),
    st.builds(
        AbortResult,
        migration_id=migration_ids,
        phase=st.sampled_from(MigrationPhase),
        rehosted=st.booleans(),
    ),
    st.builds(CheckpointsResult, results=tuples(verdicts)),
    st.builds(
        DrainResult,
        worker_id=worker_ids,
        state=st.sampled_from(WorkerState),
        migrations=tuples(new_migrations),
    ),
    st.builds(BarrierResult, nonce=short_text),
    st.builds(
        FallBackResult, partition=small, epoch=nats, offset=st.none() | nats, earlier_left=small
    ),
    st.builds(StuckResult, partition=small, stuck=short_text),
    st.builds(ResetResult, partition=small, epoch=nats),
    st.builds(RetireResult, retired=nats, kept=nats, incarnation_floor=nats),
    st.builds(MaintenanceResult, maintenance=st.booleans(), changed=st.booleans()),
    st.builds(
        RescaleResult,
        generation=nats,
        partitions=nats,
        previous=nats,
        phase=st.sampled_from(RescalePhase),
    ),
    st.builds(
        CutResult,
        partition=nats,
        status=st.sampled_from(["accepted", "fenced"]),
        phase=st.sampled_from(RescalePhase),
    ),
    st.builds(
        PipelineResult,
        name=pipeline_names,
        incarnation=nats,
        state=st.none() | st.sampled_from(PipelineState),
        spec_version=nats,
        changed=st.booleans(),
    ),
)
results = st.builds(Ok, value=result_values) | st.builds(
    Rejected,
    code=st.sampled_from(sorted(REJECT_CODES)),
    message=short_text,
    field=st.none() | short_text,
)


@given(request_ids, commands)
@settings(max_examples=300)
def test_command_round_trip(request_id: str, cmd: Command) -> None:
    data = encode_command(cmd, request_id)
    assert decode_command(data) == (request_id, cmd)
    assert encode_command(*reversed(decode_command(data))) == data  # type: ignore[arg-type]


@given(results)
def test_result_round_trip(result: Ok | Rejected) -> None:
    assert decode_result(encode_result(result)) == result


# --- malformed commands ------------------------------------------------------------------------


def _envelope(tag: int, body: object, request_id: object = "r", version: object = 1) -> bytes:
    return msgpack.packb([version, tag, request_id, body], use_bin_type=True)  # type: ignore[no-any-return]


def _field_of(data: bytes) -> str | None:
    with pytest.raises(CodecError) as info:
        decode_command(data)
    assert isinstance(info.value, ValueError)
    return info.value.field


def test_bad_msgpack_and_shapes() -> None:
    for data in [b"", b"\xc1", b"\x94\x01", msgpack.packb([1, 2, 3]), msgpack.packb({"a": 1})]:
        with pytest.raises(CodecError):
            decode_command(data)
    good = encode_command(Barrier(nonce="x"), "r")
    with pytest.raises(CodecError):
        decode_command(good + b"\x00")  # trailing bytes


def test_version_tag_and_request_id() -> None:
    body = {"nonce": "x"}
    assert _field_of(_envelope(12, body, version=2)) == "version"
    assert _field_of(_envelope(12, body, version=True)) == "version"
    with pytest.raises(CodecError, match="unknown command tag 99"):
        decode_command(_envelope(99, body))
    assert _field_of(_envelope(max(COMMAND_BY_TAG) + 1, body)) == "tag"
    assert _field_of(_envelope(12, body, request_id=7)) == "request_id"
    assert _field_of(_envelope(12, body, request_id="")) == "request_id"
    assert _field_of(_envelope(12, body, request_id="x" * (REQUEST_ID_LEN_MAX + 1))) == "request_id"
    assert decode_command(_envelope(12, body, request_id="x" * REQUEST_ID_LEN_MAX))[0] == "x" * 64


def test_missing_extra_and_mistyped_fields() -> None:
    assert _field_of(_envelope(1, {"total_partitions": 3})) == "now_ms"
    assert _field_of(_envelope(1, {"total_partitions": 3, "now_ms": 1, "x": 1})) == "x"
    assert _field_of(_envelope(1, {"total_partitions": True, "now_ms": 1})) == "total_partitions"
    assert _field_of(_envelope(1, {"total_partitions": 1.0, "now_ms": 1})) == "total_partitions"
    assert _field_of(_envelope(1, {"total_partitions": -1, "now_ms": 1})) == "total_partitions"
    assert (
        _field_of(_envelope(1, {"total_partitions": 2**64 - 1, "now_ms": 1})) == "total_partitions"
    )
    assert _field_of(_envelope(1, [3, 1])) is None
    online = {"partition": 1, "epoch": -1, "owner": "w", "now_ms": 1}
    assert _field_of(_envelope(5, online)) == "epoch"
    assert _field_of(_envelope(5, online | {"epoch": 1, "owner": "bad id!"})) == "owner"
    assert _field_of(_envelope(5, online | {"epoch": 1, "owner": b"w"})) == "owner"
    assert _field_of(_envelope(5, online | {"epoch": 1, "owner": None})) == "owner"


def test_nested_records_and_bounds() -> None:
    move = {"partition": 0, "source": "a", "target": "b"}
    plan = {"moves": [move, move | {"partition": -2}], "reason": "admin", "now_ms": 1}
    assert _field_of(_envelope(6, plan)) == "moves[1].partition"
    assert _field_of(_envelope(6, plan | {"moves": [move], "reason": "ADMIN"})) == "reason"
    assert _field_of(_envelope(6, plan | {"moves": [move | {"to": "c"}]})) == "moves[0].to"
    assert _field_of(_envelope(6, plan | {"moves": move})) == "moves"
    too_many = {"worker_ids": ["a"] * (BATCH_ITEMS_MAX + 1), "assignments": [], "now_ms": 1}
    assert _field_of(_envelope(3, too_many)) == "worker_ids"
    entry = {"partition": 0, "epoch": 0, "offset": 0, "uri": "u" * (URI_LEN_MAX + 1)}
    ckpt = {"worker_id": "w", "incarnation": 1, "entries": [entry], "now_ms": 1}
    assert _field_of(_envelope(10, ckpt)) == "entries[0].uri"
    register = {"worker_id": "w", "address": "", "now_ms": 1}
    assert _field_of(_envelope(2, register)) == "address"
    assert _field_of(_envelope(2, register | {"address": "a" * 513})) == "address"
    hand = {"migration_id": "m-1", "checkpoint": {"offset": 1, "uri": "u"}, "now_ms": 1}
    assert _field_of(_envelope(8, hand)) == "checkpoint.epoch"


def test_malformed_results() -> None:
    for obj in [[], [FORMAT_VERSION, "ok"], [FORMAT_VERSION, "ok", []], [2, "ok", {}],
                [FORMAT_VERSION, "rejected", "conflict", "m", "409", None],
                [FORMAT_VERSION, "rejected", "c", "m", 409, None],  # no such code
                [FORMAT_VERSION, "rejected", ["conflict"], "m", 409, None], "x"]:  # fmt: skip
        with pytest.raises(CodecError):
            decode_result(msgpack.packb(obj))


def test_malformed_result_values() -> None:
    """An Ok's value decodes only as a result type: its keys in their order, each valid."""
    ok = {"partition": 3, "epoch": 4}  # ResetResult's
    assert decode_result(msgpack.packb([FORMAT_VERSION, "ok", ok])) == Ok(
        value=ResetResult(partition=3, epoch=4)
    )
    for value in [
        {},
        {"epoch": 4, "partition": 3},  # the keys out of order
        {"partition": 3, "epoch": 4, "extra": 1},
        {"partition": "3", "epoch": 4},
        {"partition": 3, "epoch": -1},
        {"total_partitions": 1, "created": 1},  # an int is not a bool
        {"migrations": [{"id": "m-1", "partition": 0, "to": "w2", "from": "w1"}]},
        {"results": [{"partition": 0, "status": "maybe", "reason": None}]},
        {"migration_id": "m-1", "phase": "sideways", "changed": True},
        {"nonce": "n" * 65},
    ]:
        with pytest.raises(CodecError):
            decode_result(msgpack.packb([FORMAT_VERSION, "ok", value]))


def test_a_malformed_result_value_names_the_field_at_fault() -> None:
    """The path is built only once a value is known to be bad, and still names the field."""
    for value, field in [
        ({"worker_id": "no spaces", "incarnation": 1, "rehosted": []}, "value.worker_id"),
        ({"worker_id": "w", "incarnation": 1, "rehosted": [0, "1"]}, "value.rehosted[1]"),
        (
            {"migrations": [{"id": "m-1", "partition": -1, "from": "w1", "to": "w2"}]},
            "value.migrations[0].partition",
        ),
        (
            {"results": [{"partition": 0, "status": "maybe", "reason": None}]},
            "value.results[0].status",
        ),
    ]:
        with pytest.raises(CodecError) as info:
            decode_result(msgpack.packb([FORMAT_VERSION, "ok", value]))
        assert info.value.field == field
        assert info.value.message.startswith(field)


# Commands applied in order, each with its result as hex: every result type and branch. Computed
# once and pasted: results sit in the replicated request table, so snapshots carry these
# bytes; a change here is a wire-format change.
# RecordCut's accepted results for old partitions 0..5, the last one ending CUTTING.
_CUT_RESULTS = [
    "9301a26f6b83a9706172746974696f6e00a6737461747573a86163636570746564a57068617365a743555454494e47",
    "9301a26f6b83a9706172746974696f6e01a6737461747573a86163636570746564a57068617365a743555454494e47",
    "9301a26f6b83a9706172746974696f6e02a6737461747573a86163636570746564a57068617365a743555454494e47",
    "9301a26f6b83a9706172746974696f6e03a6737461747573a86163636570746564a57068617365a743555454494e47",
    "9301a26f6b83a9706172746974696f6e04a6737461747573a86163636570746564a57068617365a743555454494e47",
    "9301a26f6b83a9706172746974696f6e05a6737461747573a86163636570746564a57068617365a64d4f56494e47",
]
# What each pipeline command of GOLDEN answers, in order (GOLDEN_RESULTS applies them).
_CREATE = next(cmd for _, cmd, _ in GOLDEN if isinstance(cmd, CreatePipeline))
_PIPELINE_RESULTS = [
    (
        "9301a26f6b85a8706970656c696e65a66f7264657273ab696e6361726e6174696f6e01a573746174"
        "65a86372656174696e67ac737065635f76657273696f6e01a76368616e676564c3"
    ),
    (
        "9301a26f6b85a8706970656c696e65a66f7264657273ab696e6361726e6174696f6e01a573746174"
        "65a6616374697665ac737065635f76657273696f6e01a76368616e676564c3"
    ),
    (
        "9301a26f6b85a8706970656c696e65a66f7264657273ab696e6361726e6174696f6e01a573746174"
        "65a6706175736564ac737065635f76657273696f6e01a76368616e676564c3"
    ),
    (
        "9301a26f6b85a8706970656c696e65a66f7264657273ab696e6361726e6174696f6e01a573746174"
        "65a6616374697665ac737065635f76657273696f6e01a76368616e676564c3"
    ),
    (
        "9301a26f6b85a8706970656c696e65a66f7264657273ab696e6361726e6174696f6e01a573746174"
        "65a864726f7070696e67ac737065635f76657273696f6e01a76368616e676564c3"
    ),
    (
        "9301a26f6b85a8706970656c696e65a66f7264657273ab696e6361726e6174696f6e01a573746174"
        "65c0ac737065635f76657273696f6e01a76368616e676564c3"
    ),
]
GOLDEN_RESULTS: list[tuple[Command, str]] = [
    (
        Bootstrap(total_partitions=6, now_ms=1),
        "9301a26f6b82b0746f74616c5f706172746974696f6e7306a763726561746564c3",
    ),
    (
        Bootstrap(total_partitions=6, now_ms=2),
        "9301a26f6b82b0746f74616c5f706172746974696f6e7306a763726561746564c2",
    ),
    (
        RegisterWorker(worker_id=W1, address="http://a:1", now_ms=3),
        "9301a26f6b83a9776f726b65725f6964a27731ab696e6361726e6174696f6e01a87265686f7374656490",
    ),
    (
        RegisterWorker(worker_id=W2, address="http://b:1", now_ms=3),
        "9301a26f6b83a9776f726b65725f6964a27732ab696e6361726e6174696f6e01a87265686f7374656490",
    ),
    (
        RegisterWorker(worker_id=W3, address="http://c:1", now_ms=3),
        "9301a26f6b83a9776f726b65725f6964a27733ab696e6361726e6174696f6e01a87265686f7374656490",
    ),
    (
        AssignPartitions(
            assignments=tuple(Assignment(partition=p, owner=[W1, W2, W3][p % 3]) for p in range(6)),
            now_ms=4,
        ),
        "9301a26f6b81a861737369676e656406",
    ),
    (
        PartitionOnline(partition=0, epoch=1, owner=W1, now_ms=5),
        (
            "9301a26f6b85a9706172746974696f6e00a565706f636801a76368616e676564c3ae6d69"
            "67726174696f6e5f646f6e65c0a46c656674c0"
        ),
    ),
    (
        PartitionOnline(partition=0, epoch=1, owner=W1, now_ms=6),
        (
            "9301a26f6b85a9706172746974696f6e00a565706f636801a76368616e676564c2ae6d69"
            "67726174696f6e5f646f6e65c0a46c656674c0"
        ),
    ),
    (
        RecordCheckpoints(
            worker_id=W1,
            incarnation=1,
            entries=(
                CheckpointReport(partition=0, epoch=1, offset=5, uri="s3://x/0"),
                CheckpointReport(partition=1, epoch=1, offset=5, uri="s3://x/1"),
            ),
            now_ms=7,
        ),
        (
            "9301a26f6b81a7726573756c74739283a9706172746974696f6e00a6737461747573a861"
            "63636570746564a6726561736f6ec083a9706172746974696f6e01a6737461747573a666"
            "656e636564a6726561736f6ead6e6f7420746865206f776e6572"
        ),
    ),
    (
        PlanMigrations(
            moves=(
                Move(partition=0, source=W1, target=W2),
                Move(partition=1, source=W2, target=W3),
            ),
            reason=MigrationReason.ADMIN,
            now_ms=8,
        ),
        (
            "9301a26f6b81aa6d6967726174696f6e739284a26964a36d2d31a9706172746974696f6e"
            "00a466726f6da27731a2746fa2773284a26964a36d2d32a9706172746974696f6e01a466"
            "726f6da27732a2746fa27733"
        ),
    ),
    (
        AbortMigration(migration_id=MigrationId("m-2"), note="changed my mind", now_ms=9),
        (
            "9301a26f6b83ac6d6967726174696f6e5f6964a36d2d32a57068617365a761626f727465"
            "64a87265686f73746564c2"
        ),
    ),
    (
        StartRelease(migration_id=MigrationId("m-1"), now_ms=10),
        (
            "9301a26f6b83ac6d6967726174696f6e5f6964a36d2d31a57068617365a972656c656173"
            "696e67a76368616e676564c3"
        ),
    ),
    (
        StartRelease(migration_id=MigrationId("m-1"), now_ms=11),
        (
            "9301a26f6b83ac6d6967726174696f6e5f6964a36d2d31a57068617365a972656c656173"
            "696e67a76368616e676564c2"
        ),
    ),
    (
        HandOff(migration_id=MigrationId("m-1"), checkpoint=None, now_ms=12),
        (
            "9301a26f6b86ac6d6967726174696f6e5f6964a36d2d31a9706172746974696f6e00a56f"
            "776e6572a27732a565706f636802aa636865636b706f696e74ad6c6173745f6163636570"
            "746564a76368616e676564c3"
        ),
    ),
    (
        HandOff(migration_id=MigrationId("m-1"), checkpoint=None, now_ms=13),
        (
            "9301a26f6b86ac6d6967726174696f6e5f6964a36d2d31a9706172746974696f6e00a56f"
            "776e6572a27732a565706f636802aa636865636b706f696e74c0a76368616e676564c2"
        ),
    ),
    (
        PartitionOnline(partition=0, epoch=2, owner=W2, now_ms=14),
        (
            "9301a26f6b85a9706172746974696f6e00a565706f636802a76368616e676564c3ae6d69"
            "67726174696f6e5f646f6e65a36d2d31a46c656674c0"
        ),
    ),
    (
        RegisterWorker(worker_id=W4, address="http://d:1", now_ms=15),
        "9301a26f6b83a9776f726b65725f6964a27734ab696e6361726e6174696f6e01a87265686f7374656490",
    ),
    (
        DrainWorker(worker_id=W3, moves=(Move(partition=2, source=W3, target=W4),), now_ms=16),
        (
            "9301a26f6b83a9776f726b65725f6964a27733a57374617465a8647261696e696e67aa6d"
            "6967726174696f6e739184a26964a36d2d33a9706172746974696f6e02a466726f6da277"
            "33a2746fa27734"
        ),
    ),
    (
        DeclareDead(
            worker_ids=(W3,),
            assignments=(Assignment(partition=2, owner=W4), Assignment(partition=5, owner=W1)),
            now_ms=17,
        ),
        (
            "9301a26f6b84a46465616491a27733aa726561737369676e656402aa68616e6465645f6f"
            "666691a36d2d33a761626f7274656490"
        ),
    ),
    (
        RecordCheckpoints(
            worker_id=W1,
            incarnation=1,
            entries=(
                CheckpointReport(partition=3, epoch=1, offset=9, uri="s3://x/3"),
                CheckpointReport(partition=3, epoch=1, offset=12, uri="s3://x/3b"),
            ),
            now_ms=18,
        ),
        (
            "9301a26f6b81a7726573756c74739283a9706172746974696f6e03a6737461747573a861"
            "63636570746564a6726561736f6ec083a9706172746974696f6e03a6737461747573a861"
            "63636570746564a6726561736f6ec0"
        ),
    ),
    (
        RegisterWorker(worker_id=W1, address="http://a:2", now_ms=19),
        (
            "9301a26f6b83a9776f726b65725f6964a27731ab696e6361726e6174696f6e02a8726568"
            "6f73746564920305"
        ),
    ),
    (
        FallBack(
            partition=3,
            epoch=2,
            checkpoint=FinalCheckpoint(offset=9, uri="s3://x/3", epoch=1),
            note="lost s3://x/3b",
            now_ms=20,
        ),
        (
            "9301a26f6b84a9706172746974696f6e03a565706f636803a66f666673657409ac656172"
            "6c6965725f6c65667400"
        ),
    ),
    (
        MarkStuck(partition=3, epoch=3, note="no way back", now_ms=21),
        "9301a26f6b82a9706172746974696f6e03a5737475636bab6e6f20776179206261636b",
    ),
    (
        ResetPartition(partition=3, note="reset by operator", now_ms=22),
        "9301a26f6b82a9706172746974696f6e03a565706f636804",
    ),
    (
        DrainWorker(worker_id=W4, moves=(Move(partition=2, source=W4, target=W2),), now_ms=23),
        (
            "9301a26f6b83a9776f726b65725f6964a27734a57374617465a8647261696e696e67aa6d"
            "6967726174696f6e739184a26964a36d2d34a9706172746974696f6e02a466726f6da277"
            "34a2746fa27732"
        ),
    ),
    (
        StartRelease(migration_id=MigrationId("m-4"), now_ms=24),
        (
            "9301a26f6b83ac6d6967726174696f6e5f6964a36d2d34a57068617365a972656c656173"
            "696e67a76368616e676564c3"
        ),
    ),
    (
        HandOff(
            migration_id=MigrationId("m-4"),
            checkpoint=FinalCheckpoint(offset=3, uri="s3://x/2", epoch=2),
            now_ms=25,
        ),
        (
            "9301a26f6b86ac6d6967726174696f6e5f6964a36d2d34a9706172746974696f6e02a56f"
            "776e6572a27732a565706f636803aa636865636b706f696e74a566696e616ca76368616e"
            "676564c3"
        ),
    ),
    (
        PartitionOnline(partition=2, epoch=3, owner=W2, now_ms=26),
        (
            "9301a26f6b85a9706172746974696f6e02a565706f636803a76368616e676564c3ae6d69"
            "67726174696f6e5f646f6e65a36d2d34a46c656674a27734"
        ),
    ),
    (Barrier(nonce="n-1"), "9301a26f6b81a56e6f6e6365a36e2d31"),
    (
        ReportVersions(
            node_id="n1", min_version=1, max_version=2, package_version="0.2.0", now_ms=30
        ),
        "9301a26f6b82a76e6f64655f6964a26e31b166696e616c697a65645f76657273696f6e01",
    ),
    (
        FinalizeVersion(version=2, voters=("n1",), now_ms=31),
        "9301a26f6b82b166696e616c697a65645f76657273696f6e02a76368616e676564c3",
    ),
    (
        RecordBackup(
            cluster_id="c1",
            applied_index=77,
            term=2,
            sha256="0f" * 32,
            size_bytes=99,
            created_at_ms=32,
            now_ms=33,
        ),
        "9301a26f6b82ad6170706c6965645f696e6465784da66c6174657374c3",
    ),
    # Maintenance mode is of command-set version 3: the node reports it, the leader finalizes.
    (
        ReportVersions(
            node_id="n1", min_version=1, max_version=3, package_version="0.3.0", now_ms=34
        ),
        "9301a26f6b82a76e6f64655f6964a26e31b166696e616c697a65645f76657273696f6e02",
    ),
    (
        FinalizeVersion(version=3, voters=("n1",), now_ms=35),
        "9301a26f6b82b166696e616c697a65645f76657273696f6e03a76368616e676564c3",
    ),
    # w3 (DEAD since 17) and w4 (LEFT since 26) are retired; w1 is ACTIVE and kept.
    (
        RetireWorkers(worker_ids=(W3, W4, W1), departed_by_ms=30, now_ms=36),
        "9301a26f6b83a77265746972656402a46b65707401b1696e6361726e6174696f6e5f666c6f6f7201",
    ),
    (
        MaintenanceOn(by="admin", reason="upgrade", until_ms=None, now_ms=36),
        "9301a26f6b82ab6d61696e74656e616e6365c3a76368616e676564c3",
    ),
    (
        MaintenanceOff(by="admin", reason="done", since_ms=36, now_ms=37),
        "9301a26f6b82ab6d61696e74656e616e6365c2a76368616e676564c3",
    ),
    # A rescale (command-set version 4) from 6 partitions to 2: six cuts (one fenced first),
    # the states built, both new partitions online, done.
    (
        ReportVersions(
            node_id="n1", min_version=1, max_version=4, package_version="0.4.0", now_ms=38
        ),
        "9301a26f6b82a76e6f64655f6964a26e31b166696e616c697a65645f76657273696f6e03",
    ),
    (
        FinalizeVersion(version=4, voters=("n1",), now_ms=38),
        "9301a26f6b82b166696e616c697a65645f76657273696f6e04a76368616e676564c3",
    ),
    (
        StartRescale(partitions=2, by="admin", now_ms=39),
        (
            "9301a26f6b84aa67656e65726174696f6e01aa706172746974696f6e7302a870726576696f757306"
            "a57068617365a743555454494e47"
        ),
    ),
    (
        RecordCut(partition=0, epoch=1, offset=10, uri="//cut0", now_ms=40),
        (
            "9301a26f6b83a9706172746974696f6e00a6737461747573a666656e636564a57068617365a74355"
            "5454494e47"
        ),
    ),
    *(
        (RecordCut(partition=p, epoch=e, offset=10, uri=f"//cut{p}", now_ms=40), hex_bytes)
        for p, (e, hex_bytes) in enumerate(zip([2, 1, 3, 4, 1, 3], _CUT_RESULTS, strict=True))
    ),
    (
        StatesBuilt(
            generation=1,
            checkpoints=tuple(
                BuiltCheckpoint(partition=q, offset=1 << 40, uri=f"//new{q}") for q in range(2)
            ),
            now_ms=41,
        ),
        (
            "9301a26f6b84aa67656e65726174696f6e01aa706172746974696f6e7302a870726576696f757306"
            "a57068617365a7484f5354494e47"
        ),
    ),
    (
        AssignPartitions(
            assignments=(Assignment(partition=0, owner=W1), Assignment(partition=1, owner=W2)),
            now_ms=42,
        ),
        "9301a26f6b81a861737369676e656402",
    ),
    (
        PartitionOnline(partition=0, epoch=6, owner=W1, now_ms=43),
        (
            "9301a26f6b85a9706172746974696f6e00a565706f636806a76368616e676564c3ae6d6967726174"
            "696f6e5f646f6e65c0a46c656674c0"
        ),
    ),
    (
        PartitionOnline(partition=1, epoch=6, owner=W2, now_ms=43),
        (
            "9301a26f6b85a9706172746974696f6e01a565706f636806a76368616e676564c3ae6d6967726174"
            "696f6e5f646f6e65c0a46c656674c0"
        ),
    ),
    (
        FinishRescale(generation=1, now_ms=44),
        (
            "9301a26f6b84aa67656e65726174696f6e01aa706172746974696f6e7302a870726576696f757306"
            "a57068617365a4444f4e45"
        ),
    ),
    # Pipeline records (command-set version 5): created, activated, paused, resumed, dropped
    # with its objects, forgotten.
    (
        ReportVersions(
            node_id="n1", min_version=1, max_version=5, package_version="0.5.0", now_ms=45
        ),
        ("9301a26f6b82a76e6f64655f6964a26e31b166696e616c697a65645f76657273696f6e04"),
    ),
    (
        FinalizeVersion(version=5, voters=("n1",), now_ms=45),
        ("9301a26f6b82b166696e616c697a65645f76657273696f6e05a76368616e676564c3"),
    ),
    *(
        (cmd, hex_bytes)
        for cmd, hex_bytes in zip(
            [
                _golden(cls)
                for cls in (
                    CreatePipeline,
                    ActivatePipeline,
                    PausePipeline,
                    ResumePipeline,
                    DropPipeline,
                    ForgetPipeline,
                )
            ],
            _PIPELINE_RESULTS,
            strict=True,
        )
    ),
    (
        ProfileWorker(
            worker_id=W2,
            incarnation=1,
            labels=(Label(key="gpu", value="true"),),
            slots=40,
            now_ms=46,
        ),
        "9301a26f6b83a9776f726b65725f6964a27732ab696e6361726e6174696f6e01a76368616e676564c3",
    ),
    # Pipeline tokens (command-set version 6): a pipeline to hold one, issued, revoked.
    (
        ReportVersions(
            node_id="n1", min_version=1, max_version=6, package_version="0.6.0", now_ms=47
        ),
        "9301a26f6b82a76e6f64655f6964a26e31b166696e616c697a65645f76657273696f6e05",
    ),
    (
        FinalizeVersion(version=6, voters=("n1",), now_ms=47),
        "9301a26f6b82b166696e616c697a65645f76657273696f6e06a76368616e676564c3",
    ),
    (
        dataclasses.replace(_CREATE, name=PipelineName("tok"), now_ms=48),
        "9301a26f6b85a8706970656c696e65a3746f6bab696e6361726e6174696f6e02a57374617465a86372656174696e67ac737065635f76657273696f6e01a76368616e676564c3",
    ),
    (
        _golden(IssueToken),
        "9301a26f6b84a8706970656c696e65a3746f6ba8746f6b656e5f6964ac616231326364333465663536a6697373756564c3a76368616e676564c3",
    ),
    (
        _golden(RevokeToken),
        "9301a26f6b84a8706970656c696e65a3746f6ba8746f6b656e5f6964ac616231326364333465663536a6697373756564c2a76368616e676564c3",
    ),
]


def test_result_golden_bytes() -> None:
    s = ClusterState()
    seen: set[type] = set()
    for i, (cmd, hex_bytes) in enumerate(GOLDEN_RESULTS):
        result = apply(s, f"r{i}", cmd)
        assert isinstance(result, Ok), (i, cmd, result)
        assert encode_result(result).hex() == hex_bytes, (i, cmd)
        assert decode_result(bytes.fromhex(hex_bytes)) == result, (i, cmd)
        seen.add(type(result.value))
    assert seen == set(get_args(CommandResult))


# --- state -------------------------------------------------------------------------------------


def busy_state() -> ClusterState:
    """A state touching every record kind: workers, owners, checkpoints, migrations, requests."""
    s = ClusterState()
    steps: list[Command] = [
        Bootstrap(total_partitions=6, now_ms=1),
        RegisterWorker(worker_id=W1, address="http://a", now_ms=2),
        RegisterWorker(worker_id=W2, address="http://b", now_ms=2),
        RegisterWorker(worker_id=W3, address="http://c", now_ms=2),
        AssignPartitions(
            assignments=tuple(Assignment(partition=p, owner=[W1, W2, W3][p % 3]) for p in range(6)),
            now_ms=3,
        ),
        PartitionOnline(partition=0, epoch=1, owner=W1, now_ms=4),
        RecordCheckpoints(
            worker_id=W1,
            incarnation=1,
            entries=(CheckpointReport(partition=0, epoch=1, offset=5, uri="s3://x/0"),),
            now_ms=5,
        ),
        PlanMigrations(
            moves=(
                Move(partition=0, source=W1, target=W2),
                Move(partition=1, source=W2, target=W3),
            ),
            reason=MigrationReason.ADMIN,
            now_ms=6,
        ),
        AbortMigration(migration_id=MigrationId("m-2"), note="changed my mind", now_ms=7),
        StartRelease(migration_id=MigrationId("m-1"), now_ms=8),
        HandOff(migration_id=MigrationId("m-1"), checkpoint=None, now_ms=8),
    ]
    for i, cmd in enumerate(steps):
        assert isinstance(apply(s, f"req-{i}", cmd), Ok), cmd
    return s


def test_state_round_trip_exactly() -> None:
    s = busy_state()
    data = encode_state(s)
    restored = decode_state(data)
    assert encode_state(restored) == data
    assert list(restored.requests) == list(s.requests)
    assert restored.requests == s.requests
    assert restored.migration_seq == s.migration_seq == 2
    assert list(restored.migrations) == list(s.migrations)
    assert restored.partitions == s.partitions
    assert restored.workers == s.workers
    assert restored.owned_by(W2) == s.owned_by(W2)
    assert restored.in_flight_migrations() == s.in_flight_migrations()


# A snapshot of one partition at epoch 1 owned by w1, ONLINE, checkpoint at offset 5, one
# history entry; written by the version before fallbacks existed. It must still decode, and a
# state that uses none of the later fields must still encode to exactly these bytes.
GOLDEN_STATE_PRE_FALLBACK = (
    "88a6666f726d617401b0746f74616c5f706172746974696f6e7301aa67656e65726174696f6e01ad6d69"
    "67726174696f6e5f73657100a7776f726b6572739196a27731a3683a3101a6616374697665cd03e8cd03"
    "e8aa706172746974696f6e739196a2773101a66f6e6c696e65c09405a32f2f6301cd03ea919401a27731"
    "a861737369676e6564cd03e9aa6d6967726174696f6e7390a8726571756573747390"
)


def _one_partition_state(**extra: object) -> ClusterState:
    s = ClusterState()
    for i, cmd in enumerate(
        [
            Bootstrap(total_partitions=1, now_ms=1000),
            RegisterWorker(worker_id=W1, address="h:1", now_ms=1000),
            AssignPartitions(assignments=(Assignment(partition=0, owner=W1),), now_ms=1001),
            PartitionOnline(partition=0, epoch=1, owner=W1, now_ms=1002),
            RecordCheckpoints(
                worker_id=W1,
                incarnation=1,
                entries=(CheckpointReport(partition=0, epoch=1, offset=5, uri="//c"),),
                now_ms=1002,
            ),
        ]
    ):
        assert isinstance(apply(s, f"r{i}", cmd), Ok)
    s.requests.clear()
    return s


def test_state_without_new_fields_encodes_as_before() -> None:
    data = encode_state(_one_partition_state())
    assert data.hex() == GOLDEN_STATE_PRE_FALLBACK
    restored = decode_state(bytes.fromhex(GOLDEN_STATE_PRE_FALLBACK))
    assert restored.partitions[0].earlier == () and restored.partitions[0].stuck == ""
    assert restored.partitions[0].history[0].note == ""


def test_fallback_fields_round_trip() -> None:
    s = _one_partition_state()
    newer = CheckpointReport(partition=0, epoch=1, offset=9, uri="//d")
    older = FinalCheckpoint(offset=5, uri="//c", epoch=1)
    steps: list[Command] = [
        RecordCheckpoints(worker_id=W1, incarnation=1, entries=(newer,), now_ms=1003),
        RegisterWorker(worker_id=W1, address="h:1", now_ms=1003),  # restart: ASSIGNING, e2
        FallBack(partition=0, epoch=2, checkpoint=older, note="lost //d", now_ms=1004),
        MarkStuck(partition=0, epoch=3, note="why", now_ms=1005),
    ]
    for i, cmd in enumerate(steps):
        assert isinstance(apply(s, f"x{i}", cmd), Ok), cmd
    part = s.partitions[0]
    assert part.stuck == "why" and part.history[-1].note == "lost //d"
    data = encode_state(s)
    restored = decode_state(data)
    assert restored.partitions == s.partitions
    assert encode_state(restored) == data


def test_retired_fields_round_trip() -> None:
    """The incarnation floor and the retired count survive a snapshot; a state that retired
    nobody encodes without them (the golden state above)."""
    s = busy_state()
    steps: list[Command] = [
        ReportVersions(node_id="n1", min_version=1, max_version=3, package_version="x", now_ms=9),
        FinalizeVersion(version=3, voters=("n1",), now_ms=9),
        RegisterWorker(worker_id=W4, address="http://d", now_ms=9),
        DrainWorker(worker_id=W4, moves=(), now_ms=10),  # owns nothing: LEFT at once
        RetireWorkers(worker_ids=(W4,), departed_by_ms=10, now_ms=11),
    ]
    for i, cmd in enumerate(steps):
        assert isinstance(apply(s, f"y{i}", cmd), Ok), cmd
    assert W4 not in s.workers and (s.incarnation_floor, s.retired_total) == (1, 1)
    data = encode_state(s)
    restored = decode_state(data)
    assert encode_state(restored) == data
    assert (restored.incarnation_floor, restored.retired_total) == (1, 1)
    back = apply(restored, "y-back", RegisterWorker(worker_id=W4, address="http://d", now_ms=12))
    assert isinstance(back, Ok) and isinstance(back.value, RegisterResult)
    assert back.value.incarnation == 2


def test_empty_state_round_trip() -> None:
    data = encode_state(ClusterState())
    assert encode_state(decode_state(data)) == data


def test_malformed_state() -> None:
    good = msgpack.unpackb(encode_state(busy_state()))
    bad_variants = [
        {**good, "format": 2},
        {**good, "total_partitions": 5},
        {k: v for k, v in good.items() if k != "requests"},
        {**good, "partitions": [[None, 0, "weird", None, None, []], *good["partitions"][1:]]},
        # 7 elements: the two trailing fields come together or not at all
        {**good, "partitions": [[None, 0, "online", None, None, [], []], *good["partitions"][1:]]},
        {
            **good,
            "partitions": [[None, 0, "online", None, None, [], [], 5], *good["partitions"][1:]],
        },
        {
            **good,
            "partitions": [
                [None, 0, "online", None, None, [], [[1, "u", 1, 1]] * 4, ""],
                *good["partitions"][1:],
            ],
        },
    ]
    for obj in bad_variants:
        with pytest.raises(CodecError):
            decode_state(msgpack.packb(obj))
    with pytest.raises(CodecError):
        decode_state(b"\xff")


# A rejection's bytes, one per code the machine refuses with. They sit in the replicated
# request table (snapshots) and in every answer a node returns to its proposer, so they do not
# change: the fifth element is the legacy status slot a mixed cluster's older nodes still read.
GOLDEN_REJECTED: list[tuple[str, str | None, str]] = [
    ("invalid", None, "9601a872656a6563746564a7696e76616c6964a16dcd0190c0"),
    ("not_found", None, "9601a872656a6563746564a96e6f745f666f756e64a16dcd0194c0"),
    (
        "conflict",
        "partition",
        "9601a872656a6563746564a8636f6e666c696374a16dcd0199a9706172746974696f6e",
    ),
    ("stale_epoch", None, "9601a872656a6563746564ab7374616c655f65706f6368a16dcd0199c0"),
    ("fenced", None, "9601a872656a6563746564a666656e636564a16dcd0199c0"),
    (
        "not_bootstrapped",
        None,
        "9601a872656a6563746564b06e6f745f626f6f747374726170706564a16dcd01f7c0",
    ),
    (
        "version_not_finalized",
        None,
        "9601a872656a6563746564b576657273696f6e5f6e6f745f66696e616c697a6564a16dcd01f7c0",
    ),
    (
        "version_unsupported",
        None,
        "9601a872656a6563746564b376657273696f6e5f756e737570706f72746564a16dcd0199c0",
    ),
    ("halted", None, "9601a872656a6563746564a668616c746564a16dcd01f7c0"),
    (
        "rescale_in_flight",
        None,
        "9601a872656a6563746564b172657363616c655f696e5f666c69676874a16dcd0199c0",
    ),
    (
        "same_partition_count",
        None,
        "9601a872656a6563746564b473616d655f706172746974696f6e5f636f756e74a16dcd0199c0",
    ),
    ("not_online", None, "9601a872656a6563746564aa6e6f745f6f6e6c696e65a16dcd0199c0"),
    ("rescaled", None, "9601a872656a6563746564a872657363616c6564a16dcd0199c0"),
    ("internal", None, "9601a872656a6563746564a8696e7465726e616ca16dcd01f4c0"),
]


@pytest.mark.parametrize(("code", "field", "hex_bytes"), GOLDEN_REJECTED)
def test_rejected_golden_bytes(code: str, field: str | None, hex_bytes: str) -> None:
    result = rejected(code, "m", field)
    assert encode_result(result).hex() == hex_bytes
    assert decode_result(bytes.fromhex(hex_bytes)) == result


def test_the_status_slot_is_read_as_no_more_than_an_int() -> None:
    # Whatever an older release wrote there, the code alone says what the rejection is.
    for slot in (409, 418, 0):
        wired = msgpack.packb([FORMAT_VERSION, "rejected", "conflict", "m", slot, "partition"])
        assert decode_result(wired) == rejected("conflict", "m", "partition")


def test_rescale_phases_keep_their_upper_case_bytes() -> None:
    """RescalePhase's values are lower case like every enum's; the state (and the results
    above) still spell them as they did when they were upper case, and read that back."""
    s = ClusterState()
    for i, (cmd, _) in enumerate(GOLDEN_RESULTS):
        apply(s, f"r{i}", cmd)
    r = s.rescale
    assert r is not None
    for phase, spelled in (
        (RescalePhase.CUTTING, "CUTTING"),
        (RescalePhase.MOVING, "MOVING"),
        (RescalePhase.HOSTING, "HOSTING"),
        (RescalePhase.DONE, "DONE"),
    ):
        assert phase.value == spelled.lower()
        s.rescale = dataclasses.replace(r, phase=phase)
        data = encode_state(s)
        assert msgpack.unpackb(data, strict_map_key=False)["rescale"][3] == spelled
        restored = decode_state(data).rescale
        assert restored is not None and restored.phase is phase
