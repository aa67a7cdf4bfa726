"""The describe view's `past` and `rescale` (coordinator/service/http/pipeline_routes.py's
`_view`), taken through a rescale's whole life in the pure core: the keys the worker side
reads, the new spec's text only while an update carries it, and the numbers a purge reads
from the view equal to the core's own `numbers_ever` at every step."""

from __future__ import annotations

from typing import Any

from coordinator.core.model import PipelineName
from coordinator.core.pipelines import numbers_ever as core_numbers
from coordinator.core.state import ClusterState
from coordinator.service.http.pipeline_routes import _view
from pipeline.spec.purge import numbers_ever as view_numbers
from tests.unit.test_core_pipeline_rescale import (
    built,
    cluster,
    cut_all,
    finish,
    go,
    online,
    set_up,
    start,
)
from tests.unit.test_core_pipelines import ORDERS, SPEC

RESCALE_KEYS = {
    "generation", "partitions", "previous", "first_slot", "phase", "spec_version",
    "spec_sha256", "spec_text", "cuts_done", "base_epoch", "by", "started_at_ms",
    "updated_at_ms",
}  # fmt: skip


def shown(s: ClusterState) -> dict[str, Any]:
    p = s.pipelines[PipelineName(ORDERS)]
    body = _view(p).model_dump(mode="json")
    # What a purge reads from the view is what the core says the record was ever given.
    assert view_numbers(body) == core_numbers(p)
    return body


def test_an_update_s_life_as_the_view_shows_it() -> None:
    s = cluster()
    set_up(s, partitions=3)
    first = shown(s)
    assert first["past"] == [] and first["rescale"] is None
    new_spec = SPEC.replace('name = "n"', 'name = "orders"', 1)
    assert new_spec != SPEC
    go(s, start(partitions=5, text=new_spec))
    r = shown(s)["rescale"]
    assert set(r) == RESCALE_KEYS
    assert (r["phase"], r["partitions"], r["previous"], r["generation"]) == ("cutting", 5, 3, 1)
    assert (r["spec_version"], r["spec_text"], r["cuts_done"], r["base_epoch"]) == (
        2, new_spec, 0, None
    )  # fmt: skip
    assert r["first_slot"] >= first["first_slot"] + 3 and r["by"] == "ops"
    cut_all(s)
    moving = shown(s)["rescale"]
    assert (moving["phase"], moving["cuts_done"]) == ("moving", 3)
    assert isinstance(moving["base_epoch"], int)
    go(s, built(s))
    online(s, ORDERS)
    go(s, finish(s))
    done = shown(s)
    assert done["rescale"]["phase"] == "done" and done["rescale"]["spec_text"] is None
    assert done["past"] == [
        {"first_slot": first["first_slot"], "partitions": 3, "routing_generation": 0}
    ]
    assert (done["first_slot"], done["partitions"]) == (r["first_slot"], 5)
    assert done["routing_generation"] == 1 and done["spec_version"] == 2
