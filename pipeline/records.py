"""Records from JSON Lines files: each line's value with its place, and `default`'s records.

Owns the bounds of reading a producer's file. Invariant: a line past JSONL_LINE_BYTES_MAX, a
line that is not JSON or a record of the wrong shape is refused with its "path:line", before
the caller appends anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pipeline.source import SourceInputError, check_record

__all__ = ["JSONL_LINE_BYTES_MAX", "jsonl_values", "load_jsonl"]

JSONL_LINE_BYTES_MAX = 64 * 1024


def jsonl_values(path: str) -> Iterator[tuple[str, Any]]:
    """Each line's JSON value of a JSON Lines file, with where it is ("path:line"); blank
    lines skipped, a line past JSONL_LINE_BYTES_MAX or not JSON refused with its place."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            if len(raw) > JSONL_LINE_BYTES_MAX:
                raise SourceInputError(f"{where}: line longer than {JSONL_LINE_BYTES_MAX} bytes")
            if not raw.strip():
                continue
            try:
                yield where, json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise SourceInputError(f"{where}: not valid JSON: {exc}") from exc


def load_jsonl(path: str) -> Iterator[tuple[str, float]]:
    """Records from a JSON Lines file of ``{"key": str, "value": number}``; blank lines skipped."""
    for where, obj in jsonl_values(path):
        if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
            raise SourceInputError(f'{where}: expected an object with "key" and "value"')
        yield check_record(obj["key"], obj["value"], where)
