"""The leader's spec check (coordinator/service/spec_check.py): the owner's transform runs in
a child, bounded in time and memory, and every failure is a refusal naming the field, never
an exception of the coordinator's own and never a child left running."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from coordinator.service.spec_check import SpecChecker, key_of
from shared.errors import RequestError, UnavailableError
from testkit.wait import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "orders.toml"

HEAD = """
format = 1
[schema]
ddl = "customer STRING, amount DECIMAL(12,2)"
key = "customer"
[[aggregations]]
name = "revenue"
fn = "sum"
column = "amount"
"""


def with_transform(source: str, function: str = "transform") -> str:
    return HEAD + f"[transform]\nfunction = {function!r}\nsource = '''\n{source}\n'''\n"


async def refused(checker: SpecChecker, text: str) -> RequestError:
    with pytest.raises(RequestError) as info:
        await checker.check(text)
    assert info.value.code == "invalid"
    return info.value


async def test_a_good_spec_passes_with_its_outputs() -> None:
    summary = await SpecChecker().check(EXAMPLE.read_text())
    assert (summary.key, summary.key_type) == ("customer", "STRING")
    assert summary.outputs[:2] == ("orders", "revenue")


async def test_an_unknown_column_is_named() -> None:
    err = await refused(SpecChecker(), HEAD.replace('column = "amount"', 'column = "price"'))
    assert err.field == "spec_text.aggregations[0].column"
    assert "'price' is not a column" in err.message


async def test_a_non_mergeable_aggregation_is_named() -> None:
    err = await refused(SpecChecker(), HEAD.replace('fn = "sum"', 'fn = "median"'))
    assert err.field == "spec_text.aggregations[0].fn"


async def test_text_that_is_not_toml_is_the_whole_field() -> None:
    err = await refused(SpecChecker(), "this is [not toml")
    assert err.field == "spec_text"


async def test_a_transform_that_does_not_compile() -> None:
    err = await refused(SpecChecker(), with_transform("def transform(df) return df"))
    assert err.field == "spec_text.transform"
    assert "does not compile" in err.message


async def test_a_transform_that_raises_on_import() -> None:
    err = await refused(SpecChecker(), with_transform("raise RuntimeError('no')"))
    assert err.field == "spec_text.transform"
    assert "RuntimeError: no" in err.message


async def test_a_transform_without_its_function() -> None:
    err = await refused(SpecChecker(), with_transform("def other(df):\n    return df"))
    assert err.field == "spec_text.transform"
    assert "defines no 'transform'" in err.message


async def test_a_transform_that_exits_the_interpreter() -> None:
    err = await refused(SpecChecker(), with_transform("import os\nos._exit(3)"))
    assert err.field == "spec_text.transform"
    assert "without an answer (exit status 3)" in err.message


async def test_a_transform_that_prints_does_not_forge_the_answer() -> None:
    source = 'print(\'{"ok": true, "key": "x", "outputs": []}\')\nraise ValueError("bad")'
    err = await refused(SpecChecker(), with_transform(source))
    assert "ValueError: bad" in err.message


async def test_a_transform_that_takes_all_memory_is_refused() -> None:
    checker = SpecChecker(memory_bytes_max=512 * 1024 * 1024)
    err = await refused(checker, with_transform("hog = bytearray(4 * 1024 ** 3)"))
    assert err.field == "spec_text.transform"
    assert "MemoryError" in err.message or "memory" in err.message


async def test_a_transform_that_loops_for_ever_is_killed_in_time() -> None:
    checker = SpecChecker(timeout_s=1.5)
    started = time.monotonic()
    err = await refused(checker, with_transform("while True:\n    pass"))
    assert time.monotonic() - started < 5.0
    assert err.field == "spec_text.transform"
    assert "longer than 1.5 s" in err.message


async def test_the_grandchild_of_a_looping_transform_is_ended(tmp_path: Path) -> None:
    group_file = tmp_path / "group"
    source = (
        "import os, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(group_file)!r}, 'w').write(str(os.getpgid(0)))\n"
        "while True:\n    pass"
    )
    await refused(SpecChecker(timeout_s=2.0), with_transform(source))
    group = int(group_file.read_text())
    assert group != os.getpgid(0)  # the child had a group of its own
    wait_until(lambda: not _group_alive(group), f"process group {group} gone", 10)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


async def test_checks_past_the_bound_are_refused_to_retry() -> None:
    checker = SpecChecker(in_flight_max=1, timeout_s=3.0)
    slow = asyncio.create_task(checker.check(with_transform("while True:\n    pass")))
    await asyncio.sleep(0.2)
    with pytest.raises(UnavailableError) as info:
        await checker.check(HEAD)
    assert info.value.code == "overloaded"
    with pytest.raises(RequestError):
        await slow
    assert (await checker.check(HEAD)).key == "customer"  # the slot is free again


async def test_the_child_sees_none_of_the_node_s_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIPPLE_ADMIN_TOKEN", "do-not-leak")
    source = (
        "import os\n"
        "if 'RIPPLE_ADMIN_TOKEN' in os.environ:\n    raise KeyError('leaked')\n"
        "def transform(df):\n    return df"
    )
    summary = await SpecChecker().check(with_transform(source))
    assert summary.key == "customer"


async def test_an_update_s_refusal_is_named_under_its_own_field() -> None:
    with pytest.raises(RequestError) as info:
        await SpecChecker().check(HEAD.replace('column = "amount"', 'column = "x"'), field="spec")
    assert info.value.field == "spec.aggregations[0].column"


def test_key_of_reads_a_held_spec_without_running_it() -> None:
    # The transform would raise if it ran: key_of reads TOML and DDL only.
    assert key_of(with_transform("raise SystemExit(3)")) == ("customer", "STRING")
    assert key_of(HEAD.replace("customer STRING", "customer BIGINT")) == ("customer", "BIGINT")
    assert key_of("not = [toml") is None
    assert key_of(HEAD.replace('key = "customer"', 'key = "nope"')) is None
