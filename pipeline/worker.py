"""The worker process: gates, lease, Spark micro-batches, fenced checkpoints, replay.

A worker registers with the coordinator, heartbeats, and serves host / release /
checkpoint calls from the leader (which carry this worker's own token, so it knows they
come from its cluster). Each partition it owns has a gate open at exactly one epoch; the
processing loop reads new source segments of all open partitions as one Spark job and
merges the per-key results only if, after the job, the gate is still open at the same
epoch and the lease still holds.

Safety rules this module keeps (seed 004):
- Nothing is processed, checkpointed or served as the owner unless the gate is open and
  the lease is valid: no heartbeat acknowledged for `lease_s` pauses every gate. The
  coordinator waits `heartbeat_timeout_s` > `lease_s` before it moves partitions, so a
  paused (SIGSTOPped) worker stops before anyone else starts.
- A new owner loads exactly the checkpoint the coordinator recorded and replays the
  source from its offset; checkpoints are written create-only under (partition, epoch,
  offset) and the coordinator accepts them only at the current epoch.
- A release waits for the batch in flight, writes a final checkpoint, closes the gate
  and returns it; the gate never reopens at that epoch. If the write fails the gate stays
  open (503) and the leader retries the release.

Blocking work (store, Spark) runs in threads; all partition state is touched only on the
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from coordinator.client import CoordinatorClient
from pipeline.aggregate import Aggregator, Transform, identity
from pipeline.checkpoint import CheckpointCorrupt, CheckpointData, CheckpointStore
from pipeline.datapath import (
    ARROW_BATCH_BYTES_MAX_DEFAULT,
    ARROW_BATCH_ROWS_MAX_DEFAULT,
    DataPath,
    Feed,
    PlannedBatch,
    ProbeFailed,
    default_data_path,
)
from pipeline.gate import Gates, Refused
from pipeline.lease import Lease
from pipeline.metrics import WorkerMetrics
from pipeline.source import SourceLog
from pipeline.state import MAX_KEYS_PER_PARTITION_DEFAULT, KeyState, PartitionState, merge_batch
from pipeline.store import ObjectStore
from shared.checkpoint_ref import checkpoint_key
from shared.clock import Clock
from shared.errors import ClientError
from shared.system_clock import SYSTEM_CLOCK
from shared.tls import server_context

log = logging.getLogger(__name__)

BATCH_INTERVAL_S_DEFAULT = 0.5
# A partition is reported as failing (heartbeat, health, metrics) after this many micro-batches
# in a row failed: one failure can be a blip, three in a row is something an operator fixes.
BATCH_FAILURES_REPORTED_MIN = 3
BATCH_ERROR_CHARS_MAX = 500
# The start-up probe waits this long for Spark: a cluster without executors accepts the job
# and never runs it.
PROBE_TIMEOUT_S_DEFAULT = 120.0
# Failing batches are retried with a growing pause, capped, so a broken path does not spin.
BATCH_RETRY_PAUSE_S_MAX = 5.0
HOST_LOAD_WAIT_S = 60.0
DRAIN_TIMEOUT_S = 120.0
BODY_BYTES_MAX = 64 * 1024
KEY_CHARS_MAX = 1024
EPOCH_MAX = 2**63 - 1  # what the coordinator's codec carries
PARTITION_DIGITS_MAX = 7  # total_partitions is at most 1_000_000


@dataclass(slots=True)
class PartitionRuntime:
    epoch: int
    state: PartitionState = field(default_factory=dict)
    offset: int = 0  # the next source offset to process
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    checkpoint_offset: int = -1
    checkpoint_uri: str = ""
    failures: int = 0  # micro-batches in a row that failed with this partition in them
    error: str = ""  # the last failure's first line
    source_end: int | None = None  # the source log's end when last listed (lag metric)
    # Monotonic time the state was last covered by a checkpoint: loaded from one, or one
    # written or confirmed for the leader (checkpoint age metric).
    covered_at_s: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    coordinators: tuple[str, ...]
    worker_id: str
    listen: str  # host:port
    spark_remote: str
    advertise: str | None = None
    batch_interval_s: float = BATCH_INTERVAL_S_DEFAULT
    max_keys_per_partition: int = MAX_KEYS_PER_PARTITION_DEFAULT
    staging_dir: str | None = None
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    join_token: str | None = None
    data_path: str | None = None  # files | arrow | direct; None: default_data_path
    arrow_batch_rows_max: int = ARROW_BATCH_ROWS_MAX_DEFAULT
    arrow_batch_bytes_max: int = ARROW_BATCH_BYTES_MAX_DEFAULT
    probe_timeout_s: float = PROBE_TIMEOUT_S_DEFAULT
    # TLS: serve the worker API with this certificate and key (the advertised address is
    # then https://); verify https:// coordinators against tls_ca (None: system roots).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        store: ObjectStore,
        transform: Transform = identity,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        # The lease runs on clock.monotonic_ms: a wall-clock step must not stretch it (two
        # workers could then process one partition) nor cut it short.
        self.clock = clock
        self.store = store
        self.checkpoints = CheckpointStore(store)
        self.transform = transform
        self.client = CoordinatorClient(
            list(settings.coordinators), deadline_s=5.0, timeout_s=5.0, ca_file=settings.tls_ca
        )
        scheme = "https" if settings.tls_cert else "http"
        self.address = settings.advertise or f"{scheme}://{settings.listen}"
        self.gates = Gates()
        self.parts: dict[int, PartitionRuntime] = {}
        self.lease = Lease(lease_ms=1)
        self.heartbeat_interval_s = 1.0
        self.token = ""  # what we present to the coordinator (renewed by each heartbeat)
        self.call_token = ""  # what the leader presents to us
        self.incarnation = 0
        self.total_partitions = 0
        self.source: SourceLog | None = None
        self.aggregator: Aggregator | None = None
        self.batch_lock = asyncio.Lock()
        self.staging = settings.staging_dir or tempfile.mkdtemp(prefix="ripple-stage-")
        self.data_path = (
            DataPath(settings.data_path)
            if settings.data_path
            else default_data_path(store, settings.spark_remote)
        )
        self.feed: Feed | None = None
        self.draining = False
        self.stopped = asyncio.Event()
        self.stats = {
            "batches": 0,
            "records": 0,
            "dead_letter_keys": 0,
            "checkpoints": 0,
            "fenced": 0,
            "lease_pauses": 0,
            "batch_failures": 0,
            "segments_fetched": 0,
        }
        # Where micro-batch seconds go (cumulative): listing + fetching segments, the Spark
        # job (plan, scan or upload, join, aggregate, collect), merging into the state.
        self.batch_seconds = {"plan": 0.0, "spark": 0.0, "merge": 0.0}
        self._batch_failures_in_row = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.metrics = WorkerMetrics(self)

    # -- coordinator protocol ------------------------------------------------------------------

    async def register(self) -> None:
        body = await self.client.post(
            "/v1/workers",
            {"worker_id": self.settings.worker_id, "address": self.address},
            token=self.settings.join_token,
        )
        # A new incarnation: every gate of the old one is fenced by the coordinator already.
        self.gates = Gates()
        self.parts.clear()
        self.token = body["token"]
        self.call_token = body["call_token"]
        self.incarnation = int(body["incarnation"])
        self.heartbeat_interval_s = float(body["heartbeat_interval_s"])
        self.lease = Lease(lease_ms=int(float(body["lease_s"]) * 1000))
        log.info("registered %s incarnation %d", self.settings.worker_id, self.incarnation)

    def lease_valid(self) -> bool:
        return self.lease.valid(self.clock.monotonic_ms())

    async def heartbeat_once(self) -> None:
        sent_at = self.clock.monotonic_ms()
        reply = await self.client.post(
            f"/v1/workers/{self.settings.worker_id}/heartbeat",
            {
                "incarnation": self.incarnation,
                "load": self._load(),
                "partitions": {str(p): self._report(rt) for p, rt in self.parts.items()},
            },
            token=self.token,
        )
        self.lease = self.lease.renewed(sent_at)
        if isinstance(reply.get("token"), str):
            self.token = reply["token"]
        assignment = {int(a["partition"]): int(a["epoch"]) for a in reply["assignment"]}
        plan = self.gates.reconcile(assignment)
        for p, epoch in plan.to_close.items():
            # No longer ours (moved while we were away): stop, drop the state.
            self.gates.close(p, epoch)
            self.parts.pop(p, None)
            log.info("partition %d epoch %d no longer assigned here; closed", p, epoch)
        if reply.get("checkpoint_due"):
            self._spawn(self.checkpoint_and_report())

    @staticmethod
    def _report(rt: PartitionRuntime) -> dict[str, Any]:
        report: dict[str, Any] = {"epoch": rt.epoch, "offset": rt.offset}
        if rt.source_end is not None:
            report["source_end"] = rt.source_end
        if rt.failures >= BATCH_FAILURES_REPORTED_MIN:
            report["failures"] = rt.failures
            report["error"] = rt.error
        return report

    def _load(self) -> float:
        return float(len(self.parts))

    async def heartbeat_loop(self) -> None:
        while not self.stopped.is_set():
            try:
                if not self.token:
                    if self.draining:
                        return
                    await self.register()
                await self.heartbeat_once()
            except ClientError as exc:
                if exc.code in ("unknown_worker", "stale_incarnation", "unauthorized"):
                    if self.draining:
                        log.info("coordinator no longer knows us (%s): drained", exc.message)
                        self.stopped.set()
                        return
                    log.warning("re-registering: %s", exc.message)
                    self.token = ""
                else:
                    log.warning("heartbeat failed: %s", exc.message)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopped.wait(), self.heartbeat_interval_s)

    # -- processing ------------------------------------------------------------------------------

    async def process_once(self) -> int:
        """One micro-batch over every open partition; returns records merged."""
        if self.aggregator is None or self.feed is None:
            return 0
        feed, aggregator = self.feed, self.aggregator
        async with self.batch_lock:
            if not self.lease_valid():
                self.stats["lease_pauses"] += 1
                return 0
            open_now = {
                p: rt
                for p, rt in self.parts.items()
                if rt.loaded.is_set() and self.gates.admits(p, rt.epoch)
            }
            if not open_now:
                return 0
            epochs = {p: rt.epoch for p, rt in open_now.items()}
            began = time.monotonic()
            fetched = feed.fetched
            try:
                # Per-partition offsets only advance for segments read whole: a batch never
                # splits a segment.
                batch = await asyncio.to_thread(
                    feed.plan, {p: rt.offset for p, rt in open_now.items()}
                )
                for p, head in batch.heads.items():
                    open_now[p].source_end = head
                planned = time.monotonic()
                self.batch_seconds["plan"] += planned - began
                if not batch:
                    return 0
                # One Spark job for every open partition's new records.
                results = await asyncio.to_thread(feed.run, aggregator, batch)
            except Exception as exc:
                self._batch_failed(open_now, exc)
                raise
            finally:
                self.stats["segments_fetched"] += feed.fetched - fetched
            merging = time.monotonic()
            self.batch_seconds["spark"] += merging - planned
            feed.done(batch)
            merged = await self._merge(batch, results, epochs)
            self.batch_seconds["merge"] += time.monotonic() - merging
            return merged

    def _batch_failed(self, parts: dict[int, PartitionRuntime], exc: BaseException) -> None:
        text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        self.stats["batch_failures"] += 1
        self._batch_failures_in_row += 1
        for p, rt in parts.items():
            rt.failures += 1
            rt.error = text[:BATCH_ERROR_CHARS_MAX]
            if rt.failures == BATCH_FAILURES_REPORTED_MIN:
                log.error(
                    "partition %d epoch %d: %d micro-batches in a row failed; reporting it: %s",
                    p,
                    rt.epoch,
                    rt.failures,
                    rt.error,
                )

    async def _merge(
        self, batch: PlannedBatch, results: dict[int, PartitionState], epochs: dict[int, int]
    ) -> int:
        self._batch_failures_in_row = 0
        if not self.lease_valid():
            # Paused mid-batch (say SIGSTOP) past the lease: someone else may own these
            # partitions now. Discard the results.
            self.stats["lease_pauses"] += 1
            return 0
        merged = 0
        for p, end in batch.ends.items():
            rt = self.parts.get(p)
            if rt is None or rt.epoch != epochs[p] or not self.gates.admits(p, rt.epoch):
                continue
            rt.failures, rt.error = 0, ""
            part = results.get(p, {})
            new_state, dead = merge_batch(rt.state, part, self.settings.max_keys_per_partition)
            if dead:
                await asyncio.to_thread(
                    self.checkpoints.write_dead_letter, p, rt.epoch, rt.offset, end, dead
                )
                self.stats["dead_letter_keys"] += len(dead)
                log.warning(
                    "partition %d: %d new keys over max_keys_per_partition=%d "
                    "went to the dead-letter segment",
                    p,
                    len(dead),
                    self.settings.max_keys_per_partition,
                )
            merged += sum(s.count for s in part.values())
            rt.state, rt.offset = new_state, end
        self.stats["batches"] += 1
        self.stats["records"] += merged
        return merged

    async def processing_loop(self) -> None:
        while not self.stopped.is_set():
            pause_s = self.settings.batch_interval_s
            try:
                merged = await self.process_once()
            except Exception:  # keep the worker alive; the batch is retried (input kept)
                log.exception("micro-batch failed; retrying")
                merged = 0
                pause_s = min(
                    BATCH_RETRY_PAUSE_S_MAX, pause_s * 2 ** min(self._batch_failures_in_row, 8)
                )
            if merged == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopped.wait(), pause_s)

    # -- checkpoints ---------------------------------------------------------------------------

    async def write_checkpoints(self) -> list[dict[str, Any]]:
        entries = []
        async with self.batch_lock:
            if not self.lease_valid():
                return []
            for p, rt in sorted(self.parts.items()):
                if not rt.loaded.is_set() or not self.gates.admits(p, rt.epoch):
                    continue
                if rt.checkpoint_offset != rt.offset or not rt.checkpoint_uri:
                    rt.checkpoint_uri = await asyncio.to_thread(
                        self.checkpoints.write, p, rt.epoch, rt.offset, dict(rt.state)
                    )
                    rt.checkpoint_offset = rt.offset
                    self.stats["checkpoints"] += 1
                rt.covered_at_s = time.monotonic()
                entries.append(
                    {
                        "partition": p,
                        "epoch": rt.epoch,
                        "offset": rt.offset,
                        "uri": rt.checkpoint_uri,
                    }
                )
        return entries

    async def checkpoint_and_report(self) -> None:
        entries = await self.write_checkpoints()
        if not entries:
            return
        try:
            body = await self.client.post(
                "/v1/checkpoints",
                {
                    "worker_id": self.settings.worker_id,
                    "incarnation": self.incarnation,
                    "checkpoints": entries,
                },
                token=self.token,
            )
        except ClientError as exc:
            log.warning("checkpoint report failed: %s", exc.message)
            return
        fenced = [r for r in body["results"] if r["status"] == "fenced"]
        self.stats["fenced"] += len(fenced)
        for r in fenced:
            log.warning("checkpoint of partition %s fenced: %s", r["partition"], r.get("reason"))

    # -- HTTP handlers ---------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        # compare_digest raises on non-ASCII str (a 500): compare bytes, after checking
        # the header is ASCII at all (undecodable bytes arrive as surrogate escapes).
        return (
            bool(self.call_token)
            and header.isascii()
            and hmac.compare_digest(header.encode(), f"Bearer {self.call_token}".encode())
        )

    def _partition(self, request: web.Request) -> int:
        text = request.match_info["p"]
        # isascii first: '²'.isdigit() is True (int() then raises) and int('\u0661') is 1.
        if (
            not (text.isascii() and text.isdigit())
            or len(text) > PARTITION_DIGITS_MAX
            or int(text) >= max(self.total_partitions, 1)
        ):
            raise _http_error(400, "invalid", "partition out of range", "partition")
        return int(text)

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise _http_error(400, "invalid", "body is not valid JSON", "body") from None
        if not isinstance(body, dict):
            raise _http_error(400, "invalid", "body must be a JSON object", "body")
        return body

    async def handle_host(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            raise _http_error(401, "unauthorized", "not this worker's cluster token")
        p = self._partition(request)
        body = await self._json(request)
        epoch = body.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 1 <= epoch <= EPOCH_MAX:
            raise _http_error(400, "invalid", "epoch must be a positive integer", "epoch")
        ck = body.get("checkpoint")
        if ck is not None and not (
            isinstance(ck, dict)
            and isinstance(ck.get("uri"), str)
            and all(
                isinstance(ck.get(k), int) and not isinstance(ck.get(k), bool)
                for k in ("offset", "epoch")
            )
        ):
            raise _http_error(
                400, "invalid", "checkpoint must be {offset, uri, epoch} or null", "checkpoint"
            )
        # Check the gate without changing it: it opens only once the checkpoint is loaded,
        # so a failed load leaves the epoch open to the leader's retry.
        probe = self.gates.get(p).host(epoch)
        if isinstance(probe, Refused):
            raise _http_error(409, "stale_epoch", probe.reason, "epoch")
        rt = self.parts.get(p)
        if rt is not None and rt.epoch == epoch:
            await asyncio.wait_for(rt.loaded.wait(), HOST_LOAD_WAIT_S)  # same call, repeated
        else:
            rt = PartitionRuntime(epoch=epoch)
            self.parts[p] = rt
            try:
                if ck is not None:
                    data = await asyncio.to_thread(self.load_checkpoint, p, ck)
                    # The loaded object is named after the epoch that wrote it: this epoch's
                    # first report writes its own, so every checkpoint the coordinator
                    # records at an epoch was written at that epoch (scenario f, seed 606).
                    rt.state, rt.offset = dict(data.state), data.offset
            except Exception as exc:  # report to the leader, which retries with backoff
                if self.parts.get(p) is rt:
                    self.parts.pop(p)
                log.exception("loading checkpoint for partition %d failed", p)
                raise _http_error(503, "checkpoint_unavailable", str(exc)) from None
            result = self.gates.host(p, epoch)
            if isinstance(result, Refused) or self.parts.get(p) is not rt:
                # A newer epoch arrived while loading: this call lost the race.
                if self.parts.get(p) is rt:
                    self.parts.pop(p)
                raise _http_error(
                    409, "stale_epoch", f"partition {p} moved on while loading", "epoch"
                )
            rt.loaded.set()
            log.info("hosting partition %d at epoch %d from offset %d", p, epoch, rt.offset)
        return web.json_response({"partition": p, "epoch": epoch, "offset": rt.offset})

    def load_checkpoint(self, partition: int, ck: dict[str, Any]) -> CheckpointData:
        """Blocking: load the checkpoint the leader sent, and only if it is what it says it
        is: the canonical object of this partition at the sent epoch and offset in our own
        store, holding exactly that partition, epoch and offset (another partition's
        checkpoint was once loaded as this one's, skipping offsets it never processed)."""
        expected = self.store.uri(checkpoint_key(partition, ck["epoch"], ck["offset"]))
        if ck["uri"] != expected:
            raise CheckpointCorrupt(
                f"sent checkpoint {ck['uri']!r} is not partition {partition}'s at epoch "
                f"{ck['epoch']} offset {ck['offset']} ({expected!r})"
            )
        data = self.checkpoints.read(ck["uri"])
        held = (data.partition, data.epoch, data.offset)
        if held != (partition, ck["epoch"], ck["offset"]):
            raise CheckpointCorrupt(f"{ck['uri']!r} holds partition/epoch/offset {held}")
        return data

    async def handle_release(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            raise _http_error(401, "unauthorized", "not this worker's cluster token")
        p = self._partition(request)
        body = await self._json(request)
        epoch = body.get("epoch")
        rt = self.parts.get(p)
        if rt is None or not isinstance(epoch, int) or not self.gates.admits(p, epoch):
            raise _http_error(
                409, "stale_epoch", f"partition {p} is not open here at {epoch}", "epoch"
            )
        async with self.batch_lock:  # waits for the batch in flight to finish
            await asyncio.wait_for(rt.loaded.wait(), HOST_LOAD_WAIT_S)
            # The final checkpoint first, the gate after (the lock keeps the state still):
            # a store failure then leaves the gate open and the release retryable, instead
            # of a closed gate whose runtime is never dropped (scenario f, seed 606).
            try:
                uri = await asyncio.to_thread(
                    self.checkpoints.write, p, epoch, rt.offset, dict(rt.state)
                )
            except Exception as exc:  # the leader retries the release with backoff
                log.exception("final checkpoint of partition %d epoch %d failed", p, epoch)
                raise _http_error(503, "checkpoint_unavailable", str(exc)) from None
            self.gates.close(p, epoch)
            if self.parts.get(p) is rt:
                self.parts.pop(p)
        log.info(
            "released partition %d epoch %d at offset %d (%s)",
            p,
            epoch,
            rt.offset,
            body.get("migration_id"),
        )
        return web.json_response(
            {"partition": p, "epoch": epoch, "checkpoint": {"offset": rt.offset, "uri": uri}}
        )

    async def handle_checkpoint(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            raise _http_error(401, "unauthorized", "not this worker's cluster token")
        self._spawn(self.checkpoint_and_report())
        return web.json_response({"scheduled": True}, status=202)

    def _owned(self, p: int) -> PartitionRuntime | None:
        rt = self.parts.get(p)
        if rt is None or not rt.loaded.is_set() or not self.gates.admits(p, rt.epoch):
            return None
        return rt if self.lease_valid() else None

    async def _not_owner(self, p: int) -> web.Response:
        owner = None
        with contextlib.suppress(ClientError):
            owner = (await self.client.get(f"/v1/partitions/{p}")).get("owner")
        return web.json_response(
            {"error": "not_owner", "owner": owner, "message": f"partition {p} is not served here"},
            status=409,
        )

    async def handle_key(self, request: web.Request) -> web.Response:
        p = self._partition(request)
        key = request.match_info["key"]
        if len(key) > KEY_CHARS_MAX:
            raise _http_error(400, "invalid", "key too long", "key")
        rt = self._owned(p)
        if rt is None:
            return await self._not_owner(p)
        ks = rt.state.get(key)
        if ks is None:
            raise _http_error(404, "not_found", f"no records for key {key!r} yet", "key")
        return web.json_response(
            {"key": key, **key_json(ks), "partition": p, "epoch": rt.epoch, "offset": rt.offset}
        )

    async def handle_state(self, request: web.Request) -> web.Response:
        p = self._partition(request)
        rt = self._owned(p)
        if rt is None:
            return await self._not_owner(p)
        return web.json_response(
            {
                "partition": p,
                "epoch": rt.epoch,
                "offset": rt.offset,
                "keys": {k: key_json(v) for k, v in sorted(rt.state.items())},
            }
        )

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "worker_id": self.settings.worker_id,
                "incarnation": self.incarnation,
                "lease_valid": self.lease_valid(),
                "draining": self.draining,
                "partitions": {
                    str(p): {
                        "epoch": rt.epoch,
                        "offset": rt.offset,
                        "keys": len(rt.state),
                        "open": self.gates.admits(p, rt.epoch),
                        "failures": rt.failures,
                        "error": rt.error or None,
                    }
                    for p, rt in sorted(self.parts.items())
                },
                "stats": self.stats,
                "data_path": self.data_path.value,
                "batch_seconds": {k: round(v, 3) for k, v in self.batch_seconds.items()},
            }
        )

    async def handle_metrics(self, request: web.Request) -> web.Response:
        """Prometheus text, computed from the worker's state at scrape time."""
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    def _failing(self) -> list[int]:
        return [p for p, rt in self.parts.items() if rt.failures >= BATCH_FAILURES_REPORTED_MIN]

    # -- lifecycle -------------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def drain(self) -> None:
        """Graceful leave: ask the leader to move our partitions, wait until they are gone."""
        if self.draining or not self.token:
            self.stopped.set()
            return
        self.draining = True
        try:
            await self.client.post(
                f"/v1/workers/{self.settings.worker_id}/drain", {}, token=self.token
            )
        except ClientError as exc:
            log.warning("drain request failed (%s); stopping anyway", exc.message)
            self.stopped.set()
            return
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while time.monotonic() < deadline and not self.stopped.is_set():
            if not self.parts:
                break
            await asyncio.sleep(0.2)
        self.stopped.set()

    async def probe(self, aggregator: Aggregator, feed: Feed) -> None:
        """Raise ProbeFailed unless Spark reads a probe object through our data path in time."""
        task = asyncio.ensure_future(
            asyncio.to_thread(feed.probe, aggregator, self.settings.worker_id)
        )
        try:
            await asyncio.wait_for(asyncio.shield(task), self.settings.probe_timeout_s)
        except TimeoutError:
            # The job is stuck server-side (say, no executor ever came): cancel it so the
            # thread returns, then refuse to start.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(aggregator.spark.interruptAll)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10.0)
            raise ProbeFailed(
                f"Spark at {self.settings.spark_remote} did not finish the start-up probe "
                f"through the {self.data_path.value!r} data path in "
                f"{self.settings.probe_timeout_s:g} s (does the cluster have executors?)"
            ) from None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=BODY_BYTES_MAX, middlewares=[_error_middleware])
        app.router.add_post("/v1/partitions/{p}/host", self.handle_host)
        app.router.add_post("/v1/partitions/{p}/release", self.handle_release)
        app.router.add_post("/v1/checkpoint", self.handle_checkpoint)
        app.router.add_get("/v1/partitions/{p}/keys/{key}", self.handle_key)
        app.router.add_get("/v1/partitions/{p}/state", self.handle_state)
        app.router.add_get("/v1/health", self.handle_health)
        app.router.add_get("/metrics", self.handle_metrics)
        return app

    def site(self, runner: web.AppRunner) -> web.TCPSite:
        """Where the worker API listens: `listen`, over TLS when a certificate is given."""
        host, port = self.settings.listen.rsplit(":", 1)
        ssl_context = None
        if self.settings.tls_cert:
            ssl_context = server_context(self.settings.tls_cert, self.settings.tls_key or "")
        return web.TCPSite(runner, host, int(port), ssl_context=ssl_context)

    async def run(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        await self.site(runner).start()
        loop = asyncio.get_running_loop()
        # SIGTERM is a graceful leave (drain, then exit); SIGINT stops at once, which is what
        # `ripple up` uses when the whole local cluster goes down (nowhere to drain to).
        loop.add_signal_handler(signal.SIGTERM, lambda: self._spawn(self.drain()))
        loop.add_signal_handler(signal.SIGINT, self.stopped.set)
        try:
            health = await self.client.get("/v1/health")
            self.total_partitions = int(health["cluster"]["total_partitions"])
            self.source = SourceLog(self.store, self.total_partitions)
            self.aggregator = await asyncio.to_thread(
                Aggregator, self.settings.spark_remote, self.transform
            )
            self.feed = Feed(
                self.data_path,
                self.store,
                self.source,
                self.staging,
                arrow_rows_max=self.settings.arrow_batch_rows_max,
                arrow_bytes_max=self.settings.arrow_batch_bytes_max,
            )
            # Before registering: a worker whose Spark cannot read its input must never
            # take partitions (they would stay ONLINE and silently never move).
            await self.probe(self.aggregator, self.feed)
            log.info(
                "worker %s on %s: %d partitions, spark %s, data path %s (probe passed)",
                self.settings.worker_id,
                self.address,
                self.total_partitions,
                self.settings.spark_remote,
                self.data_path.value,
            )
            tasks = [
                loop.create_task(self.heartbeat_loop()),
                loop.create_task(self.processing_loop()),
            ]
            await self.stopped.wait()
            for t in tasks + self._tasks:
                t.cancel()
        finally:
            await self.client.close()
            await runner.cleanup()
            if self.aggregator is not None:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.aggregator.close)


def key_json(ks: KeyState) -> dict[str, Any]:
    return {"count": ks.count, "sum": ks.sum, "min": ks.min, "max": ks.max, "last": ks.last}


class _HttpError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def _http_error(status: int, code: str, message: str, field: str | None = None) -> _HttpError:
    return _HttpError(status, code, message, field)


@web.middleware
async def _error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except _HttpError as exc:
        body: dict[str, Any] = {"error": exc.code, "message": exc.message}
        if exc.field:
            body["field"] = exc.field
        return web.json_response(body, status=exc.status)
    except web.HTTPException as exc:
        return web.json_response({"error": "http_error", "message": exc.reason}, status=exc.status)
    except Exception:  # the boundary: log, never leak a trace
        log.exception("worker handler failed on %s", request.path)
        return web.json_response({"error": "internal", "message": "internal error"}, status=500)


def run_worker(settings: WorkerSettings, store: ObjectStore, transform: Transform) -> int:
    """Run until stopped; 0, or 2 when the start-up probe refused (message on stderr)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        asyncio.run(Worker(settings, store, transform).run())
    except ProbeFailed as exc:
        log.error("refusing to start: %s", exc)
        print(f"ripple worker: refusing to start: {exc}", file=sys.stderr)
        return 2
    return 0
