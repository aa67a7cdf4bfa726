// Talking to the nodes: one bounded request, its answer as {ok, status, body} (never a
// throw), and which base URL reaches a node. Knows nothing of the page.

const FETCH_TIMEOUT_MS = 5000; // one request, then it counts as failed

export async function request(url, options) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  try {
    const resp = await fetch(url, { cache: "no-store", ...options, signal: ctl.signal });
    if (resp.type === "opaqueredirect") return { ok: false, status: 307, redirect: true };
    let body = null;
    try {
      body = await resp.json();
    } catch (_) {
      body = null;
    }
    return { ok: resp.ok, status: resp.status, body };
  } catch (err) {
    const why = ctl.signal.aborted ? "timed out" : "unreachable";
    return { ok: false, status: 0, body: null, error: why };
  } finally {
    clearTimeout(timer);
  }
}

export const getJSON = (url) => request(url, { method: "GET" });

export function errorText(r) {
  if (r.error) return r.error;
  const b = r.body || {};
  return `${r.status}${b.error ? ` ${b.error}` : ""}${b.message ? `: ${b.message}` : ""}`;
}

// The base URL of a node for fetch: "" for the node that served this page (same origin,
// whatever name the browser used for it), its configured URL for the others. `home` is
// this node's /v1/health.
export function baseOf(home, nodeId, url) {
  if (home && nodeId === home.node_id) return "";
  return (url || "").replace(/\/+$/, "");
}

// The leader's base URL as this node knows it; null while it knows none.
export function leaderBase(home) {
  if (!home || !home.leader_id) return null;
  return baseOf(home, home.leader_id, home.leader_url);
}
