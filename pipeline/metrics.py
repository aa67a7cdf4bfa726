"""Prometheus metrics of one worker, computed from its state when /metrics is scraped.

Counters are the worker's own event counts (`new_stats`, batch seconds); gauges read the
partitions it holds right now: processing lag behind the source log and the age of the
state's last checkpoint, per partition, per pipeline and as worker-wide aggregates. Nothing
is kept in step with the work by hand, so the figures cannot drift from what the worker holds.

Partition series carry `pipeline` (`default`, or a recorded pipeline's name from its run) and
`partition` as that pipeline numbers it (slot - first_slot), as the coordinator's do. The
`pipeline` label takes at most PIPELINE_LABELS_MAX values per worker: past it the pipelines
last by name, and a name's older incarnations still held, go under `other`, their partitions
by slot number, which no other series uses; so no two series share their labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.holdings import Holdings, PartitionRuntime
from shared.clock import Clock, monotonic_s
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "PARTITION_SERIES_MAX",
    "PIPELINE_LABELS_MAX",
    "STAT_HELP",
    "WorkerMetrics",
    "new_stats",
    "pipeline_numbers",
]

# Past this many held partitions only the aggregates are exported (bounded scrape size).
PARTITION_SERIES_MAX = 1024
# Distinct `pipeline` label values one worker exports, `default` and `other` among them.
PIPELINE_LABELS_MAX = 32
DEFAULT_PIPELINE = "default"
OTHER_PIPELINES = "other"

# What each worker counter counts, in the order `GET /v1/health` shows them; exported as
# ripple_worker_<name>_total.
STAT_HELP = {
    "batches": "Micro-batches that succeeded",
    "records": "Source records merged into partition state",
    "dead_letter_keys": "New keys refused by max_keys_per_partition, sent to dead-letter",
    "late_records": "Records of windowed pipelines later than their watermark (or with no "
    "event time), sent to dead-letter",
    "checkpoints": "Checkpoints written",
    "checkpoint_failures": "Checkpoint rounds the store failed (the next round retries)",
    "fenced": "Checkpoints the coordinator refused as fenced",
    "lease_pauses": "Micro-batches skipped or discarded because the lease had run out",
    "batch_failures": "Micro-batches that failed (retried with their input kept)",
    "segments_fetched": "Source segments read from the store",
    "spark_reconnects": "New Spark Connect sessions made after the server lost ours or could "
    "not be reached (a restart); each is one log line",
    "results_published": "Accepted checkpoints of recorded pipelines published to their "
    "results tables",
    "results_failures": "Publishes of results the store or Spark failed (the next accepted "
    "round retries)",
}


def new_stats() -> dict[str, int]:
    """A worker's event counters, all at zero."""
    return dict.fromkeys(STAT_HELP, 0)


class WorkerMetrics(Collector):
    """A registry of its own holding just this collector, read at every scrape."""

    def __init__(
        self,
        stats: Mapping[str, int],
        batch_seconds: Mapping[str, float],
        holdings: Holdings,
        lease_valid: Callable[[], bool],
        warm_copies: Callable[[], Mapping[str, int]] = dict,
        clock: Clock = SYSTEM_CLOCK,
        *,
        failed_batches: Mapping[str, int] | None = None,
        spark_reachable: Callable[[], bool] = lambda: True,
        store_errors: Mapping[str, int] | None = None,
    ) -> None:
        self.clock = clock  # the checkpoint ages are read on it
        self.stats = stats
        # The warm copies' counters (pipeline/warming.py) with `held`, the copies now.
        self.warm_copies = warm_copies
        self.batch_seconds = batch_seconds
        self.holdings = holdings
        self.lease_valid = lease_valid
        # Failed micro-batches by reason (pipeline/spark_link.py's BatchFault values).
        self.failed_batches = failed_batches if failed_batches is not None else {}
        self.spark_reachable = spark_reachable
        # Store calls that failed past the client's retries, by operation (CountedStore).
        self.store_errors = store_errors if store_errors is not None else {}
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        holdings = self.holdings
        for name, count in sorted(self.stats.items()):
            yield CounterMetricFamily(
                f"ripple_worker_{name}", STAT_HELP.get(name, name.replace("_", " ")), value=count
            )
        seconds = CounterMetricFamily(
            "ripple_worker_batch_seconds", "Micro-batch time by stage", labels=["stage"]
        )
        for stage, value in sorted(self.batch_seconds.items()):
            seconds.add_metric([stage], value)
        yield seconds
        failed = CounterMetricFamily(
            "ripple_worker_failed_batches",
            "Micro-batches that failed, by reason: store (a store call past its retries), "
            "staging_disk (the local staging disk full or failing), plan, spark_unreachable, "
            "spark_session_lost (a server restart), spark_timeout (spark_job_timeout_s), "
            "spark_job",
            labels=["reason"],
        )
        for reason, count in sorted(self.failed_batches.items()):
            failed.add_metric([reason], count)
        yield failed
        store = CounterMetricFamily(
            "ripple_worker_store_errors",
            "Store calls that failed past the S3 client's retries (backoff with jitter), by "
            "operation: put, get, list; each is retried by the next batch or checkpoint round",
            labels=["op"],
        )
        for op, count in sorted(self.store_errors.items()):
            store.add_metric([op], count)
        yield store
        yield GaugeMetricFamily(
            "ripple_worker_spark_reachable",
            "1 while the worker has a Spark Connect session that works, 0 while it makes a "
            "new one (the server restarted, is down, or a job ran past its timeout)",
            value=int(self.spark_reachable()),
        )
        yield GaugeMetricFamily(
            "ripple_worker_partitions_open",
            "Partitions whose gate is open here",
            value=len(holdings.gates.open_partitions()),
        )
        yield GaugeMetricFamily(
            "ripple_worker_lease_valid",
            "1 while the lease holds (a heartbeat was acknowledged within lease_s)",
            value=int(self.lease_valid()),
        )
        yield GaugeMetricFamily(
            "ripple_worker_partitions_failing",
            "Partitions whose recent micro-batches failed in a row (reported to the leader)",
            value=len(holdings.failing()),
        )
        warm = dict(self.warm_copies())
        yield GaugeMetricFamily(
            "ripple_worker_warm_copies_held",
            "Warm copies held for moves into this worker",
            value=warm.pop("held", 0),
        )
        copies = CounterMetricFamily(
            "ripple_worker_warm_copy_outcomes",
            "Warm copies by what became of them: started, used by a host, dropped",
            labels=["outcome"],
        )
        for outcome, count in sorted(warm.items()):
            copies.add_metric([outcome], count)
        yield copies
        now = monotonic_s(self.clock)
        lags = {
            p: max(0, rt.source_end - rt.offset)
            for p, rt in holdings.parts.items()
            if rt.source_end is not None
        }
        ages = {p: max(0.0, now - rt.covered_at_s) for p, rt in holdings.parts.items()}
        yield GaugeMetricFamily(
            "ripple_worker_lag_records",
            "Records in the source log not yet processed, over the partitions held here",
            value=sum(lags.values()),
        )
        yield GaugeMetricFamily(
            "ripple_worker_checkpoint_age_max_seconds",
            "Longest time a held partition's state has gone without a checkpoint",
            value=max(ages.values(), default=0.0),
        )
        numbers = pipeline_numbers(holdings.parts)
        yield from _per_pipeline(numbers, lags, ages, set(holdings.failing()))
        if len(holdings.parts) > PARTITION_SERIES_MAX:
            return
        lag = GaugeMetricFamily(
            "ripple_worker_partition_lag_records",
            "Records behind the source log's end as last listed, by pipeline and its partition",
            labels=["pipeline", "partition"],
        )
        for p, value in sorted(lags.items()):
            lag.add_metric(_labels(numbers[p]), value)
        yield lag
        age = GaugeMetricFamily(
            "ripple_worker_partition_checkpoint_age_seconds",
            "Time since the partition's state was last covered by a checkpoint, by pipeline "
            "and its partition",
            labels=["pipeline", "partition"],
        )
        for p, seconds_since in sorted(ages.items()):
            age.add_metric(_labels(numbers[p]), seconds_since)
        yield age


