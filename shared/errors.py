"""Ripple's errors: one exception hierarchy, a closed vocabulary of codes, and no transport.

RippleError                      root: a code, a message, maybe the field at fault
+-- ConfigError                  bad configuration (code invalid_config)
+-- RequestError                 the caller misused the API, or the state machine refused
+-- UnavailableError             no leader, not ready, or outcome unknown: retry_after_s
+-- ClientError                  raised by coordinator.client for a failed remote call

Every code is one of `ErrorCode`, and every code is of one `ErrorKind` (`KIND_OF`). The kind is
what STYLE rule 6 calls the status hint, as h11's LocalProtocolError / RemoteProtocolError say
whose fault an error is without speaking HTTP: bad input, unauthorized, forbidden, not found,
conflict, too large, unavailable, ... The HTTP edges (the coordinator's middleware, the
worker's, the client reading an answer back) turn a kind into a number with the one table in
`shared.http_statuses`; nothing here knows a number, and the core never imports that table.
A ClientError's code is the remote's (any string: a newer release may answer one this release
does not list), so its kind is given by the client edge from the answer's status.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, Literal, get_args

__all__ = [
    "KIND_OF",
    "ClientError",
    "ConfigError",
    "ErrorCode",
    "ErrorKind",
    "RequestError",
    "RippleError",
    "UnavailableError",
]


class ErrorKind(enum.Enum):
    """Whose fault an error is and what the caller can do about it."""

    INVALID = "invalid"  # the input is wrong: fix it before sending it again
    UNAUTHORIZED = "unauthorized"  # no credentials, or ones that prove nothing
    FORBIDDEN = "forbidden"  # credentials that may not do this
    NOT_FOUND = "not_found"  # the thing named does not exist
    METHOD_NOT_ALLOWED = "method_not_allowed"  # the path exists, the method does not
    CONFLICT = "conflict"  # the state does not allow it now (stale, in flight, fenced)
    TOO_LARGE = "too_large"  # a body or an answer over its bound
    UNAVAILABLE = "unavailable"  # transient: the same request later may succeed
    ELSEWHERE = "elsewhere"  # another node serves it (the leader): ask there
    INTERNAL = "internal"  # a fault of ours, not the caller's


# The codes an error may carry (the JSON error shape's "error"). One list for the product:
# the state machine refuses with some (coordinator.core.commands.RejectCode, a subset), the
# services, the worker and the command line raise the others.
ErrorCode = Literal[
    "invalid",
    "invalid_config",
    "usage",
    "unauthorized",
    "forbidden",
    "not_found",
    "unknown_worker",
    "method_not_allowed",
    "conflict",
    "stale_epoch",
    "fenced",
    "version_unsupported",
    "rescale_in_flight",
    "same_partition_count",
    "not_online",
    "rescaled",
    "worker_active",
    "stale_incarnation",
    "store_mismatch",
    "stale_generation",
    "build_in_flight",
    "hosted",
    "routing_conflict",
    "too_large",
    "unavailable",
    "not_bootstrapped",
    "version_not_finalized",
    "halted",
    "not_ready",
    "overloaded",
    "unreachable",
    "timeout",
    "store_failed",
    "no_lease",
    "checkpoint_unavailable",
    "warm_refused",
    "warm_failed",
    "stopping",
    "routing_unknown",
    "not_leader",
    "internal",
    "bad_backup",
    "client",
    "invalid_reply",
]

_K = ErrorKind
KIND_OF: Final[Mapping[str, ErrorKind]] = {
    "invalid": _K.INVALID,  # a field or a body is wrong (the field is named)
    "invalid_config": _K.INVALID,  # a setting is wrong
    "usage": _K.INVALID,  # the command line asked for something it cannot do
    "unauthorized": _K.UNAUTHORIZED,  # no bearer token, a malformed or an expired one
    "forbidden": _K.FORBIDDEN,  # a wrong token, or another worker's
    "not_found": _K.NOT_FOUND,  # no such partition, worker, voter, file or key
    "unknown_worker": _K.NOT_FOUND,  # a token of a worker the cluster forgot: register again
    "method_not_allowed": _K.METHOD_NOT_ALLOWED,  # the path takes other methods
    "conflict": _K.CONFLICT,  # the state does not allow the command now
    "stale_epoch": _K.CONFLICT,  # an epoch older than the partition's (or the worker's)
    "fenced": _K.CONFLICT,  # a checkpoint of an epoch that no longer owns the partition
    # Some voter does not speak the command's command-set version (it runs an older release).
    "version_unsupported": _K.CONFLICT,
    "rescale_in_flight": _K.CONFLICT,  # a rescale is not DONE yet
    "same_partition_count": _K.CONFLICT,  # the count asked for is the current one
    "not_online": _K.CONFLICT,  # FinishRescale before every new partition is ONLINE
    # A full replay of a partition of a rescaled table: its state starts at its build.
    "rescaled": _K.CONFLICT,
    "worker_active": _K.CONFLICT,  # the worker id is live: only its holder re-registers it
    "stale_incarnation": _K.CONFLICT,  # a token of an older incarnation of the worker
    "store_mismatch": _K.CONFLICT,  # the worker's object store is not the cluster's
    "stale_generation": _K.CONFLICT,  # a routing generation other than the partition's
    "build_in_flight": _K.CONFLICT,  # a rescale build of another generation is running
    "hosted": _K.CONFLICT,  # warm of a partition this worker hosts
    "routing_conflict": _K.CONFLICT,  # routing generations that disagree with the known ones
    "too_large": _K.TOO_LARGE,  # a body or an answer over its bound
    "unavailable": _K.UNAVAILABLE,  # no leader, outcome unknown: retry (Idempotency-Key)
    "not_bootstrapped": _K.UNAVAILABLE,  # the cluster has no partitions yet
    # The command's command-set version is above the cluster's finalized one: every voter
    # speaks it and the leader finalizes it shortly (coordinator/core/versions.py).
    "version_not_finalized": _K.UNAVAILABLE,
    # This node has stopped applying entries (an entry of a command set it does not speak).
    "halted": _K.UNAVAILABLE,
    "not_ready": _K.UNAVAILABLE,  # the leader's duties have not started yet
    "overloaded": _K.UNAVAILABLE,  # writes waiting to commit, or a full admission class
    "unreachable": _K.UNAVAILABLE,  # no coordinator answered the client
    "timeout": _K.UNAVAILABLE,  # the command line waited its bound for the cluster
    "store_failed": _K.UNAVAILABLE,  # the object store failed a read or a write
    "no_lease": _K.UNAVAILABLE,  # the worker's lease lapsed: it checkpoints no more now
    "checkpoint_unavailable": _K.UNAVAILABLE,  # a checkpoint could not be loaded or written
    "warm_refused": _K.UNAVAILABLE,  # this worker does not warm (now)
    "warm_failed": _K.UNAVAILABLE,  # a warm-up failed: the leader asks again
    "stopping": _K.UNAVAILABLE,  # the worker is shutting down
    "routing_unknown": _K.UNAVAILABLE,  # a routing generation the worker does not know yet
    "not_leader": _K.ELSEWHERE,  # a follower: the leader's address goes with it
    "internal": _K.INTERNAL,  # a bug: an unexpected exception (no trace leaves)
    "bad_backup": _K.INTERNAL,  # the leader sent a damaged backup
    "client": _K.INTERNAL,  # a failed remote call, no more said
    "invalid_reply": _K.INTERNAL,  # the coordinator's answer lacks a field the worker needs
}
assert set(KIND_OF) == set(get_args(ErrorCode)), "every code has one kind, and only codes do"


class RippleError(Exception):
    """The root. `code` is the JSON error shape's "error" (a class's default, or the one
    given), `kind` follows from it; `field` names the input at fault, where one is."""

    code: str = "internal"

    def __init__(
        self, message: str, *, field: str | None = None, code: ErrorCode | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code

    @property
    def kind(self) -> ErrorKind:
        return KIND_OF[self.code]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class ConfigError(RippleError):
    code = "invalid_config"


class RequestError(RippleError):
    code = "invalid"


class UnavailableError(RippleError):
    code = "unavailable"

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: int = 1,
        field: str | None = None,
        code: ErrorCode | None = None,
    ) -> None:
        super().__init__(message, field=field, code=code)
        self.retry_after_s = retry_after_s


class ClientError(RippleError):
    """A failed remote call. `code` is what the remote said (or the client's own word), and
    `kind` what the client edge read from the answer; INTERNAL when nothing more is known."""

    code = "client"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        kind: ErrorKind = ErrorKind.INTERNAL,
        field: str | None = None,
    ) -> None:
        super().__init__(message, field=field)
        if code is not None:
            self.code = code
        self._kind = kind

    @property
    def kind(self) -> ErrorKind:
        return self._kind
