"""The two systems of the `state` benchmark on one rig: a recorded pipeline per key
distribution and its Structured Streaming peer (bench/state_peer.py) over the same segments.

Owns a `Case`: the pipeline (created through the leader's API with a count/sum spec and its
`max_keys_per_partition` raised to the run's key count, so no key goes to the dead letters),
its producer, and its peer query, which reads hard links of the pipeline's own segment files.
Invariant: both systems see the same rows, each once: the producer appends to the pipeline's
source log, and the peer is fed exactly the segments of that log (`feed_peer`); every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench.memory import _rss_mb
from bench.pipelines_isolation import _active, _leader_call, _speaks_pipelines
from bench.state_figures import draw_keys, key_name
from bench.state_peer import RocksDBAggregation, dir_files
from pipeline.spec.produce import SpecProducer
from pipeline.spec.run import PipelineInfo
from pipeline.spec.sdk import PipelineClient
from shared.checkpoint_ref import checkpoint_key_parts, checkpoints_prefix
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until

__all__ = ["Case", "open_case", "ripple_rss_mib"]

SPEC = """
[schema]
ddl = "k STRING, v BIGINT"
key = "k"

[[aggregations]]
name = "n"
fn = "count"

[[aggregations]]
name = "s"
fn = "sum"
column = "v"
"""
PEER_DDL = "k STRING, v BIGINT, offset BIGINT"  # a recorded pipeline's segment: spec + offset
PARTITIONS = 8
VALUES_MOD = 100  # small integers: a sum is exact (a DOUBLE sum is refused by the spec)
SETTLE_TIMEOUT_S = 180.0
POLL_S = 0.05
CHECKPOINT_PREFIX = "checkpoints"
ROUTE_ATTEMPTS = 3


@dataclass(slots=True)
class Case:
    """One key distribution: its pipeline, producer, peer and SDK client."""

    name: str
    zipf: bool
    rig: PipelineRig
    info: PipelineInfo
    producer: SpecProducer
    peer: RocksDBAggregation
    client: PipelineClient
    loop: asyncio.AbstractEventLoop
    timeout_s: float

    @property
    def slots(self) -> range:
        return range(self.info.first_slot, self.info.first_slot + self.info.partitions)

    def produce(self, keys: Sequence[int], chunk: int, seed: int) -> None:
        """Append one record per entry of `keys` (key indices), `chunk` per call."""
        rng = random.Random(seed)
        for start in range(0, len(keys), chunk):
            part = keys[start : start + chunk]
            self.producer.produce(
                [{"k": key_name(k), "v": rng.randrange(VALUES_MOD)} for k in part]
            )

    def total_rows(self) -> int:
        return sum(self.producer.run.log.end_offset(n) for n in self.slots)

    def held(self) -> dict[int, tuple[str, int]]:
        """Each of the pipeline's partitions held by a running worker: (worker, offset)."""
        out: dict[int, tuple[str, int]] = {}
        for wid, proc in self.rig.workers.items():
            if not proc.alive():
                continue
            for p, part in ((self.rig.health(wid) or {}).get("partitions") or {}).items():
                if self.info.contains(int(p)):
                    out[int(p)] = (wid, int(part["offset"]))
        return out

    def ripple_caught_up(self) -> bool:
        """Every partition's owner has processed its whole log."""
        log, held = self.producer.run.log, self.held()
        return set(held) == set(self.slots) and all(
            held[n][1] == log.end_offset(n) for n in self.slots
        )

    def wait_ripple(self) -> float:
        """Seconds until `ripple_caught_up` (bounded)."""
        t0 = time.monotonic()
        wait_until(self.ripple_caught_up, f"{self.name} caught up", self.timeout_s, POLL_S)
        return time.monotonic() - t0

    def segments(self) -> dict[str, Path]:
        """The pipeline's segment files, by partition directory and file name."""
        out: dict[str, Path] = {}
        log, store = self.producer.run.log, self.rig.store
        for n in self.slots:
            for seg in log.segments(n):
                local = store.local_path(seg.key)
                if local is None:
                    raise RuntimeError("the peer links the store's files: needs a local store")
                out[f"p{n:05d}/{Path(local).name}"] = Path(local)
        return out

    def feed_peer(self) -> None:
        self.peer.feed(self.segments())

    def wait_peer(self) -> float:
        """Feed the peer every segment so far; seconds until it has taken every row."""
        t0 = time.monotonic()
        self.feed_peer()
        self.peer.wait_rows(self.total_rows(), self.timeout_s)
        return time.monotonic() - t0

    def checkpoint_files(self) -> dict[str, int]:
        """Every file under the pipeline's partitions' checkpoint prefixes in the store (the
        checkpoints and anything else written beside them): key -> bytes."""
        root = self.rig.store.local_path(CHECKPOINT_PREFIX)
        if root is None:
            raise RuntimeError("checkpoint sizes are read from a local store")
        mine = {checkpoints_prefix(n) for n in self.slots}
        files = {f"{CHECKPOINT_PREFIX}/{k}": v for k, v in dir_files(root).items()}
        return {k: v for k, v in files.items() if k[: k.rfind("/") + 1] in mine}

    def newest_checkpoints(self) -> dict[int, tuple[int, int]] | None:
        """Per partition, its newest checkpoint's (offset, bytes), once every partition's
        newest is at its log's end; else None."""
        newest: dict[int, tuple[int, int]] = {}
        for key, size in self.checkpoint_files().items():
            parts = checkpoint_key_parts(key)
            if parts is None:
                continue  # not a checkpoint object (a store's temp file)
            n, _, offset = parts
            if n not in newest or offset > newest[n][0]:
                newest[n] = (offset, size)
        log = self.producer.run.log
        done = set(newest) == set(self.slots) and all(
            newest[n][0] == log.end_offset(n) for n in self.slots
        )
        return newest if done else None

    def wait_checkpointed(self) -> dict[int, tuple[int, int]]:
        return wait_until(self.newest_checkpoints, f"{self.name} checkpointed", self.timeout_s, 0.2)

    def get(self, key: str) -> dict[str, Any]:
        """`ripple get --pipeline` of `key` through the SDK."""
        return self.loop.run_until_complete(self.client.get(key))

    def close(self) -> None:
        try:
            self.peer.close()
        finally:
            self.loop.run_until_complete(self.client.close())
            self.loop.close()


