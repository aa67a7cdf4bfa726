// A previewed reassign (admin): the moves of its dry run, Apply and Cancel. A balance plan
// shows under the grid (#balance-plan), a move plan inside the partition's detail.

import { adminPost } from "./actions.js";
import { $, append, el, fill } from "./dom.js";
import { plural } from "./format.js";
import { ownerLabel } from "./widgets.js";

const PLAN_SHOWN_MAX = 50; // moves listed in a preview; the rest are counted

export function planView(app) {
  const S = app.state;
  const plan = S.plan;
  const box = el("div", { class: "plan-body", id: "plan" });
  const cancel = el("button", { type: "button", id: "plan-cancel" },
    plan.moves.length ? "Cancel" : "Close");
  cancel.addEventListener("click", () => {
    S.plan = null;
    app.renderPlans();
  });
  if (!plan.moves.length) {
    append(box, [el("p", { class: "muted" }, "Nothing to move: the plan is empty."), cancel]);
    return box;
  }
  const apply = el("button", { type: "button", id: "plan-apply", class: "primary" },
    `Apply ${plural(plan.moves.length, "move")}`);
  apply.addEventListener("click", async () => {
    apply.disabled = true;
    const r = await adminPost(app, plan.path, { ...plan.request, dry_run: false },
      (b) => `reassign started: ${(b.migrations || []).length} migrations`);
    if (r.ok) S.plan = null;
    app.renderPlans();
  });
  append(box, [
    el("p", { class: "small" }, "Dry run: nothing has changed yet."),
    el("ul", { class: "plain moves" }, plan.moves.slice(0, PLAN_SHOWN_MAX).map((mv) =>
      el("li", {}, `partition ${mv.partition}: `, ownerLabel(S, mv.from), " → ",
        ownerLabel(S, mv.to)))),
    plan.moves.length > PLAN_SHOWN_MAX
      ? el("p", { class: "muted" }, `… and ${plan.moves.length - PLAN_SHOWN_MAX} more`) : null,
    el("div", { class: "form-row" }, apply, " ", cancel),
  ]);
  return box;
}

// The balance plan's box, rebuilt only when the plan changes (a refresh keeps it as it is).
export function renderBalancePlan(app) {
  const plan = app.state.plan;
  const box = $("balance-plan");
  const key = plan && plan.kind === "balance" ? String(plan.id) : "";
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  if (key) {
    fill(box, el("h3", {}, "Balance plan"), planView(app));
    box.hidden = false;
  } else {
    box.hidden = true;
    box.replaceChildren();
  }
}