def pipeline_numbers(parts: Mapping[int, PartitionRuntime]) -> dict[int, tuple[str, int]]:
    """Each held partition's `pipeline` label and its number there, within
    PIPELINE_LABELS_MAX label values (the module's docstring says which go under `other`)."""
    newest: dict[str, int] = {}
    for rt in parts.values():
        if rt.run is not None:
            info = rt.run.info
            newest[info.name] = max(newest.get(info.name, info.incarnation), info.incarnation)
    names = sorted(newest)
    stale = any(
        rt.run is not None and rt.run.info.incarnation != newest[rt.run.name]
        for rt in parts.values()
    )
    # Room for `default`, and for `other` once an older incarnation or a name goes there.
    if len(names) > PIPELINE_LABELS_MAX - 1 - stale:
        names = names[: PIPELINE_LABELS_MAX - 2]
    named = set(names)
    out: dict[int, tuple[str, int]] = {}
    for p, rt in parts.items():
        if rt.run is None:
            out[p] = (DEFAULT_PIPELINE, p)
            continue
        info = rt.run.info
        if info.name in named and info.incarnation == newest[info.name]:
            out[p] = (info.name, p - info.first_slot)
        else:
            out[p] = (OTHER_PIPELINES, p)
    return out


def _labels(numbered: tuple[str, int]) -> list[str]:
    return [numbered[0], str(numbered[1])]


def _per_pipeline(
    numbers: Mapping[int, tuple[str, int]],
    lags: Mapping[int, int],
    ages: Mapping[int, float],
    failing: Set[int],
) -> Iterator[Metric]:
    """The worker-wide gauges again, one series per `pipeline` label value held here."""
    held: dict[str, int] = {}
    lag: dict[str, int] = {}
    age: dict[str, float] = {}
    fails: dict[str, int] = {}
    for p, (pipeline, _) in numbers.items():
        held[pipeline] = held.get(pipeline, 0) + 1
        lag[pipeline] = lag.get(pipeline, 0) + lags.get(p, 0)
        age[pipeline] = max(age.get(pipeline, 0.0), ages.get(p, 0.0))
        fails[pipeline] = fails.get(pipeline, 0) + (p in failing)
    yield _filled(
        GaugeMetricFamily(
            "ripple_worker_pipeline_partitions",
            "Partitions held here, by pipeline",
            labels=["pipeline"],
        ),
        held,
    )
    yield _filled(
        GaugeMetricFamily(
            "ripple_worker_pipeline_lag_records",
            "Records in the source log not yet processed, by pipeline",
            labels=["pipeline"],
        ),
        lag,
    )
    yield _filled(
        GaugeMetricFamily(
            "ripple_worker_pipeline_checkpoint_age_max_seconds",
            "Longest time a held partition's state has gone without a checkpoint, by pipeline",
            labels=["pipeline"],
        ),
        age,
    )
    yield _filled(
        GaugeMetricFamily(
            "ripple_worker_pipeline_partitions_failing",
            "Partitions whose recent micro-batches failed in a row, by pipeline",
            labels=["pipeline"],
        ),
        fails,
    )


def _filled(family: GaugeMetricFamily, values: Mapping[str, float]) -> GaugeMetricFamily:
    for pipeline, value in sorted(values.items()):
        family.add_metric([pipeline], value)
    return family
