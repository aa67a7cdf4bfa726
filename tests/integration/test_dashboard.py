"""The dashboard at /ui, against three real coordinator processes and scripted workers.

`test_ui_files_and_headers` and `test_cross_origin_rules` check what every node serves
(files, redirect, CSP, the CORS rules the page relies on) over plain HTTP.
`test_dashboard_in_a_browser` drives Debian's headless Chromium through Selenium +
chromedriver on a follower's page and checks what a person sees: nodes, workers, the
partition grid, lag, input rates (a worker's load is its summed rate once every partition of
it reports one, else its count) and failing batches (whose error text is markup, shown as
text), a
partition's timeline, read-only without the admin token, and with it a previewed reassign,
an abort and a drain, each seen in the page and confirmed through the API; then a kill -9 of
the leader seen from the follower's page, and the new leader's own page. It saves
screenshots (RIPPLE_SCREENSHOT_DIR, else the test's tmp dir). Single-node clusters show the
no-store warning, the maintenance banner and the Rescale panel (a rescale started through the
API, seen in its cutting phase). It is skipped only when no Chromium or chromedriver binary is
installed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from coordinator.service.dashboard import UI_FILES
from coordinator.service.dashboard_enums import enums_document
from shared.ports import free_ports
from testkit.cluster import ADMIN, Cluster
from testkit.http import call
from testkit.scripted_workers import ScriptedWorkers
from testkit.wait import wait_until
from tests.integration.test_duties import FAST, all_online, migrations, table

T = TypeVar("T")

PARTITIONS = 128
SETTINGS = {
    **FAST,
    "total_partitions": PARTITIONS,
    # Long: a worker slowed down by a loaded machine is never declared dead mid-test.
    "heartbeat_timeout_s": 60.0,
    # The page's membership change in flight: a node that never catches up fails this soon.
    "membership_catch_up_timeout_s": 12.0,
}
UI_WAIT_S = 45.0  # what the page must show, on a loaded 2-core machine
PAGE_LOAD_S = 30.0
WINDOW = (1440, 1000)

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def browser_binaries() -> tuple[str, str] | None:
    chromium = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        return None
    return chromium, driver


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, ScriptedWorkers]]:
    c = Cluster(tmp_path_factory.mktemp("dashboard"), **SETTINGS)
    c.start_all()
    w = ScriptedWorkers(c)
    try:
        c.ready(60)
        for wid in ("w1", "w2", "w3"):
            w.start(wid)
        wait_until(lambda: all_online(c, {"w1", "w2", "w3"}), "all online", 60)
        yield c, w
    finally:
        w.stop_all()
        c.stop_all()


def progress(
    w: ScriptedWorkers,
    wid: str,
    *,
    lag_records: int,
    failing: dict[int, str],
    rate: float | None = None,
) -> None:
    """Make a scripted worker's heartbeats report lag, failing batches and input rates."""
    failing_text = {str(p): e for p, e in failing.items()}
    r = call(
        "POST",
        f"http://127.0.0.1:{w.ports[wid]}/test/progress",
        {"lag_records": lag_records, "failing": failing_text, "rate": rate},
    )
    assert r.status == 200, r


def fmt(n: int) -> str:
    """A count as the page writes it (en-US grouping)."""
    return f"{n:,}"


def follower(c: Cluster) -> str:
    leader = c.leader()
    return next(s.id for s in c.specs if s.id != leader)


# -- plain HTTP --------------------------------------------------------------------------------


