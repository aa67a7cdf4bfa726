"""The HTTP status of each error kind: the one table the HTTP edges read.

`shared.errors` says what went wrong (a code, hence a kind) and no number; this module says
what an HTTP answer's status is for a kind, and reads it back. The coordinator's error
middleware, the worker's, the test kit's scripted worker and the client (status -> kind for
an answer it got) all use it, so one kind answers one status everywhere. `coordinator.core`
may not import it (an import contract): the core refuses with codes only.

Invariant: every kind has one status and no two kinds share one, so a status read back names
the kind it was written from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from shared.errors import ErrorKind, RippleError

__all__ = ["ERROR_CODE_OF_STATUS", "STATUS_OF_KIND", "kind_of_status", "status_of"]

STATUS_OF_KIND: Final[Mapping[ErrorKind, int]] = {
    ErrorKind.INVALID: 400,
    ErrorKind.UNAUTHORIZED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.METHOD_NOT_ALLOWED: 405,
    ErrorKind.CONFLICT: 409,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.ELSEWHERE: 307,  # Temporary Redirect: the method and body go to the leader
    ErrorKind.INTERNAL: 500,
}
_KIND_OF_STATUS: Final[Mapping[int, ErrorKind]] = {s: k for k, s in STATUS_OF_KIND.items()}
assert len(_KIND_OF_STATUS) == len(STATUS_OF_KIND), "a status names one kind"

# The code of the JSON error shape for an error the HTTP framework raised itself (no route,
# a method the route lacks, a body over the server's bound); any other status answers the
# code "http_error" with the framework's status as it is.
ERROR_CODE_OF_STATUS: Final[Mapping[int, str]] = {
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


def status_of(error: RippleError) -> int:
    """The HTTP status `error` answers with."""
    return STATUS_OF_KIND[error.kind]


def kind_of_status(status: int) -> ErrorKind:
    """The kind of an error answer's status; INTERNAL for one no kind answers with (a proxy's
    502, say), which callers treat as a failure they cannot act on."""
    return _KIND_OF_STATUS.get(status, ErrorKind.INTERNAL)
