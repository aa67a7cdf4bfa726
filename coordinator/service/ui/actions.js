// Writes, with the admin token: unlocking and locking admin mode, the POSTs (drain, abort,
// reassign) and its dry runs, and the two-click button that guards each. Nothing is written
// without a token, and every write goes to the leader's own URL.

import { errorText, getJSON, leaderBase, request } from "./api.js";
import { $, banner, el } from "./dom.js";
import { pipelineQuery, setToken } from "./store.js";

const CONFIRM_MS = 5000; // a "confirm" button turns back after this

function randomKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

// POST to the leader's own URL (a follower would answer 307, and a browser drops the
// Authorization header when it follows a redirect to another origin). If leadership
// moved meanwhile, learn the new leader and try once more with the same idempotency key.
async function adminWrite(app, path, body, token) {
  const key = randomKey();
  let last = null;
  for (let attempt = 0; attempt < 2; attempt++) {
    const base = leaderBase(app.state.home);
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
    if (h.ok && h.body) app.state.home = h.body;
  }
  return last;
}

// A write with this tab's token; says how it went in the banner and refreshes. A token the
// leader refuses locks admin mode again.
export async function adminPost(app, path, body, describeOk) {
  const r = await adminWrite(app, path, body, app.state.token);
  if (r.ok) banner(describeOk(r.body || {}), "ok");
  else {
    banner(`${path}: ${errorText(r)}`, "error");
    if (r.status === 401 || r.status === 403) lock(app);
  }
  app.refreshNow();
  return r;
}

// A two-click button. Tables are rebuilt on every refresh, so whether it is waiting for
// the second click lives in the state's `armed` under `key`, not in the element.
export function confirmButton(app, key, label, question, action) {
  const armed = app.state.armed;
  const isArmed = () => (armed.get(key) || 0) > Date.now();
  const b = el("button", { type: "button", class: "small danger" }, label);
  const show = () => {
    const on = isArmed();
    b.textContent = on ? question : label;
    b.classList.toggle("armed", on);
  };
  show();
  b.addEventListener("click", async () => {
    if (!isArmed()) {
      armed.set(key, Date.now() + CONFIRM_MS);
      show();
      setTimeout(show, CONFIRM_MS + 50);
      return;
    }
    armed.delete(key);
    b.disabled = true;
    await action();
  });
  return b;
}

// A reassign's dry run: the moves it would make become the plan on show.
export async function planReassign(app, kind, req) {
  const S = app.state;
  const path = `/v1/admin/reassign${pipelineQuery(S)}`; // moves number the pipeline's own
  const r = await adminWrite(app, path, { ...req, dry_run: true }, S.token);
  if (!r.ok) {
    banner(`reassign preview: ${errorText(r)}`, "error");
    S.plan = null;
  } else {
    S.plan = {
      id: ++S.plans, kind, path, request: req, moves: (r.body && r.body.migrations) || [],
    };
  }
  app.renderPlans();
}

export function lock(app) {
  setToken(app.state, "");
  app.state.plan = null;
  if (app.state.home) app.render();
}

export async function unlock(app, ev) {
  ev.preventDefault();
  const input = $("admin-token");
  const token = input.value.trim();
  if (!token) return;
  // A dry-run balance checks the token on the leader and changes nothing.
  const r = await adminWrite(app, "/v1/admin/reassign", { strategy: "balance", dry_run: true },
    token);
  if (r.ok) {
    setToken(app.state, token);
    input.value = "";
    banner("admin mode: reassign, drain and abort are enabled for this tab", "ok");
  } else {
    banner(`admin token not accepted: ${errorText(r)}`, "error");
  }
  if (app.state.home) app.render();
}
