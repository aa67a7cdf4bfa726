"""When the disk fails a node: the failure that halts it, and the dump's retries.

Owns `DiskFaults` (one per node): the first failed sync or write of a Raft file, recorded
once, and what the node does about each file. Invariants:

- After a failed sync or write of the journal, the term/vote record, a journal rewrite or a
  dump received from the leader, the node syncs nothing again, acknowledges nothing, votes
  for no one and leaves Raft (`replication.log` halts it). A retried fsync after a failed
  one can report success for pages the kernel already dropped (PostgreSQL's "fsyncgate"),
  so carrying on could acknowledge a write the disk does not hold. Restarted, the node
  trusts its journal only through the last index a sync covered (`replication.journal`'s
  `drop_unsynced_tail`) and catches up from the others.
- ENOSPC (or EDQUOT) halts the node the same way when it meets the journal or the term/vote
  record: a half-written entry or an unrecorded vote leaves nothing safe to continue from.
- A failed dump of a compaction does not halt the node: the dump is written to a temporary
  file and renamed only once synced, and the journal is trimmed only after it, so a failed
  dump leaves the last dump and the whole journal as they were. The node keeps running on
  its journal and tries the dump again after DUMP_RETRY_MIN_S, doubling to DUMP_RETRY_MAX_S
  (`DumpBackoff`), rather than on the next tick as pysyncobj would (a fork per tick).

Test-only fault injection: when the environment variable FAULTS_ENV names a file (never set
in production), each journal sync and write first reads that file, a JSON object whose keys
`journal_sync_errno` / `journal_write_errno` / `dump_errno` (an errno name, "EIO") fail the
call and `journal_sync_delay_ms` slows each sync down, so an integration test can fail or
slow one node's disk while it runs.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from dataclasses import dataclass

from replication.errors import SyncFailedError

__all__ = [
    "DUMP_RETRY_MAX_S",
    "DUMP_RETRY_MIN_S",
    "FAULTS_ENV",
    "DiskFailure",
    "DiskFaults",
    "DumpBackoff",
]

log = logging.getLogger(__name__)

FAULTS_ENV = "RIPPLE_TEST_FAULTS"
# A compaction's dump that failed is tried again after this, doubling each failure up to
# the max (the default log_compaction_min_time_s): the journal keeps every entry meanwhile.
DUMP_RETRY_MIN_S = 5.0
DUMP_RETRY_MAX_S = 300.0
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
RESTART_ADVICE = "restart the node: it rejoins and catches up from the others; check the disk"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiskFailure:
    """The failed call that halted the node."""

    op: str  # "journal sync", "journal write", "term/vote record", "journal rewrite", "dump"
    path: str
    errno: int

    @property
    def kind(self) -> str:
        """`disk_full` (ENOSPC, EDQUOT) or `sync_failed` (EIO and any other error)."""
        return "disk_full" if self.errno in _DISK_FULL else "sync_failed"

    @property
    def reason(self) -> str:
        """One line for the log, /v1/health and the 503 `halted` answer."""
        name = errno.errorcode.get(self.errno, str(self.errno))
        return (
            f"{self.kind}: {self.op} of {self.path} failed with {name} "
            f"({os.strerror(self.errno)}); {RESTART_ADVICE}"
        )


class DiskFaults:
    """The node's record of a failed sync or write (any thread; set once, never cleared)."""

    __slots__ = ("_control", "_failure")

    def __init__(self, control_path: str | None = None) -> None:
        self._failure: DiskFailure | None = None
        self._control = control_path

    @classmethod
    def from_env(cls) -> DiskFaults:
        """Fault injection only when the test-only FAULTS_ENV names a control file."""
        return cls(os.environ.get(FAULTS_ENV) or None)

    @property
    def failure(self) -> DiskFailure | None:
        return self._failure

    def fail(self, op: str, path: str, exc: OSError) -> SyncFailedError:
        """Record the failure (the first one stands) and return the error to raise."""
        if self._failure is None:
            self._failure = DiskFailure(op=op, path=path, errno=exc.errno or errno.EIO)
        return SyncFailedError(self._failure.reason)

    def check(self) -> None:
        """Refuse every sync and write once one has failed (fsyncgate: module doc)."""
        if self._failure is not None:
            raise SyncFailedError(self._failure.reason)

    def before_sync(self) -> None:
        """Test-only: fail or slow a journal sync as the control file says."""
        plan = self._plan()
        delay_ms = plan.get("journal_sync_delay_ms")
        if isinstance(delay_ms, int | float) and delay_ms > 0:
            time.sleep(delay_ms / 1000)  # the slow disk injected: the caller times it
        _raise_named(plan.get("journal_sync_errno"))

    def before_write(self) -> None:
        """Test-only: fail a journal write as the control file says."""
        _raise_named(self._plan().get("journal_write_errno"))

    def before_dump(self) -> None:
        """Test-only: fail a dump's replacement as the control file says."""
        _raise_named(self._plan().get("dump_errno"))

    def _plan(self) -> dict[str, object]:
        if self._control is None:
            return {}
        try:
            with open(self._control, encoding="utf-8") as f:
                plan = json.load(f)
        except (OSError, ValueError):
            return {}  # no plan yet, or one being written: no fault this time
        return plan if isinstance(plan, dict) else {}


def _raise_named(name: object) -> None:
    if isinstance(name, str) and isinstance(code := getattr(errno, name, None), int):
        raise OSError(code, os.strerror(code))


class DumpBackoff:
    """When a compaction's dump may be tried again after failures (module doc)."""

    __slots__ = ("_failures", "_retry_at_ms", "_streak")

    def __init__(self) -> None:
        self._failures = 0
        self._streak = 0  # failures since the last dump that succeeded
        self._retry_at_ms = 0

    @property
    def failures(self) -> int:
        """Dumps that failed so far."""
        return self._failures

    def failed(self, now_ms: int) -> float:
        """A dump failed at `now_ms`: the seconds until the next try."""
        delay_s = min(DUMP_RETRY_MAX_S, DUMP_RETRY_MIN_S * float(1 << min(self._streak, 16)))
        self._failures += 1
        self._streak += 1
        self._retry_at_ms = now_ms + int(delay_s * 1000)
        return delay_s

    def succeeded(self) -> None:
        self._streak = 0
        self._retry_at_ms = 0

    def waiting(self, now_ms: int) -> bool:
        return now_ms < self._retry_at_ms
