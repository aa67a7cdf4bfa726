// The page's state: one object, made here, handed to every module through the app context
// (`app.state`). The refresh loop (refresh.js) writes what the nodes answered; actions.js
// writes the admin token and the plan; the panels only read it. Nothing else is kept between
// refreshes, so a render is a function of this object and the clock.

const TOKEN_KEY = "ripple.adminToken";
// The cluster's own partition table, listed first by /v1/pipelines; never a record.
export const DEFAULT_PIPELINE = "default";

export function createState() {
  return {
    home: null, // this node's /v1/health
    nodes: [], // [{id, url, health|null, error}]
    membership: null, // the leader's /v1/nodes (voters, change in flight), or this node's
    partitions: [],
    workers: [],
    workersFromLeader: false,
    migrations: [],
    newestRescale: null, // /v1/status's newest rescale (null: never rescaled)
    history: null, // {partition, history} of the selected partition
    selected: null,
    pipelines: [], // /v1/pipelines's list, `default` first
    pipelineDetails: new Map(), // name -> its /v1/pipelines/{name} (those this refresh described)
    pipelinesNote: "", // what the list leaves out (pipelines not described), or ""
    pipeline: DEFAULT_PIPELINE, // whose partitions and migrations the page reads
    stale: true,
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    lastOk: 0,
    lastDurationMs: 0,
    plan: null, // {id, kind: "balance"|"move", path (the pipeline's reassign), request, moves}
    moveTarget: "",
    plans: 0, // plans made so far: a plan's identity for re-rendering
    armed: new Map(), // confirm-button key -> time its confirmation lapses
  };
}

// What the page's partition and migration reads add for the pipeline on show: nothing for
// `default` (exactly the reads of a cluster with no pipeline records), else ?pipeline=NAME.
export function pipelineQuery(state) {
  if (state.pipeline === DEFAULT_PIPELINE) return "";
  return `?pipeline=${encodeURIComponent(state.pipeline)}`;
}

// The admin token lives in this tab's sessionStorage only: a reload keeps it, a new tab
// (or a closed browser) does not.
export function setToken(state, token) {
  state.token = token;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}
