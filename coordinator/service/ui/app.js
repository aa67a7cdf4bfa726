// Ripple dashboard: reads the public /v1 API of the node that served it (and the other
// nodes' /v1/health, and the leader's /v1/workers for liveness), renders it, and refreshes
// by itself: one refresh at a time, the next one a pause after the last one ended (longer
// when refreshes are slow, so a big cluster is not polled harder than it answers).
// Every value reaches the DOM as text (textContent / text nodes), never as HTML.
// Writes happen only after an admin token is entered; they go to the leader's URL.
"use strict";

(() => {
  const REFRESH_MS = 2000; // pause between the end of one refresh and the next, at least
  const REFRESH_MAX_MS = 30000; // ... and at most, however slow the last refresh was
  const GRID_CELLS_MAX = 4096; // partitions drawn in the grid; the rest are counted
  const FETCH_TIMEOUT_MS = 5000; // one request, then it counts as failed
  const CONFIRM_MS = 5000; // a "confirm" button turns back after this
  const HISTORY_SHOWN_MAX = 40;
  const FINISHED_MIGRATIONS_SHOWN_MAX = 8;
  const BARS_SHOWN_MAX = 6; // partitions per bar chart
  const FAILING_SHOWN_MAX = 10;
  const PLAN_SHOWN_MAX = 50; // moves listed in a preview; the rest are counted
  const TOKEN_KEY = "ripple.adminToken";
  const PALETTE = [
    "#2563eb", "#16a34a", "#ea580c", "#7c3aed", "#0891b2",
    "#db2777", "#65a30d", "#b45309", "#4f46e5", "#0d9488",
  ];
  const STEPS = ["planned", "warming", "releasing", "handed_off", "done"];
  const RESCALE_STEPS = ["cutting", "moving", "hosting", "done"];
  const REASONS = {
    assigned: "placed by the leader while it had no owner",
    failure: "its previous owner was declared dead",
    migration: "moved here by an operator's reassign",
    drain: "moved here because its previous owner was drained",
    restart: "its owner re-registered (new process): re-hosted at a new epoch",
    abort: "a migration away from here was aborted: it stayed with its owner",
    fallback: "its recorded checkpoint could not be loaded: hosted again from an older one",
    reset: "an operator discarded its checkpoints: replayed from the source",
  };
  // Worker fields the workers table shows; any other field an answer carries (lag, batch
  // failures, ... added by newer versions) is shown as-is in the pipeline panel.
  const WORKER_FIELDS = new Set([
    "worker_id", "address", "incarnation", "state", "registered_at_ms", "partitions",
    "liveness", "load", "failing_partitions", "lag_records", "rate_per_s",
  ]);
  const HISTORY_FIELDS = new Set(["epoch", "owner", "reason", "at_ms"]);
  const LEADER_PARTITION_FIELDS = ["failing", "offset", "lag_records", "rate_per_s"];

  const S = {
    home: null, // this node's /v1/health
    nodes: [], // [{id, url, health|null, error}]
    membership: null, // the leader's /v1/nodes (voters, change in flight), or this node's
    partitions: [],
    workers: [],
    workersFromLeader: false,
    migrations: [],
    rescale: null, // /v1/status's newest rescale (null: never rescaled)
    history: null, // {partition, history} of the selected partition
    selected: null,
    stale: true,
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    busy: false,
    again: false,
    timer: null,
    lastOk: 0,
    lastDurationMs: 0,
    plan: null, // {kind: "balance"|"move", request, moves}
    moveTarget: "",
    plans: 0, // plans made so far: a plan's identity for re-rendering
    armed: new Map(), // confirm-button key -> time its confirmation lapses
  };

  // -- DOM helpers -------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === "data") for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = String(dv);
      else if (k === "color") node.style.setProperty("--owner", v);
      else if (k === "hidden" || k === "disabled") node[k] = true;
      else node.setAttribute(k, String(v));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function fill(node, ...children) {
    node.replaceChildren();
    append(node, children);
  }

  function badge(text, kind) {
    return el("span", { class: `badge badge-${kind}` }, text);
  }

  function fmtInt(n) {
    return typeof n === "number" ? n.toLocaleString("en-US") : "—";
  }

  // An input rate in records per second, as the owners report them in heartbeats.
  function fmtRate(r) {
    return `${r.toLocaleString("en-US", { maximumFractionDigits: 1 })}/s`;
  }

  function fmtAgo(ms) {
    if (typeof ms !== "number" || ms <= 0) return "—";
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
    return `${(s / 86400).toFixed(1)} d ago`;
  }

  function fmtAge(ms) {
    if (typeof ms !== "number") return "—";
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    if (s < 3600) return `${(s / 60).toFixed(1)} min`;
    return `${(s / 3600).toFixed(1)} h`;
  }

  function fmtTime(ms) {
    return typeof ms === "number" && ms > 0 ? new Date(ms).toLocaleTimeString("en-GB") : "—";
  }

  function describe(value) {
    if (value === null || value === undefined) return "—";
    if (typeof value === "number") return fmtInt(value);
    if (typeof value === "object") {
      const text = JSON.stringify(value);
      return text.length > 120 ? `${text.slice(0, 117)}…` : text;
    }
    return String(value);
  }

  function ownerColor(owner) {
    if (owner === null || owner === undefined) return null;
    const ids = S.workers.map((w) => w.worker_id).sort();
    let i = ids.indexOf(owner);
    if (i < 0) i = ids.length + [...owner].reduce((a, ch) => a + ch.charCodeAt(0), 0);
    if (i < PALETTE.length) return PALETTE[i];
    return `hsl(${Math.round((i * 137.508) % 360)} 62% 42%)`; // golden angle: distinct hues
  }

  function banner(text, kind) {
    const b = $("banner");
    if (!text) {
      b.hidden = true;
      return;
    }
    b.className = `banner banner-${kind || "info"}`;
    fill(b, text);
    b.hidden = false;
  }

  // -- HTTP ----------------------------------------------------------------------------------

  async function request(url, options) {
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

  const getJSON = (url) => request(url, { method: "GET" });

  function errorText(r) {
    if (r.error) return r.error;
    const b = r.body || {};
    return `${r.status}${b.error ? ` ${b.error}` : ""}${b.message ? `: ${b.message}` : ""}`;
  }

  // The base URL of a node for fetch: "" for the node that served this page (same origin,
  // whatever name the browser used for it), its configured URL for the others.
  function baseOf(nodeId, url) {
    if (S.home && nodeId === S.home.node_id) return "";
    return (url || "").replace(/\/+$/, "");
  }

  function leaderBase() {
    const h = S.home;
    if (!h || !h.leader_id) return null;
    return baseOf(h.leader_id, h.leader_url);
  }

  // -- refresh loop ---------------------------------------------------------------------------

  function pauseMs() {
    return Math.min(REFRESH_MAX_MS, Math.max(REFRESH_MS, 3 * S.lastDurationMs));
  }

  function schedule() {
    clearTimeout(S.timer);
    S.timer = setTimeout(refresh, pauseMs());
  }

  // Refresh as soon as possible without ever running two refreshes at once.
  function refreshNow() {
    if (S.busy) {
      S.again = true;
      return;
    }
    clearTimeout(S.timer);
    refresh();
  }

  async function refresh() {
    if (S.busy) return;
    if (document.hidden) {
      schedule();
      return;
    }
    S.busy = true;
    $("conn").className = "dot dot-busy";
    try {
      const started = performance.now();
      await load();
      S.lastDurationMs = performance.now() - started;
    } catch (err) {
      // A rendering bug must not stop the loop; say so where a person looks.
      banner(`dashboard error: ${err && err.message ? err.message : err}`, "error");
    } finally {
      S.busy = false;
      if (S.again) {
        S.again = false;
        refreshNow();
      } else {
        schedule();
      }
    }
  }

  function maintenanceText(mm) {
    const ends = mm.until_ms === null || mm.until_ms === undefined
      ? "until turned off"
      : `ends ${fmtTime(mm.until_ms)}`;
    return `Maintenance mode on since ${fmtTime(mm.since_ms)} by ${mm.by}, ${ends}: ` +
      `${mm.reason} · no automatic balance moves; failure recovery goes on`;
  }

  async function load() {
    const h = await getJSON("/v1/health");
    if (!h.ok || !h.body) {
      $("conn").className = "dot dot-down";
      fill($("updated"), `this node does not answer (${errorText(h)}); last update ${fmtAgo(S.lastOk)}`);
      return;
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
    const lb = leaderBase();
    const selected = S.selected;
    const [healths, parts, leaderParts, migs, workers, hist, members, status] = await Promise.all([
      Promise.all(
        nodes.map((n) => (n.id === h.body.node_id ? h : getJSON(`${baseOf(n.id, n.url)}/v1/health`))),
      ),
      getJSON("/v1/partitions"),
      // Lag and failing batches are known to the leader only (from heartbeats).
      lb !== null && lb !== "" ? getJSON(`${lb}/v1/partitions`) : null,
      getJSON("/v1/migrations"),
      loadWorkers(lb),
      selected === null ? null : getJSON(`/v1/partitions/${selected}/history`),
      // The voters as the leader's log says, with the membership change in flight there.
      getJSON(lb !== null && lb !== "" ? `${lb}/v1/nodes` : "/v1/nodes"),
      // The newest rescale and its progress (replicated state: any node has it).
      getJSON("/v1/status"),
    ]);
    S.membership = members.ok ? members.body : null;
    S.nodes = nodes.map((n, i) => ({
      id: n.id,
      url: n.url,
      health: healths[i].ok ? healths[i].body : null,
      error: healths[i].ok ? null : errorText(healths[i]),
    }));
    const problems = [];
    if (parts.ok) {
      S.partitions = parts.body.partitions || [];
      S.stale = !!parts.body.stale;
      if (leaderParts && leaderParts.ok && leaderParts.body) {
        mergeLeaderOnly(S.partitions, leaderParts.body.partitions || []);
      }
    } else problems.push(`partitions: ${errorText(parts)}`);
    if (migs.ok) S.migrations = migs.body.migrations || [];
    else problems.push(`migrations: ${errorText(migs)}`);
    if (status.ok) S.rescale = status.body.rescale || null;
    else problems.push(`status: ${errorText(status)}`);
    if (workers) {
      S.workers = workers.list;
      S.workersFromLeader = workers.fromLeader;
    } else problems.push("workers: no node answered");
    if (hist && selected === S.selected) S.history = hist.ok ? hist.body : null;
    S.lastOk = Date.now();
    $("conn").className = problems.length ? "dot dot-warn" : "dot dot-ok";
    fill($("updated"), `updated ${fmtTime(S.lastOk)} · every ${Math.round(pauseMs() / 1000)} s`);
    if (problems.length) banner(problems.join(" · "), "warn");
    else if ($("banner").classList.contains("banner-warn")) banner(null);
    render();
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

  // -- rendering -----------------------------------------------------------------------------

  function render() {
    renderHeader();
    renderStats();
    renderNodes();
    renderWorkers();
    renderGrid();
    renderDetail();
    renderMigrations();
    renderRescale();
    renderLag();
  }

  function renderHeader() {
    const h = S.home;
    const role = h.role === "leader" ? "leader" : h.role;
    const staleNote = S.stale ? " · local reads, may lag the leader" : "";
    fill($("served-by"), `served by ${h.node_id} (${role})${staleNote}`);
    const admin = !!S.token;
    document.body.classList.toggle("is-admin", admin);
    const st = $("admin-state");
    st.className = `badge ${admin ? "badge-admin" : "badge-ro"}`;
    fill(st, admin ? "admin" : "read-only");
    $("admin-token").hidden = admin;
    $("admin-unlock").hidden = admin;
    $("admin-lock").hidden = !admin;
  }

  function stat(label, value, sub, kind) {
    return el("div", { class: `stat${kind ? ` stat-${kind}` : ""}` },
      el("div", { class: "stat-label" }, label),
      el("div", { class: "stat-value" }, value),
      el("div", { class: "stat-sub" }, sub || ""));
  }

  function renderStats() {
    const h = S.home;
    const byStatus = { online: 0, assigning: 0, unassigned: 0 };
    for (const p of S.partitions) byStatus[p.status] = (byStatus[p.status] || 0) + 1;
    const active = S.workers.filter((w) => w.state === "active").length;
    const inFlight = S.migrations.filter((m) => !["done", "aborted"].includes(m.phase)).length;
    const reachable = S.nodes.filter((n) => n.health).length;
    const total = S.partitions.length;
    fill($("stats"),
      stat("Leader", h.leader_id || "none", h.leader_id ? `term ${h.term}` : "election in progress",
        h.leader_id ? "ok" : "bad"),
      stat("Nodes up", `${reachable} / ${S.nodes.length}`, "answering /v1/health",
        reachable === S.nodes.length ? "ok" : "warn"),
      stat("Workers active", `${active} / ${S.workers.length}`, "registered",
        active ? "ok" : "warn"),
      stat("Partitions online", `${byStatus.online} / ${total}`,
        `${byStatus.assigning} assigning · ${byStatus.unassigned} unassigned`,
        total && byStatus.online === total ? "ok" : "warn"),
      stat("Migrations in flight", String(inFlight), `of ${S.migrations.length} recorded`,
        inFlight ? "busy" : null),
      stat("Generation", fmtInt(h.cluster ? h.cluster.generation : null),
        `applied index ${fmtInt(h.applied_index)}`));
  }

  function roleBadge(role) {
    const kind = { leader: "ok", follower: "muted", candidate: "warn" }[role] || "muted";
    return badge(role, kind);
  }

  function renderNodes() {
    const rows = S.nodes.map((n) => {
      const h = n.health;
      const isHome = S.home && n.id === S.home.node_id;
      const name = el("td", {}, el("strong", {}, n.id), isHome ? el("span", { class: "tag" }, "this page") : null,
        el("div", { class: "mono muted addr", title: n.url }, n.url));
      if (!h) {
        return el("tr", { class: "row-down", data: { node: n.id } }, name,
          el("td", {}, badge("unreachable", "bad")),
          el("td", { colspan: 4, class: "muted" }, n.error || ""));
      }
      return el("tr", { data: { node: n.id } }, name,
        el("td", {}, roleBadge(h.role), h.role === "leader" && !h.ready ? badge("applying log", "warn") : null),
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

  function stateBadge(state) {
    const kind = { active: "ok", draining: "warn", dead: "bad", left: "muted" }[state] || "muted";
    return badge(state, kind);
  }

  function livenessCell(w) {
    if (w.liveness === null || w.liveness === undefined) {
      return el("td", { class: "muted", title: "liveness is known to the leader only" }, "—");
    }
    // restarting: the leader holds its partitions until it rejoins (rejoin_grace_s).
    const kinds = { alive: "ok", suspected: "warn", restarting: "wait", dead: "bad" };
    const kind = kinds[w.liveness] || "muted";
    return el("td", { class: "nowrap" }, el("span", { class: `dot dot-${kind}` }), ` ${w.liveness}`);
  }

  // A worker's load: its partitions' summed input rate while the leader has every one of
  // them fresh, else its partition count, labelled so the two are never confused.
  function loadCell(w) {
    if (typeof w.rate_per_s === "number") {
      return el("td", { class: "num", title: "summed input rate of its partitions" }, fmtRate(w.rate_per_s));
    }
    return el("td", { class: "num muted", title: "no fresh input rate for all its partitions: its partition count" },
      `${fmtInt(w.partitions)} (count)`);
  }

  // partition -> the newest checkpoint age per owner, for "oldest checkpoint" per worker.
  function oldestCheckpointByOwner() {
    const now = Date.now();
    const oldest = new Map();
    for (const p of S.partitions) {
      if (!p.owner || p.status !== "online") continue;
      const age = p.checkpoint ? now - p.checkpoint.at_ms : null;
      const prev = oldest.get(p.owner);
      if (prev === undefined) oldest.set(p.owner, age);
      else if (age === null || (prev !== null && age > prev)) oldest.set(p.owner, age);
    }
    return oldest;
  }

  function renderWorkers() {
    const oldest = oldestCheckpointByOwner();
    const admin = !!S.token;
    const rows = S.workers.map((w) => {
      const age = oldest.get(w.worker_id);
      const chip = el("span", { class: "chip", color: ownerColor(w.worker_id) });
      let action = null;
      if (admin && w.state === "active") {
        action = confirmButton(`drain:${w.worker_id}`, "Drain", `Drain ${w.worker_id}?`, () =>
          adminPost(`/v1/workers/${encodeURIComponent(w.worker_id)}/drain`, null,
            (r) => `drain of ${w.worker_id} started: ${(r.migrations || []).length} migrations`));
      }
      return el("tr", { data: { worker: w.worker_id } },
        el("td", {}, chip, el("strong", {}, w.worker_id),
          el("span", { class: "muted small", title: "incarnation" }, ` #${w.incarnation}`),
          el("div", { class: "mono muted addr", title: w.address }, w.address)),
        el("td", {}, stateBadge(w.state),
          w.failing_partitions ? badge(`${w.failing_partitions} failing`, "bad") : null),
        livenessCell(w),
        loadCell(w),
        el("td", { class: "num" }, fmtInt(w.partitions)),
        el("td", { class: "num", title: "records not processed yet (reported in heartbeats)" },
          typeof w.lag_records === "number" ? fmtInt(w.lag_records) : "—"),
        el("td", { class: "num" }, age === undefined ? "—" : age === null ? "none yet" : fmtAge(age)),
        el("td", { class: "admin-only" }, action));
    });
    fill($("workers-table").tBodies[0], rows.length ? rows : [
      el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no worker registered yet")),
    ]);
    const active = S.workers.filter((w) => w.state === "active").length;
    fill($("workers-count"), `${active} active of ${S.workers.length}`);
    fill($("workers-note"), S.workersFromLeader ? ""
      : "Liveness and load are known to the leader only, and the leader did not answer.");
  }

  let cells = [];

  function renderGrid() {
    const grid = $("grid");
    const parts = S.partitions.slice(0, GRID_CELLS_MAX);
    if (cells.length !== parts.length) {
      cells = parts.map((p) => {
        const cell = el("button", { class: "cell", type: "button", role: "gridcell" },
          el("span", { class: "cell-p" }), el("span", { class: "cell-e" }));
        cell.addEventListener("click", () => select(p.partition));
        return cell;
      });
      fill(grid, cells);
    }
    const migrating = new Map();
    for (const m of S.migrations) {
      if (!["done", "aborted"].includes(m.phase)) migrating.set(m.partition, m);
    }
    parts.forEach((p, i) => {
      const cell = cells[i];
      const m = migrating.get(p.partition);
      let cls = `cell st-${p.status}`;
      if (m) cls += " migrating";
      if (p.failing) cls += " failing";
      if (p.partition === S.selected) cls += " selected";
      cell.className = cls;
      const color = ownerColor(p.owner);
      if (color) cell.style.setProperty("--owner", color);
      else cell.style.removeProperty("--owner");
      cell.dataset.partition = String(p.partition);
      cell.dataset.owner = p.owner || "";
      cell.dataset.status = p.status;
      cell.dataset.epoch = String(p.epoch);
      cell.firstChild.textContent = String(p.partition);
      cell.lastChild.textContent = `e${p.epoch}`;
      const moving = m ? ` · moving ${m.source} → ${m.target} (${m.phase})` : "";
      const lag = (typeof p.lag_records === "number" ? ` · lag ${fmtInt(p.lag_records)}` : "")
        + (typeof p.rate_per_s === "number" ? ` · ${fmtRate(p.rate_per_s)}` : "");
      const failing = p.failing ? ` · batches failing (${p.failing.failures}x)` : "";
      cell.title = `partition ${p.partition} · ${p.owner || "no owner"} · ${p.status} · epoch ${p.epoch}${moving}${lag}${failing}`;
    });
    const counts = new Map();
    for (const p of S.partitions) if (p.owner) counts.set(p.owner, (counts.get(p.owner) || 0) + 1);
    const owners = [...counts.keys()].sort();
    fill($("legend"),
      owners.map((o) => el("span", { class: "legend-item" },
        el("span", { class: "chip", color: ownerColor(o) }), `${o} `, el("span", { class: "muted" }, fmtInt(counts.get(o))))),
      el("span", { class: "legend-sep" }),
      el("span", { class: "legend-item" }, el("span", { class: "swatch sw-online" }), "online"),
      el("span", { class: "legend-item" }, el("span", { class: "swatch sw-assigning" }), "assigning"),
      el("span", { class: "legend-item" }, el("span", { class: "swatch sw-unassigned" }), "unassigned"),
      el("span", { class: "legend-item" }, el("span", { class: "swatch sw-migrating" }), "migrating"),
      el("span", { class: "legend-item" }, el("span", { class: "swatch sw-failing" }), "batches failing"));
    const cut = S.partitions.length - parts.length;
    fill($("partitions-count"), `${fmtInt(S.partitions.length)} · e = epoch${cut > 0
      ? ` · the first ${fmtInt(parts.length)} drawn; ripple partitions lists all` : ""}`);
  }

  function select(partition) {
    S.selected = partition;
    S.history = null;
    if (S.plan && S.plan.kind === "move") S.plan = null;
    for (const c of cells) c.classList.toggle("selected", c.dataset.partition === String(partition));
    renderDetail();
    refreshNow();
  }

  // Fields a newer API adds to an entry, shown as "name: value" rather than dropped.
  function extraFields(entry, known) {
    const extra = Object.entries(entry).filter(([k, v]) => !known.has(k) && v !== null && v !== "");
    return extra.map(([k, v]) => el("span", { class: "muted small" }, `${k.replaceAll("_", " ")}: ${describe(v)}`));
  }

  function kv(label, ...value) {
    return [el("dt", {}, label), el("dd", {}, ...value)];
  }

  function ownerLabel(owner) {
    if (!owner) return el("span", { class: "muted" }, "no owner");
    return el("span", { class: "owner" }, el("span", { class: "chip", color: ownerColor(owner) }), owner);
  }

  function renderDetail() {
    const box = $("detail");
    if (S.selected === null) return;
    const p = S.partitions.find((x) => x.partition === S.selected);
    fill($("detail-title"), String(S.selected));
    if (!p) {
      fill(box, el("p", { class: "muted" }, "not in the partition table"));
      renderMoveForm(null);
      return;
    }
    const hist = S.history && S.history.partition === p.partition ? S.history.history : null;
    const migs = S.migrations.filter((m) => m.partition === p.partition);
    const active = migs.find((m) => !["done", "aborted"].includes(m.phase));
    const ck = p.checkpoint;
    const facts = el("dl", { class: "kv" },
      kv("Owner", ownerLabel(p.owner)),
      kv("Status", badge(p.status, p.status === "online" ? "ok" : p.status === "assigning" ? "warn" : "muted")),
      kv("Epoch", fmtInt(p.epoch)),
      kv("Checkpoint", ck ? `offset ${fmtInt(ck.offset)} · epoch ${ck.epoch} · ${fmtAgo(ck.at_ms)}` : "none yet"),
      kv("Processed", typeof p.offset === "number"
        ? `offset ${fmtInt(p.offset)}${typeof p.lag_records === "number" ? ` · ${fmtInt(p.lag_records)} records behind the source` : ""}`
        : el("span", { class: "muted", title: "the leader learns it from the owner's heartbeats" }, "not reported")),
      kv("Input rate", typeof p.rate_per_s === "number" ? fmtRate(p.rate_per_s)
        : el("span", { class: "muted", title: "reported in the owner's heartbeats; stale after load_stale_s" }, "not reported")),
      p.failing ? kv("Batches", el("span", { class: "error-text" },
        `failing (${p.failing.failures} in a row): ${p.failing.error}`)) : null,
      kv("Migration", active ? `${active.id}: ${active.source} → ${active.target} (${active.phase})` : "none in flight"));
    const parts = [facts, el("h3", {}, "Why is it here")];
    if (hist === null) parts.push(el("p", { class: "muted" }, "loading history…"));
    else if (!hist.length) parts.push(el("p", { class: "muted" }, "no ownership change recorded"));
    else {
      const last = hist[hist.length - 1];
      const prev = hist.length > 1 ? hist[hist.length - 2] : null;
      const from = prev && prev.owner && prev.owner !== last.owner ? ` (from ${prev.owner})` : "";
      parts.push(el("p", { class: "why" },
        `${last.owner || "No owner"} since ${fmtTime(last.at_ms)}, epoch ${last.epoch}: `,
        REASONS[last.reason] || last.reason, from, "."));
      const items = hist.slice(-HISTORY_SHOWN_MAX).reverse().map((e) => el("li", {},
        el("span", { class: "tl-time" }, fmtTime(e.at_ms)),
        el("span", { class: "tl-epoch" }, `e${e.epoch}`),
        ownerLabel(e.owner),
        el("span", { class: `tl-reason r-${e.reason}` }, e.reason),
        el("span", { class: "muted small" }, REASONS[e.reason] || ""),
        extraFields(e, HISTORY_FIELDS)));
      parts.push(el("ol", { class: "timeline" }, items));
    }
    if (migs.length) {
      parts.push(el("h3", {}, "Migrations of this partition"));
      parts.push(el("ul", { class: "plain" }, migs.slice(0, 10).map((m) => el("li", {},
        el("span", { class: "mono" }, m.id), ` ${m.source} → ${m.target} · `,
        badge(m.phase, phaseKind(m.phase)), m.note ? el("span", { class: "muted" }, ` ${m.note}`) : null))));
    }
    fill(box, parts);
    renderMoveForm(p);
  }

  // The form is rebuilt only when what it offers changes, so a refresh never resets a
  // choice or swallows a click while the operator uses it.
  function renderMoveForm(p) {
    const box = $("detail-admin");
    const targets = p ? S.workers.filter((w) => w.state === "active" && w.worker_id !== p.owner) : [];
    const key = JSON.stringify([!!S.token, p && p.partition, p && p.owner,
      targets.map((w) => w.worker_id), S.plan && S.plan.kind === "move" ? S.plan.id : null]);
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    fill(box, S.token && p ? moveForm(p, targets) : null);
  }

  function moveForm(p, targets) {
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
      planReassign("move", { moves: [{ partition: p.partition, to: sel.value }] });
    });
    const box = el("div", { class: "admin-box" }, el("h3", {}, "Move this partition"),
      el("div", { class: "form-row" }, "to ", sel, " ", preview));
    if (!targets.length) fill(box, el("p", { class: "muted" }, "no other active worker to move it to"));
    if (S.plan && S.plan.kind === "move") box.appendChild(planView());
    return box;
  }

  function phaseKind(phase) {
    return { done: "ok", aborted: "bad", planned: "muted", warming: "info", releasing: "warn", handed_off: "info" }[phase] || "muted";
  }

  function progress(m) {
    const at = STEPS.indexOf(m.phase);
    return el("div", { class: "steps", title: m.phase },
      STEPS.map((s, i) => el("span", { class: `step${i <= at ? " step-done" : ""}${i === at ? " step-now" : ""}` },
        s.replace("_", " "))));
  }

  function renderMigrations() {
    const inFlight = S.migrations.filter((m) => !["done", "aborted"].includes(m.phase));
    const finished = S.migrations.filter((m) => ["done", "aborted"].includes(m.phase));
    const admin = !!S.token;
    const box = [];
    if (!inFlight.length) box.push(el("p", { class: "muted" }, "No migration in flight."));
    // Warm-ups: targets loading and following the source log while the source still serves.
    const warming = inFlight.filter((m) => m.phase === "warming").length;
    if (warming) box.push(el("p", { class: "small", data: { warmups: String(warming) } }, `${warming} warm-up${warming === 1 ? "" : "s"} in flight`));
    for (const m of inFlight) {
      let action = null;
      if (admin && ["planned", "warming", "releasing"].includes(m.phase)) {
        action = confirmButton(`abort:${m.id}`, "Abort", `Abort ${m.id}?`, () =>
          adminPost(`/v1/admin/migrations/${encodeURIComponent(m.id)}/abort`, null,
            (r) => `migration ${m.id}: ${r.phase}`));
      }
      box.push(el("div", { class: "mig", data: { migration: m.id } },
        el("div", { class: "mig-head" },
          el("button", { class: "link", type: "button", on: { click: () => select(m.partition) } }, `partition ${m.partition}`),
          " ", ownerLabel(m.source), " → ", ownerLabel(m.target),
          el("span", { class: "muted small" }, ` ${m.reason} · started ${fmtAgo(m.created_at_ms)}`),
          el("span", { class: "spacer" }), action),
        progress(m)));
    }
    if (finished.length) {
      box.push(el("h3", {}, "Recently finished"));
      box.push(el("table", { class: "table compact" }, el("tbody", {},
        finished.slice(0, FINISHED_MIGRATIONS_SHOWN_MAX).map((m) => el("tr", {},
          el("td", { class: "mono" }, m.id.slice(0, 12)),
          el("td", {}, `p${m.partition}`),
          el("td", {}, `${m.source} → ${m.target}`),
          el("td", {}, badge(m.phase, phaseKind(m.phase))),
          el("td", { class: "muted" }, m.reason),
          el("td", { class: "muted" }, fmtAgo(m.updated_at_ms)))))));
    }
    fill($("migrations"), box);
    fill($("migrations-count"), `${inFlight.length} in flight`);
  }

  // The routing generation (from this node's health) and the newest rescale: its phase
  // among cutting, moving, hosting, done, cuts recorded of the old count, new partitions
  // online of the new count.
  function renderRescale() {
    const c = S.home.cluster || {};
    const counts = Array.isArray(c.routing) ? c.routing : [];
    fill($("rescale-generation"), typeof c.routing_generation === "number"
      ? `routing generation ${c.routing_generation}` : "");
    const r = S.rescale;
    const box = $("rescale");
    if (!r) {
      box.dataset.phase = "none";
      fill(box, el("p", { class: "muted" },
        `No rescale yet: ${fmtInt(c.total_partitions)} partitions since the start.`));
      return;
    }
    box.dataset.phase = r.phase;
    const at = RESCALE_STEPS.indexOf(r.phase);
    const history = counts.length > 1 ? ` · partitions by generation ${counts.join(" → ")}` : "";
    fill(box,
      el("p", { class: "small" },
        `${fmtInt(r.previous)} → ${fmtInt(r.partitions)} partitions (routing generation ` +
        `${r.generation}) by ${r.by} · started ${fmtAgo(r.started_at_ms)} · ` +
        `updated ${fmtAgo(r.updated_at_ms)}${history}`),
      el("div", { class: "steps", title: r.phase },
        RESCALE_STEPS.map((s, i) => el("span", {
          class: `step${i <= at ? " step-done" : ""}${i === at ? " step-now" : ""}`,
        }, s.toLowerCase()))),
      el("div", { class: "rescale-counts" },
        el("span", { data: { cuts: `${r.cuts_done}/${r.previous}` } },
          `cuts ${fmtInt(r.cuts_done)} / ${fmtInt(r.previous)}`),
        el("span", { data: { online: `${r.online}/${r.partitions}` } },
          `online ${fmtInt(r.online)} / ${fmtInt(r.partitions)}`)));
  }

  // Horizontal bars, one per partition, scaled to the largest value shown.
  function bars(rows, valueOf, label) {
    const worst = Math.max(1, ...rows.map(valueOf));
    return el("div", { class: "bars" }, rows.map((p) => {
      const bar = el("span", { class: "bar-fill", color: ownerColor(p.owner) });
      bar.style.width = `${Math.max(2, Math.round((100 * valueOf(p)) / worst))}%`;
      return el("div", { class: "bar-row" },
        el("button", { class: "link", type: "button", on: { click: () => select(p.partition) } }, `p${p.partition}`),
        el("span", { class: "bar" }, bar),
        el("span", { class: "num small" }, label(p)));
    }));
  }

  function renderLag() {
    const now = Date.now();
    const online = S.partitions.filter((p) => p.status === "online");
    const withCk = S.partitions.filter((p) => p.checkpoint);
    const ages = withCk.map((p) => now - p.checkpoint.at_ms).sort((a, b) => a - b);
    const median = ages.length ? ages[Math.floor(ages.length / 2)] : null;
    const reporting = S.partitions.filter((p) => typeof p.lag_records === "number");
    const failing = S.partitions.filter((p) => p.failing);
    const totalLag = reporting.reduce((a, p) => a + p.lag_records, 0);
    const maxLag = reporting.reduce((a, p) => Math.max(a, p.lag_records), 0);
    const parts = [el("dl", { class: "kv" },
      kv("Behind the source", reporting.length
        ? `${fmtInt(totalLag)} records · largest ${fmtInt(maxLag)} · ${fmtInt(reporting.length)} of ${fmtInt(S.partitions.length)} partitions reporting`
        : el("span", { class: "muted" }, "no owner has reported where the source log ends")),
      kv("Failing batches", failing.length
        ? el("span", { class: "error-text" }, `${fmtInt(failing.length)} partition${failing.length === 1 ? "" : "s"}`)
        : "none reported"),
      kv("Checkpointed", `${fmtInt(withCk.length)} of ${fmtInt(S.partitions.length)} partitions · ${fmtInt(online.filter((p) => !p.checkpoint).length)} online without one`),
      kv("Checkpoint age", ages.length ? `median ${fmtAge(median)} · oldest ${fmtAge(ages[ages.length - 1])}` : "—"))];
    if (failing.length) {
      parts.push(el("h3", {}, "Failing batches"));
      parts.push(el("ul", { class: "plain failing-list" }, failing.slice(0, FAILING_SHOWN_MAX).map((p) => el("li", {},
        el("button", { class: "link", type: "button", on: { click: () => select(p.partition) } }, `p${p.partition}`),
        ` ${p.owner} · ${p.failing.failures} in a row · `,
        el("span", { class: "error-text mono" }, p.failing.error)))));
    }
    const behind = reporting.filter((p) => p.lag_records > 0)
      .sort((a, b) => b.lag_records - a.lag_records).slice(0, BARS_SHOWN_MAX);
    if (behind.length) {
      parts.push(el("h3", {}, "Furthest behind"));
      parts.push(bars(behind, (p) => p.lag_records, (p) => fmtInt(p.lag_records)));
    }
    const stalest = withCk.slice().sort((a, b) => a.checkpoint.at_ms - b.checkpoint.at_ms).slice(0, BARS_SHOWN_MAX);
    if (stalest.length) {
      parts.push(el("h3", {}, "Stalest checkpoints"));
      parts.push(bars(stalest, (p) => now - p.checkpoint.at_ms, (p) => fmtAge(now - p.checkpoint.at_ms)));
    }
    // Whatever else the workers' answers carry, from a newer version of the API.
    const extra = [];
    for (const w of S.workers) {
      for (const [k, v] of Object.entries(w)) {
        if (!WORKER_FIELDS.has(k) && v !== null && v !== undefined) extra.push([w.worker_id, k, v]);
      }
    }
    if (extra.length) {
      parts.push(el("h3", {}, "Also reported by workers"));
      parts.push(el("table", { class: "table compact" }, el("tbody", {},
        extra.map(([wid, k, v]) => el("tr", {}, el("td", {}, wid), el("td", { class: "muted" }, k.replaceAll("_", " ")),
          el("td", { class: "mono" }, describe(v)))))));
    }
    if (!S.workersFromLeader) {
      parts.push(el("p", { class: "note" },
        "Lag and failing batches are known to the leader only, and the leader did not answer."));
    }
    fill($("lag"), parts);
  }

  // -- admin ---------------------------------------------------------------------------------

  function randomKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  // POST to the leader's own URL (a follower would answer 307, and a browser drops the
  // Authorization header when it follows a redirect to another origin). If leadership
  // moved meanwhile, learn the new leader and try once more with the same idempotency key.
  async function adminWrite(path, body, token) {
    const key = randomKey();
    let last = null;
    for (let attempt = 0; attempt < 2; attempt++) {
      const base = leaderBase();
      if (base === null) return { ok: false, status: 503, body: { message: "no leader known" } };
      const headers = { Authorization: `Bearer ${token}`, "Idempotency-Key": key };
      if (body !== null) headers["Content-Type"] = "application/json";
      last = await request(`${base}${path}`, {
        method: "POST",
        headers,
        body: body === null ? undefined : JSON.stringify(body),
        redirect: "manual",
      });
      if (!last.redirect) return last;
      const h = await getJSON("/v1/health");
      if (h.ok && h.body) S.home = h.body;
    }
    return last;
  }

  async function adminPost(path, body, describeOk) {
    const r = await adminWrite(path, body, S.token);
    if (r.ok) banner(describeOk(r.body || {}), "ok");
    else {
      banner(`${path}: ${errorText(r)}`, "error");
      if (r.status === 401 || r.status === 403) lock();
    }
    refreshNow();
    return r;
  }

  // A two-click button. Tables are rebuilt on every refresh, so whether it is waiting for
  // the second click lives in S.armed under `key`, not in the element.
  function confirmButton(key, label, question, action) {
    const isArmed = () => (S.armed.get(key) || 0) > Date.now();
    const b = el("button", { type: "button", class: "small danger" }, label);
    const show = () => {
      const armed = isArmed();
      b.textContent = armed ? question : label;
      b.classList.toggle("armed", armed);
    };
    show();
    b.addEventListener("click", async () => {
      if (!isArmed()) {
        S.armed.set(key, Date.now() + CONFIRM_MS);
        show();
        setTimeout(show, CONFIRM_MS + 50);
        return;
      }
      S.armed.delete(key);
      b.disabled = true;
      await action();
    });
    return b;
  }

  async function planReassign(kind, request) {
    const r = await adminWrite("/v1/admin/reassign", { ...request, dry_run: true }, S.token);
    if (!r.ok) {
      banner(`reassign preview: ${errorText(r)}`, "error");
      S.plan = null;
    } else {
      S.plan = { id: ++S.plans, kind, request, moves: (r.body && r.body.migrations) || [] };
    }
    renderPlan();
    renderDetail();
  }

  function planView() {
    const plan = S.plan;
    const box = el("div", { class: "plan-body", id: "plan" });
    const cancel = el("button", { type: "button", id: "plan-cancel" }, plan.moves.length ? "Cancel" : "Close");
    cancel.addEventListener("click", () => {
      S.plan = null;
      renderPlan();
      renderDetail();
    });
    if (!plan.moves.length) {
      append(box, [el("p", { class: "muted" }, "Nothing to move: the plan is empty."), cancel]);
      return box;
    }
    const apply = el("button", { type: "button", id: "plan-apply", class: "primary" },
      `Apply ${plan.moves.length} move${plan.moves.length === 1 ? "" : "s"}`);
    apply.addEventListener("click", async () => {
      apply.disabled = true;
      const r = await adminPost("/v1/admin/reassign", { ...plan.request, dry_run: false },
        (b) => `reassign started: ${(b.migrations || []).length} migrations`);
      if (r.ok) S.plan = null;
      renderPlan();
      renderDetail();
    });
    append(box, [
      el("p", { class: "small" }, "Dry run: nothing has changed yet."),
      el("ul", { class: "plain moves" }, plan.moves.slice(0, PLAN_SHOWN_MAX).map((mv) =>
        el("li", {}, `partition ${mv.partition}: `, ownerLabel(mv.from), " → ", ownerLabel(mv.to)))),
      plan.moves.length > PLAN_SHOWN_MAX
        ? el("p", { class: "muted" }, `… and ${plan.moves.length - PLAN_SHOWN_MAX} more`) : null,
      el("div", { class: "form-row" }, apply, " ", cancel),
    ]);
    return box;
  }

  function renderPlan() {
    const box = $("balance-plan");
    const key = S.plan && S.plan.kind === "balance" ? String(S.plan.id) : "";
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    if (key) {
      fill(box, el("h3", {}, "Balance plan"), planView());
      box.hidden = false;
    } else {
      box.hidden = true;
      box.replaceChildren();
    }
  }

  function lock() {
    S.token = "";
    S.plan = null;
    sessionStorage.removeItem(TOKEN_KEY);
    if (S.home) render();
  }

  async function unlock(ev) {
    ev.preventDefault();
    const input = $("admin-token");
    const token = input.value.trim();
    if (!token) return;
    // A dry-run balance checks the token on the leader and changes nothing.
    const r = await adminWrite("/v1/admin/reassign", { strategy: "balance", dry_run: true }, token);
    if (r.ok) {
      S.token = token;
      sessionStorage.setItem(TOKEN_KEY, token);
      input.value = "";
      banner("admin mode: reassign, drain and abort are enabled for this tab", "ok");
    } else {
      banner(`admin token not accepted: ${errorText(r)}`, "error");
    }
    if (S.home) render();
  }

  $("admin-form").addEventListener("submit", unlock);
  $("admin-lock").addEventListener("click", () => {
    lock();
    banner("read-only again", "info");
  });
  $("balance-preview").addEventListener("click", () => planReassign("balance", { strategy: "balance" }));
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refreshNow();
  });
  refresh();
})();
