"""The worker -> coordinator messages of a worker's session, declared once: registration,
heartbeat (with each held partition's report), the restart notice and checkpoint reports,
with the coordinator's replies to them. Also the pydantic building blocks every request of
the coordinator's HTTP API is made of (`Request`, `Response`, `Id`, `NonNeg`, `Positive`).

The worker builds its requests and reads these replies through these models
(`pipeline/session.py`, `pipeline/coordinator_replies.py`), the coordinator validates them
with the same ones (`coordinator/service/http/worker_routes.py`) and documents them in its
OpenAPI document (`coordinator/service/models.py` re-exports them). Every limit is named
here, so both ends hold one value (a batch error's text: BATCH_ERROR_LEN_MAX). Requests are
strict: a bool is not an int, unknown fields are refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from shared.messages.common import INT_VALUE_MAX, RATE_PER_S_MAX

__all__ = [
    "ADDRESS_LEN_MAX",
    "ADDRESS_PATTERN",
    "BATCH_ERROR_LEN_MAX",
    "CHECKPOINT_ENTRIES_MAX",
    "HEARTBEAT_LOAD_MAX",
    "ID_REGEX",
    "URI_LEN_MAX",
    "AssignmentEntry",
    "CheckpointEntry",
    "CheckpointResult",
    "CheckpointsRequest",
    "CheckpointsResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Id",
    "NonNeg",
    "PartitionReport",
    "Positive",
    "RegisterRequest",
    "RegisterResponse",
    "Request",
    "Response",
    "RestartingRequest",
    "RestartingResponse",
]

ID_REGEX = r"^[A-Za-z0-9._-]{1,64}$"
ADDRESS_LEN_MAX = 512
URI_LEN_MAX = 1024
CHECKPOINT_ENTRIES_MAX = 100_000
# A failing micro-batch's error text in a heartbeat: the worker cuts it to this, the
# coordinator refuses longer.
BATCH_ERROR_LEN_MAX = 500
HEARTBEAT_LOAD_MAX = 1e6
# A worker's labels and slots at registration (the core's WORKER_LABELS_MAX and
# WORKER_SLOTS_MAX, which a unit test keeps equal to these).
WORKER_LABELS_MAX = 32
WORKER_SLOTS_MAX = 100_000
# The slots of a worker that declared labels and no slots.
WORKER_SLOTS_DEFAULT = 64

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# scheme://host:port, the host a DNS name of up to three labels or a dotted IPv4 address
# (first character not 0, which keeps 0.0.0.0 out), the port 1..65535: a subset of what
# coordinator.service.address accepts (that check is the judge).
_NAME = rf"[A-Za-z1-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?(?:\.{_LABEL}){{0,2}}"
_IPV4 = r"[1-9][0-9]{0,2}(?:\.[0-9]{1,3}){3}"
ADDRESS_PATTERN = rf"^https?://(?:{_NAME}|{_IPV4}):{_PORT}$"

Id = Annotated[str, Field(pattern=ID_REGEX)]
# Every integer is range-checked here, before it reaches the codec: msgpack cannot encode
# past 64 bits (an OverflowError at propose time was a 500).


def _integral(value: object) -> object:
    """JSON Schema counts 5.0 as an integer (and clients that hold numbers as doubles send
    it); strict parsing would refuse it. A float with a fraction, a bool or a string still
    fails the strict int check after this."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


NonNeg = Annotated[int, Field(ge=0, le=INT_VALUE_MAX), BeforeValidator(_integral)]
Positive = Annotated[int, Field(ge=1, le=INT_VALUE_MAX), BeforeValidator(_integral)]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def to_json(self) -> dict[str, object]:
        """The JSON object a sender posts: fields at their defaults left out, as a receiver
        reads an absent field as its default (and one that predates a field ignores it)."""
        return self.model_dump(mode="json", exclude_defaults=True)


class Response(BaseModel):
    model_config = ConfigDict(frozen=True)


# -- workers -----------------------------------------------------------------------------


