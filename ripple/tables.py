"""The tables the `ripple` read commands print: one renderer per answer (status,
partitions, workers, migrations), each taking the JSON body the HTTP API returns. A missing
value prints as "-"; columns are padded to their widest cell.
"""

from __future__ import annotations

import datetime
from typing import Any

__all__ = ["render_migrations", "render_partitions", "render_status", "render_workers", "table"]


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
    lines += [f"warning: {w}" for w in s.get("warnings", [])]
    return "\n".join(lines)


def render_partitions(s: dict[str, Any]) -> str:
    rows = [
        [
            p["partition"],
            p["owner"],
            p["epoch"],
            p["status"],
            p.get("migration"),
            None if p["checkpoint"] is None else p["checkpoint"]["offset"],
            _failing_cell(p.get("failing")),
            None if not p.get("stuck") else p["stuck"][:80],
        ]
        for p in s["partitions"]
    ]
    return table(
        rows,
        ["PARTITION", "OWNER", "EPOCH", "STATUS", "MIGRATION", "CKPT_OFFSET", "FAILING", "STUCK"],
    )


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
            w.get("load"),
            w.get("failing_partitions"),
            w["address"],
        ]
        for w in s["workers"]
    ]
    return table(
        rows, ["WORKER", "STATE", "INC", "PARTITIONS", "LIVENESS", "LOAD", "FAILING", "ADDRESS"]
    )


def render_migrations(s: dict[str, Any]) -> str:
    rows = [
        [x["id"], x["partition"], x["source"], x["target"], x["phase"], x["reason"], x.get("note")]
        for x in s["migrations"]
    ]
    return f"in flight: {s['in_flight']}\n" + table(
        rows, ["ID", "PARTITION", "FROM", "TO", "PHASE", "REASON", "NOTE"]
    )
