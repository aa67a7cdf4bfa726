"""The leader's calls to a worker, written once: paths, bodies, replies, status codes, the
call token's header and the error shape (docs/design.md §5 and §6); and the one header a
worker adds to its own registration, `WORKER_TOKEN_HEADER`.

The leader sends them (`coordinator/service/duties.py`), a worker answers them
(`pipeline/http_api.py`) and so does the scripted test worker; all of them build and read
this JSON only through these types, so no side can drift from the others::

    host        POST /v1/partitions/{p}/host     HostRequest {epoch, checkpoint: {offset, uri,
                                                 epoch} | null, routing?: [counts]}
                -> 200 HostReply {partition, epoch, offset}
    release     POST /v1/partitions/{p}/release  ReleaseRequest {epoch, migration_id?}
                -> 200 ReleaseReply {partition, epoch, checkpoint: {offset, uri}}
    checkpoint  POST /v1/checkpoint              {} -> 202 {"scheduled": true}
    warm        POST /v1/partitions/{p}/warm     WarmRequest {migration_id, checkpoint:
                                                 {offset, uri, epoch} | null, routing?}
                -> 200 WarmReply {partition, loaded, offset, head}; 409 the worker hosts
                the partition, 503 it cannot warm it up (the move goes cold)
    cut         POST /v1/partitions/{p}/cut      CutRequest {epoch, generation, partitions,
                                                 routing: [counts of generations 0..g]}
                -> 200 CutReply {partition, epoch, offset, done, uri | null}; 409 the
                worker does not host p at that epoch; repeated until done
    build       POST /v1/rescale/build           BuildRequest {generation, routing, epoch,
                                                 cuts: [{partition, offset, uri, epoch}]}
                -> 200 BuildReply {generation, done, checkpoints: [{partition, offset,
                uri}]}; 409 another generation's build is running; repeated until done
    failure     ErrorReply {error, message, field?}: 400 a bad body (the field named),
                401 not the call token, 409 the worker does not hold that epoch,
                503 a checkpoint could not be loaded or written (the leader retries)

Every call carries `Authorization: Bearer <call token>`; a worker compares it in constant
time. Invariant: a request's `from_json` accepts exactly what its `to_json` writes (integers
are never booleans, epochs lie in 1..EPOCH_MAX) and raises `InvalidCallBody` naming the field
for anything else; a reply's reader is lenient (None when malformed: asked again later).
`routing` is the partition count of each routing generation, index = generation
(docs/pipeline.md "Rescaling"). Pure: no I/O.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import ClassVar, TypeGuard

from shared.errors import RequestError
from shared.routing import KEY_GROUPS

__all__ = [
    "BUILD_ROUTE",
    "CHECKPOINT_ROUTE",
    "CUTS_MAX",
    "CUT_ROUTE",
    "EPOCH_MAX",
    "GENERATION0_PARTITIONS_MAX",
    "HOST_ROUTE",
    "RELEASE_ROUTE",
    "ROUTING_GENERATIONS_MAX",
    "STATUS_INVALID",
    "STATUS_OK",
    "STATUS_SCHEDULED",
    "STATUS_STALE",
    "STATUS_UNAUTHORIZED",
    "STATUS_UNAVAILABLE",
    "WARM_HOLD_S_MAX",
    "WARM_ROUTE",
    "WORKER_TOKEN_HEADER",
    "BuildReply",
    "BuildRequest",
    "BuiltCheckpoint",
    "CheckpointReply",
    "CheckpointRequest",
    "CutCheckpoint",
    "CutReply",
    "CutRequest",
    "ErrorReply",
    "HostReply",
    "HostRequest",
    "InvalidCallBody",
    "JsonObject",
    "ReleaseReply",
    "ReleaseRequest",
    "ReleasedCheckpoint",
    "SentCheckpoint",
    "WarmReply",
    "WarmRequest",
    "WorkerReply",
    "WorkerRequest",
    "authorization",
    "authorized",
]

JsonObject = dict[str, object]

# Where a registration presents the worker id's current worker token: a live id is
# re-registered only by its holder (or the admin), which is how a restarted worker proves it
# is the member it was (docs/security.md).
WORKER_TOKEN_HEADER = "Ripple-Worker-Token"

EPOCH_MAX = 2**63 - 1  # what the coordinator's codec carries

STATUS_OK = 200
STATUS_SCHEDULED = 202  # checkpoint: accepted, done in the background
STATUS_INVALID = 400
STATUS_UNAUTHORIZED = 401
STATUS_STALE = 409  # the worker does not hold the partition at that epoch
STATUS_UNAVAILABLE = 503  # a checkpoint could not be loaded or written: retry

# aiohttp route templates; `{p}` is the partition.
HOST_ROUTE = "/v1/partitions/{p}/host"
RELEASE_ROUTE = "/v1/partitions/{p}/release"
CHECKPOINT_ROUTE = "/v1/checkpoint"
WARM_ROUTE = "/v1/partitions/{p}/warm"
CUT_ROUTE = "/v1/partitions/{p}/cut"
BUILD_ROUTE = "/v1/rescale/build"
MIGRATION_ID_LEN_MAX = 64
# The longest a warm call may ask the worker to hold its answer for the copy's next step.
WARM_HOLD_S_MAX = 10.0
# Bounds of a `routing` list: generations a cluster may have made, generation 0's count
# (the coordinator's TOTAL_PARTITIONS_MAX) and a key-group generation's (KEY_GROUPS).
ROUTING_GENERATIONS_MAX = 64
GENERATION0_PARTITIONS_MAX = 1_000_000
# Cut checkpoints one build reads: one per old partition.
CUTS_MAX = GENERATION0_PARTITIONS_MAX


class InvalidCallBody(RequestError):
    """A call's body is not what this module writes (a 400 naming `field`)."""

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


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_epoch(value: object) -> TypeGuard[int]:
    return _is_int(value) and 1 <= value <= EPOCH_MAX