def test_ui_files_and_headers(env: tuple[Cluster, ScriptedWorkers]) -> None:
    c, _ = env
    base = c.url(follower(c))
    root = call("GET", base + "/")
    assert root.status == 302 and root.headers["Location"] == "/ui"

    page = call("GET", base + "/ui")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert '<script type="module" src="/ui/app.js">' in page.body
    csp = page.headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["default-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert set(directives["connect-src"].split()) == {"'self'", *(s.url for s in c.specs)}
    assert page.headers["X-Content-Type-Options"] == "nosniff"

    for name, kind, marker in (
        ("app.js", "text/javascript", "import"),
        ("dom.js", "text/javascript", "textContent"),
        ("style.css", "text/css", ".cell"),
        ("favicon.svg", "image/svg+xml", "<svg"),
        ("enums.json", "application/json", "RescalePhase"),
    ):
        r = call("GET", f"{base}/ui/{name}")
        assert r.status == 200, name
        assert r.headers["Content-Type"].startswith(kind), (name, r.headers)
        assert marker in (r.body if isinstance(r.body, str) else json.dumps(r.body))
        assert "Content-Security-Policy" in r.headers
    # The state names the page uses are the core's, as this node built them.
    assert call("GET", base + "/ui/enums.json").body == enums_document()
    # The page never builds HTML from strings: every value goes in as text.
    for name, kind in UI_FILES.items():
        if kind == "text/javascript":
            js = call("GET", f"{base}/ui/{name}").body
            assert "innerHTML" not in js and "insertAdjacentHTML" not in js, name
            assert "eval(" not in js, name

    missing = call("GET", base + "/ui/secrets.txt")
    assert missing.status == 404 and missing.body["error"] == "not_found"
    traversal = call("GET", base + "/ui/..%2fapi.py")
    assert traversal.status == 404

    # Health lists every node, so the page can reach the others.
    health = call("GET", base + "/v1/health").body
    assert {(n["id"], n["url"]) for n in health["nodes"]} == {(s.id, s.url) for s in c.specs}


def test_cross_origin_rules(env: tuple[Cluster, ScriptedWorkers]) -> None:
    c, _ = env
    leader = c.leader()
    sibling = c.url(follower(c))
    target = c.url(leader) + "/v1/admin/reassign"
    pre = call(
        "OPTIONS",
        target,
        headers={"Origin": sibling, "Access-Control-Request-Method": "POST"},
    )
    assert pre.status == 204
    assert pre.headers["Access-Control-Allow-Origin"] == sibling
    assert "Authorization" in pre.headers["Access-Control-Allow-Headers"]
    stranger = call(
        "OPTIONS",
        target,
        headers={"Origin": "http://attacker.invalid", "Access-Control-Request-Method": "POST"},
    )
    assert stranger.status == 403 and stranger.body["error"] == "forbidden"
    assert "Access-Control-Allow-Origin" not in stranger.headers
    odd = call(
        "OPTIONS", target, headers={"Origin": sibling, "Access-Control-Request-Method": "PUT"}
    )
    assert odd.status == 405
    get_only = call(
        "OPTIONS",
        c.url(leader) + "/v1/health",
        headers={"Origin": sibling, "Access-Control-Request-Method": "POST"},
    )
    assert get_only.status == 405, get_only  # /v1/health takes no POST
    # A plain OPTIONS (not a preflight) says which methods the route takes.
    plain = call("OPTIONS", target)
    assert plain.status == 204 and plain.headers["Allow"] == "OPTIONS, POST"
    assert "Access-Control-Allow-Origin" not in plain.headers

    read = call("GET", c.url(leader) + "/v1/health", headers={"Origin": sibling})
    assert read.headers["Access-Control-Allow-Origin"] == sibling
    assert "Origin" in read.headers["Vary"]
    foreign = call("GET", c.url(leader) + "/v1/health", headers={"Origin": "http://x.invalid"})
    assert foreign.status == 200 and "Access-Control-Allow-Origin" not in foreign.headers
    # The preflight route answers OPTIONS only: the API's own methods are untouched.
    assert call("GET", c.url(leader) + "/v1/nothing-here").status == 404


# -- in a browser ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    found = browser_binaries()
    if found is None:
        pytest.skip(
            "no Chromium + chromedriver binary on PATH "
            f"(looked for {', '.join(CHROMIUM_NAMES)} and chromedriver; "
            "Debian: apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = found
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver_path), options=opts)
    d.set_page_load_timeout(PAGE_LOAD_S)
    try:
        yield d
    finally:
        d.quit()


