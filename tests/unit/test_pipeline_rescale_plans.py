"""The leader's side of a recorded pipeline's rescale (coordinator/core/pipeline_rescale_plans.py)
through the planner: cut calls to the owners of the old numbers, a done reply recorded as
RecordPipelineCut, a fenced, stale or unfinished reply asked again after the poll interval,
one build call to a live worker of the pipeline's pool and its checkpoints recorded as
PipelineStatesBuilt, FinishPipelineRescale once the new numbers are ONLINE; two pipelines
sharing the cut bound in turn, and `default`'s rescale beside them, neither pausing the
other; `default`'s balance on a join goes on while a pipeline rescales."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random

from coordinator.core.commands import (
    ActivatePipeline,
    FinishPipelineRescale,
    Ok,
    PartitionOnline,
    PipelineStatesBuilt,
    PlanMigrations,
    ProfileWorker,
    RecordPipelineCut,
    RegisterWorker,
    StartRescale,
)
from coordinator.core.effects import (
    BuildCall,
    CutCall,
    PipelineBuildCall,
    PipelineCutCall,
    WorkerCall,
    call_key,
)
from coordinator.core.model import (
    Label,
    PartitionStatus,
    PipelineName,
    RescalePhase,
    WorkerId,
)
from coordinator.core.pipeline_rescale_plans import PipelineRescalePlans
from coordinator.core.planner import Planner
from coordinator.core.rescale_plans import RESCALE_POLL_MS, balance_paused
from coordinator.core.state import ClusterState, apply
from shared.checkpoint_ref import canonical_uri, reference_problem
from shared.messages.common import Answer, JsonObject, Outcome
from shared.messages.pipeline_rescale import PipelineBuildRequest
from shared.messages.rescale import BuildReply, BuiltCheckpoint, CutReply, CutRequest
from tests.planner_base import quick_settings
from tests.unit.test_core_pipeline_rescale import cluster, go, start
from tests.unit.test_core_pipelines import ORDERS, create
from tests.unit.test_planner import run

STORE = "file:///store"
FENCE = functools.partial(reference_problem, STORE)
GPU = (Label(key="gpu", value="true"),)
CLICKS = PipelineName("clicks")
W1, W2, W3, W4 = (WorkerId(f"w{i}") for i in range(1, 5))
_ids = itertools.count()


def profiled() -> tuple[ClusterState, Planner]:
    """A version-7 cluster: w1 and w2 in the GPU pool, w3 outside it, all heard from."""
    s = cluster()  # w1 and w2 registered: registered again, with profiles
    for w, labels in ((W1, GPU), (W2, GPU), (W3, (Label(key="gpu", value="false"),))):
        go(s, RegisterWorker(worker_id=w, address=f"http://{w}", now_ms=3))
        inc = s.workers[w].incarnation
        go(s, ProfileWorker(worker_id=w, incarnation=inc, labels=labels, slots=16, now_ms=3))
    settings = quick_settings(total_partitions=4, suspect_after_ms=60_000, dead_after_ms=90_000)
    planner = Planner(settings, random.Random(3), s, 0)
    for w in (W1, W2, W3):
        planner.registered(w, 0)
    return s, planner


def hosted(s: ClusterState) -> None:
    """Every ASSIGNING partition comes online at its owner (the host calls' part)."""
    for part in list(s.partitions):
        if part.status is PartitionStatus.ASSIGNING and part.owner is not None:
            online = PartitionOnline(
                partition=part.partition, epoch=part.epoch, owner=part.owner, now_ms=150
            )
            go(s, online)


def with_pipeline(
    s: ClusterState, planner: Planner, name: str = ORDERS, partitions: int = 2
) -> None:
    """`name` created in the GPU pool, activated, placed by the planner and online."""
    go(s, create(name=name, partitions=partitions, pool=GPU))
    incarnation = s.pipelines[PipelineName(name)].incarnation
    go(s, ActivatePipeline(name=PipelineName(name), incarnation=incarnation, now_ms=110))
    run(s, planner, 0)
    hosted(s)


def calls(s: ClusterState, planner: Planner, now: int) -> list[WorkerCall]:
    """Commit what the planner has to commit, then the calls it hands out."""
    run(s, planner, now)
    batch = planner.plan(s, now, now)
    assert batch.commands == ()
    return list(batch.calls)


def of(kind: type, made: list[WorkerCall]) -> list[WorkerCall]:
    return [c for c in made if type(c) is kind]


def cut_answer(call: PipelineCutCall | CutCall, *, done: bool = True, offset: int = 40) -> Answer:
    uri = canonical_uri(STORE, call.partition, call.epoch, offset) if done else None
    reply = CutReply(partition=call.partition, epoch=call.epoch, offset=offset, done=done, uri=uri)
    return Answer(outcome=Outcome.OK, body=reply.to_json())


def test_a_rescale_runs_from_its_cuts_to_done_through_the_planner() -> None:
    s, planner = profiled()
    with_pipeline(s, planner, partitions=2)
    p = s.pipelines[ORDERS]
    old = [x.partition for x in s.partitions.of(ORDERS)]
    go(s, start(partitions=3))
    cuts = of(PipelineCutCall, calls(s, planner, 1_000))
    # One cut call per old number, to its owner at its epoch, ending the pipeline's generation.
    assert sorted(c.partition for c in cuts) == old
    for c in cuts:
        assert isinstance(c, PipelineCutCall)
        part = s.partitions[c.partition]
        assert (c.worker_id, c.epoch, c.address) == (part.owner, part.epoch, f"http://{part.owner}")
        assert (c.pipeline, c.pipeline_incarnation) == (ORDERS, p.incarnation)
        assert (c.generation, c.partitions, c.routing) == (0, 3, (2,))
        request = c.request(warm_hold_s=0)
        assert CutRequest.from_json(c.partition, request.to_json()) == request  # in bounds
    # Out already: not asked twice.
    assert of(PipelineCutCall, calls(s, planner, 1_001)) == []
    for c in cuts:
        assert isinstance(c, PipelineCutCall)
        planner.on_result(c.result(cut_answer(c), FENCE), 1_002, 1_002)
    recorded = run(s, planner, 1_002)
    assert [type(c) for c in recorded] == [RecordPipelineCut, RecordPipelineCut]
    r = s.pipelines[ORDERS].rescale
    assert r is not None and r.phase is RescalePhase.MOVING and r.base_epoch is not None

    builds = of(PipelineBuildCall, calls(s, planner, 1_003))
    assert len(builds) == 1
    b = builds[0]
    assert isinstance(b, PipelineBuildCall)
    assert b.worker_id in (W1, W2)  # the pool's, never w3
    assert (b.generation, b.first_slot, b.partitions, b.epoch) == (
        1,
        r.first_slot,
        3,
        r.base_epoch,
    )
    assert b.spec_sha256 == r.spec_sha256
    assert [n for n, _ in b.cuts] == old
    request = b.request(warm_hold_s=0)
    assert PipelineBuildRequest.from_json(request.to_json()) == request
    new = range(r.first_slot, r.first_slot + 3)
    reply = BuildReply(
        generation=1,
        done=True,
        checkpoints=tuple(
            BuiltCheckpoint(partition=n, offset=0, uri=canonical_uri(STORE, n, r.base_epoch, 0))
            for n in new
        ),
    )
    planner.on_result(b.result(Answer(outcome=Outcome.OK, body=reply.to_json()), FENCE), 1, 1)
    assert PipelineStatesBuilt in [type(c) for c in run(s, planner, 1_004)]
    assert [x.partition for x in s.partitions.of(ORDERS)] == list(new)
    assert not set(old) & {x.partition for x in s.partitions}
    hosted(s)  # the usual assignment placed them; their hosts answered
    assert [type(c) for c in run(s, planner, 1_005)] == [FinishPipelineRescale]
    done = s.pipelines[ORDERS].rescale
    assert done is not None and done.phase is RescalePhase.DONE
    assert of(PipelineCutCall, calls(s, planner, 1_006)) == []


def _cutting(partitions: int = 2) -> tuple[ClusterState, Planner, list[PipelineCutCall]]:
    s, planner = profiled()
    with_pipeline(s, planner, partitions=partitions)
    go(s, start(partitions=partitions + 1))
    cuts = [c for c in calls(s, planner, 1_000) if isinstance(c, PipelineCutCall)]
    return s, planner, cuts


def _asked_again_after_the_poll(s: ClusterState, planner: Planner, key: object, now: int) -> None:
    assert key not in [call_key(c) for c in calls(s, planner, now + RESCALE_POLL_MS - 1)]
    assert key in [call_key(c) for c in calls(s, planner, now + RESCALE_POLL_MS)]


def test_a_fenced_a_stale_or_an_unfinished_cut_reply_is_asked_again_and_records_nothing() -> None:
    s, planner, cuts = _cutting()
    c = cuts[0]
    fenced = CutReply(partition=c.partition, epoch=c.epoch, offset=40, done=True, uri="s3://x/y")
    stale = CutReply(partition=c.partition, epoch=c.epoch + 1, offset=40, done=True, uri="u")
    refused = Answer(outcome=Outcome.STALE, body={"error": "stale_epoch", "message": "no"})
    bodies: list[Answer] = [
        Answer(outcome=Outcome.OK, body=fenced.to_json()),
        Answer(outcome=Outcome.OK, body=stale.to_json()),
        refused,
        cut_answer(c, done=False),
    ]
    now = 2_000
    for answer in bodies:
        result = c.result(answer, FENCE)
        assert not result.done or not result.ok
        planner.on_result(result, now, now)
        assert run(s, planner, now) == []  # nothing recorded
        _asked_again_after_the_poll(s, planner, call_key(c), now)
        now += 10 * RESCALE_POLL_MS
    r = s.pipelines[ORDERS].rescale
    assert r is not None and r.cuts_done() == 0
    # A reply for another epoch than the one recorded (the partition moved on) is refused
    # by apply: the planner asks the next owner instead.
    body: JsonObject = cut_answer(c).body
    assert c.result(Answer(outcome=Outcome.OK, body={**body, "partition": 1}), FENCE).ok is False


def test_a_build_goes_only_to_a_live_worker_of_the_pool() -> None:
    s, planner, cuts = _cutting()
    for c in cuts:
        planner.on_result(c.result(cut_answer(c), FENCE), 1_001, 1_001)
    run(s, planner, 1_001)
    plans = PipelineRescalePlans()

    def made(alive: set[WorkerId]) -> list[WorkerCall]:
        return plans.calls(s, 2_000, set(), lambda _c: True, lambda w: w in alive)

    assert made({W3}) == []  # w3 is outside the pool: no build rather than a spill
    only = made({W2, W3})
    assert [(type(c), c.worker_id) for c in only] == [(PipelineBuildCall, W2)]
    assert [c.worker_id for c in made({W1, W2, W3})] == [W2]  # kept while it lives
    assert [c.worker_id for c in made({W1, W3})] == [W1]  # another once it is gone
    # An unfinished build is asked again after the poll interval, as a cut is.
    b = only[0]
    assert isinstance(b, PipelineBuildCall)
    not_done = BuildReply(generation=b.generation, done=False, checkpoints=())
    answer = Answer(outcome=Outcome.OK, body=not_done.to_json())
    planner.on_result(b.result(answer, FENCE), 3_000, 3_000)
    assert run(s, planner, 3_000) == []
    _asked_again_after_the_poll(s, planner, call_key(b), 3_000)


def _two_cutting(orders: int, clicks: int) -> ClusterState:
    s, planner = profiled()
    with_pipeline(s, planner, ORDERS, orders)
    with_pipeline(s, planner, CLICKS, clicks)
    go(s, start(partitions=orders + 1))
    go(s, start(partitions=clicks + 1, name=CLICKS, incarnation=s.pipelines[CLICKS].incarnation))
    return s


def test_pipelines_share_the_cut_bound_in_turn() -> None:
    s = _two_cutting(orders=6, clicks=2)
    plans = PipelineRescalePlans(cuts_in_flight_max=2)
    out: set[tuple[str, object]] = set()

    def claim(c: WorkerCall) -> bool:
        out.add(call_key(c))
        return True

    first = plans.calls(s, 1_000, out, claim, lambda _w: True)
    # Orders' six cuts do not take the bound from clicks: one each.
    assert sorted(c.pipeline for c in first if isinstance(c, PipelineCutCall)) == [
        CLICKS,
        ORDERS,
    ]
    assert plans.calls(s, 1_001, out, claim, lambda _w: True) == []  # the bound is full
    # One at a time, the pipelines take turns.
    turns = PipelineRescalePlans(cuts_in_flight_max=1)
    firsts = []
    for now in range(3):
        made = turns.calls(s, now, set(), lambda _c: True, lambda _w: True)
        assert len(made) == 1 and isinstance(made[0], PipelineCutCall)
        firsts.append(made[0].pipeline)
    assert firsts in ([CLICKS, ORDERS, CLICKS], [ORDERS, CLICKS, ORDERS])


def test_defaults_rescale_and_a_pipelines_go_on_side_by_side() -> None:
    s, planner = profiled()
    with_pipeline(s, planner, partitions=2)  # default's 4 partitions placed and online too
    assert all(x.status is PartitionStatus.ONLINE for x in s.partitions)
    go(s, start(partitions=3))
    assert not balance_paused(s)  # a pipeline's rescale pauses no balance
    assert isinstance(apply(s, "dflt", StartRescale(partitions=6, by="ops", now_ms=5)), Ok)
    planner.rescales.cuts_in_flight_max = 1
    planner.pipeline_rescales.cuts_in_flight_max = 1
    made = calls(s, planner, 1_000)
    # Each has a bound of its own: default's full bound does not hold the pipeline's cut.
    assert len(of(CutCall, made)) == 1 and len(of(PipelineCutCall, made)) == 1
    d = of(CutCall, made)[0]
    assert isinstance(d, CutCall) and d.partition < 4
    for c in made:
        if isinstance(c, CutCall):
            planner.on_result(c.result(cut_answer(c), FENCE), 1_001, 1_001)
    kinds = [type(c).__name__ for c in run(s, planner, 1_001)]
    assert sorted(kinds) == ["RecordCut", "RecordPipelineCut"]
    assert not [c for c in calls(s, planner, 1_002) if isinstance(c, BuildCall)]


def test_a_pipelines_rescale_does_not_hold_back_defaults_balance() -> None:
    s, planner = profiled()
    planner.settings = dataclasses.replace(planner.settings, rebalance_on_join=True)
    with_pipeline(s, planner, partitions=2)
    go(s, start(partitions=3))
    go(s, RegisterWorker(worker_id=W4, address="http://w4", now_ms=4))
    planner.registered(W4, 0)
    # Loads heard from every owner, so the join's balance does not wait for them.
    for w in (W1, W2, W3, W4):
        planner.heartbeat(w, 0.0, 100)
    moved = [c for c in run(s, planner, 100) if isinstance(c, PlanMigrations)]
    assert moved and all(m.partition < 4 for c in moved for m in c.moves)  # default's
    assert any(m.target == W4 for c in moved for m in c.moves)
    r = s.pipelines[ORDERS].rescale
    assert r is not None and r.phase is RescalePhase.CUTTING
