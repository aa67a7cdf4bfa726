"""`ripple maintenance on|off`: the operator's switch for maintenance mode, and the duration
syntax of its `--for` (`90s`, `30m`, `1h30m`, `2d`, or plain seconds).

While maintenance mode is on the leader proposes no automatic balance move; failure recovery
goes on (docs/runbooks/maintenance.md).
"""

from __future__ import annotations

import argparse
import datetime
import re
from typing import Any

from coordinator.client import CoordinatorClient
from shared.errors import RippleError

__all__ = ["maintenance_command", "maintenance_line", "parse_duration_s"]

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration_s(text: str) -> float:
    """`1h30m` -> 5400.0; a bare number is seconds. RippleError (usage) otherwise."""
    spec = text.strip().lower()
    try:
        seconds = float(spec)
    except ValueError:
        parts = _PART.findall(spec)
        if not parts or "".join(n + u for n, u in parts) != spec:
            raise RippleError(
                f"--for wants a duration like 90s, 30m, 1h30m or 2d, got {text!r}",
                code="usage",
                field="for",
            ) from None
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not seconds >= 1:
        raise RippleError("--for must be at least 1s", code="usage", field="for")
    return seconds


def _when(ms: int) -> str:
    return f"{datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC):%Y-%m-%d %H:%M:%S} UTC"


def maintenance_line(record: dict[str, Any] | None) -> str:
    """One line for `ripple status` and for the command's answer."""
    if record is None:
        return "maintenance: off"
    until = record.get("until_ms")
    ends = "until turned off" if until is None else f"ends {_when(until)}"
    return (
        f"maintenance: ON since {_when(record['since_ms'])}, by {record['by']}, {ends} "
        f"(no automatic balance; recovery goes on): {record['reason']}"
    )


async def maintenance_command(args: argparse.Namespace, client: CoordinatorClient) -> int:
    payload: dict[str, Any] = {}
    if args.reason is not None:
        payload["reason"] = args.reason
    if getattr(args, "for_", None) is not None:
        if args.state != "on":
            raise RippleError("--for goes with `on` only", code="usage", field="for")
        payload["for_s"] = parse_duration_s(args.for_)
    elif args.state == "on" and args.reason is None:
        raise RippleError("--reason is required with `on`", code="usage", field="reason")
    body = await client.post(f"/v1/admin/maintenance/{args.state}", payload)
    print(maintenance_line(body["maintenance"]) + ("" if body["changed"] else " (unchanged)"))
    return 0
