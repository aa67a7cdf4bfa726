"""The apply handlers of a pipeline's lifecycle: CreatePipeline, ActivatePipeline,
PausePipeline, ResumePipeline, DropPipeline, ForgetPipeline; and of a pipeline's tokens,
IssueToken and RevokeToken.

Owns `ClusterState.pipelines`, `ClusterState.pipeline_seq` and `ClusterState.slot_seq`. A
create and a drop are each two commits with a commit point a new leader resumes from
(docs/design.md §3, "Pipelines"): CreatePipeline records the pipeline CREATING, and
ActivatePipeline ends the create by adding its partitions to the table (numbered from
`slot_seq`); DropPipeline records it DROPPING, and ForgetPipeline removes its partitions
(none owned) and the record. Every change is an
edge of `coordinator/core/lifecycle.py`'s pipeline table, asked before it is made, and each
handler validates completely before its one change, so a Rejected changes nothing. The
spec's text is parsed and checked by the proposer (`shared/spec/`, which runs the owner's
transform, never in apply); apply checks that the text is the one hashed. Invariants: at
most PIPELINES_MAX records, each under its own valid name, never `default`; incarnations
come from `pipeline_seq`, which only grows; a record's spec version never goes back; a
record holds at most PIPELINE_TOKENS_MAX tokens, each id once, each only as its secret's hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from coordinator.core import edits, lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    ActivatePipeline,
    CreatePipeline,
    DropPipeline,
    ForgetPipeline,
    IssueToken,
    Ok,
    PausePipeline,
    PipelineResult,
    Rejected,
    Result,
    ResumePipeline,
    RevokeToken,
    TokenResult,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    BATCH_INTERVAL_MS_MAX,
    BATCH_INTERVAL_MS_MIN,
    CHECKPOINT_INTERVAL_MS_MAX,
    CHECKPOINT_INTERVAL_MS_MIN,
    DEFAULT_PIPELINE,
    INT_VALUE_MAX,
    KEYS_PER_PARTITION_MAX,
    MAINTENANCE_BY_LEN_MAX,
    PIPELINE_PARTITIONS_MAX,
    PIPELINE_TOKENS_MAX,
    PIPELINES_MAX,
    POOL_LABELS_MAX,
    RETENTION_MS_MAX,
    SHA256_HEX_LEN,
    SPEC_TEXT_BYTES_MAX,
    SPEC_TEXT_BYTES_TOTAL_MAX,
    TOKEN_ID_LEN_MAX,
    TOTAL_PARTITIONS_MAX,
    Label,
    Migration,
    MigrationPhase,
    Pipeline,
    PipelineName,
    PipelineSettings,
    PipelineState,
    PipelineToken,
    RescalePhase,
    WorkerId,
    WorkerState,
    unassigned_partition,
    valid_id,
)

__all__ = [
    "Going",
    "activate_pipeline",
    "by_problem",
    "create_pipeline",
    "drop_pipeline",
    "forget_pipeline",
    "issue_token",
    "labels_problem",
    "of_incarnation",
    "partitions_going",
    "partitions_held",
    "pause_pipeline",
    "resume_pipeline",
    "revoke_token",
    "settings_problem",
    "spec_bytes_held",
]

L = PipelineState


def _result(p: Pipeline, *, changed: bool, gone: bool = False) -> Ok:
    return Ok(
        value=PipelineResult(
            name=p.name,
            incarnation=p.incarnation,
            state=None if gone else p.state,
            spec_version=p.spec_version,
            changed=changed,
        )
    )


def _moved(p: Pipeline, dst: PipelineState | None, command: str) -> Rejected | None:
    return lifecycle.check(
        lifecycle.PIPELINE_EDGES, p.state, dst, command, f"pipeline {p.name}", "name"
    )


def by_problem(by: str) -> Rejected | None:
    if not 1 <= len(by) <= MAINTENANCE_BY_LEN_MAX:
        return rejected("invalid", f"by must be 1..{MAINTENANCE_BY_LEN_MAX} chars", "by")
    return None


def _named(state: ClusterState, name: str) -> Pipeline | Rejected:
    """The record called `name`, or why there is none to change."""
    if not valid_id(name):
        return rejected("invalid", "name must match [A-Za-z0-9._-]{1,64}", "name")
    p = state.pipelines.get(PipelineName(name))
    if p is not None:
        return p
    if name == DEFAULT_PIPELINE:
        return rejected(
            "conflict",
            f"{DEFAULT_PIPELINE} is the cluster's own pipeline, which has no record to change",
            "name",
        )
    return rejected("not_found", f"no pipeline {name}", "name")


def of_incarnation(state: ClusterState, name: str, incarnation: int) -> Pipeline | Rejected:
    p = _named(state, name)
    if isinstance(p, Pipeline) and p.incarnation != incarnation:
        return rejected(
            "conflict",
            f"pipeline {name} is incarnation {p.incarnation}, not {incarnation}",
            "incarnation",
        )
    return p


def partitions_held(state: ClusterState) -> int:
    """The partitions the cluster's pipelines hold, or will once their rescales under way
    are done, whichever is more: each counts as the larger of its two generations."""
    return state.total_partitions + sum(
        max(p.partitions, p.rescale.partitions)
        if p.rescale is not None and p.rescale.phase is not RescalePhase.DONE
        else p.partitions
        for p in state.pipelines.values()
    )


def spec_bytes_held(state: ClusterState) -> int:
    """The spec text the records hold: each pipeline's, and each update's in flight."""
    return sum(
        len(p.spec_text.encode()) + (0 if p.rescale is None else len(p.rescale.spec_text.encode()))
        for p in state.pipelines.values()
    )


def settings_problem(s: PipelineSettings) -> Rejected | None:
    """Why `s` is outside its bounds (the field named), or None."""
    bounds = (
        ("batch_interval_ms", s.batch_interval_ms, BATCH_INTERVAL_MS_MIN, BATCH_INTERVAL_MS_MAX),
        (
            "checkpoint_interval_ms",
            s.checkpoint_interval_ms,
            max(CHECKPOINT_INTERVAL_MS_MIN, s.batch_interval_ms),
            CHECKPOINT_INTERVAL_MS_MAX,
        ),
        ("max_keys_per_partition", s.max_keys_per_partition, 1, KEYS_PER_PARTITION_MAX),
        ("retention_ms", s.retention_ms, 0, RETENTION_MS_MAX),
    )
    for name, value, low, high in bounds:
        if not low <= value <= high:
            return rejected("invalid", f"{name} must be in {low}..{high}", f"settings.{name}")
    return None


def labels_problem(labels: tuple[Label, ...], most: int, field: str) -> Rejected | None:
    """Why `labels` (a pool's selector, a worker's labels) are not at most `most` labels,
    each key and value an id, each key once; or None."""
    if len(labels) > most:
        return rejected("invalid", f"{field} has at most {most} labels", field)
    keys = [label.key for label in labels]
    if not all(valid_id(label.key) and valid_id(label.value) for label in labels):
        return rejected("invalid", f"{field}: label keys and values must be ids", field)
    if len(set(keys)) != len(keys):
        return rejected("invalid", f"{field} names each label key once", field)
    return None


def _create_problem(cmd: CreatePipeline) -> Rejected | None:
    if not valid_id(cmd.name):
        return rejected("invalid", "name must match [A-Za-z0-9._-]{1,64}", "name")
    if cmd.name == DEFAULT_PIPELINE:
        return rejected(
            "conflict", f"{DEFAULT_PIPELINE} is the cluster's own pipeline's name", "name"
        )
    problem = by_problem(cmd.by)
    if problem is not None:
        return problem
    text = cmd.spec_text.encode()
    if not 1 <= len(text) <= SPEC_TEXT_BYTES_MAX:
        return rejected("invalid", f"spec_text must be 1..{SPEC_TEXT_BYTES_MAX} bytes", "spec_text")
    if len(cmd.spec_sha256) != SHA256_HEX_LEN or hashlib.sha256(text).hexdigest() != (
        cmd.spec_sha256
    ):
        return rejected("invalid", "spec_sha256 is not the sha256 of spec_text", "spec_sha256")
    if not 1 <= cmd.partitions <= PIPELINE_PARTITIONS_MAX:
        return rejected("invalid", f"partitions must be 1..{PIPELINE_PARTITIONS_MAX}", "partitions")
    return labels_problem(cmd.pool, POOL_LABELS_MAX, "pool") or settings_problem(cmd.settings)


def create_pipeline(state: ClusterState, cmd: CreatePipeline) -> Result:
    problem = _create_problem(cmd)
    if problem is not None:
        return problem
    pool = tuple(sorted(cmd.pool))
    existing = state.pipelines.get(cmd.name)
    if existing is not None:
        same = (existing.spec_sha256, existing.partitions, existing.pool, existing.settings) == (
            cmd.spec_sha256,
            cmd.partitions,
            pool,
            cmd.settings,
        )
        if same and existing.state is not L.DROPPING:
            # A create sent again (its request id forgotten): the pipeline it made.
            return _result(existing, changed=False)
        return rejected("conflict", f"pipeline {cmd.name} exists ({existing.state.value})", "name")
    if len(state.pipelines) >= PIPELINES_MAX:
        return rejected("conflict", f"the cluster has {PIPELINES_MAX} pipelines, the most")
    held = partitions_held(state)
    if held + cmd.partitions > TOTAL_PARTITIONS_MAX:
        return rejected(
            "conflict",
            f"the cluster's pipelines have {held} partitions; {cmd.partitions} more would pass "
            f"{TOTAL_PARTITIONS_MAX}",
            "partitions",
        )
    spec_bytes = spec_bytes_held(state)
    if spec_bytes + len(cmd.spec_text.encode()) > SPEC_TEXT_BYTES_TOTAL_MAX:
        return rejected(
            "conflict",
            f"the cluster's pipelines hold {spec_bytes} bytes of spec text; this one would "
            f"pass {SPEC_TEXT_BYTES_TOTAL_MAX}",
            "spec_text",
        )
    problem = lifecycle.check(
        lifecycle.PIPELINE_EDGES, None, L.CREATING, "CreatePipeline", f"pipeline {cmd.name}"
    )
    if problem is not None:
        return problem
    state.pipeline_seq += 1
    p = Pipeline(
        name=cmd.name,
        incarnation=state.pipeline_seq,
        spec_text=cmd.spec_text,
        spec_sha256=cmd.spec_sha256,
        spec_version=1,
        partitions=cmd.partitions,
        routing_generation=0,
        pool=pool,
        settings=cmd.settings,
        state=L.CREATING,
        purge=False,
        created_at_ms=cmd.now_ms,
        updated_at_ms=cmd.now_ms,
        by=cmd.by,
    )
    state.pipelines[p.name] = p
    return _result(p, changed=True)


def _move(
    state: ClusterState,
    p: Pipeline | Rejected,
    dst: PipelineState,
    command: str,
    by: str,
    now_ms: int,
    *,
    purge: bool | None = None,
) -> Result:
    """`p` moved to `dst` by `command`; a record already there is an Ok that changed nothing."""
    if isinstance(p, Rejected):
        return p
    if p.state is dst:
        return _result(p, changed=False)
    problem = _moved(p, dst, command)
    if problem is not None:
        return problem
    new = replace(
        p, state=dst, updated_at_ms=now_ms, by=by, purge=p.purge if purge is None else purge
    )
    state.pipelines[p.name] = new
    return _result(new, changed=True)


def activate_pipeline(state: ClusterState, cmd: ActivatePipeline) -> Result:
    """The create's set-up, in one commit: the pipeline's partitions join the table,
    unowned at epoch 0 and numbered from `slot_seq`, and the record turns ACTIVE."""
    p = of_incarnation(state, cmd.name, cmd.incarnation)
    if isinstance(p, Rejected):
        return p
    if p.state in (L.ACTIVE, L.PAUSED):
        # Activated (and maybe paused) since: a leader's step repeated under a new request id.
        return _result(p, changed=False)
    problem = _moved(p, L.ACTIVE, "ActivatePipeline")
    if problem is not None:
        return problem
    first = state.slot_seq
    if first + p.partitions - 1 > INT_VALUE_MAX:
        return rejected("conflict", "the cluster has used every partition number", "partitions")
    state.add_partitions([unassigned_partition(first + i, p.name) for i in range(p.partitions)])
    new = replace(p, state=L.ACTIVE, first_slot=first, updated_at_ms=cmd.now_ms)
    state.pipelines[p.name] = new
    return _result(new, changed=True)


def _asked(
    state: ClusterState, cmd: PausePipeline | ResumePipeline | DropPipeline
) -> Pipeline | Rejected:
    """The record an operator's command names, once its caller is in bounds."""
    return by_problem(cmd.by) or _named(state, cmd.name)


