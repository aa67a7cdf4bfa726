"""The coordinator's replies to a worker, read into typed values where they enter.

`coordinator.client` hands back parsed JSON; the session reads every reply through here, so
no untyped value travels further into the worker. The replies are declared once, with the
requests, in `shared/messages/session.py`; this module reads only the fields the worker
needs, so a coordinator of another version that adds or drops any other field still talks to
it (tests/unit/test_pipeline_replies.py reads what those declarations write). Invariant: a
reply missing a field the worker needs, or holding one of the wrong type, is a
`ClientError` (code `invalid_reply`, the field named), the same error as a failed request,
so the caller's retry handles both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.errors import ClientError

__all__ = [
    "CheckpointVerdict",
    "HeartbeatReply",
    "Registration",
    "checkpoint_verdicts",
    "partition_owner",
    "routing",
    "store_set",
    "total_partitions",
]

Body = Mapping[str, object]


def _invalid(name: str) -> ClientError:
    return ClientError(
        f"coordinator reply without a valid {name!r}", code="invalid_reply", field=name
    )


def _object(value: object, name: str) -> Body:
    if not isinstance(value, dict):
        raise _invalid(name)
    return value


def _str(body: Body, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise _invalid(name)
    return value


def _int(body: Body, name: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(name)
    return value


def _number(body: Body, name: str) -> float:
    value = body.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _invalid(name)
    return float(value)


def _objects(body: Body, name: str) -> list[Body]:
    value = body.get(name)
    if not isinstance(value, list):
        raise _invalid(name)
    return [_object(item, name) for item in value]


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """`POST /v1/workers`: who this worker is for its new incarnation."""

    token: str  # what the worker presents to the coordinator
    call_token: str  # what the leader presents to the worker
    incarnation: int
    heartbeat_interval_s: float
    lease_s: float

    @classmethod
    def from_json(cls, body: Body) -> Registration:
        return cls(
            token=_str(body, "token"),
            call_token=_str(body, "call_token"),
            incarnation=_int(body, "incarnation"),
            heartbeat_interval_s=_number(body, "heartbeat_interval_s"),
            lease_s=_number(body, "lease_s"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatReply:
    """`POST /v1/workers/{id}/heartbeat`: what the leader assigns here now."""

    assignment: dict[int, int]  # partition -> epoch
    checkpoint_due: bool
    token: str | None  # a renewed worker token, when the leader sent one

    @classmethod
    def from_json(cls, body: Body) -> HeartbeatReply:
        token = body.get("token")
        return cls(
            assignment={
                _int(a, "partition"): _int(a, "epoch") for a in _objects(body, "assignment")
            },
            checkpoint_due=bool(body.get("checkpoint_due")),
            token=token if isinstance(token, str) else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointVerdict:
    """One entry of `POST /v1/checkpoints`'s answer."""

    partition: int
    fenced: bool
    reason: str  # why it was fenced; empty when accepted

    @classmethod
    def from_json(cls, body: Body) -> CheckpointVerdict:
        reason = body.get("reason")
        return cls(
            partition=_int(body, "partition"),
            fenced=_str(body, "status") == "fenced",
            reason=reason if isinstance(reason, str) else "",
        )


def checkpoint_verdicts(body: Body) -> list[CheckpointVerdict]:
    return [CheckpointVerdict.from_json(r) for r in _objects(body, "results")]


def total_partitions(health: Body) -> int:
    """The cluster's partition count, from `GET /v1/health`."""
    return _int(_object(health.get("cluster"), "cluster"), "total_partitions")


def routing(health: Body) -> tuple[int, ...]:
    """Every routing generation's partition count, from `GET /v1/health`'s
    `cluster.routing`; a coordinator that does not say has one generation:
    `[total_partitions]`."""
    counts = _object(health.get("cluster"), "cluster").get("routing")
    if counts is None:
        return (total_partitions(health),)
    if not (
        isinstance(counts, list)
        and counts
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts)
    ):
        raise _invalid("routing")
    return tuple(counts)


def store_set(health: Body) -> bool:
    """Whether the cluster file sets `store` (`GET /v1/health`; a coordinator that does not
    say counts as setting it)."""
    return health.get("store_set") is not False


def partition_owner(body: Body) -> str | None:
    """The owner `GET /v1/partitions/{p}` names; None when it names none."""
    owner = body.get("owner")
    return owner if isinstance(owner, str) else None
