"""One coordinator node: the pure machine, its replicated log, and the proposal path.

The node turns a domain command into a replicated entry (stamping a request id so a
retry after an unknown outcome is deduplicated by the state machine), waits for the
commit, and turns the machine's result back into the command's own result type or a
`RequestError`. It is the
only place that touches the wall clock for commands: `now_ms()` is stamped into each
command by the proposer, so `apply` stays deterministic on every replica.

It is also the one gate of command-set versions (docs/design.md §10): `submit` refuses a
command above the cluster's finalized version before it is proposed, naming the voter that
does not speak it (`coordinator/core/versions.refusal`), so no replica meets a command it
does not speak. The voters are `voters()`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TypeVar, cast

from coordinator.config import ClusterConfig, NodeSpec
from coordinator.core.codec import decode_result, encode_command
from coordinator.core.commands import CommandResult, Ok, Returns, result_type
from coordinator.core.machine import Machine
from coordinator.core.model import FIRST_COMMAND_SET_VERSION
from coordinator.core.state import ClusterState
from coordinator.core.versions import refusal, spoken, version_of
from coordinator.service.auth import first_cluster_id, raft_password
from coordinator.service.metrics import Metrics
from coordinator.service.node_dir import read_join_record, write_join_record
from coordinator.service.node_parts import LeaderInfo
from coordinator.service.stamps import new_request_id
from replication.identity import ensure_cluster_id
from replication.log import (
    MachineRead,
    Member,
    NoLeaderError,
    OutcomeUnknownError,
    QueueFullError,
    RaftSettings,
    ReplicatedLog,
)
from shared.clock import Clock
from shared.errors import KIND_OF, ErrorKind, RequestError, UnavailableError
from shared.system_clock import SYSTEM_CLOCK

log = logging.getLogger(__name__)

R = TypeVar("R", bound=CommandResult)


def _state_of(machine: object) -> ClusterState:
    return cast(Machine, machine).state


class CoordinatorNode:
    def __init__(self, config: ClusterConfig, node_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        # Times each proposal for its latency metric (a fake clock in tests drives it).
        self.clock = clock
        # Parsed once (the config is immutable): registration checks every address with it.
        self.worker_networks = config.worker_network_list()
        self.node_id = node_id
        # What this node speaks: every command-set version of this release unless the
        # config holds it at an older one (a drill; coordinator/core/versions.spoken).
        self.speaks = spoken(config.command_set_version_max)
        self.machine = Machine(speaks=self.speaks)
        self.metrics = Metrics()
        node_dir = config.node_dir(node_id)
        self.node_dir = node_dir
        # A node added online knows itself and the voters it joined from its join record; a
        # configured node from the cluster file. The log's membership entries take over.
        self.joined = read_join_record(node_dir)
        if self.joined is not None:
            me = self.joined.node
            self.spec = NodeSpec(
                id=me.id,
                raft=me.raft,
                http=me.http,
                raft_bind=self.joined.raft_bind,
                scheme="https" if config.tls_cert else "http",
            )
            start = (*self.joined.voters, me)
        else:
            self.spec = config.node(node_id)
            start = tuple(Member(id=n.id, raft=n.raft, http=n.http) for n in config.nodes)
        self._start_ids = frozenset(m.id for m in start if m.id != self.spec.id or not self.joined)
        # The cluster this data directory belongs to (its cluster.id): the Raft handshake
        # refuses another cluster's nodes, and backups name it. A joining node's was written
        # from its join record, a restored or recovered node's by the restore.
        self.cluster_id = ensure_cluster_id(
            node_dir, first_cluster_id(config.cluster_secret), durable=config.fsync
        )
        settings = RaftSettings(
            self_addr=self.spec.raft,
            partners=tuple(m.raft for m in start if m.raft != self.spec.raft),
            members=start,
            joining=self.joined is not None and not self.joined.admitted,
            cluster_id=self.cluster_id,
            transport_version_min=config.raft_transport_version_min,
            transport_version_max=config.raft_transport_version_max,
            bind_addr=self.spec.raft_listen,
            # Derived with a key of its own: a leaked Raft password gives no worker or
            # call token, and a token gives nothing about the Raft password.
            secret=raft_password(config.cluster_secret),
            journal_path=str(node_dir / "raft.journal"),
            dump_path=str(node_dir / "raft.dump"),
            raft_min_timeout_s=config.raft_min_timeout_s,
            raft_max_timeout_s=config.raft_max_timeout_s,
            append_entries_period_s=config.append_entries_period_s,
            leader_fallback_timeout_s=config.leader_fallback_timeout_s,
            leader_sync_slow_ms=config.leader_sync_slow_ms,
            leader_sync_cooldown_s=config.leader_sync_cooldown_s,
            # pysyncobj needs connectionTimeout >= raftMaxTimeout.
            connection_timeout_s=max(config.raft_idle_timeout_s, config.raft_max_timeout_s),
            log_compaction_min_entries=config.log_compaction_min_entries,
            log_compaction_min_time_s=config.log_compaction_min_time_s,
            frame_bytes_max=config.raft_frame_bytes_max,
            handshake_timeout_s=config.raft_handshake_timeout_s,
            unauthenticated_connections_max=config.raft_unauthenticated_connections_max,
            group_commit_entries_max=config.group_commit_entries_max,
            group_commit_bytes_max=config.group_commit_bytes_max,
            group_commit_in_flight_max=config.group_commit_in_flight_max,
            proposals_queued_max=config.proposals_queued_max,
            proposals_queued_bytes_max=config.proposals_queued_bytes_max,
            fsync=config.fsync,
        )
        self.log = ReplicatedLog(settings, self.machine)
        self.log.on_voter_change(self._voter_changed)

    def start(self) -> None:
        self.log.start()

    def _voter_changed(self, voter: bool) -> None:
        """A node that joined records that the log made it a voter (or undid that), so a
        restart neither puts a voter back in the joining mode nor lets a node the log never
        admitted vote."""
        joined = self.joined
        if joined is not None and joined.admitted != voter:
            self.joined = dataclasses.replace(joined, admitted=voter)
            write_join_record(self.node_dir, self.joined, durable=self.config.fsync)

    # -- membership ------------------------------------------------------------------------

    def spec_of(self, member: Member) -> NodeSpec:
        """A member of the log as a node of this cluster (its URL with the cluster's scheme)."""
        return NodeSpec(
            id=member.id,
            raft=member.raft,
            http=member.http,
            scheme="https" if self.config.tls_cert else "http",
        )

    def voter_nodes(self) -> tuple[NodeSpec, ...]:
        """The voters as this node's log says, the change in flight included (stale on a
        follower, as every local read)."""
        return tuple(self.spec_of(m) for m in self.log.membership().voters)

    def voters(self) -> tuple[str, ...]:
        """The ids of the nodes whose votes make a majority, which must all speak a command's
        version before it is proposed or finalized: the committed voters of the replicated
        membership, and while a change is in flight the nodes it adds too (a node being added
        applies every entry after its addition, so it must speak them as well)."""
        membership = self.log.membership()
        ids = {m.id for m in membership.committed + membership.voters}
        # Before the log's first tick publishes its view, the voters it starts from.
        return tuple(sorted(ids or self._start_ids))

    @property
    def is_voter(self) -> bool:
        """False while this node joins (not yet added), and once it learns it was removed."""
        return self.log.membership().voter

    def node_by_raft(self, raft_addr: str) -> NodeSpec | None:
        """The node at a Raft address: a voter or learner the log names, else one of the
        cluster file's (a node removed since, which may still say it leads)."""
        member = self.log.membership().by_raft(raft_addr)
        if member is not None:
            return self.spec_of(member)
        return self.config.node_by_raft(raft_addr)

    def close(self) -> None:
        self.log.close()

    # -- leadership ------------------------------------------------------------------------

    def leader_info(self) -> LeaderInfo:
        status = self.log.status()
        leader = None if status.leader_addr is None else self.node_by_raft(status.leader_addr)
        return LeaderInfo(role=status.role, ready=status.ready, leader=leader, status=status)

    @property
    def is_ready_leader(self) -> bool:
        return self.log.is_ready_leader

    @property
    def halted(self) -> str | None:
        """Why this node stopped applying entries and left Raft, or None."""
        return self.log.halted

    # -- reads -----------------------------------------------------------------------------

    def read(self) -> MachineRead[ClusterState]:
        """Local state, never torn; stale on followers (the caller says so)."""
        return self.log.read(_state_of)

    def snapshot_at(self) -> tuple[ClusterState, int, int]:
        """A copy of the state to encode outside the lock (`ClusterState.detached`), with the
        exact applied index and term it is of: what a backup holds."""
        return self.log.read_at(lambda machine: _state_of(machine).detached())

    async def barrier(self) -> None:
        try:
            await self.log.barrier(self.config.propose_timeout_s)
        except (NoLeaderError, OutcomeUnknownError) as exc:
            raise UnavailableError(f"consistent read failed: {exc}") from exc

    # -- writes ----------------------------------------------------------------------------

    async def submit(self, command: Returns[R], request_id: str | None = None) -> R:
        """Propose `command` and return its result (the machine's Ok value), or raise
        RequestError for a rejection / UnavailableError when the outcome cannot be learned
        in time."""
        rid = request_id or new_request_id()
        name = type(command).__name__
        version = version_of(command)
        if version > FIRST_COMMAND_SET_VERSION:  # every voter speaks the first
            with self.read() as state:
                refused = refusal(state, name, version, self.voters())
            if refused is not None:
                self.metrics.proposed(name, "refused", 0.0)
                if KIND_OF[refused.code] is ErrorKind.UNAVAILABLE:
                    raise UnavailableError(refused.message, code=refused.code, field=refused.field)
                raise RequestError(refused.message, code=refused.code, field=refused.field)
        entry = encode_command(command, rid)
        started_ms = self.clock.monotonic_ms()
        outcome = "unknown"
        try:
            for attempt in range(self.config.propose_retries_max + 1):
                try:
                    raw = await self.log.propose(entry, self.config.propose_timeout_s)
                except QueueFullError as exc:
                    outcome = "overloaded"
                    raise UnavailableError(
                        f"too many writes waiting to commit; {name} was not queued",
                        code="overloaded",
                    ) from exc
                except NoLeaderError as exc:
                    outcome = "no_leader"
                    raise UnavailableError(f"no leader to commit {name}: {exc}") from exc
                except OutcomeUnknownError as exc:
                    # Same request id: if the first attempt did commit, the dedup table
                    # returns its result instead of applying the command twice.
                    log.warning("proposal %s outcome unknown (%s), attempt %d", name, exc, attempt)
                    if not self.log.is_ready_leader:
                        raise UnavailableError(
                            f"leadership lost while committing {name}; retry with the same "
                            "Idempotency-Key"
                        ) from exc
                    continue
                result = decode_result(raw)
                if isinstance(result, Ok):
                    value = result.value
                    if not isinstance(value, result_type(command)):
                        # The request id was recorded for another command: its result
                        # answers that one, not this.
                        outcome = "rejected"
                        raise RequestError(
                            f"request id already answered a {type(value).__name__}",
                            code="conflict",
                        )
                    outcome = "ok"
                    return value
                outcome = "rejected"
                if KIND_OF[result.code] is ErrorKind.UNAVAILABLE:  # transient: say when to retry
                    raise UnavailableError(result.message, code=result.code)
                raise RequestError(result.message, code=result.code, field=result.field)
            raise UnavailableError(
                f"{name} not confirmed after retries; retry with the same Idempotency-Key"
            )
        finally:
            self.metrics.proposed(name, outcome, (self.clock.monotonic_ms() - started_ms) / 1000)
