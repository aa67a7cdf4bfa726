"""Metrics an operator alerts on, read from real processes.

- A real coordinator's and a real worker's /metrics pass `promtool check metrics` (Debian's
  `prometheus` package; the test skips, saying why, only when promtool is not installed).
- The figures are the cluster's: partitions by status, workers by state and liveness (leader
  only), migrations by phase, checkpoint age, processing lag from heartbeats; exact values
  from heartbeats a test sends itself, and zero lag once real workers have caught up.
- The example alerting rules in docs/alerting.md pass `promtool check rules`, and
  `promtool test rules` shows each one firing on series that should trip it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.source import generate
from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.pipeline_rig import SETTINGS, PipelineRig
from testkit.prom import Samples, parse, value
from testkit.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
PROMTOOL_TIMEOUT_S = 60.0
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not found (Debian package `prometheus`; .ci/run installs it)",
)


def scrape(url: str) -> str:
    reply = call("GET", url + "/metrics")
    assert reply.status == 200, reply
    assert isinstance(reply.body, str)
    return reply.body


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
    )


def check_metrics(text: str) -> None:
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, f"promtool check metrics:\n{result.stdout}{result.stderr}"


def assert_documented(samples: Samples, section: str) -> None:
    """Every family a process exports is in its section of docs/reference/metrics.md (a
    counter by its `_total` name, a histogram by its own; prometheus_client's `_created`
    series go with their counter). The page is generated from the code by a static scan
    (testkit/docs_reference.py): this is the check that the scan missed nothing real."""
    text = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    table = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(ripple_\w+)`", table))
    missing = set()
    for name in {name for name, _ in samples}:
        family = re.sub(r"_(bucket|count|sum)$", "", name)
        counter = re.sub(r"_created$", "_total", name)
        if not documented & {name, family, counter}:
            missing.add(name)
    assert not missing, f"exported, not in docs/reference/metrics.md: {sorted(missing)}"


# -- a coordinator cluster, heartbeats sent by the test -------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, total_partitions=4, heartbeat_timeout_s=30.0)
    c.start_all()
    try:
        c.ready()
        yield c
    finally:
        c.stop_all()


def test_coordinator_metrics_describe_the_cluster(cluster: Cluster) -> None:
    leader = cluster.leader()
    follower = next(s.id for s in cluster.specs if s.id != leader)
    reg = cluster.post(leader, "/v1/workers", {"worker_id": "w1", "address": "http://127.0.0.1:9"})
    assert reg.status == 200, reg.body
    token, incarnation = reg.body["token"], reg.body["incarnation"]

    def owned() -> list[dict[str, int]] | None:
        parts = cluster.get(leader, "/v1/partitions?consistent=true").body["partitions"]
        return parts if all(p["owner"] == "w1" for p in parts) else None

    # Nothing listens at the worker's address: the partitions stay ASSIGNING to w1.
    parts = wait_until(owned, "every partition assigned to w1", 30)
    reports = {
        str(p["partition"]): {"epoch": p["epoch"], "offset": 5, "source_end": 5 + 10 * i}
        for i, p in enumerate(parts)
    }

    def heartbeat(partitions: dict[str, dict[str, int]]) -> None:
        body = {"incarnation": incarnation, "load": 4.0, "partitions": partitions}
        hb = cluster.post(leader, "/v1/workers/w1/heartbeat", body, token=token)
        assert hb.status == 200, hb.body

    heartbeat(reports)
    samples = parse(scrape(cluster.url(leader)))
    assert value(samples, "ripple_raft_role", role="leader") == 1
    assert value(samples, "ripple_partitions", pipeline="default", status="assigning") == 4
    assert value(samples, "ripple_partitions", pipeline="default", status="online") == 0
    assert value(samples, "ripple_workers", state="active") == 1
    assert value(samples, "ripple_workers", state="dead") == 0
    assert value(samples, "ripple_workers_by_liveness", liveness="alive") == 1
    assert value(samples, "ripple_migrations_in_flight", phase="planned") == 0
    assert (value(samples, "ripple_leader_changes_total") or 0) >= 1
    assert value(samples, "ripple_raft_guard_ticks_total") is not None
    # Lags 0, 10, 20, 30 from the heartbeat above: sum 60, max 30, per partition exact.
    assert value(samples, "ripple_pipeline_lag_records") == 60
    assert value(samples, "ripple_pipeline_lag_max_records") == 30
    assert value(samples, "ripple_pipeline_lag_reporting_partitions") == 4
    for i, p in enumerate(parts):
        number = str(p["partition"])
        lag = value(samples, "ripple_partition_lag_records", pipeline="default", partition=number)
        assert lag == 10 * i
    assert value(samples, "ripple_partitions_without_checkpoint") == 4
    assert value(samples, "ripple_checkpoint_age_max_seconds") == 0
    # The registration waited for journal syncs (fsync is on by default), each one timed.
    syncs = value(samples, "ripple_raft_journal_sync_duration_seconds_count")
    assert syncs is not None and syncs >= 1
    assert value(samples, "ripple_raft_journal_sync_duration_seconds_bucket", le="+Inf") == syncs
    assert value(samples, "ripple_raft_syncs_total", file="journal") == syncs
    assert (value(samples, "ripple_raft_syncs_total", file="meta") or 0) >= 1  # the term
    assert_documented(samples, "Coordinator")

    # A follower exports what its own state says, and no leader-only figure.
    wait_until(
        lambda: value(parse(scrape(cluster.url(follower))), "ripple_workers", state="active") == 1,
        "the follower applied the registration",
        30,
    )
    followed = parse(scrape(cluster.url(follower)))
    assert value(followed, "ripple_raft_role", role="follower") == 1
    # The follower synced before it answered for the registration's entry.
    assert (value(followed, "ripple_raft_journal_sync_duration_seconds_count") or 0) >= 1
    assert value(followed, "ripple_partitions", pipeline="default", status="assigning") == 4
    assert not any(name.startswith("ripple_pipeline_lag") for name, _ in followed)
    assert not any(name == "ripple_workers_by_liveness" for name, _ in followed)

    # The heartbeat with epochs that are not current does not count.
    heartbeat({k: {**v, "epoch": v["epoch"] + 100} for k, v in reports.items()})
    again = parse(scrape(cluster.url(leader)))
    assert value(again, "ripple_pipeline_lag_reporting_partitions") == 0


@needs_promtool
def test_coordinator_metrics_pass_promtool(cluster: Cluster) -> None:
    leader = cluster.leader()
    cluster.post(leader, "/v1/admin/reassign", {"strategy": "balance"}, token=ADMIN)
    for spec in cluster.specs:
        check_metrics(scrape(spec.url))


# -- real workers --------------------------------------------------------------------------


@needs_promtool
def test_worker_metrics_pass_promtool_and_show_the_pipeline_caught_up(
    tmp_path: Path, spark_remote: str
) -> None:
    settings = {**SETTINGS, "min_cluster_size": 2}
    pipeline = PipelineRig(
        tmp_path, f"file://{tmp_path / 'store'}", spark_remote, None, settings=settings
    )
    for _ in pipeline.running():
        for wid in ("w1", "w2"):
            pipeline.start_worker(wid)
        pipeline.producer.produce(generate(2000, 30, seed=3))
        total = pipeline.check_equal_to_batch_job()
        leader_url = pipeline.cluster.url(pipeline.cluster.leader())

        def settled(url: str = leader_url) -> Samples | None:
            s = parse(scrape(url))
            reported = value(s, "ripple_pipeline_lag_reporting_partitions") == 8
            done = value(s, "ripple_partitions_without_checkpoint") == 0
            # Both alive at once: on a loaded machine a heartbeat can be late past
            # suspect_after_s (1 s here) for a moment, so this is waited for, not asserted.
            alive = value(s, "ripple_workers_by_liveness", liveness="alive") == 2
            caught_up = value(s, "ripple_pipeline_lag_records") == 0
            return s if reported and done and alive and caught_up else None

        samples = wait_until(settled, "every partition reported caught up and checkpointed", 60)
        assert value(samples, "ripple_partitions", pipeline="default", status="online") == 8
        age = value(samples, "ripple_checkpoint_age_max_seconds")
        assert age is not None and age < 60

        records = 0.0
        for wid in ("w1", "w2"):
            text = scrape(f"http://127.0.0.1:{pipeline.ports[wid]}")
            check_metrics(text)
            w = parse(text)
            assert_documented(w, "Worker")
            assert value(w, "ripple_worker_lag_records") == 0
            assert (value(w, "ripple_worker_batches_total") or 0) >= 1
            assert value(w, "ripple_worker_batch_failures_total") == 0
            held = [k for k in w if k[0] == "ripple_worker_partition_lag_records"]
            assert held and all(w[k] == 0 for k in held)
            age = value(w, "ripple_worker_checkpoint_age_max_seconds")
            assert age is not None and age < 60
            records += value(w, "ripple_worker_records_total") or 0
        assert records == total
        check_metrics(scrape(leader_url))


# -- the alerting rules in docs/alerting.md -----------------------------------------------


def documented_rules() -> str:
    text = (ROOT / "docs" / "alerting.md").read_text()
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, "docs/alerting.md: no ```yaml block"
    return match.group(1)


@needs_promtool
def test_documented_alert_rules_are_valid_and_fire(tmp_path: Path) -> None:
    rules = tmp_path / "ripple-alerts.yml"
    rules.write_text(documented_rules())
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tests = tmp_path / "ripple-alerts-test.yml"
    tests.write_text(ALERT_TESTS.replace("RULES", str(rules)))
    tested = promtool("test", "rules", str(tests))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every documented alert has a case here that makes it fire.
    documented = set(re.findall(r"- alert: (\w+)", documented_rules()))
    firing = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", ALERT_TESTS))
    assert documented == firing, f"alerts without a firing test: {documented - firing}"


# Series that should trip each documented alert (and one healthy series that must not).
ALERT_TESTS = """
rule_files: [RULES]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'ripple_raft_role{role="leader", instance="n1"}'
        values: '0x15'
      - series: 'ripple_raft_role{role="leader", instance="n2"}'
        values: '0x15'
      - series: 'ripple_partitions{pipeline="default", status="assigning", instance="n1"}'
        values: '3x20'
      - series: 'ripple_pipeline_lag_records{instance="n1"}'
        values: '0+100x40'
      - series: 'ripple_checkpoint_age_max_seconds{instance="n1"}'
        values: '0+60x20'
      - series: 'ripple_partitions_stuck{pipeline="default", instance="n1"}'
        values: '2x20'
      - series: 'ripple_apply_halted{instance="n3"}'
        values: '1x20'
      - series: 'ripple_node_halted{reason="disk_full", instance="n2"}'
        values: '0 0 1x20'
      - series: 'ripple_raft_slow_disk_step_downs_total{instance="n1"}'
        values: '0 0 1x20'
      - series: 'ripple_http_shed_requests_total{class="reads", instance="n1"}'
        values: '0+600x20'
      - series: 'ripple_worker_store_errors_total{op="get", instance="w1"}'
        values: '0+10x20'
      - series: 'ripple_worker_failed_batches_total{reason="staging_disk", instance="w2"}'
        values: '0+2x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: RippleNoLeader
        exp_alerts:
          - exp_labels: {severity: page}
            exp_annotations: {summary: "Ripple has had no Raft leader for 1 minute"}
      - eval_time: 15m
        alertname: RipplePartitionsNotOnline
        exp_alerts:
          - exp_labels: {severity: page, pipeline: default, status: assigning}
            exp_annotations:
              summary: "3 Ripple partitions of pipeline default assigning for 10 minutes"
      - eval_time: 35m
        alertname: RipplePipelineLagGrowing
        exp_alerts:
          - exp_labels: {severity: ticket, instance: n1}
            exp_annotations: {summary: "Ripple processing lag has grown for 15 minutes (1500)"}
      - eval_time: 15m
        alertname: RippleCheckpointsOld
        exp_alerts:
          - exp_labels: {severity: ticket}
            exp_annotations: {summary: "A Ripple checkpoint is 900 s old"}
      - eval_time: 5m
        alertname: RipplePartitionStuck
        exp_alerts:
          - exp_labels: {severity: page, pipeline: default}
            exp_annotations:
              summary: "2 Ripple partitions of pipeline default are stuck: reset them"
      - eval_time: 5m
        alertname: RippleNodeHalted
        exp_alerts:
          - exp_labels: {severity: page, instance: n3}
            exp_annotations: {summary: "Ripple node n3 halted: restart it on a newer release"}
      - eval_time: 3m
        alertname: RippleNodeDiskHalted
        exp_alerts:
          - exp_labels: {severity: page, instance: n2, reason: disk_full}
            exp_annotations:
              summary: "Ripple node n2 halted (disk_full): fix its disk, restart it"
      - eval_time: 5m
        alertname: RippleLeaderSlowDisk
        exp_alerts:
          - exp_labels: {severity: ticket, instance: n1}
            exp_annotations:
              summary: "Ripple node n1 gave up the leadership for a slow disk"
      - eval_time: 16m
        alertname: RippleShedding
        exp_alerts:
          - exp_labels: {severity: ticket, instance: n1}
            exp_annotations: {summary: "Ripple node n1 sheds 10 requests/s"}
      - eval_time: 10m
        alertname: RippleWorkerStoreErrors
        exp_alerts:
          - exp_labels: {severity: page, instance: w1}
            exp_annotations:
              summary: "Ripple worker w1 keeps failing store calls past their retries"
      - eval_time: 10m
        alertname: RippleWorkerStagingDiskFull
        exp_alerts:
          - exp_labels: {severity: page, instance: w2}
            exp_annotations:
              summary: "Ripple worker w2's staging disk refuses writes: free space"
  - interval: 1m
    input_series:
      - series: 'ripple_raft_role{role="leader", instance="n1"}'
        values: '1x15'
      - series: 'ripple_partitions{pipeline="default", status="assigning", instance="n1"}'
        values: '0x20'
      - series: 'ripple_pipeline_lag_records{instance="n1"}'
        values: '50x40'
      - series: 'ripple_checkpoint_age_max_seconds{instance="n1"}'
        values: '10x20'
      - series: 'ripple_partitions_stuck{pipeline="default", instance="n1"}'
        values: '0x20'
      - series: 'ripple_apply_halted{instance="n3"}'
        values: '0x20'
      - series: 'ripple_node_halted{reason="machine", instance="n2"}'
        values: '1x20'
      - series: 'ripple_node_halted{reason="sync_failed", instance="n2"}'
        values: '0x20'
      - series: 'ripple_raft_slow_disk_step_downs_total{instance="n1"}'
        values: '3x40'
      - series: 'ripple_http_shed_requests_total{class="reads", instance="n1"}'
        values: '0+30x20'
      - series: 'ripple_worker_store_errors_total{op="get", instance="w1"}'
        values: '3x20'
      - series: 'ripple_worker_failed_batches_total{reason="spark_job", instance="w2"}'
        values: '0+2x20'
    alert_rule_test:
      - {eval_time: 15m, alertname: RippleNoLeader, exp_alerts: []}
      - {eval_time: 15m, alertname: RipplePartitionsNotOnline, exp_alerts: []}
      - {eval_time: 35m, alertname: RipplePipelineLagGrowing, exp_alerts: []}
      - {eval_time: 15m, alertname: RippleCheckpointsOld, exp_alerts: []}
      - {eval_time: 15m, alertname: RipplePartitionStuck, exp_alerts: []}
      - {eval_time: 15m, alertname: RippleNodeHalted, exp_alerts: []}
      - {eval_time: 15m, alertname: RippleNodeDiskHalted, exp_alerts: []}
      - {eval_time: 35m, alertname: RippleLeaderSlowDisk, exp_alerts: []}
      - {eval_time: 16m, alertname: RippleShedding, exp_alerts: []}
      - {eval_time: 10m, alertname: RippleWorkerStoreErrors, exp_alerts: []}
      - {eval_time: 10m, alertname: RippleWorkerStagingDiskFull, exp_alerts: []}
"""
