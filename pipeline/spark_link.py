"""The worker's link to its Spark Connect server: why a Spark call failed, and when to connect
again.

Owns the naming of a micro-batch's failures (`BatchFault`: Spark's, the store's, the
staging disk's) and the reconnect schedule (`SparkLink`).
Invariant: after a fault that means the session is gone or cannot be reached (the server
restarted, is down, or a job ran past its timeout and was cut off) the next micro-batch runs
on a new session, never on the old one; attempts to make it are spaced by a doubling pause
between the worker's two bounds, and while none has succeeded the link says Spark is
unreachable, since when, and why. Pure: times come in as arguments, nothing here does I/O.
"""

from __future__ import annotations

import errno
import re
from enum import Enum

from pipeline.store import StoreError

__all__ = ["BatchFault", "SparkJobTimeout", "SparkLink", "classify", "first_line"]

ERROR_CHARS_MAX = 300
# The pyspark Connect client's words for a session the server no longer has: it restarted
# (SESSION_CHANGED, and then the client refuses every call with NO_ACTIVE_SESSION), or it
# expired or closed the session.
SESSION_LOST_MARKERS = (
    "NO_ACTIVE_SESSION",
    "INVALID_HANDLE.SESSION_CHANGED",
    "INVALID_HANDLE.SESSION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_CLOSED",
    "incorrect server side session identifier",
)
# gRPC's status for "no server there" (connection refused, reset, DNS), as code and as text.
UNREACHABLE_MARKERS = ("StatusCode.UNAVAILABLE", "failed to connect to all addresses")
# The fields of a raw gRPC error's text ("<_InactiveRpcError of RPC that terminated with:").
_GRPC_STATUS = re.compile(r"status = StatusCode\.(\w+)")
_GRPC_DETAILS = re.compile(r'details = "([^"\n]*)"')
# A local disk's errors (never a socket's): the staging directory is full or failing.
LOCAL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
# How deep the exception chain is searched (`raise ... from`, pyspark's wrappers).
CAUSE_DEPTH_MAX = 8


class BatchFault(Enum):
    """Why a micro-batch failed; the label of ripple_worker_failed_batches_total."""

    PLAN = "plan"  # planning the batch failed other than in the store (a corrupt segment)
    STORE = "store"  # a store call failed past its retries (listing, reading or staging)
    STAGING_DISK = "staging_disk"  # the local disk refused a staged copy (full, read-only)
    SPARK_UNREACHABLE = "spark_unreachable"  # no Spark Connect server answers
    SPARK_SESSION_LOST = "spark_session_lost"  # it answers, without our session (a restart)
    SPARK_TIMEOUT = "spark_timeout"  # the job ran past spark_job_timeout_s
    SPARK_JOB = "spark_job"  # the job itself failed (executors lost, a bad transform)

    @property
    def needs_new_session(self) -> bool:
        return self in _NEW_SESSION


_NEW_SESSION = {
    BatchFault.SPARK_UNREACHABLE,
    BatchFault.SPARK_SESSION_LOST,
    BatchFault.SPARK_TIMEOUT,
}


class SparkJobTimeout(Exception):
    """A micro-batch's Spark job ran past spark_job_timeout_s: it was interrupted, its
    session dropped, and the batch is retried on a new one with its input kept."""


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < CAUSE_DEPTH_MAX and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _grpc_code(exc: BaseException) -> str:
    """The gRPC status name an exception carries, if any (pyspark's wrapper or grpc's own)."""
    for attr in ("getGrpcStatusCode", "code"):
        fn = getattr(exc, attr, None)
        if callable(fn):
            try:
                return str(fn())
            except Exception:  # a `code` that is not grpc's: no status
                continue
    return ""