def _fields(body: object) -> dict[str, object]:
    if not isinstance(body, dict):
        raise InvalidCallBody("body must be a JSON object", "body")
    return body


def _epoch(fields: dict[str, object]) -> int:
    epoch = fields.get("epoch")
    if not _is_epoch(epoch):
        raise InvalidCallBody("epoch must be a positive integer", "epoch")
    return epoch


def _count_max(generation: int) -> int:
    return GENERATION0_PARTITIONS_MAX if generation == 0 else KEY_GROUPS


def _is_routing(value: object) -> TypeGuard[list[int]]:
    return (
        isinstance(value, list)
        and 1 <= len(value) <= ROUTING_GENERATIONS_MAX
        and all(_is_int(n) and 1 <= n <= _count_max(g) for g, n in enumerate(value))
    )


def _routing(fields: dict[str, object], generations: int | None = None) -> tuple[int, ...]:
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


def _optional_routing(fields: dict[str, object]) -> tuple[int, ...] | None:
    return None if fields.get("routing") is None else _routing(fields)


def _with_routing(body: JsonObject, routing: tuple[int, ...] | None) -> JsonObject:
    # Absent rather than null when there is none, so a call without a rescale is the JSON
    # it always was.
    if routing is not None:
        body["routing"] = list(routing)
    return body


def _is_offset(value: object) -> TypeGuard[int]:
    return _is_int(value) and 0 <= value <= EPOCH_MAX


# -- host ------------------------------------------------------------------------------------


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
            if _is_int(offset) and isinstance(uri, str) and _is_int(epoch):
                return cls(offset=offset, uri=uri, epoch=epoch)
        raise InvalidCallBody("checkpoint must be {offset, uri, epoch} or null", "checkpoint")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostRequest:
    """Open `partition` at `epoch`, from `checkpoint` or (None) by replaying from offset 0."""

    partition: int  # in the path, not the body
    epoch: int
    checkpoint: SentCheckpoint | None = None
    # Every routing generation's count (None: the worker's own, as before any rescale); a
    # checkpoint offset of generation g >= 1 needs it to read that generation's source log.
    routing: tuple[int, ...] | None = None

    @property
    def path(self) -> str:
        return HOST_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        ck = self.checkpoint
        body: JsonObject = {"epoch": self.epoch, "checkpoint": None if ck is None else ck.to_json()}
        return _with_routing(body, self.routing)

    @classmethod
    def from_json(cls, partition: int, body: object) -> HostRequest:
        fields = _fields(body)
        epoch = _epoch(fields)
        ck = fields.get("checkpoint")
        return cls(
            partition=partition,
            epoch=epoch,
            checkpoint=None if ck is None else SentCheckpoint.from_json(ck),
            routing=_optional_routing(fields),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HostReply:
    partition: int
    epoch: int
    offset: int  # the next source offset the partition will process

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "epoch": self.epoch, "offset": self.offset}


