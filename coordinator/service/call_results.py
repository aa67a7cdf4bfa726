"""The leader's one door between the planner's worker calls and the wire: a `WorkerCall`
becomes its request (`request_of`), and the worker's answer becomes the planner's
`WorkerResult` (`result_of`), each as the call declares it (`coordinator/core/effects.py`).

The leader's HTTP client (`coordinator/service/worker_client.py`), the simulation and the
planner's scenario interpreter all go through these two functions. Here the leader adds
what the pure core cannot: the fence every checkpoint a reply names must pass (it must be
the canonical object of its partition, epoch and offset in the cluster's store, as a
reported checkpoint must, so a worker cannot make the state record an object it chose) and
the log line of a call that failed or named a fenced checkpoint.
"""

from __future__ import annotations

import functools
import logging

from coordinator.core.effects import WorkerCall, WorkerResult, call_key
from shared.checkpoint_ref import reference_problem
from shared.messages.common import Answer, Fence, WorkerRequest

__all__ = ["request_of", "result_of", "store_fence"]

log = logging.getLogger(__name__)


def store_fence(store: str) -> Fence:
    """The leader's fence: a checkpoint must be its canonical object in `store`."""
    return functools.partial(reference_problem, store)


def request_of(call: WorkerCall, *, warm_hold_s: float) -> WorkerRequest:
    """The request that makes `call`; a warm call asks the target to hold its answer up to
    `warm_hold_s` for the copy's next step."""
    return call.request(warm_hold_s=warm_hold_s)


def result_of(call: WorkerCall, answer: Answer, fence: Fence) -> WorkerResult:
    """What `answer` to `call` means to the planner, logged when it failed or was fenced."""
    result = call.result(answer, fence)
    kind, key = call_key(call)
    if result.note:
        log.info("%s %s on %s: %s", kind, key, call.worker_id, result.note)
    fenced = getattr(result, "fenced", "")
    if fenced:
        log.warning("%s %s by %s: %s", kind, key, call.worker_id, fenced)
    return result
