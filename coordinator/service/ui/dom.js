// Building the page's elements. Every value reaches the DOM as text (textContent / text
// nodes), never as HTML: this module is the only one that creates nodes, and it has no way
// to parse markup.

export const $ = (id) => document.getElementById(id);

// An element with properties and children: `class`, `on` (event -> listener), `data`
// (dataset), `color` (the --owner custom property), boolean `hidden` / `disabled`, and any
// other key as an attribute. null, undefined and false skip a property or a child.
export function el(tag, props, ...children) {
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

export function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

export function badge(text, kind) {
  return el("span", { class: `badge badge-${kind}` }, text);
}

// The one-line message under the top bar; no text hides it.
export function banner(text, kind) {
  const b = $("banner");
  if (!text) {
    b.hidden = true;
    return;
  }
  b.className = `banner banner-${kind || "info"}`;
  fill(b, text);
  b.hidden = false;
}