# -- release ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRequest:
    """Stop `partition` at `epoch` and hand over a final checkpoint."""

    partition: int  # in the path, not the body
    epoch: int
    migration_id: str | None = None  # named in the worker's log; the leader always sends it

    @property
    def path(self) -> str:
        return RELEASE_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        body: JsonObject = {"epoch": self.epoch}
        if self.migration_id is not None:
            body["migration_id"] = self.migration_id
        return body

    @classmethod
    def from_json(cls, partition: int, body: object) -> ReleaseRequest:
        fields = _fields(body)
        epoch = _epoch(fields)
        migration_id = fields.get("migration_id")
        if migration_id is not None and not isinstance(migration_id, str):
            raise InvalidCallBody("migration_id must be a string", "migration_id")
        return cls(partition=partition, epoch=epoch, migration_id=migration_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasedCheckpoint:
    """The final checkpoint a release hands over, written at the released epoch."""

    offset: int
    uri: str

    def to_json(self) -> JsonObject:
        return {"offset": self.offset, "uri": self.uri}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseReply:
    partition: int
    epoch: int
    checkpoint: ReleasedCheckpoint

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "epoch": self.epoch,
            "checkpoint": self.checkpoint.to_json(),
        }

    @staticmethod
    def checkpoint_of(body: object) -> ReleasedCheckpoint | None:
        """The final checkpoint a 200 release reply names, or None when it names none
        well-formed: the hand-off then keeps the last accepted checkpoint and the new owner
        replays the source from there, which loses nothing."""
        ck = body.get("checkpoint") if isinstance(body, dict) else None
        if isinstance(ck, dict):
            offset, uri = ck.get("offset"), ck.get("uri")
            if _is_int(offset) and isinstance(uri, str):
                return ReleasedCheckpoint(offset=offset, uri=uri)
        return None


# -- checkpoint ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRequest:
    """Checkpoint every open partition now and report them; the body is empty (and a
    worker does not read it)."""

    path: ClassVar[str] = CHECKPOINT_ROUTE

    def to_json(self) -> JsonObject:
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointReply:
    scheduled: bool = True

    def to_json(self) -> JsonObject:
        return {"scheduled": self.scheduled}


# -- warm ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmRequest:
    """Warm `partition` up for migration `migration_id`: load `checkpoint` (None: from offset
    0) and follow the source log, read-only, until hosted or idle; repeated, it answers how
    far the warm copy is."""

    partition: int  # in the path, not the body
    migration_id: str
    checkpoint: SentCheckpoint | None = None
    routing: tuple[int, ...] | None = None  # as HostRequest.routing
    # Once the copy is loaded, answer after its next micro-batch step (or after this long):
    # a release decided on that answer reaches the source while the target's batch in
    # flight reads past the source's last one. 0 (and a worker that predates it): at once.
    hold_s: float = 0.0

    @property
    def path(self) -> str:
        return WARM_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        ck = self.checkpoint
        body: JsonObject = {
            "migration_id": self.migration_id,
            "checkpoint": None if ck is None else ck.to_json(),
        }
        if self.hold_s > 0:
            body["hold_s"] = self.hold_s
        return _with_routing(body, self.routing)

    @classmethod
    def from_json(cls, partition: int, body: object) -> WarmRequest:
        fields = _fields(body)
        mid = fields.get("migration_id")
        if not isinstance(mid, str) or not 1 <= len(mid) <= MIGRATION_ID_LEN_MAX:
            raise InvalidCallBody(
                f"migration_id must be a string of 1..{MIGRATION_ID_LEN_MAX} chars",
                "migration_id",
            )
        ck = fields.get("checkpoint")
        hold = fields.get("hold_s", 0.0)
        if (
            isinstance(hold, bool)
            or not isinstance(hold, int | float)
            or not 0 <= hold <= WARM_HOLD_S_MAX
        ):
            raise InvalidCallBody(
                f"hold_s must be a number of seconds from 0 to {WARM_HOLD_S_MAX:g}", "hold_s"
            )
        return cls(
            partition=partition,
            migration_id=mid,
            checkpoint=None if ck is None else SentCheckpoint.from_json(ck),
            routing=_optional_routing(fields),
            hold_s=float(hold),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmReply:
    partition: int
    # The checkpoint is in and a micro-batch has replayed into the copy (or had nothing to).
    loaded: bool
    offset: int  # the next source offset the warm copy would read
    head: int  # the source log's end when the copy last listed it

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "loaded": self.loaded,
            "offset": self.offset,
            "head": self.head,
        }

    @staticmethod
    def from_json(body: object) -> WarmReply | None:
        """The reply's progress, or None when it is not well-formed (asked again later)."""
        if not isinstance(body, dict):
            return None
        p, loaded, offset, head = (body.get(k) for k in ("partition", "loaded", "offset", "head"))
        if _is_int(p) and isinstance(loaded, bool) and _is_int(offset) and _is_int(head):
            return WarmReply(partition=p, loaded=loaded, offset=offset, head=head)
        return None


