// Migrations in flight (each with its steps and, admin, an abort button) and the recently
// finished ones.

import { adminPost, confirmButton } from "./actions.js";
import { $, badge, el, fill } from "./dom.js";
import { isFinished, kinds } from "./enums.js";
import { fmtAgo, plural } from "./format.js";
import { ownerLabel, partitionLink, steps } from "./widgets.js";

const FINISHED_MIGRATIONS_SHOWN_MAX = 8;
const PHASE_KINDS = {
  DONE: "ok", ABORTED: "bad", PLANNED: "muted", WARMING: "info", RELEASING: "warn", HANDED_OFF: "info",
};

export function phaseBadge(app, phase) {
  return badge(phase, kinds(app.enums.E.MigrationPhase, PHASE_KINDS)[phase] || "muted");
}

function abortButton(app, m) {
  return confirmButton(app, `abort:${m.id}`, "Abort", `Abort ${m.id}?`, () =>
    adminPost(app, `/v1/admin/migrations/${encodeURIComponent(m.id)}/abort`, null,
      (r) => `migration ${m.id}: ${r.phase}`));
}

function inFlightView(app, m) {
  const { migrationSteps, abortable } = app.enums;
  const action = app.state.token && abortable.has(m.phase) ? abortButton(app, m) : null;
  return el("div", { class: "mig", "data-migration": m.id },
    el("div", { class: "mig-head" },
      partitionLink(app, m.partition, `partition ${m.partition}`),
      " ", ownerLabel(app.state, m.source), " → ", ownerLabel(app.state, m.target),
      el("span", { class: "muted small" }, ` ${m.reason} · started ${fmtAgo(m.created_at_ms)}`),
      el("span", { class: "spacer" }), action),
    steps(migrationSteps, migrationSteps.indexOf(m.phase), m.phase));
}

export function renderMigrations(app) {
  const S = app.state;
  const inFlight = S.migrations.filter((m) => !isFinished(app.enums, m));
  const finished = S.migrations.filter((m) => isFinished(app.enums, m));
  const box = [];
  if (!inFlight.length) box.push(el("p", { class: "muted" }, "No migration in flight."));
  // Warm-ups: targets loading and following the source log while the source still serves.
  const warming = inFlight.filter((m) => m.phase === app.enums.E.MigrationPhase.WARMING).length;
  if (warming) {
    box.push(el("p", { class: "small", data: { warmups: String(warming) } },
      `${plural(warming, "warm-up")} in flight`));
  }
  for (const m of inFlight) box.push(inFlightView(app, m));
  if (finished.length) {
    box.push(el("h3", {}, "Recently finished"));
    box.push(el("table", { class: "table compact" }, el("tbody", {},
      finished.slice(0, FINISHED_MIGRATIONS_SHOWN_MAX).map((m) => el("tr", {},
        el("td", { class: "mono" }, m.id.slice(0, 12)),
        el("td", {}, `p${m.partition}`),
        el("td", {}, `${m.source} → ${m.target}`),
        el("td", {}, phaseBadge(app, m.phase)),
        el("td", { class: "muted" }, m.reason),
        el("td", { class: "muted" }, fmtAgo(m.updated_at_ms)))))));
  }
  fill($("migrations"), box);
  fill($("migrations-count"), `${inFlight.length} in flight`);
}
