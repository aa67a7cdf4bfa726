"""`ripple pipelines` without a cluster: the flags become the request the API takes, a
malformed flag is a usage error naming it, and the list and describe answers print as
tables and lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ripple.cli import build_parser
from ripple.pipelines import _create_body, generations_lines, render_pipeline, render_pipelines
from shared.errors import RippleError


def args(tmp_path: Path, *extra: str) -> Any:
    spec = tmp_path / "s.toml"
    spec.write_text("format = 1\n")
    return build_parser().parse_args(["pipelines", "create", "p1", "--spec", str(spec), *extra])


def test_flags_become_the_request(tmp_path: Path) -> None:
    body = _create_body(
        args(tmp_path, "--partitions", "3", "--label", "gpu=true", "--set", "retention_ms=0")
    )
    assert body == {
        "name": "p1",
        "spec_text": "format = 1\n",
        "pool": {"gpu": "true"},
        "settings": {"retention_ms": 0},
        "partitions": 3,
    }
    assert "partitions" not in _create_body(args(tmp_path))  # the cluster's default


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--label", "gpu"], "--label wants KEY=VALUE"),
        (["--label", "a=1", "--label", "a=2"], "--label names a twice"),
        (["--set", "speed=3"], "not a pipeline setting"),
        (["--set", "retention_ms=-1"], "wants an integer"),
    ],
)
def test_a_malformed_flag_is_a_usage_error(tmp_path: Path, extra: list[str], says: str) -> None:
    with pytest.raises(RippleError) as info:
        _create_body(args(tmp_path, *extra))
    assert info.value.code == "usage" and says in info.value.message


def test_a_spec_file_that_cannot_be_read_names_the_flag(tmp_path: Path) -> None:
    a = args(tmp_path)
    a.spec = str(tmp_path / "missing.toml")
    with pytest.raises(RippleError) as info:
        _create_body(a)
    assert info.value.field == "--spec"


VIEW: dict[str, Any] = {
    "name": "orders",
    "incarnation": 2,
    "state": "active",
    "spec_version": 1,
    "partitions": 3,
    "routing_generation": 0,
    "pool": {"zone": "b", "gpu": "true"},
    "purge": False,
    "created_at_ms": 1,
    "updated_at_ms": 2,
    "by": "admin",
}


def test_the_list_and_one_pipeline_print() -> None:
    text = render_pipelines({"stale": True, "pipelines": [VIEW]})
    header, row = text.splitlines()[:2]
    assert header.split() == ["NAME", "STATE", "PARTITIONS", "SPEC", "POOL", "INCARNATION"]
    assert row.split() == ["orders", "active", "3", "1", "gpu=true,zone=b", "2"]
    assert text.endswith("(stale: this node may lag the leader)")
    settings = {"batch_interval_ms": 500, "retention_ms": 0}
    one = render_pipeline({**VIEW, "settings": settings, "spec_sha256": "ab", "spec_text": "x=1"})
    assert one.splitlines()[0] == "pipeline orders (incarnation 2): active"
    assert "pool: gpu=true, zone=b" in one and one.endswith("\nx=1")


def test_token_flags_name_the_produce_role_and_the_producers_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed = build_parser().parse_args(
        ["pipelines", "tokens", "issue", "orders", "--role", "produce"]
    )
    assert parsed.role == "produce"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pipelines", "tokens", "issue", "orders", "--role", "owner"])
    produce = ["produce", "--pipeline", "orders", "--file", "rows.jsonl"]
    assert build_parser().parse_args([*produce, "--token", "rpt_x"]).token == "rpt_x"
    monkeypatch.setenv("RIPPLE_PIPELINE_TOKEN", "rpt_from_env")
    assert build_parser().parse_args(produce).token == "rpt_from_env"
    monkeypatch.delenv("RIPPLE_PIPELINE_TOKEN")
    assert build_parser().parse_args(produce).token is None


RESCALE = {
    "generation": 2,
    "partitions": 5,
    "previous": 3,
    "first_slot": 1048600,
    "phase": "cutting",
    "spec_version": 2,
    "cuts_done": 1,
    "by": "admin",
}


def test_describe_shows_past_generations_and_a_rescale_under_way() -> None:
    past = [{"first_slot": 1048576, "partitions": 2, "routing_generation": 0}]
    p = {**VIEW, "spec_version": 1, "past": past, "rescale": RESCALE}
    assert generations_lines(p) == [
        "past generation 0: 2 partitions, numbers 1048576..1048577",
        "update: 3 -> 5 partitions (routing generation 2, spec version 2) by admin: cutting, "
        "cuts 1/3, numbers 1048600..1048604",
    ]
    done = {**p, "spec_version": 2, "rescale": {**RESCALE, "phase": "done"}}
    assert generations_lines(done)[1] == (
        "rescale: 3 -> 5 partitions (routing generation 2, spec version 2) by admin: done"
    )
    settings = {"batch_interval_ms": 500}
    one = render_pipeline({**p, "settings": settings, "spec_sha256": "ab", "spec_text": "x=1"})
    assert "\npast generation 0: 2 partitions" in one and "\nupdate: 3 -> 5" in one
    assert generations_lines({**VIEW, "past": [], "rescale": None}) == []


def test_rescale_and_update_parse() -> None:
    a = build_parser().parse_args(["pipelines", "rescale", "o", "--partitions", "4"])
    assert (a.action, a.name, a.partitions) == ("rescale", "o", 4)
    u = build_parser().parse_args(["pipelines", "update", "o", "--spec", "s.toml"])
    assert (u.action, u.spec, u.partitions) == ("update", "s.toml", None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pipelines", "rescale", "o"])  # --partitions is required
