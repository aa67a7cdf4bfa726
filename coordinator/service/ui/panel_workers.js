// The workers table: state, liveness and load (the leader's), partitions, lag, the oldest
// checkpoint of each, and (admin) a drain button per active worker.

import { adminPost, confirmButton } from "./actions.js";
import { $, badge, el, fill } from "./dom.js";
import { kinds } from "./enums.js";
import { fmtAge, fmtInt, fmtRate } from "./format.js";
import { ownerColor } from "./widgets.js";

// Worker fields this table shows; any other field an answer carries (added by a newer
// version) is shown as-is in the pipeline panel.
export const WORKER_FIELDS = new Set([
  "worker_id", "address", "incarnation", "state", "registered_at_ms", "partitions",
  "liveness", "load", "failing_partitions", "lag_records", "rate_per_s",
]);
const STATE_KINDS = { ACTIVE: "ok", DRAINING: "warn", DEAD: "bad", LEFT: "muted" };
// RESTARTING: the leader holds its partitions until it rejoins (rejoin_grace_s).
const LIVENESS_KINDS = { ALIVE: "ok", SUSPECTED: "warn", RESTARTING: "wait", DEAD: "bad" };

function livenessCell(app, w) {
  if (w.liveness === null || w.liveness === undefined) {
    return el("td", { class: "muted", title: "liveness is known to the leader only" }, "—");
  }
  const kind = kinds(app.enums.E.Liveness, LIVENESS_KINDS)[w.liveness] || "muted";
  return el("td", { class: "nowrap" }, el("span", { class: `dot dot-${kind}` }), ` ${w.liveness}`);
}

// A worker's load: its partitions' summed input rate while the leader has every one of
// them fresh, else its partition count, labelled so the two are never confused.
function loadCell(w) {
  if (typeof w.rate_per_s === "number") {
    return el("td", { class: "num", title: "summed input rate of its partitions" },
      fmtRate(w.rate_per_s));
  }
  return el("td", {
    class: "num muted",
    title: "no fresh input rate for all its partitions: its partition count",
  }, `${fmtInt(w.partitions)} (count)`);
}

// owner -> the age of its online partitions' oldest checkpoint (null: one has none yet).
function oldestCheckpointByOwner(app) {
  const now = Date.now();
  const oldest = new Map();
  for (const p of app.state.partitions) {
    if (!p.owner || p.status !== app.enums.E.PartitionStatus.ONLINE) continue;
    const age = p.checkpoint ? now - p.checkpoint.at_ms : null;
    const prev = oldest.get(p.owner);
    if (prev === undefined) oldest.set(p.owner, age);
    else if (age === null || (prev !== null && age > prev)) oldest.set(p.owner, age);
  }
  return oldest;
}

function drainButton(app, w) {
  const id = w.worker_id;
  return confirmButton(app, `drain:${id}`, "Drain", `Drain ${id}?`, () =>
    adminPost(app, `/v1/workers/${encodeURIComponent(id)}/drain`, null,
      (r) => `drain of ${id} started: ${(r.migrations || []).length} migrations`));
}

export function renderWorkers(app) {
  const S = app.state;
  const { E } = app.enums;
  const oldest = oldestCheckpointByOwner(app);
  const stateKinds = kinds(E.WorkerState, STATE_KINDS);
  const rows = S.workers.map((w) => {
    const age = oldest.get(w.worker_id);
    const active = w.state === E.WorkerState.ACTIVE;
    return el("tr", { data: { worker: w.worker_id } },
      el("td", {}, el("span", { class: "chip", color: ownerColor(S, w.worker_id) }),
        el("strong", {}, w.worker_id),
        el("span", { class: "muted small", title: "incarnation" }, ` #${w.incarnation}`),
        el("div", { class: "mono muted addr", title: w.address }, w.address)),
      el("td", {}, badge(w.state, stateKinds[w.state] || "muted"),
        w.failing_partitions ? badge(`${w.failing_partitions} failing`, "bad") : null),
      livenessCell(app, w),
      loadCell(w),
      el("td", { class: "num" }, fmtInt(w.partitions)),
      el("td", { class: "num", title: "records not processed yet (reported in heartbeats)" },
        typeof w.lag_records === "number" ? fmtInt(w.lag_records) : "—"),
      el("td", { class: "num" }, age === undefined ? "—" : age === null ? "none yet" : fmtAge(age)),
      el("td", { class: "admin-only" }, S.token && active ? drainButton(app, w) : null));
  });
  fill($("workers-table").tBodies[0], rows.length ? rows : [
    el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no worker registered yet")),
  ]);
  const active = S.workers.filter((w) => w.state === E.WorkerState.ACTIVE).length;
  fill($("workers-count"), `${active} active of ${S.workers.length}`);
  fill($("workers-note"), S.workersFromLeader ? ""
    : "Liveness and load are known to the leader only, and the leader did not answer.");
}
