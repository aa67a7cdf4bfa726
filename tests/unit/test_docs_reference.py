"""The generated docs pages equal what the code makes of them now (testkit/docs_reference.py):
a setting or a metric added without help, or one removed while the page still names it, or a
benchmark result rewritten without its table, fails here with the diff and the command that
regenerates the pages."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import pytest

from testkit import docs_reference as ref

PAGES = ref.render()  # once: it imports the CLI and scans every product module


@pytest.mark.parametrize("page", sorted(PAGES), ids=str)
def test_the_generated_page_is_current(page: Path) -> None:
    want = PAGES[page]
    have = (ref.ROOT / page).read_text(encoding="utf-8") if (ref.ROOT / page).exists() else ""
    diff = "".join(
        difflib.unified_diff(
            have.splitlines(keepends=True),
            want.splitlines(keepends=True),
            f"{page} (committed)",
            f"{page} (from the code)",
        )
    )
    assert have == want, f"{page} is out of date; run `{ref.REGENERATE}`:\n{diff}"


def test_every_key_and_every_metric_is_on_its_page() -> None:
    from coordinator.config_file import SCALAR_KEYS

    config = (ref.ROOT / ref.CONFIG_PAGE).read_text(encoding="utf-8")
    assert all(f"| `{key}` |" in config for key in SCALAR_KEYS)
    metrics = (ref.ROOT / ref.METRICS_PAGE).read_text(encoding="utf-8")
    names = [m.name for m in ref.metrics()]
    assert len(names) > 50  # the scan found the families, not an empty page that matches
    assert all(f"| `{name}` |" in metrics for name in names)


def test_a_setting_without_a_comment_is_refused() -> None:
    from dataclasses import dataclass

    @dataclass
    class Settings:
        # How long to wait.
        wait_s: float = 1.0
        retries_max: int = 3

    assert ref.field_help(Settings) == {"wait_s": "How long to wait.", "retries_max": ""}
    with pytest.raises(ref.UndocumentedError, match="retries_max"):
        ref._described(Settings, ["wait_s", "retries_max"])

    @dataclass
    class More(Settings):
        # How many at once.
        width_max: int = 2

    # A field declared on a base keeps the comment written there.
    helps = ref._described(More, ["wait_s", "width_max"])
    assert helps["wait_s"] == "How long to wait." and helps["width_max"] == "How many at once."


def test_a_metric_without_help_is_refused(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('Counter("ripple_things", "", registry=r)\n')
    with pytest.raises(ref.UndocumentedError, match="ripple_things has no help"):
        ref._module_metrics("m", module)
    module.write_text('Counter("ripple_things", "Things seen", ["kind"], registry=r)\n')
    [doc] = ref._module_metrics("m", module)
    assert (doc.name, doc.kind, doc.labels) == ("ripple_things_total", "counter", ("kind",))


def test_a_bench_table_is_its_result_file(tmp_path: Path) -> None:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    record = {
        "benchmark": "b",
        "commit": "0123456789abcdef",
        "cores": 2,
        "date": "2026-01-01T00:00:00+00:00",
        "dirty": False,
        "load_1m": 0.5,
        "quick": False,
        "seconds": 12.0,
        "rows": {
            "a/x": {"ops_per_s": 1234.5, "p99_ms": 0.4567},
            "a/y": {"ops_per_s": 10.0},
            "cost/x": {"cpu_s": 3.0},
        },
    }
    (results / "b.json").write_text(json.dumps(record))
    page = "# B\n<!-- results: b -->\nstale\n<!-- end results -->\nafter\n"
    text = ref.with_bench_tables(page, tmp_path)
    assert "stale" not in text and text.endswith("<!-- end results -->\nafter\n")
    assert "| `a/x` | 1,234 | 0.457 |" in text  # ops_per_s, p99_ms: sorted columns
    assert "| `a/y` | 10 | - |" in text
    assert "| case | cpu_s |\n|---|---|\n| `cost/x` | 3 |" in text
    assert ref.with_bench_tables(text, tmp_path) == text


async def test_what_a_worker_and_a_bare_coordinator_export_is_on_the_page(
    tmp_path: Path,
) -> None:
    """The scan is static; these are real registries (a worker's, and a coordinator's before
    any node is attached: its event counters), so a family the scan cannot see fails here
    before it fails test_metrics's clusters."""
    from coordinator.service.metrics import Metrics
    from pipeline.store import LocalStore
    from pipeline.worker import Worker
    from testkit.prom import parse
    from tests.unit.test_pipeline_worker import offline_settings

    documented = {m.name for m in ref.metrics()}
    worker = Worker(offline_settings(tmp_path, "w1"), LocalStore(str(tmp_path / "store")))
    try:
        coordinator = Metrics()
        coordinator.redirects.inc()
        for text in (worker.metrics.render(), coordinator.render()):
            families = {name for name, _ in parse(text.decode())}
            families = {re.sub(r"_created$", "_total", name) for name in families}
            assert families and families <= documented, families - documented
    finally:
        await worker.client.close()
