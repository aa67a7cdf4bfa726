"""The tables the `ripple` read commands print: one renderer per answer (status, partitions,
workers, migrations, nodes), each taking the JSON body the HTTP API returns. A missing value
prints as "-"; columns are padded to their widest cell. A rate prints as "12.5/s"; a
worker's load is its summed rate when the leader has every one of its partitions' fresh,
else its partition count as "count=3", so a reader sees which the figure is.
"""

from __future__ import annotations

import datetime
from typing import Any

from ripple.maintenance import maintenance_line
from ripple.rescale import rescale_line

__all__ = [
    "render_membership",
    "render_migrations",
    "render_nodes",
    "render_partitions",
    "render_status",
    "render_workers",
    "table",
]


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[("-" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def render_status(s: dict[str, Any]) -> str:
    c = s["cluster"]
    lines = [
        f"node {s['node_id']} ({s['role']}), leader {s['leader_id']}, term {s['term']}, "
        f"applied {s['applied_index']}{' (stale)' if s['stale'] else ''}",
        f"workers: {c['active_workers']} active / {c['total_workers']} total   "
        f"partitions: {c['total_partitions']}   generation: {c['generation']}   "
        f"migrations in flight: {s['migrations_in_flight']}",
        _routing_line(c),
        "partitions by status: "
        + ", ".join(f"{k}={v}" for k, v in sorted(s["partitions_by_status"].items())),
        f"command set: finalized at version {s['finalized_command_set_version']}",
    ]
    records = {c["node_id"]: c for c in s["coordinators"]}
    rows = [
        [
            node_id,
            "yes" if node_id in s["voters"] else "no",
            None if c is None else c["package_version"],
            None if c is None else f"{c['min_version']}..{c['max_version']}",
        ]
        for node_id in sorted({*s["voters"], *records})
        for c in [records.get(node_id)]
    ]
    lines.append(table(rows, ["COORDINATOR", "VOTER", "RIPPLE", "COMMAND SET"]))
    b = s.get("last_backup")
    if b is None:
        lines.append("last backup: none recorded")
    else:
        taken = datetime.datetime.fromtimestamp(b["created_at_ms"] / 1000, datetime.UTC)
        lines.append(
            f"last backup: applied index {b['applied_index']}, term {b['term']}, taken "
            f"{taken:%Y-%m-%d %H:%M:%S} UTC, cluster {b['cluster_id']}, {b['size_bytes']} bytes"
        )
    lines.append(maintenance_line(s.get("maintenance")))
    lines.append(rescale_line(s.get("rescale")))
    lines += [f"warning: {w}" for w in s.get("warnings", [])]
    return "\n".join(lines)


def _routing_line(c: dict[str, Any]) -> str:
    """The routing generation and every generation's count (a node of an older release
    sends neither: "-")."""
    counts = c.get("routing")
    shown = "-" if counts is None else " -> ".join(map(str, counts))
    generation = c.get("routing_generation", "-")
    return f"routing generation: {generation} (partitions by generation: {shown})"


def render_partitions(s: dict[str, Any]) -> str:
    rows = [
        [
            p["partition"],
            p["owner"],
            p["epoch"],
            p["status"],
            p.get("migration"),
            None if p["checkpoint"] is None else p["checkpoint"]["offset"],
            p.get("lag_records"),
            _rate_cell(p.get("rate_per_s")),
            _failing_cell(p.get("failing")),
            None if not p.get("stuck") else p["stuck"][:80],
        ]
        for p in s["partitions"]
    ]
    header = ["PARTITION", "OWNER", "EPOCH", "STATUS", "MIGRATION", "CKPT_OFFSET", "LAG"]
    return table(rows, [*header, "RATE", "FAILING", "STUCK"])


def _rate_cell(rate_per_s: float | None) -> str | None:
    return None if rate_per_s is None else f"{rate_per_s:.1f}/s"


def _load_cell(w: dict[str, Any]) -> str:
    """The worker's summed rate when the leader knows it, else its partition count."""
    rate = _rate_cell(w.get("rate_per_s"))
    return rate if rate is not None else f"count={w['partitions']}"


def _failing_cell(failing: dict[str, Any] | None) -> str | None:
    """ "3x: <error>" for a partition whose batches keep failing (error cut to fit a row)."""
    return None if not failing else f"{failing['failures']}x: {failing['error'][:60]}"


def render_workers(s: dict[str, Any]) -> str:
    rows = [
        [
            w["worker_id"],
            w["state"],
            w["incarnation"],
            w["partitions"],
            w.get("liveness"),
            _load_cell(w),
            w.get("lag_records"),
            w.get("failing_partitions"),
            _profile_cell(w),
            w["address"],
        ]
        for w in s["workers"]
    ]
    header = ["WORKER", "STATE", "INC", "PARTITIONS", "LIVENESS", "LOAD", "LAG", "FAILING"]
    return table(rows, [*header, "PROFILE", "ADDRESS"])


def _profile_cell(w: dict[str, Any]) -> str:
    """`zone=a,gpu=true/64`: the labels and slots a worker offers recorded pipelines; `-`
    for one that runs `default`'s partitions only."""
    if w.get("slots") is None:
        return "-"
    labels = ",".join(f"{k}={v}" for k, v in sorted((w.get("labels") or {}).items()))
    return f"{labels}/{w['slots']}" if labels else f"/{w['slots']}"


def render_migrations(s: dict[str, Any]) -> str:
    rows = [
        [x["id"], x["partition"], x["source"], x["target"], x["phase"], x["reason"], x.get("note")]
        for x in s["migrations"]
    ]
    return f"in flight: {s['in_flight']}\n" + table(
        rows, ["ID", "PARTITION", "FROM", "TO", "PHASE", "REASON", "NOTE"]
    )


def render_membership(n: dict[str, Any]) -> str:
    """One line: the voters, and the membership change in flight, if any."""
    voters = ", ".join(x["id"] + ("*" if x["leader"] else "") for x in n["nodes"] if x["voter"])
    line = f"voters: {voters}   cluster id: {n['cluster_id']}"
    change = n.get("change")
    if change is not None:
        what = change["node_id"] or change["old_node_id"]
        line += f"   change in flight: {change['kind']} {what} ({change['phase']})"
    elif n.get("membership_pending"):
        line += "   change in flight: a membership entry is not committed yet"
    return line


def render_nodes(n: dict[str, Any]) -> str:
    rows = [
        [
            x["id"],
            "voter" if x["voter"] else "learner",
            "leader" if x["leader"] else "",
            x["raft"],
            x["url"],
            x["match_index"],
            None if x["answering"] is None else ("yes" if x["answering"] else "NO"),
            x["transport_version"],
        ]
        for x in n["nodes"]
    ]
    header = ["ID", "ROLE", "LEADER", "RAFT", "URL", "MATCH", "ANSWERS", "TRANSPORT"]
    lines = [table(rows, header), render_membership(n)]
    last = n.get("last_change")
    if last is not None:
        what = last["node_id"] or last["old_node_id"]
        error = f": {last['error']}" if last.get("error") else ""
        lines.append(f"last change: {last['kind']} {what} {last['phase']}{error}")
    return "\n".join(lines)
