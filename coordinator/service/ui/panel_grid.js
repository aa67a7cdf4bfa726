// The partition grid: one cell per partition (up to GRID_CELLS_MAX) coloured by owner, with
// its status, a migration in flight and failing batches, and the legend above it. The cells
// are made once per partition count and updated in place, so a refresh never steals a click.

import { $, el, fill } from "./dom.js";
import { isFinished } from "./enums.js";
import { fmtInt, fmtRate } from "./format.js";
import { ownerColor } from "./widgets.js";

const GRID_CELLS_MAX = 4096; // partitions drawn in the grid; the rest are counted

// {render, markSelected}: the grid of one page; it owns its cells.
export function createGrid(app) {
  let cells = [];

  function render() {
    const S = app.state;
    const parts = S.partitions.slice(0, GRID_CELLS_MAX);
    if (cells.length !== parts.length) {
      cells = parts.map((p) => {
        const cell = el("button", { class: "cell", type: "button", role: "gridcell" },
          el("span", { class: "cell-p" }), el("span", { class: "cell-e" }));
        cell.addEventListener("click", () => app.select(Number(cell.dataset.partition)));
        return cell;
      });
      fill($("grid"), cells);
    }
    const migrating = new Map();
    for (const m of S.migrations) if (!isFinished(app.enums, m)) migrating.set(m.partition, m);
    parts.forEach((p, i) => drawCell(cells[i], p, migrating.get(p.partition)));
    renderLegend();
    const cut = S.partitions.length - parts.length;
    fill($("partitions-count"), `${fmtInt(S.partitions.length)} · e = epoch${cut > 0
      ? ` · the first ${fmtInt(parts.length)} drawn; ripple partitions lists all` : ""}`);
  }

  function drawCell(cell, p, m) {
    let cls = `cell st-${p.status}`;
    if (m) cls += " migrating";
    if (p.failing) cls += " failing";
    if (p.partition === app.state.selected) cls += " selected";
    cell.className = cls;
    const color = ownerColor(app.state, p.owner);
    if (color) cell.style.setProperty("--owner", color);
    else cell.style.removeProperty("--owner");
    cell.dataset.partition = String(p.partition);
    cell.dataset.owner = p.owner || "";
    cell.dataset.status = p.status;
    cell.dataset.epoch = String(p.epoch);
    cell.firstChild.textContent = String(p.partition);
    cell.lastChild.textContent = `e${p.epoch}`;
    const moving = m ? ` · moving ${m.source} → ${m.target} (${m.phase})` : "";
    const lag = (typeof p.lag_records === "number" ? ` · lag ${fmtInt(p.lag_records)}` : "")
      + (typeof p.rate_per_s === "number" ? ` · ${fmtRate(p.rate_per_s)}` : "");
    const failing = p.failing ? ` · batches failing (${p.failing.failures}x)` : "";
    cell.title = `partition ${p.partition} · ${p.owner || "no owner"} · ${p.status} · ` +
      `epoch ${p.epoch}${moving}${lag}${failing}`;
  }

  function renderLegend() {
    const counts = new Map();
    for (const p of app.state.partitions) {
      if (p.owner) counts.set(p.owner, (counts.get(p.owner) || 0) + 1);
    }
    const owners = [...counts.keys()].sort();
    const item = (cls, text) => el("span", { class: "legend-item" },
      el("span", { class: `swatch ${cls}` }), text);
    const { ONLINE, ASSIGNING, UNASSIGNED } = app.enums.E.PartitionStatus;
    fill($("legend"),
      owners.map((o) => el("span", { class: "legend-item" },
        el("span", { class: "chip", color: ownerColor(app.state, o) }), `${o} `,
        el("span", { class: "muted" }, fmtInt(counts.get(o))))),
      el("span", { class: "legend-sep" }),
      [ONLINE, ASSIGNING, UNASSIGNED].map((status) => item(`sw-${status}`, status)),
      item("sw-migrating", "migrating"),
      item("sw-failing", "batches failing"));
  }

  function markSelected(partition) {
    for (const c of cells) c.classList.toggle("selected", c.dataset.partition === String(partition));
  }

  return { render, markSelected };
}
