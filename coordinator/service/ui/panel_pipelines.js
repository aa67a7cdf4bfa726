// The Pipelines panel: one row per pipeline (`default` first, as /v1/pipelines lists them)
// with its state, partitions, health and pool, and the description of the one selected, the
// pipeline the partition grid and the migrations are read for. Health is the describe's
// `partition_states` and `unplaceable` as the API answered them: a pipeline the refresh did
// not describe shows "—", never a guess.

import { $, badge, el, fill } from "./dom.js";
import { kinds } from "./enums.js";
import { fmtAgo, fmtInt } from "./format.js";
import { DEFAULT_PIPELINE } from "./store.js";
import { kv } from "./widgets.js";

const STATE_KINDS = { CREATING: "info", ACTIVE: "ok", PAUSED: "warn", DROPPING: "muted" };

// {up, placing, waiting, count, reason}: its partitions ONLINE, ASSIGNING and UNASSIGNED,
// its count and why the waiting ones have nowhere to go; null if it was not described.
function healthOf(app, p) {
  const d = app.state.pipelineDetails.get(p.name);
  if (!d || !d.partition_states) return null;
  const { ONLINE, ASSIGNING, UNASSIGNED } = app.enums.E.PartitionStatus;
  const ps = d.partition_states;
  return {
    up: ps[ONLINE] || 0,
    placing: ps[ASSIGNING] || 0,
    waiting: ps[UNASSIGNED] || 0,
    count: p.partitions,
    reason: d.unplaceable || "",
  };
}

function healthCell(app, p) {
  const h = healthOf(app, p);
  if (h === null) {
    return el("td", { class: "muted", title: "not described by this refresh" }, "—");
  }
  if (p.state === app.enums.E.PipelineState.CREATING) {
    return el("td", { class: "muted", data: { up: String(h.up) } }, "not set up yet");
  }
  const { ONLINE, ASSIGNING, UNASSIGNED } = app.enums.E.PartitionStatus;
  const whole = h.up === h.count;
  return el("td", { class: "nowrap", data: { up: String(h.up), waiting: String(h.waiting) } },
    el("span", { class: `dot dot-${whole ? "ok" : h.up ? "warn" : "bad"}` }),
    ` ${fmtInt(h.up)} / ${fmtInt(h.count)} ${ONLINE}`,
    h.placing ? [" ", badge(`${fmtInt(h.placing)} ${ASSIGNING}`, "info")] : null,
    h.waiting
      ? [" ", el("span", { class: "badge badge-bad", title: h.reason || "waiting for placement" },
        `${fmtInt(h.waiting)} ${UNASSIGNED}`)]
      : null,
    h.waiting && h.reason ? el("div", { class: "muted small unplaceable" }, h.reason) : null);
}

function poolText(pool) {
  const labels = Object.entries(pool || {});
  return labels.length ? labels.map(([k, v]) => `${k}=${v}`).join(", ") : "every worker";
}

function row(app, p) {
  const S = app.state;
  const chosen = p.name === S.pipeline;
  const stateKind = kinds(app.enums.E.PipelineState, STATE_KINDS)[p.state] || "muted";
  return el("tr", { class: chosen ? "chosen" : null, data: { pipeline: p.name, state: p.state } },
    el("td", {}, el("button", {
      class: "link", type: "button", title: "show its partitions and migrations",
      on: { click: () => app.selectPipeline(p.name) },
    }, p.name)),
    el("td", {}, badge(p.state.toUpperCase(), stateKind)),
    el("td", { class: "num" }, fmtInt(p.partitions)),
    healthCell(app, p),
    el("td", { class: p.pool && Object.keys(p.pool).length ? "mono small" : "muted" },
      poolText(p.pool)));
}

function description(app, p) {
  const d = app.state.pipelineDetails.get(p.name);
  if (p.name === DEFAULT_PIPELINE) {
    return el("p", { class: "muted small" },
      "default: the cluster's own partition table (total_partitions), no spec record.");
  }
  const s = (d && d.settings) || {};
  return el("dl", { class: "kv", id: "pipeline-description" },
    kv("Spec version", fmtInt(p.spec_version)),
    kv("Spec sha256", el("span", { class: "mono small" },
      d && d.spec_sha256 ? d.spec_sha256.slice(0, 16) : "—")),
    kv("Pool", poolText(p.pool)),
    kv("Partitions", `${fmtInt(p.partitions)} · table numbers from ${fmtInt(p.first_slot)}`),
    kv("Batch interval", `${fmtInt(s.batch_interval_ms)} ms`),
    kv("Checkpoint interval", `${fmtInt(s.checkpoint_interval_ms)} ms`),
    kv("Keys per partition", fmtInt(s.max_keys_per_partition)),
    kv("Retention", `${fmtInt(s.retention_ms)} ms`),
    kv("Incarnation", fmtInt(p.incarnation)),
    kv("Changed", `${fmtAgo(p.updated_at_ms)} by ${p.by || "—"}`),
    p.purge ? kv("Drop", "purge its objects") : null);
}

export function renderPipelines(app) {
  const S = app.state;
  const rows = S.pipelines.map((p) => row(app, p));
  fill($("pipelines-table").tBodies[0], rows.length ? rows : [
    el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no pipeline listed yet")),
  ]);
  fill($("pipelines-count"), `${S.pipelines.length} · showing ${S.pipeline}`);
  const chosen = S.pipelines.find((p) => p.name === S.pipeline);
  fill($("pipeline-detail"), chosen ? [el("h3", {}, `Pipeline ${chosen.name}`),
    description(app, chosen)] : null);
  fill($("pipelines-note"), S.pipelinesNote);
  // Which pipeline the grid and the migrations are (no tag: `default`, as without records).
  const scoped = S.pipeline !== DEFAULT_PIPELINE;
  for (const id of ["partitions-pipeline", "migrations-pipeline"]) {
    fill($(id), scoped ? `pipeline ${S.pipeline}` : "");
    $(id).hidden = !scoped;
  }
  // A balance is of `default` only (the API refuses one with ?pipeline=); a move is scoped.
  $("balance-preview").hidden = scoped;
}
