// The Rescale panel: the routing generation (from this node's health) and the newest
// rescale (from /v1/status): its counts, its phase among the core's RescalePhase steps, cuts
// recorded of the old count and new partitions online of the new count.

import { $, el, fill } from "./dom.js";
import { fmtAgo, fmtInt } from "./format.js";
import { steps } from "./widgets.js";

export function renderRescale(app) {
  const c = app.state.home.cluster || {};
  const counts = Array.isArray(c.routing) ? c.routing : [];
  fill($("rescale-generation"), typeof c.routing_generation === "number"
    ? `routing generation ${c.routing_generation}` : "");
  const r = app.state.newestRescale;
  const box = $("rescale");
  if (!r) {
    box.dataset.phase = "none";
    fill(box, el("p", { class: "muted" },
      `No rescale yet: ${fmtInt(c.total_partitions)} partitions since the start.`));
    return;
  }
  box.dataset.phase = r.phase;
  const { rescaleSteps } = app.enums;
  const history = counts.length > 1 ? ` · partitions by generation ${counts.join(" → ")}` : "";
  fill(box,
    el("p", { class: "small" },
      `${fmtInt(r.previous)} → ${fmtInt(r.partitions)} partitions (routing generation ` +
      `${r.generation}) by ${r.by} · started ${fmtAgo(r.started_at_ms)} · ` +
      `updated ${fmtAgo(r.updated_at_ms)}${history}`),
    steps(rescaleSteps, rescaleSteps.indexOf(r.phase), r.phase),
    el("div", { class: "rescale-counts" },
      el("span", { "data-cuts": `${r.cuts_done}/${r.previous}` },
        `cuts ${fmtInt(r.cuts_done)} / ${fmtInt(r.previous)}`),
      el("span", { "data-online": `${r.online}/${r.partitions}` },
        `online ${fmtInt(r.online)} / ${fmtInt(r.partitions)}`)));
}
