"""Who the voters are: the member table the log carries, and the node class that carries it.

Owns `Member` (a node as the application knows it: its name, its Raft address, its HTTP
address), `MemberNode`, the pysyncobj node that carries a member inside the log's membership
entries and the dump's voter set, and `Membership`, what one node knows of the voters at one
moment. Invariants:

- The voter set is the log's: the configured nodes to begin with, then each membership entry
  from the moment it is appended (Raft's single-server rule, pysyncobj's too), undone if a
  new leader truncates it. A new member's name and HTTP address travel in the same entry that
  makes it a voter, so every node learns them together and no table can disagree with the
  voter set.
- A `MemberNode` pickles as pysyncobj's own `TCPNode` with two more attributes
  (`ripple_id`, `http`): journals and dumps name no Ripple class, so a node of the previous
  release (which applies membership entries too) reads them, and the attribute names stay
  as they are, or data directories written before stop carrying names.
- A node known only by its Raft address (a dump written before members carried names) keeps
  that address as its name until an entry names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pysyncobj.node import TCPNode

__all__ = [
    "Member",
    "MemberNode",
    "Membership",
    "before_change",
    "member_of",
    "members_by_raft",
    "named",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    id: str  # the name the application knows the node by
    raft: str  # host:port the others dial for Raft; the node's identity in the log
    http: str  # host:port of its HTTP API ("" when unknown)


class MemberNode(TCPNode):  # type: ignore[misc]
    """pysyncobj's TCP node (identity and equality by Raft address) with the member's name
    and HTTP address beside it, so a membership entry names the member whole."""

    def __init__(self, member: Member) -> None:
        super().__init__(member.raft)
        self.ripple_id = member.id
        self.http = member.http

    def __reduce__(self) -> tuple[Any, ...]:
        # A TCPNode carrying the two fields: see the module doc.
        return (TCPNode, (self.address,), {"ripple_id": self.ripple_id, "http": self.http})


def named(node: Any) -> Member | None:
    """The member a pysyncobj node names, when it carries a name (a `MemberNode`, or one
    read back from a journal or a dump)."""
    name = getattr(node, "ripple_id", None)
    if not isinstance(name, str):
        return None
    return Member(id=name, raft=str(node.address), http=str(getattr(node, "http", "")))


def member_of(node: Any, known: Mapping[str, Member]) -> Member:
    """The member a pysyncobj node stands for: its own fields when it carries them, else what
    `known` says of its address, else its address alone."""
    address = str(node.address)
    return named(node) or known.get(address) or Member(id=address, raft=address, http="")


def members_by_raft(members: Iterable[Member]) -> dict[str, Member]:
    return {m.raft: m for m in members}


def before_change(
    voters: tuple[Member, ...], change: Any, known: Mapping[str, Member]
) -> tuple[Member, ...]:
    """The voters as they were before the membership entry `change` (pysyncobj's request:
    kind "add" or "rem", the Raft address, the node) took effect, sorted by id."""
    address = str(change[1])
    rest = [m for m in voters if m.raft != address]
    if change[0] != "add":
        node = change[2] if len(change) >= 3 else None
        removed = (named(node) if node is not None else None) or known.get(address)
        rest.append(removed or Member(id=address, raft=address, http=""))
    return tuple(sorted(rest, key=lambda m: m.id))


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """One node's view of the voters, as its log says (possibly stale on a follower)."""

    voters: tuple[Member, ...]  # sorted by id
    # The voters of the last committed membership entry (sorted by id): `voters` without
    # the change in flight, equal to it when none is.
    committed: tuple[Member, ...]
    voter: bool  # this node is one of them (False while joining, and once removed)
    # The index of a membership entry this node has appended but not seen committed; None
    # when every one it holds is committed (one change at a time: at most one is pending).
    pending_index: int | None
    learners: tuple[Member, ...]  # on the leader: nodes fed the log before they vote

    def by_raft(self, raft: str) -> Member | None:
        for m in self.voters + self.learners:
            if m.raft == raft:
                return m
        return None

    def by_id(self, node_id: str) -> Member | None:
        for m in self.voters:
            if m.id == node_id:
                return m
        return None
