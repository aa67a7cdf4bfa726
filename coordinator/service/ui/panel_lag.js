// Pipeline lag and checkpoints: how far behind the source the owners report, failing
// batches, checkpoint ages, the partitions furthest behind and stalest, and whatever else
// the workers' answers carry from a newer version of the API.

import { $, el, fill } from "./dom.js";
import { describe, fmtAge, fmtInt } from "./format.js";
import { WORKER_FIELDS } from "./panel_workers.js";
import { bars, kv, partitionLink } from "./widgets.js";

const BARS_SHOWN_MAX = 6; // partitions per bar chart
const FAILING_SHOWN_MAX = 10;

function summary(app, reporting, failing, withCk, now) {
  const S = app.state;
  const online = S.partitions.filter((p) => p.status === app.enums.E.PartitionStatus.ONLINE);
  const ages = withCk.map((p) => now - p.checkpoint.at_ms).sort((a, b) => a - b);
  const median = ages.length ? ages[Math.floor(ages.length / 2)] : null;
  const totalLag = reporting.reduce((a, p) => a + p.lag_records, 0);
  const maxLag = reporting.reduce((a, p) => Math.max(a, p.lag_records), 0);
  const all = fmtInt(S.partitions.length);
  return el("dl", { class: "kv" },
    kv("Behind the source", reporting.length
      ? `${fmtInt(totalLag)} records · largest ${fmtInt(maxLag)} · ` +
        `${fmtInt(reporting.length)} of ${all} partitions reporting`
      : el("span", { class: "muted" }, "no owner has reported where the source log ends")),
    kv("Failing batches", failing.length
      ? el("span", { class: "error-text" },
        `${fmtInt(failing.length)} partition${failing.length === 1 ? "" : "s"}`)
      : "none reported"),
    kv("Checkpointed", `${fmtInt(withCk.length)} of ${all} partitions · ` +
      `${fmtInt(online.filter((p) => !p.checkpoint).length)} online without one`),
    kv("Checkpoint age", ages.length
      ? `median ${fmtAge(median)} · oldest ${fmtAge(ages[ages.length - 1])}` : "—"));
}

// Whatever else the workers' answers carry, from a newer version of the API.
function extraWorkerFields(workers) {
  const extra = [];
  for (const w of workers) {
    for (const [k, v] of Object.entries(w)) {
      if (!WORKER_FIELDS.has(k) && v !== null && v !== undefined) extra.push([w.worker_id, k, v]);
    }
  }
  if (!extra.length) return [];
  return [el("h3", {}, "Also reported by workers"),
    el("table", { class: "table compact" }, el("tbody", {},
      extra.map(([wid, k, v]) => el("tr", {}, el("td", {}, wid),
        el("td", { class: "muted" }, k.replaceAll("_", " ")),
        el("td", { class: "mono" }, describe(v))))))];
}

export function renderLag(app) {
  const S = app.state;
  const now = Date.now();
  const withCk = S.partitions.filter((p) => p.checkpoint);
  const reporting = S.partitions.filter((p) => typeof p.lag_records === "number");
  const failing = S.partitions.filter((p) => p.failing);
  const parts = [summary(app, reporting, failing, withCk, now)];
  if (failing.length) {
    parts.push(el("h3", {}, "Failing batches"));
    parts.push(el("ul", { class: "plain failing-list" },
      failing.slice(0, FAILING_SHOWN_MAX).map((p) => el("li", {},
        partitionLink(app, p.partition, `p${p.partition}`),
        ` ${p.owner} · ${p.failing.failures} in a row · `,
        el("span", { class: "error-text mono" }, p.failing.error)))));
  }
  const behind = reporting.filter((p) => p.lag_records > 0)
    .sort((a, b) => b.lag_records - a.lag_records).slice(0, BARS_SHOWN_MAX);
  if (behind.length) {
    parts.push(el("h3", {}, "Furthest behind"));
    parts.push(bars(app, behind, (p) => p.lag_records, (p) => fmtInt(p.lag_records)));
  }
  const stalest = withCk.slice().sort((a, b) => a.checkpoint.at_ms - b.checkpoint.at_ms)
    .slice(0, BARS_SHOWN_MAX);
  if (stalest.length) {
    parts.push(el("h3", {}, "Stalest checkpoints"));
    parts.push(bars(app, stalest, (p) => now - p.checkpoint.at_ms,
      (p) => fmtAge(now - p.checkpoint.at_ms)));
  }
  parts.push(extraWorkerFields(S.workers));
  if (!S.workersFromLeader) {
    parts.push(el("p", { class: "note" },
      "Lag and failing batches are known to the leader only, and the leader did not answer."));
  }
  fill($("lag"), parts);
}