# -- cut (a rescale ends an old partition's generation) ---------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CutRequest:
    """Seal `partition` of `generation` for the next one (`partitions` of them), process up
    to the seal and checkpoint exactly there; repeated, it answers whether that is done."""

    partition: int  # in the path, not the body
    epoch: int
    generation: int  # the generation that ends
    partitions: int  # the next generation's partition count
    routing: tuple[int, ...]  # counts of generations 0..generation

    @property
    def path(self) -> str:
        return CUT_ROUTE.format(p=self.partition)

    def to_json(self) -> JsonObject:
        return {
            "epoch": self.epoch,
            "generation": self.generation,
            "partitions": self.partitions,
            "routing": list(self.routing),
        }

    @classmethod
    def from_json(cls, partition: int, body: object) -> CutRequest:
        fields = _fields(body)
        epoch = _epoch(fields)
        generation = fields.get("generation")
        if not _is_int(generation) or not 0 <= generation < ROUTING_GENERATIONS_MAX - 1:
            raise InvalidCallBody(
                f"generation must be an integer in 0..{ROUTING_GENERATIONS_MAX - 2}", "generation"
            )
        partitions = fields.get("partitions")
        if not _is_int(partitions) or not 1 <= partitions <= KEY_GROUPS:
            raise InvalidCallBody(f"partitions must be an integer in 1..{KEY_GROUPS}", "partitions")
        routing = _routing(fields, generation + 1)
        return cls(
            partition=partition,
            epoch=epoch,
            generation=generation,
            partitions=partitions,
            routing=routing,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CutReply:
    partition: int
    epoch: int
    offset: int  # the cut: the seal's offset
    done: bool  # a checkpoint at exactly (partition, epoch, offset) is written
    uri: str | None  # that checkpoint, once done

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "epoch": self.epoch,
            "offset": self.offset,
            "done": self.done,
            "uri": self.uri,
        }

    @staticmethod
    def from_json(body: object) -> CutReply | None:
        """The reply, or None when it is not well-formed (done needs a uri)."""
        if not isinstance(body, dict):
            return None
        p, epoch, offset = body.get("partition"), body.get("epoch"), body.get("offset")
        done, uri = body.get("done"), body.get("uri")
        if not (_is_int(p) and _is_epoch(epoch) and _is_offset(offset)):
            return None
        if not isinstance(done, bool) or not (uri is None or isinstance(uri, str)):
            return None
        if done and uri is None:
            return None
        return CutReply(partition=p, epoch=epoch, offset=offset, done=done, uri=uri)


