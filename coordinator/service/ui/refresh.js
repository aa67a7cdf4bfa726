// The refresh loop: read this node's /v1 (and the other nodes' /v1/health, and the leader's
// answers for what only the leader knows) into `app.state`, then render. One refresh at a
// time, the next one a pause after the last one ended (longer when refreshes are slow, so a
// big cluster is not polled harder than it answers); a hidden tab does not poll.

import { baseOf, errorText, getJSON, leaderBase } from "./api.js";
import { $, banner, fill } from "./dom.js";
import { fmtAgo, fmtTime } from "./format.js";
import { DEFAULT_PIPELINE, pipelineQuery } from "./store.js";

const REFRESH_MS = 2000; // pause between the end of one refresh and the next, at least
const REFRESH_MAX_MS = 30000; // ... and at most, however slow the last refresh was
// Lag and failing batches are known to the leader only (from heartbeats).
const LEADER_PARTITION_FIELDS = ["failing", "offset", "lag_records", "rate_per_s"];
// Pipelines described (health, settings) per refresh, `default` and the selected one first;
// the rest show no health (`ripple pipelines describe` has it), so a refresh stays bounded.
const PIPELINES_DESCRIBED_MAX = 32;
// Describes in flight at once: a page stays far below a node's reads_in_flight_max (64).
const DESCRIBES_IN_FLIGHT_MAX = 4;

function pauseMs(state) {
  return Math.min(REFRESH_MAX_MS, Math.max(REFRESH_MS, 3 * state.lastDurationMs));
}

// {refresh, refreshNow}: `refresh` starts the loop; `refreshNow` asks for a refresh as soon
// as possible without ever running two at once.
export function createRefresher(app) {
  let busy = false;
  let again = false;
  let timer = null;

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, pauseMs(app.state));
  }

  function refreshNow() {
    if (busy) {
      again = true;
      return;
    }
    clearTimeout(timer);
    refresh();
  }

  async function refresh() {
    if (busy) return;
    if (document.hidden) {
      schedule();
      return;
    }
    busy = true;
    $("conn").className = "dot dot-busy";
    try {
      const started = performance.now();
      if (await load(app.state)) app.render();
      app.state.lastDurationMs = performance.now() - started;
    } catch (err) {
      // A rendering bug must not stop the loop; say so where a person looks (and in the
      // console, where the browser test looks).
      banner(`dashboard error: ${err && err.message ? err.message : err}`, "error");
      console.error(err);
    } finally {
      busy = false;
      if (again) {
        again = false;
        refreshNow();
      } else {
        schedule();
      }
    }
  }

  return { refresh, refreshNow };
}

function maintenanceText(mm) {
  const ends = mm.until_ms === null || mm.until_ms === undefined
    ? "until turned off"
    : `ends ${fmtTime(mm.until_ms)}`;
  return `Maintenance mode on since ${fmtTime(mm.since_ms)} by ${mm.by}, ${ends}: ` +
    `${mm.reason} · no automatic balance moves; failure recovery goes on`;
}

