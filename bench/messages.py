"""Message codec benchmark: which library declares the cluster's messages.

Decodes-and-validates and encodes two representative messages with each candidate: a
worker's heartbeat (`POST /v1/workers/{id}/heartbeat`, 64 partitions reported, the biggest
message a coordinator reads per second per worker) and a host call with its reply (the
leader's most frequent call, `shared/messages/host.py`). Candidates: pydantic v2 (what the
coordinator's HTTP API is declared with), frozen dataclasses with hand-written validation
(what the leader <-> worker calls are declared with) and msgspec when it is installed (it is
not a dependency; the row is left out without it). Each does the same checks: types strict
(no bool for an int), ranges and lengths bounded. Rows: microseconds per message, median of
`ROUNDS` rounds (`decode_us`: bytes -> validated value; `encode_us`: value -> bytes).
Nothing here passes or fails on speed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

from shared.messages.host import HostReply, HostRequest
from shared.messages.session import HeartbeatRequest

__all__ = ["run"]

ROUNDS = 5
PARTITIONS_REPORTED = 64
INT_MAX = 2**63 - 1


def _heartbeat_bytes() -> bytes:
    parts = {
        str(p): {"epoch": 3, "offset": 1_000 + p, "source_end": 2_000 + p, "rate": 12.5}
        for p in range(PARTITIONS_REPORTED)
    }
    return json.dumps({"incarnation": 4, "load": 64.0, "partitions": parts}).encode()


HOST_REQUEST = HostRequest(partition=17, epoch=9, checkpoint=None, routing=(64,))
HOST_REPLY = HostReply(partition=17, epoch=9, offset=123_456)


# -- plain dataclasses, validated by hand ----------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Report:
    epoch: int
    offset: int
    source_end: int | None
    rate: float | None


def _report(value: object) -> _Report:
    if not isinstance(value, dict):
        raise ValueError("partition report must be an object")
    epoch, offset = value.get("epoch"), value.get("offset")
    end, rate = value.get("source_end"), value.get("rate")
    if not (_is_int(epoch) and 0 <= epoch <= INT_MAX and _is_int(offset) and offset >= 0):
        raise ValueError("epoch and offset must be non-negative integers")
    if end is not None and not (_is_int(end) and end >= 0):
        raise ValueError("source_end must be a non-negative integer")
    if rate is not None and not (isinstance(rate, float | int) and 0 <= rate <= 1e9):
        raise ValueError("rate must be a number of records per second")
    return _Report(epoch=epoch, offset=offset, source_end=end, rate=rate)


def _dataclass_heartbeat(raw: bytes) -> tuple[int, float, dict[str, _Report]]:
    body = json.loads(raw)
    incarnation, load, parts = body.get("incarnation"), body.get("load"), body.get("partitions")
    if not (_is_int(incarnation) and incarnation >= 1 and isinstance(load, float | int)):
        raise ValueError("incarnation and load")
    if not isinstance(parts, dict):
        raise ValueError("partitions")
    return incarnation, load, {k: _report(v) for k, v in parts.items() if k.isdigit()}


def _dataclass_encode_heartbeat(value: tuple[int, float, dict[str, _Report]]) -> bytes:
    incarnation, load, parts = value
    reports = {
        k: {"epoch": r.epoch, "offset": r.offset, "source_end": r.source_end, "rate": r.rate}
        for k, r in parts.items()
    }
    return json.dumps({"incarnation": incarnation, "load": load, "partitions": reports}).encode()


# -- pydantic (the host call's models; the heartbeat is the coordinator's own model) ---------

NonNeg = Annotated[int, Field(ge=0, le=INT_MAX)]


class _PydanticSent(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    offset: NonNeg
    uri: str
    epoch: NonNeg


class _PydanticHost(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    epoch: Annotated[int, Field(ge=1, le=INT_MAX)]
    checkpoint: _PydanticSent | None = None
    routing: Annotated[list[Annotated[int, Field(ge=1)]], Field(max_length=64)] | None = None


class _PydanticHostReply(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True)
    partition: NonNeg
    epoch: NonNeg
    offset: NonNeg


Case = dict[str, Callable[[], object]]


def _cases() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """name -> (decode, encode), each a closure over one prepared message."""
    beat = _heartbeat_bytes()
    host = json.dumps(HOST_REQUEST.to_json()).encode()
    reply = HOST_REPLY.to_json()
    pyd_beat = HeartbeatRequest.model_validate_json(beat)
    pyd_reply = _PydanticHostReply(**reply)  # type: ignore[arg-type]
    dc_beat = _dataclass_heartbeat(beat)
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "heartbeat_pydantic": (
            lambda: HeartbeatRequest.model_validate_json(beat),
            lambda: pyd_beat.model_dump_json(exclude_defaults=True).encode(),
        ),
        "heartbeat_dataclasses": (
            lambda: _dataclass_heartbeat(beat),
            lambda: _dataclass_encode_heartbeat(dc_beat),
        ),
        "host_pydantic": (
            lambda: _PydanticHost.model_validate_json(host),
            lambda: pyd_reply.model_dump_json().encode(),
        ),
        "host_dataclasses": (
            lambda: HostRequest.from_json(17, json.loads(host)),
            lambda: json.dumps(HOST_REPLY.to_json()).encode(),
        ),
    }
    if importlib.util.find_spec("msgspec") is not None:
        cases |= _msgspec_cases(beat, host)
    return cases


def _msgspec_cases(
    beat: bytes, host: bytes
) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    # Optional (see the module docstring), so typed as Any: mypy runs where it is absent.
    msgspec: Any = importlib.import_module("msgspec")

    # defstruct, not class statements: this module's annotations are strings, and msgspec
    # resolves them in the module's namespace, where the optional import is not.
    nonneg = Annotated[int, msgspec.Meta(ge=0, le=INT_MAX)]
    positive = Annotated[int, msgspec.Meta(ge=1, le=INT_MAX)]
    strict: dict[str, Any] = {"forbid_unknown_fields": True, "frozen": True}
    rate = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
    report = msgspec.defstruct(
        "Report",
        [
            ("epoch", nonneg),
            ("offset", nonneg),
            ("source_end", nonneg | None, None),
            ("rate", rate | None, None),
        ],
        **strict,
    )
    beat_type = msgspec.defstruct(
        "Beat",
        [
            ("incarnation", positive),
            ("load", float, 0.0),
            ("partitions", dict.__class_getitem__((str, report)), {}),
        ],
        **strict,
    )
    sent = msgspec.defstruct(
        "Sent", [("offset", nonneg), ("uri", str), ("epoch", nonneg)], **strict
    )
    routing = Annotated[list[int], msgspec.Meta(max_length=64)]
    host_type = msgspec.defstruct(
        "Host",
        [("epoch", positive), ("checkpoint", sent | None, None), ("routing", routing | None, None)],
        **strict,
    )
    reply_type = msgspec.defstruct(
        "Reply", [("partition", int), ("epoch", int), ("offset", int)], frozen=True
    )

    beat_decoder = msgspec.json.Decoder(beat_type)
    host_decoder = msgspec.json.Decoder(host_type)
    encoder = msgspec.json.Encoder()
    decoded: Any = beat_decoder.decode(beat)
    reply = reply_type(partition=17, epoch=9, offset=123_456)
    return {
        "heartbeat_msgspec": (
            lambda: beat_decoder.decode(beat),
            lambda: encoder.encode(decoded),
        ),
        "host_msgspec": (lambda: host_decoder.decode(host), lambda: encoder.encode(reply)),
    }


def _per_op_us(fn: Callable[[], object], n: int) -> float:
    rounds = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds)


def run(quick: bool) -> dict[str, dict[str, float]]:
    n = 200 if quick else 20_000
    rows: dict[str, dict[str, float]] = {}
    for name, (decode, encode) in _cases().items():
        # Heartbeats are ~64 times the work of a host call: fewer of them for one figure.
        count = max(10, n // 20) if name.startswith("heartbeat") else n
        rows[name] = {
            "decode_us": round(_per_op_us(decode, count), 2),
            "encode_us": round(_per_op_us(encode, count), 2),
        }
    return rows
