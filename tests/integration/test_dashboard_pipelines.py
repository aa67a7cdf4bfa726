"""The dashboard's Pipelines panel and per-pipeline view, in headless Chromium, against a
real coordinator at command-set version 5 with scripted workers.

Two recorded pipelines beside `default`: `orders`, whose pool a labelled worker matches
(online, then paused), and `gpu`, whose pool no worker matches (its partitions UNASSIGNED,
with the reason the API gives). The page must list all three with the state and the health
counts the API's describe gives, and clicking one must scope the partition grid and the
migrations to it (its partition count of cells, numbered its own) and show its description;
the choice holds across refreshes, and `default` (chosen, or by itself once the pipeline on
show is dropped) brings back the cluster's own table. It is
skipped only when no Chromium or chromedriver binary is installed (the `browser` fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.integration.test_dashboard import (  # noqa: F401 (browser: a fixture used here)
    Page,
    browser,
    save_full_page,
    screenshot_dir,
)
from tests.integration.test_duties import FAST, all_online
from tests.integration.test_pipelines_api import ORDERS, speaks_pipelines

DEFAULT_PARTITIONS = 4
# Two workers: placement may start with one (FAST waits for three).
SETTINGS = {
    **FAST,
    "total_partitions": DEFAULT_PARTITIONS,
    "min_cluster_size": 1,
    "heartbeat_timeout_s": 60.0,
}
ORDERS_PARTITIONS = 3
GPU_PARTITIONS = 2
SETUP_S = 60.0  # pipelines set up and placed, on a loaded 2-core machine


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("dashboard-pipelines"), nodes=1, **SETTINGS)
    c.start_all()
    w = ScriptedWorkers(c)
    try:
        c.ready(60)
        w.start("w1")  # no profile: `default`'s partitions only
        w.start("w2", "--label", "zone=a", "--slots", "8")
        wait_until(lambda: all_online(c), "default online", SETUP_S)
        speaks_pipelines(c)
        for name, pool, count in (
            ("orders", {"zone": "a"}, ORDERS_PARTITIONS),
            ("gpu", {"gpu": "true"}, GPU_PARTITIONS),
        ):
            body = {"name": name, "spec_text": ORDERS, "partitions": count, "pool": pool}
            r = call("POST", c.url(c.leader()) + "/v1/pipelines", body, token=ADMIN)
            assert r.status == 202, r.body
        wait_until(
            lambda: described(c, "orders")["partition_states"]["online"] == ORDERS_PARTITIONS,
            "orders online on w2",
            SETUP_S,
        )
        paused = call("POST", c.url(c.leader()) + "/v1/pipelines/orders/pause", token=ADMIN)
        assert paused.status == 200 and paused.body["state"] == "paused", paused.body
        wait_until(lambda: described(c, "gpu")["state"] == "active", "gpu set up", SETUP_S)
        yield c
    finally:
        w.stop_all()
        c.stop_all()


def described(c: Cluster, name: str) -> dict[str, Any]:
    r = c.get(c.leader(), f"/v1/pipelines/{name}?consistent=true")
    assert r.status == 200, r.body
    return r.body  # type: ignore[no-any-return]


def rows(page: Page) -> dict[str, dict[str, str]]:
    """The Pipelines table as the page shows it: name -> state, partitions, health, pool and
    the health cell's counts (data-up, data-waiting), and whether it is the one shown."""
    found = page.d.execute_script(
        "return [...document.querySelectorAll('#pipelines-table tbody tr[data-pipeline]')]"
        ".map(r => [r.dataset.pipeline, [...r.cells].map(c => c.innerText.trim()),"
        " r.cells[3].dataset.up || '', r.cells[3].dataset.waiting || '',"
        " r.classList.contains('chosen')]);"
    )
    return {
        name: {
            "state": cells[1],
            "partitions": cells[2],
            "health": cells[3],
            "pool": cells[4],
            "up": up,
            "waiting": waiting,
            "chosen": "yes" if chosen else "",
        }
        for name, cells, up, waiting, chosen in found
    }


def choose(page: Page, name: str, partitions: int) -> None:
    """Click `name` in the Pipelines panel; wait until the grid shows its partitions."""
    page.click(f"#pipelines-table tr[data-pipeline='{name}'] button.link")
    page.wait(
        lambda: (
            rows(page).get(name, {}).get("chosen") == "yes"
            and page.count("#grid .cell") == partitions
        ),
        f"{name}'s {partitions} partitions",
    )


def refreshed_twice(page: Page) -> None:
    """Two refreshes of the page after this call (its "updated" line changed twice)."""
    for _ in range(2):
        before = page.text("#updated")

        def changed(before: str = before) -> bool:
            return page.text("#updated") != before

        page.wait(changed, "a refresh")