// One round of reads into `S`; false when this node did not answer (nothing to render).
async function load(S) {
  const h = await getJSON("/v1/health");
  if (!h.ok || !h.body) {
    $("conn").className = "dot dot-down";
    fill($("updated"), `this node does not answer (${errorText(h)}); last update ${fmtAgo(S.lastOk)}`);
    return false;
  }
  S.home = h.body;
  // What the cluster's settings lack (say no store: every checkpoint fenced), kept in view.
  const warned = Array.isArray(h.body.warnings) ? h.body.warnings : [];
  fill($("cluster-warnings"), warned.join(" · "));
  $("cluster-warnings").hidden = !warned.length;
  // Maintenance mode: no automatic balance moves until it ends; recovery goes on.
  const mm = h.body.maintenance;
  fill($("maintenance"), mm ? maintenanceText(mm) : "");
  $("maintenance").hidden = !mm;
  const listed = Array.isArray(h.body.nodes) && h.body.nodes.length ? h.body.nodes : [];
  const nodes = listed.length ? listed : [{ id: h.body.node_id, url: "" }];
  const lb = leaderBase(S.home);
  const remoteLeader = lb !== null && lb !== "";
  const selected = S.selected;
  const scope = S.pipeline; // a pipeline chosen meanwhile is read by the next refresh
  const q = pipelineQuery(S);
  const [healths, parts, leaderParts, migs, workers, hist, members, status, known] =
    await Promise.all([
      Promise.all(nodes.map((n) => (n.id === h.body.node_id
        ? h : getJSON(`${baseOf(S.home, n.id, n.url)}/v1/health`)))),
      getJSON(`/v1/partitions${q}`),
      remoteLeader ? getJSON(`${lb}/v1/partitions${q}`) : null,
      getJSON(`/v1/migrations${q}`),
      loadWorkers(lb),
      selected === null ? null : getJSON(`/v1/partitions/${selected}/history${q}`),
      // The voters as the leader's log says, with the membership change in flight there.
      getJSON(remoteLeader ? `${lb}/v1/nodes` : "/v1/nodes"),
      // The newest rescale and its progress (replicated state: any node has it).
      getJSON("/v1/status"),
      loadPipelines(S),
    ]);
  S.membership = members.ok ? members.body : null;
  S.nodes = nodes.map((n, i) => ({
    id: n.id,
    url: n.url,
    health: healths[i].ok ? healths[i].body : null,
    error: healths[i].ok ? null : errorText(healths[i]),
  }));
  const problems = [];
  if (known.ok) {
    S.pipelines = known.pipelines;
    S.pipelineDetails = known.details;
    const cut = known.pipelines.length - known.details.size;
    S.pipelinesNote = cut > 0 ? `${cut} not described this refresh (no health shown): ` +
      "ripple pipelines describe NAME has it" : "";
  } else problems.push(`pipelines: ${known.error}`);
  if (scope !== S.pipeline) return true; // answers about the pipeline shown before
  if (known.ok && !S.pipelines.some((p) => p.name === scope)) {
    // Dropped (or never there): back to `default`, read by the next refresh.
    S.pipeline = DEFAULT_PIPELINE;
    S.selected = null;
    S.history = null;
    S.partitions = [];
    S.migrations = [];
    return true;
  }
  if (parts.ok) {
    S.partitions = parts.body.partitions || [];
    S.stale = !!parts.body.stale;
    if (leaderParts && leaderParts.ok && leaderParts.body) {
      mergeLeaderOnly(S.partitions, leaderParts.body.partitions || []);
    }
  } else problems.push(`partitions: ${errorText(parts)}`);
  if (migs.ok) S.migrations = migs.body.migrations || [];
  else problems.push(`migrations: ${errorText(migs)}`);
  if (status.ok) S.newestRescale = status.body.rescale || null;
  else problems.push(`status: ${errorText(status)}`);
  if (workers) {
    S.workers = workers.list;
    S.workersFromLeader = workers.fromLeader;
  } else problems.push("workers: no node answered");
  if (hist && selected === S.selected) S.history = hist.ok ? hist.body : null;
  S.lastOk = Date.now();
  $("conn").className = problems.length ? "dot dot-warn" : "dot dot-ok";
  fill($("updated"), `updated ${fmtTime(S.lastOk)} · every ${Math.round(pauseMs(S) / 1000)} s`);
  if (problems.length) banner(problems.join(" · "), "warn");
  else if ($("banner").classList.contains("banner-warn")) banner(null);
  return true;
}

// The leader-only fields of the leader's answer, onto this node's view of the same
// partition at the same owner and epoch (else they describe something this view lacks).
function mergeLeaderOnly(local, fromLeader) {
  const byPartition = new Map(fromLeader.map((p) => [p.partition, p]));
  for (const p of local) {
    const l = byPartition.get(p.partition);
    if (!l || l.owner !== p.owner || l.epoch !== p.epoch) continue;
    for (const k of LEADER_PARTITION_FIELDS) if (l[k] !== undefined) p[k] = l[k];
  }
}

// {ok, pipelines, details} of /v1/pipelines and the describes of the first
// PIPELINES_DESCRIBED_MAX of them (`default` and the selected one among them); {ok: false,
// error} when the list did not come. A describe that failed leaves its pipeline out of
// `details`: its health shows as unknown.
async function loadPipelines(S) {
  const r = await getJSON("/v1/pipelines");
  if (!r.ok || !r.body) return { ok: false, error: errorText(r) };
  const pipelines = r.body.pipelines || [];
  const first = pipelines.filter((p) => p.name === S.pipeline);
  const described = [...first, ...pipelines.filter((p) => p.name !== S.pipeline)]
    .slice(0, PIPELINES_DESCRIBED_MAX);
  const answers = [];
  for (let i = 0; i < described.length; i += DESCRIBES_IN_FLIGHT_MAX) {
    answers.push(...await Promise.all(described.slice(i, i + DESCRIBES_IN_FLIGHT_MAX)
      .map((p) => getJSON(`/v1/pipelines/${encodeURIComponent(p.name)}`))));
  }
  const details = new Map();
  described.forEach((p, i) => {
    if (answers[i].ok && answers[i].body) details.set(p.name, answers[i].body);
  });
  return { ok: true, pipelines, details };
}

// Liveness and load are known to the leader only: ask it, or fall back to this node.
async function loadWorkers(lb) {
  if (lb !== null && lb !== "") {
    const r = await getJSON(`${lb}/v1/workers`);
    if (r.ok && r.body) return { list: r.body.workers || [], fromLeader: true };
  }
  const r = await getJSON("/v1/workers");
  if (!r.ok || !r.body) return null;
  return { list: r.body.workers || [], fromLeader: lb === "" };
}