def open_case(
    rig: PipelineRig,
    spark_remote: str,
    root: Path,
    name: str,
    *,
    zipf: bool,
    keys: int,
    timeout_s: float,
) -> Case:
    """Create pipeline `name` (count/sum, PARTITIONS partitions, a key cap of `keys`) and
    start its peer query on its own input and checkpoint directories under `root`."""
    wait_until(partial(_speaks_pipelines, rig), "pipelines spoken", SETTLE_TIMEOUT_S)
    settings = {"max_keys_per_partition": keys}
    body = {"name": name, "spec_text": SPEC, "partitions": PARTITIONS, "settings": settings}
    _leader_call(rig, "POST", "/v1/pipelines", body)
    described = wait_until(partial(_active, rig, name), f"{name} active", SETTLE_TIMEOUT_S)
    info = PipelineInfo.from_describe(described)
    peer = RocksDBAggregation(
        spark_remote,
        root / f"{name}-input",
        str(root / f"{name}-checkpoint"),
        ddl=PEER_DDL,
        key_col="k",
        value_col="v",
        count_name="n",
        sum_name="s",
        sink_suffix=name,
        state_partitions=PARTITIONS,
    )
    loop = asyncio.new_event_loop()
    client = PipelineClient([s.url for s in rig.cluster.specs], name)
    case = Case(
        name=name,
        zipf=zipf,
        rig=rig,
        info=info,
        producer=SpecProducer(rig.store, info),
        peer=peer,
        client=client,
        loop=loop,
        timeout_s=timeout_s,
    )
    peer.start()
    return case


def ripple_rss_mib(rig: PipelineRig) -> list[float]:
    """Each worker's resident memory, MiB."""
    return [_rss_mb(str(p.pid)) for p in rig.workers.values()]


def keys_sample(keys: int, n: int, seed: int) -> list[str]:
    """`n` key names of the state, drawn uniformly."""
    return [key_name(k) for k in draw_keys(keys, n, False, seed)]
