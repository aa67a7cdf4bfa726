"""The chaos load's client threads: one that dies fails the test at `Load.stop`, instead of
leaving the linearizability checks with fewer operations than they claim."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from testkit.cluster import Cluster
from testkit.wait import wait_until
from tests.chaos.harness import Load


class _NoCluster:
    """Enough of a `Cluster` for the load to start, and a failure on its first request."""

    config = SimpleNamespace(total_partitions=2)

    def alive(self) -> list[str]:
        raise RuntimeError("no cluster here")


def test_a_client_that_dies_fails_the_load_at_stop() -> None:
    load = Load(cast(Cluster, _NoCluster()), seed=1, writers=1, readers=0, epoch_readers=0)
    load.start()
    wait_until(lambda: not load.threads[0].alive(), "the writer to die", 10.0, 0.02)

    with pytest.raises(AssertionError, match=r"writer-0 thread failed: RuntimeError\('no cluster"):
        load.stop()
    load.stop()  # again: already stopped, nothing more to say
