"""The planner's scenario language (etcd raft's datadriven style) and its interpreter.

A scenario file is a sequence of blocks::

    <directive> [arg ...]
    ----
    <expected output>
    <blank line>

Lines starting with `#` between blocks are comments. The interpreter drives the REAL
planner (`coordinator.core.planner`) against a real `ClusterState` changed only by `apply`,
on a fake monotonic clock, with a seeded `random.Random`; the output of every directive is
what the planner did, so `--rewrite-testdata` can regenerate the expectations.

Directives:
  settings k=v ...          a fresh cluster and planner (PlannerSettings fields, plus seed;
                            warm_<f>=v sets the WarmPolicy's field f, say warm_enabled=true)
  register w1 w2            RegisterWorker (applied) and the planner hears of each worker
  report <w> p=<p> offset=<n> [e=<e>]   the worker reports a checkpoint (RecordCheckpoints)
  heartbeat w1 w2           a heartbeat from each; prints checkpoint_due when it is set
  load <w> <p>=<rate> ...   a heartbeat from w reporting each partition's input rate (at the
                            partition's current epoch); prints how many the leader kept
  loads                     each worker's summed fresh rate, or why placement counts instead
  restarting w1             the worker says it is restarting: the leader holds it (and what it
                            owns) for the rejoin grace; prints when the hold ends
  tick <ms>                 advance the monotonic clock
  plan                      one batch, run by the executor (coordinator/core/executor.py:
                            commands in order, the first rejection skips the rest, then the
                            calls, which are recorded)
  run                       plan until a batch has no command (at most 20 batches)
  host-ok p=<p> [e=<e>]     the outstanding host call of p answered 200
  host-ok-all               every outstanding host call answered 200
  host-fail p=<p> [code=c]  ... answered an error (the worker's code, say checkpoint_unavailable)
  release <id> ok [offset=<n>] | refused | failed     the outstanding release call's answer
  checkpoint <w> ok|fail    the outstanding checkpoint call's answer
  unwarm <id> ok|fail       the outstanding unwarm call's answer (the copy dropped, or not)
  warm <id> loading | at offset=<n> head=<n> | refused | silent
                            the outstanding warm call's answer: 200 loading, 200 with the
                            warm copy's position, an error code, or no answer at all
  reassign balance | <p>:<w> ...  [dry-run]   the admin query; committed unless dry-run
  drain <w>                 the admin drain query, committed as DrainWorker (which ends a
                            restart's hold, as the drain route does)
  abort <id>                an operator's AbortMigration
  reset <p>                 an operator's ResetPartition (discards its checkpoints)
  maintenance on [for=<ms>] <reason...> | off [<reason...>]
                            an operator's MaintenanceOn (ends by itself after <ms> of wall
                            time, which runs with the monotonic clock here) or MaintenanceOff;
                            the first one finalizes command-set version 3 (ReportVersions,
                            FinalizeVersion) as the leader of a cluster that speaks it would
  wall-step <ms>            step the wall clock alone (a clock that jumps: the monotonic one
                            times maintenance, so nothing may change)
  rescale <M>               an operator's StartRescale to M partitions
  cut p=<p> done offset=<n> | pending | fail
                            the outstanding cut call of p answered: done at the cut (a
                            checkpoint at exactly offset n), not yet, or an error
  cut-all offset=<n>        every outstanding cut call answered done at offset n
  build ok | pending | fail the outstanding build call answered: done (one checkpoint per
                            new partition at the generation's base), not yet, or an error
  new-leader                a fresh planner built from the state (a failover)
  state                     partitions, workers, in-flight migrations, maintenance mode,
                            routing generations and the rescale
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from coordinator.core.commands import (
    AbortMigration,
    AssignPartitions,
    CheckpointReport,
    CheckpointsResult,
    Command,
    DeclareDead,
    DrainWorker,
    FallBack,
    FinalizeVersion,
    HandOff,
    MaintenanceOff,
    MaintenanceOn,
    Ok,
    PlanMigrations,
    RecordCheckpoints,
    RegisterWorker,
    Rejected,
    ReportVersions,
    ResetPartition,
    StartRescale,
    StatesBuilt,
)
from coordinator.core.effects import (
    Batch,
    BuildCall,
    CheckpointCall,
    CommitOutcome,
    CutCall,
    HostCall,
    ReleaseCall,
    UnwarmCall,
    WarmCall,
    WorkerCall,
    WorkerResult,
)
from coordinator.core.executor import BatchRun, commit_batch
from coordinator.core.invariants import state_violations, step_violations, view
from coordinator.core.model import MigrationId, MigrationReason, WorkerId
from coordinator.core.planner import (
    Planner,
    PlannerSettings,
)
from coordinator.core.state import ClusterState, apply
from coordinator.core.versions import COMMAND_SET_VERSION
from coordinator.core.warmups import WarmPolicy
from coordinator.service.call_results import result_of
from shared.messages.checkpoint import CheckpointReply
from shared.messages.common import Answer, ErrorReply, Fence, JsonObject, Outcome, WorkerReply
from shared.messages.host import HostReply
from shared.messages.release import ReleasedCheckpoint, ReleaseReply
from shared.messages.rescale import BuildReply, BuiltCheckpoint, CutReply
from shared.messages.warm import UnwarmReply, WarmReply
from tests.planner_base import quick_settings

# The scenarios name checkpoints by short URIs, so no reply's checkpoint is fenced here; the
# fence itself is tests/unit/test_call_results.py's.
UNFENCED: Fence = lambda *_: None  # noqa: E731

WALL_OFFSET_MS = 1_700_000_000_000  # wall time is stamped only; keep it far from monotonic
RUN_BATCHES_MAX = 20


@dataclass
class Block:
    directive: str
    expected: str
    line: int


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i
        directive = line
        i += 1
        if i >= len(lines) or lines[i].strip() != "----":
            raise ValueError(f"line {start + 1}: expected ---- after {directive!r}")
        i += 1
        out: list[str] = []
        while i < len(lines) and lines[i].strip() != "":
            out.append(lines[i].rstrip())
            i += 1
        blocks.append(Block(directive=directive, expected="\n".join(out), line=start + 1))
    return blocks


def render(blocks: list[Block], outputs: list[str], header: str) -> str:
    parts = [header.rstrip("\n") + "\n"] if header.strip() else []
    for b, out in zip(blocks, outputs, strict=True):
        parts.append(f"{b.directive}\n----\n{out}\n" if out else f"{b.directive}\n----\n")
    return "\n".join(parts)


def header_of(text: str) -> str:
    """The leading comment lines (kept on rewrite)."""
    out = []
    for line in text.split("\n"):
        if line.startswith("#") or (out and not line.strip()):
            out.append(line)
        else:
            break
    return "\n".join(out).rstrip("\n") + "\n" if out else ""


# --- formatting what the planner does -------------------------------------------------------


def fmt_command(cmd: Command) -> str:
    name = type(cmd).__name__
    if isinstance(cmd, DeclareDead):
        assign = ",".join(f"{a.partition}:{a.owner or '-'}" for a in cmd.assignments)
        return f"{name} {','.join(cmd.worker_ids)} assign={assign or '-'}"
    if isinstance(cmd, AssignPartitions):
        return f"{name} " + ",".join(f"{a.partition}:{a.owner}" for a in cmd.assignments)
    if isinstance(cmd, PlanMigrations | DrainWorker):
        moves = ",".join(f"{m.partition}:{m.source}>{m.target}" for m in cmd.moves)
        who = f" {cmd.worker_id}" if isinstance(cmd, DrainWorker) else f" {cmd.reason.value}"
        return f"{name}{who} {moves or '-'}"
    if isinstance(cmd, HandOff):
        ck = cmd.checkpoint
        return f"{name} {cmd.migration_id} ck={'last' if ck is None else ck.offset}"
    if isinstance(cmd, FallBack):
        ck = cmd.checkpoint
        to = "replay from 0" if ck is None else f"ck={ck.offset}"
        return f"{name} p{cmd.partition} e{cmd.epoch} {to}: {cmd.note}"
    if isinstance(cmd, MaintenanceOn):
        until = "-" if cmd.until_ms is None else cmd.until_ms - WALL_OFFSET_MS
        return f"{name} by={cmd.by} until={until}: {cmd.reason}"
    if isinstance(cmd, MaintenanceOff):
        since = "-" if cmd.since_ms is None else cmd.since_ms - WALL_OFFSET_MS
        return f"{name} by={cmd.by} since={since}: {cmd.reason}"
    if isinstance(cmd, StatesBuilt):
        offsets = sorted({c.offset for c in cmd.checkpoints})
        return f"{name} generation={cmd.generation} checkpoints={len(cmd.checkpoints)} at={offsets}"
    skip = {"now_ms"}
    args = " ".join(f"{f.name}={getattr(cmd, f.name)}" for f in fields(cmd) if f.name not in skip)
    return f"{name} {args}".rstrip()


def fmt_call(call: WorkerCall) -> str:
    if isinstance(call, HostCall):
        ck = "none" if call.checkpoint is None else str(call.checkpoint.offset)
        return f"call host p{call.partition} e{call.epoch} {call.worker_id} ck={ck}"
    if isinstance(call, ReleaseCall):
        return f"call release {call.migration_id} p{call.partition} e{call.epoch} {call.worker_id}"
    if isinstance(call, WarmCall):
        ck = "none" if call.checkpoint is None else str(call.checkpoint.offset)
        return f"call warm {call.migration_id} p{call.partition} {call.worker_id} ck={ck}"
    if isinstance(call, UnwarmCall):
        return f"call unwarm {call.migration_id} p{call.partition} {call.worker_id}"
    if isinstance(call, CutCall):
        return (
            f"call cut p{call.partition} e{call.epoch} {call.worker_id} "
            f"g{call.generation}>{call.partitions} routing={list(call.routing)}"
        )
    if isinstance(call, BuildCall):
        return (
            f"call build g{call.generation} {call.worker_id} e{call.epoch} "
            f"routing={list(call.routing)} cuts={len(call.cuts)}"
        )
    return f"call checkpoint {call.worker_id}"


# What a scenario's `settings` line starts from (a line names total_partitions at least).
BASE = quick_settings()


class Harness:
    def __init__(self) -> None:
        self.settings = quick_settings(total_partitions=4)
        self.reset(self.settings, 0)

    def reset(self, settings: PlannerSettings, seed: int) -> None:
        self.settings = settings
        self.seed = seed
        self.now = 0
        self.state = ClusterState()
        # A cluster finalized at the newest command-set version, as a running one is.
        voters = ("n1",)
        for cmd in (
            ReportVersions(
                node_id="n1",
                min_version=1,
                max_version=COMMAND_SET_VERSION,
                package_version="test",
                now_ms=0,
            ),
            FinalizeVersion(version=COMMAND_SET_VERSION, voters=voters, now_ms=0),
        ):
            assert isinstance(apply(self.state, f"v{cmd.TAG}", cmd), Ok)
        self.planner = Planner(settings, random.Random(seed), self.state, self.now)
        self.outstanding: dict[str, WorkerCall] = {}
        self.seq = 0
        self.wall_step = 0

    @property
    def wall(self) -> int:
        return WALL_OFFSET_MS + self.now + self.wall_step

    def apply(self, cmd: Command) -> Ok | Rejected:
        self.seq += 1
        before = view(self.state)
        result = apply(self.state, f"s{self.seq}", cmd)
        # Every scenario step keeps the state's invariants (coordinator/core/invariants.py).
        problems = step_violations(before, self.state, cmd) + state_violations(self.state)
        if problems:
            raise AssertionError("; ".join(problems))
        return result

    def commit(self, batch: Batch) -> tuple[list[str], BatchRun]:
        out = []

        def commit(cmd: Command) -> CommitOutcome:
            result = self.apply(cmd)
            if isinstance(result, Ok):
                out.append(f"commit {fmt_command(cmd)} -> ok")
                return CommitOutcome.OK
            out.append(f"commit {fmt_command(cmd)} -> {result.code}: {result.message}")
            return CommitOutcome.REJECTED

        run = commit_batch(self.planner, batch, commit, self.now)
        out += [f"skip {fmt_command(rest)}" for rest in run.skipped]
        return out, run

    def plan_once(self) -> tuple[list[str], Batch]:
        batch = self.planner.plan(self.state, self.now, self.wall)
        out, run = self.commit(batch)
        for call in run.calls():
            self.outstanding[fmt_call(call)] = call
            out.append(fmt_call(call))
        wake = batch.wake_at_ms - self.now
        out.append(f"wake +{wake}")
        return out, batch

    def feed(self, result: WorkerResult) -> None:
        self.outstanding = {k: c for k, c in self.outstanding.items() if c is not result.call}
        self.planner.on_result(result, self.now, self.wall)

    def answer(self, call: WorkerCall, outcome: Outcome, body: JsonObject | None = None) -> None:
        """The worker's answer to `call`, made the planner's result as the leader makes it."""
        self.feed(result_of(call, Answer(outcome=outcome, body=body or {}), UNFENCED))

    def ok(self, call: WorkerCall, reply: WorkerReply) -> None:
        self.answer(call, Outcome.OK, reply.to_json())

    def refused(self, call: WorkerCall, code: str = "", message: str = "") -> None:
        self.answer(call, Outcome.REFUSED, ErrorReply(error=code, message=message).to_json())

    def find(self, kind: type, match: Callable[[WorkerCall], bool]) -> WorkerCall:
        for call in self.outstanding.values():
            if isinstance(call, kind) and match(call):
                return call
        raise ValueError(f"no outstanding {kind.__name__} call matches")

    # -- directives ---------------------------------------------------------------------------

    def do(self, directive: str) -> str:
        words = directive.split()
        name, args = words[0], words[1:]
        kv = dict(a.split("=", 1) for a in args if "=" in a)
        handler = getattr(self, "do_" + name.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown directive {name!r}")
        return "\n".join(handler(args, kv))

    def do_settings(self, _args: list[str], kv: dict[str, str]) -> list[str]:
        seed = int(kv.pop("seed", "0"))
        types = {f.name: f.type for f in fields(PlannerSettings)}
        warm_types = {f"warm_{f.name}": f.type for f in fields(WarmPolicy)}
        values: dict[str, object] = {}
        warm: dict[str, object] = {}
        for k, v in kv.items():
            if k in warm_types:
                warm[k.removeprefix("warm_")] = v == "true" if warm_types[k] == "bool" else int(v)
                continue
            if k not in types:
                raise ValueError(f"unknown setting {k}")
            if types[k] == "bool":
                values[k] = v == "true"
            else:
                values[k] = float(v) if types[k] == "float" else int(v)
        values["warm"] = dataclasses.replace(BASE.warm, **warm)  # type: ignore[arg-type]
        self.reset(dataclasses.replace(BASE, **values), seed)  # type: ignore[arg-type]
        return []

    def do_register(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        out = []
        for w in args:
            result = self.apply(
                RegisterWorker(worker_id=WorkerId(w), address=f"http://{w}", now_ms=self.wall)
            )
            self.planner.registered(WorkerId(w), self.now)
            out.append(
                f"{w} incarnation={result.value.incarnation}"
                if isinstance(result, Ok)
                else f"{w} {result.code}"
            )
        return out

    def do_report(self, args: list[str], kv: dict[str, str]) -> list[str]:
        """The owner reports a checkpoint of p at its current epoch (or e=)."""
        w, p = WorkerId(args[0]), int(kv["p"])
        part = self.state.partitions[p]
        epoch = int(kv.get("e", part.epoch))
        off = int(kv["offset"])
        entry = CheckpointReport(partition=p, epoch=epoch, offset=off, uri=f"mem://p{p}/{off}")
        incarnation = self.state.workers[w].incarnation
        result = self.apply(
            RecordCheckpoints(
                worker_id=w, incarnation=incarnation, entries=(entry,), now_ms=self.wall
            )
        )
        if not isinstance(result, Ok):
            return [f"{result.code}: {result.message}"]
        assert isinstance(result.value, CheckpointsResult)
        return [r.status for r in result.value.results]

    def do_heartbeat(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        due = [w for w in args if self.planner.heartbeat(WorkerId(w), 0.1, self.now)]
        return [f"checkpoint_due {w}" for w in due]

    def do_load(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        w = WorkerId(args[0])
        due = self.planner.heartbeat(w, 0.1, self.now)
        reports = []
        for a in args[1:]:
            p, rate = a.split("=")
            epoch = self.state.partitions[int(p)].epoch
            reports.append((int(p), int(epoch), float(rate), None))
        kept = self.planner.partition_loads(self.state, w, reports, self.now)
        return [f"kept {kept} of {len(reports)}", *([f"checkpoint_due {w}"] if due else [])]

    def do_loads(self, _args: list[str], _kv: dict[str, str]) -> list[str]:
        weights = self.planner.loads.weights(self.state.total_partitions, self.now)
        if weights is None:
            stale = [
                f"p{p}"
                for p in range(self.state.total_partitions)
                if not self.planner.loads.fresh(p, self.now)
            ]
            return [f"counts (no fresh load: {' '.join(stale)})"]
        per: dict[str, float] = {}
        for p in self.state.partitions:
            if p.owner is not None:
                per[p.owner] = per.get(p.owner, 0.0) + weights[p.partition]
        return [f"{w} {per[w]:g}" for w in sorted(per)]

    def do_restarting(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        return [f"{w} held until {self.planner.restarting(WorkerId(w), self.now)}" for w in args]

    def do_tick(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        self.now += int(args[0])
        return [f"now {self.now}"]

    def do_plan(self, _args: list[str], _kv: dict[str, str]) -> list[str]:
        return self.plan_once()[0]

    def do_run(self, _args: list[str], _kv: dict[str, str]) -> list[str]:
        out: list[str] = []
        for _ in range(RUN_BATCHES_MAX):
            lines, batch = self.plan_once()
            out += lines
            if not batch.commands:
                return out
        raise AssertionError("the planner did not settle")

    def do_host_ok(self, _args: list[str], kv: dict[str, str]) -> list[str]:
        return self._host(kv, ok=True)

    def do_host_ok_all(self, _args: list[str], _kv: dict[str, str]) -> list[str]:
        calls = [c for c in self.outstanding.values() if isinstance(c, HostCall)]
        for call in calls:
            self.ok(call, HostReply(partition=call.partition, epoch=call.epoch, offset=0))
        return [f"p{c.partition} e{c.epoch} ok" for c in calls]

    def do_host_fail(self, _args: list[str], kv: dict[str, str]) -> list[str]:
        return self._host(kv, ok=False)

    def _host(self, kv: dict[str, str], *, ok: bool) -> list[str]:
        p = int(kv["p"])
        call = self.find(
            HostCall,
            lambda c: (
                isinstance(c, HostCall)
                and c.partition == p
                and ("e" not in kv or c.epoch == int(kv["e"]))
            ),
        )
        assert isinstance(call, HostCall)
        if ok:
            self.ok(call, HostReply(partition=call.partition, epoch=call.epoch, offset=0))
        else:
            self.refused(call, kv.get("code", ""), kv.get("msg", ""))
        return []

    def do_release(self, args: list[str], kv: dict[str, str]) -> list[str]:
        mid, answer = args[0], args[1]
        call = self.find(
            ReleaseCall, lambda c: isinstance(c, ReleaseCall) and c.migration_id == mid
        )
        assert isinstance(call, ReleaseCall)
        if answer == "ok" and "offset" in kv:
            off = int(kv["offset"])
            ck = ReleasedCheckpoint(offset=off, uri=f"mem://p{call.partition}/{off}")
            self.ok(call, ReleaseReply(partition=call.partition, epoch=call.epoch, checkpoint=ck))
        elif answer == "ok":  # a reply naming no checkpoint
            self.answer(call, Outcome.OK, {"partition": call.partition, "epoch": call.epoch})
        else:
            self.answer(call, Outcome.STALE if answer == "refused" else Outcome.REFUSED)
        return []

    def do_warm(self, args: list[str], kv: dict[str, str]) -> list[str]:
        mid, answer = args[0], args[1]
        call = self.find(WarmCall, lambda c: isinstance(c, WarmCall) and c.migration_id == mid)
        assert isinstance(call, WarmCall)
        p = call.partition
        if answer == "at":
            offset, head = int(kv["offset"]), int(kv["head"])
            self.ok(call, WarmReply(partition=p, loaded=True, offset=offset, head=head))
        elif answer == "loading":
            self.ok(call, WarmReply(partition=p, loaded=False, offset=0, head=0))
        elif answer == "refused":
            self.refused(call, "warm_refused")
        else:
            self.answer(call, Outcome.UNREACHABLE)
        return []

    def do_unwarm(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        mid, answer = args[0], args[1]
        call = self.find(UnwarmCall, lambda c: isinstance(c, UnwarmCall) and c.migration_id == mid)
        assert isinstance(call, UnwarmCall)
        if answer == "ok":
            self.ok(call, UnwarmReply(partition=call.partition, dropped=True))
        else:
            self.refused(call)
        return []

    def do_checkpoint(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        w, answer = args[0], args[1]
        call = self.find(
            CheckpointCall, lambda c: isinstance(c, CheckpointCall) and c.worker_id == w
        )
        assert isinstance(call, CheckpointCall)
        if answer == "ok":
            self.ok(call, CheckpointReply())
        else:
            self.refused(call)
        return []

    def do_reassign(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        dry = "dry-run" in args
        moves = [a.split(":") for a in args if ":" in a]
        planned = self.planner.plan_reassign(
            self.state,
            self.now,
            balance="balance" in args,
            moves=[(int(p), w) for p, w in moves],
        )
        if isinstance(planned, Rejected):
            return [f"rejected {planned.code}: {planned.message}"]
        lines = [f"move {m.partition}:{m.source}>{m.target}" for m in planned] or ["no moves"]
        if not dry and planned:
            cmd = PlanMigrations(moves=planned, reason=MigrationReason.ADMIN, now_ms=self.wall)
            result = self.apply(cmd)
            ids = [x.id for x in result.value.migrations] if isinstance(result, Ok) else []
            lines.append(f"committed {' '.join(ids)}" if ids else f"refused {result}")
        return lines

    def do_drain(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        w = WorkerId(args[0])
        planned = self.planner.plan_drain(self.state, w, self.now)
        if isinstance(planned, Rejected):
            return [f"rejected {planned.code}: {planned.message}"]
        result = self.apply(DrainWorker(worker_id=w, moves=planned, now_ms=self.wall))
        if isinstance(result, Ok):
            self.planner.left(w)
        return [
            f"{fmt_command(DrainWorker(worker_id=w, moves=planned, now_ms=0))} -> "
            + ("ok" if isinstance(result, Ok) else result.code)
        ]

    def do_abort(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        cmd = AbortMigration(migration_id=MigrationId(args[0]), note="operator", now_ms=self.wall)
        result = self.apply(cmd)
        return ["ok" if isinstance(result, Ok) else f"{result.code}: {result.message}"]

    def do_reset(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        cmd = ResetPartition(partition=int(args[0]), note="operator reset", now_ms=self.wall)
        result = self.apply(cmd)
        return ["ok" if isinstance(result, Ok) else f"{result.code}: {result.message}"]

    def do_maintenance(self, args: list[str], kv: dict[str, str]) -> list[str]:
        if self.state.finalized_version < COMMAND_SET_VERSION:
            for cmd in (
                ReportVersions(
                    node_id="n1",
                    min_version=1,
                    max_version=COMMAND_SET_VERSION,
                    package_version="test",
                    now_ms=self.wall,
                ),
                FinalizeVersion(version=COMMAND_SET_VERSION, voters=("n1",), now_ms=self.wall),
            ):
                assert isinstance(self.apply(cmd), Ok)
        words = [a for a in args[1:] if "=" not in a]
        cmd: MaintenanceOn | MaintenanceOff
        if args[0] == "on":
            until = self.wall + int(kv["for"]) if "for" in kv else None
            cmd = MaintenanceOn(
                by="admin", reason=" ".join(words), until_ms=until, now_ms=self.wall
            )
        else:
            reason = " ".join(words) or "done"
            cmd = MaintenanceOff(by="admin", reason=reason, since_ms=None, now_ms=self.wall)
        result = self.apply(cmd)
        return [f"{fmt_command(cmd)} -> " + ("ok" if isinstance(result, Ok) else result.code)]

    def do_rescale(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        cmd = StartRescale(partitions=int(args[0]), by="admin", now_ms=self.wall)
        result = self.apply(cmd)
        return [f"{fmt_command(cmd)} -> " + ("ok" if isinstance(result, Ok) else result.code)]

    def do_cut(self, args: list[str], kv: dict[str, str]) -> list[str]:
        p = int(kv["p"])
        call = self.find(CutCall, lambda c: isinstance(c, CutCall) and c.partition == p)
        assert isinstance(call, CutCall)
        if "done" in args:
            uri = f"s3://ck/{p}-{call.epoch}-{kv['offset']}"
            offset = int(kv["offset"])
            self.ok(
                call, CutReply(partition=p, epoch=call.epoch, offset=offset, done=True, uri=uri)
            )
        elif "pending" in args:
            self.ok(call, CutReply(partition=p, epoch=call.epoch, offset=0, done=False, uri=None))
        else:
            self.refused(call)
        return []

    def do_cut_all(self, _args: list[str], kv: dict[str, str]) -> list[str]:
        for call in [c for c in self.outstanding.values() if isinstance(c, CutCall)]:
            uri = f"s3://ck/{call.partition}-{call.epoch}-{kv['offset']}"
            offset = int(kv["offset"])
            reply = CutReply(
                partition=call.partition, epoch=call.epoch, offset=offset, done=True, uri=uri
            )
            self.ok(call, reply)
        return []

    def do_build(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        call = self.find(BuildCall, lambda c: isinstance(c, BuildCall))
        assert isinstance(call, BuildCall)
        if args[0] == "ok":
            m = call.routing[-1]
            built = tuple(
                BuiltCheckpoint(
                    partition=q, offset=call.generation << 40, uri=f"s3://ck/g{call.generation}/{q}"
                )
                for q in range(m)
            )
            self.ok(call, BuildReply(generation=call.generation, done=True, checkpoints=built))
        elif args[0] == "pending":
            self.ok(call, BuildReply(generation=call.generation, done=False, checkpoints=()))
        else:
            self.refused(call)
        return [f"by {call.worker_id}"]

    def do_wall_step(self, args: list[str], _kv: dict[str, str]) -> list[str]:
        self.wall_step += int(args[0])
        return [f"wall {self.wall - WALL_OFFSET_MS}"]

    def do_new_leader(self, _args: list[str], _kv: dict[str, str]) -> list[str]:
        self.planner = Planner(self.settings, random.Random(self.seed + 1), self.state, self.now)
        self.outstanding.clear()  # calls of the old leader: their replies are dropped
        return []

    def do_state(self, _args: list[str], _kv: dict[str, str]) -> list[str]:
        out = []
        for p in self.state.partitions:
            ck = "-" if p.checkpoint is None else str(p.checkpoint.offset)
            extra = f" mig={p.migration}" if p.migration else ""
            stuck = getattr(p, "stuck", "")
            extra += f" stuck={stuck!r}" if stuck else ""
            owner = p.owner or "-"
            out.append(f"p{p.partition} {owner} e{p.epoch} {p.status.value} ck={ck}{extra}")
        for w in sorted(self.state.workers.values(), key=lambda w: w.worker_id):
            live = self.planner.liveness(w.worker_id, self.now)
            out.append(f"{w.worker_id} {w.state.value} {'-' if live is None else live.value}")
        for m in self.state.in_flight_migrations():
            out.append(f"{m.migration_id} p{m.partition} {m.source}>{m.target} {m.phase.value}")
        mm = self.state.maintenance
        if mm is not None:
            until = "-" if mm.until_ms is None else mm.until_ms - WALL_OFFSET_MS
            since = mm.since_ms - WALL_OFFSET_MS
            out.append(f"maintenance by={mm.by} since={since} until={until}: {mm.reason}")
        if len(self.state.routing) > 1 or self.state.rescale is not None:
            out.append(f"routing {list(self.state.routing)}")
        r = self.state.rescale
        if r is not None:
            out.append(
                f"rescale g{r.generation} {r.previous}>{r.partitions} {r.phase.value} "
                f"cuts={r.cuts_done()}/{r.previous} base={r.base_epoch}"
            )
        return out


def run_file(path: Path) -> tuple[list[Block], list[str]]:
    blocks = parse(path.read_text())
    h = Harness()
    outputs = []
    for b in blocks:
        try:
            outputs.append(h.do(b.directive))
        except Exception as exc:
            raise AssertionError(f"{path.name}:{b.line}: {b.directive!r} raised {exc!r}") from exc
    return blocks, outputs
