"""Building the fault kit's LD_PRELOAD shims: cached by source hash, rebuilt when the source
changes, and a compile error reported with gcc's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.faults.shim import build, merged_env, preloaded


def test_built_once_per_source_version(tmp_path: Path) -> None:
    source = tmp_path / "probe.c"
    source.write_text("int probe(void) { return 1; }\n")
    first = build(source, tmp_path / "cache")
    stamp = first.stat().st_mtime_ns
    assert build(source, tmp_path / "cache") == first
    assert first.stat().st_mtime_ns == stamp  # not compiled again
    source.write_text("int probe(void) { return 2; }\n")
    second = build(source, tmp_path / "cache")
    assert second != first and second.exists()
    assert [p.name for p in (tmp_path / "cache").iterdir() if ".tmp" in p.name] == []


def test_a_compile_error_names_itself(tmp_path: Path) -> None:
    source = tmp_path / "broken.c"
    source.write_text("int broken(void) { return undeclared; }\n")
    with pytest.raises(RuntimeError, match="undeclared"):
        build(source, tmp_path / "cache")


def test_preloaded_goes_first() -> None:
    assert preloaded(Path("/a.so"), {"LD_PRELOAD": "/b.so"}) == "/a.so /b.so"
    assert preloaded(Path("/a.so"), {}) == "/a.so"


def test_a_header_change_rebuilds(tmp_path: Path) -> None:
    (tmp_path / "value.h").write_text("#define VALUE 1\n")
    source = tmp_path / "probe.c"
    source.write_text('#include "value.h"\nint probe(void) { return VALUE; }\n')
    first = build(source, tmp_path / "cache")
    (tmp_path / "value.h").write_text("#define VALUE 2\n")
    assert build(source, tmp_path / "cache") != first


def test_merged_env_keeps_every_shim() -> None:
    disk = {"LD_PRELOAD": "/d.so /base.so", "DISK": "1"}
    clock = {"LD_PRELOAD": "/c.so /base.so", "CLOCK": "2"}
    assert merged_env(disk, clock) == {
        "LD_PRELOAD": "/d.so /base.so /c.so",
        "DISK": "1",
        "CLOCK": "2",
    }