def test_the_pipelines_panel_and_one_pipelines_view(
    env: Cluster,
    browser: Any,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    c = env
    page = Page(browser)
    browser.get(c.url(c.leader()) + "/ui")
    try:
        walk(c, page, screenshot_dir(tmp_path))
    except Exception:
        browser.save_screenshot(str(screenshot_dir(tmp_path) / "dashboard-pipelines-failure.png"))
        print("page text at failure:\n", page.text("body"))
        raise


def walk(c: Cluster, page: Page, shots: Path) -> None:
    page.wait(lambda: set(rows(page)) == {"default", "orders", "gpu"}, "three pipelines")
    order = page.d.execute_script(
        "return [...document.querySelectorAll('#pipelines-table tr[data-pipeline]')]"
        ".map(r => r.dataset.pipeline);"
    )
    assert order == ["default", "gpu", "orders"], order  # `default` first, then by name

    # Health is the API's describe, as it is: compare once the page has the same answers.
    api = {name: described(c, name) for name in ("default", "orders", "gpu")}
    assert api["gpu"]["partition_states"]["unassigned"] == GPU_PARTITIONS, api["gpu"]
    assert api["gpu"]["unplaceable"], api["gpu"]
    page.wait(
        lambda: all(rows(page)[n]["up"] == str(api[n]["partition_states"]["online"]) for n in api),
        "the API's health counts",
    )
    shown = rows(page)
    assert shown["default"]["state"] == "ACTIVE", shown
    assert shown["default"]["health"].startswith(
        f"{DEFAULT_PARTITIONS} / {DEFAULT_PARTITIONS} online"
    ), shown
    assert shown["default"]["waiting"] == "0" and shown["default"]["pool"] == "every worker"
    assert shown["orders"]["state"] == "PAUSED", shown
    assert shown["orders"]["partitions"] == str(ORDERS_PARTITIONS), shown
    orders_up = api["orders"]["partition_states"]["online"]
    assert shown["orders"]["health"].startswith(f"{orders_up} / {ORDERS_PARTITIONS} online")
    assert shown["orders"]["pool"] == "zone=a", shown
    assert shown["gpu"]["state"] == "ACTIVE", shown
    assert shown["gpu"]["up"] == "0" and shown["gpu"]["waiting"] == str(GPU_PARTITIONS), shown
    gpu_health = shown["gpu"]["health"]
    assert f"0 / {GPU_PARTITIONS} online" in gpu_health, gpu_health
    assert f"{GPU_PARTITIONS} unassigned" in gpu_health, gpu_health
    assert api["gpu"]["unplaceable"] in gpu_health, gpu_health  # the API's reason, in view
    assert shown["default"]["chosen"] == "yes" and page.count("#grid .cell") == DEFAULT_PARTITIONS
    assert not page.d.find_element("css selector", "#partitions-pipeline").is_displayed()

    # One pipeline's view: its partitions only, numbered its own, and its description.
    choose(page, "orders", ORDERS_PARTITIONS)
    cells = page.cells()
    assert sorted(cells) == list(range(ORDERS_PARTITIONS)), cells
    assert {v["owner"] for v in cells.values()} == {"w2"}, cells  # the pool's one worker
    assert page.text("#partitions-pipeline") == "pipeline orders"
    assert page.text("#migrations-pipeline") == "pipeline orders"
    detail = page.text("#pipeline-description")
    for expected in (
        "Spec version\n1",
        "Pool\nzone=a",
        f"{ORDERS_PARTITIONS} · table numbers from {api['orders']['first_slot']:,}",
        f"Batch interval\n{api['orders']['settings']['batch_interval_ms']:,} ms",
        api["orders"]["spec_sha256"][:16],
    ):
        assert expected in detail, (expected, detail)
    save_full_page(page.d, shots / "dashboard-pipelines.png")
    refreshed_twice(page)  # the choice holds across the refresh loop
    assert rows(page)["orders"]["chosen"] == "yes" and sorted(page.cells()) == sorted(cells)

    choose(page, "gpu", GPU_PARTITIONS)
    statuses = {v["status"] for v in page.cells().values()}
    assert statuses == {"unassigned"}, statuses
    assert "Pool\ngpu=true" in page.text("#pipeline-description")

    # `default` again: the cluster's own table, as a page without records shows it.
    choose(page, "default", DEFAULT_PARTITIONS)
    assert {v["owner"] for v in page.cells().values()} <= {"w1", "w2"}
    assert not page.d.find_element("css selector", "#partitions-pipeline").is_displayed()
    assert "cluster's own partition table" in page.text("#pipeline-detail")

    # The pipeline on show dropped: the page goes back to `default` by itself.
    choose(page, "gpu", GPU_PARTITIONS)
    dropped = call("DELETE", c.url(c.leader()) + "/v1/pipelines/gpu", token=ADMIN)
    assert dropped.status == 202, dropped.body
    page.wait(
        lambda: (
            "gpu" not in rows(page)
            and rows(page)["default"]["chosen"] == "yes"
            and page.count("#grid .cell") == DEFAULT_PARTITIONS
        ),
        "default again once gpu is gone",
    )
    assert not page.d.find_element("css selector", "#partitions-pipeline").is_displayed()
