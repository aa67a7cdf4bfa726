"""`ripple rescale` and the lines that show a rescale: the dry run's text, the status line
and the progress `--wait` and `migrations --watch` print, the routing generation in
`ripple status`, and the command's flags and its bounded wait (against a fake client that
answers as the coordinator would)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from ripple import rescale
from ripple.cli import build_parser
from ripple.rescale import dry_run_text, rescale_command, rescale_line, rescale_progress
from ripple.tables import render_status
from shared.clock import FakeClock
from shared.errors import RippleError


def record(phase: str, cuts: int = 0, online: int = 0) -> dict[str, Any]:
    return {
        "generation": 1,
        "partitions": 200,
        "previous": 128,
        "phase": phase,
        "cuts_done": cuts,
        "online": online,
        "by": "admin",
        "started_at_ms": 1_700_000_000_000,
        "updated_at_ms": 1_700_000_001_000,
    }


def status(rescale_record: dict[str, Any] | None, **cluster: Any) -> dict[str, Any]:
    return {
        "node_id": "n1",
        "role": "leader",
        "leader_id": "n1",
        "term": 2,
        "applied_index": 40,
        "stale": False,
        "cluster": {
            "active_workers": 3,
            "total_workers": 3,
            "total_partitions": 200,
            "generation": 9,
            **cluster,
        },
        "migrations_in_flight": 0,
        "partitions_by_status": {"online": 200},
        "finalized_command_set_version": 4,
        "voters": ["n1"],
        "coordinators": [],
        "rescale": rescale_record,
    }


def test_dry_run_text_names_every_number() -> None:
    text = dry_run_text(
        {
            "from": 128,
            "to": 200,
            "generation": 1,
            "moved_fraction": 0.99499,
            "feeders_max": 128,
            "checkpoints_read": 128,
            "partitions_built": 200,
        }
    )
    assert "dry run: 128 -> 200 partitions (routing generation 1); nothing changed" in text
    assert "99.5 %" in text
    assert "checkpoints read: 128" in text
    assert "partitions built: 200, each from at most 128 old partitions" in text


def test_progress_and_status_lines() -> None:
    assert rescale_progress(record("cutting", cuts=3)) == "cutting, cuts 3/128, online 0/200"
    line = rescale_line(record("hosting", cuts=128, online=17))
    assert line.startswith("rescale: 128 -> 200 partitions (routing generation 1) by admin: ")
    assert line.endswith("hosting, cuts 128/128, online 17/200")
    assert rescale_line(record("done", cuts=128, online=200)).endswith("by admin: done")
    assert rescale_line(None) == "rescale: none"
    # A node of 0.4.2 or older spells the phases upper case: its rescale ends all the same.
    assert rescale_line(record("DONE", cuts=128, online=200)).endswith("by admin: done")


def test_status_shows_the_routing_generation_and_the_rescale() -> None:
    text = render_status(
        status(record("moving", cuts=128), routing=[128, 200], routing_generation=1)
    )
    assert "routing generation: 1 (partitions by generation: 128 -> 200)" in text
    assert "rescale: 128 -> 200 partitions" in text and "moving, cuts 128/128" in text
    # A node of an older release sends neither field: the line says so rather than fail.
    old = render_status(status(None))
    assert "routing generation: - (partitions by generation: -)" in old
    assert "rescale: none" in old


def test_the_parser_takes_the_flags() -> None:
    args = build_parser().parse_args(["rescale", "--partitions", "200", "--dry-run"])
    assert (args.partitions, args.dry_run, args.wait) == (200, True, False)
    assert args.wait_s == rescale.RESCALE_WAIT_S_DEFAULT
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rescale"])  # --partitions is required
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rescale", "--partitions", "many"])


class FakeClient:
    """Answers the two calls the command makes, from a script of status answers; each status
    read takes `read_ms` on the client's clock."""

    def __init__(
        self, reply: dict[str, Any], statuses: list[dict[str, Any] | None], read_ms: int = 0
    ) -> None:
        self.reply = reply
        self.statuses = statuses
        self.posts: list[tuple[str, Any]] = []
        self.clock = FakeClock()
        self.read_ms = read_ms
        self.reads = 0

    async def post(self, path: str, json: Any) -> dict[str, Any]:
        self.posts.append((path, json))
        return self.reply

    async def get(self, path: str) -> dict[str, Any]:
        assert path == "/v1/status"
        self.clock.advance(self.read_ms)
        self.reads += 1
        one = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"rescale": one}


def run(argv: list[str], client: FakeClient) -> int:
    args: argparse.Namespace = build_parser().parse_args(["rescale", *argv])
    return asyncio.run(rescale_command(args, client))  # type: ignore[arg-type]


def test_wait_follows_the_phases_until_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rescale, "WAIT_EVERY_S", 0.0)
    phases = [record("cutting", 5), record("moving", 128), record("done", 128, 200)]
    client = FakeClient(record("cutting"), phases)
    assert run(["--partitions", "200", "--wait"], client) == 0
    assert client.posts == [("/v1/admin/rescale", {"partitions": 200, "dry_run": False})]
    out = capsys.readouterr().out
    assert "cutting, cuts 5/128" in out and "moving" in out and "done, cuts 128/128" in out


def test_wait_gives_up_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rescale, "WAIT_EVERY_S", 0.0)
    # Each read takes 20 s of the client's clock: reads start at 0, 20 and 40 s of the 60.
    client = FakeClient(record("cutting"), [record("cutting", 1)], read_ms=20_000)
    assert run(["--partitions", "200", "--wait", "--wait-s", "60"], client) == 1
    assert client.reads == 3
    assert "still not DONE" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--partitions", "200", "--dry-run", "--wait"],
        ["--partitions", "200", "--wait", "--wait-s", "0"],
        ["--partitions", "200", "--wait", "--wait-s", "1e9"],
        ["--partitions", "3", "--pipeline", "orders", "--wait"],
    ],
)
def test_usage_errors_send_nothing(argv: list[str]) -> None:
    client = FakeClient(record("cutting"), [None])
    with pytest.raises(RippleError) as err:
        run(argv, client)
    assert err.value.code == "usage" and client.posts == []


def test_pipeline_names_the_recorded_pipeline_s_route(capsys: pytest.CaptureFixture[str]) -> None:
    described = {"name": "o/x", "state": "active", "spec_version": 1, "past": [], "rescale": None}
    client = FakeClient(described, [None])
    assert run(["--partitions", "3", "--pipeline", "o/x"], client) == 0
    assert client.posts == [("/v1/pipelines/o%2Fx/rescale", {"partitions": 3, "dry_run": False})]
    assert capsys.readouterr().out == "pipeline o/x: active\n"
    # `default` is the cluster's own: the plain route.
    client = FakeClient(record("cutting"), [None])
    assert run(["--partitions", "3", "--pipeline", "default"], client) == 0
    assert client.posts[0][0] == "/v1/admin/rescale"
