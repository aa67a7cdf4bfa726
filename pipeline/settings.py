"""A worker's settings: what `ripple worker` is told on its command line, as one value.

Every bound an operator may change lives here with its default, so the modules that act on
them take this value instead of reading flags or the environment themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.datapath import ARROW_BATCH_BYTES_MAX_DEFAULT, ARROW_BATCH_ROWS_MAX_DEFAULT
from pipeline.state import MAX_KEYS_PER_PARTITION_DEFAULT

__all__ = [
    "BATCH_INTERVAL_S_DEFAULT",
    "DRAIN_TIMEOUT_S",
    "PROBE_TIMEOUT_S_DEFAULT",
    "SPARK_JOB_TIMEOUT_S_DEFAULT",
    "SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT",
    "SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT",
    "STOP_TIMEOUT_S",
    "WARM_COPIES_MAX_DEFAULT",
    "WARM_COPY_IDLE_S_DEFAULT",
    "StartRefused",
    "WorkerSettings",
]

BATCH_INTERVAL_S_DEFAULT = 0.5
# The start-up probe waits this long for Spark: a cluster without executors accepts the job
# and never runs it.
PROBE_TIMEOUT_S_DEFAULT = 120.0
DRAIN_TIMEOUT_S = 120.0
# A micro-batch's Spark job that runs longer is interrupted, its session dropped, and the
# batch retried on a new one: a hung job (executors gone, a stuck stage) is bounded and seen.
SPARK_JOB_TIMEOUT_S_DEFAULT = 120.0
# New sessions after Spark lost ours (a restart) or cannot be reached: the first attempt
# waits the minimum, each failed one doubles it, up to the maximum (a restarted server is
# back within seconds to a minute; ten seconds between attempts costs little once it is).
SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT = 0.5
SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT = 10.0
WARM_COPIES_MAX_DEFAULT = 4
# Longer than a warm-up's deadline plus the release and hand-off that follow it.
WARM_COPY_IDLE_S_DEFAULT = 180.0
# A restart's stop (final checkpoints, their report, the notice to the leader) gives up after
# this: well inside the 30 s a Kubernetes pod or `docker stop` waits before SIGKILL.
STOP_TIMEOUT_S = 20.0


class StartRefused(Exception):
    """The worker will not run with these settings (its message says why and what to fix):
    `ripple worker` prints it and exits 2, as for a failed start-up probe."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    # The coordinators' URLs (any node; the worker follows the leader from there).
    coordinators: tuple[str, ...]
    # The worker's stable name: the same id started again is the same member.
    worker_id: str
    listen: str  # host:port
    # The sc://HOST:PORT of the Spark Connect server the micro-batches run on.
    spark_remote: str
    # The URL the coordinator calls this worker at (None: http(s)://listen).
    advertise: str | None = None
    # How often a micro-batch starts over the partitions held here.
    batch_interval_s: float = BATCH_INTERVAL_S_DEFAULT
    # New keys past this many in one partition go to the dead-letter segments.
    max_keys_per_partition: int = MAX_KEYS_PER_PARTITION_DEFAULT
    # Where S3 segments are staged for a Spark on this machine (None: a temporary one).
    staging_dir: str | None = None
    # How long a leave (--leave-on-sigterm) waits for its partitions to move away.
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    # How long a restart's stop may take before it gives up (STOP_TIMEOUT_S above).
    stop_timeout_s: float = STOP_TIMEOUT_S
    # Where the worker keeps its current token (pipeline/token_file.py), so that a process
    # started again under this id rejoins as the same member. None: nothing is kept, and a
    # restarted worker registers anew once the leader has given up on the old one.
    state_dir: str | None = None
    # SIGTERM leaves (drains: its partitions move away, then it exits) instead of restarting.
    leave_on_sigterm: bool = False
    # The --store URI, sent at registration: a cluster whose store is another refuses the
    # worker (its checkpoints would all be fenced). None: not sent, not checked.
    store_uri: str | None = None
    # The cluster's join token, sent at registration (None: the cluster must be open).
    join_token: str | None = None
    data_path: str | None = None  # files | arrow | direct; None: default_data_path
    # The arrow data path's largest batch in rows (pipeline/datapath.py).
    arrow_batch_rows_max: int = ARROW_BATCH_ROWS_MAX_DEFAULT
    # The arrow data path's largest batch in bytes.
    arrow_batch_bytes_max: int = ARROW_BATCH_BYTES_MAX_DEFAULT
    # The start-up probe's wait for Spark (PROBE_TIMEOUT_S_DEFAULT above).
    probe_timeout_s: float = PROBE_TIMEOUT_S_DEFAULT
    # A micro-batch's Spark job running longer is interrupted and the batch retried on a new
    # session, its input kept (SPARK_JOB_TIMEOUT_S_DEFAULT above).
    spark_job_timeout_s: float = SPARK_JOB_TIMEOUT_S_DEFAULT
    # The first wait before a new Spark session, once the old one is lost or unreachable.
    spark_reconnect_backoff_s_min: float = SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT
    # The longest wait between attempts at a new Spark session (doubling from the minimum).
    spark_reconnect_backoff_s_max: float = SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT
    # Warm copies for moves into this worker (pipeline/warming.py): at most this many at
    # once, and one the leader stopped asking about is dropped after warm_copy_idle_s.
    warm_copies_max: int = WARM_COPIES_MAX_DEFAULT
    # A warm copy the leader has not asked about for this long is dropped.
    warm_copy_idle_s: float = WARM_COPY_IDLE_S_DEFAULT
    # TLS: serve the worker API with this certificate and key (the advertised address is
    # then https://); verify https:// coordinators against tls_ca (None: system roots).
    tls_cert: str | None = None
    # The PEM private key of tls_cert.
    tls_key: str | None = None
    # The CA bundle https:// coordinators are verified against (None: the system's roots).
    tls_ca: str | None = None
    # What this worker offers recorded pipelines, sent at registration: its labels (pools
    # select on them). Neither labels nor slots: the worker runs `default`'s partitions only.
    labels: tuple[tuple[str, str], ...] = ()
    # The most recorded pipelines' partitions it takes (None with labels: 64, the default).
    slots: int | None = None

    @property
    def profiled(self) -> bool:
        return bool(self.labels) or self.slots is not None

    @property
    def address(self) -> str:
        """The URL the coordinator calls: `advertise`, else `listen` over http(s)."""
        scheme = "https" if self.tls_cert else "http"
        return self.advertise or f"{scheme}://{self.listen}"