class RegisterRequest(Request):
    worker_id: Id
    # Scheme, host and port only: checked by coordinator.service.address (the leader calls
    # this URL with the worker's call token, so nothing in it may steer that call).
    address: Annotated[
        str,
        Field(
            min_length=1,
            max_length=ADDRESS_LEN_MAX,
            # Documents the shape for clients (schema only: check_address is the judge and
            # names the rule that failed). Stricter than the check: IPv6 literals and names
            # of more than three labels pass the check but not this pattern.
            json_schema_extra={"pattern": ADDRESS_PATTERN},
        ),
    ]
    # The worker's --store: refused (409 store_mismatch) when it is not the cluster's store,
    # whose checkpoint references would all be fenced. Absent: not checked.
    store: Annotated[str, Field(min_length=1, max_length=URI_LEN_MAX)] | None = None
    # What the worker offers recorded pipelines: its labels (pools select on them) and its
    # slots (the most of their partitions it takes). Both absent: `default`'s partitions only.
    labels: Annotated[dict[Id, Id], Field(max_length=WORKER_LABELS_MAX)] | None = None
    slots: Annotated[int, Field(ge=1, le=WORKER_SLOTS_MAX)] | None = None


class RegisterResponse(Response):
    worker_id: str
    incarnation: int
    # Presented by the worker to the coordinator; expires, renewed by every heartbeat.
    token: str
    token_expires_at_ms: int
    # Presented by the leader to the worker (host / release / checkpoint calls).
    call_token: str
    heartbeat_interval_s: float
    lease_s: float


class PartitionReport(Request):
    epoch: NonNeg
    offset: NonNeg
    # Sent only while the partition's micro-batches keep failing (docs/pipeline.md).
    failures: NonNeg = 0
    error: Annotated[str, Field(max_length=BATCH_ERROR_LEN_MAX)] = ""
    # The source log's end offset as the worker last saw it (lag = source_end - offset);
    # absent until the worker has looked.
    source_end: NonNeg | None = None
    # Records per second arriving for the partition, smoothed by the worker; absent until
    # it has seen the source grow (load-aware placement, docs/design.md §4).
    rate: Annotated[float, Field(ge=0.0, le=RATE_PER_S_MAX, allow_inf_nan=False)] | None = None


class HeartbeatRequest(Request):
    incarnation: Positive
    load: Annotated[float, Field(ge=0.0, le=HEARTBEAT_LOAD_MAX)] = 0.0
    # Keys are partition numbers as strings (JSON object keys); bounded by the handler
    # against heartbeat_partitions_max because the bound is a config key.
    partitions: Annotated[
        dict[Annotated[str, Field(pattern=r"^[0-9]{1,7}$")], PartitionReport],
        # The key pattern is the only way in: say so, or the schema admits any other key.
        Field(json_schema_extra={"additionalProperties": False}),
    ] = {}


class AssignmentEntry(Response):
    partition: int
    epoch: int


class HeartbeatResponse(Response):
    generation: int
    assignment: list[AssignmentEntry]
    checkpoint_due: bool
    # The worker's token, renewed: the worker replaces the one it holds.
    token: str | None = None
    token_expires_at_ms: int | None = None


class RestartingRequest(Request):
    incarnation: Positive


class RestartingResponse(Response):
    worker_id: str
    incarnation: int
    # Partitions the leader holds for the worker (it gets them back if it registers again in
    # time, with its saved token), and how long it holds them.
    partitions: int
    rejoin_grace_s: float


class CheckpointEntry(Request):
    partition: NonNeg
    epoch: NonNeg
    offset: NonNeg
    uri: Annotated[str, Field(min_length=1, max_length=URI_LEN_MAX)]


class CheckpointsRequest(Request):
    worker_id: Id
    incarnation: Positive
    checkpoints: Annotated[list[CheckpointEntry], Field(max_length=CHECKPOINT_ENTRIES_MAX)]


class CheckpointResult(Response):
    partition: int
    status: Literal["accepted", "fenced"]
    reason: str = ""


class CheckpointsResponse(Response):
    results: list[CheckpointResult]
