"""What every leader <-> worker call shares: the JSON object type, limits, status codes, the
call token's header, the error reply, the transport-neutral answer, and the field readers
each call's `from_json` is built from (`shared/messages/__init__.py` has the table of calls).

Invariant: a reader accepts exactly what the matching writer writes (integers are never
booleans, epochs lie in 1..EPOCH_MAX, routing lists within their generations' bounds) and
raises `InvalidCallBody` naming the field for anything else. Pure: no I/O.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeGuard

from shared.errors import RequestError
from shared.routing import KEY_GROUPS

__all__ = [
    "EPOCH_MAX",
    "GENERATION0_PARTITIONS_MAX",
    "INT_VALUE_MAX",
    "RATE_PER_S_MAX",
    "ROUTING_GENERATIONS_MAX",
    "STATUS_INVALID",
    "STATUS_OK",
    "STATUS_SCHEDULED",
    "STATUS_STALE",
    "STATUS_UNAUTHORIZED",
    "STATUS_UNAVAILABLE",
    "WORKER_TOKEN_HEADER",
    "Answer",
    "ErrorReply",
    "Fence",
    "InvalidCallBody",
    "JsonObject",
    "Outcome",
    "SentCheckpoint",
    "WorkerReply",
    "WorkerRequest",
    "authorization",
    "authorized",
    "epoch_field",
    "fields_of",
    "is_epoch",
    "is_int",
    "is_offset",
    "optional_routing",
    "routing_field",
    "with_routing",
]

JsonObject = dict[str, object]

# Where a registration presents the worker id's current worker token: a live id is
# re-registered only by its holder (or the admin), which is how a restarted worker proves it
# is the member it was (docs/security.md).
WORKER_TOKEN_HEADER = "Ripple-Worker-Token"

# msgpack carries integers up to 2**64-1, but Python-side consumers (JSON, SQL, metrics)
# commonly assume signed 64-bit; refusing larger values keeps every replica's numbers portable.
INT_VALUE_MAX = 2**63 - 1
EPOCH_MAX = INT_VALUE_MAX  # what the coordinator's codec carries
# The largest input rate one partition may report: a bound on what a heartbeat can make
# the planner add up, far above any one partition's real rate.
RATE_PER_S_MAX = 1e9

STATUS_OK = 200
STATUS_SCHEDULED = 202  # checkpoint: accepted, done in the background
STATUS_INVALID = 400
STATUS_UNAUTHORIZED = 401
STATUS_STALE = 409  # the worker does not hold the partition at that epoch
STATUS_UNAVAILABLE = 503  # a checkpoint could not be loaded or written: retry

# Bounds of a `routing` list: generations a cluster may have made, generation 0's count
# (the coordinator's TOTAL_PARTITIONS_MAX) and a key-group generation's (KEY_GROUPS).
ROUTING_GENERATIONS_MAX = 64
GENERATION0_PARTITIONS_MAX = 1_000_000


class WorkerRequest(Protocol):
    """A leader -> worker call's request: where it goes and its JSON body."""

    @property
    def path(self) -> str: ...

    def to_json(self) -> JsonObject: ...


class WorkerReply(Protocol):
    """A worker's 200 (or 202) reply to a call."""

    def to_json(self) -> JsonObject: ...


class Outcome(Enum):
    """How a worker answered a call, whatever carried it (HTTP, or the simulation's
    network): the HTTP client maps statuses to these (`coordinator/service/worker_client.py`)."""

    OK = "ok"  # accepted (HTTP 200, 202)
    STALE = "stale"  # the worker does not hold the partition at that epoch (HTTP 409)
    REFUSED = "refused"  # any other answer; the body is an ErrorReply
    UNREACHABLE = "unreachable"  # no answer: refused, reset or timed out


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A worker's answer to one call, transport-neutral."""

    outcome: Outcome
    # The JSON object the worker sent ({} when none); with UNREACHABLE, {"message": why}.
    body: JsonObject


# (partition, epoch, offset, uri) -> why that uri may not be recorded, or None: every
# checkpoint a reply names passes one before the planner sees it.
Fence = Callable[[int, int, int, str], str | None]