def pause_pipeline(state: ClusterState, cmd: PausePipeline) -> Result:
    p = _asked(state, cmd)
    return _move(state, p, L.PAUSED, "PausePipeline", cmd.by, cmd.now_ms)


def resume_pipeline(state: ClusterState, cmd: ResumePipeline) -> Result:
    p = _asked(state, cmd)
    return _move(state, p, L.ACTIVE, "ResumePipeline", cmd.by, cmd.now_ms)


def drop_pipeline(state: ClusterState, cmd: DropPipeline) -> Result:
    p = _asked(state, cmd)
    if isinstance(p, Pipeline) and p.state is L.DROPPING and cmd.purge and not p.purge:
        # A drop asked again with --purge while it is being torn down: purge as well.
        new = replace(p, purge=True, updated_at_ms=cmd.now_ms, by=cmd.by)
        state.pipelines[p.name] = new
        return _result(new, changed=True)
    return _move(state, p, L.DROPPING, "DropPipeline", cmd.by, cmd.now_ms, purge=cmd.purge)


@dataclass(frozen=True, slots=True, kw_only=True)
class Going:
    """What a pipeline's partitions leaving the table ends (its tear-down, or its old
    generation at a rescale): their migrations in flight, ABORTED with `note`, and the
    DRAINING workers left owning and sourcing nothing, LEFT. `owned`: one had an owner."""

    owned: bool
    ending: tuple[Migration, ...]
    leaving: tuple[WorkerId, ...]
    note: str

    def end_migrations(self, state: ClusterState, now_ms: int) -> None:
        for m in self.ending:
            edits.finish_migration(state, m, MigrationPhase.ABORTED, self.note, now_ms)


