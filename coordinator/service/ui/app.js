// Ripple dashboard, the page's entry module: loads the core's state names (enums.js), makes
// the page's one state object (store.js) and the app context every module receives, wires
// the top bar's controls and starts the refresh loop (refresh.js). The page reads the public
// /v1 API of the node that served it (and the other nodes' /v1/health, and the leader's
// answers); it writes only after an admin token is entered (actions.js).

import { lock, planReassign, unlock } from "./actions.js";
import { $, banner } from "./dom.js";
import { loadEnums } from "./enums.js";
import { renderHeader, renderNodes, renderStats } from "./panel_cluster.js";
import { renderDetail } from "./panel_detail.js";
import { createGrid } from "./panel_grid.js";
import { renderLag } from "./panel_lag.js";
import { renderMigrations } from "./panel_migrations.js";
import { renderPipelines } from "./panel_pipelines.js";
import { renderBalancePlan } from "./panel_plan.js";
import { renderRescale } from "./panel_rescale.js";
import { renderWorkers } from "./panel_workers.js";
import { createRefresher } from "./refresh.js";
import { createState } from "./store.js";

const ENUMS_RETRY_MS = 2000; // the page cannot draw states it has no names for: ask again

async function start() {
  let enums = null;
  while (enums === null) {
    try {
      enums = await loadEnums();
    } catch (err) {
      $("conn").className = "dot dot-down";
      banner(`dashboard error: ${err.message}`, "error");
      await new Promise((resolve) => setTimeout(resolve, ENUMS_RETRY_MS));
    }
  }
  banner(null);

  const app = {
    state: createState(),
    enums,
    // Every panel, from the state as it is.
    render() {
      renderHeader(app);
      renderStats(app);
      renderNodes(app);
      renderWorkers(app);
      renderPipelines(app);
      grid.render();
      renderDetail(app);
      renderBalancePlan(app);
      renderMigrations(app);
      renderRescale(app);
      renderLag(app);
    },
    // After a plan was made, applied or dropped: where plans show.
    renderPlans() {
      renderBalancePlan(app);
      renderDetail(app);
    },
    select(partition) {
      const S = app.state;
      S.selected = partition;
      S.history = null;
      if (S.plan && S.plan.kind === "move") S.plan = null;
      grid.markSelected(partition);
      renderDetail(app);
      refresher.refreshNow();
    },
    // The pipeline whose partitions and migrations the page shows: what was read for the
    // one shown before is dropped, so no panel mixes two pipelines' numbers.
    selectPipeline(name) {
      const S = app.state;
      if (name === S.pipeline) return;
      S.pipeline = name;
      S.selected = null;
      S.history = null;
      S.plan = null;
      S.partitions = [];
      S.migrations = [];
      app.render();
      refresher.refreshNow();
    },
    refreshNow: () => refresher.refreshNow(),
  };
  const grid = createGrid(app);
  const refresher = createRefresher(app);

  $("admin-form").addEventListener("submit", (ev) => unlock(app, ev));
  $("admin-lock").addEventListener("click", () => {
    lock(app);
    banner("read-only again", "info");
  });
  $("balance-preview").addEventListener("click",
    () => planReassign(app, "balance", { strategy: "balance" }));
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresher.refreshNow();
  });
  refresher.refresh();
}

start();
