"""`ripple pipelines tokens issue|list|revoke NAME`: the admin's commands for the tokens
scoped to one pipeline, over `/v1/pipelines/{name}/tokens` (docs/security.md, "Pipeline
tokens").

Owns the subcommands' flags and lines. An issue prints the token's text, the one time it is
shown. An operate token's holder passes it where the admin token goes (`--admin-token` or
RIPPLE_ADMIN_TOKEN) to pause, resume or drop that pipeline; a produce token's holder passes
it to `ripple produce --pipeline NAME --token` (or RIPPLE_PIPELINE_TOKEN) to append rows
through a worker, and may do nothing else.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any
from urllib.parse import quote

from ripple.connect import admin_token, client_for
from ripple.tables import table

__all__ = ["add_tokens_parser", "tokens_command"]

ROLES = ("operate", "produce")


async def tokens_command(args: argparse.Namespace) -> int:
    name = quote(args.name, safe="")
    path = f"/v1/pipelines/{name}/tokens"
    async with client_for(args, token=admin_token(args)) as client:
        if args.token_action == "issue":
            body = await client.post(path, {"role": args.role})
            line = (
                f"token {body['token_id']} ({body['role']}) of pipeline {body['pipeline']}; "
                f"shown once, keep it:\n{body['token']}"
            )
        elif args.token_action == "list":
            body = await client.get(path)
            rows = [[t["token_id"], t["role"], t["created_at_ms"], t["by"]] for t in body["tokens"]]
            line = table(rows, ["TOKEN", "ROLE", "CREATED_AT_MS", "BY"])
        else:
            token_id = quote(args.token_id, safe="")
            body = await client.request(
                "DELETE", f"{path}/{token_id}", headers={"Idempotency-Key": uuid.uuid4().hex}
            )
            tail = "revoked" if body["changed"] else "was not there (revoked already?)"
            line = f"token {body['token_id']} of pipeline {body['pipeline']}: {tail}"
    print(json.dumps(body, indent=2, sort_keys=True) if args.json else line)
    return 0


def add_tokens_parser(actions: Any, client_args: Any) -> None:
    """`tokens` under `ripple pipelines`, its three actions each with the client's flags."""
    t = actions.add_parser("tokens", help="admin: tokens scoped to one pipeline")
    sub = t.add_subparsers(dest="token_action", required=True)

    def action(verb: str, help_text: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = sub.add_parser(verb, help=help_text)
        client_args(a)
        a.add_argument("name", metavar="NAME")
        a.add_argument("--admin-token")
        return a

    issue = action("issue", "issue a token (its text is shown once)")
    issue.add_argument(
        "--role",
        choices=ROLES,
        required=True,
        help="operate: pause/resume/drop (and produce); produce: append rows only",
    )
    action("list", "the pipeline's tokens (ids and roles, never a secret)")
    revoke = action("revoke", "revoke a token")
    revoke.add_argument("token_id", metavar="TOKEN_ID")