def partitions_going(state: ClusterState, p: Pipeline, command: str, note: str) -> Going | Rejected:
    """What `command` ends when `p`'s partitions leave the table, every change checked
    against the lifecycle tables before the first is made."""
    parts = list(state.partitions.of(p.name))
    owned = [x for x in parts if x.owner is not None]
    ending = [state.migrations[x.migration] for x in parts if x.migration is not None]
    candidates = [x.owner for x in owned if x.owner is not None]
    candidates += [w for m in ending for w in (m.source, m.target)]
    leaving = edits.leavers(
        state,
        candidates,
        ending={m.migration_id for m in ending},
        new_owner={x.partition: None for x in owned},
    )
    problem = edits.lifecycle_problem(
        state,
        command,
        workers=((w, WorkerState.LEFT) for w in leaving),
        migrations=((m.migration_id, MigrationPhase.ABORTED) for m in ending),
    )
    for was in dict.fromkeys(x.status for x in parts):
        problem = problem or lifecycle.check(
            lifecycle.PARTITION_EDGES, was, None, command, f"pipeline {p.name}", "name"
        )
    if problem is not None:
        return problem
    return Going(owned=bool(owned), ending=tuple(ending), leaving=tuple(leaving), note=note)


def forget_pipeline(state: ClusterState, cmd: ForgetPipeline) -> Outcome:
    """The drop's tear-down, in one commit: its partitions leave the table (owned ones
    too: their numbers are never used again, so no gate of them can meet a new owner, and a
    report about one finds no partition), their migrations in flight are aborted, a
    DRAINING worker left with nothing is LEFT, and the record leaves the state. The
    generation grows when an owned partition went."""
    p = of_incarnation(state, cmd.name, cmd.incarnation)
    if isinstance(p, Rejected):
        return p, False
    problem = _moved(p, None, "ForgetPipeline")
    if problem is not None:
        return problem, False
    going = partitions_going(state, p, "ForgetPipeline", "pipeline dropped")
    if isinstance(going, Rejected):
        return going, False
    going.end_migrations(state, cmd.now_ms)
    state.remove_partitions(p.name)
    edits.leave(state, going.leaving, cmd.now_ms)
    del state.pipelines[p.name]
    return _result(p, changed=True, gone=True), going.owned


