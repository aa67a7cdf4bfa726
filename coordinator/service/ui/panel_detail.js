// The selected partition: its owner, status, checkpoint and lag, "why is it here" (its
// ownership timeline with each reason's sentence), its migrations, and (admin) a move form.

import { planReassign } from "./actions.js";
import { $, badge, el, fill } from "./dom.js";
import { isFinished, kinds } from "./enums.js";
import { fmtAgo, fmtInt, fmtRate, fmtTime } from "./format.js";
import { phaseBadge } from "./panel_migrations.js";
import { planView } from "./panel_plan.js";
import { extraFields, kv, ownerLabel } from "./widgets.js";

const HISTORY_SHOWN_MAX = 40;
const MIGRATIONS_SHOWN_MAX = 10;
const HISTORY_FIELDS = new Set(["epoch", "owner", "reason", "at_ms"]);
const STATUS_KINDS = { ONLINE: "ok", ASSIGNING: "warn", UNASSIGNED: "muted" };

function facts(app, p) {
  const { E } = app.enums;
  const active = app.state.migrations.find((m) => m.partition === p.partition
    && !isFinished(app.enums, m));
  const ck = p.checkpoint;
  const notReported = (title) => el("span", { class: "muted", title }, "not reported");
  const lag = typeof p.lag_records === "number"
    ? ` · ${fmtInt(p.lag_records)} records behind the source` : "";
  return el("dl", { class: "kv" },
    kv("Owner", ownerLabel(app.state, p.owner)),
    kv("Status", badge(p.status, kinds(E.PartitionStatus, STATUS_KINDS)[p.status] || "muted")),
    kv("Epoch", fmtInt(p.epoch)),
    kv("Checkpoint", ck ? `offset ${fmtInt(ck.offset)} · epoch ${ck.epoch} · ${fmtAgo(ck.at_ms)}`
      : "none yet"),
    kv("Processed", typeof p.offset === "number" ? `offset ${fmtInt(p.offset)}${lag}`
      : notReported("the leader learns it from the owner's heartbeats")),
    kv("Input rate", typeof p.rate_per_s === "number" ? fmtRate(p.rate_per_s)
      : notReported("reported in the owner's heartbeats; stale after load_stale_s")),
    p.failing ? kv("Batches", el("span", { class: "error-text" },
      `failing (${p.failing.failures} in a row): ${p.failing.error}`)) : null,
    kv("Migration", active ? `${active.id}: ${active.source} → ${active.target} (${active.phase})`
      : "none in flight"));
}

// "Why is it here": the last change in a sentence, then the timeline, newest first.
function why(app, hist) {
  if (hist === null) return [el("p", { class: "muted" }, "loading history…")];
  if (!hist.length) return [el("p", { class: "muted" }, "no ownership change recorded")];
  const text = app.enums.reasonText;
  const last = hist[hist.length - 1];
  const prev = hist.length > 1 ? hist[hist.length - 2] : null;
  const from = prev && prev.owner && prev.owner !== last.owner ? ` (from ${prev.owner})` : "";
  const items = hist.slice(-HISTORY_SHOWN_MAX).reverse().map((e) => el("li", {},
    el("span", { class: "tl-time" }, fmtTime(e.at_ms)),
    el("span", { class: "tl-epoch" }, `e${e.epoch}`),
    ownerLabel(app.state, e.owner),
    el("span", { class: `tl-reason r-${e.reason}` }, e.reason),
    el("span", { class: "muted small" }, text[e.reason] || ""),
    extraFields(e, HISTORY_FIELDS)));
  return [
    el("p", { class: "why" }, `${last.owner || "No owner"} since ${fmtTime(last.at_ms)}, ` +
      `epoch ${last.epoch}: `, text[last.reason] || last.reason, from, "."),
    el("ol", { class: "timeline" }, items),
  ];
}

export function renderDetail(app) {
  const S = app.state;
  const box = $("detail");
  if (S.selected === null) return;
  const p = S.partitions.find((x) => x.partition === S.selected);
  fill($("detail-title"), String(S.selected));
  if (!p) {
    fill(box, el("p", { class: "muted" }, "not in the partition table"));
    renderMoveForm(app, null);
    return;
  }
  const hist = S.history && S.history.partition === p.partition ? S.history.history : null;
  const migs = S.migrations.filter((m) => m.partition === p.partition);
  const parts = [facts(app, p), el("h3", {}, "Why is it here"), why(app, hist)];
  if (migs.length) {
    parts.push(el("h3", {}, "Migrations of this partition"));
    parts.push(el("ul", { class: "plain" }, migs.slice(0, MIGRATIONS_SHOWN_MAX).map((m) =>
      el("li", {}, el("span", { class: "mono" }, m.id), ` ${m.source} → ${m.target} · `,
        phaseBadge(app, m.phase), m.note ? el("span", { class: "muted" }, ` ${m.note}`) : null))));
  }
  fill(box, parts);
  renderMoveForm(app, p);
}

// The form is rebuilt only when what it offers changes, so a refresh never resets a
// choice or swallows a click while the operator uses it.
function renderMoveForm(app, p) {
  const S = app.state;
  const box = $("detail-admin");
  const active = app.enums.E.WorkerState.ACTIVE;
  const targets = p ? S.workers.filter((w) => w.state === active && w.worker_id !== p.owner) : [];
  const key = JSON.stringify([!!S.token, p && p.partition, p && p.owner,
    targets.map((w) => w.worker_id), S.plan && S.plan.kind === "move" ? S.plan.id : null]);
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  fill(box, S.token && p ? moveForm(app, p, targets) : null);
}

function moveForm(app, p, targets) {
  const S = app.state;
  const sel = el("select", { id: "move-target", "aria-label": "target worker" },
    targets.map((w) => el("option", { value: w.worker_id }, w.worker_id)));
  // Re-rendered on every refresh: keep the operator's choice.
  if (targets.some((w) => w.worker_id === S.moveTarget)) sel.value = S.moveTarget;
  sel.addEventListener("change", () => {
    S.moveTarget = sel.value;
  });
  const preview = el("button", { type: "button", id: "move-preview" }, "Preview move");
  preview.addEventListener("click", () => {
    if (!sel.value) return;
    planReassign(app, "move", { moves: [{ partition: p.partition, to: sel.value }] });
  });
  const box = el("div", { class: "admin-box" }, el("h3", {}, "Move this partition"),
    el("div", { class: "form-row" }, "to ", sel, " ", preview));
  if (!targets.length) {
    fill(box, el("p", { class: "muted" }, "no other active worker to move it to"));
  }
  if (S.plan && S.plan.kind === "move") box.appendChild(planView(app));
  return box;
}