def classify(exc: BaseException, *, planning: bool = False) -> BatchFault:
    """The fault a failed micro-batch (planning it, its Spark job, or making a session)
    stands for. The store's and the local disk's come first: a store outage is waited out,
    never a reason for a new Spark session."""
    chain = _chain(exc)
    if any(isinstance(e, StoreError) for e in chain):
        return BatchFault.STORE
    if any(isinstance(e, OSError) and e.errno in LOCAL_DISK_ERRNOS for e in chain):
        return BatchFault.STAGING_DISK
    if planning:
        return BatchFault.PLAN
    if any(isinstance(e, SparkJobTimeout) for e in chain):
        return BatchFault.SPARK_TIMEOUT
    texts = [f"{_grpc_code(e)} {e}" for e in chain]
    if any(m in t for t in texts for m in SESSION_LOST_MARKERS):
        return BatchFault.SPARK_SESSION_LOST
    if any(m in t for t in texts for m in UNREACHABLE_MARKERS):
        return BatchFault.SPARK_UNREACHABLE
    return BatchFault.SPARK_JOB


_PYTHON_WORKER = "exception was thrown from the Python worker"
# The last line of a Python traceback: the exception's type and message.
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*")


def first_line(exc: BaseException, chars_max: int = ERROR_CHARS_MAX) -> str:
    """What an operator reads of `exc`: its first line, or for a raw gRPC error (whose first
    line says only "<_InactiveRpcError of RPC that terminated with:") its status and detail."""
    details = getattr(exc, "details", None)
    if callable(details):
        try:
            return f"gRPC {_grpc_code(exc).rsplit('.', 1)[-1]}: {details()}"[:chars_max]
        except Exception:  # a `details` that is not grpc's: fall back to the text
            pass
    text = str(exc).strip() or type(exc).__name__
    # pyspark wraps a raw gRPC error in its own exception by the error's text.
    status, detail = _GRPC_STATUS.search(text), _GRPC_DETAILS.search(text)
    if status and detail:
        return f"gRPC {status.group(1)}: {detail.group(1)}"[:chars_max]
    lines = text.splitlines()
    if _PYTHON_WORKER in lines[0]:
        # A transform that raised: its own exception's line says what went wrong, the
        # first ("An exception was thrown from the Python worker") says nothing.
        raised = [line.strip() for line in lines if _RAISED.match(line.strip())]
        if raised:
            return raised[-1][:chars_max]
    return lines[0][:chars_max]


class SparkLink:
    """Whether the session is usable, and when to try making a new one."""

    def __init__(self, backoff_s_min: float, backoff_s_max: float) -> None:
        self.backoff_s_min = backoff_s_min
        self.backoff_s_max = backoff_s_max
        self.lost = False  # a new session must be made before the next batch
        self.lost_at_s: float | None = None  # when the current outage began
        self.fault: BatchFault | None = None
        self.error = ""
        self.attempts = 0  # failed batches and reconnects since the outage began
        self.reconnects = 0

    def failed(self, fault: BatchFault, error: str, now_s: float) -> bool:
        """Note a failed batch or reconnect; True when it begins an outage (log it once)."""
        if not fault.needs_new_session:
            return False
        began = not self.lost
        if began:
            self.lost_at_s = now_s
        self.lost, self.fault, self.error = True, fault, error[:ERROR_CHARS_MAX]
        self.attempts += 1
        return began

    def reconnected(self, now_s: float) -> float:
        """A new session works: the outage is over. Returns how long it lasted."""
        lasted = 0.0 if self.lost_at_s is None else max(0.0, now_s - self.lost_at_s)
        self.lost, self.lost_at_s, self.fault, self.error, self.attempts = (
            False,
            None,
            None,
            "",
            0,
        )
        self.reconnects += 1
        return lasted

    def pause_s(self) -> float:
        """The wait before the next attempt: the minimum, doubled per failed attempt, capped."""
        doublings = min(max(self.attempts - 1, 0), 30)
        return min(self.backoff_s_max, self.backoff_s_min * float(2**doublings))

    def health(self, now_s: float) -> dict[str, object]:
        return {
            "reachable": not self.lost,
            "unreachable_s": None
            if self.lost_at_s is None
            else round(max(0.0, now_s - self.lost_at_s), 3),
            "fault": None if self.fault is None else self.fault.value,
            "error": self.error or None,
            "attempts": self.attempts,
            "reconnects": self.reconnects,
        }
