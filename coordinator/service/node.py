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

import itertools
import logging
import secrets
import time
from dataclasses import dataclass
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
from replication.identity import ensure_cluster_id
from replication.log import (
    MachineRead,
    NoLeaderError,
    OutcomeUnknownError,
    QueueFullError,
    RaftRole,
    RaftSettings,
    RaftStatus,
    ReplicatedLog,
)
from shared.errors import RequestError, UnavailableError
from shared.system_clock import SYSTEM_CLOCK

log = logging.getLogger(__name__)

R = TypeVar("R", bound=CommandResult)


def now_ms() -> int:
    """Wall time, for timestamps stamped into commands only (never for a decision)."""
    return SYSTEM_CLOCK.wall_ms()


# A request id is the dedup table's key for a command sent without an Idempotency-Key: it
# must never repeat. A random 64-bit prefix per process and a counter within it, not uuid4:
# os.urandom releases the GIL, a handoff to any runnable thread on every write. At most 32
# characters, like a uuid4's hex; a client's key is hashed to 64 (`idempotency_key`), so
# the two never meet.
_REQUEST_ID_PREFIX = secrets.token_hex(8)
_REQUEST_IDS = itertools.count()


def new_request_id() -> str:
    return f"{_REQUEST_ID_PREFIX}{next(_REQUEST_IDS):x}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderInfo:
    role: RaftRole
    ready: bool
    leader: NodeSpec | None
    status: RaftStatus


def _state_of(machine: object) -> ClusterState:
    return cast(Machine, machine).state


class CoordinatorNode:
    def __init__(self, config: ClusterConfig, node_id: str) -> None:
        self.config = config
        # Parsed once (the config is immutable): registration checks every address with it.
        self.worker_networks = config.worker_network_list()
        self.spec = config.node(node_id)
        self.node_id = node_id
        # What this node speaks: every command-set version of this release unless the
        # config holds it at an older one (a drill; coordinator/core/versions.spoken).
        self.speaks = spoken(config.command_set_version_max)
        self.machine = Machine(speaks=self.speaks)
        self.metrics = Metrics()
        node_dir = config.node_dir(node_id)
        # The cluster this data directory belongs to (its cluster.id): the Raft handshake
        # refuses another cluster's nodes, and backups name it.
        self.cluster_id = ensure_cluster_id(
            node_dir, first_cluster_id(config.cluster_secret), durable=config.fsync
        )
        settings = RaftSettings(
            self_addr=self.spec.raft,
            partners=tuple(n.raft for n in config.nodes if n.id != node_id),
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

    def start(self) -> None:
        self.log.start()

    def close(self) -> None:
        self.log.close()

    # -- leadership ------------------------------------------------------------------------

    def leader_info(self) -> LeaderInfo:
        status = self.log.status()
        leader = (
            None if status.leader_addr is None else self.config.node_by_raft(status.leader_addr)
        )
        return LeaderInfo(role=status.role, ready=status.ready, leader=leader, status=status)

    @property
    def is_ready_leader(self) -> bool:
        return self.log.is_ready_leader

    @property
    def halted(self) -> str | None:
        """Why this node stopped applying entries and left Raft, or None."""
        return self.log.halted

    def voters(self) -> tuple[str, ...]:
        """The ids of the nodes whose votes make a majority, which must all speak a command's
        version before it is proposed: the cluster file's nodes."""
        return tuple(n.id for n in self.config.nodes)

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
                if refused.status == 503:
                    raise UnavailableError(refused.message, code=refused.code, field=refused.field)
                raise RequestError(
                    refused.message, code=refused.code, status=refused.status, field=refused.field
                )
        entry = encode_command(command, rid)
        started = time.monotonic()
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
                            status=409,
                        )
                    outcome = "ok"
                    return value
                outcome = "rejected"
                if result.status == 503:  # not bootstrapped yet: transient, say when to retry
                    raise UnavailableError(result.message, code=result.code)
                raise RequestError(
                    result.message, code=result.code, status=result.status, field=result.field
                )
            raise UnavailableError(
                f"{name} not confirmed after retries; retry with the same Idempotency-Key"
            )
        finally:
            self.metrics.proposed(name, outcome, time.monotonic() - started)
