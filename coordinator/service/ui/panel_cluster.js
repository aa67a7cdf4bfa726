// The top of the page: who served it and whether admin mode is on, the summary tiles, and
// the coordinator nodes with the membership (voters, learners, the change in flight).

import { $, badge, el, fill } from "./dom.js";
import { isFinished } from "./enums.js";
import { fmtInt } from "./format.js";
import { stat } from "./widgets.js";

const ROLE_KINDS = { leader: "ok", follower: "muted", candidate: "warn" }; // Raft roles

export function renderHeader(app) {
  const h = app.state.home;
  const staleNote = app.state.stale ? " · local reads, may lag the leader" : "";
  fill($("served-by"), `served by ${h.node_id} (${h.role})${staleNote}`);
  const admin = !!app.state.token;
  document.body.classList.toggle("is-admin", admin);
  const st = $("admin-state");
  st.className = `badge ${admin ? "badge-admin" : "badge-ro"}`;
  fill(st, admin ? "admin" : "read-only");
  $("admin-token").hidden = admin;
  $("admin-unlock").hidden = admin;
  $("admin-lock").hidden = !admin;
}

export function renderStats(app) {
  const S = app.state;
  const { E } = app.enums;
  const h = S.home;
  const byStatus = Object.fromEntries(Object.values(E.PartitionStatus).map((v) => [v, 0]));
  for (const p of S.partitions) byStatus[p.status] = (byStatus[p.status] || 0) + 1;
  const active = S.workers.filter((w) => w.state === E.WorkerState.ACTIVE).length;
  const inFlight = S.migrations.filter((m) => !isFinished(app.enums, m)).length;
  const reachable = S.nodes.filter((n) => n.health).length;
  const total = S.partitions.length;
  const online = byStatus[E.PartitionStatus.ONLINE];
  const { ASSIGNING, UNASSIGNED } = E.PartitionStatus;
  fill($("stats"),
    stat("Leader", h.leader_id || "none", h.leader_id ? `term ${h.term}` : "election in progress",
      h.leader_id ? "ok" : "bad"),
    stat("Nodes up", `${reachable} / ${S.nodes.length}`, "answering /v1/health",
      reachable === S.nodes.length ? "ok" : "warn"),
    stat("Workers active", `${active} / ${S.workers.length}`, "registered",
      active ? "ok" : "warn"),
    stat("Partitions online", `${online} / ${total}`,
      `${byStatus[ASSIGNING]} ${ASSIGNING} · ${byStatus[UNASSIGNED]} ${UNASSIGNED}`,
      total && online === total ? "ok" : "warn"),
    stat("Migrations in flight", String(inFlight), `of ${S.migrations.length} recorded`,
      inFlight ? "busy" : null),
    stat("Generation", fmtInt(h.cluster ? h.cluster.generation : null),
      `applied index ${fmtInt(h.applied_index)}`));
}

export function renderNodes(app) {
  const S = app.state;
  const rows = S.nodes.map((n) => {
    const h = n.health;
    const isHome = S.home && n.id === S.home.node_id;
    const name = el("td", {}, el("strong", {}, n.id),
      isHome ? el("span", { class: "tag" }, "this page") : null,
      el("div", { class: "mono muted addr", title: n.url }, n.url));
    if (!h) {
      return el("tr", { class: "row-down", data: { node: n.id } }, name,
        el("td", {}, badge("unreachable", "bad")),
        el("td", { colspan: 4, class: "muted" }, n.error || ""));
    }
    return el("tr", { data: { node: n.id } }, name,
      el("td", {}, badge(h.role, ROLE_KINDS[h.role] || "muted"),
        h.role === "leader" && !h.ready ? badge("applying log", "warn") : null),
      el("td", { class: "num" }, fmtInt(h.term)),
      el("td", { class: "num" }, fmtInt(h.commit_index)),
      el("td", { class: "num" }, fmtInt(h.applied_index)),
      el("td", {}, h.leader_id || "—"));
  });
  fill($("nodes-table").tBodies[0], rows);
  fill($("nodes-note"), membershipNote(S.membership));
}

// The voters, the learners being fed, and the membership change in flight (or the last).
function membershipNote(m) {
  if (!m) return "";
  const nodes = m.nodes || [];
  const voters = nodes.filter((n) => n.voter).map((n) => n.id);
  const learners = nodes.filter((n) => !n.voter).map((n) => n.id);
  const parts = [`voters: ${voters.join(", ") || "—"}`, `cluster id ${m.cluster_id}`];
  if (learners.length) parts.push(`catching up: ${learners.join(", ")}`);
  const c = m.change;
  if (c) {
    const what = c.kind === "replace" ? `${c.old_node_id} → ${c.node_id || "(added)"}`
      : (c.node_id || c.old_node_id);
    parts.push(`change in flight: ${c.kind} ${what} (${c.phase})`);
  } else if (m.membership_pending) {
    parts.push("change in flight: a membership entry is not committed yet");
  } else if (m.last_change) {
    const l = m.last_change;
    parts.push(`last change: ${l.kind} ${l.node_id || l.old_node_id} ${l.phase}` +
      (l.error ? ` (${l.error})` : ""));
  }
  return parts.join(" · ");
}