def _token_result(name: PipelineName, token_id: str, *, issued: bool, changed: bool) -> Ok:
    return Ok(value=TokenResult(name=name, token_id=token_id, issued=issued, changed=changed))


def _is_sha256(text: str) -> bool:
    return len(text) == SHA256_HEX_LEN and all(c in "0123456789abcdef" for c in text)


def issue_token(state: ClusterState, cmd: IssueToken) -> Result:
    """Record a token of pipeline `name` by its id and its secret's hash. The same id with
    the same hash and role again (a retried proposal) changes nothing."""
    p = by_problem(cmd.by) or _named(state, cmd.name)
    if isinstance(p, Rejected):
        return p
    if not (valid_id(cmd.token_id) and len(cmd.token_id) <= TOKEN_ID_LEN_MAX):
        return rejected(
            "invalid", f"token_id must be an id of at most {TOKEN_ID_LEN_MAX} chars", "token_id"
        )
    if not _is_sha256(cmd.sha256):
        return rejected("invalid", "sha256 must be 64 lowercase hex digits", "sha256")
    if p.state is L.DROPPING:
        return rejected("conflict", f"pipeline {p.name} is being dropped", "name")
    for t in p.tokens:
        if t.token_id == cmd.token_id:
            if (t.sha256, t.role) == (cmd.sha256, cmd.role):
                return _token_result(p.name, t.token_id, issued=True, changed=False)
            return rejected("conflict", f"token {cmd.token_id} exists already", "token_id")
    if len(p.tokens) >= PIPELINE_TOKENS_MAX:
        return rejected(
            "conflict",
            f"pipeline {p.name} has {PIPELINE_TOKENS_MAX} tokens: revoke one first",
            "name",
        )
    token = PipelineToken(
        token_id=cmd.token_id,
        role=cmd.role,
        sha256=cmd.sha256,
        created_at_ms=cmd.now_ms,
        by=cmd.by,
    )
    state.pipelines[p.name] = replace(p, tokens=(*p.tokens, token))
    return _token_result(p.name, cmd.token_id, issued=True, changed=True)


def revoke_token(state: ClusterState, cmd: RevokeToken) -> Result:
    """Remove token `token_id` from pipeline `name`'s record; one that is not there (revoked
    already) changes nothing."""
    p = by_problem(cmd.by) or _named(state, cmd.name)
    if isinstance(p, Rejected):
        return p
    kept = tuple(t for t in p.tokens if t.token_id != cmd.token_id)
    if len(kept) == len(p.tokens):
        return _token_result(p.name, cmd.token_id, issued=False, changed=False)
    state.pipelines[p.name] = replace(p, tokens=kept)
    return _token_result(p.name, cmd.token_id, issued=False, changed=True)