def screenshot_dir(tmp_path: Path) -> Path:
    out = Path(os.environ.get("RIPPLE_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def save_full_page(d: Any, path: Path) -> None:
    """A screenshot of the whole page, not just the window."""
    d.execute_script("window.scrollTo(0, 0)")
    height = int(d.execute_script("return document.documentElement.scrollHeight"))
    d.set_window_size(WINDOW[0], max(WINDOW[1], height + 140))
    d.save_screenshot(str(path))
    d.set_window_size(*WINDOW)
    assert path.stat().st_size > 10_000, "screenshot is empty"


class Page:
    """What a person sees on the page. Reads run as one script each, so they are atomic:
    the page rebuilds parts of itself on every refresh, and an element handle held across
    a refresh would go stale."""

    def __init__(self, driver: Any) -> None:
        self.d = driver

    def wait(self, pred: Callable[[], T | None], what: str, timeout_s: float = UI_WAIT_S) -> T:
        return wait_until(pred, f"the page to show {what}", timeout_s, every_s=0.2)

    def text(self, css: str) -> str:
        """The visible text of every element matching `css`, one per line."""
        return str(
            self.d.execute_script(
                "return [...document.querySelectorAll(arguments[0])]"
                ".map(e => e.innerText).join('\\n');",
                css,
            )
        )

    def count(self, css: str) -> int:
        return int(
            self.d.execute_script("return document.querySelectorAll(arguments[0]).length;", css)
        )

    def visible_buttons(self) -> list[str]:
        return list(
            self.d.execute_script(
                "return [...document.querySelectorAll('button')]"
                ".filter(b => b.offsetParent !== null).map(b => b.innerText.trim());"
            )
        )

    def cells(self) -> dict[int, dict[str, str]]:
        rows = self.d.execute_script(
            "return [...document.querySelectorAll('#grid .cell')].map(c => [c.dataset.partition,"
            " c.dataset.owner, c.dataset.status, c.dataset.epoch, c.innerText, c.className]);"
        )
        return {
            int(p): {"owner": o, "status": s, "epoch": e, "text": t, "class": k}
            for p, o, s, e, t, k in rows
        }

    def worker_row(self, wid: str) -> str:
        return self.text(f"#workers-table tr[data-worker='{wid}']")

    def click(self, css: str) -> None:
        """Click the one element matching `css`; if a refresh replaced it meanwhile, find
        it again and retry."""
        from selenium.common.exceptions import StaleElementReferenceException

        def attempt() -> bool:
            found = self.d.find_elements("css selector", css)
            assert len(found) == 1, (css, len(found))
            try:
                found[0].click()
            except StaleElementReferenceException:
                return False
            return True

        self.wait(attempt, f"{css} to take a click", 10.0)

    def type_into(self, css: str, text: str) -> None:
        field = self.d.find_element("css selector", css)  # static: never rebuilt
        field.clear()
        field.send_keys(text)

    def choose(self, css: str, value: str) -> None:
        self.d.execute_script(
            "const s = document.querySelector(arguments[0]); s.value = arguments[1];"
            "s.dispatchEvent(new Event('change'));",
            css,
            value,
        )

    def admin_controls(self) -> list[str]:
        names = ("Drain", "Abort", "Plan balance…", "Preview move")
        return [b for b in self.visible_buttons() if b in names]


def test_dashboard_in_a_browser(
    env: tuple[Cluster, ScriptedWorkers], browser: Any, tmp_path: Path
) -> None:
    shots = screenshot_dir(tmp_path)
    try:
        walk_through(env, browser, shots)
    except Exception:
        # What the page showed when it went wrong: the first thing to look at.
        browser.save_screenshot(str(shots / "dashboard-failure.png"))
        print("page text at failure:\n", Page(browser).text("body"))
        raise


def test_a_cluster_without_a_store_says_so_in_the_page(browser: Any, tmp_path: Path) -> None:
    """Without `store` every checkpoint is fenced: the page says so, in view, on every node."""
    c = Cluster(tmp_path, nodes=1, store="")
    c.start_all()
    try:
        leader = c.ready()
        page = Page(browser)
        browser.get(c.url(leader) + "/ui")
        page.wait(lambda: "sets no store" in page.text("#cluster-warnings"), "the warning")
        shown = page.text("#cluster-warnings")
        assert "every checkpoint is fenced" in shown and "--store" in shown, shown
        save_full_page(browser, screenshot_dir(tmp_path) / "dashboard-no-store.png")
    finally:
        c.stop_all()


def test_maintenance_mode_shows_in_the_page(browser: Any, tmp_path: Path) -> None:
    """Maintenance mode on: a banner says who, why and what it means; off: it goes."""
    c = Cluster(tmp_path, nodes=1)
    c.start_all()
    try:
        leader = c.ready()
        page = Page(browser)
        browser.get(c.url(leader) + "/ui")
        page.wait(lambda: page.count("#nodes-table tbody tr[data-node]") == 1, "the node")
        assert not browser.find_element("css selector", "#maintenance").is_displayed()

        def switch(body: dict[str, Any]) -> bool:
            path = "/v1/admin/maintenance/" + ("on" if body["on"] else "off")
            r = c.write_via_any(path, {k: v for k, v in body.items() if k != "on"}, token=ADMIN)
            assert r.status in (200, 503), r  # 503: version 3 not finalized yet
            return r.status == 200

        wait_until(lambda: switch({"on": True, "reason": "rack 3 kernel"}), "on", 20)
        page.wait(lambda: "rack 3 kernel" in page.text("#maintenance"), "the banner")
        shown = page.text("#maintenance")
        assert "Maintenance mode on" in shown and "by admin" in shown, shown
        assert "no automatic balance moves" in shown and "until turned off" in shown, shown
        save_full_page(browser, screenshot_dir(tmp_path) / "dashboard-maintenance.png")
        assert switch({"on": False})
        page.wait(
            lambda: not browser.find_element("css selector", "#maintenance").is_displayed(),
            "the banner gone",
        )
    finally:
        c.stop_all()


def test_a_rescale_shows_in_the_page(browser: Any, tmp_path: Path) -> None:
    """The Rescale panel: the routing generation and "no rescale yet", then a started
    rescale's counts, its phase among the four and its cuts and online counts."""
    c = Cluster(tmp_path, nodes=1, total_partitions=8)
    c.start_all()
    try:
        leader = c.ready()
        page = Page(browser)
        browser.get(c.url(leader) + "/ui")
        page.wait(lambda: "No rescale yet: 8 partitions" in page.text("#rescale"), "no rescale")
        assert page.text("#rescale-generation") == "routing generation 0"

        def start() -> bool:
            r = c.write_via_any("/v1/admin/rescale", {"partitions": 12}, token=ADMIN)
            assert r.status in (202, 503), r  # 503: version 4 not finalized yet
            return r.status == 202

        wait_until(start, "the rescale started", 20)
        page.wait(lambda: "8 → 12 partitions" in page.text("#rescale"), "the rescale")
        shown = page.text("#rescale")
        assert "(routing generation 1) by admin" in shown, shown
        assert "cuts 0 / 8" in shown and "online 0 / 12" in shown, shown
        phase = browser.execute_script("return document.querySelector('#rescale').dataset.phase")
        assert phase == "cutting"
        now = page.text("#rescale .step-now")
        assert now.strip().lower() == "cutting", now
        save_full_page(browser, screenshot_dir(tmp_path) / "dashboard-rescale.png")
    finally:
        c.stop_all()


def walk_through(env: tuple[Cluster, ScriptedWorkers], browser: Any, shots: Path) -> None:
    c, w = env
    page = Page(browser)
    home = follower(c)
    leader = c.leader()
    browser.get(c.url(home) + "/")  # the redirect to /ui, as a person types the address

    # -- the cluster, as the page shows it, read from a follower -------------------------------
    page.wait(lambda: page.count("#nodes-table tbody tr[data-node]") == 3, "three nodes")
    page.wait(lambda: "Nodes up\n3 / 3" in page.text("#stats"), "three nodes answering")
    nodes = page.text("#nodes-table tbody")
    assert nodes.count("leader") >= 1 and nodes.count("follower") == 2, nodes
    assert f"served by {home} (follower)" in page.text("#served-by")
    # Why the page sends admin writes to the leader's URL itself: a browser follows the
    # follower's 307 with method and body, but drops Authorization on the way to another
    # origin, so the leader answers 401 (docs/dashboard.md says so).
    followed = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/v1/admin/reassign', {method: 'POST', headers: {Authorization: 'Bearer ' +"
        " arguments[0], 'Content-Type': 'application/json'}, body: JSON.stringify("
        "{strategy: 'balance', dry_run: true})}).then(r => done([r.status, r.redirected, r.url]),"
        " e => done([0, false, String(e)]));",
        ADMIN,
    )
    assert followed == [401, True, c.url(leader) + "/v1/admin/reassign"], followed
    leader_row = page.text(f"#nodes-table tr[data-node='{leader}']")
    assert "leader" in leader_row
    term = str(c.health(leader)["term"])  # type: ignore[index]
    assert term in leader_row.split(), leader_row
    stats = page.text("#stats")
    assert f"Leader\n{leader}" in stats, stats
    # The voters as the leader's log says them, and the cluster id.
    page.wait(lambda: "voters: n1, n2, n3" in page.text("#nodes-note"), "the voters")
    assert "cluster id" in page.text("#nodes-note")
    assert page.text("#cluster-warnings") == ""  # a cluster with a store: nothing to fix
    # A membership change in flight: an addition whose node never answers (nothing listens
    # at its Raft port) catches up for membership_catch_up_timeout_s, then fails.
    ghost = {"id": "n9", "raft": f"127.0.0.1:{free_ports(1)[0]}", "http": "127.0.0.1:1"}
    started = call("POST", c.url(leader) + "/v1/admin/nodes", ghost, token=ADMIN)
    assert started.status == 202, started.body
    page.wait(
        lambda: "change in flight: add n9 (catching_up)" in page.text("#nodes-note"),
        "the change in flight",
    )
    assert "catching up: n9" in page.text("#nodes-note")
    page.wait(lambda: "last change: add n9 failed" in page.text("#nodes-note"), "its end")
    assert "voters: n1, n2, n3" in page.text("#nodes-note")

    page.wait(lambda: all("active" in page.worker_row(x) for x in ("w1", "w2", "w3")), "workers")
    assert "3 active of 3" in page.text("#workers-count")
    # Liveness comes from the leader even though a follower served the page.
    page.wait(lambda: all("alive" in page.worker_row(x) for x in ("w1", "w2", "w3")), "liveness")

    api = {p["partition"]: p for p in table(c)}
    grid = page.wait(lambda: page.cells() if len(page.cells()) == PARTITIONS else None, "grid")
    assert {p: (g["owner"], g["status"]) for p, g in grid.items()} == {
        p: (x["owner"], x["status"]) for p, x in api.items()
    }
    assert grid[5]["text"].split() == ["5", f"e{api[5]['epoch']}"]
    counts = " ".join(page.text("#legend").split())
    for wid in ("w1", "w2", "w3"):
        owned = sum(1 for x in api.values() if x["owner"] == wid)
        assert f"{wid} {owned}" in counts, counts

    # -- pipeline lag and failing batches, as the workers report them -------------------------
    # Leader-only figures, shown on a follower's page too. The error text is the worker's own
    # words: it must reach the page as text, never as markup.
    lagging = "w3"
    owned3 = sorted(n for n, x in api.items() if x["owner"] == lagging)
    bad = owned3[0]
    # No rate reported yet: a worker's load is its partition count, labelled as one.
    assert f"{len(owned3)} (count)" in page.worker_row(lagging), page.worker_row(lagging)
    hostile = '<img src=x onerror="window.__xss=1">batch failed'
    progress(w, lagging, lag_records=25, failing={bad: hostile}, rate=12.5)
    page.wait(
        lambda: fmt(25 * len(owned3)) in page.worker_row(lagging).split(),
        f"{lagging}'s lag ({25 * len(owned3)} records)",
    )
    page.wait(lambda: "1 failing" in page.worker_row(lagging), f"{lagging}'s failing partition")
    # Its load is now its partitions' summed input rate, and each partition shows its own.
    summed = f"{12.5 * len(owned3):,.1f}".removesuffix(".0") + "/s"
    page.wait(lambda: summed in page.worker_row(lagging).split(), f"{lagging}'s rate {summed}")
    assert "(count)" in page.worker_row("w1"), page.worker_row("w1")
    rates = {n: x.get("rate_per_s") for n, x in ((x["partition"], x) for x in table(c))}
    assert all(rates[n] == 12.5 for n in owned3), rates
    assert all(r is None for n, r in rates.items() if n not in owned3), rates
    listed = c.get(c.leader(), "/v1/workers").body["workers"]
    by_worker = {x["worker_id"]: x.get("rate_per_s") for x in listed}
    assert by_worker == {"w1": None, "w2": None, lagging: 12.5 * len(owned3)}, by_worker
    # The grid and the workers table refresh from separate reads: wait for the grid's too.
    page.wait(
        lambda: (
            "12.5/s"
            in browser.execute_script(
                f"return document.querySelector(\"#grid .cell[data-partition='{bad}']\").title"
            )
        ),
        f"partition {bad}'s rate in its grid cell's title",
    )
    page.wait(lambda: "failing" in page.cells()[bad]["class"], f"partition {bad} marked failing")
    lag_panel = page.text("#lag")
    assert hostile in lag_panel, lag_panel
    assert f"{fmt(25 * len(owned3))} records · largest 25" in lag_panel, lag_panel
    assert page.count("#lag img, #detail img") == 0
    assert browser.execute_script("return window.__xss") is None
    realistic = (
        "Py4JJavaError: An error occurred while calling o412.collectToPython: "
        "java.io.FileNotFoundException: segment 000000000420.parquet"
    )
    progress(w, lagging, lag_records=25, failing={bad: realistic}, rate=12.5)
    page.wait(lambda: realistic in page.text("#lag"), "the new error text")

    # -- read-only without a token -------------------------------------------------------------
    assert page.text("#admin-state") == "read-only"
    assert page.admin_controls() == []

    # -- a partition's timeline ----------------------------------------------------------------
    p = 7
    owner = api[p]["owner"]
    page.click(f"#grid .cell[data-partition='{p}']")
    page.wait(lambda: "why is it here" in page.text("#detail").lower(), "the timeline")
    page.wait(lambda: "assigned" in page.text("#detail .timeline"), "the first assignment")
    assert page.text("#detail-title") == str(p)
    assert f"{owner} since" in page.text("#detail .why")
    # Partition 7's input rate, as its owner reports it (w3 alone reports rates).
    rate_text = "12.5/s" if owner == lagging else "not reported"
    page.wait(lambda: rate_text in page.text("#detail .kv"), f"partition {p}'s rate")
    assert page.count("#move-preview") == 0  # no write control while read-only

    # -- a wrong token stays read-only ---------------------------------------------------------
    page.type_into("#admin-token", "not-the-admin-token-000")
    page.click("#admin-unlock")
    page.wait(lambda: "not accepted" in page.text("#banner"), "the token refused")
    assert page.text("#admin-state") == "read-only"
    assert browser.execute_script("return sessionStorage.getItem('ripple.adminToken')") is None

    # -- the admin token unlocks writes --------------------------------------------------------
    page.type_into("#admin-token", ADMIN)
    page.click("#admin-unlock")
    page.wait(lambda: page.text("#admin-state") == "admin", "admin mode")
    page.wait(lambda: page.visible_buttons().count("Drain") == 3, "drain buttons")

    # -- reassign: preview (changes nothing), then apply ---------------------------------------
    target = next(x for x in ("w1", "w2", "w3") if x != owner)
    page.wait(lambda: page.count("#move-target option") == 2, "the move form")
    page.choose("#move-target", target)
    page.click("#move-preview")
    page.wait(lambda: "Dry run" in page.text("#detail-admin"), "the dry-run plan")
    assert f"partition {p}: {owner} → {target}" in page.text("#plan"), page.text("#plan")
    assert c.get(leader, f"/v1/partitions/{p}?consistent=true").body["owner"] == owner
    assert migrations(c)["migrations"] == []
    page.click("#plan-apply")
    page.wait(lambda: page.cells()[p]["owner"] == target, f"partition {p} on {target}")
    page.wait(lambda: page.cells()[p]["status"] == "online", f"partition {p} online again")
    assert c.get(leader, f"/v1/partitions/{p}?consistent=true").body["owner"] == target
    page.wait(lambda: "migration" in page.text("#detail .timeline"), "the move in the timeline")
    page.wait(lambda: f"{target} since" in page.text("#detail .why"), "why it is here now")
    assert f"(from {owner})" in page.text("#detail .why")

    # -- abort: a worker that cannot release keeps its migration RELEASING; abort it --------
    # The target first answers its warm calls "still loading", so the move shows WARMING and
    # the warm-up in flight until the hold is lifted.
    quiet = next(x for x in ("w1", "w2", "w3") if x != target)
    q = next(n for n, x in sorted(api.items()) if x["owner"] == quiet and n != p)
    refuse = f"http://127.0.0.1:{w.ports[quiet]}/test/refuse-release"
    assert call("POST", refuse, {"refuse": True}).status == 200
    hold = f"http://127.0.0.1:{w.ports[target]}/test/warm-hold"
    assert call("POST", hold, {"hold": True}).status == 200
    page.click(f"#grid .cell[data-partition='{q}']")
    page.wait(
        lambda: page.text("#detail-title") == str(q) and page.count("#move-target option") == 2,
        f"the move form of partition {q}",
    )
    page.choose("#move-target", target)
    page.click("#move-preview")
    page.wait(lambda: page.count("#plan-apply") == 1, f"the plan for partition {q}")
    page.click("#plan-apply")
    page.wait(lambda: page.count("#migrations .mig button.danger") == 1, "a migration in flight")
    assert f"partition {q}" in page.text("#migrations .mig")
    page.wait(lambda: "migrating" in page.cells()[q]["class"], "the moving cell marked")
    page.wait(lambda: page.text("#migrations .mig .step-now") == "WARMING", "WARMING")
    page.wait(lambda: "1 warm-up in flight" in page.text("#migrations"), "the warm-up counted")
    assert page.cells()[q]["owner"] == quiet  # the source serves while the target warms up
    assert call("POST", hold, {"hold": False}).status == 200
    page.wait(lambda: page.text("#migrations .mig .step-now") == "RELEASING", "RELEASING")
    save_full_page(browser, shots / "dashboard.png")  # the one in docs/
    abort = "#migrations .mig button.danger"
    page.click(abort)
    page.wait(lambda: page.text(abort).endswith("?"), "the abort to ask for confirmation")
    page.click(abort)
    page.wait(lambda: "aborted" in page.text("#migrations table"), "the aborted migration")
    assert "No migration in flight" in page.text("#migrations")
    assert page.cells()[q]["owner"] == quiet
    phases = [m["phase"] for m in migrations(c)["migrations"] if m["partition"] == q]
    assert phases == ["aborted"]
    assert call("POST", refuse, {"refuse": False}).status == 200
    # Aborted while releasing: the source hosts it again, at a new epoch.
    page.wait(lambda: page.cells()[q]["status"] == "online", f"partition {q} online again")
    page.click(f"#grid .cell[data-partition='{q}']")
    page.wait(lambda: "abort" in page.text("#detail .timeline"), "the abort in the timeline")

    # -- drain a worker from its row ---------------------------------------------------------
    owned = sum(1 for x in table(c) if x["owner"] == quiet)
    row = f"#workers-table tr[data-worker='{quiet}'] button.danger"
    page.click(row)
    page.wait(lambda: page.text(row) == f"Drain {quiet}?", "the drain to ask for confirmation")
    page.click(row)
    page.wait(lambda: f"drain of {quiet} started: {owned} migrations" in page.text("#banner"), "ok")
    page.wait(
        lambda: all(g["owner"] != quiet and g["status"] == "online" for g in page.cells().values()),
        f"no partition on {quiet}",
        90,
    )
    drained = [m for m in migrations(c)["migrations"] if m["reason"] == "drain"]
    assert len(drained) == owned and all(m["source"] == quiet for m in drained), drained
    page.wait(lambda: "No migration in flight" in page.text("#migrations"), "the drain done")
    assert all(x["owner"] != quiet for x in table(c))
    # The drained worker is LEFT; a scripted worker then registers again (a new
    # incarnation, with nothing assigned), as a restarted process would.
    page.wait(
        lambda: "left" in page.worker_row(quiet) or "#2" in page.worker_row(quiet),
        f"{quiet} left (or back as a new incarnation)",
    )
    # -- a balance plan is a preview until applied ------------------------------------------
    before = table(c)
    page.click("#balance-preview")
    page.wait(lambda: "balance plan" in page.text("#balance-plan").lower(), "the balance plan")
    plan = page.text("#balance-plan")
    assert "Nothing to move" in plan or "Dry run" in plan, plan
    page.click("#plan-cancel")
    page.wait(lambda: page.count("#balance-plan:not([hidden])") == 0, "the plan closed")
    assert [(x["owner"], x["epoch"]) for x in table(c)] == [
        (x["owner"], x["epoch"]) for x in before
    ]
    page.click(f"#grid .cell[data-partition='{p}']")
    page.wait(lambda: "why is it here" in page.text("#detail").lower(), "the timeline again")
    save_full_page(browser, shots / "dashboard-after-drain.png")

    # -- lock: read-only again -----------------------------------------------------------------
    page.click("#admin-lock")
    page.wait(lambda: page.text("#admin-state") == "read-only", "read-only again")
    assert page.admin_controls() == []
    assert browser.execute_script("return sessionStorage.getItem('ripple.adminToken')") is None

    # -- the leader dies: the follower's page says so and finds the new one --------------------
    old = c.leader()
    c.kill9(old)
    if old == home:  # leadership moved to the page's own node meanwhile (rare)
        page.wait(lambda: "does not answer" in page.text("#updated"), "its node gone")
        browser.get(c.url(next(s.id for s in c.specs if s.id != old)) + "/ui")
    page.wait(lambda: "Nodes up\n2 / 3" in page.text("#stats"), "a node down")
    page.wait(lambda: "unreachable" in page.text(f"#nodes-table tr[data-node='{old}']"), "down")
    leader = c.leader(60)
    page.wait(lambda: f"Leader\n{leader}" in page.text("#stats"), f"the new leader {leader}")
    page.wait(lambda: "alive" in page.worker_row(target), "liveness from the new leader")

    # -- the same page from the (new) leader --------------------------------------------------
    browser.get(c.url(leader) + "/ui")
    page.wait(lambda: f"served by {leader} (leader)" in page.text("#served-by"), "the leader")
    page.wait(lambda: len(page.cells()) == PARTITIONS, "the grid on the leader's page")
    assert "this page" in page.text(f"#nodes-table tr[data-node='{leader}']")
    assert page.text("#admin-state") == "read-only"  # the token stayed with the other origin

    # No CSP violation and no script error (the refused token's 403 is logged as a
    # failed network load, which is expected).
    logs = browser.get_log("browser")
    broken = [e for e in logs if e["level"] == "SEVERE" and e.get("source") != "network"]
    assert broken == [], broken
    failed_loads = [e for e in logs if e.get("source") == "network" and "/ui/" in e["message"]]
    assert failed_loads == [], failed_loads
