"""The replicated cluster state as a container: the records and the indices derived from them.

Owns `ClusterState`: the workers, partitions, migrations and request results every replica
holds, the cluster's records about itself (the command-set versions each coordinator node
speaks, the finalized one, the last backup, the retired workers' incarnation floor, the
routing generations and the newest rescale), the pipelines, plus the
indices the leader's every-tick questions read (owner -> partitions, source -> in-flight
migrations, in-flight migrations in creation order, terminal ones in eviction order, workers
by state, departed workers in the order they departed, the owning set's changes, the
heartbeat replies). Invariant: an index always equals a scan of the records, because records
are written only through the `put_*` (and `remove_worker`) methods here, which keep the
indices with them, and `reindex` rebuilds them from the records alone (the records about the
cluster itself have no index). Which writes happen is `coordinator/core/state.py`'s `apply`,
the only caller.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Iterator
from collections.abc import Set as AbstractSet

from coordinator.core.commands import Result
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    DEPARTED_WORKER_STATES,
    FIRST_COMMAND_SET_VERSION,
    OWNING_WORKER_STATES,
    SLOT_BASE,
    TERMINAL_PHASES,
    BackupRecord,
    MaintenanceRecord,
    Migration,
    MigrationId,
    NodeVersions,
    Partition,
    PartitionEpoch,
    PartitionId,
    Pipeline,
    PipelineName,
    Rescale,
    Worker,
    WorkerId,
    WorkerState,
)
from coordinator.core.partition_table import PartitionTable

__all__ = ["ClusterState"]


ASSIGNMENTS_CACHED_MAX = 100_000  # workers whose heartbeat reply is cached at once
# Workers that started or stopped owning (ACTIVE or DRAINING), newest last, for readers that
# follow the owning set by its changes (the planner's checkpoint rounds); one that falls
# further behind than this reads the whole set again.
OWNING_CHANGES_KEPT_MAX = 65_536
_eras = itertools.count(1)  # one per ClusterState and per reindex: a cursor names its era


class ClusterState:
    """Mutable container of frozen records, so one change to 100k partitions costs O(1).

    Mutate it only through ``apply``: besides the public fields it keeps derived indices
    (owner -> partitions, source -> in-flight migrations, the in-flight migrations in creation
    order, terminal migrations in eviction order) that the ``put_*`` writers keep true and
    ``reindex`` rebuilds from the public fields alone, so a replica restored from a snapshot
    evicts and answers exactly like one that never restarted.
    """

    __slots__ = (
        "_assignments",
        "_assignments_generation",
        "_by_state",
        "_departed",
        "_in_flight",
        "_owned",
        "_owning_changes",
        "_owning_era",
        "_owning_seq",
        "_sourcing",
        "_terminal",
        "finalized_version",
        "generation",
        "incarnation_floor",
        "last_backup",
        "maintenance",
        "migration_seq",
        "migrations",
        "node_versions",
        "partitions",
        "pipeline_seq",
        "pipelines",
        "requests",
        "rescale",
        "retired_total",
        "routing",
        "slot_seq",
        "total_partitions",
        "workers",
    )

    def __init__(self) -> None:
        self.total_partitions: int = 0  # 0 = not bootstrapped
        self.workers: dict[WorkerId, Worker] = {}
        self.partitions = PartitionTable()
        self.generation: int = 0
        # Insertion ordered. A migration is moved to the end when it becomes terminal, so the
        # terminal ones appear in the order they finished: eviction drops the oldest-finished.
        self.migrations: dict[MigrationId, Migration] = {}
        self.migration_seq: int = 0
        self.requests: OrderedDict[str, Result] = OrderedDict()
        # Coordinator node id -> the command-set versions it speaks (ReportVersions), the
        # version every voter speaks and the leader finalized (FinalizeVersion), and the
        # newest backup an operator's tool stored (RecordBackup): coordinator/core/versions.py.
        self.node_versions: dict[str, NodeVersions] = {}
        self.finalized_version: int = FIRST_COMMAND_SET_VERSION
        self.last_backup: BackupRecord | None = None
        # The highest incarnation of any worker retired from `workers` (RetireWorkers), and
        # how many were: an id the state does not know registers above the floor, so no token
        # of a retired incarnation ever names a current one (coordinator/core/retirement.py).
        self.incarnation_floor: int = 0
        self.retired_total: int = 0
        # Maintenance mode (MaintenanceOn/Off, coordinator/core/maintenance.py): None is off.
        self.maintenance: MaintenanceRecord | None = None
        # The partition count of each routing generation (index = generation): () before
        # Bootstrap, then (total_partitions,); each rescale's StatesBuilt appends its count,
        # so routing[-1] == total_partitions. The newest rescale, kept after DONE
        # (coordinator/core/rescale.py).
        self.routing: tuple[int, ...] = ()
        self.rescale: Rescale | None = None
        # The pipeline records by name (coordinator/core/pipeline_commands.py), and the
        # counter their incarnations come from (it only grows). A cluster without records
        # runs its one implicit pipeline, `default` (coordinator/core/pipelines.py).
        self.pipelines: dict[PipelineName, Pipeline] = {}
        self.pipeline_seq: int = 0
        # The number the next recorded pipeline's partition 0 gets (it only grows).
        self.slot_seq: int = SLOT_BASE
        self._owned: dict[WorkerId, set[PartitionId]] = {}
        self._sourcing: dict[WorkerId, set[MigrationId]] = {}
        # The non-terminal migrations in creation order (a dict as an ordered set): the
        # registration apply and the planner's every tick ask for them, and a scan of
        # `migrations` also walked up to TERMINAL_MIGRATIONS_RETAINED_MAX finished ones.
        self._in_flight: dict[MigrationId, None] = {}
        self._terminal: deque[MigrationId] = deque()
        # Worker ids by state, so the leader's every-tick questions (how many are ACTIVE,
        # who is DRAINING) do not scan every worker the state holds.
        self._by_state: dict[WorkerState, set[WorkerId]] = {s: set() for s in WorkerState}
        # DEAD and LEFT workers in the order they departed (a dict as an ordered set), so the
        # leader finds those due for retirement from the front without a scan of them all.
        self._departed: dict[WorkerId, None] = {}
        # The owning set's changes (see owning_changes_since): `_owning_seq` counts every one
        # ever appended in this era; the deque keeps the newest OWNING_CHANGES_KEPT_MAX.
        self._owning_changes: deque[WorkerId] = deque(maxlen=OWNING_CHANGES_KEPT_MAX)
        self._owning_seq = 0
        self._owning_era = next(_eras)
        # Heartbeat replies: each worker's assignment, valid for one generation (every change
        # of an (owner, epoch) pair bumps it), so a heartbeat reads it without a sort.
        self._assignments: dict[WorkerId, tuple[PartitionEpoch, ...]] = {}
        self._assignments_generation = -1

    @property
    def routing_generation(self) -> int:
        """The routing generation the partition table is numbered in: 0 until a rescale
        (and before Bootstrap), then one more per rescale's StatesBuilt."""
        return max(0, len(self.routing) - 1)

    def reindex(self) -> None:
        """Rebuild the derived indices from the public fields (after decoding a snapshot)."""
        self._assignments_generation = -1
        self._owned = {}
        for part in self.partitions:
            if part.owner is not None:
                self._owned.setdefault(part.owner, set()).add(part.partition)
        self._sourcing = {}
        self._in_flight = {}
        self._terminal = deque()
        self._by_state = {s: set() for s in WorkerState}
        for w in self.workers.values():
            self._by_state[w.state].add(w.worker_id)
        departed = (w for w in self.workers.values() if w.state in DEPARTED_WORKER_STATES)
        self._departed = dict.fromkeys(
            w.worker_id for w in sorted(departed, key=lambda w: (w.updated_at_ms, w.worker_id))
        )
        self._owning_changes.clear()
        self._owning_seq = 0
        self._owning_era = next(_eras)
        for m in self.migrations.values():
            if m.phase in TERMINAL_PHASES:
                self._terminal.append(m.migration_id)
            else:
                self._sourcing.setdefault(m.source, set()).add(m.migration_id)
                self._in_flight[m.migration_id] = None

    def detached(self) -> ClusterState:
        """A copy of the public fields that shares the frozen records: a few pointer copies
        per partition, cheap under the apply lock, so that encoding it (slow at 100k
        partitions) can run outside the lock the Raft thread needs. Of the derived indices
        only the in-flight one, which in_flight_migrations reads: only for reading and
        encoding."""
        copy = ClusterState()
        copy.total_partitions = self.total_partitions
        copy.workers = dict(self.workers)
        copy.partitions = self.partitions.copy()
        copy.generation = self.generation
        copy.migrations = dict(self.migrations)
        copy.migration_seq = self.migration_seq
        copy._in_flight = dict(self._in_flight)
        copy.requests = OrderedDict(self.requests)
        copy.node_versions = dict(self.node_versions)
        copy.finalized_version = self.finalized_version
        copy.last_backup = self.last_backup
        copy.incarnation_floor = self.incarnation_floor
        copy.retired_total = self.retired_total
        copy.maintenance = self.maintenance
        copy.routing = self.routing
        copy.rescale = self.rescale
        copy.pipelines = dict(self.pipelines)
        copy.pipeline_seq = self.pipeline_seq
        copy.slot_seq = self.slot_seq
        return copy

    # --- reads ---------------------------------------------------------------------------------

    def assignment_of(self, worker_id: WorkerId) -> tuple[PartitionEpoch, ...]:
        """(partition, epoch) pairs the worker owns, by partition; cached per generation."""
        if self._assignments_generation != self.generation:
            self._assignments = {}
            self._assignments_generation = self.generation
        cached = self._assignments.get(worker_id)
        if cached is None:
            cached = tuple((p, self.partitions[p].epoch) for p in self.owned_by(worker_id))
            if len(self._assignments) < ASSIGNMENTS_CACHED_MAX:
                self._assignments[worker_id] = cached
        return cached

    def owned_by(self, worker_id: WorkerId) -> list[PartitionId]:
        return sorted(self._owned.get(worker_id, ()))

    def active_workers(self) -> list[WorkerId]:
        return self.workers_in(WorkerState.ACTIVE)

    def count_in(self, worker_state: WorkerState) -> int:
        return len(self._by_state[worker_state])

    def workers_in(self, *worker_states: WorkerState) -> list[WorkerId]:
        """The ids of the workers in any of `worker_states`, sorted."""
        return sorted(self.worker_set(*worker_states))

    def worker_set(self, *worker_states: WorkerState) -> set[WorkerId]:
        """The ids of the workers in any of `worker_states`, as a new set (unsorted)."""
        return set().union(*(self._by_state[s] for s in worker_states))

    def owning_changes_since(
        self, cursor: tuple[int, int] | None
    ) -> tuple[set[WorkerId] | None, tuple[int, int]]:
        """The workers that started or stopped owning since `cursor` (which this returned
        before), and the cursor for next time. None instead of the workers when they are not
        known: no cursor yet, another state object or a reindex since (a new era), or more
        than OWNING_CHANGES_KEPT_MAX changes since; the reader then reads the whole set.
        A worker in the answer may have changed back since: read its state now."""
        now = (self._owning_era, self._owning_seq)
        if cursor is None or cursor[0] != self._owning_era:
            return None, now
        behind = self._owning_seq - cursor[1]  # never negative: only a new era resets it
        if behind > len(self._owning_changes):
            return None, now
        return set(itertools.islice(reversed(self._owning_changes), behind)), now

    def departed(self) -> Iterator[WorkerId]:
        """DEAD and LEFT workers, the earliest departed first (not a copy: read, do not keep)."""
        return iter(self._departed)

    def put_worker(self, worker: Worker) -> None:
        """The one way a worker record is written: keeps the by-state and departed indices
        (and the owning set's changes) true."""
        wid = worker.worker_id
        prev = self.workers.get(wid)
        was_owning = False
        if prev is not None:
            self._by_state[prev.state].discard(wid)
            was_owning = prev.state in OWNING_WORKER_STATES
        self.workers[wid] = worker
        self._by_state[worker.state].add(wid)
        if worker.state in DEPARTED_WORKER_STATES:
            if prev is None or prev.state not in DEPARTED_WORKER_STATES:
                self._departed[wid] = None
        else:
            self._departed.pop(wid, None)
        if was_owning != (worker.state in OWNING_WORKER_STATES):
            self._owning_changes.append(wid)
            self._owning_seq += 1

    def remove_worker(self, worker_id: WorkerId) -> None:
        """The one way a worker record is dropped (a DEAD or LEFT one that owns nothing, as
        `apply` checked): keeps the indices true and raises the incarnation floor."""
        worker = self.workers.pop(worker_id)
        self._by_state[worker.state].discard(worker_id)
        self._departed.pop(worker_id, None)
        self.incarnation_floor = max(self.incarnation_floor, worker.incarnation)
        self.retired_total += 1

    def put_partition(self, new: Partition) -> None:
        """The one way a partition record is written: keeps the owner index true."""
        old = self.partitions[new.partition]
        if old.owner != new.owner:
            self._unown(old)
            if new.owner is not None:
                self._owned.setdefault(new.owner, set()).add(new.partition)
        self.partitions.put(new)

    def replace_partitions(self, table: list[Partition]) -> None:
        """The one way `default`'s partition table is replaced (a rescale's StatesBuilt):
        every new partition is unowned, so the old table's owners leave the owner index."""
        assert all(p.owner is None for p in table), "a new partition table is unowned"
        assert all(p.pipeline == DEFAULT_PIPELINE for p in table), "default's table"
        for part in self.partitions.of(DEFAULT_PIPELINE):
            self._unown(part)
        others = [p for p in self.partitions if p.pipeline != DEFAULT_PIPELINE]
        self.partitions = PartitionTable([*table, *others])
        self.total_partitions = len(table)

    def add_partitions(self, table: list[Partition]) -> None:
        """The one way a recorded pipeline's partitions join (its set-up): unowned, numbered
        from `slot_seq` up, which moves past them."""
        assert all(p.owner is None for p in table), "a new pipeline's partitions are unowned"
        self.partitions.add(table)
        self.slot_seq = max(self.slot_seq, 1 + max((p.partition for p in table), default=0))

    def remove_partitions(self, pipeline: PipelineName) -> None:
        """The one way a recorded pipeline's partitions leave (its tear-down): its owners
        leave the owner index with them."""
        for part in self.partitions.remove(pipeline):
            self._unown(part)

    def swap_partitions(self, pipeline: PipelineName, table: list[Partition]) -> None:
        """The one way a recorded pipeline's partitions become its new generation's (its
        rescale's PipelineStatesBuilt): the new ones, unowned and numbered from the numbers
        reserved at its start (below `slot_seq` already), replace the old, whose owners
        leave the owner index with them."""
        assert all(p.owner is None for p in table), "a new generation's partitions are unowned"
        assert all(p.partition < self.slot_seq for p in table), "reserved numbers"
        for part in self.partitions.swap(pipeline, table):
            self._unown(part)

    def _unown(self, part: Partition) -> None:
        if part.owner is not None:
            owned = self._owned[part.owner]
            owned.discard(part.partition)
            if not owned:
                del self._owned[part.owner]

    def put_migration(self, new: Migration) -> None:
        """The one way a migration record is written: keeps the source, in-flight and
        terminal indices true (a migration that finishes moves to the end of `migrations`)."""
        mid = new.migration_id
        old = self.migrations.get(mid)
        if old is None:
            self.migrations[mid] = new
            self._sourcing.setdefault(new.source, set()).add(mid)
            self._in_flight[mid] = None
            return
        if new.phase in TERMINAL_PHASES and old.phase not in TERMINAL_PHASES:
            # Move to the end: terminal migrations stay ordered by when they finished.
            del self.migrations[mid]
            self.migrations[mid] = new
            self._terminal.append(mid)
            del self._in_flight[mid]
            sourcing = self._sourcing[old.source]
            sourcing.discard(mid)
            if not sourcing:
                del self._sourcing[old.source]
            return
        self.migrations[mid] = new

    def evict_terminal(self, kept_max: int) -> None:
        """Forget the oldest-finished migrations beyond `kept_max` finished ones."""
        while len(self._terminal) > kept_max:
            del self.migrations[self._terminal.popleft()]

    def owned_set(self, worker_id: WorkerId) -> AbstractSet[PartitionId]:
        """The partitions the worker owns, unsorted and not a copy: read, do not keep."""
        return self._owned.get(worker_id, frozenset())

    def sourcing(self, worker_id: WorkerId) -> AbstractSet[MigrationId]:
        """The in-flight migrations the worker is the source of (not a copy)."""
        return self._sourcing.get(worker_id, frozenset())

    def in_flight_migrations(self) -> list[Migration]:
        """Non-terminal migrations in creation order, from the index: O(in flight), not
        O(retained)."""
        return [self.migrations[mid] for mid in self._in_flight]

    def summary(self) -> dict[str, int]:
        return {
            "active_workers": self.count_in(WorkerState.ACTIVE),
            "total_workers": len(self.workers),
            "total_partitions": self.total_partitions,
            "generation": self.generation,
        }
