"""One recorded pipeline's slow batch does not hold up another's, on real Spark.

Three coordinator processes, one `ripple worker`, one Spark Connect server, a local-directory
store. Two recorded pipelines of one partition each on the worker: `slow`, whose transform
sleeps SLOW_S on every batch with rows (it marks a file as it starts), and `fast`, with no
transform. Once `slow`'s batch is under way, records produced to `fast` are processed and
visible (its partition's offset at its log's end) while `slow`'s batch is still running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.pipelines_isolation import SPEC  # one partition's count per key
from pipeline.spec.produce import SpecProducer
from pipeline.spec.run import PipelineInfo
from testkit.pipeline_rig import PipelineRig
from testkit.wait import wait_until
from tests.integration.test_pipeline_specs import active, admin, owners
from tests.integration.test_pipelines_api import speaks_pipelines

pytestmark = pytest.mark.spark

# Long enough that `fast` runs a whole batch (plan, Spark job, merge) inside it on a busy host.
SLOW_S = 25.0
FAST_TIMEOUT_S = 60.0
POOL = {"zone": "a"}
# Sleeps only on a batch with rows: Spark's empty partitions of the same job do not hold a
# second task slot (the local server has few).
SLOW_TRANSFORM = """
[transform]
source = '''
def transform(df):
    import pathlib
    import time
    if len(df):
        pathlib.Path("{marker}").touch()
        time.sleep({slow_s})
    return df
'''
"""


@pytest.fixture
def rig(tmp_path: Path, spark_remote: str) -> Iterator[PipelineRig]:
    yield from PipelineRig(tmp_path, f"file://{tmp_path}/store", spark_remote).running()


def create(rig: PipelineRig, name: str, spec_text: str) -> SpecProducer:
    body = {"name": name, "spec_text": spec_text, "partitions": 1, "pool": POOL}
    reply = admin(rig, "POST", "/v1/pipelines", body)
    assert reply.status == 202, reply
    info = PipelineInfo.from_describe(wait_until(lambda: active(rig, name), f"{name} active", 60))
    return SpecProducer(rig.store, info)


def offset(rig: PipelineRig, producer: SpecProducer) -> int | None:
    """The pipeline's one partition's offset on its owner, once one holds it."""
    held = owners(rig, producer.info)
    return held[producer.info.first_slot][1] if held else None


def caught_up(rig: PipelineRig, producer: SpecProducer) -> bool:
    return offset(rig, producer) == producer.run.log.end_offset(producer.info.first_slot)


def test_a_slow_pipeline_does_not_delay_another_pipelines_batches(
    rig: PipelineRig, tmp_path: Path
) -> None:
    speaks_pipelines(rig.cluster)
    marker = tmp_path / "slow-batch-started"
    slow = create(rig, "slow", SPEC + SLOW_TRANSFORM.format(marker=marker, slow_s=SLOW_S))
    fast = create(rig, "fast", SPEC)
    rig.start_worker("w1", "--label", "zone=a", "--slots", "8")
    rig.wait_ready()
    # A first batch of `fast` alone: Spark's Python workers are started before the race.
    fast.produce([{"k": "a", "v": 1.0}])
    wait_until(lambda: caught_up(rig, fast), "fast's first batch", FAST_TIMEOUT_S)
    assert offset(rig, slow) == 0

    slow.produce([{"k": "s", "v": 1.0}])
    wait_until(marker.exists, "slow's batch under way", FAST_TIMEOUT_S)
    fast.produce([{"k": k, "v": 2.0} for k in "abcde"])
    wait_until(lambda: caught_up(rig, fast), "fast's batch beside slow's", FAST_TIMEOUT_S)
    # Seen before `slow`'s batch ended: it has merged nothing yet.
    assert offset(rig, slow) == 0
    wait_until(lambda: caught_up(rig, slow), "slow's batch", SLOW_S + FAST_TIMEOUT_S)
