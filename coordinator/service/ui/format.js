// Numbers, times and odd values as the page writes them: pure functions of their argument
// (and of the clock, for "ago"), "—" for anything missing.

export function fmtInt(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : "—";
}

// An input rate in records per second, as the owners report them in heartbeats.
export function fmtRate(r) {
  return `${r.toLocaleString("en-US", { maximumFractionDigits: 1 })}/s`;
}

export function fmtAgo(ms) {
  if (typeof ms !== "number" || ms <= 0) return "—";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return `${(s / 86400).toFixed(1)} d ago`;
}

export function fmtAge(ms) {
  if (typeof ms !== "number") return "—";
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

export function fmtTime(ms) {
  return typeof ms === "number" && ms > 0 ? new Date(ms).toLocaleTimeString("en-GB") : "—";
}

// Any value a newer API may add, short enough for a table cell.
export function describe(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return fmtInt(value);
  if (typeof value === "object") {
    const text = JSON.stringify(value);
    return text.length > 120 ? `${text.slice(0, 117)}…` : text;
  }
  return String(value);
}

// "1 move", "3 moves".
export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