class InvalidCallBody(RequestError):
    """A call's body is not what its message writes (a 400 naming `field`)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message, field=field)


def authorization(call_token: str) -> str:
    """The Authorization header the leader sends with every call."""
    return f"Bearer {call_token}"


def authorized(header: str, call_token: str) -> bool:
    """Whether `header` carries `call_token`; never for an empty token (a worker that has not
    registered takes no call)."""
    # compare_digest raises on non-ASCII str (a 500): compare bytes, after checking the
    # header is ASCII at all (undecodable bytes arrive as surrogate escapes).
    return (
        bool(call_token)
        and header.isascii()
        and hmac.compare_digest(header.encode(), authorization(call_token).encode())
    )


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_epoch(value: object) -> TypeGuard[int]:
    return is_int(value) and 1 <= value <= EPOCH_MAX


def fields_of(body: object) -> dict[str, object]:
    if not isinstance(body, dict):
        raise InvalidCallBody("body must be a JSON object", "body")
    return body


def epoch_field(fields: dict[str, object]) -> int:
    epoch = fields.get("epoch")
    if not is_epoch(epoch):
        raise InvalidCallBody("epoch must be a positive integer", "epoch")
    return epoch


def _count_max(generation: int) -> int:
    return GENERATION0_PARTITIONS_MAX if generation == 0 else KEY_GROUPS


def _is_routing(value: object) -> TypeGuard[list[int]]:
    return (
        isinstance(value, list)
        and 1 <= len(value) <= ROUTING_GENERATIONS_MAX
        and all(is_int(n) and 1 <= n <= _count_max(g) for g, n in enumerate(value))
    )


def routing_field(fields: dict[str, object], generations: int | None = None) -> tuple[int, ...]:
    """The `routing` field: 1..ROUTING_GENERATIONS_MAX counts, each in its generation's
    bounds, exactly `generations` of them when given."""
    value = fields.get("routing")
    if not _is_routing(value) or (generations is not None and len(value) != generations):
        raise InvalidCallBody(
            f"routing must be a list of up to {ROUTING_GENERATIONS_MAX} partition counts "
            f"(generation 0: 1..{GENERATION0_PARTITIONS_MAX}, later: 1..{KEY_GROUPS})"
            + ("" if generations is None else f", one per generation 0..{generations - 1}"),
            "routing",
        )
    return tuple(value)


def optional_routing(fields: dict[str, object]) -> tuple[int, ...] | None:
    return None if fields.get("routing") is None else routing_field(fields)


def with_routing(body: JsonObject, routing: tuple[int, ...] | None) -> JsonObject:
    # Absent rather than null when there is none, so a call without a rescale is the JSON
    # it always was.
    if routing is not None:
        body["routing"] = list(routing)
    return body


def is_offset(value: object) -> TypeGuard[int]:
    return is_int(value) and 0 <= value <= EPOCH_MAX


@dataclass(frozen=True, slots=True, kw_only=True)
class SentCheckpoint:
    """The checkpoint a host call starts from, as the coordinator recorded it: written at
    `epoch` (older than the host's when inherited), holding the state up to `offset`."""

    offset: int
    uri: str
    epoch: int

    def to_json(self) -> JsonObject:
        return {"offset": self.offset, "uri": self.uri, "epoch": self.epoch}

    @classmethod
    def from_json(cls, value: object) -> SentCheckpoint:
        if isinstance(value, dict):
            offset, uri, epoch = value.get("offset"), value.get("uri"), value.get("epoch")
            if is_int(offset) and isinstance(uri, str) and is_int(epoch):
                return cls(offset=offset, uri=uri, epoch=epoch)
        raise InvalidCallBody("checkpoint must be {offset, uri, epoch} or null", "checkpoint")


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorReply:
    """What a worker answers with any status but 200 and 202."""

    error: str  # a stable code: invalid, unauthorized, stale_epoch, checkpoint_unavailable, ...
    message: str
    field: str | None = None

    def to_json(self) -> JsonObject:
        body: JsonObject = {"error": self.error, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body

    @classmethod
    def from_json(cls, body: object) -> ErrorReply:
        """Read leniently: a failed call's body need not come from a worker (a proxy's page,
        a connection that broke), so a part that is missing or not a string reads as empty."""
        fields = body if isinstance(body, dict) else {}
        error, message, field = fields.get("error"), fields.get("message"), fields.get("field")
        return cls(
            error=error if isinstance(error, str) else "",
            message=message if isinstance(message, str) else "",
            field=field if isinstance(field, str) else None,
        )
