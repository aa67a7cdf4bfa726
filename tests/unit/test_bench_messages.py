"""The message codec benchmark (bench/messages.py) measures like against like: every
candidate accepts the representative messages and refuses the same malformed one, and a
quick run gives a figure for each."""

from __future__ import annotations

import json

import pytest

from bench import messages
from shared.messages.session import HeartbeatRequest


def test_the_candidates_decode_the_same_heartbeat_and_refuse_the_same_bad_one() -> None:
    raw = messages._heartbeat_bytes()
    by_hand = messages._dataclass_heartbeat(raw)
    model = HeartbeatRequest.model_validate_json(raw)
    assert by_hand[0] == model.incarnation and len(by_hand[2]) == len(model.partitions)
    assert {k: r.offset for k, r in by_hand[2].items()} == {
        k: r.offset for k, r in model.partitions.items()
    }
    bad = json.loads(raw)
    bad["partitions"]["0"]["epoch"] = True  # a bool is not an int to any of them
    with pytest.raises(ValueError):
        messages._dataclass_heartbeat(json.dumps(bad).encode())
    with pytest.raises(ValueError):
        HeartbeatRequest.model_validate_json(json.dumps(bad))


def test_a_quick_run_measures_every_candidate() -> None:
    rows = messages.run(quick=True)
    for name in (
        "heartbeat_pydantic",
        "heartbeat_dataclasses",
        "host_pydantic",
        "host_dataclasses",
    ):
        assert rows[name]["decode_us"] > 0 and rows[name]["encode_us"] > 0
