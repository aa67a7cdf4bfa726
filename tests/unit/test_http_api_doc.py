"""docs/http-api.md's route table names every route the coordinator serves, and no other:
a route added to a table in `coordinator/service/http/` without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

from coordinator.service.http.app import ROUTES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
ROW = re.compile(r"^\| (GET|POST|PUT|DELETE) \| `([^`?]+)[^`]*` \|", re.MULTILINE)


def documented() -> set[tuple[str, str]]:
    table = PAGE.read_text().split("\n## Routes\n", 1)[1].split("\n## ", 1)[0]
    return {(m.group(1), m.group(2)) for m in ROW.finditer(table)}


def test_the_route_table_is_the_code_s() -> None:
    served = {(r.method, r.path) for r in ROUTES}
    rows = documented()
    assert ("DELETE", "/v1/pipelines/{name}") in rows  # the parse reads past a query
    assert served - rows == set(), "served, with no row in docs/http-api.md"
    assert rows - served == set(), "a row in docs/http-api.md for no route"