# -- build (a rescale's state move) ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CutCheckpoint:
    """One old partition's cut: its checkpoint at `offset`, written at `epoch`."""

    partition: int
    offset: int
    uri: str
    epoch: int

    def to_json(self) -> JsonObject:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "uri": self.uri,
            "epoch": self.epoch,
        }

    @classmethod
    def from_json(cls, value: object) -> CutCheckpoint:
        if isinstance(value, dict):
            p, offset = value.get("partition"), value.get("offset")
            uri, epoch = value.get("uri"), value.get("epoch")
            if (
                _is_int(p)
                and p >= 0
                and _is_offset(offset)
                and _is_epoch(epoch)
                and isinstance(uri, str)
                and uri
            ):
                return cls(partition=p, offset=offset, uri=uri, epoch=epoch)
        raise InvalidCallBody("each cut must be {partition, offset, uri, epoch}", "cuts")


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltCheckpoint:
    """A new partition's starting checkpoint, written by a build."""

    partition: int
    offset: int
    uri: str

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "offset": self.offset, "uri": self.uri}


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildRequest:
    """Build generation `generation`'s starting checkpoints from `cuts`, one per partition of
    the generation before it, writing them at `epoch`; repeated, it answers progress."""

    path: ClassVar[str] = BUILD_ROUTE

    generation: int  # the new generation (>= 1)
    routing: tuple[int, ...]  # counts of generations 0..generation
    epoch: int  # the rescale's base epoch
    cuts: tuple[CutCheckpoint, ...]  # by old partition 0..routing[generation - 1] - 1

    def to_json(self) -> JsonObject:
        return {
            "generation": self.generation,
            "routing": list(self.routing),
            "epoch": self.epoch,
            "cuts": [c.to_json() for c in self.cuts],
        }

    @classmethod
    def from_json(cls, body: object) -> BuildRequest:
        fields = _fields(body)
        generation = fields.get("generation")
        if not _is_int(generation) or not 1 <= generation < ROUTING_GENERATIONS_MAX:
            raise InvalidCallBody(
                f"generation must be an integer in 1..{ROUTING_GENERATIONS_MAX - 1}", "generation"
            )
        routing = _routing(fields, generation + 1)
        epoch = _epoch(fields)
        raw = fields.get("cuts")
        if not isinstance(raw, list) or len(raw) > CUTS_MAX:
            raise InvalidCallBody(f"cuts must be a list of at most {CUTS_MAX}", "cuts")
        cuts = tuple(sorted((CutCheckpoint.from_json(c) for c in raw), key=lambda c: c.partition))
        previous = routing[generation - 1]
        if [c.partition for c in cuts] != list(range(previous)):
            raise InvalidCallBody(
                f"cuts must name each partition 0..{previous - 1} of generation "
                f"{generation - 1} exactly once",
                "cuts",
            )
        return cls(generation=generation, routing=routing, epoch=epoch, cuts=cuts)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildReply:
    generation: int
    done: bool
    checkpoints: tuple[BuiltCheckpoint, ...]  # one per new partition once done, else empty

    def to_json(self) -> JsonObject:
        return {
            "generation": self.generation,
            "done": self.done,
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }

    @staticmethod
    def from_json(body: object) -> BuildReply | None:
        """The reply, or None when it is not well-formed."""
        if not isinstance(body, dict):
            return None
        generation, done, raw = body.get("generation"), body.get("done"), body.get("checkpoints")
        if not (_is_int(generation) and isinstance(done, bool) and isinstance(raw, list)):
            return None
        checkpoints: list[BuiltCheckpoint] = []
        for ck in raw:
            q = ck.get("partition") if isinstance(ck, dict) else None
            offset = ck.get("offset") if isinstance(ck, dict) else None
            uri = ck.get("uri") if isinstance(ck, dict) else None
            if not (_is_int(q) and _is_offset(offset) and isinstance(uri, str)):
                return None
            checkpoints.append(BuiltCheckpoint(partition=q, offset=offset, uri=uri))
        if done and not checkpoints:
            return None
        return BuildReply(generation=generation, done=done, checkpoints=tuple(checkpoints))


WorkerRequest = (
    HostRequest | ReleaseRequest | CheckpointRequest | WarmRequest | CutRequest | BuildRequest
)
WorkerReply = HostReply | ReleaseReply | CheckpointReply | WarmReply | CutReply | BuildReply


# -- failures --------------------------------------------------------------------------------


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
