"""Online membership changes of the coordinator cluster, run by its leader: add a node, remove
one, or replace one with another.

Owns the change in flight (its kind, nodes, phase and outcome), the checks that refuse a
change before anything happens, and the order of its steps. An addition feeds the new node
the log as a learner until it has caught up (`replication.reconfig`), then appends the entry
that makes it a voter; a removal appends the entry that drops the voter, after handing the
leadership to another voter when it is this node; a replacement is the addition then the
removal. Invariants:

- At most one change at a time: a second request while one runs is a 409, and so is one
  while the log holds a membership entry not yet committed.
- A refused request changes nothing: every check runs before the learner feed starts.
- A replacement adds before it removes, so a cluster never has fewer voters than it started
  with; a removal never leaves voters of which fewer than a majority answer the leader.
- A change runs only on the ready leader; if leadership moves, it ends there
  (`interrupted`, or `handed_off` when this node gave the leadership away to be removed) and
  the caller asks the new leader, where a replacement or removal carries on from where it
  stopped. `failed` is a change the same request would fail again (a node that does not
  catch up, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from dataclasses import dataclass, replace
from enum import Enum

from coordinator.addresses import check_bind, is_wildcard, split_host_port
from coordinator.core.model import valid_id
from coordinator.service.node_parts import MembershipNode
from coordinator.service.stamps import now_ms
from replication.log import Member, RaftRole
from replication.reconfig import Progress
from shared.errors import ConfigError, RequestError, RippleError, UnavailableError

__all__ = ["Change", "ChangeKind", "MembershipChanges", "Phase"]

log = logging.getLogger(__name__)

VOTERS_MIN = 2  # a removal that would leave fewer is refused: one voter survives nothing


class ChangeKind(Enum):
    ADD = "add"
    REMOVE = "remove"
    REPLACE = "replace"


class Phase(Enum):
    CATCHING_UP = "catching_up"  # the new node is fed the log; no majority counts it
    ADDING = "adding"  # the entry that makes it a voter is appended, not yet committed
    HANDING_OFF = "handing_off"  # this leader is to be removed: leadership goes elsewhere
    REMOVING = "removing"  # the entry that drops the old node is appended
    DONE = "done"
    HANDED_OFF = "handed_off"  # ended here: ask the new leader again to finish
    INTERRUPTED = "interrupted"  # leadership lost midway: ask the new leader again
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    id: str
    kind: ChangeKind
    node: Member | None  # the node added
    old: Member | None  # the node removed
    phase: Phase
    started_ms: int  # wall time, for display
    error: str | None = None


_IDS = itertools.count(1)


def _conflict(message: str, field: str | None = None) -> RequestError:
    return RequestError(message, code="conflict", field=field)


def _check_node_id(node_id: str) -> None:
    if not valid_id(node_id):
        raise RequestError("node id must match [A-Za-z0-9._-]{1,64}", field="node_id")


class MembershipChanges:
    """The leader's membership changes, one at a time. Use on the node's event loop."""

    def __init__(self, node: MembershipNode) -> None:
        self._node = node
        self._current: Change | None = None
        self._last: Change | None = None
        self._task: asyncio.Task[None] | None = None
        self._prefix = secrets.token_hex(4)

    @property
    def current(self) -> Change | None:
        return self._current

    @property
    def last(self) -> Change | None:
        """The last change that ended on this node (since it started)."""
        return self._last

    @property
    def in_flight(self) -> bool:
        return self._current is not None or self._node.log.membership().pending_index is not None

    # -- requests -----------------------------------------------------------------------------

    def add(self, member: Member) -> Change | None:
        """Start adding `member`; None when it is a voter already (nothing to do)."""
        self._check_syntax(member)
        self._check_idle()
        self._check_new(member, replacing=None)
        if member in self._node.log.membership().voters:
            return None
        return self._start(ChangeKind.ADD, node=member, old=None)

    def remove(self, node_id: str) -> Change:
        _check_node_id(node_id)
        self._check_idle()
        old = self._voter(node_id)
        self._check_removal(old)
        return self._start(ChangeKind.REMOVE, node=None, old=old)

    def replace(self, old_id: str, member: Member) -> Change | None:
        """Start replacing the voter `old_id` with `member`. Either half already done (a
        replacement asked again after the leadership moved) is skipped; None when both are."""
        _check_node_id(old_id)
        self._check_syntax(member)
        self._check_idle()
        voters = self._node.log.membership().voters
        old = next((m for m in voters if m.id == old_id), None)
        added = member in voters
        if old is None and added:
            return None
        if old is None:
            raise RequestError(f"{old_id} is not a voter", code="not_found", field="node_id")
        if old.raft == member.raft:
            raise _conflict(
                f"the new node has {old.id}'s Raft address {old.raft}: a node cannot be added "
                "while another holds its address; remove it first, then add the new one",
                field="raft",
            )
        if not added:
            self._check_new(member, replacing=old)
        self._check_removal(old, adding=not added)
        return self._start(ChangeKind.REPLACE, node=None if added else member, old=old)

    # -- checks -------------------------------------------------------------------------------

    def _check_idle(self) -> None:
        current = self._current
        if current is not None:
            what = current.node or current.old
            raise _conflict(
                f"a membership change is in flight ({current.kind.value} "
                f"{what.id if what else '?'}, {current.phase.value}): one at a time, wait "
                "for it to end (GET /v1/nodes)"
            )
        if self._node.log.membership().pending_index is not None:
            raise _conflict("a membership entry is not committed yet: one change at a time")

    def _voter(self, node_id: str) -> Member:
        member = self._node.log.membership().by_id(node_id)
        if member is None:
            raise RequestError(f"{node_id} is not a voter", code="not_found", field="node_id")
        return member

    def _check_syntax(self, member: Member) -> None:
        """Bad input is a 400 naming the field, whatever else is going on."""
        if not valid_id(member.id):
            raise RequestError("id must match [A-Za-z0-9._-]{1,64}", field="id")
        try:
            host, _port = split_host_port(member.raft, "raft")
            if is_wildcard(host):
                raise ConfigError(f"raft: {member.raft!r} cannot be dialled", field="raft")
            check_bind(member.http, "http", allow_wildcard=self._node.config.allow_wildcard_bind)
        except ConfigError as exc:
            raise RequestError(exc.message, field=exc.field) from None

    def _check_new(self, member: Member, *, replacing: Member | None) -> None:
        for voter in self._node.log.membership().voters:
            if voter == member and replacing is None:
                continue  # asked again: nothing to do
            for key in ("id", "raft", "http"):
                if getattr(voter, key) == getattr(member, key):
                    raise _conflict(
                        f"{key} {getattr(member, key)} is already the voter {voter.id}'s"
                        + ("" if replacing is None else " (give the replacement its own)"),
                        field=key,
                    )

    def _check_removal(self, old: Member, *, adding: bool = False) -> None:
        """The voters left after the change (with the new one, when it comes first) must
        be at least VOTERS_MIN, and a majority of them must be answering this leader."""
        voters = [m for m in self._node.log.membership().voters if m != old]
        if len(voters) + adding < VOTERS_MIN:
            raise _conflict(
                f"removing {old.id} would leave {len(voters)} voter(s): add a node first",
                field="node_id",
            )
        answering = self._answering()
        live = sum(1 for m in voters if m.raft in answering) + adding
        if live <= (len(voters) + adding) // 2:
            raise _conflict(
                f"removing {old.id} would leave {len(voters) + adding} voters of which only "
                f"{live} answer the leader: the cluster could not commit; bring nodes back "
                "or replace the silent ones first",
                field="node_id",
            )

    def _answering(self) -> set[str]:
        """Raft addresses of the voters that answered this leader lately (itself included)."""
        limit = self._node.config.leader_fallback_timeout_s
        progress: dict[str, Progress] = self._node.log.reconfig.progress()
        alive = {raft for raft, p in progress.items() if p.answered_s_ago <= limit}
        return alive | {self._node.spec.raft}

    # -- running ------------------------------------------------------------------------------

    def _start(self, kind: ChangeKind, *, node: Member | None, old: Member | None) -> Change:
        change = Change(
            id=f"{self._prefix}-{next(_IDS)}",
            kind=kind,
            node=node,
            old=old,
            phase=Phase.CATCHING_UP if node is not None else Phase.REMOVING,
            started_ms=now_ms(),
        )
        self._current = change
        self._task = asyncio.get_running_loop().create_task(self._run(change))
        log.info(
            "membership change %s: %s, adding %s, removing %s",
            change.id,
            kind.value,
            node or "-",
            old or "-",
        )
        return change

    def _moved(self, phase: Phase) -> None:
        if self._current is not None:
            self._current = replace(self._current, phase=phase)

    async def _run(self, change: Change) -> None:
        reconfig = self._node.log.reconfig
        timeout = self._node.config.propose_timeout_s
        try:
            if change.node is not None:
                try:
                    await reconfig.catch_up(
                        change.node, timeout_s=self._node.config.membership_catch_up_timeout_s
                    )
                    self._moved(Phase.ADDING)
                    await reconfig.change(add=True, member=change.node, timeout_s=timeout)
                finally:
                    reconfig.forget(change.node.raft)
            old = change.old
            if old is not None:
                if old.raft == self._node.spec.raft:
                    self._moved(Phase.HANDING_OFF)
                    await reconfig.transfer_leadership(self._heir(old), timeout_s=timeout)
                    self._end(Phase.HANDED_OFF, "leadership handed over: ask the new leader")
                    return
                self._moved(Phase.REMOVING)
                await reconfig.change(add=False, member=old, timeout_s=timeout)
            self._end(Phase.DONE, None)
        except asyncio.CancelledError:
            self._end(Phase.INTERRUPTED, "leadership lost")
            raise
        except Exception as exc:  # every failure ends the change and is reported
            log.warning("membership change %s failed: %s", change.id, exc)
            lost = not self._node.is_ready_leader
            self._end(Phase.INTERRUPTED if lost else Phase.FAILED, str(exc) or type(exc).__name__)

    def _heir(self, leaving: Member) -> Member:
        """The voter to hand the leadership to: the furthest along of those answering."""
        progress = self._node.log.reconfig.progress()
        answering = self._answering()
        candidates = [
            m
            for m in self._node.log.membership().voters
            if m != leaving and m.raft in answering and m.raft in progress
        ]
        if not candidates:
            raise UnavailableError("no other voter answers: cannot hand the leadership over")
        return max(candidates, key=lambda m: progress[m.raft].match_index)

    def _end(self, phase: Phase, error: str | None) -> None:
        if self._current is not None:
            self._last = replace(self._current, phase=phase, error=error)
            log.info("membership change %s: %s %s", self._last.id, phase.value, error or "")
        self._current = None
        self._task = None

    def on_role(self, role: RaftRole) -> None:
        """Leadership lost: the change ends here (its learner feed stops with it)."""
        if role is not RaftRole.LEADER and self._task is not None:
            if self._current is not None and self._current.phase is Phase.HANDING_OFF:
                return  # the hand-off itself; the task ends it as HANDED_OFF
            self._task.cancel()

    async def close(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RippleError):
                await task
