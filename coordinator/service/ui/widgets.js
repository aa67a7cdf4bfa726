// Small pieces several panels draw: a summary tile, a definition pair, an owner's colour and
// label, bar charts, and the fields a newer API adds. Pure functions of their arguments.

import { el } from "./dom.js";
import { describe } from "./format.js";

const PALETTE = [
  "#2563eb", "#16a34a", "#ea580c", "#7c3aed", "#0891b2",
  "#db2777", "#65a30d", "#b45309", "#4f46e5", "#0d9488",
];

export function stat(label, value, sub, kind) {
  return el("div", { class: `stat${kind ? ` stat-${kind}` : ""}` },
    el("div", { class: "stat-label" }, label),
    el("div", { class: "stat-value" }, value),
    el("div", { class: "stat-sub" }, sub || ""));
}

export function kv(label, ...value) {
  return [el("dt", {}, label), el("dd", {}, ...value)];
}

// A worker's colour: the palette in worker-id order, then distinct hues.
export function ownerColor(state, owner) {
  if (owner === null || owner === undefined) return null;
  const ids = state.workers.map((w) => w.worker_id).sort();
  let i = ids.indexOf(owner);
  if (i < 0) i = ids.length + [...owner].reduce((a, ch) => a + ch.charCodeAt(0), 0);
  if (i < PALETTE.length) return PALETTE[i];
  return `hsl(${Math.round((i * 137.508) % 360)} 62% 42%)`; // golden angle: distinct hues
}

export function ownerLabel(state, owner) {
  if (!owner) return el("span", { class: "muted" }, "no owner");
  return el("span", { class: "owner" },
    el("span", { class: "chip", color: ownerColor(state, owner) }), owner);
}

// A link to one partition's detail.
export function partitionLink(app, partition, text) {
  return el("button", { class: "link", type: "button", on: { click: () => app.select(partition) } },
    text);
}

// Horizontal bars, one per partition, scaled to the largest value shown.
export function bars(app, rows, valueOf, label) {
  const worst = Math.max(1, ...rows.map(valueOf));
  return el("div", { class: "bars" }, rows.map((p) => {
    const bar = el("span", { class: "bar-fill", color: ownerColor(app.state, p.owner) });
    bar.style.width = `${Math.max(2, Math.round((100 * valueOf(p)) / worst))}%`;
    return el("div", { class: "bar-row" },
      partitionLink(app, p.partition, `p${p.partition}`),
      el("span", { class: "bar" }, bar),
      el("span", { class: "num small" }, label(p)));
  }));
}

// Fields a newer API adds to an entry, shown as "name: value" rather than dropped.
export function extraFields(entry, known) {
  const extra = Object.entries(entry).filter(([k, v]) => !known.has(k) && v !== null && v !== "");
  return extra.map(([k, v]) => el("span", { class: "muted small" },
    `${k.replaceAll("_", " ")}: ${describe(v)}`));
}

// A row of steps, those up to `at` done and `at` the current one.
export function steps(names, at, title) {
  return el("div", { class: "steps", title },
    names.map((s, i) => el("span", {
      class: `step${i <= at ? " step-done" : ""}${i === at ? " step-now" : ""}`,
    }, s.replace("_", " "))));
}
