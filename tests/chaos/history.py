"""Operation histories and a Wing-Gong linearizability checker for a register per key.

Owns the record of what clients did (invoke, then ok / fail / unknown, with times from one
monotonic clock) and the judgement whether some total order of the operations, consistent
with real time, explains every observed result under a read/write register model.

Rules of the model (Jepsen's, for an API that is meant to be linearizable):
- an ``ok`` operation took effect exactly once, somewhere between its invoke and its completion;
- a ``fail`` operation took no effect (the server said so: 4xx, or a redirect not followed);
- an ``unknown`` operation (timeout, connection reset, 503 after sending) may have taken effect
  at any time after its invoke -- or never. Its completion time is +infinity, and an unknown
  read constrains nothing, so it is dropped.

Keys are independent (P-compositionality): each key's sub-history is checked on its own,
which keeps the search small. The search memoizes (linearized set, register value), the
standard Wing-Gong-Lowe improvement, and is bounded by ``steps_max``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

__all__ = ["CheckResult", "History", "Op", "check_epochs", "check_history", "check_register"]

INF = math.inf
SEARCH_STEPS_MAX = 2_000_000


@dataclass(slots=True, kw_only=True)
class Op:
    key: str
    kind: str  # "write" | "read"
    value: Any  # written value, or the value a read returned
    invoke_s: float
    complete_s: float | None = None  # None while pending; unknown ops stay None
    status: str = "pending"  # "ok" | "fail" | "unknown" | "pending"
    process: int = 0
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    ok: bool
    key: str | None = None
    reason: str = ""
    ops_checked: int = 0


class History:
    """Thread-safe recorder: ``invoke`` returns an Op that ``ok``/``fail``/``unknown`` complete."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def invoke(self, key: str, kind: str, value: Any = None, process: int = 0) -> Op:
        op = Op(key=key, kind=kind, value=value, invoke_s=self.now(), process=process)
        with self._lock:
            self.ops.append(op)
        return op

    def ok(self, op: Op, value: Any = None) -> None:
        if op.kind == "read":
            op.value = value
        op.complete_s, op.status = self.now(), "ok"

    def fail(self, op: Op, note: str = "") -> None:
        op.complete_s, op.status, op.note = self.now(), "fail", note

    def unknown(self, op: Op, note: str = "") -> None:
        op.status, op.note = "unknown", note

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for op in self.ops:
            out[f"{op.kind}_{op.status}"] += 1
        return dict(out)


def _window(op: Op) -> tuple[float, float]:
    end = op.complete_s if op.status == "ok" and op.complete_s is not None else INF
    return op.invoke_s, end


def check_register(
    ops: list[Op], initial: Any = None, steps_max: int = SEARCH_STEPS_MAX
) -> CheckResult:
    """Wing-Gong search for one key. ``ops`` may hold ok, fail, unknown and pending ops."""
    live = [
        op
        for op in ops
        if op.status == "ok" or (op.kind == "write" and op.status in ("unknown", "pending"))
    ]
    live.sort(key=lambda o: o.invoke_s)
    n = len(live)
    windows = [_window(o) for o in live]
    must = 0  # bitmask of ops that must be linearized (the ok ones)
    for i, op in enumerate(live):
        if op.status == "ok":
            must |= 1 << i
    seen: set[tuple[int, Any]] = set()
    steps = 0
    # Iterative DFS over (linearized mask, register value).
    stack: list[tuple[int, Any]] = [(0, initial)]
    while stack:
        done, value = stack.pop()
        if done & must == must:
            return CheckResult(ok=True, key=live[0].key if live else None, ops_checked=n)
        if (done, value) in seen:
            continue
        seen.add((done, value))
        steps += 1
        if steps > steps_max:
            raise RuntimeError(f"linearizability search exceeded {steps_max} steps")
        # An op may go next only if it was invoked before every other pending op completed.
        horizon = min((windows[i][1] for i in range(n) if not done >> i & 1), default=INF)
        for i in range(n):
            if done >> i & 1 or windows[i][0] > horizon:
                continue
            op = live[i]
            if op.kind == "write":
                stack.append((done | 1 << i, op.value))
            elif op.value == value:
                stack.append((done | 1 << i, value))
    key = live[0].key if live else None
    bad = [o for o in live if o.status == "ok" and o.kind == "read"]
    detail = ", ".join(f"read {o.value!r} @[{o.invoke_s:.3f},{o.complete_s:.3f}]" for o in bad[:5])
    return CheckResult(
        ok=False, key=key, reason=f"no linearization of {n} ops ({detail})", ops_checked=n
    )


def check_history(ops: list[Op], initial: Any = None) -> CheckResult:
    """Check every key's register sub-history; the first non-linearizable key is reported."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    total = 0
    for key in sorted(by_key):
        res = check_register(by_key[key], initial)
        total += res.ops_checked
        if not res.ok:
            return CheckResult(ok=False, key=key, reason=res.reason, ops_checked=total)
    return CheckResult(ok=True, ops_checked=total)


def check_epochs(ops: list[Op]) -> CheckResult:
    """Per-partition epochs as a linearizable register whose writes only ever grow.

    Each op is a consistent read of one partition, key ``p<N>``, value ``(epoch, owner)``.
    The leader's writes are not observed, but they are strictly increasing and each epoch
    names one owner, so a history is linearizable exactly when (1) a read that started
    after another read completed never shows a lower epoch, and (2) one epoch of one
    partition always shows the same owner. Checked in O(n log n) per partition.
    """
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.status == "ok" and op.complete_s is not None:
            by_key[op.key].append(op)
    total = 0
    for key in sorted(by_key):
        reads = by_key[key]
        total += len(reads)
        owners: dict[int, Any] = {}
        for op in reads:
            epoch, owner = op.value
            if owners.setdefault(epoch, owner) != owner:
                reason = f"epoch {epoch} shown with owners {owners[epoch]!r} and {owner!r}"
                return CheckResult(ok=False, key=key, reason=reason, ops_checked=total)
        by_end = sorted(reads, key=lambda o: o.complete_s or 0.0)
        high: tuple[int, Op] | None = None  # highest epoch among reads completed so far
        j = 0
        for op in sorted(reads, key=lambda o: o.invoke_s):
            while j < len(by_end) and (by_end[j].complete_s or 0.0) < op.invoke_s:
                done = by_end[j]
                if high is None or done.value[0] > high[0]:
                    high = (done.value[0], done)
                j += 1
            if high is not None and op.value[0] < high[0]:
                prev = high[1]
                reason = (
                    f"read @[{op.invoke_s:.3f},{op.complete_s:.3f}] saw epoch {op.value[0]} after "
                    f"a read completed at {prev.complete_s:.3f} saw epoch {high[0]}"
                )
                return CheckResult(ok=False, key=key, reason=reason, ops_checked=total)
    return CheckResult(ok=True, ops_checked=total)
