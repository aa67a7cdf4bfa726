"""The simulated workers' incremental checkpoints: every object a worker writes is a BASE or
a DELTA of a chain (pipeline/spec/state_delta.py, docs/state.md), and which objects the
store lost.

Owns the chain model and its checks. Each object records its kind, its parent, its base,
its place and its simulated size, and the session that wrote it (a worker's gate from the
load that opened it). The policy is the product's: the first checkpoint a session writes is
a base, so a chain never reaches into objects its writer did not load or write; after that a
delta, until the chain's deltas pass `ChainStats.needs_base` (the size fraction) or the
simulation's own smaller count bound, when it compacts into a new base.

Invariants: writes are create-only (a name written once keeps its object, lost or not);
`broken` is what a host answers `checkpoint_unavailable` on; `violations` walks a chain on
its own (lineage, one session, nothing lost), so a host that loads what `broken` should have
refused is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.source import generation_base, generation_of
from pipeline.spec.state_delta import BASE, DELTA, ChainStats

__all__ = ["BUILD_SESSION", "ChainObject", "Chains"]

# The session of a rescale build's output: a base no worker's gate wrote.
BUILD_SESSION = "build"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainObject:
    uri: str
    kind: str  # BASE or DELTA
    parent: str | None  # None for a base
    base: str  # the chain's base (itself for a base)
    seq: int  # 0 for the base, then 1, 2, ...
    partition: int
    offset: int
    session: str  # the writer's gate from the load that opened it
    size: int  # simulated bytes: the rows a base holds, the records a delta covers
    stats: ChainStats  # the chain up to and with this object (what the next write extends)


def rows_at(offset: int) -> int:
    """The simulated rows of a state at `offset`: its generation's records, at least one."""
    return max(1, offset - generation_base(generation_of(offset)))


class Chains:
    """Every object written, the tip each session extends, and the objects the store lost."""

    def __init__(self, deltas_max: int) -> None:
        # The simulation's count bound (smaller than COMPACT_DELTAS_MAX, so that a short run
        # compacts often); the size fraction is the product's own (ChainStats.needs_base).
        self.deltas_max = deltas_max
        self.objects: dict[str, ChainObject] = {}
        self.tips: dict[object, str] = {}  # tip_key -> the newest object written there
        self.lost: set[str] = set()
        self.bases = 0
        self.deltas = 0
        self.compactions = 0

    def write(self, uri: str, partition: int, offset: int, session: str) -> ChainObject:
        """The checkpoint `session` writes at `offset` as `uri`: a base for its first write
        or a compaction, else a delta of its tip. Create-only: an existing name is kept."""
        known = self.objects.get(uri)
        if known is not None:
            return known
        key = self.tip_key(session, partition)
        tip = self.objects.get(self.tips.get(key, ""))
        if tip is not None and (tip.stats.needs_base() or tip.stats.deltas >= self.deltas_max):
            self.compactions += 1
            tip = None
        if tip is None:
            obj = self._base(uri, partition, offset, session)
        else:
            size = max(1, offset - tip.offset)
            obj = ChainObject(
                uri=uri,
                kind=DELTA,
                parent=tip.uri,
                base=tip.base,
                seq=tip.seq + 1,
                partition=partition,
                offset=offset,
                session=session,
                size=size,
                stats=tip.stats.with_delta(size),
            )
            self.deltas += 1
        self.objects[uri] = obj
        self.tips[key] = uri
        return obj

    def tip_key(self, session: str, partition: int) -> object:
        """What a write extends the newest object of: its session's (a session is one
        partition's gate), so a load always starts a new chain."""
        return session

    def write_base(self, uri: str, partition: int, offset: int, session: str) -> ChainObject:
        """A standalone base that no session extends (a build's output, a stale report)."""
        known = self.objects.get(uri)
        if known is None:
            known = self.objects[uri] = self._base(uri, partition, offset, session)
        return known

    def _base(self, uri: str, partition: int, offset: int, session: str) -> ChainObject:
        self.bases += 1
        size = rows_at(offset)
        return ChainObject(
            uri=uri,
            kind=BASE,
            parent=None,
            base=uri,
            seq=0,
            partition=partition,
            offset=offset,
            session=session,
            size=size,
            stats=ChainStats(base_bytes=size),
        )

    def chain(self, uri: str) -> list[str]:
        """`uri` and its parents back to the base, newest first (as far as they are known)."""
        out: list[str] = []
        obj = self.objects.get(uri)
        while obj is not None:
            out.append(obj.uri)
            obj = None if obj.parent is None else self.objects.get(obj.parent)
        return out

    def broken(self, uri: str) -> bool:
        """Whether loading `uri` fails: an object of its chain is lost (the loader's
        ChainBroken, answered as a lost checkpoint)."""
        return any(u in self.lost for u in self.chain(uri))

    def violations(self, uri: str) -> list[str]:
        """What is wrong with loading `uri`, walked on its own: an object missing or lost, a
        lineage out of order, or a chain that reaches into another session's objects."""
        problems: list[str] = []
        obj = self.objects.get(uri)
        if obj is None:
            return [f"loads {uri}, which no one wrote"]
        while True:
            if obj.uri in self.lost:
                problems.append(f"loads {uri}, whose chain holds the lost {obj.uri}")
            if obj.kind == BASE:
                if obj.seq != 0 or obj.base != obj.uri:
                    problems.append(f"base {obj.uri} is not a chain's start")
                return problems
            parent = self.objects.get(obj.parent or "")
            if parent is None:
                return [*problems, f"loads {uri}, whose chain misses {obj.parent}"]
            if (parent.base, parent.seq + 1) != (obj.base, obj.seq) or parent.offset > obj.offset:
                problems.append(f"delta {obj.uri} does not follow {parent.uri}")
            if parent.session != obj.session or parent.partition != obj.partition:
                problems.append(
                    f"delta {obj.uri} of {obj.session} reaches into {parent.uri} of "
                    f"{parent.session}"
                )
            obj = parent
